"""Activations for vision graphs: relu, clip, sigmoid, hard_sigmoid, hard_swish, softmax.

References compute in float64; numpy float32 is the fast path where it differs.
"""

from __future__ import annotations

import numpy as np

from ..graph import expect
from . import OpDef, register
from .elementwise import _unary_infer


def _float_unary_infer(specs, params):
    expect(specs["x"].dtype == "float32", f"x must be float32, got {specs['x'].describe()}")
    return _unary_infer(specs, params)


def relu_ref(ctx, p, x):
    """max(x, 0)."""
    return np.maximum(x, np.float32(0))


def clip_ref(ctx, p, x):
    """min(max(x, lo), hi) (params: min, max; either may be absent)."""
    lo, hi = p.get("min"), p.get("max")
    return np.clip(x, -np.inf if lo is None else lo, np.inf if hi is None else hi).astype(np.float32)


def sigmoid_ref(ctx, p, x):
    """1 / (1 + exp(-x)) in float64."""
    return (0.5 * (1.0 + np.tanh(0.5 * x.astype(np.float64)))).astype(np.float32)


def sigmoid_fast(ctx, p, x):
    """1 / (1 + exp(-x)) in float32 (tanh form: no overflow)."""
    return np.float32(0.5) * (np.float32(1) + np.tanh(np.float32(0.5) * x))


def hard_sigmoid_ref(ctx, p, x):
    """clip(alpha * x + beta, 0, 1) (ONNX defaults alpha=0.2, beta=0.5)."""
    y = p.get("alpha", 0.2) * x.astype(np.float64) + p.get("beta", 0.5)
    return np.clip(y, 0.0, 1.0).astype(np.float32)


def hard_sigmoid_fast(ctx, p, x):
    """clip(alpha * x + beta, 0, 1) in float32."""
    y = np.float32(p.get("alpha", 0.2)) * x + np.float32(p.get("beta", 0.5))
    return np.clip(y, 0, 1, out=y)


def hard_swish_ref(ctx, p, x):
    """x * relu6(x + 3) / 6."""
    x64 = x.astype(np.float64)
    return (x64 * np.clip(x64 + 3.0, 0.0, 6.0) / 6.0).astype(np.float32)


def _softmax_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "float32" and len(x.shape) >= 1, f"x must be float32, got {x.describe()}")
    axis = int(params.get("axis", -1))
    expect(-len(x.shape) <= axis < len(x.shape), f"axis {axis} out of range for {x.describe()}")
    return {"y": (x.shape, "float32")}


def softmax_ref(ctx, p, x):
    """exp(beta * (x - max)) / sum over ``axis`` (default -1), float64."""
    axis = int(p.get("axis", -1))
    z = p.get("beta", 1.0) * x.astype(np.float64)
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


def softmax_fast(ctx, p, x):
    """softmax in float32."""
    axis = int(p.get("axis", -1))
    z = x * np.float32(p.get("beta", 1.0)) if p.get("beta", 1.0) != 1.0 else x
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    e /= e.sum(axis=axis, keepdims=True)
    return e


register(OpDef("relu", "activation", ("x",), ("y",), _float_unary_infer, relu_ref))
register(OpDef("clip", "activation", ("x",), ("y",), _float_unary_infer, clip_ref))
register(OpDef("sigmoid", "activation", ("x",), ("y",), _float_unary_infer, sigmoid_ref, sigmoid_fast))
register(OpDef("hard_sigmoid", "activation", ("x",), ("y",), _float_unary_infer, hard_sigmoid_ref, hard_sigmoid_fast))
register(OpDef("hard_swish", "activation", ("x",), ("y",), _float_unary_infer, hard_swish_ref))
register(OpDef("softmax", "activation", ("x",), ("y",), _softmax_infer, softmax_ref, softmax_fast))
