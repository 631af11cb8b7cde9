"""Fuzz the GGUF and safetensors readers: mutate a small valid file (byte flips, truncation,
hostile counts, lengths and offsets) and check that only volvox errors ever escape."""

import importlib.util
import json
import struct
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from volvox.errors import VolvoxError
from volvox.formats.gguf import read_gguf
from volvox.ir.quant_blocks import QuantTensor
from volvox.formats.safetensors import SafeTensorsFile

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
GGUF_SEED = (DATA / "tiny.gguf").read_bytes()
ST_SEED = (DATA / "tiny.safetensors").read_bytes()
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _gguf_fields() -> tuple[list[int], list[int]]:
    """Positions of the seed's u64 fields (counts, lengths, dims, offsets) and u32 fields (types)."""
    spec = importlib.util.spec_from_file_location("make_bad_files", ROOT / "tools" / "make_bad_files.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    data, at = tool.build_gguf()
    assert data == GGUF_SEED
    u64_tags = ("_count", "key_len", "str_len", "name_len", ".dims", ".offset")
    u64 = [p for tag, p in at.items() if tag.endswith(u64_tags)]
    u32 = [p for tag, p in at.items() if tag.endswith((".type", ".n_dims", ".array_type", "version"))]
    return u64, u32


GGUF_U64, GGUF_U32 = _gguf_fields()
INTERESTING = st.one_of(
    st.sampled_from([0, 1, 2, 3, 31, 32, 33, 255, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]),
    st.integers(0, 2**64 - 1),
)


@st.composite
def mutated(draw, seed: bytes, u64_fields: list[int], u32_fields: list[int], keep: int = 0) -> bytes:
    """``seed`` after a few random mutations; flips and cuts spare the first ``keep`` bytes
    (the magic, whose failures the bad-file corpus already covers)."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "u64", "u32", "splice"]))
        if kind == "flip" and len(data) > keep:
            data[draw(st.integers(keep, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate" and len(data) > keep:
            del data[draw(st.integers(keep, len(data))):]
        elif kind == "u64" and u64_fields:
            at = draw(st.sampled_from(u64_fields))
            data[at:at + 8] = struct.pack("<Q", draw(INTERESTING))[:max(0, len(data) - at)]
        elif kind == "u32" and u32_fields:
            at = draw(st.sampled_from(u32_fields))
            data[at:at + 4] = struct.pack("<I", draw(INTERESTING) % 2**32)[:max(0, len(data) - at)]
        elif kind == "splice" and len(data) > keep:
            at = draw(st.integers(keep, len(data) - 1))
            data[at:at + 8] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def _touch(x) -> None:
    """Read every byte of a tensor, so an out-of-bounds view would fault here."""
    raw = x.data if isinstance(x, QuantTensor) else x
    np.asarray(raw).tobytes()


def _check(data: bytes, suffix: str) -> None:
    """Parse ``data`` and touch every tensor; only VolvoxError may escape."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"fuzz{suffix}"
        path.write_bytes(data)
        try:
            if suffix == ".gguf":
                with read_gguf(path) as f:
                    for name in f.tensors:
                        _touch(f.tensor(name))
            else:
                with SafeTensorsFile(path) as f:
                    for name in f.names:
                        _touch(f.tensor(name))
        except VolvoxError as e:
            assert str(path) in str(e)


@st.composite
def st_number_edits(draw, seed: bytes) -> bytes:
    """The seed with one header number (shape dim or offset) replaced, header re-serialized."""
    (n,) = struct.unpack_from("<Q", seed)
    header = json.loads(seed[8:8 + n])
    name = draw(st.sampled_from([k for k in header if k != "__metadata__"]))
    field = draw(st.sampled_from(["shape", "data_offsets"]))
    values = header[name][field]
    if values:
        at = draw(st.integers(0, len(values) - 1))
        values[at] = draw(st.one_of(INTERESTING, st.integers(-2**70, 2**70)))
    else:
        values.append(draw(INTERESTING))
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + seed[8 + n:]


@FUZZ
@given(mutated(GGUF_SEED, GGUF_U64, GGUF_U32, keep=4))
def test_gguf_mutations_raise_only_volvox_errors(data):
    _check(data, ".gguf")


@FUZZ
@given(mutated(ST_SEED, [0], []))  # [0]: the header length
def test_safetensors_mutations_raise_only_volvox_errors(data):
    _check(data, ".safetensors")


@FUZZ
@given(st_number_edits(ST_SEED))
def test_safetensors_header_numbers_raise_only_volvox_errors(data):
    _check(data, ".safetensors")
