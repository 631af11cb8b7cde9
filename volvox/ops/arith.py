"""More arithmetic for imported graphs: sub, div, pow, sqrt, reduce_mean, matmul (two activations)."""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import expect, same_dim
from volvox.ops.registry import OpDef, register
from volvox.ops.elementwise import _binary_infer, _unary_infer, binary_into, broadcast_shape


def sub_ref(ctx, p, a, b):
    """a - b."""
    return a - b


def div_ref(ctx, p, a, b):
    """a / b (float)."""
    return (a.astype(np.float64) / b).astype(a.dtype)


def div_fast(ctx, p, a, b):
    """a / b in the input dtype."""
    return a / b


def pow_ref(ctx, p, a, b):
    """a ** b (float)."""
    return np.power(a.astype(np.float64), b).astype(a.dtype)


def pow_fast(ctx, p, a, b):
    """a ** b; a square when b is the scalar 2."""
    if b.size == 1 and b.ndim <= a.ndim and float(b.reshape(-1)[0]) == 2.0:
        return np.square(a)
    return np.power(a, b)


def sqrt_ref(ctx, p, x):
    """sqrt(x)."""
    return np.sqrt(x)


def _reduce_infer(specs, params):
    x = specs["x"]
    n = len(x.shape)
    axes = sorted({int(a) % n for a in params["axes"]}) if n else []
    expect(all(-n <= int(a) < n for a in params["axes"]), f"axes {params['axes']} out of range for {x.describe()}")
    keep = bool(params.get("keepdims", True))
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    return {"y": (shape, x.dtype)}


def reduce_mean_ref(ctx, p, x):
    """Mean over ``axes`` (keepdims default true), float64 sums."""
    axes = tuple(int(a) for a in p["axes"])
    return x.mean(axis=axes, keepdims=bool(p.get("keepdims", True)), dtype=np.float64).astype(x.dtype)


def reduce_mean_fast(ctx, p, x):
    """Mean over ``axes`` in the input dtype."""
    return x.mean(axis=tuple(int(a) for a in p["axes"]), keepdims=bool(p.get("keepdims", True)))


def _matmul_infer(specs, params):
    a, b = specs["a"], specs["b"]
    expect(a.dtype == b.dtype == "float32" and len(a.shape) >= 2 and len(b.shape) >= 2,
           f"a and b must be float32 matrices (or stacks): {a.describe()}, {b.describe()}")
    expect(same_dim(a.shape[-1], b.shape[-2]), f"inner dims differ: {a.describe()} @ {b.describe()}")
    return {"y": (broadcast_shape(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), "float32")}


def matmul_ref(ctx, p, a, b):
    """Batched a @ b (numpy broadcasting over leading dims), float64."""
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def matmul_fast(ctx, p, a, b):
    """Batched a @ b in float32 (BLAS)."""
    return a @ b


register(OpDef("sub", "elementwise", ("a", "b"), ("y",), _binary_infer, sub_ref, into=binary_into(np.subtract)))
register(OpDef("div", "elementwise", ("a", "b"), ("y",), _binary_infer, div_ref, div_fast))
register(OpDef("pow", "elementwise", ("a", "b"), ("y",), _binary_infer, pow_ref, pow_fast))
register(OpDef("sqrt", "elementwise", ("x",), ("y",), _unary_infer, sqrt_ref))
register(OpDef("reduce_mean", "reduce", ("x",), ("y",), _reduce_infer, reduce_mean_ref, reduce_mean_fast))
register(OpDef("matmul", "matmul", ("a", "b"), ("y",), _matmul_infer, matmul_ref, matmul_fast))
