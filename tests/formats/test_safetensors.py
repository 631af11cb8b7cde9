"""volvox.formats.safetensors: round trips with itself and with the real `safetensors` package,
zero-copy reads, atomic writes, and the API-level failures (file-level ones: test_bad_files.py)."""

import json
import os
import struct

import numpy as np
import pytest

from volvox.errors import ClosedError, ModelNotFoundError, WeightsError
from volvox.formats.safetensors import MAX_HEADER_BYTES, SafeTensorsFile, save_safetensors

st_numpy = pytest.importorskip("safetensors.numpy")
safetensors = pytest.importorskip("safetensors")


def _sample() -> dict[str, np.ndarray]:
    """One tensor per writable dtype, plus awkward layouts, in a deliberately mixed order."""
    rng = np.random.default_rng(0)
    return {
        "u8": np.arange(3, dtype=np.uint8),  # 3 bytes: would misalign what follows in insertion order
        "f64": rng.standard_normal((2, 3)),
        "f32": rng.standard_normal((4, 5)).astype(np.float32),
        "f16": rng.standard_normal(7).astype(np.float16),
        "i8": np.array([-128, 0, 127], np.int8),
        "i16": np.array([-3, 3], np.int16),
        "i32": np.arange(-5, 5, dtype=np.int32).reshape(2, 5),
        "i64": np.array([-(2**62), 2**62], np.int64),
        "u16": np.array([1, 65535], np.uint16),
        "u32": np.array([2**32 - 1], np.uint32),
        "u64": np.array([2**64 - 1], np.uint64),
        "bool": np.array([True, False, True]),
        "scalar": np.array(1.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
        "transposed": np.arange(12.0).reshape(3, 4).T,
        "big_endian": np.arange(4, dtype=">i4"),
    }


def _check_equal(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name, a in want.items():
        b = got[name]
        assert b.shape == a.shape and b.dtype == a.dtype.newbyteorder("="), name
        assert np.array_equal(b, a), name


def test_round_trip_through_volvox(tmp_path):
    path = tmp_path / "m.safetensors"
    tensors = _sample()
    save_safetensors(path, tensors, {"format": "np", "note": "\u00fcnicode"})
    with SafeTensorsFile(path) as f:
        assert f.names == list(tensors)  # header keeps insertion order
        assert f.metadata == {"format": "np", "note": "\u00fcnicode"}
        _check_equal({n: f.tensor(n) for n in f.names}, tensors)


def test_volvox_file_readable_by_safetensors_package(tmp_path):
    path = tmp_path / "m.safetensors"
    tensors = _sample()
    save_safetensors(path, tensors, {"k": "v"})
    _check_equal(st_numpy.load_file(str(path)), tensors)
    with safetensors.safe_open(str(path), framework="np") as f:
        assert f.metadata() == {"k": "v"}


def test_safetensors_package_file_readable_by_volvox(tmp_path):
    path = tmp_path / "ref.safetensors"
    tensors = {n: np.ascontiguousarray(a, a.dtype.newbyteorder("<")) for n, a in _sample().items()}
    st_numpy.save_file(tensors, str(path), metadata={"source": "safetensors"})
    with SafeTensorsFile(path) as f:
        assert f.metadata == {"source": "safetensors"}
        _check_equal({n: f.tensor(n) for n in f.names}, tensors)


def test_layout_is_aligned_and_contiguous(tmp_path):
    path = tmp_path / "m.safetensors"
    save_safetensors(path, _sample())
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    assert n % 8 == 0 and raw[8 + n - 1:8 + n] in (b" ", b"}")
    header = json.loads(raw[8:8 + n])
    assert "__metadata__" not in header  # omitted when there is none, as the reference does
    spans = sorted(tuple(e["data_offsets"]) for e in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(raw) - 8 - n
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # no gaps: the format forbids them
    sizes = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4}
    for entry in header.values():
        assert entry["data_offsets"][0] % sizes.get(entry["dtype"], 1) == 0


def test_saved_file_gets_umask_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        save_safetensors(tmp_path / "m.safetensors", {"a": np.zeros(1)})
    finally:
        os.umask(umask)
    assert (tmp_path / "m.safetensors").stat().st_mode & 0o777 == 0o644


def test_reads_are_zero_copy_and_read_only(tmp_path):
    path = tmp_path / "m.safetensors"
    save_safetensors(path, {"w": np.ones((3, 4), np.float32)})
    with SafeTensorsFile(path) as f:
        a, b = f.tensor("w"), f.tensor("w")
        assert not a.flags.writeable and not a.flags.owndata and np.shares_memory(a, b)
        with pytest.raises(ValueError):
            a[0, 0] = 2


def test_bf16_comes_back_as_raw_bits(tmp_path):
    bits = (np.array([1.0, -2.0, 0.5], np.float32).view(np.uint32) >> 16).astype("<u2")
    head = json.dumps({"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
    head += b" " * (-len(head) % 8)
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(struct.pack("<Q", len(head)) + head + bits.tobytes())
    with SafeTensorsFile(path) as f:
        x = f.tensor("x")
        assert x.dtype == np.uint16
        assert ((x.astype(np.uint32) << 16).view(np.float32) == [1.0, -2.0, 0.5]).all()


def test_overwrite_is_atomic_and_failures_leave_nothing(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    save_safetensors(path, {"a": np.zeros(2, np.float32)})
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(WeightsError, match="m.safetensors"):
        save_safetensors(path, {"b": np.ones(1000, np.float32)})
    assert path.read_bytes() == before  # the old file is untouched
    assert os.listdir(tmp_path) == ["m.safetensors"]  # no temp file left behind
    with pytest.raises(WeightsError):
        save_safetensors(tmp_path / "new.safetensors", {"b": np.ones(3)})
    assert os.listdir(tmp_path) == ["m.safetensors"]
    monkeypatch.undo()
    save_safetensors(path, {"b": np.ones(3)})
    with SafeTensorsFile(path) as f:
        assert f.names == ["b"]


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_safetensors(tmp_path / "m.safetensors", {"a": np.zeros(2)})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("tensors, metadata, match", [
    ({"c": np.zeros(2, np.complex64)}, None, "tensor 'c': dtype complex64"),
    ({"o": np.array([object()])}, None, "tensor 'o'"),
    ({"l": [1.0, 2.0]}, None, "tensor 'l' is a list"),
    ({"__metadata__": np.zeros(1)}, None, "__metadata__"),
    ({1: np.zeros(1)}, None, "invalid tensor name 1"),
    ({"a": np.zeros(1)}, {"epoch": 3}, "metadata must map strings to strings"),
])
def test_save_rejects_bad_arguments(tmp_path, tensors, metadata, match):
    with pytest.raises(WeightsError, match=match):
        save_safetensors(tmp_path / "m.safetensors", tensors, metadata)
    assert os.listdir(tmp_path) == []


def test_save_into_missing_directory(tmp_path):
    with pytest.raises(WeightsError, match="cannot create"):
        save_safetensors(tmp_path / "no" / "m.safetensors", {"a": np.zeros(1)})


def test_header_over_limit(tmp_path):
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:  # sparse: the length is honest, the file is mostly a hole
        f.write(struct.pack("<Q", MAX_HEADER_BYTES + 8))
        f.truncate(8 + MAX_HEADER_BYTES + 8)
    with pytest.raises(WeightsError, match="limit"):
        SafeTensorsFile(path)


def test_missing_file():
    with pytest.raises(ModelNotFoundError, match="nope.safetensors"):
        SafeTensorsFile("/nonexistent/nope.safetensors")


def test_directory(tmp_path):
    with pytest.raises(WeightsError, match="directory"):
        SafeTensorsFile(tmp_path)


def test_unknown_name_and_closed_file(tmp_path):
    path = tmp_path / "m.safetensors"
    save_safetensors(path, {"w": np.arange(4, dtype=np.float32)})
    f = SafeTensorsFile(path)
    with pytest.raises(WeightsError, match="'nope'"):
        f.tensor("nope")
    kept = f.tensor("w")
    f.close()
    f.close()
    with pytest.raises(ClosedError, match="'w'"):
        f.tensor("w")
    assert kept[3] == 3.0  # the mapping lives on while a view does


def test_empty_file_set(tmp_path):
    path = tmp_path / "none.safetensors"
    save_safetensors(path, {})
    with SafeTensorsFile(path) as f:
        assert f.names == [] and f.metadata == {}
    assert st_numpy.load_file(str(path)) == {}
