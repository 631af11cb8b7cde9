"""Blueprints: config.json v1 + safetensors load, run, and refuse every kind of inconsistency."""

import copy
import json

import numpy as np
import pytest

import volvox
from volvox.ir.quant_blocks import dequantize_ref, quantize_ref
from volvox.formats.safetensors import save_safetensors

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((32, 8)).astype(np.float32)
B1 = RNG.standard_normal(32).astype(np.float32)
G = (1 + 0.1 * RNG.standard_normal(32)).astype(np.float32)
W2 = RNG.standard_normal((64, 32)).astype(np.float32)
W2Q = quantize_ref(W2, "q8_0")  # (64, 32) as q8_0 blocks

CONFIG = {
    "format": "volvox-blueprint",
    "version": 1,
    "inputs": [{"name": "x", "shape": ["batch", 8], "dtype": "float32"}],
    "nodes": [
        {"id": "fc1", "op": "linear", "inputs": {"x": "x", "weight": "w1", "bias": "b1"}, "outputs": {"y": "h"}},
        {"id": "act", "op": "silu", "inputs": {"x": "h"}, "outputs": {"y": "a"}},
        {"id": "norm", "op": "rms_norm", "inputs": {"x": "a", "weight": "g"}, "outputs": {"y": "n"}, "params": {"eps": 1e-6}},
        {"id": "res", "op": "add", "inputs": {"a": "n", "b": "a"}, "outputs": {"y": "r"}},
        {"id": "fc2", "op": "linear", "inputs": {"x": "r", "weight": "w2"}, "outputs": {"y": "out"}},
    ],
    "outputs": ["out"],
    "weights": {"file": "model.safetensors", "quantized": {"w2": {"qtype": "q8_0", "shape": [64, 32]}}},
    "metadata": {"task": "run"},
}


def numpy_forward(x, w2):
    h = x @ W1.T + B1
    a = h / (1 + np.exp(-h))
    n = a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6) * G
    return (n + a) @ w2.T


def write(tmp_path, config=CONFIG, tensors=None):
    tensors = tensors if tensors is not None else {"w1": W1, "b1": B1, "g": G, "w2": np.asarray(W2Q.data)}
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_safetensors(tmp_path / "model.safetensors", tensors)
    return tmp_path


def test_blueprint_runs_like_numpy(tmp_path):
    cfg = copy.deepcopy(CONFIG)
    cfg["weights"]["quantized"] = {}
    cfg["nodes"][-1]["inputs"]["weight"] = "w2"
    write(tmp_path, cfg, {"w1": W1, "b1": B1, "g": G, "w2": W2})
    x = RNG.standard_normal((5, 8)).astype(np.float32)
    with volvox.load(tmp_path) as m:
        out = m.run({"x": x})["out"]
    np.testing.assert_allclose(out, numpy_forward(x, W2), rtol=1e-4, atol=1e-4)


def test_quantized_weight_in_blueprint(tmp_path):
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    want = numpy_forward(x, dequantize_ref(W2Q))
    with volvox.load(write(tmp_path)) as m:
        assert m.graph.weights["w2"].dtype == "q8_0"
        out = m.run({"x": x})["out"]
    assert np.abs(out - want).max() < 2e-2 * np.abs(want).max()  # 8-bit activations in the q8_0 kernel
    with volvox.load(tmp_path, reference=True) as m:
        np.testing.assert_allclose(m.run({"x": x})["out"], want, rtol=1e-4, atol=1e-4)


def test_bad_version(tmp_path):
    with pytest.raises(volvox.BlueprintError, match="version"):
        volvox.load(write(tmp_path, {**CONFIG, "version": 7}))


def test_unknown_op(tmp_path):
    cfg = copy.deepcopy(CONFIG)
    cfg["nodes"][1]["op"] = "frobnicate"
    with pytest.raises(volvox.UnsupportedError, match="'act'.*frobnicate"):
        volvox.load(write(tmp_path, cfg))


def test_tensor_nobody_produces(tmp_path):
    cfg = copy.deepcopy(CONFIG)
    cfg["nodes"][1]["inputs"]["x"] = "ghost"
    with pytest.raises(volvox.BlueprintError, match="ghost"):
        volvox.load(write(tmp_path, cfg))


def test_shape_mismatch_names_node(tmp_path):
    cfg = copy.deepcopy(CONFIG)
    cfg["inputs"][0]["shape"] = ["batch", 9]
    with pytest.raises(volvox.ShapeError, match="fc1"):
        volvox.load(write(tmp_path, cfg))


def test_quantized_size_lie(tmp_path):
    cfg = copy.deepcopy(CONFIG)
    cfg["weights"]["quantized"]["w2"]["shape"] = [64, 64]
    with pytest.raises(volvox.BlueprintError, match="w2"):
        volvox.load(write(tmp_path, cfg))


def test_missing_port_and_bad_json(tmp_path):
    cfg = copy.deepcopy(CONFIG)
    del cfg["nodes"][0]["inputs"]["weight"]
    with pytest.raises(volvox.BlueprintError, match="fc1.*missing"):
        volvox.load(write(tmp_path, cfg))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(volvox.BlueprintError, match="JSON"):
        volvox.load(tmp_path)


def test_truncated_weights(tmp_path):
    write(tmp_path)
    st = tmp_path / "model.safetensors"
    st.write_bytes(st.read_bytes()[:-10])
    with pytest.raises(volvox.WeightsError, match="model.safetensors"):
        volvox.load(tmp_path)


def test_run_checks_inputs(tmp_path):
    cfg = copy.deepcopy(CONFIG)
    cfg["weights"]["quantized"] = {}
    write(tmp_path, cfg, {"w1": W1, "b1": B1, "g": G, "w2": W2})
    with volvox.load(tmp_path) as m:
        with pytest.raises(volvox.ShapeError, match="x"):
            m.run({"x": np.zeros((2, 7), np.float32)})
        with pytest.raises(volvox.ShapeError, match="missing"):
            m.run({})
        with pytest.raises(volvox.ShapeError, match="dtype"):
            m.run({"x": np.zeros((2, 8), np.int32)})
