"""Every vision op's fast path against its numpy reference on awkward shapes (int8 paths bit-exact),
and the int8 arithmetic against a line-by-line transcription of TFLite's C++."""

import numpy as np
import pytest

from volvox.ir.graph import TensorSpec
from volvox.ops import get_op
from volvox.ops.conv import same_padding
from volvox.ops.int8 import multiply_by_quantized_multiplier, quantize_multiplier, tflite_round

rng = np.random.default_rng(1234)


def run(op, params, *inputs, which="fast"):
    o = get_op(op)
    specs = {p: TensorSpec(p, x.shape, x.dtype.name) for p, x in zip(o.input_names, inputs) if x is not None}
    shape, dtype = o.infer(specs, params)["y"]
    y = (o.fast or o.ref)(None, params, *inputs) if which == "fast" else o.ref(None, params, *inputs)
    assert y.shape == tuple(shape) and y.dtype == np.dtype(dtype), (op, y.shape, shape, y.dtype, dtype)
    return y


CONV_CASES = [  # (x shape, (cout, kh, kw), groups, strides, dilations, pads)
    ((1, 7, 9, 3), (5, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1)),
    ((2, 8, 8, 4), (6, 3, 2), 1, (2, 1), (1, 1), (0, 1, 1, 0)),          # TF SAME-style asymmetric
    ((1, 11, 6, 3), (4, 3, 3), 1, (2, 2), (2, 1), (2, 0, 1, 2)),         # dilation
    ((1, 5, 5, 8), (8, 1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0)),          # 1x1 fast path
    ((1, 9, 7, 6), (6, 3, 3), 6, (1, 1), (1, 1), (1, 1, 1, 1)),          # depthwise
    ((1, 9, 7, 3), (6, 5, 5), 3, (2, 1), (1, 1), (2, 2, 2, 2)),          # depthwise, multiplier 2
    ((1, 6, 6, 8), (4, 3, 3), 2, (1, 2), (1, 1), (1, 0, 1, 1)),          # grouped
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("act", ["none", "relu6"])
def test_conv2d_fast_matches_ref(case, act):
    xs, (cout, kh, kw), groups, strides, dil, pads = case
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((cout, kh, kw, xs[3] // groups)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    p = dict(groups=groups, strides=list(strides), dilations=list(dil), pads=list(pads), activation=act)
    np.testing.assert_allclose(run("conv2d", p, x, w, b), run("conv2d", p, x, w, b, which="ref"), rtol=1e-4, atol=1e-4)


def test_conv2d_ref_matches_brute_force():
    x = rng.standard_normal((1, 6, 5, 4)).astype(np.float32)
    w = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    p = dict(groups=2, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 0, 2])
    y = run("conv2d", p, x, w, which="ref")
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 0), (0, 2), (0, 0)))
    for oh in range(y.shape[1]):
        for ow in range(y.shape[2]):
            for co in range(4):
                g = co // 2
                s = sum(xp[0, oh * 2 + i, ow + j * 2, g * 2 + c] * w[co, i, j, c]
                        for i in range(3) for j in range(2) for c in range(2))
                assert abs(s - y[0, oh, ow, co]) < 1e-5


def test_same_padding_matches_tensorflow_rule():
    assert same_padding(96, 3, 2) == (0, 1)   # odd pixel after, as TF
    assert same_padding(128, 5, 1) == (2, 2)
    assert same_padding(7, 4, 1, 2) == (3, 3)


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("p", [dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                               dict(kernel=[2, 3], strides=[1, 2], pads=[0, 1, 1, 0]),
                               dict(kernel=[3, 2], strides=[3, 2], pads=[0, 0, 0, 0])])
def test_pool_fast_matches_ref(op, p):
    x = rng.standard_normal((2, 7, 8, 3)).astype(np.float32)
    np.testing.assert_allclose(run(op, p, x), run(op, p, x, which="ref"), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op,params", [("sigmoid", {}), ("hard_sigmoid", {"alpha": 1 / 6, "beta": 0.5}),
                                       ("softmax", {"axis": 1}), ("softmax", {"axis": -1, "beta": 0.7}),
                                       ("reduce_mean", {"axes": [-1]}), ("reduce_mean", {"axes": [1, 2], "keepdims": False})])
def test_float_unary_fast_matches_ref(op, params):
    x = (rng.standard_normal((2, 3, 5, 7)) * 4).astype(np.float32)
    np.testing.assert_allclose(run(op, params, x), run(op, params, x, which="ref"), rtol=1e-5, atol=1e-6)


def test_sigmoid_kernel_at_the_extremes():
    x = np.array([-np.inf, -200, -88.5, -87, -30, -1e-8, 0, 1e-8, 1, 17, 30, 88.5, 200, np.inf, np.nan], np.float32)
    got = run("sigmoid", {}, x)
    with np.errstate(over="ignore"):
        want = 1 / (1 + np.exp(-x.astype(np.float64)))  # numpy's float64 exp: independent of the kernel
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=1e-37)
    assert np.isnan(got[-1]) and 0 <= got[0] < 2e-38 and got[-2] == 1  # e^x floors at e^-87


@pytest.mark.parametrize("op", ["div", "pow", "matmul"])
def test_float_binary_fast_matches_ref(op):
    a = np.abs(rng.standard_normal((2, 3, 4, 5))).astype(np.float32) + 0.1
    b = {"div": rng.uniform(0.5, 2, (1, 5)), "pow": np.array(2.0), "matmul": rng.standard_normal((3, 5, 6))}[op]
    b = b.astype(np.float32)
    np.testing.assert_allclose(run(op, {}, a, b), run(op, {}, a, b, which="ref"), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- int8
def _tflite_mbqm(x: int, m: int, shift: int) -> int:
    """TFLite MultiplyByQuantizedMultiplier, transcribed scalar by scalar from the C++."""
    left, right = max(shift, 0), max(-shift, 0)
    a = x * (1 << left)
    ab = a * m
    nudge = (1 << 30) if ab >= 0 else (1 - (1 << 30))
    v = ab + nudge
    high = abs(v) // (1 << 31) * (1 if v >= 0 else -1)  # C++ int64 division truncates toward zero
    mask = (1 << right) - 1
    rem = high & mask
    thr = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if rem > thr else 0)


def test_multiply_by_quantized_multiplier_matches_tflite():
    xs = rng.integers(-2 ** 24, 2 ** 24, 2000)
    reals = rng.uniform(1e-5, 0.9, 2000)
    pairs = [quantize_multiplier(r) for r in reals]
    got = multiply_by_quantized_multiplier(xs, np.array([m for m, _ in pairs]), np.array([s for _, s in pairs]))
    want = [_tflite_mbqm(int(x), m, s) for x, (m, s) in zip(xs, pairs)]
    assert got.tolist() == want
    for r, (m, s) in zip(reals, pairs):
        assert abs(m * 2.0 ** (s - 31) - r) <= r * 2 ** -30


def test_tflite_round_is_half_away_from_zero():
    assert tflite_round(np.array([0.5, 1.5, 2.5, -0.5, -2.5, 2.4999], np.float32)).tolist() == [1, 2, 3, -1, -3, 2]


def _qparams(cout, **extra):
    return (rng.integers(-5000, 5000, cout).astype(np.int32),
            np.array([quantize_multiplier(r)[0] for r in rng.uniform(1e-4, 0.02, cout)], np.int32),
            np.array([quantize_multiplier(r)[1] for r in rng.uniform(1e-4, 0.02, cout)], np.int32))


@pytest.mark.parametrize("case", CONV_CASES)
def test_qconv2d_fast_is_bit_exact(case):
    xs, (cout, kh, kw), groups, strides, dil, pads = case
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w = rng.integers(-127, 128, (cout, kh, kw, xs[3] // groups)).astype(np.int8)
    bias, m, s = _qparams(cout)
    p = dict(groups=groups, strides=list(strides), dilations=list(dil), pads=list(pads),
             input_zero_point=-7, output_zero_point=3, act_min=-128, act_max=100)
    y = run("qconv2d", p, x, w, bias, m, s)
    assert np.array_equal(y, run("qconv2d", p, x, w, bias, m, s, which="ref"))
    assert len(np.unique(y)) > 20  # not saturated: the test sees real rounding


def test_qlinear_fast_is_bit_exact():
    x = rng.integers(-128, 128, (3, 300)).astype(np.int8)
    w = rng.integers(-127, 128, (10, 300)).astype(np.int8)
    bias, m, s = _qparams(10)
    p = dict(input_zero_point=5, output_zero_point=-2)
    assert np.array_equal(run("qlinear", p, x, w, bias, m, s), run("qlinear", p, x, w, bias, m, s, which="ref"))


def test_qavg_pool_rounds_like_tflite():
    x = np.array([[-3, -2], [1, 1]], np.int8).reshape(1, 2, 2, 1)
    y = run("qavg_pool2d", dict(kernel=[2, 2], strides=[2, 2]), x)
    assert y.item() == -1  # (-3 - 2 + 1 + 1) = -3; (-3 - 2) / 4 truncates to -1 in C
    x = np.array([1, 2, 2, 2], np.int8).reshape(1, 2, 2, 1)
    assert run("qavg_pool2d", dict(kernel=[2, 2], strides=[2, 2]), x).item() == 2  # (7 + 2) / 4


def test_quantize_dequantize_roundtrip():
    x = np.array([-1.0, -0.25, 0.0, 0.125, 0.375, 10.0], np.float32)
    q = run("quantize", dict(scale=0.25, zero_point=-3), x)
    assert q.tolist() == [-7, -4, -3, -2, -1, 37]  # 0.125/0.25 = 0.5 -> 1 (away from zero); 1.5 -> 2
    assert run("dequantize", dict(scale=0.25, zero_point=-3), q).tolist() == [-1.0, -0.25, 0.0, 0.25, 0.5, 10.0]
