"""volvox.cpu's vision kernels on every ISA tier against the numpy references of
volvox/ops: f32 conv2d (dense via the packed GEMM, depthwise direct) within a float
error bound, int8 qconv2d bit-exact (the reference is the int64 transcription of TFLite's
arithmetic that tests/ops/test_vision_ops.py checks line by line), the packed f32 GEMM behind
cpu.linear against float64 numpy, thread-count independence, and bad input."""

import numpy as np
import pytest

from volvox import cpu as K
from volvox.errors import KernelError, ShapeError
from volvox.ops.conv import conv2d_ref
from volvox.ops.int8 import qconv2d_ref, quantize_multiplier

rng = np.random.default_rng(2026)


# (x shape, (cout, kh, kw), groups, strides, dilations, pads [top, left, bottom, right])
CASES = [
    ((1, 7, 9, 3), (5, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1)),
    ((2, 8, 8, 4), (6, 3, 2), 1, (2, 1), (1, 1), (0, 1, 1, 0)),             # TF SAME-style asymmetric
    ((1, 11, 6, 3), (4, 3, 3), 1, (2, 2), (2, 1), (2, 0, 1, 2)),            # dilation
    ((1, 5, 5, 8), (8, 1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0)),             # 1x1: x rows are GEMM rows
    ((2, 6, 7, 40), (70, 1, 1), 1, (2, 2), (1, 1), (0, 0, 1, 1)),           # strided 1x1, 70 = 2 panels + 6
    ((1, 13, 12, 17), (33, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1)),         # 156 pixels: 3 blocks, odd K
    ((1, 4, 4, 3), (2, 2, 2), 1, (1, 1), (1, 1), (3, 3, 3, 3)),             # pads wider than the kernel
    ((1, 9, 10, 48), (640, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1)),       # 20 panels (1.1 MB of weights), 90 pixels: 2 blocks
    ((2, 23, 21, 3), (40, 7, 7), 1, (2, 2), (1, 1), (3, 3, 2, 3)),          # a 3-channel stem: kernel rows of 21
    ((1, 6, 7, 100), (36, 3, 3), 1, (1, 1), (1, 1), (1, 0, 2, 1)),          # kernel rows of 300: K slices split them
    ((1, 9, 9, 5), (7, 3, 3), 1, (1, 1), (1, 2), (1, 2, 1, 2)),             # column dilation: im2col blocks
    ((1, 10, 11, 4), (6, 2, 2), 1, (3, 3), (1, 1), (1, 0, 0, 1)),           # stride over the kernel: im2col blocks
    ((1, 9, 7, 6), (6, 3, 3), 6, (1, 1), (1, 1), (1, 1, 1, 1)),             # depthwise
    ((1, 12, 12, 70), (70, 5, 5), 70, (2, 2), (1, 1), (1, 2, 2, 1)),        # depthwise 5x5, 70 channels
    ((2, 10, 11, 19), (19, 3, 3), 19, (1, 2), (2, 2), (2, 0, 2, 3)),        # depthwise dilated, odd C
    ((1, 16, 16, 24), (24, 3, 3), 24, (1, 1), (1, 1), (1, 1, 1, 1)),        # interior pixels 4 at a time
    ((1, 3, 3, 8), (8, 3, 3), 8, (1, 1), (1, 1), (4, 4, 4, 4)),             # depthwise, rows all padding
    ((1, 7, 13, 17), (17, 5, 5), 17, (1, 1), (1, 1), (2, 2, 2, 2)),         # 5x5 interior runs, C a vector + 1
    ((2, 6, 9, 33), (33, 3, 3), 33, (1, 1), (1, 1), (0, 0, 0, 0)),          # 3x3 unpadded, C two vectors + 1
    ((1, 5, 12, 40), (40, 5, 5), 40, (1, 1), (1, 1), (1, 1, 1, 1)),         # 5x5 under-padded: edge runs short
    ((1, 3, 4, 16), (16, 5, 5), 16, (1, 1), (1, 1), (2, 2, 2, 2)),          # map smaller than the kernel
    ((1, 9, 11, 7), (7, 3, 3), 7, (2, 2), (1, 1), (1, 1, 1, 1)),            # stride 2, odd sizes, C under a vector
    ((1, 8, 14, 3), (3, 3, 3), 3, (1, 1), (1, 1), (1, 1, 1, 1)),            # 3 channels: one partial vector
]
IDS = [f"{c[0]}-{c[1]}-g{c[2]}" for c in CASES]


def _params(case, act="none", **extra):
    xs, _, groups, strides, dil, pads = case
    return dict(groups=groups, strides=list(strides), dilations=list(dil), pads=list(pads), activation=act, **extra)


def _geometry(case):
    _, _, groups, strides, dil, pads = case
    return dict(strides=strides, dilations=dil, pads=pads, groups=groups)


def _nmse(y, ref):
    ref = ref.astype(np.float64)
    return float(np.sum((y - ref) ** 2) / max(np.sum(ref ** 2), 1e-30))


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("act", ["none", "relu", "relu6"])
def test_conv2d_f32(tier, case, act):
    xs, (cout, kh, kw), groups = case[0], case[1], case[2]
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((cout, kh, kw, xs[3] // groups)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    for bias in (b, None):
        y = K.conv2d(x, w, bias, activation=act, **_geometry(case))
        ref = conv2d_ref(None, _params(case, act), x, w, bias)
        assert y.shape == ref.shape and y.dtype == np.float32
        assert _nmse(y, ref) < 1e-12
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def _qinputs(case, zp_in):
    xs, (cout, kh, kw), groups = case[0], case[1], case[2]
    x = rng.integers(-128, 128, xs, dtype=np.int8)
    w = rng.integers(-127, 128, (cout, kh, kw, xs[3] // groups), dtype=np.int8)
    bias = rng.integers(-20000, 20000, cout).astype(np.int32)
    # per-channel scales around 1/(fan-in * 64) so outputs spread over the int8 range
    fan = kh * kw * xs[3] // groups
    pairs = [quantize_multiplier(float(s)) for s in rng.uniform(0.2, 4.0, cout) / (fan * 64)]
    mult = np.array([m for m, _ in pairs], np.int32)
    shift = np.array([s for _, s in pairs], np.int32)
    return x, w, bias, mult, shift


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("zps", [(0, 0, -128, 127), (-128, 5, -128, 127), (17, -3, -3, 127), (127, -128, -128, -1)])
def test_qconv2d_bit_exact(tier, case, zps):
    x, w, bias, mult, shift = _qinputs(case, zps[0])
    p = _params(case, input_zero_point=zps[0], output_zero_point=zps[1], act_min=zps[2], act_max=zps[3])
    for b in (bias, None):
        y = K.qconv2d(x, w, b, mult, shift, *zps, **_geometry(case))
        ref = qconv2d_ref(None, p, x, w, b, mult, shift)
        assert y.dtype == np.int8 and y.shape == ref.shape
        np.testing.assert_array_equal(y, ref)
        assert len(np.unique(y)) > 3 or zps[3] < 0  # the outputs are not all clamped


def test_qconv2d_per_tensor_and_extreme_requant(tier):
    """(1,) multiplier / shift broadcast; left shifts; large right shifts; saturating clamps."""
    case = CASES[0]
    x, w, bias, _, _ = _qinputs(case, 0)
    p = _params(case, input_zero_point=-7, output_zero_point=2, act_min=-128, act_max=127)
    for real in (1e-9, 3e-5, 0.7, 3.5):
        m, s = quantize_multiplier(real)
        mult, shift = np.array([m], np.int32), np.array([s], np.int32)
        y = K.qconv2d(x, w, bias, mult, shift, -7, 2, **_geometry(case))
        np.testing.assert_array_equal(y, qconv2d_ref(None, p, x, w, bias, mult, shift))


@pytest.mark.parametrize("edges", [False, True])
@pytest.mark.parametrize("C", [37, 8])  # 37: two full 16-channel blocks and a masked one; 8: pixel pairs
def test_qdwconv_requant_int32_lanes_and_their_fallbacks(tier, edges, C):
    """Depthwise requantization (no row sums) runs 16 channels (or two 8-channel pixels) in int32
    lanes where that equals the int64 arithmetic; a block with acc + bias or its left shift past
    int32, a right shift past 31 or an INT32_MIN multiplier falls back to int64 lanes: all
    bit-exact to the reference."""
    case = ((1, 6, 7, C), (C, 3, 3), C, (1, 1), (1, 1), (1, 1, 1, 1))
    x, w, bias, mult, shift = _qinputs(case, 4)
    if edges:
        bias[0], shift[0] = 2**31 - 50, 0               # acc + bias overflows int32
        bias[1], shift[1] = 10**6, 12                   # << 12 overflows int32
        shift[C // 2] = -40                             # right shift past 31
        mult[C - 3] = -2**31                            # INT32_MIN multiplier
        shift[C - 1], mult[C - 1] = 5, 2**31 - 1        # large left shift, saturating output
    p = _params(case, input_zero_point=4, output_zero_point=-9, act_min=-100, act_max=120)
    y = K.qconv2d(x, w, bias, mult, shift, 4, -9, -100, 120, **_geometry(case))
    ref = qconv2d_ref(None, p, x, w, bias, mult, shift)
    np.testing.assert_array_equal(y, ref)
    assert len(np.unique(ref[..., 2:C // 2])) > 3


@pytest.mark.parametrize("groups", [1, 32])
def test_dead_channels_requantize_in_int32_lanes(tier, groups):
    """A TFLite export's near-zero weights give channels a bias near 2^30 and a right shift of 31
    (the person detector's 6x6 layers: most of their channels). Their int32 lanes still equal
    the int64 reference: h + 2^30 passes 2^31 - 1 there, and those lanes round as unsigned;
    outputs are both 0 and 1 (+ zp) around h = 2^30."""
    case = ((1, 5, 6, 32), (32, 3, 3), groups, (1, 1), (1, 1), (1, 1, 1, 1))
    x, w, _, _, _ = _qinputs(case, 2)
    w = (w // 32).astype(np.int8)                          # small weights: acc within +-2^21
    bias = (2**30 + rng.integers(-2**20, 2**20, 32)).astype(np.int32)
    mult = (2**31 - 1 - rng.integers(0, 2**10, 32)).astype(np.int32)
    shift = np.full(32, -31, np.int32)
    p = _params(case, input_zero_point=2, output_zero_point=-7, act_min=-128, act_max=127)
    y = K.qconv2d(x, w, bias, mult, shift, 2, -7, -128, 127, **_geometry(case))
    ref = qconv2d_ref(None, p, x, w, bias, mult, shift)
    np.testing.assert_array_equal(y, ref)
    assert set(np.unique(ref)) == {-7, -6}


def test_requant_near_int32_edges_with_no_right_shift(tier):
    """acc + bias at -(2^31 - 1) with no right shift: q + zp_out would pass INT32_MIN in int32
    lanes, so such a block keeps the int64 ones; the output is the reference's -128."""
    x = np.full((1, 3, 3, 4), 127, np.int8)
    w = np.full((16, 1, 1, 4), -128, np.int8)
    bias = np.full(16, -(2**31 - 1 - 4 * 255 * 128), np.int32)
    mult, shift = np.full(16, 2**31 - 1, np.int32), np.zeros(16, np.int32)
    case = ((1, 3, 3, 4), (16, 1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0))
    p = _params(case, input_zero_point=-128, output_zero_point=-128, act_min=-128, act_max=127)
    y = K.qconv2d(x, w, bias, mult, shift, -128, -128, -128, 127, **_geometry(case))
    ref = qconv2d_ref(None, p, x, w, bias, mult, shift)
    np.testing.assert_array_equal(y, ref)
    assert (ref == -128).all()


@pytest.mark.parametrize("cout", [1, 2, 4, 8, 12, 24, 40])  # 16 / cout pixels per vector; masked; two panels
@pytest.mark.parametrize("edges", [False, True])
def test_qgemm_requant_in_registers_and_its_fallbacks(tier, cout, edges):
    """Dense int8 convs requantize in int32 lanes when every channel's bound allows it (the zero
    point folded into the bias). A channel whose bias + accumulator, or its left shift, could
    leave int32, a right shift past 31 or an INT32_MIN multiplier sends its block to the int64 lanes,
    and a bias the zero point cannot fold into keeps the row sums: all bit-exact to the reference."""
    case = ((2, 7, 9, 5), (cout, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1))
    x, w, bias, mult, shift = _qinputs(case, -3)
    if edges:
        bias[0] = 2**31 - 70                                 # folding overflows int32: row sums kept
        if cout > 1:
            bias[1], shift[1] = 2**28, 3                     # folds, but << 3 leaves int32
        if cout > 2:
            shift[2] = -35                                   # right shift past 31
        if cout > 3:
            mult[3] = -2**31                                 # INT32_MIN multiplier
        shift[-1], mult[-1] = 4, 2**31 - 1                   # left shift, saturating output
    p = _params(case, input_zero_point=-3, output_zero_point=6, act_min=-120, act_max=127)
    y = K.qconv2d(x, w, bias, mult, shift, -3, 6, -120, 127, **_geometry(case))
    ref = qconv2d_ref(None, p, x, w, bias, mult, shift)
    np.testing.assert_array_equal(y, ref)
    plain = ref[..., 4:-1] if edges else ref  # (N, OH, OW, channels left unedited)
    assert plain.size == 0 or len(np.unique(plain)) > 3


@pytest.mark.parametrize("m,n,k", [(16, 33, 5), (40, 6625 // 25, 120), (23, 64, 17), (100, 7, 300), (17, 96, 1),
                                   (49, 70, 1100)])  # K in 5 slices of 220
def test_linear_f32_packed_gemm(tier, m, n, k):
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    y = K.linear(x, w)
    assert _nmse(y, ref) < 1e-12
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    out = np.empty((m, n), np.float32)
    assert K.linear(x, w, out=out) is out and np.array_equal(out, y)
    # f16 weights take the same packed GEMM, each panel widened to f32 (exact) as it is packed
    w16 = w.astype(np.float16)
    np.testing.assert_array_equal(K.linear(x, w16), K.linear(x, w16.astype(np.float32)))


@pytest.mark.parametrize("k,n", [(1, 1), (3, 5), (7, 33), (240, 960), (960, 240), (1151, 47), (20, 480)])
@pytest.mark.parametrize("act", ["none", "relu", "relu6"])
def test_one_pixel_1x1_conv_takes_the_one_row_gemm(tier, k, n, act):
    """A 1x1 conv with one output pixel (an SE block's squeeze / excite on a 1x1 map) runs the one-row
    GEMM (SV_PHASES partial sums per output): K not a multiple of them, N not of a panel or of a
    vector, against float64; the same bits at 2 threads (whole panels per thread)."""
    x = rng.standard_normal((1, 1, 1, k)).astype(np.float32)
    w = rng.standard_normal((n, 1, 1, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    before = K.get_num_threads()
    try:
        for bias in (b, None):
            runs = []
            for t in (1, 2):
                K.set_num_threads(t)
                runs.append(K.conv2d(x, w, bias, activation=act))
            ref = conv2d_ref(None, dict(activation=act), x, w, bias)
            assert runs[0].shape == ref.shape == (1, 1, 1, n)
            np.testing.assert_allclose(runs[0], ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))
            assert np.array_equal(runs[0], runs[1])
    finally:
        K.set_num_threads(before)


@pytest.mark.parametrize("m", [49, 50, 57, 21, 28, 41])  # 16+ rows: the GEMM, not the GEMV
def test_gemm_rows_do_not_depend_on_their_tile(tier, m):
    """The packed f32 GEMM ends a row count that is not a multiple of its tile height in tiles
    one row shorter (49 rows: 7 of 7); each row's sums are those of the same rows in a run of
    whole tiles (64 rows), bit for bit, and the numpy reference's."""
    x = rng.standard_normal((64, 96)).astype(np.float32)
    w = rng.standard_normal((40, 96)).astype(np.float32)
    whole = K.linear(x, w)
    y = K.linear(x[:m], w)
    np.testing.assert_array_equal(y, whole[:m])
    np.testing.assert_allclose(y, x[:m].astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4, atol=1e-3)


def test_results_independent_of_threads():
    before = K.get_num_threads()
    x = rng.standard_normal((2, 20, 20, 16)).astype(np.float32)
    w = rng.standard_normal((48, 3, 3, 16)).astype(np.float32)
    dw = rng.standard_normal((16, 3, 3, 1)).astype(np.float32)
    xq, wq, bq, mq, sq = _qinputs(((2, 20, 20, 16), (48, 3, 3), 1), 0)
    a = rng.standard_normal((64, 512)).astype(np.float32)
    wl = rng.standard_normal((300, 512)).astype(np.float32)
    runs = []
    try:
        for t in (1, 2):
            K.set_num_threads(t)
            runs.append((K.conv2d(x, w, pads=(1, 1, 1, 1)), K.conv2d(x, dw, groups=16, pads=(1, 1, 1, 1)),
                         K.qconv2d(xq, wq, bq, mq, sq, 3, -2, pads=(1, 1, 1, 1)), K.linear(a, wl)))
    finally:
        K.set_num_threads(before)
    for r1, r2 in zip(*runs):
        assert np.array_equal(r1, r2)


@pytest.mark.parametrize("groups", [1, 8])
def test_weight_packing_cache(groups):
    """Read-only weights are packed once (cached per weight object, dropped with it); writeable
    weights are repacked per call, so in-place changes show."""
    x = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    xq = rng.integers(-128, 128, (1, 6, 6, 8), dtype=np.int8)
    ones = np.ones(8, np.int32) << 30
    shift = np.full(8, -6, np.int32)
    p = dict(groups=groups, pads=[1, 1, 1, 1])

    def both(w, wq):
        return (K.conv2d(x, w, pads=(1, 1, 1, 1), groups=groups),
                K.qconv2d(xq, wq, None, ones, shift, 0, 0, pads=(1, 1, 1, 1), groups=groups))

    for _ in range(3):  # fresh read-only weights each time (ids may be reused after a weight dies)
        w = rng.standard_normal((8, 3, 3, 8 // groups)).astype(np.float32)
        wq = rng.integers(-127, 128, w.shape, dtype=np.int8)
        w.flags.writeable = wq.flags.writeable = False
        for _ in range(2):
            y, yq = both(w, wq)
            np.testing.assert_allclose(y, conv2d_ref(None, p, x, w), rtol=1e-4, atol=1e-4)
            qp = dict(p, input_zero_point=0, output_zero_point=0)
            np.testing.assert_array_equal(yq, qconv2d_ref(None, qp, xq, wq, None, ones, shift))
        del w, wq
    w = rng.standard_normal((8, 3, 3, 8 // groups)).astype(np.float32)
    wq = rng.integers(-127, 128, w.shape, dtype=np.int8)
    both(w, wq)
    w *= 2
    wq //= 2
    y, yq = both(w, wq)
    np.testing.assert_allclose(y, conv2d_ref(None, p, x, w), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(yq, qconv2d_ref(None, dict(p, input_zero_point=0, output_zero_point=0),
                                                  xq, wq, None, ones, shift))


def test_conv_kernels_reject_bad_input():
    x = np.zeros((1, 5, 5, 4), np.float32)
    w = np.zeros((2, 3, 3, 4), np.float32)
    with pytest.raises(KernelError):
        K.conv2d(x.astype(np.float64), w)
    with pytest.raises(KernelError):
        K.conv2d(list(x), w)
    with pytest.raises(ShapeError):
        K.conv2d(x[0], w)                                  # not NHWC
    with pytest.raises(ShapeError):
        K.conv2d(x, np.zeros((2, 3, 3, 3), np.float32))   # channel mismatch
    with pytest.raises(ShapeError):
        K.conv2d(x, np.zeros((8, 3, 3, 2), np.float32), groups=2)  # grouped, not depthwise
    with pytest.raises(ShapeError):
        K.conv2d(x, np.zeros((2, 7, 7, 4), np.float32))   # kernel larger than the input
    with pytest.raises(ShapeError):
        K.conv2d(x, w, strides=(0, 1))
    with pytest.raises(ShapeError):
        K.conv2d(x, w, pads=(-1, 0, 0, 0))
    with pytest.raises(ShapeError):
        K.conv2d(x, w, np.zeros(3, np.float32))           # bias length
    with pytest.raises(KernelError):
        K.conv2d(x, w, activation="gelu")
    xq, wq = np.zeros((1, 5, 5, 4), np.int8), np.zeros((2, 3, 3, 4), np.int8)
    ones = np.ones(2, np.int32)
    with pytest.raises(KernelError):
        K.qconv2d(xq.astype(np.uint8), wq, None, ones, ones, 0, 0)
    with pytest.raises(ShapeError):
        K.qconv2d(xq, wq, None, np.ones(3, np.int32), ones, 0, 0)   # multiplier length
    with pytest.raises(ShapeError):
        K.qconv2d(xq, wq, None, ones.astype(np.int64), ones, 0, 0)  # multiplier dtype
    with pytest.raises(ShapeError):
        K.qconv2d(xq, wq, ones.astype(np.float32), ones, ones, 0, 0)  # bias dtype
    with pytest.raises(KernelError):
        K.qconv2d(xq, wq, None, ones, ones, 200, 0)                 # zero point out of int8
    with pytest.raises(KernelError):
        K.qconv2d(xq, wq, None, ones, ones, 0, 0, act_min=5, act_max=4)
