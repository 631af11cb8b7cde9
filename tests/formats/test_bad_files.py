"""Every crafted bad file in tests/data/bad/ fails with the volvox exception and message
tests/data/bad/expected.json names; the corpus is exactly what tools/make_bad_files.py writes."""

import importlib.util
import json
from pathlib import Path

import pytest

import volvox
import volvox.errors
from volvox.formats.gguf import read_gguf
from volvox.formats.torch_state_dict import read_state_dict
from volvox.formats.safetensors import SafeTensorsFile

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
BAD = DATA / "bad"
EXPECTED = json.loads((BAD / "expected.json").read_text())
BAD_FILES = sorted(p.name for p in BAD.iterdir() if p.name != "expected.json")


def _open_and_touch(path: Path) -> None:
    """Open ``path`` with the reader its suffix names and fetch every tensor (a blueprint
    directory or a vision model file: load it as a model)."""
    if path.is_dir() or path.suffix in (".tflite", ".onnx"):
        volvox.load(path).close()
    elif path.suffix == ".pth":
        read_state_dict(path)
    elif path.suffix == ".gguf":
        with read_gguf(path) as f:
            for name in f.tensors:
                f.tensor(name)
    elif path.suffix == ".safetensors":
        with SafeTensorsFile(path) as f:
            for name in f.names:
                f.tensor(name)
    else:
        raise AssertionError(f"no reader for {path.name}")


def test_every_file_has_an_entry_and_every_entry_a_file():
    assert sorted(EXPECTED) == BAD_FILES
    assert len(BAD_FILES) >= 30


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_file_fails_cleanly(name):
    path = BAD / name
    want = EXPECTED[name]
    with pytest.raises(volvox.errors.VolvoxError) as caught:
        _open_and_touch(path)
    msg = str(caught.value)
    assert type(caught.value).__name__ == want["error"], msg  # TFLiteError / ONNXError live in importers
    assert str(path) in msg  # names the file ...
    assert want["match"] in msg.replace(str(path), "")  # ... and the field at fault


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_file_is_small(name):
    files = [p for p in (BAD / name).rglob("*") if p.is_file()] if (BAD / name).is_dir() else [BAD / name]
    assert sum(p.stat().st_size for p in files) < 64 * 1024


@pytest.mark.parametrize("name", ["tiny.gguf", "tiny.safetensors", "tiny.tflite", "tiny.onnx", "tiny.pth"])
def test_seeds_are_valid(name):
    _open_and_touch(DATA / name)


def test_corpus_matches_generator():
    spec = importlib.util.spec_from_file_location("make_bad_files", ROOT / "tools" / "make_bad_files.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    files = tool.corpus()
    on_disk = {f"bad/{p.relative_to(BAD)}" for p in BAD.rglob("*") if p.is_file()}
    assert {n for n in files if n.startswith("bad/")} == on_disk
    stale = [rel for rel, data in files.items() if (DATA / rel).read_bytes() != data]
    assert not stale, f"run `python tools/make_bad_files.py`: stale {stale}"


def test_state_dict_huge_bytearray_is_refused_before_allocating(tmp_path):
    """A BYTEARRAY8 record declaring 6 * 2^40 bytes (found by the fuzz test): a WeightsError, not a
    MemoryError from allocating the declared length."""
    import zipfile

    path = tmp_path / "huge.pth"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02\x96\x00\x00\x00\x00\x00\x06\x00\x00.")
    with pytest.raises(volvox.errors.WeightsError, match="BYTEARRAY8"):
        read_state_dict(path)
