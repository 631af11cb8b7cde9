"""Math for imported graphs in every dtype they use: unary functions, min / max, mod, comparisons,
logic, bitwise ops, squared difference, where; log-softmax, hardmax, local response normalization,
einsum, a matmul of any dtype and ONNX's dynamic uint8 quantization.

Each op is numpy's ufunc with ONNX's semantics (integers stay integers, comparisons give bool);
there is no plan step, so a plan runs them as numpy islands. The float32 activations the vision
kernels fuse (relu, sigmoid, clip, ...) live in activation.py; these are the rest.
"""

from __future__ import annotations

import math

import numpy as np

from volvox.ir.graph import expect
from volvox.ops.elementwise import broadcast_shape
from volvox.ops.registry import OpDef, register

FLOATS = ("float32", "float16", "float64")
INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
# products also take bfloat16 (ONNX's ml_dtypes type): summed in float64, rounded once
PRODUCT_DTYPES = FLOATS + ("bfloat16",) + INTS
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _in_float(fn):
    """fn computed in float64 and rounded back to the input's float dtype."""
    return lambda x, p: fn(x.astype(np.float64), p).astype(x.dtype)


def _round_half_even(x, p):
    return np.round(x)


def _elu(x, p):
    alpha = p.get("alpha", 1.0)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _selu(x, p):
    alpha, gamma = p.get("alpha", 1.67326319217681884765625), p.get("gamma", 1.05070102214813232421875)
    return gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _celu(x, p):
    alpha = p.get("alpha", 1.0)
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(np.minimum(x, 0) / alpha))


def _softplus(x, p):
    return np.logaddexp(0, x)


def _mish(x, p):
    return x * np.tanh(np.logaddexp(0, x))


def _gelu_onnx(x, p):
    if p.get("approximate", "none") == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


# name -> (function of (x, params), dtypes it takes); float functions compute in float64.
UNARY_MATH = {
    "abs": (lambda x, p: np.abs(x), FLOATS + INTS),
    "neg": (lambda x, p: np.negative(x), FLOATS + INTS),
    "sign": (lambda x, p: np.sign(x), FLOATS + INTS),
    "exp": (_in_float(lambda x, p: np.exp(x)), FLOATS),
    "log": (_in_float(lambda x, p: np.log(x)), FLOATS),
    "sin": (_in_float(lambda x, p: np.sin(x)), FLOATS),
    "cos": (_in_float(lambda x, p: np.cos(x)), FLOATS),
    "tan": (_in_float(lambda x, p: np.tan(x)), FLOATS),
    "asin": (_in_float(lambda x, p: np.arcsin(x)), FLOATS),
    "acos": (_in_float(lambda x, p: np.arccos(x)), FLOATS),
    "atan": (_in_float(lambda x, p: np.arctan(x)), FLOATS),
    "sinh": (_in_float(lambda x, p: np.sinh(x)), FLOATS),
    "cosh": (_in_float(lambda x, p: np.cosh(x)), FLOATS),
    "asinh": (_in_float(lambda x, p: np.arcsinh(x)), FLOATS),
    "acosh": (_in_float(lambda x, p: np.arccosh(x)), FLOATS),
    "atanh": (_in_float(lambda x, p: np.arctanh(x)), FLOATS),
    "floor": (lambda x, p: np.floor(x), FLOATS),
    "ceil": (lambda x, p: np.ceil(x), FLOATS),
    "round": (_round_half_even, FLOATS),
    "reciprocal": (_in_float(lambda x, p: 1.0 / x), FLOATS),
    "rsqrt": (_in_float(lambda x, p: 1.0 / np.sqrt(x)), FLOATS),
    "square": (lambda x, p: np.square(x), FLOATS + INTS),
    "erf": (_in_float(lambda x, p: _erf(x)), FLOATS),
    "softplus": (_in_float(_softplus), FLOATS),
    "softsign": (_in_float(lambda x, p: x / (1 + np.abs(x))), FLOATS),
    "mish": (_in_float(_mish), FLOATS),
    "elu": (_in_float(_elu), FLOATS),
    "selu": (_in_float(_selu), FLOATS),
    "celu": (_in_float(_celu), FLOATS),
    "gelu_onnx": (_in_float(_gelu_onnx), FLOATS),
    "thresholded_relu": (lambda x, p: np.where(x > p.get("alpha", 1.0), x, 0).astype(x.dtype), FLOATS),
    "shrink": (lambda x, p: np.where(x < -p.get("lambd", 0.5), x + p.get("bias", 0.0),
                                     np.where(x > p.get("lambd", 0.5), x - p.get("bias", 0.0), 0)).astype(x.dtype),
               FLOATS + INTS),
    "logical_not": (lambda x, p: np.logical_not(x), ("bool",)),
    "bitwise_not": (lambda x, p: np.invert(x), INTS),
    "is_nan": (lambda x, p: np.isnan(x), FLOATS),
    "is_inf": (lambda x, p: (np.isposinf(x) & bool(p.get("detect_positive", 1)))
               | (np.isneginf(x) & bool(p.get("detect_negative", 1))), FLOATS),
}
BOOL_RESULT = ("is_nan", "is_inf")


def _mod(a, b, p):
    return np.fmod(a, b) if p.get("fmod", 0) else np.mod(a, b)


def _bit_shift(a, b, p):
    return np.left_shift(a, b) if p.get("direction", "LEFT") == "LEFT" else np.right_shift(a, b)


# name -> (function of (a, b, params), dtypes it takes, result dtype or None for the inputs')
BINARY_MATH = {
    "maximum": (lambda a, b, p: np.maximum(a, b), FLOATS + INTS, None),
    "minimum": (lambda a, b, p: np.minimum(a, b), FLOATS + INTS, None),
    "mod": (_mod, FLOATS + INTS, None),
    "squared_difference": (lambda a, b, p: np.square(a - b), FLOATS + INTS, None),
    "int_div": (lambda a, b, p: np.trunc(a / b).astype(a.dtype), INTS, None),
    "equal": (lambda a, b, p: np.equal(a, b), FLOATS + INTS + ("bool",), "bool"),
    "less": (lambda a, b, p: np.less(a, b), FLOATS + INTS, "bool"),
    "less_equal": (lambda a, b, p: np.less_equal(a, b), FLOATS + INTS, "bool"),
    "greater": (lambda a, b, p: np.greater(a, b), FLOATS + INTS, "bool"),
    "greater_equal": (lambda a, b, p: np.greater_equal(a, b), FLOATS + INTS, "bool"),
    "logical_and": (lambda a, b, p: np.logical_and(a, b), ("bool",), "bool"),
    "logical_or": (lambda a, b, p: np.logical_or(a, b), ("bool",), "bool"),
    "logical_xor": (lambda a, b, p: np.logical_xor(a, b), ("bool",), "bool"),
    "bitwise_and": (lambda a, b, p: np.bitwise_and(a, b), INTS, None),
    "bitwise_or": (lambda a, b, p: np.bitwise_or(a, b), INTS, None),
    "bitwise_xor": (lambda a, b, p: np.bitwise_xor(a, b), INTS, None),
    "bit_shift": (_bit_shift, INTS, None),
    "prelu": (lambda a, b, p: np.where(a < 0, a * b, a).astype(a.dtype), FLOATS + INTS, None),
}


def _unary_rule(name: str, dtypes: tuple):
    def infer(specs, params):
        x = specs["x"]
        expect(x.dtype in dtypes, f"{name} takes {', '.join(dtypes)}, got {x.describe()}")
        return {"y": (x.shape, "bool" if name in BOOL_RESULT else x.dtype)}
    return infer


def _unary_reference(name: str, fn):
    def ref(ctx, p, x):
        return np.asarray(fn(x, p))
    ref.__doc__ = f"{name}(x) with numpy, ONNX semantics."
    return ref


def _binary_rule(name: str, dtypes: tuple, result: str | None):
    def infer(specs, params):
        a, b = specs["a"], specs["b"]
        expect(a.dtype == b.dtype and a.dtype in dtypes,
               f"{name} takes two operands of one of {', '.join(dtypes)}: {a.describe()}, {b.describe()}")
        return {"y": (broadcast_shape(a.shape, b.shape), result or a.dtype)}
    return infer


def _binary_reference(name: str, fn):
    def ref(ctx, p, a, b):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(fn(a, b, p)).astype(a.dtype if name not in _BOOL_BINARY else np.bool_, copy=False)
    ref.__doc__ = f"{name}(a, b) with numpy broadcasting, ONNX semantics."
    return ref


_BOOL_BINARY = {name for name, (_, _, result) in BINARY_MATH.items() if result == "bool"}


def _where_infer(specs, params):
    c, a, b = specs["condition"], specs["a"], specs["b"]
    expect(c.dtype == "bool" and a.dtype == b.dtype, f"where needs a bool condition and operands of one dtype: "
           f"{c.describe()}, {a.describe()}, {b.describe()}")
    return {"y": (broadcast_shape(broadcast_shape(c.shape, a.shape), b.shape), a.dtype)}


def where_ref(ctx, p, condition, a, b):
    """a where condition else b, broadcast."""
    return np.where(condition, a, b)


for _name, (_fn, _dtypes) in UNARY_MATH.items():
    register(OpDef(_name, "math", ("x",), ("y",), _unary_rule(_name, _dtypes), _unary_reference(_name, _fn)))
for _name, (_fn, _dtypes, _result) in BINARY_MATH.items():
    register(OpDef(_name, "math", ("a", "b"), ("y",), _binary_rule(_name, _dtypes, _result), _binary_reference(_name, _fn)))
register(OpDef("where", "math", ("condition", "a", "b"), ("y",), _where_infer, where_ref))


def _axis_infer(specs, params):
    x = specs["x"]
    expect(x.dtype in FLOATS and -len(x.shape) <= int(params.get("axis", -1)) < len(x.shape),
           f"axis {params.get('axis', -1)} of a float tensor, got {x.describe()}")
    return {"y": (x.shape, x.dtype)}


def log_softmax_ref(ctx, p, x):
    """x - max - log(sum(exp(x - max))) over ``axis``, float64."""
    x64 = x.astype(np.float64)
    axis = int(p.get("axis", -1))
    z = x64 - x64.max(axis=axis, keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=axis, keepdims=True))).astype(x.dtype)


def hardmax_ref(ctx, p, x):
    """1 at the first largest value along ``axis``, 0 elsewhere."""
    axis = int(p.get("axis", -1)) % x.ndim
    index = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, index, 1, axis=axis)
    return y


def _matmul_general_infer(specs, params):
    a, b = specs["a"], specs["b"]
    expect(a.dtype == b.dtype and a.dtype in PRODUCT_DTYPES and len(a.shape) >= 1 and len(b.shape) >= 1,
           f"matmul_general needs two tensors of one numeric dtype: {a.describe()}, {b.describe()}")
    ka = a.shape[-1]
    kb = b.shape[0] if len(b.shape) == 1 else b.shape[-2]
    expect(not (isinstance(ka, int) and isinstance(kb, int)) or ka == kb, f"inner dims differ: {a.describe()} @ {b.describe()}")
    rows = a.shape[-2:-1] if len(a.shape) > 1 else ()
    cols = b.shape[-1:] if len(b.shape) > 1 else ()
    return {"y": (broadcast_shape(a.shape[:-2], b.shape[:-2]) + rows + cols, a.dtype)}


def matmul_general_ref(ctx, p, a, b):
    """numpy's matmul (1-D operands as vectors, broadcast batch dims) in any numeric dtype; floats
    accumulate in float64, integers wrap as C integers do."""
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    return np.matmul(a, b)


def _einsum_infer(specs, params):
    operands = [specs[f"x{i}"] for i in range(len(specs))]
    expect(len({s.dtype for s in operands}) == 1 and operands[0].dtype in PRODUCT_DTYPES,
           f"einsum needs operands of one numeric dtype: {', '.join(s.describe() for s in operands)}")
    expect(all(isinstance(d, int) for s in operands for d in s.shape), "einsum needs static shapes")
    dummies = [np.empty(s.shape, np.int8) for s in operands]
    try:
        shape = np.einsum(params["equation"], *dummies).shape
    except ValueError as e:
        expect(False, f"einsum {params['equation']!r} does not fit the operands: {e}")
    return {"y": (tuple(shape), operands[0].dtype)}


def einsum_ref(ctx, p, *xs):
    """numpy's einsum of ``equation`` over the wired operands; floats summed in float64."""
    xs = [x for x in xs if x is not None]
    if xs[0].dtype.kind == "f" or xs[0].dtype.name == "bfloat16":
        return np.asarray(np.einsum(p["equation"], *(x.astype(np.float64) for x in xs))).astype(xs[0].dtype)
    return np.asarray(np.einsum(p["equation"], *xs))


def _det_infer(specs, params):
    x = specs["x"]
    expect(x.dtype in FLOATS and len(x.shape) >= 2 and x.shape[-1] == x.shape[-2],
           f"det needs float (..., M, M) matrices, got {x.describe()}")
    return {"y": (tuple(x.shape[:-2]), x.dtype)}


def det_ref(ctx, p, x):
    """The determinant of each trailing (M, M) matrix (LU in float64)."""
    return np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)


MAX_EINSUM_OPERANDS = 8
register(OpDef("einsum", "math", ("x0",) + tuple(f"x{i}?" for i in range(1, MAX_EINSUM_OPERANDS)), ("y",), _einsum_infer,
               einsum_ref))
register(OpDef("det", "math", ("x",), ("y",), _det_infer, det_ref))
register(OpDef("matmul_general", "math", ("a", "b"), ("y",), _matmul_general_infer, matmul_general_ref))
register(OpDef("log_softmax", "math", ("x",), ("y",), _axis_infer, log_softmax_ref))
register(OpDef("hardmax", "math", ("x",), ("y",), _axis_infer, hardmax_ref))


def _lrn_infer(specs, params):
    x = specs["x"]
    expect(x.dtype in FLOATS and len(x.shape) >= 3, f"lrn needs a float (N, C, ...) tensor, got {x.describe()}")
    return {"y": (x.shape, x.dtype)}


def lrn_ref(ctx, p, x):
    """Local response normalization across channels: x / (bias + alpha / size * sum of x^2 over the
    ``size`` channels around each one) ** beta, float64."""
    size = int(p["size"])
    x64 = x.astype(np.float64)
    square = np.square(x64)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(square, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    window = sum(padded[:, k: k + x.shape[1]] for k in range(size))      # (N, C, ...)
    scale = p.get("bias", 1.0) + p.get("alpha", 1e-4) / size * window
    return (x64 / scale ** p.get("beta", 0.75)).astype(x.dtype)


register(OpDef("lrn", "math", ("x",), ("y",), _lrn_infer, lrn_ref))


def _dynamic_quantize_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "float32", f"dynamic_quantize takes float32, got {x.describe()}")
    return {"y": (x.shape, "uint8"), "scale": ((), "float32"), "zero_point": ((), "uint8")}


def dynamic_quantize_ref(ctx, p, x):
    """ONNX DynamicQuantizeLinear: uint8 with scale (max(x, 0) - min(x, 0)) / 255 and zero point
    round(-min / scale) (round half to even, saturated); (y, scale, zero_point)."""
    lo, hi = np.float32(min(float(x.min(initial=0.0)), 0.0)), np.float32(max(float(x.max(initial=0.0)), 0.0))
    scale = np.float32((hi - lo) / np.float32(255))
    if scale == 0:
        return np.zeros(x.shape, np.uint8), np.array(0, np.float32), np.array(0, np.uint8)
    zero = np.uint8(np.clip(np.round(-lo / scale), 0, 255))
    y = np.clip(np.round(x / scale) + np.float32(zero), 0, 255).astype(np.uint8)
    return y, np.array(scale, np.float32), np.array(zero, np.uint8)


register(OpDef("dynamic_quantize", "math", ("x",), ("y", "scale", "zero_point"), _dynamic_quantize_infer, dynamic_quantize_ref))
