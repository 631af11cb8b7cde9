"""Every crafted bad file in tests/data/bad/ fails with the volvox exception and message
tests/data/bad/expected.json names; the corpus is exactly what tools/make_bad_files.py writes."""

import importlib.util
import json
from pathlib import Path

import pytest

import volvox.errors
from volvox.importers.gguf import read_gguf
from volvox.safetensors import SafeTensorsFile

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
BAD = DATA / "bad"
EXPECTED = json.loads((BAD / "expected.json").read_text())
BAD_FILES = sorted(p.name for p in BAD.iterdir() if p.name != "expected.json")


def _open_and_touch(path: Path) -> None:
    """Open ``path`` with the reader its suffix names and fetch every tensor."""
    if path.suffix == ".gguf":
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
    error = getattr(volvox.errors, want["error"])
    with pytest.raises(volvox.errors.VolvoxError) as caught:
        _open_and_touch(path)
    msg = str(caught.value)
    assert type(caught.value) is error, msg
    assert str(path) in msg  # names the file ...
    assert want["match"] in msg.replace(str(path), "")  # ... and the field at fault


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_file_is_small(name):
    assert (BAD / name).stat().st_size < 64 * 1024


@pytest.mark.parametrize("name", ["tiny.gguf", "tiny.safetensors"])
def test_seeds_are_valid(name):
    _open_and_touch(DATA / name)


def test_corpus_matches_generator():
    spec = importlib.util.spec_from_file_location("make_bad_files", ROOT / "tools" / "make_bad_files.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    files = tool.corpus()
    assert {n for n in files if n.startswith("bad/")} == {f"bad/{n}" for n in [*BAD_FILES, "expected.json"]}
    stale = [rel for rel, data in files.items() if (DATA / rel).read_bytes() != data]
    assert not stale, f"run `python tools/make_bad_files.py`: stale {stale}"
