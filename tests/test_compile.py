"""The graph compiler: each pass is a pure rewrite with identical outputs; memory plan; trace."""

import json

import numpy as np
import pytest

import volvox
from volvox.compile import compile_graph
from volvox.compile.memory import activation_bytes
from volvox.graph import Graph, Node, TensorSpec
from tiny_gguf import write_tiny_llama


@pytest.mark.parametrize("qtype", ["f32", "q4_1", "q8_0"])
def test_passes_on_equal_passes_off(tmp_path, qtype):
    path = write_tiny_llama(tmp_path / "t.gguf", qtype=qtype, embed_qtype="q8_0" if qtype != "f32" else "f32")
    ids = [3, 9, 27, 81, 243, 100, 7]
    with volvox.load(path) as on, volvox.load(path, optimize=False) as off:
        assert len(on.graph.nodes) < len(off.graph.nodes)
        # Quantized rows are computed exactly as before; f32 GEMM tiles over N, so a merged matrix
        # may sum some columns in another order (float rounding only).
        check = np.testing.assert_array_equal if qtype != "f32" else \
            (lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max()))
        check(on.logits(ids), off.logits(ids))
        s_on, s_off = on.new_session(), off.new_session()
        s_on.forward(ids)
        s_off.forward(ids)
        check(s_on.forward([5]), s_off.forward([5]))


def test_llama_fusions_shape_the_graph(tmp_path):
    with volvox.load(write_tiny_llama(tmp_path / "t.gguf", n_layers=3)) as lm:
        ops = [n.op for n in lm.graph.nodes]
        src = [n.op for n in lm.source_graph.nodes]
        assert src.count("linear") == 3 * 7 + 1 and src.count("silu") == 3
        assert ops.count("swiglu") == 3 and "silu" not in ops and "mul" not in ops
        assert ops.count("linear_split") == 3  # q, k, v of each layer: one matmul
        assert ops.count("linear") == 3 * 3 + 1  # gate+up, o, down per layer, and the head
        steps = {name: (before, after) for name, before, after in lm.compile_report.steps}
        assert steps["fuse_swiglu"][0] - steps["fuse_swiglu"][1] == 2 * 3  # gate, up, silu, mul -> linear, swiglu
        assert lm.compile_report.nodes_after == len(lm.graph.nodes)


def test_selected_and_unknown_passes(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf")
    with volvox.load(path, optimize=["fuse_swiglu"]) as lm:
        assert "swiglu" in [n.op for n in lm.graph.nodes]
        assert "linear_split" not in [n.op for n in lm.graph.nodes]
    with pytest.raises(volvox.UnsupportedError, match="unknown compiler passes"):
        volvox.load(path, optimize=["inline_everything"])


def test_swiglu_not_fused_when_gate_is_shared():
    w = {n: np.eye(4, dtype=np.float32) for n in ("wg", "wu")}
    g = Graph([TensorSpec("x", ("n", 4), "float32")], {n: TensorSpec(n, (4, 4), "float32") for n in w}, [
        Node("gate", "linear", {"x": "x", "weight": "wg"}, {"y": "g"}),
        Node("up", "linear", {"x": "x", "weight": "wu"}, {"y": "u"}),
        Node("act", "silu", {"x": "g"}, {"y": "s"}),
        Node("mul", "mul", {"a": "s", "b": "u"}, {"y": "m"}),
        Node("also", "add", {"a": "g", "b": "m"}, {"y": "out"}),  # g has a second reader: fusing would lose it
    ], ["out"])
    g.validate()
    fused, _, _ = compile_graph(g, w, ["fuse_swiglu"])
    assert [n.op for n in fused.nodes] == ["linear", "linear", "silu", "mul", "add"]


def test_activation_memory_of_a_chain():
    # x -> a -> b -> c -> out, each (n, 8) float32: at most two live at once
    nodes = [Node(f"n{i}", "silu", {"x": src}, {"y": dst}) for i, (src, dst) in
             enumerate([("x", "a"), ("a", "b"), ("b", "c"), ("c", "out")])]
    g = Graph([TensorSpec("x", ("n", 8), "float32")], {}, nodes, ["out"])
    g.validate()
    peak, naive = activation_bytes(g, {"n": 10})
    assert naive == 4 * 10 * 8 * 4
    assert peak == 2 * 10 * 8 * 4


def test_trace_is_chrome_json(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf")
    with volvox.load(path, profile=True) as lm:
        lm.generate("the", max_new_tokens=3)
        lm.profile.write_trace(tmp_path / "trace.json")
        n_nodes = len(lm.graph.nodes)
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert len(trace) % n_nodes == 0 and len(trace) >= 2 * n_nodes
    ev = trace[0]
    assert ev["ph"] == "X" and ev["dur"] >= 0 and ev["args"]["backend"] == "cpu" and ev["args"]["shapes"]


VISION_MODELS = {"efficientnet-lite0": {}, "blazeface-short-range": {}, "mltk-person-detection": {},
                 "pp-ocrv4-rec": {"?": 48, "p2o.DynamicDimension.1": 160}}


@pytest.mark.parametrize("name", sorted(VISION_MODELS))
def test_every_vision_model_same_with_passes_on_and_off(name):
    """Every model the project runs computes the same outputs with every pass on and with none."""
    rng = np.random.default_rng(0)
    with volvox.load(name) as on, volvox.load(name, optimize=False) as off:
        feeds = {}
        for spec in on.graph.inputs:
            shape = [d if isinstance(d, int) else VISION_MODELS[name][d] for d in spec.shape]
            feeds[spec.name] = rng.uniform(-1, 1, shape).astype(spec.dtype)
        got, want = on.run(feeds), off.run(feeds)
    for key in want:
        if want[key].dtype.kind in "iu":
            np.testing.assert_array_equal(got[key], want[key])
        else:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5 * np.abs(want[key]).max())


def test_conv_activation_fusion_and_noop_reshape(tmp_path):
    x = TensorSpec("x", (1, 6, 6, 2), "float32")
    w = {"w": np.random.default_rng(1).standard_normal((3, 3, 3, 2)).astype(np.float32)}
    g = Graph([x], {"w": TensorSpec("w", (3, 3, 3, 2), "float32")}, [
        Node("conv", "conv2d", {"x": "x", "weight": "w"}, {"y": "c"}, {"strides": [1, 1], "pads": [1, 1, 1, 1]}),
        Node("same", "reshape", {"x": "c"}, {"y": "r"}, {"shape": [1, 6, 6, 3]}),
        Node("act", "clip", {"x": "r"}, {"y": "out"}, {"min": 0, "max": 6}),
    ], ["out"])
    g.validate()
    compiled, weights, _ = compile_graph(g, w, ["elide_noop_reshapes", "fuse_conv_activation"])
    assert [(n.op, n.params.get("activation")) for n in compiled.nodes] == [("conv2d", "relu6")]
