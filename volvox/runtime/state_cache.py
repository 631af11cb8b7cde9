"""The state cache: the recurrent state of a state-space model's layers (Mamba, Mamba-2), the SSM
counterpart of the KV cache.

Where an attention layer keeps every past key and value, an SSM layer keeps a fixed-size summary
of the past: its causal conv's last ``kernel - 1`` input rows and its scan's hidden state. Both
are overwritten in place by every run (the ops in ops/ssm.py), so the cache never grows with the
context and a decode step allocates nothing.

A model declares the shapes its layers need (``StateShape``, carried in ``metadata["state"]``);
a session makes one cache from it, beside a KV cache when the model also has attention layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.errors import BlueprintError, GenerationError


@dataclass(frozen=True)
class StateShape:
    """Per-layer state shapes of a model's SSM layers (``metadata["state"]``)."""

    n_layers: int        # SSM layers (the ``layer`` param of their ops counts these)
    conv: tuple          # (kernel - 1, conv channels): the causal conv's last input rows
    ssm: tuple           # Mamba (d_inner, state_size); Mamba-2 (n_heads, head_dim, state_size)

    def to_metadata(self) -> dict:
        """The JSON form stored in ``metadata["state"]``."""
        return {"n_layers": self.n_layers, "conv": list(self.conv), "ssm": list(self.ssm)}

    @classmethod
    def from_metadata(cls, md, where: str) -> "StateShape":
        """Parse ``metadata["state"]``; BlueprintError naming the field at fault."""
        if not isinstance(md, dict) or set(md) != {"n_layers", "conv", "ssm"}:
            raise BlueprintError(f"{where}: metadata.state must be an object with exactly n_layers, conv, ssm")
        n = md["n_layers"]
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise BlueprintError(f"{where}: metadata.state.n_layers must be a positive integer, got {n!r}")
        for key, rank in (("conv", (2,)), ("ssm", (2, 3))):
            dims = md[key]
            if (not isinstance(dims, (list, tuple)) or len(dims) not in rank
                    or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims)):
                raise BlueprintError(f"{where}: metadata.state.{key} must be a list of {rank} sizes, got {dims!r}")
        return cls(n, tuple(md["conv"]), tuple(md["ssm"]))


class StateCache:
    """Conv and scan states of every SSM layer, float32, zero at the start of a sequence."""

    def __init__(self, shape: StateShape):
        self.shape = shape
        self.conv = np.zeros((shape.n_layers,) + tuple(shape.conv), np.float32)  # (layer, kernel-1, channels)
        self.ssm = np.zeros((shape.n_layers,) + tuple(shape.ssm), np.float32)    # (layer, *scan state)

    def layer(self, kind: str, layer: int) -> np.ndarray:
        """The writable ``kind`` ("conv" or "ssm") state of SSM layer ``layer``."""
        arrays = {"conv": self.conv, "ssm": self.ssm}[kind]
        if not 0 <= layer < len(arrays):
            raise GenerationError(f"state cache has {len(arrays)} SSM layers, an op asked for layer {layer}")
        return arrays[layer]
