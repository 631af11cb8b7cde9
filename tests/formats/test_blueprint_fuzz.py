"""Fuzz config.json: any mutation of a valid blueprint loads, or fails with a VolvoxError."""

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz import mutate
import volvox
from volvox.formats.blueprint import parse_config
from volvox.formats.safetensors import save_safetensors

BASE = {
    "format": "volvox-blueprint", "version": 1,
    "inputs": [{"name": "x", "shape": ["n", 4], "dtype": "float32"}],
    "nodes": [
        {"id": "fc", "op": "linear", "inputs": {"x": "x", "weight": "w", "bias": "b"}, "outputs": {"y": "h"}},
        {"id": "act", "op": "silu", "inputs": {"x": "h"}, "outputs": {"y": "a"}},
        {"id": "norm", "op": "rms_norm", "inputs": {"x": "a", "weight": "g"}, "outputs": {"y": "out"}, "params": {"eps": 1e-5}},
    ],
    "outputs": ["out"],
    "metadata": {"task": "run"},
}
WEIGHTS = {"w": np.ones((3, 4), np.float32), "b": np.zeros(3, np.float32), "g": np.ones(3, np.float32)}

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                      st.text(max_size=8), st.sampled_from(["x", "h", "a", "out", "w", "linear", "seq", "float32", "int8"]))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                          max_leaves=6)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p in _paths(BASE) if p]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(st.tuples(st.sampled_from(PATHS), st.one_of(json_value, st.just("__delete__"))),
                          min_size=1, max_size=3))
def test_mutated_config_fails_cleanly(tmp_path_factory, mutations):
    cfg = mutate(BASE, mutations)
    d = tmp_path_factory.mktemp("bp")
    (d / "config.json").write_text(json.dumps(cfg))
    save_safetensors(d / "model.safetensors", WEIGHTS)
    try:
        with volvox.load(d) as m:
            m.run({"x": np.ones((2, 4), np.float32)})
    except volvox.VolvoxError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.one_of(json_value, st.dictionaries(st.sampled_from(list(BASE)), json_value, max_size=6)))
def test_random_json_is_refused_cleanly(value):
    try:
        parse_config(value)
    except volvox.VolvoxError:
        pass
