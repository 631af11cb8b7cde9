"""Ops the graph compiler emits when it fuses nodes (volvox/compile/): swiglu, linear_split."""

from __future__ import annotations

import numpy as np

from .. import kernels
from ..graph import expect, same_dim
from . import OpDef, register
from .linear import linear_fast, linear_ref

MAX_SPLIT = 4  # outputs of one linear_split node


def _swiglu_infer(specs, params):
    x = specs["x"]
    f = x.shape[-1]
    expect(x.dtype == "float32" and (not isinstance(f, int) or f % 2 == 0),
           f"x must be float32 with an even last dim [gate | up], got {x.describe()}")
    return {"y": (x.shape[:-1] + ((f // 2) if isinstance(f, int) else f"{f}/2",), "float32")}


def swiglu_ref(ctx, p, x):
    """silu(gate) * up for x = [gate | up] along the last axis."""
    half = x.shape[-1] // 2
    gate, up = x[..., :half], x[..., half:]
    return (gate * (0.5 * (1.0 + np.tanh(0.5 * gate))) * up).astype(np.float32)


def swiglu_fast(ctx, p, x):
    """silu(gate) * up through the CPU kernel (ggml's vectorised expf on x86)."""
    y = kernels.swiglu(x.reshape(-1, x.shape[-1]))
    return y.reshape(x.shape[:-1] + (y.shape[-1],))


def _linear_split_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    sizes = [int(n) for n in params["sizes"]]
    expect(2 <= len(sizes) <= MAX_SPLIT and all(n > 0 for n in sizes), f"sizes must be 2..{MAX_SPLIT} positive ints, got {sizes}")
    expect(len(w.shape) == 2 and same_dim(w.shape[0], sum(sizes)) and same_dim(x.shape[-1], w.shape[1]),
           f"weight must be (sum(sizes)={sum(sizes)}, in_features), got {w.describe()} for {x.describe()}")
    return {f"y{i}": (x.shape[:-1] + (n,), "float32") for i, n in enumerate(sizes)}


def _split(y, sizes):
    out, start = [], 0
    for n in sizes:
        out.append(y[..., start:start + n])
        start += n
    return tuple(out)


def linear_split_ref(ctx, p, x, weight):
    """x @ weight.T split into column blocks of ``sizes`` (sibling linears merged into one)."""
    return _split(linear_ref(ctx, p, x, weight), p["sizes"])


def linear_split_fast(ctx, p, x, weight):
    """One kernel call, then views of its column blocks."""
    return _split(linear_fast(ctx, p, x, weight), p["sizes"])


register(OpDef("linear_split", "matmul", ("x", "weight"), tuple(f"y{i}" if i < 2 else f"y{i}?" for i in range(MAX_SPLIT)),
               _linear_split_infer, linear_split_ref, linear_split_fast))
register(OpDef("swiglu", "activation", ("x",), ("y",), _swiglu_infer, swiglu_ref, swiglu_fast))
