"""LiteRT's 16x8 quantization: int16 activations (symmetric, zero point 0), int8 weights, int64 biases,
bit-exact to its reference kernels (OpResolverType.BUILTIN_REF of ai-edge-litert 2.3).

- ``qconv2d_16x8`` (CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV): int64 accumulation, then LiteRT's
  64-bit MultiplyByQuantizedMultiplier: the int32 multiplier rounded to 16 bits, one rounding shift
  (reference_integer_ops::ConvPerChannel / DepthwiseConvPerChannel for int16 input);
- ``qlinear_16x8`` (FULLY_CONNECTED): int64 accumulation, then rescaled in double,
  round(acc * (input_scale * filter_scale / output_scale)) with halves away from zero, cast to int32
  as x86 does (a value outside int32 becomes INT32_MIN) (reference_integer_ops::FullyConnected);
- ``qmax_pool2d_16x8`` / ``qavg_pool2d_16x8``: the window maximum, or the integer sum divided by the
  in-image count with halves away from zero (reference_integer_ops::MaxPool / AveragePool);
- ``quantize_16x8`` / ``dequantize_16x8``: float32 <-> int16 (AffineQuantize, Dequantize);
- ``qrescale_16x8``: the 32-bit MultiplyByQuantizedMultiplier of x - zp_in by the scale ratio, + zp_out,
  clamped (int16 RELU / RELU6, LEAKY_RELU with a second multiplier, QUANTIZE between int8 and int16);
- ``qadd_16x8`` (ADD, SUB): LiteRT's general int16 path (15 bits of headroom, the int8 rescaling) or,
  when every scale is a power of two and the op asks for it, its power-of-two path (one input shifted,
  a saturating sum); ``qmul_16x8`` (MUL): the exact product rescaled once;
- ``qmean_16x8`` (MEAN) and ``qmatmul_16x8`` (BATCH_MATMUL): the int8 arithmetic without zero points,
  saturated to int16;
- ``qsoftmax_16x8`` (SOFTMAX): LiteRT's two interpolated 513-entry tables (exp, 1 / (1 + x)), built here as
  its LUTPopulate builds them, in double;
- ``qsigmoid_16x8`` / ``qtanh_16x8`` (LOGISTIC, TANH): LiteRT's fixed 256-entry sigmoid table (ported, not
  computed: no formula reproduces it), interpolated on the input rescaled to its units.

The importer computes the (multiplier, shift) pairs and the double scales once and refuses what these
formulas would not reproduce (an accumulator that could pass 2**47, a shift past 7). Every product of an
int16 and an int8 fits in 23 bits, so the fast paths sum them exactly in float64 (BLAS) for up to 2**30
terms; the references sum tap by tap in int64. Step plans hold no int16 tensor yet: a model with
16x8 tensors runs on the per-op executor.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from volvox.ir.graph import expect, same_dim
from volvox.ops.conv import conv_direct, conv_fast, conv_infer_shape
from volvox.ops.elementwise import broadcast_shape
from volvox.ops.int8 import multiply_by_quantized_multiplier, quantize_multiplier, tflite_round
from volvox.ops.pool import pool_out_shape, pool_taps, valid_counts
from volvox.ops.quantized import qmean_multiplier
from volvox.ops.registry import OpDef, register

INT16_MIN, INT16_MAX = -32768, 32767
ACCUMULATOR_BOUND = 1 << 47  # LiteRT's 64-bit MultiplyByQuantizedMultiplier assumes |acc| < 2**47


def multiply_by_quantized_multiplier_64(acc: np.ndarray, m: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """LiteRT's MultiplyByQuantizedMultiplier(int64_t x, int32_t multiplier, int shift) over int64 arrays:
    the multiplier rounded to its top 16 bits, (x * m16 + 2**(14 - shift)) >> (15 - shift), cast to int32."""
    acc, m, shift = (np.asarray(v, np.int64) for v in (acc, m, shift))
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - shift
    result = (acc * reduced + (np.int64(1) << (total - 1))) >> total
    return (result + (1 << 31)) % (1 << 32) - (1 << 31)   # static_cast<int32_t>


def round_scaled_to_int32(acc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """static_cast<int32_t>(round(double(acc) * scale)): halves away from zero; a value outside int32
    becomes INT32_MIN (what x86's cvttsd2si gives LiteRT)."""
    v = np.asarray(acc, np.float64) * np.asarray(scale, np.float64)
    r = np.copysign(np.floor(np.abs(v) + 0.5), v)
    inside = (r >= -(2.0 ** 31)) & (r < 2.0 ** 31)
    return np.where(inside, r, -(2.0 ** 31)).astype(np.int64)


def _clamp16(y: np.ndarray, p: dict) -> np.ndarray:
    return np.clip(y, int(p.get("act_min", INT16_MIN)), int(p.get("act_max", INT16_MAX))).astype(np.int16)


def _check_16x8(specs, n_out: int) -> None:
    x, w = specs["x"], specs["weight"]
    expect(x.dtype == "int16" and w.dtype == "int8", f"x must be int16 and weight int8: {x.describe()}, {w.describe()}")
    if "bias" in specs:
        b = specs["bias"]
        expect(b.dtype == "int64" and b.shape == (n_out,), f"bias must be int64[{n_out}], got {b.describe()}")


# ----------------------------------------------------------------------------- convolutions
def _qconv_infer(specs, params):
    w = specs["weight"]
    _check_16x8(specs, w.shape[0])
    for port in ("multiplier", "shift"):
        s = specs[port]
        expect(s.dtype == "int32" and s.shape == (w.shape[0],), f"{port} must be int32[{w.shape[0]}], got {s.describe()}")
    return {"y": (conv_infer_shape(specs["x"], w, params), "int16")}


def qconv2d_16x8_ref(ctx, p, x, weight, bias, multiplier, shift):
    """int16 NHWC conv with int8 OHWI weights: int64 tap-by-tap sums (+ int64 bias), rescaled by LiteRT's
    64-bit MultiplyByQuantizedMultiplier, clamped to the fused activation. (N, OH, OW, Cout) int16."""
    acc = conv_direct(x.astype(np.int64), weight, p, np.int64)                 # (N, OH, OW, Cout)
    if bias is not None:
        acc = acc + bias
    return _clamp16(multiply_by_quantized_multiplier_64(acc, multiplier, shift), p)


def qconv2d_16x8_fast(ctx, p, x, weight, bias, multiplier, shift):
    """qconv2d_16x8 with the sums in float64 im2col / BLAS (exact integers), then the reference's rescale."""
    acc = conv_fast(x.astype(np.float64), weight, p, np.float64).astype(np.int64)  # (N, OH, OW, Cout)
    if bias is not None:
        acc = acc + bias
    return _clamp16(multiply_by_quantized_multiplier_64(acc, multiplier, shift), p)


# ----------------------------------------------------------------------------- fully connected
def _qlinear_infer(specs, params):
    x, w = specs["x"], specs["weight"]
    expect(len(w.shape) == 2, f"weight must be a 2-D int8 matrix, got {w.describe()}")
    _check_16x8(specs, w.shape[0])
    expect(same_dim(x.shape[-1], w.shape[1]), f"x's last dim must equal weight's in_features: {x.describe()} vs {w.describe()}")
    s = specs["scale"]
    expect(s.dtype == "float64" and s.shape == (w.shape[0],), f"scale must be float64[{w.shape[0]}], got {s.describe()}")
    return {"y": (x.shape[:-1] + (w.shape[0],), "int16")}


def qlinear_16x8_ref(ctx, p, x, weight, bias, scale):
    """int16 fully connected with int8 (out, in) weights: int64 x @ w.T (+ int64 bias), rescaled in double by
    each output's input_scale * filter_scale / output_scale, clamped. (..., out) int16."""
    acc = x.astype(np.int64) @ weight.astype(np.int64).T                      # (..., out)
    if bias is not None:
        acc = acc + bias
    return _clamp16(round_scaled_to_int32(acc, scale), p)


def qlinear_16x8_fast(ctx, p, x, weight, bias, scale):
    """qlinear_16x8 with the sums as one float64 BLAS matmul (exact integers)."""
    acc = (x.astype(np.float64) @ weight.astype(np.float64).T).astype(np.int64)  # (..., out)
    if bias is not None:
        acc = acc + bias
    return _clamp16(round_scaled_to_int32(acc, scale), p)


# ----------------------------------------------------------------------------- pooling
def _qpool_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int16", f"x must be int16, got {x.describe()}")
    return {"y": (pool_out_shape(x, params), "int16")}


def qmax_pool2d_16x8_ref(ctx, p, x):
    """int16 max over each window's in-image pixels (padding never wins), clamped. (N, OH, OW, C)."""
    return _clamp16(pool_taps(x, p, INT16_MIN, np.maximum), p)


def qavg_pool2d_16x8_ref(ctx, p, x):
    """int16 average pool (one scale in and out): the in-image pixels' integer sum divided by their count,
    rounding half away from zero (reference_integer_ops::AveragePool), clamped. (N, OH, OW, C)."""
    acc = pool_taps(x.astype(np.int64), p, 0, np.add)      # (N, OH, OW, C)
    count = valid_counts(x.shape, p).astype(np.int64)      # (OH, OW, 1)
    half = count // 2
    return _clamp16(np.where(acc > 0, (acc + half) // count, -((-acc + half) // count)), p)


# ----------------------------------------------------------------------------- (de)quantize and rescale
def _quantize_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "float32", f"x must be float32, got {x.describe()}")
    expect(float(params["scale"]) > 0, f"scale must be positive, got {params['scale']}")
    return {"y": (x.shape, "int16")}


def quantize_16x8_ref(ctx, p, x):
    """int16(round(x / scale)): float32 division, halves away from zero, saturated (AffineQuantize)."""
    return np.clip(tflite_round(x / np.float32(p["scale"])), INT16_MIN, INT16_MAX).astype(np.int16)


def _dequantize_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int16", f"x must be int16, got {x.describe()}")
    return {"y": (x.shape, "float32")}


def dequantize_16x8_ref(ctx, p, x):
    """float32(scale * x) (zero point 0): the product of a float32 scale and an int16 is exact in double,
    so float32 arithmetic gives LiteRT's rounding of it."""
    return (np.float32(p["scale"]) * x.astype(np.float32)).astype(np.float32)


def _rescale_infer(specs, params):
    x = specs["x"]
    to = params.get("output_dtype", "int16")
    expect(x.dtype in ("int8", "int16") and to in ("int8", "int16") and "int16" in (x.dtype, to),
           f"an int16 rescale reads and writes int8 / int16 (one of them int16), got {x.describe()} -> {to}")
    return {"y": (x.shape, to)}


def qrescale_16x8_ref(ctx, p, x):
    """zp_out + MultiplyByQuantizedMultiplier(x - zp_in, multiplier, shift) (32-bit, as LiteRT's int16
    ReluX, LeakyRelu and Requantize), clamped to ``act_min`` / ``act_max`` or the output type; values below
    the input zero point use (negative_multiplier, negative_shift) when given (LEAKY_RELU's alpha)."""
    shifted = x.astype(np.int64) - int(p.get("input_zero_point", 0))
    m, shift = int(p["multiplier"]), int(p["shift"])
    if "negative_multiplier" in p:
        negative = shifted < 0
        m = np.where(negative, int(p["negative_multiplier"]), m)
        shift = np.where(negative, int(p["negative_shift"]), shift)
    y = multiply_by_quantized_multiplier(shifted, m, shift) + int(p.get("output_zero_point", 0))
    info = np.iinfo(p.get("output_dtype", "int16"))
    lo, hi = max(int(p.get("act_min", info.min)), info.min), min(int(p.get("act_max", info.max)), info.max)
    return np.clip(y, lo, hi).astype(info.dtype)


# ----------------------------------------------------------------------------- add / sub / mul
ADD_LEFT_SHIFT_16 = 15  # LiteRT's headroom for int16 ADD / SUB with general scales


def _binary_infer(specs, params):
    a, b = specs["a"], specs["b"]
    expect(a.dtype == "int16" and b.dtype == "int16", f"a and b must be int16: {a.describe()}, {b.describe()}")
    if params.get("pot"):
        expect(a.shape == b.shape, f"the power-of-two int16 add takes no broadcast: {a.describe()}, {b.describe()}")
    return {"y": (broadcast_shape(a.shape, b.shape), "int16")}


def qadd_16x8_ref(ctx, p, a, b):
    """int16 a + b (a - b when ``subtract``). General scales: each input << 15 rescaled to twice the larger
    input scale, summed, rescaled to the output (LiteRT's general int16 path). ``pot`` (every scale a power
    of two): the input with the smaller scale divided by 2**shift rounding, then a saturating int16 sum
    or difference (reference_ops::Add / Sub16). Clamped to the fused activation."""
    if p.get("pot"):
        sa, sb = int(p["a_shift"]), int(p["b_shift"])                           # <= 0, one of them 0
        xa, xb = a.astype(np.int64), b.astype(np.int64)
        xa = _rounding_divide_by_pot(xa, -sa) if sa else xa
        xb = _rounding_divide_by_pot(xb, -sb) if sb else xb
        y = np.clip(xa - xb if p.get("subtract") else xa + xb, INT16_MIN, INT16_MAX)
        return _clamp16(y, p)
    sa, sb, sy = (float(np.float32(p[k])) for k in ("a_scale", "b_scale", "y_scale"))
    twice_max = 2 * max(sa, sb)
    ma, sha = quantize_multiplier(sa / twice_max)
    mb, shb = quantize_multiplier(sb / twice_max)
    my, shy = quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT_16) * sy))
    xa = multiply_by_quantized_multiplier(a.astype(np.int64) << ADD_LEFT_SHIFT_16, ma, sha)   # a's shape
    xb = multiply_by_quantized_multiplier(b.astype(np.int64) << ADD_LEFT_SHIFT_16, mb, shb)   # b's shape
    total = xa - xb if p.get("subtract") else xa + xb                                        # broadcast
    return _clamp16(multiply_by_quantized_multiplier(total, my, shy), p)


def _rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT: x / 2**exponent, halves away from zero."""
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


def qmul_16x8_ref(ctx, p, a, b):
    """int16 a * b: the exact product rescaled by s_a * s_b / s_y (in float32, as LiteRT's Prepare) with the
    32-bit MultiplyByQuantizedMultiplier, clamped (reference_integer_ops::Mul)."""
    real = np.float32(p["a_scale"]) * np.float32(p["b_scale"]) / np.float32(p["y_scale"])
    m, shift = quantize_multiplier(float(real))
    return _clamp16(multiply_by_quantized_multiplier(a.astype(np.int64) * b.astype(np.int64), m, shift), p)


# ----------------------------------------------------------------------------- mean / batch matmul
def _qmean_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int16", f"x must be int16, got {x.describe()}")
    axes = sorted({int(a) % len(x.shape) for a in params["axes"]})
    expect(len(axes) > 0, "qmean_16x8 needs at least one axis")
    keep = bool(params.get("keepdims", False))
    return {"y": (tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes), "int16")}


def qmean_16x8_ref(ctx, p, x):
    """int16 mean over ``axes`` as LiteRT's QuantizedMeanOrSum: the exact sum rescaled by s_in / s_out with
    1 / count folded into the multiplier (the int8 arithmetic, saturated to int16)."""
    axes = tuple(sorted({int(a) % x.ndim for a in p["axes"]}))
    count = int(np.prod([x.shape[a] for a in axes]))
    total = x.astype(np.int64).sum(axis=axes, keepdims=bool(p.get("keepdims", False)))   # exact int sums
    m, shift = qmean_multiplier(p, count)
    return np.clip(multiply_by_quantized_multiplier(total, m, shift), INT16_MIN, INT16_MAX).astype(np.int16)


def _qmatmul_infer(specs, params):
    a, b = specs["a"], specs["b"]
    expect(a.dtype == "int16" and b.dtype == "int16", f"a and b must be int16: {a.describe()}, {b.describe()}")
    expect(len(a.shape) >= 2 and len(b.shape) >= 2 and a.shape[-1] == b.shape[-2],
           f"inner dims differ: {a.describe()} @ {b.describe()}")
    return {"y": (broadcast_shape(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), "int16")}


def qmatmul_16x8_ref(ctx, p, a, b):
    """int16 batched a @ b in exact integers, rescaled by (multiplier, shift), saturated (BATCH_MATMUL)."""
    acc = a.astype(np.int64) @ b.astype(np.int64)
    y = multiply_by_quantized_multiplier(acc, int(p["multiplier"]), int(p["shift"]))
    return np.clip(y, INT16_MIN, INT16_MAX).astype(np.int16)


# ----------------------------------------------------------------------------- softmax
def _round_half_away(v: float) -> float:
    return math.copysign(math.floor(abs(v) + 0.5), v)


def lut_int16(input_scale: float, input_zero_point: int, output_scale: float, fn) -> np.ndarray:
    """LiteRT's LUTPopulate<int16_t> in double: fn sampled at 512 steps over the int16 input range, each
    entry biased by half its interpolation error at the step's midpoint, plus the last point. (513,) int64."""
    input_min = input_scale * (INT16_MIN - input_zero_point)
    input_max = input_scale * (INT16_MAX - input_zero_point)
    inv = 65536.0 / (output_scale * INT16_MAX - output_scale * INT16_MIN)
    step = (input_max - input_min) / 512
    half_step = step / 2
    lut = []
    for i in range(512):
        val, val_mid, val_next = (fn(input_min + i * step), fn(input_min + i * step + half_step),
                                  fn(input_min + (i + 1) * step))
        sample = _round_half_away(val * inv)
        interp = _round_half_away((val_next * inv + _round_half_away(val * inv)) / 2)
        bias = _round_half_away((interp - _round_half_away(val_mid * inv)) / 2)
        lut.append(min(max(sample - bias, INT16_MIN), INT16_MAX))
    lut.append(min(max(_round_half_away(fn(input_max) * inv), INT16_MIN), INT16_MAX))
    return np.array(lut, np.int64)


@functools.cache
def softmax_luts_int16() -> tuple[np.ndarray, np.ndarray]:
    """The exp table over [-10, 0] and the 1 / (1 + x) table over [0, 1] of LiteRT's int16 SOFTMAX."""
    span = INT16_MAX - INT16_MIN
    return (lut_int16(10.0 / span, INT16_MAX, 2.0 / span, math.exp),
            lut_int16(1.0 / span, INT16_MIN, 2.0 / span, lambda v: 1.0 / (1.0 + v)))


def lut_lookup_int16(value: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """An int16 table lookup with 7 bits of linear interpolation between entries (lut_lookup)."""
    index = 256 + (value >> 7)
    base, slope = lut[index], lut[index + 1] - lut[index]
    return base + ((slope * (value & 0x7F) + 64) >> 7)


def qsoftmax_16x8_multiplier(p: dict) -> tuple[int, int]:
    """(multiplier, shift) taking an input difference to the exp table's [-65535, 0] for [-10, 0]: the input
    scale times beta in float32, over 10 / 65535 in double."""
    return quantize_multiplier(float(np.float32(p["input_scale"]) * np.float32(p.get("beta", 1.0))) / (10.0 / 65535.0))


def _softmax_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int16" and 1 <= len(x.shape) <= 4, f"x must be 1-D to 4-D int16, got {x.describe()}")
    return {"y": (x.shape, "int16")}


def qsoftmax_16x8_ref(ctx, p, x):
    """int16 SOFTMAX over the last axis (output scale 2**-15) as reference_ops::SoftmaxInt16: exps of the
    rescaled differences from the row maximum through the exp table, their int32 sum normalised by its
    leading zeros and inverted through the 1 / (1 + x) table, each exp times that reciprocal, rounded."""
    exp_lut, recip_lut = softmax_luts_int16()
    m, shift = qsoftmax_16x8_multiplier(p)
    xs = x.astype(np.int64)                                                    # (..., n)
    diff = xs - xs.max(axis=-1, keepdims=True)
    scaled = np.clip(multiply_by_quantized_multiplier(diff, m, shift) + 32767, INT16_MIN, INT16_MAX)
    exps = lut_lookup_int16(scaled, exp_lut)                                   # (..., n) Q0.15
    total = exps.sum(axis=-1, keepdims=True)                                   # (..., 1) int32
    headroom_plus_one = 32 - np.frexp(total.astype(np.float64))[1].astype(np.int64)  # CountLeadingZeros: 32 - bits
    shifted = ((total << (headroom_plus_one - 1)) + (1 << 13)) >> 14
    recip = lut_lookup_int16(np.clip(shifted - ((1 << 15) + (1 << 16)), INT16_MIN, INT16_MAX), recip_lut)
    right = 31 - headroom_plus_one
    y = (exps * recip + (np.int64(1) << (right - 1))) >> right
    return np.clip(y, 0, INT16_MAX).astype(np.int16)


# ----------------------------------------------------------------------------- logistic / tanh
# sigmoid(i / 24) for i in 0..255 in unsigned 0.16 fixed point, as LiteRT's sigmoid_table_uint16
# (tflite/kernels/internal/common.h, Apache-2.0).
SIGMOID_TABLE_UINT16 = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535,
], np.int64)                                                                   # (256,)


def sigmoid_input_rescale_16x8(input_scale: float, pot_shift: int | None) -> tuple[int, int]:
    """(multiplier, shift) taking an int16 LOGISTIC / TANH input to units of 1 / (3 * 4096) (a table step,
    1 / 24, is 512 of them; TANH reads sigmoid(2x), 256), as LiteRT's SigmoidPrepare / TanhPrepare: 3 << pot_shift for the
    power-of-two scales it takes that way (2**(pot_shift - 12)), else input_scale * 3 * 4096 doubled until
    past 32767 / 2 (at most 31 times), truncated."""
    if pot_shift is not None:
        return 3 << pot_shift, 0
    multiplier, shift = input_scale * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        multiplier *= 2.0
    return int(multiplier), shift


def _sigmoid_table_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "int16", f"x must be int16, got {x.describe()}")
    return {"y": (x.shape, "int16")}


def _table_interpolate(x: np.ndarray, p: dict, fraction_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """The rescaled input and the table interpolated at its magnitude with ``fraction_bits`` bits between
    entries (0.16 << fraction_bits), saturated to the last entry's ceiling past the table."""
    multiplier, shift = int(p["multiplier"]), int(p["shift"])
    rounding = (1 << (shift - 1)) if shift > 0 else 0
    v = (x.astype(np.int64) * multiplier + rounding) >> shift                   # x.shape, units of 1 / 12288
    magnitude = np.abs(v)
    index = magnitude >> fraction_bits                                          # x.shape, table entry below
    low = np.minimum(index, 254)
    a, b = SIGMOID_TABLE_UINT16[low], SIGMOID_TABLE_UINT16[low + 1]
    frac = magnitude & ((1 << fraction_bits) - 1)
    ceiling = 0x7FFF << 10 if fraction_bits == 9 else 0xFFFF << 8
    return v, np.where(index >= 255, ceiling, (a << fraction_bits) + frac * (b - a))


def qsigmoid_16x8_ref(ctx, p, x):
    """int16 LOGISTIC (output scale 2**-15) as reference_integer_ops::Logistic: the table interpolated with
    9 fraction bits, mirrored as 1 - sigmoid(-x) for negative inputs, rounded to 15 bits."""
    v, t = _table_interpolate(x, p, 9)
    y = np.where(v >= 0, t + (1 << 9), (1 << 25) - t + (1 << 9) - 1) >> 10
    return y.astype(np.int16)


def qtanh_16x8_ref(ctx, p, x):
    """int16 TANH (output scale 2**-15) as reference_integer_ops::Tanh: 2 * sigmoid(2x) - 1 through the
    same table interpolated with 8 fraction bits, odd-mirrored for negative inputs, rounded to 15 bits."""
    v, t = _table_interpolate(x, p, 8)
    y = np.where(v >= 0, t - (1 << 23) + (1 << 7), -t + (1 << 23) + (1 << 7) - 1) >> 8
    return y.astype(np.int16)


register(OpDef("qconv2d_16x8", "quantized", ("x", "weight", "bias?", "multiplier", "shift"), ("y",), _qconv_infer,
               qconv2d_16x8_ref, qconv2d_16x8_fast))
register(OpDef("qlinear_16x8", "quantized", ("x", "weight", "bias?", "scale"), ("y",), _qlinear_infer,
               qlinear_16x8_ref, qlinear_16x8_fast))
register(OpDef("qmax_pool2d_16x8", "quantized", ("x",), ("y",), _qpool_infer, qmax_pool2d_16x8_ref))
register(OpDef("qavg_pool2d_16x8", "quantized", ("x",), ("y",), _qpool_infer, qavg_pool2d_16x8_ref))
register(OpDef("quantize_16x8", "quantized", ("x",), ("y",), _quantize_infer, quantize_16x8_ref))
register(OpDef("dequantize_16x8", "quantized", ("x",), ("y",), _dequantize_infer, dequantize_16x8_ref))
register(OpDef("qrescale_16x8", "quantized", ("x",), ("y",), _rescale_infer, qrescale_16x8_ref))
register(OpDef("qadd_16x8", "quantized", ("a", "b"), ("y",), _binary_infer, qadd_16x8_ref))
register(OpDef("qmul_16x8", "quantized", ("a", "b"), ("y",), _binary_infer, qmul_16x8_ref))
register(OpDef("qmean_16x8", "quantized", ("x",), ("y",), _qmean_infer, qmean_16x8_ref))
register(OpDef("qmatmul_16x8", "quantized", ("a", "b"), ("y",), _qmatmul_infer, qmatmul_16x8_ref))
register(OpDef("qsoftmax_16x8", "quantized", ("x",), ("y",), _softmax_infer, qsoftmax_16x8_ref))
register(OpDef("qsigmoid_16x8", "quantized", ("x",), ("y",), _sigmoid_table_infer, qsigmoid_16x8_ref))
register(OpDef("qtanh_16x8", "quantized", ("x",), ("y",), _sigmoid_table_infer, qtanh_16x8_ref))
