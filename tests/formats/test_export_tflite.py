"""tools/export_tflite.py and tools/float_twin.py against the TFLite interpreter (ai_edge_litert).

- small float graphs (every exported op and conv geometry: SAME / VALID / explicit PAD, strides,
  dilations, depthwise multipliers, fused ReLU / ReLU6) exported and run by the interpreter, with
  and without the XNNPACK delegate, against volvox's numpy reference on the same weights;
- EfficientNet-Lite0 exported from its PyTorch state dict against the upstream PyTorch model (the
  file bench_vision.py times as the XNNPACK peer), fully delegated to XNNPACK;
- the float twin of the int8 MLTK person detector: volvox's run of the twin blueprint against the
  interpreter on the exported twin, and the twin's decisions against the int8 model's;
- graphs the exporter cannot express fail with UnsupportedError naming the node.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import volvox
from volvox.convert import source_weights
from volvox.errors import UnsupportedError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.hub import load_recipe
from volvox.tasks.image import preprocess
from volvox.model import Model

from vision_helpers import SAMPLES, model_file, sample_image
from volvox.ops import validate

litert = pytest.importorskip("ai_edge_litert.interpreter")
ROOT = Path(__file__).resolve().parents[2]
rng = np.random.default_rng(11)


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


export = _tool("export_tflite")


def tflite_run(path, x: np.ndarray, xnnpack: bool) -> tuple[np.ndarray, list[str]]:
    """(first output, op names of the execution plan) of the interpreter on ``x``."""
    kind = litert.OpResolverType.AUTO if xnnpack else litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = litert.Interpreter(model_path=str(path), experimental_op_resolver_type=kind)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    ops = [d["op_name"] for d in it._get_ops_details()]
    return it.get_tensor(it.get_output_details()[0]["index"]), ops


def fully_delegated(path) -> bool:
    """The XNNPACK delegate took the whole graph: one DELEGATE node writes the graph's outputs."""
    it = litert.Interpreter(model_path=str(path))
    it.allocate_tensors()
    delegates = [d for d in it._get_ops_details() if d["op_name"] == "DELEGATE"]
    return len(delegates) == 1 and list(delegates[0]["outputs"]) == list(it._interpreter.OutputIndices())


def w32(*shape) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def conv_graph(x_shape, cout, k, groups, act, bias=True, **geometry) -> tuple[Graph, dict]:
    """x -> conv2d(k x k, groups, geometry, act) -> y."""
    weights = {"w": w32(cout, k, k, x_shape[3] // groups)}
    inputs = {"x": "x", "weight": "w"}
    if bias:
        weights["b"] = w32(cout)
        inputs["bias"] = "b"
    node = Node("conv", "conv2d", inputs, {"y": "y"}, dict(groups=groups, activation=act, **geometry))
    graph = Graph([TensorSpec("x", x_shape, "float32")], {n: TensorSpec(n, w.shape, "float32") for n, w in weights.items()},
                  [node], ["y"])
    validate(graph)
    return graph, weights


# (x shape, cout, k, groups, activation, bias, geometry): stride-2 SAME puts the odd pixel after
CONVS = [
    ((1, 9, 9, 4), 8, 3, 1, "relu6", True, dict(strides=[2, 2], pads=[1, 1, 1, 1])),     # SAME (9 -> 5)
    ((1, 8, 8, 4), 8, 3, 1, "relu", True, dict(strides=[2, 2], pads=[0, 0, 1, 1])),      # SAME (8 -> 4)
    ((1, 7, 6, 3), 5, 3, 1, "none", False, dict(strides=[1, 2], pads=[1, 0, 2, 1], dilations=[2, 1])),  # PAD
    ((1, 6, 6, 3), 4, 1, 1, "none", True, dict()),                                       # VALID 1x1
    ((1, 9, 9, 4), 4, 3, 4, "relu6", True, dict(strides=[2, 2], pads=[1, 1, 1, 1])),     # depthwise SAME
    ((1, 8, 8, 3), 6, 3, 3, "relu", True, dict(pads=[2, 2, 2, 2], dilations=[2, 2])),    # depthwise x2, dilated
    ((1, 8, 7, 4), 4, 5, 4, "none", False, dict(pads=[0, 2, 1, 0])),                     # depthwise, PAD
]


@pytest.mark.parametrize("case", CONVS, ids=[f"conv{i}" for i in range(len(CONVS))])
def test_conv_matches_interpreter(tmp_path, case):
    x_shape, cout, k, groups, act, bias, geometry = case
    graph, weights = conv_graph(x_shape, cout, k, groups, act, bias, **geometry)
    path = tmp_path / "conv.tflite"
    path.write_bytes(export.export_tflite(graph, weights))
    x = rng.standard_normal(x_shape).astype(np.float32)
    want = Model(graph, weights, {}, "conv", reference=True).run({"x": x})["y"]
    for xnnpack in (False, True):
        got, ops = tflite_run(path, x, xnnpack)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert ("PAD" in ops) == (case in (CONVS[2], CONVS[6]))


def test_head_ops_match_interpreter(tmp_path):
    """avg_pool2d (SAME, fused ReLU) -> add (a constant) -> global_avg_pool -> reshape -> linear -> softmax."""
    weights = {"shift": w32(6), "fc.w": w32(5, 6), "fc.b": w32(5)}
    nodes = [Node("pool", "avg_pool2d", {"x": "x"}, {"y": "p"},
                  dict(kernel=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1], activation="relu")),
             Node("shift", "add", {"a": "p", "b": "shift"}, {"y": "s"}),
             Node("gap", "global_avg_pool", {"x": "s"}, {"y": "g"}),
             Node("flat", "reshape", {"x": "g"}, {"y": "f"}, {"shape": [1, -1]}),
             Node("fc", "linear", {"x": "f", "weight": "fc.w", "bias": "fc.b"}, {"y": "logits"}),
             Node("probs", "softmax", {"x": "logits"}, {"y": "probs"}, {"beta": 0.5})]
    graph = Graph([TensorSpec("x", (1, 8, 8, 6), "float32")],
                  {n: TensorSpec(n, w.shape, "float32") for n, w in weights.items()}, nodes, ["probs"])
    validate(graph)
    path = tmp_path / "head.tflite"
    path.write_bytes(export.export_tflite(graph, weights))
    x = rng.standard_normal((1, 8, 8, 6)).astype(np.float32)
    want = Model(graph, weights, {}, "head", reference=True).run({"x": x})["probs"]
    for xnnpack in (False, True):
        got, _ = tflite_run(path, x, xnnpack)  # XNNPACK takes all but the softmax (it delegates beta 1 only)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _graph(nodes, weights, x_shape=(1, 4, 4, 4), outputs=("y",)):
    graph = Graph([TensorSpec("x", x_shape, "float32")],
                  {n: TensorSpec(n, w.shape, w.dtype.name) for n, w in weights.items()}, nodes, list(outputs))
    validate(graph)
    return graph, weights


@pytest.mark.parametrize("build,match", [
    (lambda: _graph([Node("gate", "sigmoid", {"x": "x"}, {"y": "y"})], {}),
     r"node 'gate' \(sigmoid\): this op cannot be expressed in TFLite"),
    (lambda: conv_graph((1, 4, 4, 4), 4, 3, 2, "none", pads=[1, 1, 1, 1]),
     r"node 'conv' \(conv2d\): a grouped convolution \(groups=2, 4 input channels\)"),
    (lambda: _graph([Node("pool", "avg_pool2d", {"x": "x"}, {"y": "y"}, dict(kernel=[3, 3], pads=[1, 1, 0, 0]))], {}),
     r"node 'pool' \(avg_pool2d\): pads \[1, 1, 0, 0\]"),
    (lambda: _graph([Node("sm", "softmax", {"x": "x"}, {"y": "y"}, {"axis": 1})], {}),
     r"node 'sm' \(softmax\): softmax over axis 1"),
    (lambda: _graph([Node("fc", "linear", {"x": "x", "weight": "w"}, {"y": "y"})], {"w": w32(3, 4).astype(np.float16)}),
     r"node 'fc' \(linear\): weight 'w' is float16"),
])
def test_unsupported_is_a_clear_error(build, match):
    graph, weights = build()
    with pytest.raises(UnsupportedError, match=match):
        export.export_tflite(graph, weights)


def test_int8_graph_is_refused():
    with volvox.load(model_file("mltk-person-detection"), optimize=False) as m:
        with pytest.raises(UnsupportedError, match=r"node 'quantize_0' \(quantize\)"):
            export.export_tflite(m.graph, {})


# -- EfficientNet-Lite0 against PyTorch ---------------------------------------------------------------
@pytest.fixture(scope="module")
def efficientnet(tmp_path_factory):
    """(exported .tflite path, the upstream PyTorch model on the same state dict)."""
    torch = pytest.importorskip("torch")
    upstream = pytest.importorskip("efficientnet_lite_pytorch")
    path = export.export_model("efficientnet-lite0", tmp_path_factory.mktemp("effnet") / "efficientnet-lite0.tflite")
    net = upstream.EfficientNet.from_name("efficientnet-lite0")
    net.load_state_dict(torch.load(model_file("efficientnet-lite0"), weights_only=True))
    return path, net.eval()


@pytest.mark.parametrize("name", SAMPLES)
def test_efficientnet_export_matches_pytorch(efficientnet, name):
    import torch

    path, net = efficientnet
    meta = load_recipe("efficientnet-lite0")["metadata"]
    x = preprocess(sample_image(name), meta["preprocess"]).tensor                  # (1, 224, 224, 3)
    with torch.no_grad():
        want = net(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))).numpy()   # (1, 1000)
    for xnnpack in (False, True):
        got, _ = tflite_run(path, x, xnnpack)
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
        assert got.argmax() == want.argmax()


def test_efficientnet_export_runs_in_xnnpack(efficientnet):
    assert fully_delegated(efficientnet[0])


# -- the float twin of the int8 person detector ---------------------------------------------------------
@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """(twin blueprint dir, twin .tflite path)."""
    tmp = tmp_path_factory.mktemp("twin")
    blueprint = _tool("float_twin").build_float_twin("mltk-person-detection", tmp / "twin", tmp / "twin.tflite")
    return blueprint, tmp / "twin.tflite"


def test_twin_is_a_float_graph(twin):
    with volvox.load(twin[0], optimize=False) as m, volvox.load("mltk-person-detection", optimize=False) as q:
        assert {n.op for n in m.graph.nodes} == {"conv2d", "avg_pool2d", "reshape", "linear", "softmax"}
        assert {s.dtype for s in m.graph.weights.values()} == {"float32"}
        assert [n.id for n in m.graph.nodes] == [n.id for n in q.graph.nodes if n.op not in ("quantize", "dequantize")]
        assert m.graph.outputs == q.graph.outputs and m.metadata["labels"] == q.metadata["labels"]
    assert fully_delegated(twin[1])


@pytest.mark.parametrize("name", SAMPLES)
def test_twin_matches_interpreter_and_int8(twin, name):
    blueprint, path = twin
    fp32, int8 = volvox.load(blueprint), volvox.load("mltk-person-detection")
    x = preprocess(sample_image(name), int8.metadata["preprocess"]).tensor         # (1, 96, 96, 3), 0..255
    ours = fp32.run({"input_1": x})["Identity"]                                    # (1, 2) probabilities
    for xnnpack in (False, True):
        got, _ = tflite_run(path, x, xnnpack)
        assert np.abs(got - ours).max() <= 1e-4 * np.abs(got).max()
    q = int8.run({"input_1": x})["Identity"]
    assert ours.argmax() == q.argmax()
    assert np.abs(ours - q).max() <= 0.05, (ours, q)  # measured: 0.016 / 0.0014 / 0.0024 on the three samples


def test_twin_refuses_a_clamp_that_is_no_activation():
    ft = _tool("float_twin")
    with volvox.load("mltk-person-detection", optimize=False) as m:
        nodes = [Node(n.id, n.op, n.inputs, n.outputs, n.params | ({"act_max": 100} if n.id == "conv_2d_3" else {}))
                 for n in m.graph.nodes]
        graph = Graph(m.graph.inputs, m.graph.weights, nodes, m.graph.outputs)
        validate(graph)
        match = r"node 'conv_2d_3' \(qconv2d\): the clamp \[0, .*\] is no float activation"
        with pytest.raises(UnsupportedError, match=match):
            ft.float_twin(graph, source_weights(m), ft.tflite_quantization(m.source))


def test_bench_layers_cuts_the_model_after_each_operator(monkeypatch):
    """tools/bench_layers.py's TFLite column: every cut of the int8 person detector loads and
    runs in the interpreter, one row per operator, named as the importer names its nodes."""
    from volvox.formats.tflite import read_tflite
    monkeypatch.syspath_prepend(str(ROOT / "tools"))  # it imports bench_vision
    layers = _tool("bench_layers")
    path = model_file("mltk-person-detection")
    x = preprocess(sample_image("astronaut"), load_recipe("mltk-person-detection")["metadata"]["preprocess"]).tensor
    rows = layers.tflite_cuts(path, 1, x, runs=1)
    graph, _, _ = read_tflite(path)
    convs = [n.id for n in graph.nodes if n.op == "qconv2d"]
    assert len(rows) == 33 and [name for name, _ in rows if name in convs] == convs
    assert sum(ms for _, ms in rows) > 0
