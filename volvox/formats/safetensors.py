"""Read and write safetensors files without the ``safetensors`` package.

File layout:

    header_len: u64 little-endian
    header:     header_len bytes of UTF-8 JSON, padded with spaces:
                {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [...],
                                                    "data_offsets": [begin, end]}, ...}
    data:       the tensors' bytes; offsets are relative to the start of this section

Reading maps the file once and hands out read-only numpy views (zero-copy).
BF16 has no numpy dtype, so BF16 tensors come back as their raw uint16 bits;
widen with ``(x.astype(np.uint32) << 16).view(np.float32)``.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import secrets
import struct

import numpy as np

from volvox.errors import ClosedError, WeightsError
from volvox.formats.mapped_file import map_file, release

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the limit the reference implementation enforces
MAX_NDIM = 32  # numpy's limit before 2.0
_METADATA_KEY = "__metadata__"

# safetensors dtype -> little-endian numpy dtype read back (BF16 as raw bits).
DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
# numpy dtype kind+size -> safetensors dtype, for writing.
_DTYPE_NAMES = {(dt.kind, dt.itemsize): name for name, dt in DTYPES.items() if name != "BF16"}


def _no_duplicate_keys(pairs: list) -> dict:
    """json object_pairs_hook: build the dict, refusing a key seen twice."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise WeightsError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _parse(buf: mmap.mmap | bytes, path: str) -> tuple[dict[str, str], int, dict[str, tuple]]:
    """Validate the header; return (metadata, data section start, name -> (dtype, shape, begin, end))."""
    size = len(buf)
    if size < 8:
        raise WeightsError(f"{path}: truncated: {size} bytes, too short for the 8-byte header length")
    (n,) = struct.unpack_from("<Q", buf, 0)
    if n > size - 8:
        raise WeightsError(f"{path}: header length {n} exceeds the {size - 8} bytes after it "
                           f"(truncated or not a safetensors file)")
    if n > MAX_HEADER_BYTES:
        raise WeightsError(f"{path}: header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    try:
        header = json.loads(buf[8:8 + n].decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except WeightsError as e:
        raise WeightsError(f"{path}: header JSON has a {e}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise WeightsError(f"{path}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise WeightsError(f"{path}: header must be a JSON object, got {type(header).__name__}")
    metadata = header.pop(_METADATA_KEY, {})
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise WeightsError(f"{path}: {_METADATA_KEY!r} must map strings to strings, "
                           f"got {metadata!r:.200}")
    data_size = size - 8 - n
    entries = {name: _check_entry(path, name, entry, data_size) for name, entry in header.items()}
    spans = sorted((b, e, name) for name, (_, _, b, e) in entries.items() if e > b)
    for (b1, e1, n1), (b2, e2, n2) in zip(spans, spans[1:]):
        if b2 < e1:
            raise WeightsError(f"{path}: tensors {n1!r} [{b1}, {e1}) and {n2!r} [{b2}, {e2}) overlap")
    return metadata, 8 + n, entries


def _check_entry(path: str, name: str, entry, data_size: int) -> tuple:
    """Validate one header entry; return (dtype, shape, begin, end)."""
    what = f"{path}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise WeightsError(f"{what}: entry must be a JSON object, got {entry!r:.200}")
    dtype_name, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
        raise WeightsError(f"{what}: unknown dtype {dtype_name!r:.100} (known: {', '.join(DTYPES)})")
    if (not isinstance(shape, list) or len(shape) > MAX_NDIM
            or not all(type(d) is int and 0 <= d < 2**62 for d in shape)):
        raise WeightsError(f"{what}: shape must be a list of at most {MAX_NDIM} non-negative "
                           f"ints, got {shape!r:.200}")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(o) is int for o in offsets)):
        raise WeightsError(f"{what}: data_offsets must be [begin, end], got {offsets!r:.200}")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise WeightsError(f"{what}: data_offsets [{begin}, {end}] fall outside the "
                           f"{data_size}-byte data section (truncated or corrupt)")
    dtype = DTYPES[dtype_name]
    if math.prod(d for d in shape if d) * dtype.itemsize >= 2**62:
        raise WeightsError(f"{what}: shape {shape} is too large")
    want = math.prod(shape) * dtype.itemsize
    if end - begin != want:
        raise WeightsError(f"{what}: data_offsets [{begin}, {end}] hold {end - begin} bytes, "
                           f"but {dtype_name} {shape} needs {want}")
    return dtype, tuple(shape), begin, end


class SafeTensorsFile:
    """An open safetensors file: header validated, data mapped read-only.

    path:     the file, as given
    metadata: the "__metadata__" strings ({} when absent)
    names:    tensor names in header order
    """

    def __init__(self, path: str | os.PathLike):
        """Open and map ``path``; validate the header and every tensor entry."""
        self.path = os.fspath(path)
        self._buf: mmap.mmap | bytes | None = map_file(self.path, WeightsError, "safetensors")
        try:
            self.metadata, self._data_start, self._entries = _parse(self._buf, self.path)
        except BaseException:
            self.close()
            raise
        self.names: list[str] = list(self._entries)

    def tensor(self, name: str) -> np.ndarray:
        """A read-only numpy view of tensor ``name`` (no copy; BF16 as raw uint16 bits)."""
        if self._buf is None:
            raise ClosedError(f"{self.path}: tensor {name!r} requested after close()")
        if name not in self._entries:
            raise WeightsError(f"{self.path}: no tensor named {name!r}")
        dtype, shape, begin, end = self._entries[name]
        if begin == end:
            out = np.empty(shape, dtype)
            out.flags.writeable = False
            return out
        count = (end - begin) // dtype.itemsize
        return np.frombuffer(self._buf, dtype, count, self._data_start + begin).reshape(shape)

    def close(self) -> None:
        """Release the mapping; arrays already handed out keep it alive until they are freed."""
        buf, self._buf = self._buf, None
        release(buf)

    def __enter__(self) -> SafeTensorsFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _dtype_name(path: str, name: str, a: np.ndarray) -> str:
    """The safetensors dtype for array ``a`` (numpy has no bfloat16, so BF16 is never written)."""
    dtype_name = _DTYPE_NAMES.get((a.dtype.kind, a.dtype.itemsize))
    if dtype_name is None:
        raise WeightsError(f"{path}: cannot save tensor {name!r}: dtype {a.dtype} has no "
                           f"safetensors equivalent")
    return dtype_name


def save_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray],
                     metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` to ``path`` atomically (temp file in the same directory, fsync, rename).

    The header lists tensors in insertion order. The data section is laid out
    contiguously, as the format requires, in insertion order stably sorted by
    descending item size, so every tensor starts at a multiple of its item size
    (8-byte dtypes 8-aligned). On any error no file is left at ``path``.
    """
    path = os.fspath(path)
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise WeightsError(f"{path}: metadata must map strings to strings")
    arrays: dict[str, tuple[np.ndarray, str]] = {}  # name -> (little-endian C-order array, dtype)
    for name, a in tensors.items():
        if not isinstance(name, str) or name == _METADATA_KEY:
            raise WeightsError(f"{path}: invalid tensor name {name!r}")
        if isinstance(a, np.generic):
            a = np.asarray(a)
        if not isinstance(a, np.ndarray):
            raise WeightsError(f"{path}: tensor {name!r} is a {type(a).__name__}, not a numpy array")
        dtype_name = _dtype_name(path, name, a)
        arrays[name] = np.asarray(a, a.dtype.newbyteorder("<"), order="C"), dtype_name
    order = sorted(arrays, key=lambda n: -arrays[n][0].dtype.itemsize)  # stable sort
    header: dict[str, dict] = {_METADATA_KEY: metadata} if metadata else {}
    header.update({name: {} for name in arrays})  # fixes the key order: insertion order
    offset = 0
    for name in order:
        a, dtype_name = arrays[name]
        header[name] = {"dtype": dtype_name, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)

    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    try:  # os.open, not mkstemp: the file gets the umask's permissions, not 0600
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as e:
        raise WeightsError(f"{path}: cannot create a file in {directory}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            for name in order:
                f.write(arrays[name][0].reshape(-1).view(np.uint8))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise WeightsError(f"{path}: cannot write: {e.strerror or e}") from e
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    """Make the rename durable (best effort: not every platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
