"""int8 elementwise, pooling, reduction and lookup ops, bit-exact to TFLite's reference kernels.

Each op keeps the float scales and zero points of its tensors as params and derives TFLite's
(int32 multiplier, shift) pairs from them exactly as TFLite's Prepare does, so a blueprint says
what it computes rather than how:

- ``qadd`` (also subtraction): both inputs rescaled to 2 * max(input scales) with 20 bits of
  headroom, summed, rescaled to the output (reference_integer_ops/add.h);
- ``qmul``: (a - zp_a) (b - zp_b) rescaled by s_a s_b / s_y (reference_integer_ops/mul.h);
- ``qsquared_difference``: like ``qadd`` with 7 bits of headroom, the difference squared;
- ``qprelu``: x or x * alpha (both int8), each branch with its own rescaling (TFLite's PRELU);
- ``qmatmul``: batched (a - zp_a) @ (b - zp_b), rescaled (BATCH_MATMUL);
- ``qmean``: TFLite's int8 MEAN (reference_ops::QuantizedMeanOrSum);
- ``qresize_bilinear``: TFLite's 10-bit fixed-point bilinear resize (ResizeBilinearInteger; int8 or int16);
- ``qmax_pool2d``: the window maximum, clamped to the fused activation's range;
- ``qrescale``: (x - zp_in) rescaled by a multiplier (another below zero), + zp_out, clamped (int8 /
  uint8 QUANTIZE, RELU, RELU6, LEAKY_RELU);
- ``hybrid_linear``: TFLite's dynamic-range fully connected (float rows quantized at run time);
- ``hybrid_conv2d``: TFLite's dynamic-range CONV_2D (each image quantized at run time: symmetrically
  for one filter scale, asymmetrically for per-channel scales);
- ``qlookup``: y = table[x + 128], a 256-entry table built here as TFLite builds its own
  (``lut_int8``: LOGISTIC, TANH; ``hard_swish_table_int8``: HARD_SWISH's int16 fixed point;
  ``rsqrt_table_int8``: RSQRT through the fixed-point inverse square root);
- ``ql2_normalize``: TFLite's int8 L2_NORMALIZATION (the same inverse square root per row);
- ``qlog_softmax``: TFLite's int8 LOG_SOFTMAX in gemmlowp's fixed point (exp, log, reciprocal).

Broadcasting follows numpy. Every int32 intermediate is exact in int64 numpy arithmetic. The per-op
executor runs the references; step plans run qadd, qmul, qmax_pool2d and qlookup natively
(_kernels/engine/quantized_ops.pxi, the same integer arithmetic).
"""

from __future__ import annotations

import math

import numpy as np

from volvox import cpu
from volvox.errors import UnsupportedError
from volvox.ir.graph import expect
from volvox.ops.elementwise import broadcast_plan, broadcast_shape
from volvox.ops.int8 import INT8_MAX, INT8_MIN, multiply_by_quantized_multiplier, quantize_multiplier, tflite_round
from volvox.ops.pool import plan_window, pool_out_shape, pool_taps
from volvox.ops.registry import OpDef, register
from volvox.ops.tensor import cast_ref

ADD_LEFT_SHIFT = 20  # TFLite's headroom for int8 ADD / SUB


def _f32(v) -> float:
    """A scale param as the float32 TFLite stores, widened to double exactly."""
    return float(np.float32(v))


def _clamp(y: np.ndarray, p: dict) -> np.ndarray:
    return np.clip(y, int(p.get("act_min", INT8_MIN)), int(p.get("act_max", INT8_MAX))).astype(np.int8)


def _check_int8(specs, *ports) -> None:
    for port in ports:
        expect(specs[port].dtype == "int8", f"{port} must be int8, got {specs[port].describe()}")


def _binary_infer(specs, params):
    _check_int8(specs, "a", "b")
    for key in ("a_scale", "b_scale", "y_scale"):
        expect(_f32(params[key]) > 0, f"{key} must be positive, got {params[key]}")
    return {"y": (broadcast_shape(specs["a"].shape, specs["b"].shape), "int8")}


# ----------------------------------------------------------------------------- tables (qlookup)
def lut_int8(in_scale: float, in_zp: int, out_scale: float, out_zp: int, fn) -> np.ndarray:
    """TFLite's LUTPopulate<int8_t>: fn over every dequantized int8 value (float32), requantized with
    std::round, saturated: the (256,) table indexed by x + 128."""
    q = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)                                # (256,)
    x = (np.float32(in_scale) * (q - in_zp).astype(np.float32)).astype(np.float32)      # float32 product
    y = np.asarray(fn(x), np.float32)
    inv = np.float32(1) / np.float32(out_scale)
    r = tflite_round(y * inv) + out_zp                                                   # float32 product, then round
    return np.clip(r, INT8_MIN, INT8_MAX).astype(np.int8)


def _c_div(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _int16_rounding_doubling_high_mul(a: int, b: int) -> int:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int16."""
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    return _c_div(ab + ((1 << 14) if ab >= 0 else 1 - (1 << 14)), 1 << 15)


def _int16_doubling_high_mul(a: int, b: int) -> int:
    """TFLite's SaturatingDoublingHighMul on int16 (no rounding nudge)."""
    return (1 << 15) - 1 if a == b == -(1 << 15) else _c_div(a * b, 1 << 15)


def _rounding_divide_by_pot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    return (x >> exponent) + ((x & mask) > (mask >> 1) + (x < 0))


def _int16_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier, then DownScaleInt32ToInt16Multiplier: (int16 multiplier, exponent)."""
    m, exponent = quantize_multiplier(real)
    return ((1 << 15) - 1 if m >= (1 << 31) - 1 - (1 << 15) else (m + (1 << 15)) >> 16), exponent


def hard_swish_table_int8(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """TFLite's int8 HARD_SWISH (reference_ops::HardSwish, its Prepare's float32 multipliers) over every
    int8 input: the (256,) table indexed by x + 128."""
    hires_scale = np.float32(1.0 / 128.0) * np.float32(in_scale)
    out_m, out_exp = _int16_multiplier(float(hires_scale / np.float32(out_scale)))
    relu_m, relu_exp = _int16_multiplier(float(hires_scale / np.float32(3.0 / 32768.0)))
    if out_exp > 0:
        raise UnsupportedError(f"int8 HARD_SWISH: output multiplier exponent {out_exp} > 0 (TFLite refuses it too)")
    saturate = lambda v: max(-(1 << 15), min((1 << 15) - 1, v))  # noqa: E731  (SaturatingLeftShift's clamp)
    table = []
    for q in range(INT8_MIN, INT8_MAX + 1):
        hires = (q - in_zp) * (1 << 7)
        preshift = _int16_rounding_doubling_high_mul(hires, out_m)
        relu = hires
        if relu_exp > 0:
            relu = saturate(relu * (1 << (relu_exp - 1)))
        relu = _int16_rounding_doubling_high_mul(relu, relu_m)
        if relu_exp > 0:
            relu = saturate(relu * 2)
        if relu_exp < 0:
            relu = _rounding_divide_by_pot(relu, -relu_exp)
        relu = (relu + (1 << 15)) >> 1
        y = _rounding_divide_by_pot(_int16_doubling_high_mul(relu, preshift), -out_exp) + out_zp
        table.append(max(INT8_MIN, min(INT8_MAX, y)))
    return np.array(table, np.int8)


def float32_exp(x: np.ndarray) -> np.ndarray:
    """std::exp of float32 values: the float64 result rounded once to float32 (as glibc's expf)."""
    return np.exp(x.astype(np.float64)).astype(np.float32)


def float32_tanh(x: np.ndarray) -> np.ndarray:
    """std::tanh of float32 values: the float64 result rounded once to float32 (as glibc's tanhf)."""
    return np.tanh(x.astype(np.float64)).astype(np.float32)


# ----------------------------------------------------------------------------- add / sub / mul
def qadd_multipliers(p: dict) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """TFLite's (multiplier, shift) for input a, input b (negated for subtraction) and the output."""
    sa, sb, sy = _f32(p["a_scale"]), _f32(p["b_scale"]), _f32(p["y_scale"])
    twice_max = 2 * max(sa, sb)
    ma, sha = quantize_multiplier(sa / twice_max)
    mb, shb = quantize_multiplier(sb / twice_max)
    my, shy = quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * sy))
    return (ma, sha), (-mb if p.get("subtract") else mb, shb), (my, shy)


def qadd_ref(ctx, p, a, b):
    """int8 a + b (a - b when ``subtract``) through TFLite's fixed-point rescaling."""
    (ma, sha), (mb, shb), (my, shy) = qadd_multipliers(p)
    xa = (a.astype(np.int64) - int(p["a_zero_point"])) << ADD_LEFT_SHIFT    # a's shape
    xb = (b.astype(np.int64) - int(p["b_zero_point"])) << ADD_LEFT_SHIFT    # b's shape
    total = multiply_by_quantized_multiplier(xa, ma, sha) + multiply_by_quantized_multiplier(xb, mb, shb)  # broadcast
    return _clamp(multiply_by_quantized_multiplier(total, my, shy) + int(p["y_zero_point"]), p)


SQUARED_DIFFERENCE_LEFT_SHIFT = 7  # TFLite's headroom for int8 SQUARED_DIFFERENCE


def qsquared_difference_ref(ctx, p, a, b):
    """int8 (a - b)^2: both inputs rescaled to 2 * max(input scales) with 7 bits of headroom, the
    difference squared in int32, rescaled to the output (TFLite's squared_difference.cc)."""
    sa, sb, sy = _f32(p["a_scale"]), _f32(p["b_scale"]), _f32(p["y_scale"])
    twice_max = 2 * max(sa, sb)
    ma, sha = quantize_multiplier(sa / twice_max)
    mb, shb = quantize_multiplier(sb / twice_max)
    my, shy = quantize_multiplier(twice_max * twice_max / ((1 << 2 * SQUARED_DIFFERENCE_LEFT_SHIFT) * sy))
    xa = (a.astype(np.int64) - int(p["a_zero_point"])) << SQUARED_DIFFERENCE_LEFT_SHIFT    # a's shape
    xb = (b.astype(np.int64) - int(p["b_zero_point"])) << SQUARED_DIFFERENCE_LEFT_SHIFT    # b's shape
    diff = multiply_by_quantized_multiplier(xa, ma, sha) - multiply_by_quantized_multiplier(xb, mb, shb)
    return _clamp(multiply_by_quantized_multiplier(diff * diff, my, shy) + int(p["y_zero_point"]), p)


def qmul_multiplier(p: dict) -> tuple[int, int]:
    """TFLite's (multiplier, shift) of s_a * s_b / s_y (the product and quotient in float32, as TFLite)."""
    real = np.float32(p["a_scale"]) * np.float32(p["b_scale"]) / np.float32(p["y_scale"])
    return quantize_multiplier(float(real))


def qmul_ref(ctx, p, a, b):
    """int8 a * b: the exact integer product of the zero-point-shifted inputs, rescaled."""
    m, shift = qmul_multiplier(p)
    prod = (a.astype(np.int64) - int(p["a_zero_point"])) * (b.astype(np.int64) - int(p["b_zero_point"]))
    return _clamp(multiply_by_quantized_multiplier(prod, m, shift) + int(p["y_zero_point"]), p)


def _prelu_infer(specs, params):
    _check_int8(specs, "x", "alpha")
    expect(broadcast_shape(specs["x"].shape, specs["alpha"].shape) == specs["x"].shape,
           f"alpha {specs['alpha'].describe()} must broadcast to x {specs['x'].describe()}")
    return {"y": (specs["x"].shape, "int8")}


def qprelu_ref(ctx, p, x, alpha):
    """int8 PReLU: (x - zp) rescaled by (multiplier, shift) where x >= zp, else (x - zp)(alpha - zp_alpha)
    rescaled by (alpha_multiplier, alpha_shift); + zp_out, saturated."""
    xs = x.astype(np.int64) - int(p["input_zero_point"])                      # x's shape
    al = np.broadcast_to(alpha.astype(np.int64) - int(p["alpha_zero_point"]), xs.shape)
    positive = multiply_by_quantized_multiplier(xs, int(p["multiplier"]), int(p["shift"]))
    negative = multiply_by_quantized_multiplier(xs * al, int(p["alpha_multiplier"]), int(p["alpha_shift"]))
    return _clamp(np.where(xs >= 0, positive, negative) + int(p["output_zero_point"]), p)


def _qmean_infer(specs, params):
    _check_int8(specs, "x")
    x = specs["x"]
    axes = sorted({int(a) % len(x.shape) for a in params["axes"]})
    expect(len(axes) > 0, "qmean needs at least one axis")
    keep = bool(params.get("keepdims", False))
    return {"y": (tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes), "int8")}


def qmean_multiplier(p: dict, count: int) -> tuple[int, int]:
    """TFLite's QuantizedMeanOrSum rescaling: s_in / s_out (double) folded with 1 / count."""
    m, shift = quantize_multiplier(_f32(p["input_scale"]) / _f32(p["output_scale"]))
    up = min(count.bit_length() - 1, 32, 31 + shift)
    return int((m << up) // count), shift - up


def qmean_ref(ctx, p, x):
    """int8 mean over ``axes`` as TFLite's reference_ops::QuantizedMeanOrSum: the int32 sum minus
    count * zp_in, rescaled by one multiplier with 1 / count folded in, + zp_out, saturated."""
    axes = tuple(sorted({int(a) % x.ndim for a in p["axes"]}))
    count = int(np.prod([x.shape[a] for a in axes]))
    total = x.astype(np.int64).sum(axis=axes, keepdims=bool(p.get("keepdims", False)))    # exact int sums
    m, shift = qmean_multiplier(p, count)
    y = multiply_by_quantized_multiplier(total - int(p["input_zero_point"]) * count, m, shift)
    return np.clip(y + int(p["output_zero_point"]), INT8_MIN, INT8_MAX).astype(np.int8)


def _qmatmul_infer(specs, params):
    _check_int8(specs, "a", "b")
    a, b = specs["a"], specs["b"]
    expect(len(a.shape) >= 2 and len(b.shape) >= 2 and a.shape[-1] == b.shape[-2],
           f"inner dims differ: {a.describe()} @ {b.describe()}")
    return {"y": (broadcast_shape(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), "int8")}


def qmatmul_ref(ctx, p, a, b):
    """int8 batched (a - zp_a) @ (b - zp_b) in exact integers, rescaled by (multiplier, shift), + zp_y,
    saturated (TFLite's int8 BATCH_MATMUL)."""
    acc = (a.astype(np.int64) - int(p["a_zero_point"])) @ (b.astype(np.int64) - int(p["b_zero_point"]))
    y = multiply_by_quantized_multiplier(acc, int(p["multiplier"]), int(p["shift"])) + int(p["y_zero_point"])
    return np.clip(y, INT8_MIN, INT8_MAX).astype(np.int8)


# ----------------------------------------------------------------------------- hybrid (float activations, int8 weights)
def _hybrid_linear_infer(specs, params):
    x, w, ws = specs["x"], specs["weight"], specs["weight_scale"]
    expect(x.dtype == "float32" and w.dtype == "int8" and len(w.shape) == 2 and x.shape[-1] == w.shape[1],
           f"x must be float32 (..., K) and weight int8 (N, K): {x.describe()}, {w.describe()}")
    expect(ws.dtype == "float32" and ws.shape in ((1,), (w.shape[0],)), f"weight_scale must be float32[1 or N], got {ws.describe()}")
    if "bias" in specs:
        expect(specs["bias"].dtype == "float32" and specs["bias"].shape == (w.shape[0],), f"bias must be float32[{w.shape[0]}]")
    return {"y": (x.shape[:-1] + (w.shape[0],), "float32")}


def hybrid_linear_ref(ctx, p, x, weight, bias, weight_scale):
    """TFLite's hybrid FULLY_CONNECTED: each row of x quantized symmetrically to int8 (scale max|x| / 127,
    round half away), the exact int32 dot products with the int8 weights, then bias + dot * (row scale *
    weight scale) in float32."""
    rows = x.reshape(-1, x.shape[-1])                                                          # (M, K)
    rng = np.abs(rows).max(axis=1, keepdims=True)                                             # (M, 1) float32
    safe = np.where(rng == 0, np.float32(1), rng)
    q = np.clip(tflite_round(rows * (np.float32(127) / safe)), -127, 127).astype(np.int64)   # (M, K)
    q[(rng == 0)[:, 0]] = 0
    row_scale = np.where(rng == 0, np.float32(1), (rng / np.float32(127)).astype(np.float32))  # (M, 1)
    dot = (q @ weight.astype(np.int64).T).astype(np.float32)                                   # (M, N) exact below 2^24
    scale = (row_scale * weight_scale.reshape(1, -1)).astype(np.float32)                      # (M, N or 1)
    y = dot * scale
    if bias is not None:
        y = bias.astype(np.float32) + y
    return y.astype(np.float32).reshape(x.shape[:-1] + (weight.shape[0],))


def _hybrid_conv_dims(x_shape: tuple, w_shape: tuple, params: dict) -> tuple:
    (sh, sw), (top, left, bottom, right) = params["strides"], params["pads"]
    return ((x_shape[1] + top + bottom - w_shape[1]) // sh + 1, (x_shape[2] + left + right - w_shape[2]) // sw + 1)


def _hybrid_conv_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    expect(x.dtype == "float32" and w.dtype == "int8" and len(x.shape) == 4 and len(w.shape) == 4
           and x.shape[3] == w.shape[3], f"hybrid_conv2d needs float32 NHWC x and an int8 (O, kh, kw, C) filter: "
                                         f"{x.describe()}, {w.describe()}")
    if "bias" in specs:
        expect(specs["bias"].dtype == "float32" and specs["bias"].shape == (w.shape[0],), f"bias must be float32[{w.shape[0]}]")
    oh, ow = _hybrid_conv_dims(x.shape, w.shape, params)
    expect(oh > 0 and ow > 0, f"hybrid_conv2d of {x.describe()} by {w.describe()} gives an empty output")
    return {"y": ((x.shape[0], oh, ow, w.shape[0]), "float32")}


def _asymmetric_quantize_image(values: np.ndarray) -> tuple[np.ndarray, np.float32, int]:
    """TFLite's AsymmetricQuantizeFloats of one image: (int8 values as int64, float32 scale, zero point)
    from the float range widened to hold 0, the zero point taken from the end with the smaller error."""
    low, high = np.float32(min(np.float32(0), values.min())), np.float32(max(np.float32(0), values.max()))
    if low == high:
        return np.zeros(values.shape, np.int64), np.float32(0), 0
    scale = float(np.float32(high - low)) / 255.0
    from_min, from_max = -128 - float(low) / scale, 127 - float(high) / scale
    zero = from_min if 128 + abs(float(low) / scale) < 127 + abs(float(high) / scale) else from_max
    offset = -128 if zero < -128 else 127 if zero > 127 else int(tflite_round(zero))
    inv = np.float32(1.0 / float(np.float32(scale)))
    q = tflite_round((np.float32(offset) + (values * inv).astype(np.float32)).astype(np.float32))
    return np.clip(q, -128, 127).astype(np.int64), np.float32(scale), offset


def hybrid_conv2d_ref(ctx, p, x, weight, bias=None, channel_scale=None):
    """TFLite's dynamic-range CONV_2D, NHWC, no dilation or groups. One filter scale (EvalHybrid): each
    image quantized symmetrically to int8 (scale max|x| / 127, round half away), the exact int32
    convolution, then sum * (image scale * filter scale) + bias in float32. Per-channel filter scales
    (``channel_scale``, EvalHybridPerChannel): each image quantized asymmetrically, the int32 sum of
    filter * (x - zero point) over the taps on the image, then sum * channel scale * image scale + bias."""
    n = x.shape[0]
    if channel_scale is None:
        rng = np.abs(x.reshape(n, -1)).max(axis=1)                                        # (N,) float32
        safe = np.where(rng == 0, np.float32(1), rng).astype(np.float32)
        inv = (np.float32(127) / safe).astype(np.float32).reshape(n, 1, 1, 1)
        q = np.clip(tflite_round((x * inv).astype(np.float32)), -127, 127).astype(np.int64)   # (N, H, W, C)
        q[rng == 0] = 0
        image_scale = np.where(rng == 0, np.float32(1), (rng / np.float32(127)).astype(np.float32))
    else:
        images = [_asymmetric_quantize_image(x[b]) for b in range(n)]
        q = np.stack([qb - zero for qb, _, zero in images])                               # (N, H, W, C) x - zero
        image_scale = np.array([scale for _, scale, _ in images], np.float32)
    (sh, sw), (top, left, bottom, right) = p["strides"], p["pads"]
    padded = np.pad(q, ((0, 0), (top, bottom), (left, right), (0, 0)))
    oh, ow = _hybrid_conv_dims(x.shape, weight.shape, p)
    w = weight.astype(np.int64)
    acc = np.zeros((n, oh, ow, w.shape[0]), np.int64)                                    # (N, OH, OW, O)
    for i in range(w.shape[1]):
        for j in range(w.shape[2]):
            tap = padded[:, i: i + sh * (oh - 1) + 1: sh, j: j + sw * (ow - 1) + 1: sw]     # (N, OH, OW, C)
            acc += np.einsum("nhwc,oc->nhwo", tap, w[:, i, j])
    if channel_scale is None:
        y = acc.astype(np.float32) * (image_scale * np.float32(p["filter_scale"])).astype(np.float32).reshape(n, 1, 1, 1)
    else:
        y = (acc.astype(np.float32) * channel_scale.astype(np.float32)).astype(np.float32) * image_scale.reshape(n, 1, 1, 1)
    if bias is not None:
        y = y + bias.astype(np.float32)
    return y.astype(np.float32)


# ----------------------------------------------------------------------------- pooling
def _qmax_pool_infer(specs, params):
    _check_int8(specs, "x")
    return {"y": (pool_out_shape(specs["x"], params), "int8")}


def qmax_pool2d_ref(ctx, p, x):
    """int8 max over each window's in-image pixels (padding never wins), clamped."""
    return _clamp(pool_taps(x, p, INT8_MIN, np.maximum), p)


# ----------------------------------------------------------------------------- resize
def _qresize_infer(specs, params):
    x = specs["x"]
    expect(x.dtype in ("int8", "int16"), f"x must be int8 or int16, got {x.describe()}")
    expect(len(x.shape) == 4, f"x must be NHWC, got {x.describe()}")
    oh, ow = (int(v) for v in params["size"])
    expect(oh >= 1 and ow >= 1, f"bad size {params['size']}")
    return {"y": ((x.shape[0], oh, ow, x.shape[3]), x.dtype)}


def _bilinear_taps(out: int, size: int, align: bool, half: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TFLite's ComputeInterpolationValuesInteger along one axis: the 10-bit source coordinate of
    each output index and its lower and upper source pixels, (out,) each."""
    if align and out > 1:
        scale = ((1 << 10) * (size - 1) + (out - 1) // 2) // (out - 1)
    else:
        scale = ((1 << 10) * size + out // 2) // out
    v = np.arange(out, dtype=np.int64) * scale + ((scale // 2 - (1 << 9)) if half else 0)
    lower = np.maximum(np.trunc(v / (1 << 10)).astype(np.int64), 0)            # C division of int32
    upper = np.minimum(np.trunc((v + (1 << 10) - 1) / (1 << 10)).astype(np.int64), size - 1)
    return v, lower, upper


def qresize_bilinear_ref(ctx, p, x):
    """int8 / int16 bilinear resize as TFLite's ResizeBilinearInteger: 10-bit fixed-point source coordinates,
    the four products summed in 20 bits, rounded half away from zero."""
    _, h, w, _ = x.shape
    oh, ow = (int(v) for v in p["size"])
    align, half = bool(p.get("align_corners")), bool(p.get("half_pixel_centers"))
    vy, y0, y1 = _bilinear_taps(oh, h, align, half)                           # (oh,)
    vx, x0, x1 = _bilinear_taps(ow, w, align, half)                           # (ow,)
    fy = (vy - (y0 << 10))[None, :, None, None]                               # (1, oh, 1, 1) in [0, 1024]
    fx = (vx - (x0 << 10))[None, None, :, None]                               # (1, 1, ow, 1)
    xs = x.astype(np.int64)
    corner = lambda ys, xs_: xs[:, ys][:, :, xs_]                             # noqa: E731  (N, oh, ow, C)
    total = (corner(y0, x0) * ((1 << 10) - fy) * ((1 << 10) - fx) + corner(y1, x0) * fy * ((1 << 10) - fx)
             + corner(y0, x1) * ((1 << 10) - fy) * fx + corner(y1, x1) * fy * fx)
    rounded = np.where(total > 0, total + (1 << 19), total - (1 << 19))
    return (np.sign(rounded) * (np.abs(rounded) >> 20)).astype(x.dtype)       # C division by 2^20


# ----------------------------------------------------------------------------- rescale / lookup
def _rescale_infer(specs, params):
    x = specs["x"]
    expect(x.dtype in ("int8", "uint8"), f"x must be int8 or uint8, got {x.describe()}")
    expect(params.get("output_dtype", "int8") in ("int8", "uint8"), f"bad output_dtype {params.get('output_dtype')!r}")
    return {"y": (x.shape, params.get("output_dtype", "int8"))}


def qrescale_ref(ctx, p, x):
    """zp_out + MultiplyByQuantizedMultiplier(x - zp_in, multiplier, shift), clamped (int8 or uint8 in,
    ``output_dtype`` int8 or uint8 out); values below the input zero point use (negative_multiplier,
    negative_shift) when given (LEAKY_RELU's alpha)."""
    shifted = x.astype(np.int64) - int(p["input_zero_point"])
    m, shift = int(p["multiplier"]), int(p["shift"])
    if "negative_multiplier" in p:
        negative = shifted < 0
        m = np.where(negative, int(p["negative_multiplier"]), m)
        shift = np.where(negative, int(p["negative_shift"]), shift)
    y = multiply_by_quantized_multiplier(shifted, m, shift) + int(p["output_zero_point"])
    if p.get("output_dtype", "int8") == "uint8":
        return np.clip(y, 0, 255).astype(np.uint8)
    return _clamp(y, p)


def _lookup_infer(specs, params):
    _check_int8(specs, "x")
    t = specs["table"]
    expect(t.dtype == "int8" and t.shape == (256,), f"table must be int8[256], got {t.describe()}")
    return {"y": (specs["x"].shape, "int8")}


def qlookup_ref(ctx, p, x, table):
    """int8 table[x + 128]: a function of one int8 value tabulated at import."""
    return table[x.astype(np.int64) + 128]


# ------------------------------------------------------------------- CPU plan lowering
# ------------------------------------------------------------------ TFLite's fixed-point inverse square root
INT32_MAX, INT32_MIN = 2 ** 31 - 1, -2 ** 31


def _srdhm(a: int, b: int) -> int:
    """gemmlowp's SaturatingRoundingDoublingHighMul of two int32 values."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    ab += (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return ab // (1 << 31) if ab >= 0 else -((-ab) // (1 << 31))   # C division truncates toward zero


def _saturating_shift_left(x: int, exponent: int) -> int:
    """gemmlowp's SaturatingRoundingMultiplyByPOT for a positive exponent."""
    threshold = (1 << (31 - exponent)) - 1
    return INT32_MAX if x > threshold else INT32_MIN if x < -threshold else x << exponent


def _wrap32(x: int) -> int:
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


def inv_sqrt_quantized_multiplier(value: int, reverse_shift: int) -> tuple[int, int]:
    """TFLite's GetInvSqrtQuantizedMultiplierExp: 1 / sqrt(value) as (int32 multiplier, shift), by five
    Newton-Raphson steps in gemmlowp's 3-integer-bit fixed point (values 0 and 1 give (INT32_MAX, 0))."""
    if value <= 1:
        return INT32_MAX, 0
    shift = 11
    while value >= 1 << 29:
        value //= 4
        shift += 1
    pairs = (32 - value.bit_length() - 1) // 2 - 1          # CountLeadingZeros(value) - 1, in bit pairs, less one
    shift -= pairs
    value <<= 2 * pairs
    half_input = _rounding_divide_by_pot(value >> 1, 1)       # F3 input / 2
    half_three = (1 << 28) + (1 << 27)                        # F3 1.5
    x = 1 << 28                                               # F3 1.0
    for _ in range(5):
        x3 = _saturating_shift_left(_srdhm(_srdhm(x, x), x), 6)                  # F9 -> F3
        x = _saturating_shift_left(_wrap32(_srdhm(half_three, x) - _srdhm(half_input, x3)), 3)   # F6 -> F3
    x = _srdhm(x, 1518500250)                                 # times sqrt(2) / 2 (F0)
    if shift < 0:
        x, shift = _wrap32(x << -shift), 0
    return x, shift * reverse_shift


def rsqrt_table_int8(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """TFLite's int8 RSQRT as a 256-entry table (index x + 128): 1 / sqrt(x - zp) by the fixed-point
    inverse square root, rescaled by 1 / (sqrt(in_scale) * out_scale) (sqrt and product in float32,
    the reciprocal in double); x at the zero point gives 127. LiteRT rejects inputs below the zero
    point at run time; their entries here are 127 too."""
    multiplier, shift = quantize_multiplier(1.0 / float(np.float32(np.sqrt(np.float32(in_scale))) * np.float32(out_scale)))
    table = np.full(256, INT8_MAX, np.int8)
    for q in range(-128, 128):
        value = q - in_zp
        if value <= 0:
            continue
        inv, inv_shift = inv_sqrt_quantized_multiplier(value, -1)
        data = int(multiply_by_quantized_multiplier(1, inv, inv_shift + 20))
        out = int(multiply_by_quantized_multiplier(data, multiplier, shift - 20)) + out_zp
        table[q + 128] = min(max(out, INT8_MIN), INT8_MAX)
    return table


def _ql2_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int8" and len(x.shape) >= 1, f"ql2_normalize needs int8 x, got {x.describe()}")
    return {"y": (x.shape, "int8")}


def ql2_normalize_ref(ctx, p, x):
    """TFLite's int8 L2_NORMALIZATION over the last axis: (x - zp) times the fixed-point inverse square
    root of its row's sum of squares, out in 1/128 steps (zero point 0)."""
    shifted = x.astype(np.int64) - int(p["input_zero_point"])                  # (rows..., depth)
    sums = (shifted * shifted).sum(axis=-1)
    multipliers = np.zeros(sums.shape, np.int64)
    shifts = np.zeros(sums.shape, np.int64)
    for index, total in np.ndenumerate(sums):
        multipliers[index], shifts[index] = inv_sqrt_quantized_multiplier(int(total), -1)
    y = multiply_by_quantized_multiplier(shifted, multipliers[..., None], shifts[..., None] + 7)
    return np.clip(y, INT8_MIN, INT8_MAX).astype(np.int8)


# ------------------------------------------------------------------ TFLite's int8 LOG_SOFTMAX (gemmlowp fixed point)
LOG_SOFTMAX_INPUT_BITS, LOG_SOFTMAX_SUM_BITS, LOG_SOFTMAX_OUTPUT_BITS = 5, 12, 4


def _clz32(x: int) -> int:
    return 32 - (x & 0xFFFFFFFF).bit_length()


def _shift_by_pot(x: int, exponent: int) -> int:
    """gemmlowp's SaturatingRoundingMultiplyByPOT(Param): a saturating left shift or a rounding right shift."""
    if exponent > 0:
        return _saturating_shift_left(x, exponent)
    return _rounding_divide_by_pot(x, -exponent) if exponent < 0 else x


def _saturate32(x: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, x))


def _exp_on_negative_values_q5(a: int) -> int:
    """gemmlowp's exp_on_negative_values of a Q5.26 value <= 0, as Q0.31."""
    quarter = 1 << 24
    a_mod = (a & (quarter - 1)) - quarter
    x = _shift_by_pot(a_mod, LOG_SOFTMAX_INPUT_BITS) + (1 << 28)          # Q0.31, the Taylor point -1/8 shifted
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    poly = _rounding_divide_by_pot(_srdhm(_rounding_divide_by_pot(x4, 2) + x3, 715827883) + x2, 1)
    result = 1895147668 + _srdhm(1895147668, x + poly)
    remainder = a_mod - a
    for k, multiplier in enumerate((1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242)):
        if remainder & (1 << (24 + k)):
            result = _srdhm(result, multiplier)
    return INT32_MAX if a == 0 else result


def _rounding_half_sum(a: int, b: int) -> int:
    """gemmlowp's RoundingHalfSum: (a + b) / 2, halves away from zero."""
    total = a + b
    return (total + 1) // 2 if total >= 0 else -((-total + 1) // 2)


def _one_over_one_plus_x(a: int) -> int:
    """gemmlowp's one_over_one_plus_x_for_x_in_0_1 (Q0.31 in and out), Newton-Raphson in Q2.29."""
    half_denominator = _rounding_half_sum(a, INT32_MAX)
    x = 1515870810 + _srdhm(half_denominator, -1010580540)
    for _ in range(3):
        x = _wrap32(x + _shift_by_pot(_srdhm(x, _wrap32((1 << 29) - _srdhm(half_denominator, x))), 2))
    return _shift_by_pot(x, 1)


def _log_q12_to_q5(value: int) -> int:
    """TFLite's log_x_for_x_greater_than_or_equal_to_1<5>(Q12 value), raw Q5.26."""
    accum_bits = LOG_SOFTMAX_INPUT_BITS + 1
    log_2, sqrt_sqrt_half, sqrt_half = 1488522236, 1805811301, 1518500250
    alpha_n, alpha_d, alpha_i, alpha_f = 117049297, 127690142, 1057819769, 638450708
    shifted_quarter = _shift_by_pot(536870912, -accum_bits)
    headroom_a = _clz32(value)
    r_a = _shift_by_pot(_srdhm(_shift_by_pot(value, headroom_a - 1), sqrt_half), 1)
    pow_a = _saturate32(_shift_by_pot(LOG_SOFTMAX_SUM_BITS - headroom_a, 31 - accum_bits) + shifted_quarter)
    headroom_b = _clz32(_srdhm(value, sqrt_half)) - 1
    r_b = _shift_by_pot(value, headroom_b)
    pow_b = _saturate32(_shift_by_pot(LOG_SOFTMAX_SUM_BITS - headroom_b, 31 - accum_bits) - shifted_quarter)
    r, pow_adj = min(r_a, r_b), max(pow_a, pow_b)
    p = _rounding_half_sum(r, sqrt_sqrt_half)
    q = _wrap32(2 * _wrap32(r - sqrt_sqrt_half))
    common_sq = _srdhm(q, q)
    num = _wrap32(_srdhm(q, r) + _srdhm(_srdhm(q, common_sq), alpha_n))
    denom = _wrap32(_srdhm(p, _wrap32(alpha_i + q + _srdhm(alpha_d, common_sq))) + _srdhm(alpha_f, q))
    accum = _wrap32(_srdhm(pow_adj, log_2) + _srdhm(_shift_by_pot(num, -accum_bits), _one_over_one_plus_x(denom)))
    return _shift_by_pot(accum, accum_bits - LOG_SOFTMAX_INPUT_BITS)


def qlog_softmax_params(input_scale: float) -> dict:
    """TFLite's int8 LOG_SOFTMAX Prepare: the input multiplier into Q5.26 (beta 1), the reverse scaling
    and the smallest difference from the row maximum that still counts."""
    real = min(float(np.float32(input_scale)) * (1 << (31 - LOG_SOFTMAX_INPUT_BITS)), (1 << 31) - 1.0)
    multiplier, left_shift = quantize_multiplier(real)
    reverse, reverse_shift = quantize_multiplier((1 << (31 - left_shift)) / multiplier)
    radius = math.floor(((1 << LOG_SOFTMAX_INPUT_BITS) - 1) * (1 << (31 - LOG_SOFTMAX_INPUT_BITS)) / (1 << left_shift))
    return {"input_multiplier": multiplier, "input_shift": left_shift, "reverse_multiplier": reverse,
            "reverse_shift": reverse_shift, "diff_min": -radius}


def _qlog_softmax_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int8" and len(x.shape) >= 1, f"qlog_softmax needs int8 x, got {x.describe()}")
    return {"y": (x.shape, "int8")}


def qlog_softmax_ref(ctx, p, x):
    """TFLite's int8 LOG_SOFTMAX over the last axis (reference_integer_ops::LogSoftmax): each row's
    differences from its maximum in Q5.26, their exps summed in Q12, the log of the sum subtracted,
    out in 1/16 steps with zero point 127."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    y = np.empty(rows.shape, np.int8)
    mult, shift, diff_min = p["input_multiplier"], p["input_shift"], p["diff_min"]
    for r, row in enumerate(rows):
        diffs = row - row.max()
        scaled = [int(v) for v in multiply_by_quantized_multiplier(diffs, mult, shift)]
        total = 0
        for d, s_ in zip(diffs, scaled):
            if d >= diff_min:
                total = _wrap32(total + _rounding_divide_by_pot(_exp_on_negative_values_q5(s_), LOG_SOFTMAX_SUM_BITS))
        log_sum = _log_q12_to_q5(total)
        floor = max(diff_min - 1, int(multiply_by_quantized_multiplier(log_sum + INT32_MIN, p["reverse_multiplier"],
                                                                       p["reverse_shift"])))
        for c, (d, s_) in enumerate(zip(diffs, scaled)):
            if d > floor:
                out = _rounding_divide_by_pot(_wrap32(s_ - log_sum),
                                              31 - LOG_SOFTMAX_INPUT_BITS - LOG_SOFTMAX_OUTPUT_BITS) + 127
                y[r, c] = min(max(out, INT8_MIN), INT8_MAX)
            else:
                y[r, c] = INT8_MIN
    return y.reshape(x.shape)


# ------------------------------------------------------------------ ONNX's QuantizeLinear / DequantizeLinear in full
INTEGER_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
                  "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1)}
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def broadcast_quant_param(value: np.ndarray, shape: tuple, axis: int, block_size: int) -> np.ndarray:
    """A scale / zero point laid against x of ``shape``: a scalar as is, a vector along ``axis``, or
    (``block_size`` > 0) blocks along ``axis`` repeated ``block_size`` times, the last block cut short."""
    if value.ndim == 0 or value.size == 1 and not block_size:
        return value.reshape(())
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    value = np.repeat(value, block_size, axis=axis).take(range(shape[axis]), axis=axis)
    if value.shape != tuple(shape):
        raise ValueError(f"blocked scale of shape {value.shape} does not match x {tuple(shape)}")
    return value


def _quantize_infer(specs, params):
    x, scale = specs["x"], specs["scale"]
    expect(params["to"] in INTEGER_RANGES or params["to"] in FLOAT8 or params["to"] == "float4_e2m1fn",
           f"quantize to {params['to']!r}")
    expect(x.dtype in ("float32", "float16", "bfloat16") and scale.dtype in ("float32", "float16", "bfloat16"),
           f"quantize_linear takes float x and scale, got {x.describe()}, {scale.describe()}")
    return {"y": (x.shape, params["to"])}


def quantize_linear_ref(ctx, p, x, scale, zero_point=None):
    """ONNX QuantizeLinear: x / scale (in ``precision``'s dtype if given), to an integer type rounded half
    to even + zero point, saturated; to float8 saturated (``saturate``) or not; to float4e2m1 plus zero point."""
    axis, block = p.get("axis", 1) % max(x.ndim, 1), p.get("block_size", 0)
    to = p["to"]
    scale = broadcast_quant_param(np.asarray(scale), x.shape, axis, block)
    zero = None if zero_point is None else broadcast_quant_param(np.asarray(zero_point), x.shape, axis, block)
    precision = p.get("precision")
    scaled = x.astype(precision) / scale.astype(precision) if precision else x / scale
    if to in INTEGER_RANGES:
        lo, hi = INTEGER_RANGES[to]
        q = np.rint(scaled).astype(np.int32)
        if zero is not None:
            q = q + zero
        return np.clip(q, lo, hi).astype(to)
    if to in FLOAT8:
        return cast_ref(ctx, {"to": to, "saturate": p.get("saturate", 1)}, scaled)
    return (scaled if zero is None else scaled + zero).astype(to)


def _dequantize_infer(specs, params):
    x, scale = specs["x"], specs["scale"]
    expect(scale.dtype in ("float32", "float16", "bfloat16"), f"dequantize_linear's scale must be float, got {scale.describe()}")
    return {"y": (x.shape, params.get("to") or scale.dtype)}


def dequantize_linear_ref(ctx, p, x, scale, zero_point=None):
    """ONNX DequantizeLinear: (float32(x) - zero point) * scale, in ``to`` (default: the scale's dtype);
    a float8 / float4 x takes no zero point (onnx requires it zero)."""
    axis, block = p.get("axis", 1) % max(x.ndim, 1), p.get("block_size", 0)
    shifted = x.astype(np.float32)
    if zero_point is not None and x.dtype.name not in FLOAT8 + ("float4_e2m1fn",):
        shifted = shifted - broadcast_quant_param(np.asarray(zero_point), x.shape, axis, block)
    y = shifted * broadcast_quant_param(np.asarray(scale), x.shape, axis, block)
    return y.astype(p.get("to") or scale.dtype)


def qbinary_cpu(plan, node) -> None:
    """qadd / qmul as one native step (engine/quantized_ops.pxi); a broadcast first operand swaps
    with the second, its zero point and multiplier with it (the integer sum and product commute)."""
    p = node.params
    a, b, y = plan.input(node, "a"), plan.input(node, "b"), plan.output(node)
    zps = [int(p["a_zero_point"]), int(p["b_zero_point"])]
    if node.op == "qmul":
        requant = qmul_multiplier(p)
    else:
        ra, rb, ry = qadd_multipliers(p)
        requant = ra + rb + ry
    if a.shape != y.shape:
        a, b, zps = b, a, zps[::-1]
        if node.op == "qadd":
            requant = rb + ra + ry
    plan.need(node, a.shape == y.shape, "a broadcast of both operands")
    b_count, b_div = broadcast_plan(plan, node, b.shape, y.shape)
    plan.add("qbinary", a=cpu.address(a), b=cpu.address(b), y=cpu.address(y), count=y.size, mul=node.op == "qmul",
             zero_points=(zps[0], zps[1], int(p["y_zero_point"])), requant=tuple(int(v) for v in requant),
             lo=int(p.get("act_min", INT8_MIN)), hi=int(p.get("act_max", INT8_MAX)), b_count=b_count, b_div=b_div)


def qmax_pool2d_cpu(plan, node) -> None:
    p, x, y = node.params, plan.input(node, "x"), plan.output(node)
    plan.add("qmax_pool", x=cpu.address(x), y=cpu.address(y), window=plan_window(node, x, y),
             lo=int(p.get("act_min", INT8_MIN)), hi=int(p.get("act_max", INT8_MAX)))


def qlookup_cpu(plan, node) -> None:
    x, table, y = plan.input(node, "x"), plan.input(node, "table"), plan.output(node)
    plan.need(node, table.dtype == np.int8 and table.shape == (256,), "table")
    plan.add("qlookup", x=cpu.address(x), table=cpu.address(table), y=cpu.address(y), count=y.size)


register(OpDef("qadd", "quantized", ("a", "b"), ("y",), _binary_infer, qadd_ref, cpu=qbinary_cpu))
register(OpDef("qmul", "quantized", ("a", "b"), ("y",), _binary_infer, qmul_ref, cpu=qbinary_cpu))
register(OpDef("qsquared_difference", "quantized", ("a", "b"), ("y",), _binary_infer, qsquared_difference_ref))
register(OpDef("qmax_pool2d", "quantized", ("x",), ("y",), _qmax_pool_infer, qmax_pool2d_ref, cpu=qmax_pool2d_cpu))
register(OpDef("qprelu", "quantized", ("x", "alpha"), ("y",), _prelu_infer, qprelu_ref))
register(OpDef("qmean", "quantized", ("x",), ("y",), _qmean_infer, qmean_ref))
register(OpDef("qmatmul", "quantized", ("a", "b"), ("y",), _qmatmul_infer, qmatmul_ref))
register(OpDef("qresize_bilinear", "quantized", ("x",), ("y",), _qresize_infer, qresize_bilinear_ref))
register(OpDef("hybrid_linear", "quantized", ("x", "weight", "bias?", "weight_scale"), ("y",), _hybrid_linear_infer,
               hybrid_linear_ref))
register(OpDef("qrescale", "quantized", ("x",), ("y",), _rescale_infer, qrescale_ref))
register(OpDef("qlog_softmax", "quantized", ("x",), ("y",), _qlog_softmax_infer, qlog_softmax_ref))
register(OpDef("ql2_normalize", "quantized", ("x",), ("y",), _ql2_infer, ql2_normalize_ref))
register(OpDef("quantize_linear", "quantized", ("x", "scale", "zero_point?"), ("y",), _quantize_infer, quantize_linear_ref))
register(OpDef("dequantize_linear", "quantized", ("x", "scale", "zero_point?"), ("y",), _dequantize_infer,
               dequantize_linear_ref))
register(OpDef("hybrid_conv2d", "quantized", ("x", "weight", "bias?", "channel_scale?"), ("y",), _hybrid_conv_infer,
               hybrid_conv2d_ref))
register(OpDef("qlookup", "quantized", ("x", "table"), ("y",), _lookup_infer, qlookup_ref, cpu=qlookup_cpu))
