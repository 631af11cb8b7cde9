"""Read a PyTorch state dict (.pth) without torch and without arbitrary unpickling, and build
EfficientNet-Lite0 from one.

The unpickler resolves only OrderedDict, torch's tensor rebuild function and typed storage
classes; anything else in the pickle (a class, a function) is refused with a WeightsError,
so loading a file can never run code. Both torch formats are read: the zip format
(``archive/data.pkl`` + ``archive/data/<key>``) and the legacy stream (magic, protocol,
sys info, the object, storage keys, then each storage as int64 count + raw bytes).
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path

import numpy as np

from volvox.errors import WeightsError

STORAGES = {"FloatStorage": np.float32, "HalfStorage": np.float16, "DoubleStorage": np.float64,
            "LongStorage": np.int64, "IntStorage": np.int32, "ByteStorage": np.uint8, "CharStorage": np.int8}
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def _rebuild_tensor(storage, offset, size, stride, *unused) -> np.ndarray:
    """torch._utils._rebuild_tensor_v2 as a bounds-checked numpy copy."""
    data, dtype = storage
    arr = np.frombuffer(data, dtype)
    size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
    extent = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else offset
    if offset < 0 or extent > arr.size or any(s < 0 for s in stride) or len(size) != len(stride):
        raise ValueError(f"tensor of shape {size} reaches past its storage of {arr.size} elements")
    if any(n < 0 for n in size) or int(np.prod(size, dtype=object)) > arr.size:
        # stride-0 (expanded) tensors could declare any size over a tiny storage: refused, so that
        # the copy below never allocates more than the file holds
        raise ValueError(f"tensor of shape {size} has more elements than its storage of {arr.size}")
    item = arr.itemsize
    return np.lib.stride_tricks.as_strided(arr[offset:], tuple(size), tuple(s * item for s in stride)).copy()


class _Unpickler(pickle._Unpickler):
    """Unpickles dicts of tensors only; ``storage_bytes(key, dtype)`` supplies storage data.

    The pure-Python unpickler, not the C one: the C one allocates the length a BINBYTES /
    BINUNICODE opcode declares before reading it (4 GiB from 5 hostile bytes), the Python one
    reads what the file holds. data.pkl is small (the tensor data lives beside it)."""

    def __init__(self, file, path: str, storage_bytes, rebuild=_rebuild_tensor):
        super().__init__(file)
        self.path, self.storage_bytes, self.rebuild = path, storage_bytes, rebuild

    def _refuse_bytearray8(self):
        raise WeightsError(f"{self.path}: the pickle holds a BYTEARRAY8 record, which torch.save never writes "
                           f"(and whose declared length the unpickler would allocate before reading)")

    dispatch = {**pickle._Unpickler.dispatch, pickle.BYTEARRAY8[0]: _refuse_bytearray8}

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return self.rebuild
        if module == "torch" and name in STORAGES:
            return name
        raise WeightsError(f"{self.path}: refuses to unpickle {module}.{name} (only tensors and dicts are allowed)")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and pid[1] in STORAGES):
            raise WeightsError(f"{self.path}: unsupported storage record {pid!r:.100}")
        return self.storage_bytes(str(pid[2]), STORAGES[pid[1]]), STORAGES[pid[1]]


def read_state_dict(path: str | Path) -> dict[str, np.ndarray]:
    """name -> numpy array of a torch.save'd state dict (zip or legacy format)."""
    path = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise WeightsError(f"{path}: no such file") from None
    try:
        if zipfile.is_zipfile(io.BytesIO(raw)):
            zf = zipfile.ZipFile(io.BytesIO(raw))
            pkl = next(n for n in zf.namelist() if n.endswith("/data.pkl"))
            prefix = pkl[: -len("data.pkl")]
            obj = _Unpickler(io.BytesIO(_member(zf, pkl, len(raw))), path,
                             lambda key, dt: _member(zf, f"{prefix}data/{key}", len(raw))).load()
        else:
            obj = _read_legacy(raw, path)
    except (pickle.UnpicklingError, EOFError, KeyError, StopIteration, ValueError, struct.error, TypeError,
            AttributeError, IndexError, OverflowError, RecursionError, zipfile.BadZipFile, zlib.error,
            NotImplementedError, RuntimeError) as e:
        # a hostile pickle can call the allowed callables with any arguments: every such misuse
        # (wrong arity, non-tuple shapes, a storage name called as a function) lands here
        raise WeightsError(f"{path}: not a readable PyTorch state dict ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict) or not all(isinstance(v, np.ndarray) for v in obj.values()):
        raise WeightsError(f"{path}: expected a dict of tensors (a state dict)")
    return dict(obj)


def _member(zf: zipfile.ZipFile, name: str, file_size: int) -> bytes:
    """One archive member; torch stores members uncompressed, so one that would inflate past the
    file's own size is a zip bomb, refused before anything is decompressed."""
    size = zf.getinfo(name).file_size
    if size > file_size:
        raise ValueError(f"archive member {name!r} declares {size} bytes, more than the {file_size}-byte file")
    return zf.read(name)


def _read_legacy(raw: bytes, path: str):
    """The pre-1.6 stream: storages follow the object, so unpickle it twice: once to learn the
    storage dtypes and where the data starts, once with the data."""
    f = io.BytesIO(raw)
    plain = lambda: _Unpickler(f, path, None).load()  # noqa: E731
    if plain() != LEGACY_MAGIC:
        raise WeightsError(f"{path}: not a PyTorch file (bad magic number)")
    plain(), plain()  # protocol version, sys info
    start = f.tell()
    dtypes: dict[str, type] = {}
    _Unpickler(f, path, lambda key, dt: dtypes.setdefault(key, dt), rebuild=lambda *a: None).load()
    data = {}
    for key in plain():
        (n,) = struct.unpack("<q", f.read(8))
        nbytes = n * np.dtype(dtypes[key]).itemsize
        data[key] = f.read(nbytes)
        if len(data[key]) != nbytes:
            raise WeightsError(f"{path}: storage {key} is truncated")
    f.seek(start)
    return _Unpickler(f, path, lambda key, dt: data[key]).load()
