"""volvox.formats.gguf against the independent `gguf` package, on the real SmolLM2 file and
on the tiny crafted one; plus the API-level failures (file-level ones: test_bad_files.py)."""

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from volvox.errors import ClosedError, GGUFError, ModelNotFoundError, UnsupportedError
from volvox.formats.gguf import GGUFFile, GGUFTensorInfo, StringTable, read_gguf
from volvox.ir.quant_blocks import QuantTensor

gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "tiny.gguf"


def _tool():
    """tools/make_bad_files.py, which holds a small GGUF writer."""
    spec = importlib.util.spec_from_file_location("make_bad_files", ROOT / "tools" / "make_bad_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf_path):
    with read_gguf(smollm2_gguf_path) as f:
        yield f, gguf.GGUFReader(smollm2_gguf_path)


def _same_metadata(ours: dict, reader) -> None:
    """Every KV of ``reader`` (a gguf.GGUFReader) equals ours, in the same order and kind."""
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert list(ours) == list(fields)
    for key, field in fields.items():
        theirs, mine = field.contents(), ours[key]
        kinds = [t.name for t in field.types]
        if kinds[0] != "ARRAY":
            assert type(mine) is type(theirs) and mine == theirs, key
        elif kinds[1:] == ["STRING"] or len(kinds) == 1:  # a string array, or an empty array
            assert isinstance(mine, (list, StringTable)) and list(mine) == theirs, key
        else:
            want = np.dtype(kinds[1].lower())  # UINT8 -> uint8, FLOAT32 -> float32, BOOL -> bool
            assert isinstance(mine, np.ndarray) and mine.ndim == 1 and mine.dtype == want, key
            assert np.array_equal(mine, np.array(theirs, dtype=want)), key


def _same_tensors(f: GGUFFile, reader) -> None:
    """Every tensor's name, shape, type, offset, size and bytes equal the gguf package's."""
    assert list(f.tensors) == [t.name for t in reader.tensors]
    for t in reader.tensors:
        info = f.tensors[t.name]
        assert info.shape == tuple(int(d) for d in reversed(t.shape)), t.name
        assert info.qtype == t.tensor_type.name.lower(), t.name
        assert (info.offset, info.nbytes) == (t.data_offset, t.n_bytes), t.name
        x = f.tensor(t.name)
        if isinstance(x, QuantTensor):
            assert x.qtype == info.qtype and x.shape == (int(np.prod(info.shape[:-1])), info.shape[-1])
            raw = x.data
        else:
            assert x.shape == info.shape, t.name
            raw = x.view(np.uint8)
        assert np.array_equal(raw.reshape(-1), t.data.view(np.uint8).reshape(-1)), t.name


def test_smollm2_metadata_matches_gguf_package(smollm2):
    f, reader = smollm2
    _same_metadata(f.metadata, reader)
    assert f.version == 3 and f.alignment == 32
    assert f.metadata["llama.embedding_length"] == 576
    assert len(f.metadata["tokenizer.ggml.tokens"]) == 49152
    assert f.metadata["tokenizer.ggml.token_type"].dtype == np.int32


def test_smollm2_tensors_match_gguf_package(smollm2):
    f, reader = smollm2
    _same_tensors(f, reader)
    kinds = [info.qtype for info in f.tensors.values()]
    assert len(kinds) == 272
    assert (kinds.count("q4_1"), kinds.count("q8_0"), kinds.count("f32")) == (210, 1, 61)
    emb = f.tensor("token_embd.weight")
    assert emb.qtype == "q8_0" and emb.shape == (49152, 576) and emb.data.shape == (49152, 612)


def test_smollm2_tensors_are_read_only_views(smollm2):
    f, _ = smollm2
    for name in ("blk.0.attn_norm.weight", "blk.0.attn_q.weight"):
        a, b = f.tensor(name), f.tensor(name)
        if isinstance(a, QuantTensor):
            a, b = a.data, b.data
        assert not a.flags.writeable and not a.flags.owndata
        assert np.shares_memory(a, b)
        with pytest.raises(ValueError):
            a.reshape(-1)[0] = 0


def test_tiny_matches_gguf_package():
    with read_gguf(TINY) as f:
        reader = gguf.GGUFReader(TINY)
        _same_metadata(f.metadata, reader)
        _same_tensors(f, reader)


def test_tiny_values():
    with read_gguf(TINY) as f:
        m = f.metadata
        assert (m["test.u8"], m["test.i8"], m["test.u64"], m["test.i64"]) == (7, -3, 2**40, -2**40)
        assert m["test.f32"] == 0.5 and type(m["test.bool"]) is bool and m["test.bool"]
        assert m["test.bools"].dtype == bool and m["test.bools"].tolist() == [True, False, True]
        assert m["test.u64s"].dtype == np.uint64 and m["test.u64s"][1] == 2**63
        assert m["tokenizer.ggml.tokens"] == ["<s>", "</s>", "a", "\u00fc\u00df", ""]
        assert m["test.empty"] == []
        assert np.array_equal(f.tensor("token_embd.weight"), np.arange(40, dtype=np.float32).reshape(5, 8))
        assert f.tensor("output_norm.weight").dtype == np.float16
        # bf16 comes back as raw bits: widen to check
        bits = f.tensor("blk.0.extra.weight")
        assert bits.dtype == np.uint16
        assert ((bits.astype(np.uint32) << 16).view(np.float32) == [1, 2, 3, 4]).all()
        q = f.tensor("blk.0.ffn_down.weight")  # ne (32, 1, 2): rows = 2 * 1
        assert q.qtype == "q4_0" and q.shape == (2, 32) and q.data.shape == (2, 18)
        assert f.tensors["blk.0.ffn_down.weight"].shape == (2, 1, 32)


def test_version_2_parses(tmp_path):
    path = tmp_path / "v2.gguf"
    path.write_bytes(_tool().build_gguf(version=2)[0])
    with read_gguf(path) as f:
        assert f.version == 2 and len(f.tensors) == 6


def test_alignment_is_honoured(tmp_path):
    tool = _tool()
    kvs = [kv for kv in tool.TINY_KVS if kv[0] != "general.alignment"]
    path = tmp_path / "a64.gguf"
    path.write_bytes(tool.build_gguf(kvs + [("general.alignment", tool.U32, 64)], alignment=64)[0])
    with read_gguf(path) as f:
        assert f.alignment == 64
        assert all(info.offset % 64 == 0 for info in f.tensors.values())
        assert np.array_equal(f.tensor("token_embd.weight").reshape(-1), np.arange(40))
    path.write_bytes(tool.build_gguf(kvs)[0])
    with read_gguf(path) as f:
        assert f.alignment == 32 and "general.alignment" not in f.metadata


def test_nested_arrays(tmp_path):
    tool = _tool()
    nested = (tool.ARRAY, [(tool.I32, [1, 2]), (tool.STRING, ["x"]), (tool.ARRAY, [])])
    path = tmp_path / "nested.gguf"
    path.write_bytes(tool.build_gguf(tool.TINY_KVS + [("test.nested", tool.ARRAY, nested)])[0])
    with read_gguf(path) as f:
        ints, strings, empty = f.metadata["test.nested"]
        assert ints.dtype == np.int32 and ints.tolist() == [1, 2]
        assert strings == ["x"] and empty == []


def test_known_but_unsupported_type_parses_and_fails_at_tensor(tmp_path):
    tool = _tool()
    name = "blk.0.attn_q.weight"
    path = tmp_path / "q8k.gguf"
    path.write_bytes(tool.build_gguf(tensors=tool._with_tensor(
        name, ne=(256, 1), type_id=tool.GGML_Q8_K, data=bytes(292)))[0])
    with read_gguf(path) as f:
        assert f.tensors[name] == GGUFTensorInfo(name, (1, 256), "q8_k", f.tensors[name].offset, 292)
        f.tensor("token_embd.weight")
        with pytest.raises(UnsupportedError, match=f"{name}.*q8_k"):
            f.tensor(name)


def test_missing_file():
    with pytest.raises(ModelNotFoundError, match="nope.gguf"):
        read_gguf("/nonexistent/nope.gguf")


def test_directory(tmp_path):
    with pytest.raises(GGUFError, match="directory"):
        read_gguf(tmp_path)


def test_unknown_tensor_name():
    with read_gguf(TINY) as f, pytest.raises(GGUFError, match="'no.such.weight'"):
        f.tensor("no.such.weight")


def test_closed_file_and_views_outliving_it():
    f = read_gguf(TINY)
    kept = f.tensor("token_embd.weight")
    with f:
        pass
    with pytest.raises(ClosedError, match="token_embd.weight"):
        f.tensor("token_embd.weight")
    f.close()  # idempotent
    assert kept[4, 7] == 39.0  # the mapping lives on while a view does


def test_tensor_info_is_frozen():
    with read_gguf(TINY) as f:
        info = f.tensors["token_embd.weight"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.offset = 0
