"""token_pool: a sentence embedding from a text's token states, as sentence-transformers' Pooling does.

Modes (concatenated in the order given): ``cls`` (the first token), ``max``, ``mean``,
``mean_sqrt_len`` (the sum over sqrt(count)), ``weighted_mean`` (token i weighted by i + 1) and
``last`` (the last token). The optional ``skip`` input leaves the first ``skip[0]`` tokens out of
every mode but ``cls`` (a prompt that should not shape the embedding).
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import expect
from volvox.ops.registry import OpDef, register

TOKEN_POOL_MODES = ("cls", "max", "mean", "mean_sqrt_len", "weighted_mean", "last")


def _token_pool_infer(specs, params):
    x, modes = specs["x"], params["modes"]
    expect(x.dtype == "float32" and len(x.shape) == 2, f"x must be float32 (seq, dim), got {x.describe()}")
    expect(isinstance(modes, (list, tuple)) and modes and all(m in TOKEN_POOL_MODES for m in modes),
           f"modes must be a non-empty list of {TOKEN_POOL_MODES}, got {modes!r}")
    if "skip" in specs:
        s = specs["skip"]
        expect(s.dtype == "int32" and s.shape == (1,), f"skip must be int32[1], got {s.describe()}")
    expect(isinstance(x.shape[1], int), f"x's width must be fixed, got {x.describe()}")
    return {"y": ((1, x.shape[1] * len(modes)), "float32")}


def token_pool_ref(ctx, p, x, skip=None):
    """(1, dim * len(modes)): each mode's pooling of the kept rows of ``x`` (seq, dim), float64 sums."""
    first = 0 if skip is None else int(skip[0])
    if not 0 <= first < x.shape[0]:
        raise ValueError(f"token_pool: skip {first} leaves none of {x.shape[0]} tokens")
    kept = x[first:].astype(np.float64)  # (seq - skip, dim)
    n = kept.shape[0]
    pooled = {
        "cls": lambda: x[0].astype(np.float64),
        "max": lambda: kept.max(axis=0),
        "mean": lambda: kept.sum(axis=0) / n,
        "mean_sqrt_len": lambda: kept.sum(axis=0) / np.sqrt(n),
        "weighted_mean": lambda: (np.arange(first + 1, first + n + 1, dtype=np.float64) @ kept)
        / np.arange(first + 1, first + n + 1, dtype=np.float64).sum(),
        "last": lambda: kept[-1],
    }
    return np.concatenate([pooled[m]() for m in p["modes"]])[None].astype(np.float32)


register(OpDef("token_pool", "reduce", ("x", "skip?"), ("y",), _token_pool_infer, token_pool_ref))
