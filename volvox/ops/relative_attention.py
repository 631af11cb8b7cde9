"""Self-attention with T5's relative position bias: scores q.k (unscaled by default) plus a learned
per-head bias chosen by the bucket of the key's position relative to the query's.

The bucket rule is T5's: half the buckets (all, for a causal decoder) count exact distances below
``num_buckets / 2`` (per direction), the rest cover distances up to ``max_distance`` on a log
scale; the bias table (num_buckets, n_heads) is one weight that every layer's node reads (T5
learns it in the first layer only). Keys and values go to the KV cache as the ``attention`` op's
do (ops/attention.py), so a decoder decodes token by token over it.
"""

from __future__ import annotations

import math

import numpy as np

from volvox.ir.graph import expect, same_dim
from volvox.ops.attention import cached_keys_values
from volvox.ops.context import BatchContext
from volvox.ops.registry import OpDef, register


def relative_buckets(relative: np.ndarray, bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
    """T5's bucket of each key-minus-query distance (int array of ``relative``'s shape), with the
    log-scale part in float32 as transformers computes it."""
    buckets = np.zeros(relative.shape, np.int64)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0) * num_buckets
        distance = np.abs(relative)
    else:
        distance = -np.minimum(relative, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):  # distance 0 takes the exact branch
        log_part = (np.log(distance.astype(np.float32) / np.float32(max_exact))
                    / np.float32(math.log(max_distance / max_exact)) * np.float32(num_buckets - max_exact))
    large = max_exact + np.where(distance < max_exact, 0, log_part).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(distance < max_exact, distance, large)


def _relative_attention_infer(specs, params):
    q, k, v, table = specs["q"], specs["k"], specs["v"], specs["table"]
    nh, hd = int(params["n_heads"]), int(params["head_dim"])
    nb, md = int(params["num_buckets"]), int(params["max_distance"])
    expect(nh > 0 and hd > 0 and nb >= 4 and md > nb // 4, f"n_heads {nh}, head_dim {hd}, num_buckets {nb}, "
           f"max_distance {md}: need positive heads, 4+ buckets and max_distance above num_buckets / 4")
    expect(len(q.shape) == 2 and same_dim(q.shape[1], nh * hd), f"q must be (seq, {nh * hd}), got {q.describe()}")
    for t in (k, v):
        expect(len(t.shape) == 2 and same_dim(t.shape[1], nh * hd) and same_dim(t.shape[0], q.shape[0]),
               f"{t.name} must be (seq, {nh * hd}), got {t.describe()}")
    expect(table.shape == (nb, nh), f"table must be ({nb}, {nh}), got {table.describe()}")
    return {"y": (q.shape, "float32")}


def relative_attention_ref(ctx, p, q, k, v, table):
    """softmax(q k^T * scale + bias) v over the KV cache (causal when ``causal``, default true) or,
    without a cache, over the given k, v; bias[h, i, j] = table[bucket(pos_j - pos_i), h]."""
    if isinstance(ctx, BatchContext):
        return ctx.map_rows(lambda c, prm, *a: relative_attention_ref(c, prm, *a, table), p, q, k, v)
    nh, hd = int(p["n_heads"]), int(p["head_dim"])
    seq = q.shape[0]
    start, keys, values = cached_keys_values(ctx, p, k, v, nh, hd)  # (nh, start+seq, hd) each
    total = keys.shape[1]
    q_pos = start + np.arange(seq)[:, None]  # (seq, 1)
    k_pos = np.arange(total)[None, :]  # (1, total)
    buckets = relative_buckets(k_pos - q_pos, bool(p.get("bidirectional", False)), int(p["num_buckets"]),
                               int(p["max_distance"]))  # (seq, total)
    bias = np.asarray(table, np.float32)[buckets].transpose(2, 0, 1)  # (nh, seq, total)
    qh = q.reshape(seq, nh, hd).transpose(1, 0, 2)  # (nh, seq, hd)
    scores = (qh @ keys.transpose(0, 2, 1)) * np.float32(p.get("scale", 1.0)) + bias  # (nh, seq, total)
    if p.get("causal", True):
        scores = np.where(k_pos <= q_pos, scores, np.float32(-np.inf))
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    out = probs @ values  # (nh, seq, hd)
    return np.ascontiguousarray(out.transpose(1, 0, 2)).reshape(seq, nh * hd)


register(OpDef("relative_attention", "attention", ("q", "k", "v", "table"), ("y",), _relative_attention_infer,
               relative_attention_ref, stateful=True))
