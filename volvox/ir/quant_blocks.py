"""Quantized weight formats (GGUF / ggml block layouts) and the tensor that carries them.

A quantized matrix is stored row by row; each row of ``cols`` values is
``cols // block_size`` fixed-size blocks. The raw bytes are never widened to
float32 at load: kernels read the blocks directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from volvox.errors import ShapeError, UnsupportedError


@dataclass(frozen=True)
class QuantFormat:
    """One ggml block format: ``block_size`` values packed into ``type_size`` bytes."""

    name: str
    ggml_type: int
    block_size: int
    type_size: int


# Every ggml type a GGUF file may declare, so that sizes can be checked even for
# types volvox does not compute with. ``SUPPORTED_QTYPES`` lists the ones it does.
GGML_FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        QuantFormat("f32", 0, 1, 4),
        QuantFormat("f16", 1, 1, 2),
        QuantFormat("q4_0", 2, 32, 18),
        QuantFormat("q4_1", 3, 32, 20),
        QuantFormat("q5_0", 6, 32, 22),
        QuantFormat("q5_1", 7, 32, 24),
        QuantFormat("q8_0", 8, 32, 34),
        QuantFormat("q8_1", 9, 32, 36),
        QuantFormat("q2_k", 10, 256, 84),
        QuantFormat("q3_k", 11, 256, 110),
        QuantFormat("q4_k", 12, 256, 144),
        QuantFormat("q5_k", 13, 256, 176),
        QuantFormat("q6_k", 14, 256, 210),
        QuantFormat("q8_k", 15, 256, 292),
        QuantFormat("i8", 24, 1, 1),
        QuantFormat("i16", 25, 1, 2),
        QuantFormat("i32", 26, 1, 4),
        QuantFormat("i64", 27, 1, 8),
        QuantFormat("f64", 28, 1, 8),
        QuantFormat("bf16", 30, 1, 2),
    )
}
GGML_FORMAT_BY_ID: dict[int, QuantFormat] = {f.ggml_type: f for f in GGML_FORMATS.values()}

# Block-quantized formats that volvox's kernels multiply directly.
SUPPORTED_QTYPES = ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k")


def row_nbytes(qtype: str, cols: int) -> int:
    """Bytes taken by one row of ``cols`` values in format ``qtype``."""
    fmt = GGML_FORMATS[qtype]
    if cols % fmt.block_size:
        raise ShapeError(f"a {qtype} row needs a multiple of {fmt.block_size} values, got {cols}")
    return cols // fmt.block_size * fmt.type_size


@dataclass(frozen=True)
class QuantTensor:
    """A block-quantized matrix: ``data`` holds the raw blocks, one row per output.

    data:  uint8 (rows, row_nbytes(qtype, cols)), usually a read-only mmap view
    shape: (rows, cols), the logical float shape
    """

    data: np.ndarray
    qtype: str
    shape: tuple[int, int]

    def __post_init__(self):
        if self.qtype not in SUPPORTED_QTYPES:
            raise UnsupportedError(f"quantization type {self.qtype!r} is not supported "
                                   f"(supported: {', '.join(SUPPORTED_QTYPES)})")
        rows, cols = self.shape
        want = (rows, row_nbytes(self.qtype, cols))
        if self.data.dtype != np.uint8 or self.data.shape != want:
            raise ShapeError(f"{self.qtype} tensor of shape {self.shape} needs uint8 data of "
                             f"shape {want}, got {self.data.dtype} {self.data.shape}")

    @property
    def nbytes(self) -> int:
        """Bytes of packed weights."""
        return self.data.nbytes


class StackedQuantTensor(QuantTensor):
    """QuantTensors of one type and width stacked row-wise (a fused Q/K/V or gate/up weight) without a
    copy until something reads ``data``: a tier that interleaves rows (cpu.interleaved_weights) packs
    the parts straight into its layout, so the stacked rows are never made.

    parts: the QuantTensors, top to bottom; shape: (sum of their rows, cols)
    """

    def __init__(self, parts: list[QuantTensor]):
        if not parts or any(p.qtype != parts[0].qtype or p.shape[1] != parts[0].shape[1] for p in parts):
            raise ShapeError("stacked quantized tensors need one type and one width")
        # (QuantTensor is frozen: the fields are set as its own __init__ would)
        object.__setattr__(self, "parts", list(parts))
        object.__setattr__(self, "qtype", parts[0].qtype)
        object.__setattr__(self, "shape", (sum(p.shape[0] for p in parts), parts[0].shape[1]))
        object.__setattr__(self, "_data", None)
        object.__setattr__(self, "interleaved", None)  # cpu.interleaved_weights' packing, once made

    @property
    def data(self) -> np.ndarray:
        """The stacked rows (made on first read, then kept; read-only when every part is)."""
        if self._data is None:
            data = np.concatenate([np.asarray(p.data) for p in self.parts])  # (rows, row_bytes)
            data.flags.writeable = any(p.data.flags.writeable for p in self.parts)
            object.__setattr__(self, "_data", data)
        return self._data

    @property
    def nbytes(self) -> int:
        """Bytes of packed weights."""
        return sum(p.nbytes for p in self.parts)


# ---------------------------------------------------------------------------------------
# numpy reference implementations (the oracle the kernels are tested against).
# They follow ggml's reference C (ggml-quants.c) operation for operation, in float32.
# ---------------------------------------------------------------------------------------
QUANTIZABLE_QTYPES = ("q8_0", "q4_0", "q4_1")


def _blocks(qt: QuantTensor) -> np.ndarray:
    """(rows, blocks_per_row, type_size) uint8 view of a tensor's blocks."""
    fmt = GGML_FORMATS[qt.qtype]
    rows, cols = qt.shape
    return np.ascontiguousarray(qt.data).reshape(rows, cols // fmt.block_size, fmt.type_size)


def _f16(b: np.ndarray) -> np.ndarray:
    """(..., 2) uint8 -> (..., 1) float32 from little-endian IEEE half."""
    return np.ascontiguousarray(b).view("<f2").astype(np.float32)


def _dequantize_blocks(qtype: str, blk: np.ndarray) -> np.ndarray:
    """(R, nb, type_size) uint8 blocks -> (R, nb * block_size) float32."""
    r, nb = blk.shape[:2]
    if qtype == "q8_0":                                   # d: f16, qs: int8[32]
        d = _f16(blk[..., 0:2])
        q = blk[..., 2:34].view(np.int8).astype(np.float32)
        y = q * d
    elif qtype in ("q4_0", "q4_1"):                       # d (, m): f16, qs: 16 bytes of nibbles
        d = _f16(blk[..., 0:2])
        qs = blk[..., 2:18] if qtype == "q4_0" else blk[..., 4:20]
        # low nibbles are values 0..15 of the block, high nibbles values 16..31
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32)
        if qtype == "q4_0":
            y = (q - np.float32(8.0)) * d
        else:
            y = q * d + _f16(blk[..., 2:4])
    elif qtype == "q4_k":                                 # d, dmin: f16; scales[12]; qs[128]
        d = _f16(blk[..., 0:2])
        dmin = _f16(blk[..., 2:4])
        s = blk[..., 4:16].astype(np.uint8)
        # get_scale_min_k4: sub-blocks 0..3 use the low 6 bits of s[0..7]; 4..7 take
        # 4 bits from s[8..11] and their top 2 bits from the top of s[0..7].
        sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
        mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
        qs = blk[..., 16:144].reshape(r, nb, 4, 32)
        # each 32 bytes -> two sub-blocks of 32: low nibbles first, then high nibbles
        q = np.stack([qs & 0x0F, qs >> 4], axis=-2).reshape(r, nb, 8, 32).astype(np.float32)
        scale = d * sc.astype(np.float32)                 # (R, nb, 8)
        minv = dmin * mn.astype(np.float32)
        y = (scale[..., None] * q - minv[..., None]).reshape(r, nb, 256)
    elif qtype == "q6_k":                                 # ql[128] qh[64] scales int8[16] d f16
        ql = blk[..., 0:128].reshape(r, nb, 2, 2, 32)     # (half, ql[0:32] / ql[32:64], l)
        qh = blk[..., 128:192].reshape(r, nb, 2, 1, 32)
        sc = blk[..., 192:208].view(np.int8).astype(np.float32)
        d = _f16(blk[..., 208:210])
        lo = np.stack([ql & 0x0F, ql >> 4], axis=-3)       # (half, nibble, part, l) -> q1 q2 / q3 q4
        sh = np.array([[0, 2], [4, 6]], dtype=np.uint8).reshape(1, 1, 1, 2, 2, 1)
        hi = (qh[..., None, :, :] >> sh) & 3               # same (nibble, part) order
        q = (lo | (hi << 4)).astype(np.float32) - np.float32(32.0)
        q = q.reshape(r, nb, 256)                          # value p of the block at p
        # value p uses scale p // 16
        y = (d * np.repeat(sc, 16, axis=-1)) * q
    else:
        raise UnsupportedError(f"no reference dequantization for {qtype!r}")
    return y.reshape(r, nb * GGML_FORMATS[qtype].block_size).astype(np.float32, copy=False)


def dequantize_ref(qt: QuantTensor) -> np.ndarray:
    """float32 (rows, cols) values of a block-quantized tensor."""
    rows, cols = qt.shape
    return _dequantize_blocks(qt.qtype, _blocks(qt)).reshape(rows, cols)


def dequantize_rows_ref(qt: QuantTensor, rows) -> np.ndarray:
    """float32 (len(rows), cols): the dequantized rows `rows` (e.g. an embedding lookup)."""
    idx = np.asarray(rows)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise ShapeError(f"rows must be a 1-D integer array, got {idx.dtype} {idx.shape}")
    n = qt.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ShapeError(f"row index out of range for a tensor of {n} rows")
    fmt = GGML_FORMATS[qt.qtype]
    blk = np.asarray(qt.data)[idx].reshape(len(idx), qt.shape[1] // fmt.block_size, fmt.type_size)
    return _dequantize_blocks(qt.qtype, blk).reshape(len(idx), qt.shape[1])


def quantize_ref(x: np.ndarray, qtype: str) -> QuantTensor:
    """Quantize float32 (rows, cols) into q8_0 / q4_0 / q4_1 with ggml's reference rounding.

    q8_0: d = amax / 127,             q = roundf(x / d)            (half away from zero)
    q4_0: d = max_by_abs / -8,        q = min(15, int(x / d + 8.5))
    q4_1: d = (max - min) / 15, m = min, q = min(15, int((x - m) / d + 0.5))
    with x / d computed as x * (1 / d), as ggml does. Nibbles: low = values 0..15.
    """
    if qtype not in QUANTIZABLE_QTYPES:
        raise UnsupportedError(f"quantize_ref supports {', '.join(QUANTIZABLE_QTYPES)}, not {qtype!r}")
    x = np.asarray(x)
    if x.dtype != np.float32 or x.ndim != 2:
        raise ShapeError(f"quantize_ref needs float32 (rows, cols), got {x.dtype} {x.shape}")
    rows, cols = x.shape
    row_nbytes(qtype, cols)  # raises ShapeError unless cols is a multiple of 32
    b = x.reshape(rows, cols // 32, 32)

    def inv(d):
        with np.errstate(divide="ignore"):
            return np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)

    def f16(v):
        return v.astype(np.float16).view(np.uint8)       # (R, nb, 2)

    if qtype == "q8_0":
        d = (np.abs(b).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
        v = b * inv(d)
        q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # roundf
        out = np.concatenate([f16(d), q.view(np.uint8)], axis=-1)
    else:
        if qtype == "q4_0":
            i = np.abs(b).argmax(axis=-1)[..., None]         # first element of largest |x|
            mx = np.take_along_axis(b, i, axis=-1)
            d = (mx / np.float32(-8)).astype(np.float32)
            v = b * inv(d) + np.float32(8.5)
            head = f16(d)
        else:
            mn = b.min(axis=-1, keepdims=True)
            mx = b.max(axis=-1, keepdims=True)
            d = ((mx - mn) / np.float32(15)).astype(np.float32)
            v = (b - mn) * inv(d) + np.float32(0.5)
            head = np.concatenate([f16(d), f16(mn)], axis=-1)
        q = np.minimum(np.trunc(v).astype(np.int8), 15).astype(np.uint8)   # C's (int8_t) cast
        qs = q[..., :16] | (q[..., 16:] << 4)
        out = np.concatenate([head, qs], axis=-1)
    return QuantTensor(np.ascontiguousarray(out.reshape(rows, -1)), qtype, (rows, cols))
