"""The real models tests may use when they are already cached (tests never download one), and
random feeds for a model's inputs."""

from pathlib import Path

import numpy as np
import pytest

import volvox
from volvox import hub

DATA = Path(__file__).resolve().parents[1] / "data"  # tests/data: the small committed model files


def random_feeds(model, dims: dict, seed: int = 0) -> dict:
    """Uniform [-1, 1) feeds for every graph input, symbolic dims bound by ``dims``."""
    rng = np.random.default_rng(seed)
    return {s.name: rng.uniform(-1, 1, [d if isinstance(d, int) else dims[d] for d in s.shape]).astype(s.dtype)
            for s in model.graph.inputs}


def cached(name: str):
    """Model ``name`` only if it is already installed or cached: this test never downloads."""
    try:
        return hub.resolve_model_file(name) if _present(name) else pytest.skip(f"{name} is not cached")
    except volvox.VolvoxError as e:
        pytest.skip(f"{name} unavailable: {e}")


def _present(name: str) -> bool:
    src = hub.load_recipe(name)["source"]
    target = hub.cache_dir() / name / Path(src.get("member") or src["file"]).name
    if src.get("folder_files"):  # a model folder: every one of its files
        return hub._installed_file(src) is not None or all((target / f).is_file() for f in src["folder_files"])
    return hub._installed_file(src) is not None or target.is_file()


VISION_MODELS = {"efficientnet-lite0": {}, "blazeface-short-range": {}, "mltk-person-detection": {},
                 "pp-ocrv4-rec": {"?": 48, "p2o.DynamicDimension.1": 160}}
