"""ONNX's random ops and training-mode Dropout: a seeded node draws, on every run, the values onnx's
reference evaluator draws for that seed; unseeded draws change per run and follow their distribution
(Multinomial's class frequencies against onnxruntime's own draws)."""

import numpy as np
import pytest

import volvox

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(5)


def save(path, node, inputs, outputs, opset=22):
    """A one-node model; inputs / outputs as (name, elem type, dims)."""
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


@pytest.mark.parametrize("node, inputs, outputs", [
    (helper.make_node("RandomUniform", [], ["y"], shape=[3, 50], low=-2.0, high=5.0, seed=3.0), [],
     [("y", TensorProto.FLOAT, [3, 50])]),
    (helper.make_node("RandomNormalLike", ["x"], ["y"], mean=1.0, scale=3.0, seed=11.0),
     [("x", TensorProto.DOUBLE, [4, 30])], [("y", TensorProto.DOUBLE, [4, 30])]),
    (helper.make_node("Bernoulli", ["x"], ["y"], seed=2.0), [("x", TensorProto.FLOAT, [100])],
     [("y", TensorProto.FLOAT, [100])]),
    (helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=7),
     [("x", TensorProto.FLOAT, [5, 40]), ("r", TensorProto.FLOAT, []), ("t", TensorProto.BOOL, [])],
     [("y", TensorProto.FLOAT, [5, 40]), ("m", TensorProto.BOOL, [5, 40])]),
], ids=["uniform", "normal_like", "bernoulli", "training_dropout"])
def test_seeded_draws_equal_onnx_reference_every_run(tmp_path, node, inputs, outputs):
    path = save(tmp_path / "seeded.onnx", node, inputs, outputs)
    feeds = {"x": RNG.uniform(0, 1, [d for d in inputs[0][2]]).astype(np.float64 if inputs[0][1] == TensorProto.DOUBLE
                                                                  else np.float32)} if inputs else {}
    if node.op_type == "Dropout":
        feeds.update(r=np.array(0.3, np.float32), t=np.array(True))
    want = ReferenceEvaluator(str(path)).run(None, feeds)
    model = volvox.load(path)
    for _ in range(2):
        got = list(model.run(feeds).values())
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def test_unseeded_uniform_and_normal_draw_anew_and_follow_their_distribution(tmp_path):
    uniform = volvox.load(save(tmp_path / "u.onnx", helper.make_node("RandomUniform", [], ["y"], shape=[200, 100],
                                                                     low=1.0, high=3.0), [], [("y", TensorProto.FLOAT, None)]))
    a, b = uniform.run({})["y"], uniform.run({})["y"]
    assert a.dtype == np.float32 and a.shape == (200, 100) and not np.array_equal(a, b)
    assert a.min() >= 1.0 and a.max() < 3.0 and abs(a.mean() - 2.0) < 5 * (2 / np.sqrt(12)) / np.sqrt(a.size)
    normal = volvox.load(save(tmp_path / "n.onnx", helper.make_node("RandomNormal", [], ["y"], shape=[20000],
                                                                    mean=-1.0, scale=0.5, dtype=TensorProto.DOUBLE),
                              [], [("y", TensorProto.DOUBLE, None)]))
    y = normal.run({})["y"]
    assert y.dtype == np.float64 and abs(y.mean() + 1.0) < 5 * 0.5 / np.sqrt(y.size) and abs(y.std() - 0.5) < 0.02


def test_multinomial_frequencies_equal_onnxruntime(tmp_path):
    logits = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]], np.float32))
    path = save(tmp_path / "m.onnx", helper.make_node("Multinomial", ["x"], ["y"], sample_size=20000),
                [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.INT32, [2, 20000])], opset=15)
    got = volvox.load(path).run({"x": logits})["y"]
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": logits})
    assert got.dtype == want.dtype == np.int32 and got.shape == want.shape
    for row in range(2):
        ours, theirs = (np.bincount(v[row], minlength=3) / v.shape[1] for v in (got, want))
        np.testing.assert_allclose(ours, theirs, atol=5 * np.sqrt(0.25 * 2 / got.shape[1]))
