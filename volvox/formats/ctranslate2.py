"""CTranslate2 model folders: ``model.bin`` (named variables), ``config.json``, ``tokenizer.json``.

``model.bin`` (binary version 6, little-endian), as ctranslate2's ModelSpec serialises it:

    u32 version | str spec_name | u32 spec_revision | u32 n_variables
    n_variables x (str name | u8 rank | u32 dim x rank | u8 dtype | u32 n_bytes | n_bytes of data)
    u32 n_aliases | n_aliases x (str alias | str target)

where ``str`` is a u16 length (the terminating NUL included), the UTF-8 bytes and a NUL, and dtype
is 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16. A quantized matrix ``<x>/weight``
has a per-row ``<x>/weight_scale``: weight = stored / scale. This module only reads; the
architecture (architectures/whisper.py) maps the variable names to its graph.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from volvox.errors import BlueprintError, UnsupportedError, WeightsError
from volvox.formats.mapped_file import map_file, release

CT2_DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, np.uint16)  # bfloat16 kept as raw bits
SUPPORTED_VERSIONS = (5, 6)


def is_ct2_folder(directory: Path) -> bool:
    """True for a folder holding a CTranslate2 ``model.bin``."""
    return (directory / "model.bin").is_file()


@dataclass
class CT2Model:
    """The variables of a model.bin (memory-mapped views, aliases resolved) and its config.json."""

    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    config: dict
    path: Path
    _buffer: object = None

    def get(self, name: str, shape: tuple | None = None) -> np.ndarray:
        """Variable ``name`` as float32 (float16 matrices stay float16, int8 ones are dequantized);
        WeightsError if absent or not of ``shape``."""
        if name not in self.variables:
            raise WeightsError(f"{self.path}: model.bin has no variable {name!r}")
        a = self.variables[name]
        if shape is not None and a.shape != tuple(shape):
            raise WeightsError(f"{self.path}: variable {name!r} has shape {list(a.shape)}, expected {list(shape)}")
        if a.dtype == np.int8 and name + "_scale" in self.variables:
            scale = self.variables[name + "_scale"].astype(np.float32)  # (rows,)
            return a.astype(np.float32) / scale.reshape((-1,) + (1,) * (a.ndim - 1))
        if a.dtype == np.uint16:  # bfloat16
            return (a.astype(np.uint32) << 16).view(np.float32)
        if a.dtype == np.float16 and a.ndim == 2:
            return a
        if a.dtype.kind != "f":
            raise WeightsError(f"{self.path}: variable {name!r} has dtype {a.dtype}, not a float type")
        return a.astype(np.float32)

    def scalar(self, name: str, default=None):
        """A scalar variable (num_heads, pre_norm ...) as a Python number, ``default`` when absent."""
        if name not in self.variables:
            if default is None:
                raise WeightsError(f"{self.path}: model.bin has no variable {name!r}")
            return default
        return self.variables[name].reshape(-1)[0].item()

    def close(self) -> None:
        """Release the file mapping (views still alive keep it until they are freed)."""
        release(self._buffer)


def read_ct2(directory: str | Path) -> CT2Model:
    """The model.bin and config.json of a CTranslate2 folder; WeightsError for a truncated or
    malformed file, UnsupportedError for a binary version or dtype this reader does not know."""
    directory = Path(directory)
    path = directory / "model.bin"
    buf = map_file(str(path), WeightsError, "CTranslate2 model.bin")
    try:
        spec, revision, variables = _parse(buf, path)
    except BaseException:
        release(buf)
        raise
    config = {}
    if (directory / "config.json").is_file():
        try:
            config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            release(buf)
            raise BlueprintError(f"{directory / 'config.json'}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        release(buf)
        raise BlueprintError(f"{directory / 'config.json'}: must be a JSON object")
    return CT2Model(spec, revision, variables, config, path, buf)


def _parse(buf, path: Path) -> tuple[str, int, dict[str, np.ndarray]]:
    pos = 0

    def take(n: int) -> memoryview:
        nonlocal pos
        if pos + n > len(buf):
            raise WeightsError(f"{path}: truncated at byte {pos} (wanted {n} more of {len(buf)})")
        view = memoryview(buf)[pos:pos + n]
        pos += n
        return view

    def number(fmt: str) -> int:
        return struct.unpack("<" + fmt, take(struct.calcsize(fmt)))[0]

    def string() -> str:
        raw = bytes(take(number("H")))
        if not raw or raw[-1] != 0:
            raise WeightsError(f"{path}: malformed string before byte {pos}")
        return raw[:-1].decode("utf-8", errors="replace")

    version = number("I")
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedError(f"{path}: CTranslate2 binary version {version} (supported: {SUPPORTED_VERSIONS})")
    spec, revision = string(), number("I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(number("I")):
        name = string()
        shape = tuple(number("I") for _ in range(number("B")))
        dtype_id, n_bytes = number("B"), number("I")
        if dtype_id >= len(CT2_DTYPES):
            raise UnsupportedError(f"{path}: variable {name!r} has CTranslate2 dtype id {dtype_id}")
        dtype = np.dtype(CT2_DTYPES[dtype_id])
        if n_bytes != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise WeightsError(f"{path}: variable {name!r} of shape {list(shape)} has {n_bytes} bytes")
        start = pos
        take(n_bytes)
        variables[name] = np.frombuffer(buf, dtype, count=n_bytes // dtype.itemsize, offset=start).reshape(shape)
    for _ in range(number("I")):
        alias, target = string(), string()
        if target not in variables:
            raise WeightsError(f"{path}: alias {alias!r} names unknown variable {target!r}")
        variables[alias] = variables[target]
    return spec, revision, variables
