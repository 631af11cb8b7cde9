"""Hugging Face checkpoint folders: config.json + safetensors (single or sharded) + tokenizer.json.

The folder is read in place: safetensors files are memory-mapped and float32 tensors are used
without a copy (BF16 is widened to float32). The architectures (volvox/architectures) read their
config fields through HFConfig and take every tensor they need, checked against the shape
config.json implies, through HFCheckpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from volvox.errors import BlueprintError, ModelNotFoundError, ShapeError, UnsupportedError, WeightsError
from volvox.formats.config_json import read_config_json
from volvox.formats.safetensors import SafeTensorsFile
from volvox.ir.graph import TensorSpec

_REQUIRED = object()


class HFConfig:
    """config.json of a checkpoint: typed field access with errors naming the file and field."""

    def __init__(self, data: dict, path: str):
        self.data, self.path = data, path
        self.model_type = data.get("model_type")

    def get(self, *keys: str, default: Any = _REQUIRED, kind: type = int) -> Any:
        """The first of ``keys`` present (and not null), converted to ``kind``; BlueprintError if required and absent."""
        for key in keys:
            value = self.data.get(key)
            if value is None:
                continue
            if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise BlueprintError(f"{self.path}: field {key!r} must be a number, got {value!r}")
            if kind is int and value != int(value):
                raise BlueprintError(f"{self.path}: field {key!r} must be an integer, got {value!r}")
            if kind in (int, float) and value < 0:
                raise BlueprintError(f"{self.path}: field {key!r} must be >= 0, got {value!r}")
            return kind(value)
        if default is _REQUIRED:
            raise BlueprintError(f"{self.path}: missing field {' or '.join(map(repr, keys))} "
                                 f"(model_type {self.model_type!r} needs it)")
        return default

    def unsupported(self, what: str) -> UnsupportedError:
        """An UnsupportedError naming this config and ``what`` it asks for."""
        return UnsupportedError(f"{self.path}: {what} is not supported for model_type {self.model_type!r}")


class HFCheckpoint:
    """The tensors of a checkpoint folder: ``model.safetensors`` or a sharded index, mmapped."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._files: list[SafeTensorsFile] = []
        self._where: dict[str, SafeTensorsFile] = {}  # tensor name -> the file holding it
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        single, index = self.directory / "model.safetensors", self.directory / "model.safetensors.index.json"
        if single.is_file():
            st = SafeTensorsFile(single)
            self._files.append(st)
            self._where = {n: st for n in st.names}
            return
        if not index.is_file():
            raise ModelNotFoundError(f"{self.directory}: no model.safetensors or model.safetensors.index.json "
                                     "(only safetensors checkpoints are supported)")
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise ValueError("weight_map must map tensor names to file names")
        except (ValueError, KeyError, TypeError) as e:
            raise WeightsError(f"{index}: not a valid safetensors index: {e}") from None
        shards: dict[str, SafeTensorsFile] = {}
        for shard in sorted(set(weight_map.values())):
            path = self.directory / shard
            if Path(shard).name != shard or not path.is_file():
                raise ModelNotFoundError(f"{index}: shard {shard!r} is missing from {self.directory}")
            shards[shard] = SafeTensorsFile(path)
            self._files.append(shards[shard])
        for name, shard in weight_map.items():
            if name not in shards[shard].names:
                raise WeightsError(f"{index}: tensor {name!r} should be in {shard}, which lacks it")
            self._where[name] = shards[shard]

    def has(self, name: str) -> bool:
        """Whether the checkpoint holds tensor ``name``."""
        return name in self._where

    def prefix(self, probe: str, candidates: tuple[str, ...]) -> str:
        """The first name prefix in ``candidates`` under which tensor ``probe`` exists."""
        for p in candidates:
            if self.has(p + probe):
                return p
        raise WeightsError(f"{self.directory}: checkpoint has no tensor {probe!r} "
                           f"(tried prefixes {list(candidates)})")

    def take(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name``, which must have ``shape``: float32 (a zero-copy view when stored as F32),
        or float16 for stored F16 matrices. BF16 and F64 are converted to float32."""
        st = self._where.get(name)
        if st is None:
            raise WeightsError(f"{self.directory}: checkpoint has no tensor {name!r}")
        a = st.tensor(name)
        if a.shape != tuple(shape):
            raise ShapeError(f"{st.path}: tensor {name!r} has shape {list(a.shape)}, "
                             f"config.json implies {list(shape)}")
        if a.dtype == np.uint16:  # BF16: safetensors.py hands out its raw bits
            return (a.astype(np.uint32) << 16).view(np.float32)
        if a.dtype == np.float16:
            return a if a.ndim == 2 else a.astype(np.float32)
        if a.dtype in (np.float32, np.float64):
            return a if a.dtype == np.float32 else a.astype(np.float32)
        raise WeightsError(f"{st.path}: tensor {name!r} has dtype {a.dtype}, not a float type")

    def close(self) -> None:
        """Release every mapped file."""
        for st in self._files:
            st.close()


def specs_of(weights: dict[str, Any]) -> dict[str, TensorSpec]:
    """Graph specs of taken weight arrays."""
    return {n: TensorSpec(n, tuple(a.shape), a.dtype.name) for n, a in weights.items()}


def read_hf_config(directory: Path) -> HFConfig:
    """config.json of an HF folder; BlueprintError if it is not a JSON object with a model_type."""
    data, path = read_config_json(directory, missing=ModelNotFoundError)
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise BlueprintError(f"{path}: a Hugging Face config needs a string 'model_type'")
    return HFConfig(data, str(path))


def is_hf_folder(directory: Path) -> bool:
    """True for a folder whose config.json has a ``model_type`` and is not a volvox blueprint."""
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "model_type" in data and data.get("format") != "volvox-blueprint"


def eos_ids(directory: Path) -> set[int]:
    """End-of-sequence ids declared by config.json and generation_config.json."""
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        try:
            value = json.loads((directory / name).read_text(encoding="utf-8")).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and not isinstance(v, bool):
                ids.add(v)
    return ids
