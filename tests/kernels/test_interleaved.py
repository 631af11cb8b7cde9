"""Interleaved 32-block weights (vx.pxd): the layout il_pack writes, and the tier's GEMV over it giving
the bits of the row-by-row GEMV (which the plan's decode steps ran before, and which equals llama.cpp's
arithmetic on the x86 tiers: tests/tasks/test_llama_exact.py)."""

import numpy as np
import pytest

from volvox import cpu
from volvox._kernels import engine
from volvox.ir.quant_blocks import quantize_ref

CODES = {"q4_0": 0, "q4_1": 1, "q8_0": 2, "iq4_nl": 9, "q5_0": 7, "q5_1": 8}
BLOCK_BYTES = {"q4_0": 18, "q4_1": 20, "q8_0": 34, "iq4_nl": 18, "q5_0": 22, "q5_1": 24}


def _rows(qtype: str) -> int:
    rows = engine.il_rows(CODES[qtype])
    if not rows:
        pytest.skip(f"the {cpu.isa()} tier reads {qtype} rows as stored (no interleaved layout)")
    return rows


def _weights(rng, qtype: str, n: int, k: int):
    w = quantize_ref((rng.standard_normal((n, k)) * rng.uniform(0.01, 4)).astype(np.float32), qtype)
    return w, cpu._weight_bytes(w, "w")[1]


def _layout_ref(qtype: str, wb: np.ndarray, k: int, rows: int) -> np.ndarray:
    """vx.pxd's interleaved layout, written from its description with numpy."""
    n, nb, bsz = wb.shape[0], k // 32, BLOCK_BYTES[qtype]
    groups = -(-n // rows)
    head = (4 if qtype in ("q4_1", "q5_1") else 2) + (4 if qtype in ("q5_0", "q5_1") else 0)
    real = wb.reshape(n, nb, bsz).copy()
    if qtype == "q8_0":
        real[..., head:] ^= np.uint8(0x80)  # stored + 128
    blocks = np.zeros((groups * rows, nb, bsz), np.uint8)  # rows past n: all zero
    blocks[:n] = real
    blocks = blocks.reshape(groups, rows, nb, bsz).transpose(0, 2, 1, 3)  # (groups, nb, rows, bsz)
    qs = blocks[..., head:]
    lanes = qs.reshape(groups, nb, rows, -1, 4).transpose(0, 1, 3, 2, 4)  # (groups, nb, lanes, rows, 4)
    parts = [blocks[..., 0:2].reshape(groups, nb, -1)]
    if qtype in ("q4_1", "q5_1"):
        parts.append(blocks[..., 2:4].reshape(groups, nb, -1))
    if qtype in ("q5_0", "q5_1"):  # lane l, half h: bit 4r + k = row r's qh bit 4l + k + 16h
        qh = blocks[..., head - 4:head].copy().view("<u4")[..., 0]               # (groups, nb, rows)
        bits = (qh[..., None] >> np.arange(32, dtype=np.uint32)) & 1              # (groups, nb, rows, 32)
        bits = bits.reshape(groups, nb, rows, 2, 4, 4).transpose(0, 1, 4, 3, 2, 5)  # (.., lane, half, rows, k)
        masks = np.packbits(bits.reshape(groups, nb, 8, rows * 4).astype(np.uint8), axis=-1, bitorder="little")
        parts.append(masks.reshape(groups, nb, -1))
    parts.append(lanes.reshape(groups, nb, -1))
    return np.concatenate(parts, axis=2).reshape(-1)


@pytest.mark.parametrize("qtype", sorted(CODES))
@pytest.mark.parametrize("n", [1, 16, 37, 64])
def test_il_pack_writes_the_documented_layout(qtype, n):
    rows = _rows(qtype)
    rng = np.random.default_rng(n)
    k = 96
    _, wb = _weights(rng, qtype, n, k)
    packed = np.empty(-(-n // rows) * engine.il_group_bytes(CODES[qtype], k), np.uint8)
    engine.il_pack(CODES[qtype], wb, k, packed)
    np.testing.assert_array_equal(packed, _layout_ref(qtype, wb, k, rows))


@pytest.mark.parametrize("qtype", sorted(CODES))
@pytest.mark.parametrize("n,k,m", [(16, 32, 1), (17, 64, 1), (49, 576, 1), (576, 576, 1), (100, 1536, 2),
                                   (3, 64, 3), (40, 576, 7), (256, 4096, 1)])
def test_interleaved_gemv_equals_row_gemv_bit_for_bit(qtype, n, k, m):
    rows = _rows(qtype)
    rng = np.random.default_rng(n * k + m)
    w, wb = _weights(rng, qtype, n, k)
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x[0, :5] = 0.0
    want = cpu.linear(x, w)
    packed, group = cpu.interleaved_weights(w)
    assert packed.size == -(-n // rows) * group
    got = np.full((m, n), np.nan, np.float32)
    engine.gemm_il(CODES[qtype], packed, k, n, x, got, np.empty(m * engine.act_row_bytes(CODES[qtype], k), np.uint8))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_il_pack_refuses_a_mismatched_buffer():
    rows = _rows("q4_1")
    _, wb = _weights(np.random.default_rng(0), "q4_1", 20, 64)
    with pytest.raises(ValueError, match="out holds"):
        engine.il_pack(CODES["q4_1"], wb, 64, np.empty(10, np.uint8))
    with pytest.raises(ValueError, match="K=96"):
        engine.il_pack(CODES["q4_1"], wb, 96, np.empty(-(-20 // rows) * engine.il_group_bytes(1, 96), np.uint8))


def test_tiers_without_interleaving_say_so():
    assert engine.il_rows(5) == 0 and engine.il_rows(6) == 0  # f32, f16: never interleaved
    assert engine.il_group_bytes(5, 64) == 0
