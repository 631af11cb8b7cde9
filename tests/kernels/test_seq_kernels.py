"""volvox.cpu attention / rope / swiglu on every ISA tier, against the numpy op references
(volvox.ops attention_ref, rope_ref, swiglu_ref) and, for RoPE, against an emulation of
ggml's float32 arithmetic built from libm's cosf / sinf."""

import ctypes
import ctypes.util
import hashlib

import numpy as np
import pytest

from volvox import cpu as K
from volvox.errors import KernelError, ShapeError
from volvox.ops.attention import attention_fast, attention_ref, rope_fast, rope_ref
from volvox.ops.cross_attention import SourceContext, cross_attention_fast, cross_attention_ref
from volvox.ops.elementwise import silu_fast, silu_ref
from volvox.ops.fused import swiglu_fast, swiglu_ref
from volvox.ops.context import BatchContext
from volvox.ops.context import RunContext
from volvox.runtime.kv_cache import KVCache


def run_attention(fn, rng, nh, nkv, hd, chunks, window=0, softcap=0.0):
    """Feed `chunks` (new rows per call) through fn with a fresh KV cache; all outputs."""
    p = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "layer": 1, "window": window, "softcap": softcap}
    ctx = RunContext(kv=KVCache(2, nkv, hd, 512))
    outs = []
    for n in chunks:
        q = rng.standard_normal((n, nh * hd)).astype(np.float32) * 2
        k = rng.standard_normal((n, nkv * hd)).astype(np.float32) * 2
        v = rng.standard_normal((n, nkv * hd)).astype(np.float32)
        outs.append(fn(ctx, p, q, k, v))
        ctx.pos += n
    return outs, ctx


@pytest.mark.parametrize("nh,nkv,hd,chunks,window", [
    (9, 3, 64, [5, 1, 1, 1], 0),      # SmolLM2: prefill then decode steps
    (4, 4, 24, [1, 17, 3], 0),         # MHA, head_dim not a multiple of 32 (dot leftovers)
    (6, 2, 20, [37, 1], 0),            # head_dim not a multiple of 8
    (2, 1, 64, [30, 1, 9], 7),         # sliding window
])
def test_attention_matches_reference(tier, nh, nkv, hd, chunks, window):
    seed = abs(hash((tier, nh, hd))) % 2**32
    got, ctx_f = run_attention(attention_fast, np.random.default_rng(seed), nh, nkv, hd, chunks, window)
    want, ctx_r = run_attention(attention_ref, np.random.default_rng(seed), nh, nkv, hd, chunks, window)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # the fast path appended to the cache exactly like the reference
    total = sum(chunks)
    np.testing.assert_array_equal(ctx_f.kv.keys[1][:, :total], ctx_r.kv.keys[1][:, :total])
    np.testing.assert_array_equal(ctx_f.kv.values[1][:, :total], ctx_r.kv.values[1][:, :total])


@pytest.mark.parametrize("nh,nkv,hd,chunks,window", [(8, 4, 32, [9, 1, 1], 0), (4, 2, 20, [13, 1], 6)])
def test_softcapped_attention_matches_reference(tier, nh, nkv, hd, chunks, window):
    """Gemma 2's soft-capped scores (queries scaled first, cap * tanhf(s / cap)) in the kernel, prefill
    and decode steps, against the numpy reference."""
    seed = abs(hash((tier, nh, hd, "softcap"))) % 2**32
    got, _ = run_attention(attention_fast, np.random.default_rng(seed), nh, nkv, hd, chunks, window, softcap=1.5)
    want, _ = run_attention(attention_ref, np.random.default_rng(seed), nh, nkv, hd, chunks, window, softcap=1.5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_softcap_is_libm_tanhf():
    """cpu.softcap computes ggml's cap * tanhf(x * (1 / cap)) bit for bit (libm's tanhf, which numpy's
    float32 tanh is not)."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.tanhf.restype, libm.tanhf.argtypes = ctypes.c_float, [ctypes.c_float]
    x = (np.random.default_rng(0).standard_normal((7, 300)) * 40).astype(np.float32)
    cap = np.float32(30.0)
    inv = np.float32(1) / cap
    want = np.array([np.float32(libm.tanhf(float(v * inv))) * cap for v in x.reshape(-1)], np.float32)
    np.testing.assert_array_equal(K.softcap(x, 30.0).reshape(-1), want)


def test_attention_without_cache_and_batched(tier):
    rng = np.random.default_rng(3)
    p = {"n_heads": 4, "n_kv_heads": 2, "head_dim": 16}
    q, k, v = (rng.standard_normal((6, n)).astype(np.float32) for n in (64, 32, 32))
    np.testing.assert_allclose(attention_fast(RunContext(), p, q, k, v), attention_ref(RunContext(), p, q, k, v),
                               rtol=1e-5, atol=1e-6)
    ctxs = [RunContext(kv=KVCache(1, 2, 16, 64)) for _ in range(2)]
    got = attention_fast(BatchContext([(ctxs[0], 2), (ctxs[1], 4)]), p, q, k, v)
    ctxs = [RunContext(kv=KVCache(1, 2, 16, 64)) for _ in range(2)]
    want = attention_ref(BatchContext([(ctxs[0], 2), (ctxs[1], 4)]), p, q, k, v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nh, nkv, seq", [(4, 2, 7), (3, 3, 1), (6, 2, 33)])
def test_non_causal_attention_matches_reference(tier, nh, nkv, seq):
    """An encoder's self-attention (causal false, no KV cache) runs in the kernel, every row over every key."""
    rng = np.random.default_rng(seq)
    hd = 16
    p = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "causal": False}
    q, k, v = (rng.standard_normal((seq, n * hd)).astype(np.float32) for n in (nh, nkv, nkv))
    np.testing.assert_allclose(attention_fast(RunContext(), p, q, k, v), attention_ref(RunContext(), p, q, k, v),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seq, source", [(1, 9), (5, 3), (4, 37)])
def test_cross_attention_kernel_matches_reference(tier, seq, source):
    """Decoder rows over an encoded input of another length, through the non-causal kernel."""
    rng = np.random.default_rng(source)
    nh, hd = 3, 8
    p = {"n_heads": nh, "head_dim": hd, "layer": 1}
    cross = [tuple(rng.standard_normal((nh, source, hd)).astype(np.float32) for _ in range(2)) for _ in range(2)]
    ctx = SourceContext(cross=cross)
    q = rng.standard_normal((seq, nh * hd)).astype(np.float32)
    np.testing.assert_allclose(cross_attention_fast(ctx, p, q), cross_attention_ref(ctx, p, q), rtol=1e-5, atol=1e-6)


def test_attention_threads_bit_identical():
    n0 = K.get_num_threads()
    outs = []
    try:
        for n in (1, 2, 3):
            K.set_num_threads(n)
            outs.append(run_attention(attention_fast, np.random.default_rng(4), 9, 3, 64, [40, 1])[0])
    finally:
        K.set_num_threads(n0)
    for o in outs[1:]:
        for a, b in zip(o, outs[0]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("nh, nkv, hd, start, window", [(9, 3, 64, 2047, 0), (8, 2, 48, 300, 0), (8, 1, 32, 77, 50),
                                                        (4, 2, 20, 9, 0)])
def test_decode_attention_of_a_kv_group_equals_its_heads_alone(nh, nkv, hd, start, window):
    """A single query row's work items are kv heads, each running its query heads together (each K / V
    row read once for all): every head's output has the bits it has with a kv head of its own."""
    rng = np.random.default_rng(nh * hd + start)
    kc = rng.standard_normal((nkv, start + 8, hd)).astype(np.float32)
    vc = rng.standard_normal((nkv, start + 8, hd)).astype(np.float32)
    q = rng.standard_normal((1, nh * hd)).astype(np.float32)
    grouped = K.attention(q, kc, vc, start, nh, hd ** -0.5, window=window)
    own = np.ascontiguousarray(np.repeat(kc, nh // nkv, axis=0)), np.ascontiguousarray(np.repeat(vc, nh // nkv, axis=0))
    alone = K.attention(q, own[0], own[1], start, nh, hd ** -0.5, window=window)
    np.testing.assert_array_equal(grouped.view(np.uint32), alone.view(np.uint32))


def test_attention_rejects_bad_input():
    kc = np.zeros((2, 8, 16), np.float32)
    q = np.zeros((3, 64), np.float32)
    K.attention(q, kc, kc, 5, 4, 0.25)  # fills rows 5..7: fine
    with pytest.raises(ShapeError, match="outside"):
        K.attention(q, kc, kc, 6, 4, 0.25)
    with pytest.raises(ShapeError):
        K.attention(q, kc, kc, -1, 4, 0.25)
    with pytest.raises(ShapeError):
        K.attention(q, kc, kc, 0, 3, 0.25)                 # 3 heads over 2 kv heads
    with pytest.raises(ShapeError):
        K.attention(q[:, :48].copy(), kc, kc, 0, 4, 0.25)  # q width
    with pytest.raises(ShapeError):
        K.attention(q, kc, kc[:, :4].copy(), 0, 4, 0.25)   # k / v caches differ
    with pytest.raises(KernelError, match="non-causal"):
        K.attention(q, kc, kc, 2, 4, 0.25, causal=False)   # not causal: every row sees the whole cache
    with pytest.raises(KernelError):
        K.attention(q.astype(np.float64), kc, kc, 0, 4, 0.25)
    with pytest.raises(KernelError):
        K.attention(q, kc.transpose(1, 0, 2), kc, 0, 4, 0.25)  # not C-contiguous
    with pytest.raises(KernelError):
        K.attention(q, kc, kc, 0, 4, 0.25, window=-1)


def _libm():
    lib = ctypes.CDLL(ctypes.util.find_library("m"))
    for name in ("cosf", "sinf", "powf"):
        getattr(lib, name).restype = ctypes.c_float
    lib.cosf.argtypes = lib.sinf.argtypes = [ctypes.c_float]
    lib.powf.argtypes = [ctypes.c_float, ctypes.c_float]
    return lib


def ggml_rope_rows(x, positions, hd, rd, base, interleaved):
    """ggml's f32 rope (ggml_rope_cache_init + rotate_pairs), emulated: theta by repeated
    float32 multiplication, libm cosf / sinf, x0*cos - x1*sin with one rounding for x0*cos."""
    lib, f32 = _libm(), np.float32
    ts = f32(lib.powf(f32(base), f32(-2.0) / f32(rd)))
    h = x.reshape(x.shape[0], -1, hd).astype(np.float64)
    y = h.astype(f32).copy()
    for r, pos in enumerate(positions):
        theta = f32(pos)
        for k in range(rd // 2):
            c, s = np.float64(lib.cosf(theta)), np.float64(lib.sinf(theta))
            i0, i1 = (2 * k, 2 * k + 1) if interleaved else (k, k + rd // 2)
            x0, x1 = h[r, :, i0], h[r, :, i1]
            y[r, :, i0] = (x0 * c - (x1 * s).astype(f32)).astype(f32)  # fma(x0, c, -(x1 s))
            y[r, :, i1] = (x0 * s + (x1 * c).astype(f32)).astype(f32)  # fma(x0, s, x1 c)
            theta = f32(theta * ts)
    return y.reshape(x.shape)


@pytest.mark.parametrize("style", ["interleaved", "half"])
def test_rope(tier, style):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 3 * 64)).astype(np.float32)
    pos = np.array([0, 1, 2, 77, 500, 4095], np.int64)
    for rd, theta, scale in [(64, 100000.0, 1.0), (32, 10000.0, 1.0), (64, 10000.0, 4.0)]:
        p = {"head_dim": 64, "rope_dim": rd, "theta": theta, "style": style, "scale": scale}
        got = rope_fast(None, p, x, pos)
        # float32 angles (as ggml) vs float64 ones: |error| grows with the angle, ~pos * 1e-7
        np.testing.assert_allclose(got, rope_ref(None, p, x, pos), rtol=0, atol=2e-3)
        np.testing.assert_allclose(got[:3], rope_ref(None, p, x[:3], pos[:3]), rtol=0, atol=2e-6)
        if scale == 1.0:
            np.testing.assert_array_equal(got, ggml_rope_rows(x, pos, 64, rd, theta, style == "interleaved"))
    p = {"head_dim": 64, "style": style, "llama3": {"factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0, "original_context": 8192}}
    np.testing.assert_array_equal(rope_fast(None, p, x, pos), rope_ref(None, p, x, pos))  # reference path
    with pytest.raises(ShapeError):
        K.rope(x, pos[:3], 64)
    with pytest.raises(ShapeError):
        K.rope(x, pos, 64, rope_dim=63)
    with pytest.raises(ShapeError):
        K.rope(x, pos, 50)
    with pytest.raises(KernelError):
        K.rope(x, pos, 64, theta=0.0)


def test_swiglu(tier):
    rng = np.random.default_rng(6)
    for rows, f in [(1, 1536), (5, 37), (3, 8)]:
        x = (rng.standard_normal((rows, 2 * f)) * 4).astype(np.float32)
        x[0, :4] = [-100.0, 100.0, -0.0, 88.0]  # the expf flush paths
        want = swiglu_ref(None, {}, x)
        got = swiglu_fast(None, {}, x)
        # float32 silu by exp (kernel) vs by tanh (reference): a few ulp of the larger terms
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    np.testing.assert_array_equal(swiglu_fast(None, {}, x.reshape(1, rows, 2 * f)), got[None])
    # silu then a float32 multiply is the fused op, bit for bit (fusion passes change nothing)
    np.testing.assert_array_equal(silu_fast(None, {}, x[:, :f]) * x[:, f:], got)
    x3 = x.reshape(rows, 2, f)
    np.testing.assert_allclose(silu_fast(None, {}, x3), silu_ref(None, {}, x3), rtol=1e-5, atol=1e-6 * np.abs(x).max())
    with pytest.raises(ShapeError):
        K.swiglu(np.zeros((2, 5), np.float32))
    with pytest.raises(KernelError):
        K.swiglu(np.zeros((2, 4), np.float64))
    with pytest.raises(KernelError):
        K.silu(np.zeros(4, np.float64))
    assert K.silu(np.zeros((0, 3), np.float32)).shape == (0, 3)


def simd_attention_digest():
    """sha256 of attention (the dot chains, the vector expf, the weighted-sum trees) on fixed inputs."""
    rng = np.random.default_rng(11)
    outs = []
    for nh, nkv, hd, start, seq, window, amp in [(9, 3, 64, 0, 5, 0, 2.0), (9, 3, 64, 5, 1, 0, 2.0),
                                                 (4, 4, 80, 40, 1, 0, 1.0), (6, 2, 48, 3, 30, 0, 1.0),
                                                 (2, 1, 128, 70, 1, 7, 1.0), (4, 2, 20, 9, 3, 0, 1.0),
                                                 (4, 1, 32, 100, 1, 0, 30.0), (8, 2, 36, 0, 12, 5, 30.0)]:
        kc = (rng.standard_normal((nkv, start + seq, hd)) * amp).astype(np.float32)
        vc = rng.standard_normal((nkv, start + seq, hd)).astype(np.float32)
        q = (rng.standard_normal((seq, nh * hd)) * amp).astype(np.float32)
        outs.append(K.attention(q, kc, vc, start, nh, float(np.float32(hd ** -0.5)), window))
    return hashlib.sha256(b"".join(o.tobytes() for o in outs)).hexdigest()


def swiglu_block_inputs():
    """(3, 2 * 96) gates and ups: whole blocks of 8 and 16 (the vector expf only, no libm), with the
    expf flush / scale paths in the first gates."""
    x = (np.random.default_rng(12).standard_normal((3, 2 * 96)) * 6).astype(np.float32)
    x[0, :8] = [-100.0, 100.0, -0.0, 88.0, 89.0, -104.0, -87.5, 1e-30]
    return x


def simd_swiglu_digest():
    """sha256 of swiglu and silu over swiglu_block_inputs."""
    x = swiglu_block_inputs()
    return hashlib.sha256(K.swiglu(x).tobytes() + K.silu(x[:, :96].copy()).tobytes()).hexdigest()


def ggml_expf_avx512(x):
    """ggml's AVX-512 ggml_v_expf (vec.h) in numpy, step for step in float32: each FMA is one float64
    multiply-add rounded once to float32 (exact for these magnitudes), _mm512_scalef_ps is ldexp."""
    f32 = np.float32

    def fma(a, b, c):
        return (a.astype(np.float64) * b + c).astype(f32)
    x = x.astype(f32)
    r = f32(1.5 * 2 ** 23)
    z = fma(x, f32(float.fromhex("0x1.715476p+0")), r)
    n = z - r
    b = fma(-n, f32(float.fromhex("0x1.7f7d1cp-20")), fma(-n, f32(float.fromhex("0x1.62e4p-1")), x))
    u = b * b
    c = [f32(float.fromhex(h)) for h in ("0x1.ffffecp-1", "0x1.fffdb6p-2", "0x1.555e66p-3", "0x1.573e2ep-5",
                                         "0x1.0e4020p-7")]
    j = fma(fma(fma(np.full_like(b, c[4]), b, c[3]), u, fma(np.full_like(b, c[2]), b, c[1])), u,
            fma(np.full_like(b, c[0]), b, f32(1)))
    with np.errstate(over="ignore", invalid="ignore"):  # the lanes past |n| > 192, replaced below
        res = np.ldexp(j, np.clip(n, -300, 300).astype(np.int32)).astype(f32)
    return np.where(np.abs(n) > 192, np.where(n <= 0, f32(0), f32(np.inf)), res).astype(f32)


# simd_attention_digest on the SIMD tiers, whose attention is llama.cpp's AVX2 CPU arithmetic
# (test_llama_exact.py): the arm64 SIMD tiers run the same sums in the same order with the same vector
# expf, so they give the same bits (the generic tier uses libm's expf: close, not equal). SwiGLU is
# ggml's AVX2 one (blocks of 8, SIMD_SWIGLU_DIGEST) on avx2 and arm64, its AVX-512 one on avx512.
SIMD_ATTENTION_DIGEST = "3b280b9034ce9a07af4f35a2593c37e67f0543b57e5bb6ebf0b0ee8c716ff665"
SIMD_SWIGLU_DIGEST = "d9183e8ad15c1d481e3cff32527d9c5b8b41f2b9d061d98a5a0d997ded662509"


def test_simd_tiers_give_ggml_bits(tier):
    if tier == "generic":
        pytest.skip("the portable tier's expf is libm's")
    assert simd_attention_digest() == SIMD_ATTENTION_DIGEST
    if tier != "avx512":
        assert simd_swiglu_digest() == SIMD_SWIGLU_DIGEST
        return
    # ggml's AVX-512 ggml_vec_swiglu_f32: x / (1 + expf(0 - x)) * g in blocks of 16 (all of these)
    x = swiglu_block_inputs()
    gate, up = x[:, :96], x[:, 96:]
    silu = (gate / (np.float32(1) + ggml_expf_avx512(np.float32(0) - gate))).astype(np.float32)
    np.testing.assert_array_equal(K.swiglu(x), silu * up)
    np.testing.assert_array_equal(K.silu(gate.copy()), silu)
    # past |n| > 192 ggml's AVX-512 expf gives inf / 0 (silu -0 / x)
    far = np.array([-200.0, 200.0, -1e4, 1e4, -150.0, 150.0, -3e38, 3e38] * 2, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(ggml_expf_avx512(far), np.where(far > 0, np.float32(np.inf), np.float32(0)))
        np.testing.assert_array_equal(K.silu(far), far / (np.float32(1) + ggml_expf_avx512(-far)))


def test_long_encoder_attention_runs_as_gemms_like_the_reference(tier):
    """Past GEMM_MIN_ROWS an encoder's self-attention takes the two-GEMM path: same answer (GQA too)."""
    from volvox.ops.attention import GEMM_MIN_ROWS

    rng = np.random.default_rng(7)
    seq, nh, nkv, hd = GEMM_MIN_ROWS + 13, 4, 2, 16
    p = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "causal": False}
    q, k, v = (rng.standard_normal((seq, n * hd)).astype(np.float32) for n in (nh, nkv, nkv))
    np.testing.assert_allclose(attention_fast(RunContext(), p, q, k, v), attention_ref(RunContext(), p, q, k, v),
                               rtol=1e-5, atol=1e-6)
