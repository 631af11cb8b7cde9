"""The int8 island, bit-exact to TFLite's builtin cpu.

Tensors are int8 with an affine (scale, zero_point); weights are symmetric int8
with per-output-channel scales and int32 biases. Accumulation is exact integer
arithmetic; requantization uses TFLite's ``MultiplyByQuantizedMultiplier``
(saturating rounding doubling high multiply, then rounding right shift), with the
(int32 multiplier, shift) pairs the importer computes once per output channel
with :func:`quantize_multiplier`.

The fast conv is volvox.cpu.qconv2d (int32 accumulation, VNNI on avx512) for
dense and depthwise convs; other grouped convs run the float kernels of
``ops/conv.py`` in float64 on zero-point-shifted int8 values: every product fits
in 17 bits and every sum of up to 2**36 of them is an exact float64 integer, so
the result equals the int64 reference bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from volvox import cpu
from volvox.ir.graph import expect, same_dim
from volvox.ops.registry import OpDef, register
from volvox.ops.conv import (CONV_PIXELS, conv_cpu, conv_direct, conv_fast, conv_infer_shape, conv_kernel_args, native_conv,
                             plan_blocks, plan_fold_zero_point, plan_requant, window_params)
from volvox.ops.pool import plan_window, pool_out_shape, pool_taps, valid_counts

INT8_MIN, INT8_MAX = -128, 127


def tflite_round(x: np.ndarray) -> np.ndarray:
    """std::round of float32/64 values: halves away from zero (numpy's rint rounds them to even).

    Widening float32 to float64 is exact, and so is |x| + 0.5 for |x| < 2**28."""
    x = np.asarray(x, np.float64)
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real = m * 2**(shift - 31) with m an int32 in [2**30, 2**31)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    m = int(math.floor(q * (1 << 31) + 0.5))
    if m == 1 << 31:
        m //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return m, shift


def multiply_by_quantized_multiplier(x: np.ndarray, m: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier over int64 arrays holding int32 values (broadcasting)."""
    x, m, shift = (np.asarray(v, np.int64) for v in (x, m, shift))
    a = x << np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    ab = a * m                                         # SaturatingRoundingDoublingHighMul
    ab += np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(ab >= 0, ab >> 31, -((-ab) >> 31))  # C division by 2**31 truncates toward zero
    mask = (np.int64(1) << right) - 1                   # RoundingDivideByPOT
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + ((high & mask) > threshold)


def multiply_by_quantized_multiplier_single_round(x: np.ndarray, m: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """TFLite's single-rounding MultiplyByQuantizedMultiplier (its reference FULLY_CONNECTED):
    (x * m + 2^(30 - shift)) >> (31 - shift), over int64 arrays holding int32 values."""
    x, m, shift = (np.asarray(v, np.int64) for v in (x, m, shift))
    total = 31 - shift
    return (x * m + (np.int64(1) << (total - 1))) >> total


def requantize(acc: np.ndarray, bias, m, shift, p: dict) -> np.ndarray:
    """int64 accumulators (+ int32 bias) -> int8 output: rescale (``rounding`` "double", the default,
    or "single"), add the zero point, clamp."""
    if bias is not None:
        acc = acc + bias
    rescale = multiply_by_quantized_multiplier_single_round if p.get("rounding") == "single" else \
        multiply_by_quantized_multiplier
    y = rescale(acc, m, shift) + int(p["output_zero_point"])
    return np.clip(y, int(p.get("act_min", INT8_MIN)), int(p.get("act_max", INT8_MAX))).astype(np.int8)


def _check_requant(specs, n_out) -> None:
    for port in ("multiplier", "shift"):
        s = specs[port]
        expect(s.dtype == "int32" and len(s.shape) == 1 and s.shape[0] in (1, n_out),
               f"{port} must be int32[{n_out}] (or [1]), got {s.describe()}")
    if "bias" in specs:
        b = specs["bias"]
        expect(b.dtype == "int32" and b.shape == (n_out,), f"bias must be int32[{n_out}], got {b.describe()}")


# ----------------------------------------------------------------------------- quantize / dequantize
def _quantize_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "float32", f"x must be float32, got {x.describe()}")
    expect(float(params["scale"]) > 0, f"scale must be positive, got {params['scale']}")
    return {"y": (x.shape, "int8")}


def quantize_ref(ctx, p, x):
    """int8(round(x / scale) + zero_point), float32 division, halves away from zero, saturated."""
    q = tflite_round(x / np.float32(p["scale"])).astype(np.int64) + int(p["zero_point"])
    return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def quantize_fast(ctx, p, x):
    """quantize through the C kernel (the same arithmetic as quantize_ref)."""
    return cpu.quantize_i8(x, float(np.float32(p["scale"])), int(p["zero_point"]))


def _dequantize_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int8", f"x must be int8, got {x.describe()}")
    return {"y": (x.shape, "float32")}


def dequantize_ref(ctx, p, x):
    """float32(scale * (q - zero_point))."""
    return (np.float32(p["scale"]) * (x.astype(np.float32) - np.float32(p["zero_point"]))).astype(np.float32)


def dequantize_fast(ctx, p, x):
    """dequantize through the C kernel (the same float32 arithmetic as dequantize_ref)."""
    return cpu.dequantize_i8(x, float(np.float32(p["scale"])), int(p["zero_point"]))


# ----------------------------------------------------------------------------- conv / fully connected
def _qconv_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    expect(x.dtype == "int8" and w.dtype == "int8", f"x and weight must be int8: {x.describe()}, {w.describe()}")
    _check_requant(specs, w.shape[0])
    return {"y": (conv_infer_shape(x, w, params), "int8")}


def qconv2d_ref(ctx, p, x, weight, bias, multiplier, shift):
    """int8 NHWC conv: int64 tap-by-tap accumulation of (x - zp_in) * w, then requantize."""
    xs = x.astype(np.int64) - int(p["input_zero_point"])
    return requantize(conv_direct(xs, weight, p, np.int64), bias, multiplier, shift, p)


def qconv2d_fast(ctx, p, x, weight, bias, multiplier, shift):
    """int8 NHWC conv: volvox.cpu.qconv2d (dense / depthwise), else exact float64
    im2col/BLAS per group, then requantize."""
    if native_conv(x, weight, p):
        return cpu.qconv2d(x, weight, bias, multiplier, shift, int(p["input_zero_point"]),
                               int(p["output_zero_point"]), int(p.get("act_min", INT8_MIN)),
                               int(p.get("act_max", INT8_MAX)), **conv_kernel_args(p))
    xs = x.astype(np.float64) - int(p["input_zero_point"])
    acc = conv_fast(xs, weight, p, np.float64).astype(np.int64)
    return requantize(acc, bias, multiplier, shift, p)


def _qlinear_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    expect(x.dtype == "int8" and w.dtype == "int8" and len(w.shape) == 2,
           f"x must be int8 and weight a 2-D int8 matrix: {x.describe()}, {w.describe()}")
    expect(same_dim(x.shape[-1], w.shape[1]), f"x's last dim must equal weight's in_features: {x.describe()} vs {w.describe()}")
    _check_requant(specs, w.shape[0])
    return {"y": (x.shape[:-1] + (w.shape[0],), "int8")}


def qlinear_ref(ctx, p, x, weight, bias, multiplier, shift):
    """int8 fully connected: int64 (x - zp_in) @ w.T, then requantize (``rounding`` "single" as TFLite's
    reference FULLY_CONNECTED, else double as its convolutions)."""
    acc = (x.astype(np.int64) - int(p["input_zero_point"])) @ weight.astype(np.int64).T
    return requantize(acc, bias, multiplier, shift, p)


def qlinear_fast(ctx, p, x, weight, bias, multiplier, shift):
    """int8 fully connected via an exact float64 BLAS matmul, then requantize."""
    acc = (x.astype(np.float64) - int(p["input_zero_point"])) @ weight.astype(np.float64).T
    return requantize(acc.astype(np.int64), bias, multiplier, shift, p)


# ----------------------------------------------------------------------------- pooling / softmax
def _qpool_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int8", f"x must be int8, got {x.describe()}")
    return {"y": (pool_out_shape(x, params), "int8")}


def qavg_pool2d_ref(ctx, p, x):
    """int8 average pool (same scale in and out): integer sum over in-image pixels, divided
    rounding half away from zero (C division), clamped."""
    acc = pool_taps(x.astype(np.int64), p, 0, np.add)     # (N, OH, OW, C)
    count = valid_counts(x.shape, p).astype(np.int64)      # (OH, OW, 1)
    half = count // 2
    q = np.where(acc > 0, (acc + half) // count, -((-acc + half) // count))
    return np.clip(q, int(p.get("act_min", INT8_MIN)), int(p.get("act_max", INT8_MAX))).astype(np.int8)


def qavg_pool2d_fast(ctx, p, x):
    """qavg_pool2d through the C kernel (the same integer arithmetic as the reference)."""
    _, _, pads = window_params(p)
    return cpu.qavg_pool2d(x, p["kernel"], p.get("strides", (1, 1)), pads, int(p.get("act_min", INT8_MIN)),
                               int(p.get("act_max", INT8_MAX)))


def _qsoftmax_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int8", f"x must be int8, got {x.describe()}")
    return {"y": (x.shape, "int8")}


def qsoftmax_table(p: dict) -> np.ndarray:
    """The float32 exp table of an int8 softmax: exp(-input_scale * beta * d) for d = 0..255, (256,)."""
    scale = np.float32(-np.float32(p["input_scale"]) * np.float32(p.get("beta", 1.0)))
    return np.exp((scale * np.arange(256, dtype=np.float32)).astype(np.float64)).astype(np.float32)


def qsoftmax_ref(ctx, p, x):
    """TFLite's int8 softmax over the last axis: a float32 exp table of (x - max), float32
    normalisation, round half away from zero, + output zero point."""
    table = qsoftmax_table(p)                                                                           # (256,)
    diff = x.astype(np.int64).max(axis=-1, keepdims=True) - x.astype(np.int64)                       # (..., n) in [0, 255]
    e = table[diff]                                                                                     # (..., n) float32
    sum_exp = np.cumsum(e, axis=-1, dtype=np.float32)[..., -1:]                                        # sequential, as C
    inv = np.float32(1.0) / (sum_exp * np.float32(p["output_scale"]))
    q = tflite_round(e * inv).astype(np.int64) + int(p["output_zero_point"])
    return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def qsoftmax_fast(ctx, p, x):
    """qsoftmax through the C kernel, with the reference's exp table."""
    return cpu.qsoftmax(x, qsoftmax_table(p), float(np.float32(p["output_scale"])), int(p["output_zero_point"]))


# ------------------------------------------------------------------- CPU plan lowering
def quantize_cpu(plan, node) -> None:
    """quantize / dequantize as one elementwise step."""
    p, x, y = node.params, plan.input(node, "x"), plan.output(node)
    plan.need(node, -128 <= int(p["zero_point"]) <= 127 and float(p["scale"]) > 0, "zero point / scale")
    plan.add("quantize_i8" if node.op == "quantize" else "dequantize_i8", x=cpu.address(x), y=cpu.address(y),
             count=x.size, scale=float(np.float32(p["scale"])), zero_point=int(p["zero_point"]))


def qlinear_cpu(plan, node) -> None:
    """int8 fully connected as a 1x1 qconv over (M, 1, 1, K) (exact integers, as qlinear's fast path);
    single rounding (TFLite's FULLY_CONNECTED) runs its numpy path as an island."""
    if node.params.get("rounding") == "single":
        return plan.island(node)
    x, w, y = plan.input(node, "x"), plan.input(node, "weight"), plan.output(node)
    plan.need(node, w.ndim == 2 and x.shape[-1] == w.shape[1] and w.dtype == np.int8, "weight shape")
    n, k = w.shape
    m = x.size // k
    w4 = w.reshape(n, 1, 1, k)
    bias = plan.optional(node, "bias")
    plan.need(node, bias is None or (bias.dtype == np.int32 and bias.shape == (n,)), "bias")
    requant = plan_requant(plan, node, n, bias)
    packed, wsum = plan.packed(node.inputs["weight"], False, lambda: cpu.conv_weights(w4, False))
    plan.macs += m * n * k
    k4 = (k + 3) // 4 * 4
    scratch = plan.scratch(CONV_PIXELS * k4, np.uint8)  # (split, CONV_PIXELS * k4) im2col rows
    plan.keep(w4, bias, packed, wsum)
    window = dict(window=(m, 1, 1, k, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0), cout=n, requant=requant)
    wsum = plan_fold_zero_point(plan, window, bias, wsum, requant[3])
    plan.add("qconv", x=cpu.address(x), w=cpu.address(packed), wsum=cpu.address(wsum), y=cpu.address(y),
             scratch=cpu.address(scratch), ldc=k4, per_thread=CONV_PIXELS * k4, **plan_blocks(plan, m, n), **window)


def qavg_pool2d_cpu(plan, node) -> None:
    p, x, y = node.params, plan.input(node, "x"), plan.output(node)
    plan.add("qavg_pool", x=cpu.address(x), y=cpu.address(y), window=plan_window(node, x, y),
             lo=int(p.get("act_min", INT8_MIN)), hi=int(p.get("act_max", INT8_MAX)))


def qsoftmax_cpu(plan, node) -> None:
    p, x, y = node.params, plan.input(node, "x"), plan.output(node)
    table = qsoftmax_table(p)  # (256,)
    plan.keep(table)
    plan.add("qsoftmax", x=cpu.address(x), table=cpu.address(table), y=cpu.address(y), rows=x.size // x.shape[-1],
             n=x.shape[-1], zp_out=int(p["output_zero_point"]), out_scale=float(np.float32(p["output_scale"])))


register(OpDef("quantize", "quantized", ("x",), ("y",), _quantize_infer, quantize_ref, quantize_fast, cpu=quantize_cpu))
register(OpDef("dequantize", "quantized", ("x",), ("y",), _dequantize_infer, dequantize_ref, dequantize_fast,
               cpu=quantize_cpu))
register(OpDef("qconv2d", "quantized", ("x", "weight", "bias?", "multiplier", "shift"), ("y",),
               _qconv_infer, qconv2d_ref, qconv2d_fast, cpu=conv_cpu))
register(OpDef("qlinear", "quantized", ("x", "weight", "bias?", "multiplier", "shift"), ("y",),
               _qlinear_infer, qlinear_ref, qlinear_fast, cpu=qlinear_cpu))
register(OpDef("qavg_pool2d", "quantized", ("x",), ("y",), _qpool_infer, qavg_pool2d_ref, qavg_pool2d_fast,
               cpu=qavg_pool2d_cpu))
register(OpDef("qsoftmax", "quantized", ("x",), ("y",), _qsoftmax_infer, qsoftmax_ref, qsoftmax_fast,
               cpu=qsoftmax_cpu))
