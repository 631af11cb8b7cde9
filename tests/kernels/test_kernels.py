"""volvox.cpu on every ISA tier this machine runs, against numpy references.

Tiers are switched in-process with ``volvox.cpu._set_isa_for_testing(tier)`` (the
same table VOLVOX_ISA selects at import); VOLVOX_ISA itself is tested in subprocesses.

Two references per quantized case:

* strict: the dequantized weights times the activation *after* the kernel's declared
  8-bit activation quantization, which is ggml's x86 one bit for bit (q8_0 / q8_1 per 32
  values: d = fp16(amax / 127), q = rint(x * (127 / amax)), q8_1's s = fp16(d * sum q);
  q8_K per 256: iscale = -127 / max, q = min(127, rint(iscale * x)), d = 1 / iscale),
  emulated in numpy. The integer dot products are exact, so only float rounding
  remains: |y - ref| <= 1e-6 * (|x_q| @ |w|.T) per element.
* float: the dequantized weights times the *unquantized* activation, by NMSE pooled
  over the case table. The error source is the activation rounding: variance d^2/12
  with d = amax/127. For Gaussian activations amax is ~2.4 sigma over 32 values
  (~3 sigma over 256), so the expected NMSE is ~3e-5 (32-blocks) / ~5e-5 (k-quants):
  a 1e-5 bound cannot hold for any 8-bit activation scheme. The bound is 2e-4
  (4x margin; ggml's test-backend-ops allows 5e-4 for mul_mat). f32 / f16 weights use
  the float activation directly: NMSE <= 1e-10.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from volvox import cpu as K
from volvox.errors import KernelError, ShapeError, VolvoxError
from volvox.ir.quant_blocks import GGML_FORMATS, QuantTensor, dequantize_ref, dequantize_rows_ref, quantize_ref

TIERS = K.available_isas()
QTYPES = ["q4_0", "q4_1", "q8_0", "q4_k", "q6_k"]
WTYPES = QTYPES + ["f32", "f16"]
MS = [1, 3, 17, 63]
NS = [1, 3, 17, 257, 1000]
NMSE_QUANT = 2e-4
NMSE_FLOAT = 1e-10


def kdim(wtype):
    """An awkward K per format: an odd number of blocks (exercises the pair-loop tail)."""
    return {"q4_k": 512, "q6_k": 768, "f32": 37, "f16": 101}.get(wtype, 160)


def make_weight(rng, wtype, n, k):
    """(weight argument for linear, its float32 (n, k) values)."""
    if wtype in ("q4_k", "q6_k"):
        fmt = GGML_FORMATS[wtype]
        nb = k // fmt.block_size
        raw = rng.integers(0, 256, (n, nb * fmt.type_size), dtype=np.uint8)
        blk = raw.reshape(n, nb, fmt.type_size)
        for off in ((0, 2) if wtype == "q4_k" else (208,)):
            blk[..., off:off + 2] = rng.uniform(0.001, 0.02, (n, nb, 1)).astype(np.float16).view(np.uint8)
        qt = QuantTensor(raw, wtype, (n, k))
        return qt, dequantize_ref(qt)
    if wtype == "f32":
        w = rng.standard_normal((n, k)).astype(np.float32)
        return w, w
    if wtype == "f16":
        w = rng.standard_normal((n, k)).astype(np.float16)
        return w, w.astype(np.float32)
    qt = quantize_ref(rng.standard_normal((n, k)).astype(np.float32), wtype)
    return qt, dequantize_ref(qt)


def ggml_q8_0(x):
    """numpy emulation of ggml's x86 quantize_row_q8_0 (AVX path): (q int8 (M, K),
    d float32 (M, K/32) = fp16(amax / 127)); q = rint(x * (127 / amax)), ties to even."""
    m, k = x.shape
    b = x.reshape(m, k // 32, 32)
    amax = np.abs(b).max(-1)                                            # (M, K/32)
    d = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore"):
        iscale = np.where(amax == 0, np.float32(0), np.float32(127) / amax).astype(np.float32)
    q = np.rint(b * iscale[..., None]).astype(np.int8).reshape(m, k)
    return q, d


def ggml_q8_1_s(x, q):
    """s of ggml's quantize_row_q8_1: fp16(d * sum(q)) with d = amax / 127 unrounded."""
    m, k = x.shape
    d = np.abs(x.reshape(m, k // 32, 32)).max(-1) / np.float32(127)
    total = q.reshape(m, k // 32, 32).astype(np.int32).sum(-1).astype(np.float32)
    return (d * total).astype(np.float16).astype(np.float32)


def ggml_q8_K(x):
    """numpy emulation of ggml's quantize_row_q8_K_ref: (q int8 (M, K), d float32 (M, K/256))."""
    m, k = x.shape
    b = x.reshape(m, k // 256, 256)
    mx = np.take_along_axis(b, np.abs(b).argmax(-1)[..., None], -1)[..., 0]  # first largest |x|
    with np.errstate(divide="ignore"):
        iscale = np.where(mx == 0, np.float32(0), np.float32(-127) / mx).astype(np.float32)
        d = np.where(mx == 0, np.float32(0), np.float32(1) / iscale).astype(np.float32)
    q = np.minimum(np.rint(b * iscale[..., None]), 127).astype(np.int8).reshape(m, k)
    return q, d


def quantize_activation(x, wtype):
    """The activation values the kernels multiply `wtype` weights with, float64 (M, K)."""
    m, k = x.shape
    if wtype in ("q4_k", "q6_k"):
        q, d = ggml_q8_K(x)
        blk = 256
    else:
        q, d = ggml_q8_0(x)
        blk = 32
    return (q.reshape(m, k // blk, blk) * d[..., None].astype(np.float64)).reshape(m, k)


def q4_1_offset_correction(x, w):
    """(M, N): what q8_1's fp16-rounded s adds to xq @ w.T for q4_1 weights w:
    sum over blocks of m_block * (s - d * sum(q))."""
    q, d = ggml_q8_0(x)
    m, k = x.shape
    sq = q.reshape(m, k // 32, 32).astype(np.float64).sum(-1)                     # (M, nb)
    ds = ggml_q8_1_s(x, q).astype(np.float64) - d.astype(np.float64) * sq          # (M, nb)
    mins = np.ascontiguousarray(w.data.reshape(w.shape[0], k // 32, 20)[..., 2:4]).view("<f2")[..., 0]
    return ds @ mins.astype(np.float64).T


def test_tiers_detected():
    assert TIERS and TIERS[0] == "generic"
    assert K.isa() == TIERS[-1]  # the best one by default
    assert set(TIERS) <= set(K.ALL_ISAS)


@pytest.mark.parametrize("wtype", WTYPES)
def test_linear_matches_reference(tier, wtype):
    rng = np.random.default_rng(abs(hash((tier, wtype))) % 2**32)
    k = kdim(wtype)
    err2 = ref2 = 0.0
    for n in NS:
        w, wf = make_weight(rng, wtype, n, k)
        wf64 = wf.astype(np.float64)
        for m in MS:
            x = rng.standard_normal((m, k)).astype(np.float32)
            y = K.linear(x, w)
            assert y.shape == (m, n) and y.dtype == np.float32
            exact = x.astype(np.float64) @ wf64.T
            err2 += float(((y - exact) ** 2).sum())
            ref2 += float((exact ** 2).sum())
            if wtype in QTYPES:
                xq = quantize_activation(x, wtype)
                strict = xq @ wf64.T
                if wtype == "q4_1":
                    strict += q4_1_offset_correction(x, w)
                scale = np.abs(xq) @ np.abs(wf64).T + 1e-30
                worst = float((np.abs(y - strict) / scale).max())
                assert worst <= 1e-6, f"{wtype} M={m} N={n}: {worst:.3g}"
    nmse = err2 / ref2
    assert nmse <= (NMSE_QUANT if wtype in QTYPES else NMSE_FLOAT), f"{wtype}: NMSE {nmse:.3g}"


@pytest.mark.parametrize("wtype", WTYPES)
def test_tiers_agree(wtype):
    rng = np.random.default_rng(5)
    k = kdim(wtype)
    w, wf = make_weight(rng, wtype, 257, k)
    x = rng.standard_normal((17, k)).astype(np.float32)
    before = K.isa()
    try:
        outs = {}
        for t in TIERS:
            K._set_isa_for_testing(t)
            outs[t] = K.linear(x, w)
    finally:
        K._set_isa_for_testing(before)
    scale = np.abs(x) @ np.abs(wf).T
    for t, y in outs.items():
        assert np.all(np.abs(y - outs["generic"]) <= 1e-6 * scale + 1e-30), t


def test_linear_vector_and_out(tier):
    rng = np.random.default_rng(1)
    w, _ = make_weight(rng, "q4_1", 40, 64)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    full = K.linear(x, w)
    y1 = K.linear(x[2], w)
    assert y1.shape == (40,)
    np.testing.assert_array_equal(y1, full[2])
    out = np.full((5, 40), np.nan, np.float32)
    assert K.linear(x, w, out=out) is out
    np.testing.assert_array_equal(out, full)
    out1 = np.empty(40, np.float32)
    assert K.linear(x[2], w, out=out1) is out1
    np.testing.assert_array_equal(out1, full[2])
    # non-contiguous inputs are copied, not rejected
    xt = np.asfortranarray(x)
    np.testing.assert_array_equal(K.linear(xt, w), full)
    # empty M
    assert K.linear(np.empty((0, 64), np.float32), w).shape == (0, 40)


def test_linear_threads_bit_identical():
    rng = np.random.default_rng(2)
    w, _ = make_weight(rng, "q8_0", 1000, 576)
    x = rng.standard_normal((3, 576)).astype(np.float32)
    n0 = K.get_num_threads()
    try:
        K.set_num_threads(1)
        y1 = K.linear(x, w)
        K.set_num_threads(2)
        y2 = K.linear(x, w)
        K.set_num_threads(3)
        y3 = K.linear(x, w)
    finally:
        K.set_num_threads(n0)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, y3)


def awkward_activations(rng, m, k):
    """float32 (m, k) with the cases where quantizers part ways, one per 32-block row:
    Gaussian, exact .5 ties (amax 127: x * 127 / amax = x), all zero, tiny (fp16
    subnormal d = amax / 127), huge, a block whose largest |x| appears as +a and -a."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0, :32] = np.arange(-15.5, 16.5, 1.0, dtype=np.float32)
    x[0, 31] = 127.0
    x[1 % m, 32:64] = 0.0
    x[2 % m, 64:96] *= np.float32(3e-4)
    x[3 % m, 96:128] *= np.float32(1e4)
    x[4 % m, 0:2] = [-9.0, 9.0]
    return x


@pytest.mark.parametrize("qtype", QTYPES)
def test_activation_quantization_is_ggml(tier, qtype):
    """The act rows equal ggml's x86 quantize_row_q8_0 / q8_1 / q8_K bit for bit."""
    rng = np.random.default_rng(11)
    k = 512
    x = awkward_activations(rng, 7, k)
    got = K._quantize_activation(x, qtype)
    if qtype in ("q4_k", "q6_k"):
        q, d = ggml_q8_K(x)
        np.testing.assert_array_equal(got["qs"], q)
        np.testing.assert_array_equal(got["d"].view(np.uint32), d.view(np.uint32))
        np.testing.assert_array_equal(got["bsums"], q.reshape(7, -1, 16).astype(np.int32).sum(-1))
        return
    q, d = ggml_q8_0(x)
    np.testing.assert_array_equal(got["qs"], q)
    np.testing.assert_array_equal(got["d"].view(np.uint32), d.view(np.uint32))
    if qtype == "q4_1":
        s = ggml_q8_1_s(x, q)
    else:  # q8_0 activations have no s; the kernels keep the exact d * sum(q)
        s = d * q.reshape(7, -1, 32).astype(np.int32).sum(-1).astype(np.float32)
    np.testing.assert_array_equal(got["s"].view(np.uint32), s.view(np.uint32))
    assert got["qs"][0, 15] == -0 and got["qs"][0, 16] == 0 and got["qs"][0, 18] == 2  # -0.5, 0.5, 2.5 tie to even


def test_q8_0_matches_gguf_reference():
    """Against gguf-py's quantize(Q8_0), ggml's *reference* q8_0 (quantize_row_q8_0_ref).

    d is the same fp16(amax / 127) bit for bit. The quants differ only where ggml's x86
    path itself differs from its reference: x86 scales by 127 / amax and rounds half to
    even; the reference scales by 1 / d (one ulp away at times) and rounds half away from
    zero. Everywhere else they are equal."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(12)
    x = awkward_activations(rng, 64, 576)
    ref = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0).reshape(64, 18, 34)
    ref_d = np.ascontiguousarray(ref[..., :2]).view(np.float16)[..., 0].astype(np.float32)
    ref_q = np.ascontiguousarray(ref[..., 2:]).view(np.int8).reshape(64, 576)
    got = K._quantize_activation(x, "q8_0")
    np.testing.assert_array_equal(got["d"], ref_d)
    b = x.reshape(64, 18, 32)
    amax = np.abs(b).max(-1, keepdims=True)
    d32 = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        v_ref = b * np.where(d32 == 0, np.float32(0), np.float32(1) / d32).astype(np.float32)
        v_x86 = b * np.where(amax == 0, np.float32(0), np.float32(127) / amax).astype(np.float32)
    # where the two rules part: .5 ties, and the ulp between 1 / d and 127 / amax
    may_differ = (np.sign(v_ref) * np.floor(np.abs(v_ref) + np.float32(0.5)) != np.rint(v_x86)).reshape(64, 576)
    np.testing.assert_array_equal(got["qs"][~may_differ], ref_q[~may_differ])
    assert (got["qs"] != ref_q).any()  # the tie row: 2.5 -> 2 on x86, 3 in the reference
    assert may_differ.mean() < 0.01


@pytest.mark.parametrize("wtype", ["q4_0", "q4_1", "q8_0"])
def test_simd_tiers_bit_identical(wtype):
    """avx2 and avx512 multiply in ggml's order: the same bits, every shape."""
    simd = [t for t in TIERS if t in ("avx2", "avx512")]
    if len(simd) < 2:
        pytest.skip("needs the avx2 and avx512 tiers")
    rng = np.random.default_rng(13)
    before = K.isa()
    try:
        for n, kk, m in [(1, 32, 1), (3, 96, 5), (257, 160, 17), (6, 576, 4)]:
            w, _ = make_weight(rng, wtype, n, kk)
            x = rng.standard_normal((m, kk)).astype(np.float32)
            outs = []
            for t in simd:
                K._set_isa_for_testing(t)
                outs.append(K.linear(x, w))
            np.testing.assert_array_equal(outs[0], outs[1])
    finally:
        K._set_isa_for_testing(before)


def test_quantize_activation_rejects_bad_input():
    with pytest.raises(ShapeError):
        K._quantize_activation(np.zeros((2, 48), np.float32), "q8_0")
    with pytest.raises(KernelError):
        K._quantize_activation(np.zeros((2, 64), np.float32), "f32")


@pytest.mark.parametrize("wtype", WTYPES)
def test_embedding(tier, wtype):
    rng = np.random.default_rng(4)
    d = kdim(wtype)
    table, tf = make_weight(rng, wtype, 50, d)
    for dt in (np.int32, np.int64):
        ids = np.array([0, 49, 7, 7, 23], dtype=dt)
        got = K.embedding(table, ids)
        assert got.shape == (5, d) and got.dtype == np.float32
        np.testing.assert_allclose(got, tf[ids], rtol=1e-6, atol=1e-7)
    assert K.embedding(table, np.array([], np.int64)).shape == (0, d)


def test_embedding_rejects_bad_ids():
    table = np.zeros((10, 4), np.float32)
    for bad in ([10], [-1], [0, 3, 99]):
        with pytest.raises(KernelError, match="outside"):
            K.embedding(table, np.array(bad, np.int64))
    with pytest.raises(KernelError):
        K.embedding(table, np.array([1.0]))
    with pytest.raises(KernelError):
        K.embedding(table, [1, 2])
    with pytest.raises(ShapeError):
        K.embedding(table, np.zeros((2, 2), np.int32))
    with pytest.raises(KernelError):
        K.embedding(table.astype(np.float64), np.array([1], np.int32))


def test_rms_norm(tier):
    rng = np.random.default_rng(6)
    for m, d in [(1, 576), (17, 64), (63, 33)]:
        x = rng.standard_normal((m, d)).astype(np.float32) * 3
        wt = rng.standard_normal(d).astype(np.float32)
        x64 = x.astype(np.float64)
        ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * wt
        np.testing.assert_allclose(K.rms_norm(x, wt, 1e-5), ref, rtol=2e-6, atol=1e-6)
        np.testing.assert_allclose(K.rms_norm(x[0], wt, 1e-5), ref[0], rtol=2e-6, atol=1e-6)
        out = np.empty_like(x)
        assert K.rms_norm(x, wt, 1e-5, out=out) is out
        np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6)
    with pytest.raises(ShapeError):
        K.rms_norm(x, wt[:-1], 1e-5)
    with pytest.raises(KernelError):
        K.rms_norm(x.astype(np.float64), wt, 1e-5)


def test_linear_rejects_bad_input():
    rng = np.random.default_rng(8)
    w, _ = make_weight(rng, "q4_0", 8, 64)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    with pytest.raises(KernelError):
        K.linear(x.astype(np.float64), w)                  # wrong dtype
    with pytest.raises(ShapeError):
        K.linear(x[:, :32].copy(), w)                       # wrong K
    with pytest.raises(ShapeError):
        K.linear(x.reshape(1, 2, 64), w)                    # wrong rank
    with pytest.raises(KernelError):
        K.linear(x, np.zeros((8, 64), np.int8))             # unsupported weight dtype
    with pytest.raises(KernelError):
        K.linear(x, "weights")
    with pytest.raises(ShapeError):
        K.linear(x, np.zeros(64, np.float32))               # 1-D weight
    with pytest.raises(KernelError):
        K.linear(x, w, out=np.empty((8, 2), np.float32).T)  # non-contiguous out
    with pytest.raises(KernelError):
        K.linear(x, w, out=np.empty((2, 8), np.float64))    # out dtype
    with pytest.raises(ShapeError):
        K.linear(x, w, out=np.empty((2, 9), np.float32))    # out shape
    ro = np.empty((2, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(KernelError):
        K.linear(x, w, out=ro)
    with pytest.raises(ShapeError):                          # K not a multiple of 32
        QuantTensor(np.zeros((8, 18), np.uint8), "q4_0", (8, 48))
    with pytest.raises(KernelError):
        K.set_num_threads(0)
    with pytest.raises(KernelError):
        K._set_isa_for_testing("bogus")


def test_real_smollm2_weights(tier, smollm2_gguf_path):
    gguf = pytest.importorskip("gguf")
    if not os.path.exists(smollm2_gguf_path):
        pytest.skip(f"SmolLM2 GGUF not found at {smollm2_gguf_path}")
    reader = gguf.GGUFReader(smollm2_gguf_path)
    tensors = {t.name: t for t in reader.tensors}
    rng = np.random.default_rng(9)
    for name in ("blk.0.ffn_down.weight", "blk.0.attn_k.weight", "token_embd.weight"):
        t = tensors[name]
        cols, rows = (int(v) for v in t.shape[:2])
        qt = QuantTensor(np.asarray(t.data), t.tensor_type.name.lower(), (rows, cols))
        wf = dequantize_ref(qt).astype(np.float64)
        x = rng.standard_normal((5, cols)).astype(np.float32)
        y = K.linear(x, qt)
        xq = quantize_activation(x, qt.qtype)
        strict = xq @ wf.T + (q4_1_offset_correction(x, qt) if qt.qtype == "q4_1" else 0.0)
        scale = np.abs(xq) @ np.abs(wf).T
        assert np.all(np.abs(y - strict) <= 1e-6 * scale), name
        exact = x.astype(np.float64) @ wf.T
        assert ((y - exact) ** 2).sum() / (exact ** 2).sum() <= NMSE_QUANT, name
        ids = np.array([0, rows - 1, rows // 3], np.int64)
        np.testing.assert_allclose(K.embedding(qt, ids), dequantize_rows_ref(qt, ids), rtol=1e-6, atol=1e-7)


def _run_with_isa(value):
    env = dict(os.environ, VOLVOX_ISA=value)
    code = ("import sys; from volvox import cpu as K\n"
            "sys.stdout.write(K.isa())\n")
    # cwd outside the source tree: the installed package (with its compiled kernels) must be imported
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=os.path.dirname(__file__))


@pytest.mark.parametrize("value", TIERS)
def test_volvox_isa_env_forces_tier(value):
    r = _run_with_isa(value)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == value


@pytest.mark.parametrize("value", ["bogus", "neon" if "avx2" in K.ALL_ISAS and "avx2" in TIERS else "avx2"])
def test_volvox_isa_env_rejects_unavailable(value):
    r = _run_with_isa(value)
    assert r.returncode != 0
    assert "KernelError" in r.stderr and value in r.stderr


def test_errors_are_volvox_errors():
    assert issubclass(KernelError, VolvoxError) and issubclass(ShapeError, VolvoxError)
