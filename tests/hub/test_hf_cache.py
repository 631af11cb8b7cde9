"""Models from the Hugging Face Hub cache: ``org/repo`` and ``hf://org/repo[/file][@revision]`` resolve
through huggingface_hub in offline mode against a cache built here (the layout huggingface_hub
writes: models--org--repo/{refs/<name>, snapshots/<commit>/<file> -> ../../blobs/<hash>}).
Never the network: HF_HUB_OFFLINE=1, and the endpoint points at a closed port."""

import hashlib
from pathlib import Path
import os
import subprocess
import sys

import pytest

import volvox
from tiny_gguf import write_tiny_llama

hub_constants = pytest.importorskip("huggingface_hub.constants", reason="Hub models need huggingface_hub")


def add_snapshot(cache, repo: str, commit: str, files: dict, refs=("main",)):
    """Put ``files`` ({name in repo: source path}) into ``cache`` as commit ``commit`` of ``repo``."""
    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        data = source.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = root / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / ref).write_text(commit)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("ggufs")
    return {seed: write_tiny_llama(d / f"tiny-{seed}.gguf", seed=seed) for seed in (1, 2)}


@pytest.fixture
def hub_cache(tmp_path, models, monkeypatch):
    """An offline Hub cache: acme/tiny (main: seed 1; tag v2: seed 2), acme/two-ggufs (two files)."""
    cache = tmp_path / "hub"
    add_snapshot(cache, "acme/tiny", "a" * 40, {"tiny.gguf": models[1]})
    add_snapshot(cache, "acme/tiny", "b" * 40, {"tiny.gguf": models[2]}, refs=("v2",))
    add_snapshot(cache, "acme/two-ggufs", "c" * 40, {"q4.gguf": models[1], "q8.gguf": models[2]})
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_ENDPOINT": "http://127.0.0.1:9"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    return env


def greedy(model, prompt="the", n=12):
    with volvox.load(model) as lm:
        return lm.generate(prompt, max_new_tokens=n)


@pytest.mark.parametrize("name", ["acme/tiny", "hf://acme/tiny", "hf://acme/tiny/tiny.gguf",
                                  "hf://acme/tiny/tiny.gguf@main", "acme/tiny@" + "a" * 40])
def test_names_resolve_to_the_cached_main_snapshot(hub_cache, models, name):
    assert greedy(name) == greedy(models[1])


def test_a_revision_picks_its_snapshot(hub_cache, models):
    assert greedy("acme/tiny@v2") == greedy(models[2])
    assert greedy("hf://acme/tiny/tiny.gguf@v2") != greedy("hf://acme/tiny/tiny.gguf")


def test_missing_repo_says_offline(hub_cache):
    with pytest.raises(volvox.ModelNotFoundError, match="offline"):
        volvox.load("acme/missing")
    with pytest.raises(volvox.ModelNotFoundError, match="not found on the Hugging Face Hub"):
        volvox.load("hf://acme/tiny/other.gguf")


def test_a_repo_of_several_ggufs_asks_for_one(hub_cache):
    with pytest.raises(volvox.ModelNotFoundError, match="hf://acme/two-ggufs/q4.gguf"):
        volvox.load("acme/two-ggufs")
    assert greedy("hf://acme/two-ggufs/q8.gguf") == greedy("acme/tiny@v2")


def test_paths_are_not_hub_names(tmp_path):
    with pytest.raises(volvox.ModelNotFoundError, match="no such file"):
        volvox.load("some/dir/missing.gguf")


def test_cli_with_hub_environment(hub_cache, models):
    """The environment variables alone (a fresh process) point volvox at the cache, quietly."""
    run = subprocess.run([sys.executable, "-m", "volvox", "generate", "hf://acme/tiny@v2", "--prompt", "the",
                          "--max-new-tokens", "12"], capture_output=True, text=True, env={**os.environ, **hub_cache},
                         cwd=Path(__file__).parent)  # outside the source tree: the installed package runs
    assert run.returncode == 0, run.stderr
    assert run.stdout == greedy(models[2]) + "\n"
    assert "%" not in run.stderr  # no progress bar when stderr is not a terminal


def test_a_checkpoint_repo_loads_as_its_folder(hub_cache, tmp_path):
    """A repo of config.json + safetensors + tokenizer.json (a tiny BERT) loads as that checkpoint."""
    pytest.importorskip("torch", reason="the tiny BERT is built with transformers")
    from hf_models import build_tiny_bert

    folder = tmp_path / "bert"
    build_tiny_bert(folder, ["the cat sat", "a dog ran"])
    files = {p.name: p for p in folder.iterdir() if p.is_file()}
    add_snapshot(tmp_path / "hub", "acme/bert", "d" * 40, files)
    with volvox.load(folder) as local, volvox.load("acme/bert") as from_hub:
        assert from_hub.metadata.get("task") == "embed"
        assert (from_hub.embed(["the cat sat"]) == local.embed(["the cat sat"])).all()
