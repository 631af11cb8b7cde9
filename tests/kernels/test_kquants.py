"""The k-quants (q2_K, q3_K, q5_K beside q4_K / q6_K) and the other 32-block types (q5_0, q5_1,
iq4_nl): block layouts, the numpy references and every kernel tier this machine runs.

* dequantize_ref equals the independent `gguf` package's dequantize bit for bit on random blocks
  (every bit pattern, small finite f16 scales);
* quantize_ref (q5_0 / q5_1) equals gguf's quantize byte for byte;
* the kernels' dequantization (embedding rows) equals dequantize_ref;
* the kernels' activation rows are ggml's q8_0 / q8_1 / q8_K (numpy emulations below);
* linear on each tier equals the float64 product of the dequantized weights and the quantized
  activations up to float32 rounding: |y - ref| <= 1e-6 * sum |x| |w| per element (the integer
  parts are exact; one float per block is summed in block order, ggml's generic order).
"""

import numpy as np
import pytest

from volvox import cpu as K
from volvox.errors import ShapeError
from volvox.ir.quant_blocks import GGML_FORMATS, QuantTensor, dequantize_ref, quantize_ref

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as GT  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402
from gguf.quants import quantize as gguf_quantize  # noqa: E402

NEW_QTYPES = ["q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q5_k"]
GT_OF = {"q5_0": GT.Q5_0, "q5_1": GT.Q5_1, "iq4_nl": GT.IQ4_NL, "q2_k": GT.Q2_K, "q3_k": GT.Q3_K,
         "q5_k": GT.Q5_K}
# byte offsets of each type's f16 scales inside a block
F16_FIELDS = {"q5_0": (0,), "q5_1": (0, 2), "iq4_nl": (0,), "q2_k": (80, 82), "q3_k": (108,),
              "q5_k": (0, 2)}
K_TYPES = ("q2_k", "q3_k", "q5_k")


def random_blocks(rng, qtype, rows, cols) -> QuantTensor:
    """Random blocks of `qtype` (every bit pattern of the integer fields) with small f16 scales."""
    fmt = GGML_FORMATS[qtype]
    nb = cols // fmt.block_size
    raw = rng.integers(0, 256, (rows, nb * fmt.type_size), dtype=np.uint8)   # (rows, nb * type_size)
    blk = raw.reshape(rows, nb, fmt.type_size)
    for off in F16_FIELDS[qtype]:
        blk[..., off:off + 2] = rng.uniform(-0.02, 0.02, (rows, nb, 1)).astype(np.float16).view(np.uint8)
    return QuantTensor(raw, qtype, (rows, cols))


def cols_of(qtype):
    """An awkward width: an odd number of blocks."""
    return 768 if qtype in K_TYPES else 160


# ------------------------------------------------------------------- references vs gguf
def test_block_sizes_are_ggml_s():
    sizes = {q: (GGML_FORMATS[q].block_size, GGML_FORMATS[q].type_size) for q in NEW_QTYPES}
    assert sizes == {"q5_0": (32, 22), "q5_1": (32, 24), "iq4_nl": (32, 18), "q2_k": (256, 84),
                     "q3_k": (256, 110), "q5_k": (256, 176)}
    for q in NEW_QTYPES:
        assert GGML_FORMATS[q].ggml_type == int(GT_OF[q])


@pytest.mark.parametrize("qtype", NEW_QTYPES)
def test_dequantize_ref_equals_gguf(qtype):
    rng = np.random.default_rng(abs(hash(qtype)) % 2**32)
    qt = random_blocks(rng, qtype, 5, cols_of(qtype))
    ours = dequantize_ref(qt)
    assert ours.dtype == np.float32 and ours.shape == qt.shape
    np.testing.assert_array_equal(ours, gguf_dequantize(qt.data, GT_OF[qtype]))


@pytest.mark.parametrize("qtype", ["q5_0", "q5_1"])
@pytest.mark.parametrize("shape", [(1, 32), (7, 160)])
def test_quantize_ref_equals_gguf(qtype, shape):
    rng = np.random.default_rng(shape[1])
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(3.0)
    x[0, :32] = 0.0                                   # an all-zero block
    if shape[0] > 1:
        x[1, :32] = -1.5                              # a constant block
    qt = quantize_ref(x, qtype)
    np.testing.assert_array_equal(qt.data, gguf_quantize(x, GT_OF[qtype]))
    # the round trip is within half a step (q5_1: (max - min) / 31), or a step of amax / 16 (q5_0,
    # whose level 16 d is cut off on the side opposite the largest |x|)
    b = x.reshape(shape[0], -1, 32)
    bound = np.abs(b).max(-1) / 16 if qtype == "q5_0" else (b.max(-1) - b.min(-1)) / 31 / 2
    err = np.abs(dequantize_ref(qt) - x).reshape(b.shape).max(-1)
    assert np.all(err <= bound * 1.01 + 1e-6)


def test_rows_of_partial_blocks_are_refused():
    with pytest.raises(ShapeError):
        QuantTensor(np.zeros((2, 84), np.uint8), "q2_k", (2, 288))         # 288 is not 256 k
    with pytest.raises(ShapeError):
        quantize_ref(np.zeros((2, 288), np.float32), "q5_k")
    with pytest.raises(ShapeError):
        quantize_ref(np.zeros((2, 48), np.float32), "iq4_nl")


# -------------------------------------------------------------------------- kernels
def ggml_q8(x, block):
    """numpy emulation of ggml's x86 activation quantizers: (q int8 (M, K), d float32 (M, K/block),
    s float32 (M, K/32) or None). block 32: quantize_row_q8_0 / q8_1 (d = fp16(amax / 127),
    q = rint(x * 127 / amax), s = fp16(amax / 127 * sum q)); block 256: quantize_row_q8_K_ref
    (iscale = -127 / the first x of largest |x|, q = min(127, rint(iscale x)), d = 1 / iscale)."""
    m, k = x.shape
    b = x.reshape(m, k // block, block)
    with np.errstate(divide="ignore"):
        if block == 32:
            amax = np.abs(b).max(-1)
            d = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
            iscale = np.where(amax == 0, np.float32(0), np.float32(127) / amax).astype(np.float32)
            q = np.rint(b * iscale[..., None]).astype(np.int8)
            s = ((amax / np.float32(127)) * q.astype(np.int32).sum(-1).astype(np.float32))
            return q.reshape(m, k), d, s.astype(np.float16).astype(np.float32)
        mx = np.take_along_axis(b, np.abs(b).argmax(-1)[..., None], -1)[..., 0]
        iscale = np.where(mx == 0, np.float32(0), np.float32(-127) / mx).astype(np.float32)
        d = np.where(mx == 0, np.float32(0), np.float32(1) / iscale).astype(np.float32)
        q = np.minimum(np.rint(b * iscale[..., None]), 127).astype(np.int8)
        return q.reshape(m, k), d, None


def reference_linear(x, qt):
    """float64 (M, N): the dequantized weights times the kernels' quantized activations (for q5_1,
    plus what q8_1's fp16-rounded block sum adds: m * (s - d sum q) per block)."""
    block = 256 if qt.qtype in K_TYPES else 32
    q, d, s = ggml_q8(x, block)
    m, k = x.shape
    xq = (q.reshape(m, k // block, block) * d[..., None].astype(np.float64)).reshape(m, k)
    w = dequantize_ref(qt).astype(np.float64)
    y = xq @ w.T
    if qt.qtype == "q5_1":
        wm = np.ascontiguousarray(qt.data.reshape(qt.shape[0], k // 32, 24)[..., 2:4]).view("<f2")[..., 0]
        sq = q.reshape(m, k // 32, 32).astype(np.float64).sum(-1)
        y += (s.astype(np.float64) - d.astype(np.float64) * sq) @ wm.astype(np.float64).T
    return y, np.abs(xq) @ np.abs(w).T


@pytest.mark.parametrize("qtype", NEW_QTYPES)
def test_activation_rows_are_ggml_s(qtype):
    x = np.random.default_rng(5).standard_normal((3, cols_of(qtype))).astype(np.float32)
    x[1, :32] = 0.0
    act = K._quantize_activation(x, qtype)
    q, d, s = ggml_q8(x, 256 if qtype in K_TYPES else 32)
    np.testing.assert_array_equal(act["qs"], q)
    np.testing.assert_array_equal(act["d"], d)
    if qtype in K_TYPES:
        np.testing.assert_array_equal(act["bsums"], q.reshape(3, -1, 16).astype(np.int32).sum(-1))
    elif qtype == "q5_1":
        np.testing.assert_array_equal(act["s"], s)


@pytest.mark.parametrize("qtype", NEW_QTYPES)
@pytest.mark.parametrize("m", [1, 3, 6])
def test_linear_matches_float64_reference(tier, threads, qtype, m):
    rng = np.random.default_rng(m)
    qt = random_blocks(rng, qtype, 19, cols_of(qtype))
    x = rng.standard_normal((m, qt.shape[1])).astype(np.float32)
    want, bound = reference_linear(x, qt)
    got = K.linear(x, qt)
    assert got.shape == (m, 19) and got.dtype == np.float32
    assert np.all(np.abs(got - want) <= 1e-6 * bound + 1e-30), np.abs(got - want).max()
    np.testing.assert_array_equal(K.linear(x[0], qt), got[0])          # the GEMV is the GEMM's row


@pytest.mark.parametrize("qtype", NEW_QTYPES)
def test_embedding_rows_equal_dequantize_ref(tier, qtype):
    qt = random_blocks(np.random.default_rng(2), qtype, 6, cols_of(qtype))
    ids = np.array([5, 0, 2, 2], np.int64)
    want = dequantize_ref(qt)[ids]
    # equal up to a fused multiply-add's rounding where the tier contracts d sc q - dmin mn
    np.testing.assert_allclose(K.embedding(qt, ids), want, rtol=0, atol=1e-6 * np.abs(want).max())


# ------------------------------------------------------------------- against llama.cpp
# A tiny random llama written in f32, then quantized by llama.cpp's own model quantizer (no
# importance matrix). The ftype picks the main type; llama.cpp's mix keeps some tensors in other
# types (output in q6_K, some in q4_K / q5_K ...): every tensor is compared whatever its type.
FTYPES = {"q5_0": "LLAMA_FTYPE_MOSTLY_Q5_0", "q5_1": "LLAMA_FTYPE_MOSTLY_Q5_1",
          "iq4_nl": "LLAMA_FTYPE_MOSTLY_IQ4_NL", "q2_k": "LLAMA_FTYPE_MOSTLY_Q2_K",
          "q3_k": "LLAMA_FTYPE_MOSTLY_Q3_K_S", "q4_k": "LLAMA_FTYPE_MOSTLY_Q4_K_S",
          "q5_k": "LLAMA_FTYPE_MOSTLY_Q5_K_S", "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K"}
IDS = [5, 17, 99, 3, 42, 7, 200, 11]


@pytest.fixture(scope="module")
def llama_cpp():
    return pytest.importorskip("llama_cpp")


@pytest.fixture(scope="module")
def llama_quantized(tmp_path_factory, llama_cpp):
    """{ftype name: path} of the tiny f32 llama quantized by llama.cpp, and the f32 source's path."""
    import ctypes

    from tiny_gguf import write_tiny_llama

    d = tmp_path_factory.mktemp("kquants")
    src = write_tiny_llama(d / "tiny-f32.gguf", dim=256, ffn=512, qtype="f32", embed_qtype="f32", tied=False)
    out = {}
    for name, ftype in FTYPES.items():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, ftype)
        params.nthread = 1
        dst = d / f"tiny-{name}.gguf"
        assert llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) == 0
        out[name] = dst
    return out, src


@pytest.mark.parametrize("ftype", list(FTYPES))
def test_quantize_ref_equals_llama_cpp_bytes(llama_quantized, ftype):
    files, src = llama_quantized
    source = {t.name: t for t in gguf.GGUFReader(str(src)).tensors}
    seen = set()
    for t in gguf.GGUFReader(str(files[ftype])).tensors:
        qtype = t.tensor_type.name.lower()
        if qtype in ("f32", "f16"):
            continue
        x = np.asarray(source[t.name].data, np.float32)           # (rows, cols)
        ours = quantize_ref(x, qtype)
        np.testing.assert_array_equal(ours.data, np.asarray(t.data).reshape(ours.data.shape),
                                      err_msg=f"{ftype}: {t.name} ({qtype})")
        seen.add(qtype)
    assert ftype in seen


@pytest.mark.parametrize("ftype", list(FTYPES))
def test_logits_equal_llama_cpp(llama_quantized, llama_cpp, ftype):
    import volvox

    path = llama_quantized[0][ftype]
    llama = llama_cpp.Llama(model_path=str(path), n_ctx=64, logits_all=True, n_threads=1, verbose=False,
                            type_k=0, type_v=0, flash_attn=False)   # f32 KV cache
    llama.eval(IDS)
    want = np.array(llama.scores[:len(IDS)], np.float64)           # (seq, vocab)
    with volvox.load(path) as lm:
        got = lm.logits(IDS)
    nmse = ((got - want) ** 2).sum() / (want ** 2).sum()
    assert nmse < 1e-6, nmse
