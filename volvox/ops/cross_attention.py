"""Cross-attention: a decoder's queries over the keys and values of an encoder's output.

Encoder-decoder models (Whisper, T5, BART, Marian) attend from every decoder layer to the encoded
input. Those keys and values depend only on the input, so the encoder graph projects them once
per input (its ``cross_k.{l}`` / ``cross_v.{l}`` outputs) and the decode reads them from the run
context (``SourceContext.cross``) at every step: no decoder step recomputes or copies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from volvox.errors import UnsupportedError
from volvox.ir.graph import expect, same_dim
from volvox.ops.context import BatchContext, RunContext
from volvox.ops.registry import OpDef, register


@dataclass
class SourceContext(RunContext):
    """A decoder's run context: its self-attention KV cache (RunContext) and, per decoder layer, the
    encoded input's keys and values, each (n_heads, source_len, head_dim) float32."""

    cross: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def _cross_attention_infer(specs, params):
    q = specs["q"]
    nh, hd = int(params["n_heads"]), int(params["head_dim"])
    expect(nh > 0 and hd > 0, f"n_heads {nh} and head_dim {hd} must be positive")
    expect(len(q.shape) == 2 and same_dim(q.shape[1], nh * hd), f"q must be (seq, {nh * hd}), got {q.describe()}")
    expect(int(params.get("layer", 0)) >= 0, f"layer must be >= 0, got {params.get('layer')}")
    return {"y": (q.shape, "float32")}


def cross_attention_ref(ctx, p, q):
    """softmax(q k^T * scale) v of the new queries (seq, n_heads * head_dim) over every position of the
    encoded input (no mask): k, v are ``ctx.cross[layer]``. A BatchContext runs each sequence's rows
    against its own input."""
    if isinstance(ctx, BatchContext):
        return ctx.map_rows(cross_attention_ref, p, q)
    nh, hd, layer = int(p["n_heads"]), int(p["head_dim"]), int(p.get("layer", 0))
    cross = getattr(ctx, "cross", None)
    if not cross or layer >= len(cross):
        raise UnsupportedError(f"cross_attention layer {layer}: the run has no encoded input for it "
                               "(a decoder graph runs through a seq2seq model's encode)")
    keys, values = cross[layer]  # (nh, source_len, hd) each
    seq = q.shape[0]
    qh = q.reshape(seq, nh, hd).transpose(1, 0, 2)  # (nh, seq, hd)
    scores = (qh @ keys.transpose(0, 2, 1)) * np.float32(p.get("scale", hd ** -0.5))  # (nh, seq, source_len)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    out = probs @ values  # (nh, seq, hd)
    return np.ascontiguousarray(out.transpose(1, 0, 2)).reshape(seq, nh * hd)


register(OpDef("cross_attention", "attention", ("q",), ("y",), _cross_attention_infer, cross_attention_ref,
               stateful=True))
