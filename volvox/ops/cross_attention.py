"""Cross-attention: a decoder's queries over the keys and values of an encoder's output.

Encoder-decoder models (Whisper, T5, BART, Marian) attend from every decoder layer to the encoded
input. Those keys and values depend only on the input, so the encoder graph projects them once
per input (its ``cross_k.{l}`` / ``cross_v.{l}`` outputs) and the decode reads them from the run
context (``SourceContext.cross``) at every step: no decoder step recomputes or copies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from volvox import cpu
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


def _encoded(ctx, p) -> tuple[np.ndarray, np.ndarray]:
    """The encoded input's keys and values for layer ``p["layer"]``, (n_heads, source_len, head_dim) each."""
    layer = int(p.get("layer", 0))
    cross = getattr(ctx, "cross", None)
    if not cross or layer >= len(cross):
        raise UnsupportedError(f"cross_attention layer {layer}: the run has no encoded input for it "
                               "(a decoder graph runs through a seq2seq model's encode)")
    return cross[layer]


def cross_attention_ref(ctx, p, q):
    """softmax(q k^T * scale) v of the new queries (seq, n_heads * head_dim) over every position of the
    encoded input (no mask): k, v are ``ctx.cross[layer]``. A BatchContext runs each sequence's rows
    against its own input."""
    if isinstance(ctx, BatchContext):
        return ctx.map_rows(cross_attention_ref, p, q)
    nh, hd = int(p["n_heads"]), int(p["head_dim"])
    keys, values = _encoded(ctx, p)  # (nh, source_len, hd) each
    seq = q.shape[0]
    qh = q.reshape(seq, nh, hd).transpose(1, 0, 2)  # (nh, seq, hd)
    scores = (qh @ keys.transpose(0, 2, 1)) * np.float32(p.get("scale", hd ** -0.5))  # (nh, seq, source_len)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    out = probs @ values  # (nh, seq, hd)
    return np.ascontiguousarray(out.transpose(1, 0, 2)).reshape(seq, nh * hd)


def cross_attention_fast(ctx, p, q):
    """cross_attention_ref through the CPU attention kernel, not causal: every query row over all the
    encoded input's rows (parallel over heads and rows, O(source_len) memory per thread)."""
    if isinstance(ctx, BatchContext):
        return ctx.map_rows(cross_attention_fast, p, q)
    nh, hd = int(p["n_heads"]), int(p["head_dim"])
    keys, values = _encoded(ctx, p)  # (nh, source_len, hd) each
    if keys.dtype != np.float32 or not keys.flags.c_contiguous or not values.flags.c_contiguous:
        return cross_attention_ref(ctx, p, q)
    return cpu.attention(q, keys, values, 0, nh, float(np.float32(p.get("scale", hd ** -0.5))), causal=False)


register(OpDef("cross_attention", "attention", ("q",), ("y",), _cross_attention_infer, cross_attention_ref,
               cross_attention_fast, stateful=True))
