"""How a linear / embedding weight lives on a GPU: packed in its stored type, in bindable chunks of rows.

The shaders matmul_q, gemv_q and embedding_q read a weight chunk as ``array<u32>`` and dequantize
each value in registers (their shared ``weight_at``). GGUF blocks are not 4-byte aligned (a q8_0
block is 34 bytes), so each chunk is re-laid-out, still packed, as two regions:

- the *body*: every block's quant bytes, block after block (row-major), ``body_words`` u32 a block;
- the *head*, from word ``head_off`` on: every block's f16 scales (``head_halves`` a block), packed
  two halves a word.

float32 is stored as its bits and float16 as packed halves (element e of the chunk is half e), with
no head. A chunk holds whole rows and never more bytes than one storage binding may span, so a
tensor of any size is bound chunk by chunk (one dispatch each). Nothing here touches a device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.errors import UnsupportedError
from volvox.ir.quant_blocks import GGML_FORMATS


@dataclass(frozen=True)
class WeightLayout:
    """One stored type as the shaders read it."""

    code: int                   # WT_* in the shaders
    block: int                  # values per block (1 for f32 / f16)
    head: tuple[int, int]       # byte range of a block's f16 scales, moved to the head region
    body: tuple[int, int]       # byte range of a block's quants (a multiple of 4 bytes)


LAYOUTS: dict[str, WeightLayout] = {
    "float32": WeightLayout(0, 1, (0, 0), (0, 4)),
    "float16": WeightLayout(1, 1, (0, 0), (0, 2)),
    "q8_0": WeightLayout(2, 32, (0, 2), (2, 34)),        # d | qs[32]
    "q4_0": WeightLayout(3, 32, (0, 2), (2, 18)),        # d | qs[16]
    "q4_1": WeightLayout(4, 32, (0, 4), (4, 20)),        # d, m | qs[16]
    "q4_k": WeightLayout(5, 256, (0, 4), (4, 144)),      # d, dmin | scales[12] qs[128]
    "q6_k": WeightLayout(6, 256, (208, 210), (0, 208)),  # ql[128] qh[64] scales[16] | d
}
GPU_WEIGHT_DTYPES = tuple(LAYOUTS)
PACKED_PORTS = {("linear", "weight"), ("linear_act", "weight"), ("linear_split", "weight"), ("embedding", "table")}


def check_weight(dtype: str, port: str) -> str | None:
    """Why a weight of ``dtype`` cannot be read by the packed shaders (None: it can)."""
    if dtype not in LAYOUTS:
        return f"{port} is {dtype} (GPU weight types: {', '.join(GPU_WEIGHT_DTYPES)})"
    return None


def chunk_words(dtype: str, rows: int, cols: int) -> tuple[int, int]:
    """(words, head_off) of a chunk of ``rows`` rows of ``cols`` values."""
    lay = LAYOUTS[dtype]
    if lay.block == 1:
        n = rows * cols
        return (n if dtype == "float32" else -(-n // 2)), 0
    blocks = rows * (cols // lay.block)
    body = blocks * (lay.body[1] - lay.body[0]) // 4
    halves = blocks * (lay.head[1] - lay.head[0]) // 2
    return body + -(-halves // 2), body


def chunk_rows(dtype: str, shape: tuple[int, int], max_binding: int) -> int:
    """The rows every chunk of a (rows, cols) weight holds (the last may hold fewer): as many as fit
    ``max_binding`` bytes. UnsupportedError when not even one row fits."""
    rows, cols = shape
    words = max_binding // 4
    if chunk_words(dtype, rows, cols)[0] <= words:
        return rows
    per_row = chunk_words(dtype, 2, cols)[0] / 2  # exact for every layout up to the head's rounding
    n = max(0, min(rows, int((words - 1) // per_row)))
    while n and chunk_words(dtype, n, cols)[0] > words:
        n -= 1
    if n == 0:
        raise UnsupportedError(f"one {dtype} row of {cols} values exceeds the GPU's storage binding limit "
                               f"of {max_binding} bytes")
    return n


def pack_rows(weight, dtype: str, r0: int, r1: int) -> np.ndarray:
    """uint32 (words,): rows [r0, r1) of ``weight`` (an array, or a QuantTensor's blocks) in the chunk layout."""
    lay = LAYOUTS[dtype]
    if dtype == "float32":
        return np.ascontiguousarray(weight[r0:r1], dtype=np.float32).view(np.uint32).reshape(-1)
    if dtype == "float16":
        halves = np.ascontiguousarray(weight[r0:r1], dtype=np.float16).reshape(-1)  # (rows * cols,)
        if halves.size % 2:
            halves = np.concatenate([halves, np.zeros(1, np.float16)])
        return halves.view(np.uint32)
    fmt = GGML_FORMATS[dtype]
    blocks = _quant_rows(weight, r0, r1).reshape(-1, fmt.type_size)  # (rows * blocks a row, type_size)
    body = np.ascontiguousarray(blocks[:, lay.body[0]:lay.body[1]]).reshape(-1)
    head = np.ascontiguousarray(blocks[:, lay.head[0]:lay.head[1]]).reshape(-1)
    head = np.concatenate([head, np.zeros(-head.size % 4, np.uint8)])
    return np.concatenate([body, head]).view(np.uint32)


def _quant_rows(weight, r0: int, r1: int) -> np.ndarray:
    """uint8 (r1 - r0, row bytes): rows [r0, r1) of a QuantTensor's blocks; of a StackedQuantTensor, read
    from its parts (its ``data`` would keep a stacked copy of every row on the host)."""
    parts = getattr(weight, "parts", None)
    if parts is None:
        return np.asarray(weight.data)[r0:r1]
    pieces, top = [], 0
    for part in parts:
        lo, hi = max(r0, top), min(r1, top + part.shape[0])
        if lo < hi:
            pieces.append(np.asarray(part.data)[lo - top:hi - top])
        top += part.shape[0]
    return np.concatenate(pieces)


def chunk_spans(rows: int, per_chunk: int) -> list[tuple[int, int]]:
    """[(r0, r1)] of each chunk of a weight of ``rows`` rows, ``per_chunk`` rows a chunk."""
    return [(r0, min(rows, r0 + per_chunk)) for r0 in range(0, rows, per_chunk)]


def row_pieces(row: int, n: int, per_chunk: int) -> list[tuple[int, int, int, int]]:
    """Weight rows [row, row + n) cut at chunk borders: (chunk, chunk row, output column, count) each."""
    pieces, col = [], 0
    while col < n:
        r = row + col
        chunk, w_row = divmod(r, per_chunk)
        count = min(n - col, per_chunk - w_row)
        pieces.append((chunk, w_row, col, count))
        col += count
    return pieces
