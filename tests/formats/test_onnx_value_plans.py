"""ONNX graphs whose shapes follow input values (a Reshape's shape, TopK's K, Range's bounds fed as graph
inputs; NonZero of a graph input) load through volvox.load and run, planned per value of those inputs,
each run against onnxruntime on the same model and inputs; bfloat16 per-element arithmetic against
onnx's reference evaluator (onnxruntime's CPU provider has no bfloat16 Add / Mul)."""

import json
import subprocess
import sys

import numpy as np
import pytest

import volvox
from volvox.formats.onnx.value_plans import PLANS_KEPT, ValuePlannedModel

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(11)


def save(path, nodes, inputs, outputs, inits=(), opset=17):
    """An ONNX model of ``nodes``; inputs as (name, elem type, dims), outputs as (name, elem type)."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
                              [helper.make_tensor_value_info(o, t, None) for o, t in outputs], list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def assert_equals_onnxruntime(model, path, feeds):
    """``model``'s outputs on ``feeds`` equal onnxruntime's exactly (dtype and shape too)."""
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = list(model.run(feeds).values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_reshape_shape_fed_at_run_time_is_planned_per_value(tmp_path):
    path = save(tmp_path / "reshape.onnx", [helper.make_node("Reshape", ["x", "shape"], ["r"]),
                                            helper.make_node("Relu", ["r"], ["y"])],
                [("x", TensorProto.FLOAT, [2, 6]), ("shape", TensorProto.INT64, [2])], [("y", TensorProto.FLOAT)])
    model = volvox.load(path)
    assert isinstance(model, ValuePlannedModel) and model.value_inputs == ("shape",)
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    shapes = [np.array(s, np.int64) for s in ([3, 4], [-1, 2], [12, 1], [3, 4])]
    plans = []
    for shape in shapes:
        assert_equals_onnxruntime(model, path, {"x": x, "shape": shape})
        plans.append(model.plan_for({"x": x, "shape": shape}))
    assert plans[0] is plans[3] and len({id(p) for p in plans}) == 3   # seen values reuse their plan
    model.close()
    with pytest.raises(volvox.errors.ClosedError):
        model.run({"x": x, "shape": shapes[0]})


def test_plans_kept_are_bounded(tmp_path):
    path = save(tmp_path / "topk.onnx", [helper.make_node("TopK", ["x", "k"], ["v", "i"])],
                [("x", TensorProto.FLOAT, [3, 20]), ("k", TensorProto.INT64, [1])],
                [("v", TensorProto.FLOAT), ("i", TensorProto.INT64)])
    model = volvox.load(path)
    x = RNG.standard_normal((3, 20)).astype(np.float32)
    for k in range(1, PLANS_KEPT + 4):
        assert_equals_onnxruntime(model, path, {"x": x, "k": np.array([k], np.int64)})
    assert len(model._plans) == PLANS_KEPT


def test_data_dependent_op_of_a_graph_input_runs(tmp_path):
    """NonZero of an input, then arithmetic on its run-time-sized result, and Range from two inputs."""
    nodes = [helper.make_node("NonZero", ["m"], ["i"]), helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "x"], ["y"]),
             helper.make_node("Add", ["a", "b"], ["limit"]), helper.make_node("Range", ["zero", "limit", "one"], ["r"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one")]
    path = save(tmp_path / "nonzero.onnx", nodes,
                [("m", TensorProto.FLOAT, [3, 4]), ("x", TensorProto.FLOAT, [1, 1]),
                 ("a", TensorProto.INT64, []), ("b", TensorProto.INT64, [])],
                [("y", TensorProto.FLOAT), ("r", TensorProto.INT64)], inits, opset=13)
    model = volvox.load(path)
    assert model.value_inputs == ("m",)   # the first operand the import needed; the others found on the first run
    for trial in range(3):
        feeds = {"m": (RNG.standard_normal((3, 4)) > 0).astype(np.float32), "x": RNG.standard_normal((1, 1)).astype(np.float32),
                 "a": np.array(trial + 2, np.int64), "b": np.array(trial, np.int64)}
        assert_equals_onnxruntime(model, path, feeds)
    assert set(model.value_inputs) == {"m", "limit"}   # limit: computed by the graph's prefix each run


def test_data_dependent_op_of_a_computed_tensor_runs_its_prefix_first(tmp_path):
    """NonZero of a mask a Conv computes: the prefix (Conv, Greater) runs natively to give the mask's value,
    the rest is planned per mask; the Conv output is a graph output too."""
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Greater", ["c", "zero"], ["mask"]), helper.make_node("NonZero", ["mask"], ["i"])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0, np.float32), "zero")]
    path = save(tmp_path / "mask.onnx", nodes, [("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                [("i", TensorProto.INT64), ("c", TensorProto.FLOAT)], inits, opset=13)
    model = volvox.load(path)
    assert model.value_inputs == ("mask",)
    for _ in range(3):
        x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        got = list(model.run({"x": x}).values())
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_a_value_contradicting_a_declared_dim_is_a_shape_error(tmp_path):
    path = save(tmp_path / "reshape.onnx", [helper.make_node("Reshape", ["x", "shape"], ["y"])],
                [("x", TensorProto.FLOAT, [2, 6]), ("shape", TensorProto.INT64, [2])], [("y", TensorProto.FLOAT)])
    with pytest.raises(volvox.errors.ShapeError, match="input 'shape' has shape \\[3\\]"):
        volvox.load(path).run({"x": np.zeros((2, 6), np.float32), "shape": np.array([2, 3, 2], np.int64)})


@pytest.mark.parametrize("op", ["Add", "Mul", "Div", "Sub"])
def test_bfloat16_per_element_arithmetic_rounds_once_per_node(tmp_path, op):
    import ml_dtypes
    from onnx.reference import ReferenceEvaluator

    nodes = [helper.make_node(op, ["a", "b"], ["t"]), helper.make_node("Exp", ["t"], ["y"])]
    path = save(tmp_path / "bf16.onnx", nodes, [("a", TensorProto.BFLOAT16, [4, 5]), ("b", TensorProto.BFLOAT16, [5])],
                [("y", TensorProto.BFLOAT16)], opset=21)
    feeds = {"a": RNG.standard_normal((4, 5)).astype(ml_dtypes.bfloat16),
             "b": RNG.uniform(0.5, 2, 5).astype(ml_dtypes.bfloat16)}
    (want,) = ReferenceEvaluator(str(path)).run(None, feeds)
    (got,) = volvox.load(path).run(feeds).values()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_cli_info_and_run_of_a_model_planned_per_value(tmp_path):
    path = save(tmp_path / "reshape.onnx", [helper.make_node("Reshape", ["x", "shape"], ["y"])],
                [("x", TensorProto.FLOAT, [2, 6]), ("shape", TensorProto.INT64, [2])], [("y", TensorProto.FLOAT)])
    r = subprocess.run([sys.executable, "-m", "volvox", "info", str(path)], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)  # not the source tree: the installed volvox, with its kernels
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"]["planned_per_value_of"] == ["shape"]
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.float32).reshape(2, 6))
    np.save(tmp_path / "shape.npy", np.array([4, 3], np.int64))
    r = subprocess.run([sys.executable, "-m", "volvox", "run", str(path), "--input", f"x={tmp_path / 'x.npy'}",
                        "--input", f"shape={tmp_path / 'shape.npy'}", "--debug"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "float32[4, 3]" in r.stdout and "after fusion" in r.stderr
