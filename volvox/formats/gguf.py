"""Read GGUF v2/v3 files: memory-mapped, validated once at open, tensors zero-copy.

File layout (all little-endian):

    magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
    kv_count x   (key: string, value_type: u32, value)
    tensor_count x (name: string, n_dims: u32, ne: u64[n_dims], ggml_type: u32, offset: u64)
    padding to `general.alignment` (default 32)
    tensor data; each tensor's offset is relative to the start of this section

A string is a u64 byte length followed by UTF-8 bytes; an array is an element
type u32, a u64 count and the elements. ``ne`` lists dimensions innermost
first (ggml order); :class:`GGUFTensorInfo` stores them reversed, as numpy does.

Every length, count and offset read from the file is checked against the bytes
that remain before anything is allocated from it, so a hostile file fails with
a :class:`GGUFError` naming the file and the field instead of a crash or hang.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from volvox.errors import ClosedError, GGUFError, UnsupportedError
from volvox.formats.mapped_file import map_file, release
from volvox.ir.quant_blocks import GGML_FORMAT_BY_ID, SUPPORTED_QTYPES, QuantTensor

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_NESTING = 8  # arrays of arrays of ...: real files use 1 level

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor_count, kv_count

# KV value type id -> (name, struct code, numpy dtype); strings and arrays are handled apart.
_STRING, _ARRAY, _BOOL = 8, 9, 7
_SCALAR_TYPES: dict[int, tuple[str, str, np.dtype]] = {
    0: ("uint8", "B", np.dtype("<u1")),
    1: ("int8", "b", np.dtype("<i1")),
    2: ("uint16", "H", np.dtype("<u2")),
    3: ("int16", "h", np.dtype("<i2")),
    4: ("uint32", "I", np.dtype("<u4")),
    5: ("int32", "i", np.dtype("<i4")),
    6: ("float32", "f", np.dtype("<f4")),
    7: ("bool", "?", np.dtype("<u1")),
    10: ("uint64", "Q", np.dtype("<u8")),
    11: ("int64", "q", np.dtype("<i8")),
    12: ("float64", "d", np.dtype("<f8")),
}
_SCALAR_STRUCTS = {t: struct.Struct("<" + code) for t, (_, code, _) in _SCALAR_TYPES.items()}

# Smallest encoding of one item, used to reject counts the remaining bytes cannot hold.
_MIN_KV_BYTES = 8 + 4 + 1  # empty key, value type, 1-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims = 0, type, offset
_MIN_ARRAY_BYTES = 4 + 8  # element type, count

# ggml types that need no block decoding: returned as plain numpy views.
# bf16 has no numpy dtype, so it comes back as its raw uint16 bits.
_PLAIN_DTYPES = {
    "f32": np.dtype("<f4"),
    "f16": np.dtype("<f2"),
    "bf16": np.dtype("<u2"),
    "f64": np.dtype("<f8"),
    "i8": np.dtype("i1"),
    "i16": np.dtype("<i2"),
    "i32": np.dtype("<i4"),
    "i64": np.dtype("<i8"),
}


@dataclass(frozen=True)
class GGUFTensorInfo:
    """Where one tensor lives in the file and how it is encoded.

    shape:  numpy (row-major) order, i.e. ggml ``ne`` reversed: token_embd is (vocab, dim)
    qtype:  a key of ``volvox.ir.quant_blocks.GGML_FORMATS`` ("f32", "f16", "q4_1", ...)
    offset: absolute byte offset in the file
    nbytes: bytes of encoded data
    """

    name: str
    shape: tuple[int, ...]
    qtype: str
    offset: int
    nbytes: int


class _Cursor:
    """A bounds-checked read position over the mapped file; every read names its field."""

    def __init__(self, buf: mmap.mmap, path: str):
        self.buf = buf
        self.path = path
        self.size = len(buf)
        self.pos = 0

    def fail(self, msg: str) -> GGUFError:
        """A GGUFError naming this file."""
        return GGUFError(f"{self.path}: {msg}")

    def remaining(self) -> int:
        """Bytes left after the read position."""
        return self.size - self.pos

    def skip(self, n: int, what: str) -> int:
        """Advance over ``n`` bytes of ``what``; return where they start."""
        if n > self.size - self.pos:
            raise self.fail(f"truncated: {what} needs {n} bytes at offset {self.pos}, "
                            f"only {self.size - self.pos} remain")
        start = self.pos
        self.pos += n
        return start

    def u32(self, what: str) -> int:
        """Read a little-endian uint32."""
        return _U32.unpack_from(self.buf, self.skip(4, what))[0]

    def u64(self, what: str) -> int:
        """Read a little-endian uint64."""
        return _U64.unpack_from(self.buf, self.skip(8, what))[0]

    def string(self, what: str) -> str:
        """Read a length-prefixed UTF-8 string."""
        n = self.u64(f"length of {what}")
        if n > self.remaining():
            raise self.fail(f"{what}: string length {n} exceeds the {self.remaining()} bytes "
                            f"left in the file (truncated or corrupt)")
        start = self.skip(n, what)
        try:
            return self.buf[start:start + n].decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        """Read one KV value of type id ``vtype``."""
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            return self.array(what, depth)
        scalar = _SCALAR_STRUCTS.get(vtype)
        if scalar is None:
            raise self.fail(f"{what}: unknown value type {vtype}")
        return scalar.unpack_from(self.buf, self.skip(scalar.size, what))[0]

    def array(self, what: str, depth: int) -> Any:
        """Read an array: numeric -> 1-D numpy copy, strings -> list[str], arrays -> list."""
        if depth >= MAX_ARRAY_NESTING:
            raise self.fail(f"{what}: arrays nested more than {MAX_ARRAY_NESTING} deep")
        etype = self.u32(f"element type of {what}")
        count = self.u64(f"length of {what}")
        if etype in _SCALAR_TYPES:
            name, _, dtype = _SCALAR_TYPES[etype]
            min_size = dtype.itemsize
        elif etype == _STRING:
            name, min_size = "string", 8
        elif etype == _ARRAY:
            name, min_size = "array", _MIN_ARRAY_BYTES
        else:
            raise self.fail(f"{what}: unknown array element type {etype}")
        if count * min_size > self.remaining():
            raise self.fail(f"{what}: array length {count} of {name} cannot fit in the "
                            f"{self.remaining()} bytes left in the file (truncated or corrupt)")
        if etype == _STRING:
            return self.string_array(count, what)
        if etype == _ARRAY:
            return [self.array(f"{what}[{i}]", depth + 1) for i in range(count)]
        start = self.skip(count * min_size, what)
        out = np.frombuffer(self.buf, dtype, count, start).copy()  # (count,)
        return out != 0 if etype == _BOOL else out

    def string_array(self, count: int, what: str) -> "StringTable":
        """Read ``count`` strings (the 49k-token vocabulary is one of these): their byte ranges found in
        one native pass, the strings decoded when first read (StringTable)."""
        table, starts, ends, bad = string_table(self.buf, self.pos, count)
        if bad >= 0:
            pos = self.pos + int(ends[bad - 1]) if bad else self.pos
            if pos + 8 > self.size:
                self.pos = pos
                raise self.fail(f"truncated: {what}[{bad}] length needs 8 bytes at offset {pos}")
            n = _U64.unpack_from(self.buf, pos)[0]
            raise self.fail(f"{what}[{bad}]: string length {n} exceeds the {self.size - pos - 8} bytes "
                            f"left in the file (truncated or corrupt)")
        self.pos += len(table)
        strings = StringTable(table, starts, ends, f"{self.path}: {what}")
        if not _is_utf8(table):  # the whole table at once (string_table zeroed the length fields)
            strings.strings()    # names the first string that is not UTF-8
        return strings


class StringTable(Sequence):
    """A GGUF string array: its bytes and each string's range in them; the strings are decoded from
    UTF-8 on first read (a tokenizer reads them all once; running the model never does)."""

    def __init__(self, raw: bytes, starts: np.ndarray, ends: np.ndarray, what: str):
        self._raw = raw
        self._starts = starts  # (count,) int64 byte offsets into raw
        self._ends = ends      # (count,)
        self._what = what
        self._strings: list[str] | None = None

    def __len__(self) -> int:
        return self._starts.size

    def __getitem__(self, i):
        return self.strings()[i]

    def __iter__(self):
        return iter(self.strings())

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, tuple, StringTable)) else NotImplemented

    def __repr__(self) -> str:
        return f"StringTable({len(self)} strings)"

    def strings(self) -> list[str]:
        """Every string, decoded (once); GGUFError naming the first that is not UTF-8."""
        if self._strings is None:
            raw, ranges = self._raw, list(zip(self._starts.tolist(), self._ends.tolist()))
            try:
                self._strings = [raw[s:e].decode("utf-8") for s, e in ranges]
            except UnicodeDecodeError:
                i = next(i for i, (s, e) in enumerate(ranges) if not _is_utf8(raw[s:e]))
                raise GGUFError(f"{self._what}[{i}] is not valid UTF-8") from None
        return self._strings


def _string_table_py(buf, pos: int, count: int) -> tuple[bytes, np.ndarray, np.ndarray, int]:
    """volvox._kernels.scan.string_table in Python, for a source tree without its compiled modules."""
    starts, ends = np.empty(count, np.int64), np.empty(count, np.int64)  # (count,) each
    start, size, table = pos, len(buf), bytearray()
    for i in range(count):
        if pos + 8 > size or _U64.unpack_from(buf, pos)[0] > size - pos - 8:
            return b"", starts, ends, i
        n = _U64.unpack_from(buf, pos)[0]
        starts[i], ends[i] = pos + 8 - start, pos + 8 + n - start
        table += bytes(8) + buf[pos + 8:pos + 8 + n]
        pos += 8 + n
    return bytes(table), starts, ends, -1


try:
    from volvox._kernels.scan import string_table
except ImportError:  # not built (a source checkout): the same walk in Python
    string_table = _string_table_py


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _parse(buf: mmap.mmap | bytes, path: str) -> tuple[int, dict[str, Any], int, dict[str, GGUFTensorInfo]]:
    """Parse and validate the whole header; return (version, metadata, alignment, tensors)."""
    c = _Cursor(buf, path)
    if c.size < 4 or buf[:4] != MAGIC:
        raise c.fail(f"not a GGUF file (magic {bytes(buf[:4])!r}, expected {MAGIC!r})")
    if c.size < _HEADER.size:
        raise c.fail(f"truncated: the header needs {_HEADER.size} bytes, the file has {c.size}")
    _, version, tensor_count, kv_count = _HEADER.unpack_from(buf, 0)
    if version not in VERSIONS:
        if version >> 24 in VERSIONS and version & 0xFFFFFF == 0:
            raise UnsupportedError(f"{path}: big-endian GGUF files are not supported")
        raise UnsupportedError(f"{path}: GGUF version {version} is not supported "
                               f"(volvox reads versions {' and '.join(map(str, VERSIONS))})")
    c.pos = _HEADER.size
    if kv_count * _MIN_KV_BYTES > c.remaining():
        raise c.fail(f"kv_count {kv_count} is impossible: the {c.remaining()} bytes left "
                     f"hold at most {c.remaining() // _MIN_KV_BYTES} entries")
    if tensor_count * _MIN_TENSOR_INFO_BYTES > c.remaining():
        raise c.fail(f"tensor_count {tensor_count} is impossible: the {c.remaining()} bytes "
                     f"left hold at most {c.remaining() // _MIN_TENSOR_INFO_BYTES} tensor infos")
    metadata = _read_metadata(c, kv_count)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        raise c.fail(f"key 'general.alignment' must be a positive power of two, got {alignment!r}")
    infos = [_read_tensor_info(c, i) for i in range(tensor_count)]
    data_start = -(-c.pos // alignment) * alignment
    return version, metadata, alignment, _place_tensors(c, infos, data_start, alignment)


def _read_metadata(c: _Cursor, kv_count: int) -> dict[str, Any]:
    """Read the KV section."""
    metadata: dict[str, Any] = {}
    for i in range(kv_count):
        key = c.string(f"key #{i}")
        if key in metadata:
            raise c.fail(f"duplicate key {key!r}")
        vtype = c.u32(f"value type of key {key!r}")
        metadata[key] = c.value(vtype, f"key {key!r}")
    return metadata


def _read_tensor_info(c: _Cursor, i: int) -> tuple[str, tuple[int, ...], str, int, int]:
    """Read one tensor info; return (name, ne in ggml order, qtype, relative offset, nbytes)."""
    name = c.string(f"name of tensor #{i}")
    what = f"tensor {name!r}"
    n_dims = c.u32(f"n_dims of {what}")
    if n_dims > MAX_DIMS:
        raise c.fail(f"{what}: n_dims {n_dims} exceeds the maximum of {MAX_DIMS}")
    ne = struct.unpack_from(f"<{n_dims}Q", c.buf, c.skip(8 * n_dims, f"dims of {what}"))
    type_id = c.u32(f"type of {what}")
    offset = c.u64(f"offset of {what}")
    if any(d == 0 or d >= 2**63 for d in ne):
        raise c.fail(f"{what}: dims {list(ne)} must all be positive int64 values")
    if math.prod(ne) >= 2**63:
        raise c.fail(f"{what}: the product of dims {list(ne)} overflows int64")
    fmt = GGML_FORMAT_BY_ID.get(type_id)
    if fmt is None:
        raise c.fail(f"{what}: unknown ggml type id {type_id}")
    row = ne[0] if ne else 1
    if row % fmt.block_size:
        raise c.fail(f"{what}: row length {row} is not a multiple of the {fmt.name} "
                     f"block size {fmt.block_size}")
    return name, ne, fmt.name, offset, math.prod(ne) // fmt.block_size * fmt.type_size


def _place_tensors(c: _Cursor, infos: list, data_start: int, alignment: int) -> dict[str, GGUFTensorInfo]:
    """Turn relative offsets into absolute ones; check names, alignment, bounds and overlaps."""
    tensors: dict[str, GGUFTensorInfo] = {}
    for name, ne, qtype, offset, nbytes in infos:
        if name in tensors:
            raise c.fail(f"duplicate tensor name {name!r}")
        if offset % alignment:
            raise c.fail(f"tensor {name!r}: offset {offset} is not a multiple of the "
                         f"alignment {alignment}")
        start = data_start + offset
        if start + nbytes > c.size:
            raise c.fail(f"tensor {name!r}: data [{start}, {start + nbytes}) runs past the "
                         f"end of the file ({c.size} bytes; truncated or corrupt)")
        tensors[name] = GGUFTensorInfo(name, tuple(reversed(ne)), qtype, start, nbytes)
    by_offset = sorted(tensors.values(), key=lambda t: t.offset)
    for a, b in zip(by_offset, by_offset[1:]):
        if b.offset < a.offset + a.nbytes:
            raise c.fail(f"tensors {a.name!r} and {b.name!r} overlap "
                         f"([{a.offset}, {a.offset + a.nbytes}) and "
                         f"[{b.offset}, {b.offset + b.nbytes}))")
    return tensors


class GGUFFile:
    """An open GGUF file: metadata and tensor directory parsed, tensor data mapped.

    path:      the file, as given
    version:   2 or 3
    metadata:  key -> value in file order; scalars as int/float/bool/str, string
               arrays as StringTable (a sequence of str), numeric arrays as 1-D numpy
               arrays (copies)
    alignment: general.alignment, or 32
    tensors:   name -> GGUFTensorInfo in file order
    """

    def __init__(self, path: str | os.PathLike):
        """Open and map ``path``; parse and validate the header, metadata and tensor infos."""
        self.path = os.fspath(path)
        self._buf: mmap.mmap | bytes | None = map_file(self.path, GGUFError, "GGUF")
        try:
            self.version, self.metadata, self.alignment, self.tensors = _parse(self._buf, self.path)
        except BaseException:
            self.close()
            raise

    def tensor(self, name: str) -> np.ndarray | QuantTensor:
        """The tensor ``name`` without copying: a read-only numpy view for plain types
        (bf16 as raw uint16 bits), a QuantTensor of (rows, row_bytes) blocks for
        supported block-quantized types."""
        if self._buf is None:
            raise ClosedError(f"{self.path}: tensor {name!r} requested after close()")
        info = self.tensors.get(name)
        if info is None:
            raise GGUFError(f"{self.path}: no tensor named {name!r}")
        dtype = _PLAIN_DTYPES.get(info.qtype)
        if dtype is not None:
            count = info.nbytes // dtype.itemsize
            return np.frombuffer(self._buf, dtype, count, info.offset).reshape(info.shape)
        if info.qtype not in SUPPORTED_QTYPES:
            raise UnsupportedError(f"{self.path}: tensor {name!r} has type {info.qtype}, which "
                                   f"volvox cannot compute with (supported: "
                                   f"{', '.join(SUPPORTED_QTYPES)})")
        rows = math.prod(info.shape[:-1])
        data = np.frombuffer(self._buf, np.uint8, info.nbytes, info.offset)  # (nbytes,)
        return QuantTensor(data.reshape(rows, info.nbytes // rows), info.qtype,
                           (rows, info.shape[-1]))

    def close(self) -> None:
        """Release the mapping; arrays already handed out keep it alive until they are freed."""
        buf, self._buf = self._buf, None
        release(buf)

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_gguf(path: str | os.PathLike) -> GGUFFile:
    """Open a GGUF file (see :class:`GGUFFile`)."""
    return GGUFFile(path)
