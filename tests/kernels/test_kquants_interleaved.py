"""Interleaved k-quant weights (vx.pxd: q2_K .. q6_K decoded at load into R-row groups): the layout
il_pack writes, checked against a numpy transcription of vx.pxd's description, and the tier's GEMV over
it against the float64 product of the gguf package's dequantization and ggml's q8_K activations (the
integer parts are exact; one float term per super-block) and against the row-by-row GEMV (the same
bits: a model's mapped, read-only weights and the same weights in writable memory agree)."""

import numpy as np
import pytest

from volvox import cpu
from volvox._kernels import engine
from volvox.ir.quant_blocks import GGML_FORMATS, QuantTensor, quantize_ref

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as GT  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402

CODES = {"q2_k": 10, "q3_k": 11, "q4_k": 3, "q5_k": 12, "q6_k": 4}
GT_OF = {"q2_k": GT.Q2_K, "q3_k": GT.Q3_K, "q4_k": GT.Q4_K, "q5_k": GT.Q5_K, "q6_k": GT.Q6_K}
F16_FIELDS = {"q2_k": (80, 82), "q3_k": (108,), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}


def _rows(qtype: str) -> int:
    rows = engine.il_rows(CODES[qtype])
    if not rows:
        pytest.skip(f"the {cpu.isa()} tier reads {qtype} rows as stored (no interleaved layout)")
    return rows


def random_blocks(rng, qtype: str, n: int, k: int) -> QuantTensor:
    """Random super-blocks (every bit pattern of the integer fields, small f16 scales), read-only as a
    model's mapped weights are."""
    fmt = GGML_FORMATS[qtype]
    raw = rng.integers(0, 256, (n, k // 256 * fmt.type_size), dtype=np.uint8)
    blk = raw.reshape(n, k // 256, fmt.type_size)
    for off in F16_FIELDS[qtype]:
        blk[..., off:off + 2] = rng.uniform(-0.02, 0.02, (n, k // 256, 1)).astype(np.float16).view(np.uint8)
    raw.flags.writeable = False
    return QuantTensor(raw, qtype, (n, k))


def _scale_min_k4(s: np.ndarray):
    """ggml's get_scale_min_k4 on (..., 12) bytes -> sc, mn (..., 8) uint8."""
    s = s.astype(np.uint8)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)], -1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], -1)
    return sc, mn


def _q3k_scales(s: np.ndarray) -> np.ndarray:
    """q3_K's 16 six-bit scales of (..., 12) bytes, minus 32, as int8 (ggml's dequantize_row_q3_K)."""
    low = np.concatenate([s[..., 0:8] & 0x0F, s[..., 0:8] >> 4], -1)                    # scale i: i < 8 low nibble
    high = np.stack([(s[..., 8 + i % 4] >> (2 * (i // 4))) & 3 for i in range(16)], -1)
    return ((low | (high << 4)).astype(np.int16) - 32).astype(np.int8)


def _q3k_value_lanes(hmask: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """q3_K's (..., 96) value lanes of vx.pxd from (..., 32) hmask and (..., 64) qs bytes: sub-block j's
    values v = q + 4 (value 32 j + i: qs byte 32 (j // 4) + i bits 2 (j % 4), hmask byte i bit j) in
    its lanes t = 0, 1, 2 (bytes 12 j + 4 t + i % 4): i = 16 h + 4 w + k in nibble h, as bits 0 .. 2
    of lane w's for w < 3, bit by bit in bit 3 of lane t's (bit t of the value) for w = 3."""
    out = np.zeros(hmask.shape[:-1] + (8, 3, 4), np.uint8)       # (..., sub-block, lane, byte)
    for j in range(8):
        for i in range(32):
            v = ((qs[..., 32 * (j // 4) + i] >> (2 * (j % 4))) & 3) | (((hmask[..., i] >> j) & 1) << 2)
            h, w, k = i // 16, i // 4 % 4, i % 4
            if w < 3:
                out[..., j, w, k] |= (v << (4 * h)).astype(np.uint8)
            else:
                for t in range(3):
                    out[..., j, t, k] |= (((v >> t) & 1) << (4 * h + 3)).astype(np.uint8)
    return out.reshape(hmask.shape[:-1] + (96,))


def _q5k_value_lanes(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """q5_K's (..., 160) value lanes of vx.pxd from (..., 32) qh and (..., 128) qs bytes: sub-block j's
    values (value 32 j + i: the low (j even) or high nibble of qs byte 32 (j // 2) + i, qh byte i bit j
    as 16) as v_w = values 4 w .. 4 w + 3 in planes t = 0 .. 4 (bytes 20 j + 4 t ..): v_t in bits 0 .. 4,
    v_5's bits 0 .. 2 in plane 0's bits 5 .. 7, its bits 3, 4 in plane 1's bits 5, 6, v_6's bit 0 in plane
    1's bit 7, its bits 1 .. 3 in plane 2's bits 5 .. 7, its bit 4 in plane 3's bit 7, v_7's bits 0, 1 in
    plane 3's bits 5, 6, its bits 2 .. 4 in plane 4's bits 5 .. 7."""
    j = np.arange(8)[:, None]
    i = np.arange(32)[None, :]
    v = ((qs[..., 32 * (j // 2) + i] >> (4 * (j % 2))) & 0x0F) | (((qh[..., i] >> j) & 1) << 4)   # (..., 8, 32)
    v = v.reshape(v.shape[:-1] + (8, 4)).astype(np.uint8)                   # (..., sub-block, lane w, byte)
    w = [v[..., t, :] for t in range(8)]
    planes = [w[0] | (w[5] & 7) << 5, w[1] | (w[5] >> 3 & 3) << 5 | (w[6] & 1) << 7, w[2] | (w[6] >> 1 & 7) << 5,
              w[3] | (w[7] & 3) << 5 | (w[6] >> 4 & 1) << 7, w[4] | (w[7] >> 2 & 7) << 5]
    return np.stack(planes, -2).astype(np.uint8).reshape(qh.shape[:-1] + (160,))


def _q6k_value_lanes(ql: np.ndarray, qh: np.ndarray) -> np.ndarray:
    """q6_K's (..., 192) value lanes of vx.pxd from (..., 128) ql and (..., 64) qh bytes: group g's
    values (value 128 h + 32 q + i: nibble q // 2 of ql byte 64 h + 32 (q % 2) + i, qh byte 32 h + i
    bits 2 q as 16, 32) as v_w = values 4 w .. 4 w + 3 in planes t = 0 .. 2 (bytes 12 g + 4 t ..): v_t
    in bits 0 .. 5, v_3's bits 2 t, 2 t + 1 in bits 6, 7."""
    n = np.arange(256)
    h, q, i = n // 128, n // 32 % 4, n % 32
    v = ((ql[..., 64 * h + 32 * (q % 2) + i] >> (4 * (q // 2))) & 0x0F) | (((qh[..., 32 * h + i] >> (2 * q)) & 3) << 4)
    v = v.reshape(v.shape[:-1] + (16, 4, 4)).astype(np.uint8)                # (..., group, lane w, byte)
    planes = [v[..., t, :] | (v[..., 3, :] >> (2 * t) & 3) << 6 for t in range(3)]
    return np.stack(planes, -2).astype(np.uint8).reshape(ql.shape[:-1] + (192,))


def _layout_ref(qtype: str, wb: np.ndarray, k: int, rows: int) -> np.ndarray:
    """vx.pxd's interleaved k-quant layout, written from its description with numpy."""
    n, nb, bsz = wb.shape[0], k // 256, GGML_FORMATS[qtype].type_size
    groups = -(-n // rows)
    blocks = np.zeros((groups * rows, nb, bsz), np.uint8)
    blocks[:n] = wb.reshape(n, nb, bsz)
    b = blocks.reshape(groups, rows, nb, bsz).transpose(0, 2, 1, 3)          # (groups, nb, rows, bsz)

    def rowminor(a):                          # (groups, nb, rows, count) -> [count][rows] bytes
        return a.swapaxes(2, 3).reshape(groups, nb, -1)

    def lanes(a, width=4):                    # (groups, nb, rows, width L) -> [L][rows][width] bytes
        return a.reshape(groups, nb, rows, -1, width).transpose(0, 1, 3, 2, 4).reshape(groups, nb, -1)

    if qtype == "q2_k":
        quads = b[..., 0:16].reshape(groups, nb, rows, 4, 4)[..., [0, 2, 1, 3]].reshape(groups, nb, rows, 16)
        parts = [rowminor(b[..., 80:82]), rowminor(b[..., 82:84]), lanes(quads), lanes(b[..., 16:80])]
    elif qtype == "q3_k":
        real = (np.arange(groups * rows) < n).reshape(groups, 1, rows, 1)          # rows past n: all zero
        parts = [rowminor(b[..., 108:110]), lanes(_q3k_scales(b[..., 96:108]).view(np.uint8) * real, 2),
                 lanes(_q3k_value_lanes(b[..., 0:32], b[..., 32:96]))]
    elif qtype in ("q4_k", "q5_k"):
        sc, mn = _scale_min_k4(b[..., 4:16])
        parts = [rowminor(b[..., 0:2]), rowminor(b[..., 2:4]), rowminor(sc), rowminor(mn)]
        values = b[..., 16:144] if qtype == "q4_k" else _q5k_value_lanes(b[..., 16:48], b[..., 48:176])
        parts.append(lanes(values))
    else:
        parts = [rowminor(b[..., 208:210]), rowminor(b[..., 192:208]),
                 lanes(_q6k_value_lanes(b[..., 0:128], b[..., 128:192]))]
    # f16 fields are row-minor pairs of bytes: [rows][2], not [2][rows]
    for i, p in enumerate(parts[:2 if qtype in ("q2_k", "q4_k", "q5_k") else 1]):
        parts[i] = p.reshape(groups, nb, 2, rows).swapaxes(2, 3).reshape(groups, nb, -1)
    return np.concatenate(parts, axis=2).reshape(-1)


def q8k(x: np.ndarray):
    """ggml's quantize_row_q8_K_ref (numpy): q int8 (M, K), d float32 (M, K/256)."""
    m, k = x.shape
    b = x.reshape(m, k // 256, 256)
    mx = np.take_along_axis(b, np.abs(b).argmax(-1)[..., None], -1)[..., 0]
    with np.errstate(divide="ignore"):
        iscale = np.where(mx == 0, np.float32(0), np.float32(-127) / mx).astype(np.float32)
        d = np.where(mx == 0, np.float32(0), np.float32(1) / iscale).astype(np.float32)
    q = np.minimum(np.rint(b * iscale[..., None]), 127).astype(np.int8)
    return q.reshape(m, k), d


def _gemm_il(qtype, w: QuantTensor, x: np.ndarray) -> np.ndarray:
    packed, group = cpu.interleaved_weights(w)
    code, (m, k), n = CODES[qtype], x.shape, w.shape[0]
    assert packed.size == -(-n // _rows(qtype)) * group
    y = np.full((m, n), np.nan, np.float32)
    engine.gemm_il(code, packed, k, n, x, y, np.empty(m * engine.act_row_bytes(code, k), np.uint8))
    return y


@pytest.mark.parametrize("qtype", sorted(CODES))
@pytest.mark.parametrize("n", [1, 16, 37])
def test_il_pack_writes_the_documented_layout(qtype, n):
    rows = _rows(qtype)
    k = 512
    w = random_blocks(np.random.default_rng(n), qtype, n, k)
    packed = np.empty(-(-n // rows) * engine.il_group_bytes(CODES[qtype], k), np.uint8)
    engine.il_pack(CODES[qtype], np.asarray(w.data), k, packed)
    np.testing.assert_array_equal(packed, _layout_ref(qtype, np.asarray(w.data), k, rows))


@pytest.mark.parametrize("qtype", sorted(CODES))
@pytest.mark.parametrize("n,k,m", [(16, 256, 1), (37, 768, 1), (19, 512, 3), (64, 1536, 2)])
def test_interleaved_gemv_matches_float64_reference(tier, qtype, n, k, m):
    _rows(qtype)
    rng = np.random.default_rng(n * k + m)
    w = random_blocks(rng, qtype, n, k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0, :256] *= 40.0                                    # super-blocks of other scales
    q, d = q8k(x)
    xq = (q.reshape(m, -1, 256) * d[..., None].astype(np.float64)).reshape(m, k)
    wf = gguf_dequantize(np.asarray(w.data), GT_OF[qtype]).astype(np.float64)
    want, bound = xq @ wf.T, np.abs(xq) @ np.abs(wf).T
    got = _gemm_il(qtype, w, x)
    assert np.all(np.abs(got - want) <= 1e-6 * bound + 1e-30), np.abs(got - want).max()
    # the row-by-row GEMV (writable weights take it) takes the same integer and float steps: same bits
    rowwise = cpu.linear(x, QuantTensor(np.array(w.data), qtype, w.shape))
    np.testing.assert_array_equal(got.view(np.uint32), rowwise.view(np.uint32))


@pytest.mark.parametrize("qtype", sorted(CODES))
def test_linear_of_read_only_weights_takes_the_interleaved_gemv(tier, qtype):
    _rows(qtype)
    rng = np.random.default_rng(3)
    w = quantize_ref(rng.standard_normal((40, 512)).astype(np.float32), qtype)
    w.data.flags.writeable = False
    x = rng.standard_normal((2, 512)).astype(np.float32)
    np.testing.assert_array_equal(cpu.linear(x, w), _gemm_il(qtype, w, x))
    np.testing.assert_array_equal(cpu.linear(x[1], w), _gemm_il(qtype, w, x)[1])


def test_il_pack_refuses_rows_of_partial_super_blocks():
    _rows("q4_k")
    w = random_blocks(np.random.default_rng(0), "q4_k", 4, 512)
    with pytest.raises(ValueError, match="K=288"):
        engine.il_pack(CODES["q4_k"], np.asarray(w.data), 288, np.empty(10, np.uint8))
