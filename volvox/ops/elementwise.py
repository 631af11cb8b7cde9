"""Elementwise ops with numpy broadcasting: add, mul, silu, gelu."""

from __future__ import annotations

import math

import numpy as np

from volvox import cpu
from volvox.errors import ShapeError
from volvox.ir.graph import expect, same_dim
from volvox.ops.registry import OpDef, register
from volvox.ops.gpu import binary_lowering, unary_lowering


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """numpy broadcasting over possibly-symbolic dims; ShapeError when incompatible."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da == 1:
            out.append(db)
        elif db == 1:
            out.append(da)
        else:
            expect(same_dim(da, db), f"shapes {a} and {b} do not broadcast")
            out.append(da if isinstance(da, int) else db)
    return tuple(reversed(out))


def _binary_infer(specs, params):
    a, b = specs["a"], specs["b"]
    expect(a.dtype == b.dtype, f"dtypes differ: {a.describe()} vs {b.describe()}")
    return {"y": (broadcast_shape(a.shape, b.shape), a.dtype)}


def _unary_infer(specs, params):
    return {"y": (specs["x"].shape, specs["x"].dtype)}


def add_ref(ctx, p, a, b):
    """a + b."""
    return a + b


def mul_ref(ctx, p, a, b):
    """a * b."""
    return a * b


def binary_into(ufunc):
    """into(ctx, p, out, a, b) of a broadcasting ufunc (ShapeError unless ``out`` has the broadcast shape)."""
    def into(ctx, p, out, a, b):
        if out.shape != a.shape and out.shape != b.shape and out.shape != np.broadcast_shapes(a.shape, b.shape):
            raise ShapeError(f"output buffer {out.shape} is not the broadcast of {a.shape} and {b.shape}")
        return ufunc(a, b, out=out)
    return into


def silu_ref(ctx, p, x):
    """x * sigmoid(x)."""
    return x * (0.5 * (1.0 + np.tanh(0.5 * x))).astype(x.dtype)  # sigmoid without exp overflow


def silu_fast(ctx, p, x):
    """SiLU through the CPU kernel (the arithmetic of the fused swiglu, so fusing changes no bits)."""
    return cpu.silu(x) if x.dtype == np.float32 else silu_ref(ctx, p, x)


def silu_into(ctx, p, out, x):
    """silu_fast written into ``out``."""
    if x.dtype != np.float32:
        np.copyto(out, silu_ref(ctx, p, x))
        return out
    return cpu.silu(x, out=out)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_ref(ctx, p, x):
    """GELU, exact (erf) or tanh approximation (params: approximate='none'|'tanh')."""
    x64 = x.astype(np.float64)
    if p.get("approximate", "none") == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    else:
        y = 0.5 * x64 * (1.0 + _erf(x64 / math.sqrt(2.0)))
    return y.astype(x.dtype)


register(OpDef("add", "elementwise", ("a", "b"), ("y",), _binary_infer, add_ref, into=binary_into(np.add),
               gpu=binary_lowering("add")))
register(OpDef("mul", "elementwise", ("a", "b"), ("y",), _binary_infer, mul_ref, into=binary_into(np.multiply),
               gpu=binary_lowering("mul")))
register(OpDef("silu", "activation", ("x",), ("y",), _unary_infer, silu_ref, silu_fast, into=silu_into,
               gpu=unary_lowering("silu")))
def gelu_fast(ctx, p, x):
    """GELU through the CPU kernel (float32; exact through erfc, or the tanh form)."""
    if x.dtype != np.float32:
        return gelu_ref(ctx, p, x)
    return cpu.gelu(x, p.get("approximate", "none"))


def gelu_into(ctx, p, out, x):
    """gelu_fast written into ``out``."""
    if x.dtype != np.float32:
        np.copyto(out, gelu_ref(ctx, p, x))
        return out
    return cpu.gelu(x, p.get("approximate", "none"), out=out)


register(OpDef("gelu", "activation", ("x",), ("y",), _unary_infer, gelu_ref, gelu_fast, into=gelu_into,
               gpu=unary_lowering("gelu")))
