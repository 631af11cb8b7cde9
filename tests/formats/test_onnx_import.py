"""The ONNX importer's behaviour beyond single ops, against onnxruntime: symbolic input dims (batch
and image size) bound at each run (re-planned when they change), external data memory-mapped, refusals naming op, opset and
node, operands that must be constants, and ``volvox info`` listing a file's ops before loading it."""

import json
import mmap
import subprocess
import sys

import numpy as np
import pytest

import volvox
from volvox.formats.onnx import ConstantRequired, op_report, read_onnx
from volvox.formats.onnx.reader import read_model

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)
CONV_W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
FC_W = RNG.standard_normal((5, 4)).astype(np.float32)


def dynamic_model(path, **save):
    """x (N, 3, H, W) -> Conv / 2 -> Relu -> [GlobalAveragePool -> Flatten -> Gemm, Resize x2]."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc", transB=1),
             helper.make_node("Resize", ["r", "", "scales"], ["up"], name="up", mode="nearest")]
    graph = helper.make_graph(
        nodes, "dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("up", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(CONV_W, "w"), numpy_helper.from_array(FC_W, "fc"),
         numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path), **save)
    return path


def test_symbolic_dims_are_bound_at_each_run(tmp_path):
    path = dynamic_model(tmp_path / "dynamic.onnx")
    model = volvox.load(path)
    assert model.graph.inputs[0].shape == ("N", 3, "H", "W") and not model.metadata["batch_bound_to_1"]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for n, hw in [(1, (16, 16)), (1, (24, 20)), (3, (16, 16)), (2, (9, 7))]:
        x = RNG.standard_normal((n, 3, *hw)).astype(np.float32)
        want = session.run(None, {"x": x})
        for got, expected in zip(model.run({"x": x}).values(), want):
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_external_data_is_memory_mapped(tmp_path):
    path = dynamic_model(tmp_path / "external.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                         location="weights.data", size_threshold=64)
    assert (tmp_path / "weights.data").is_file()
    fc = read_model(str(path)).initializers["fc"]
    base = fc
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(getattr(base, "obj", base), mmap.mmap) and not fc.flags.writeable
    x = RNG.standard_normal((1, 3, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = list(volvox.load(path).run({"x": x}).values())
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_external_data_outside_the_model_folder_is_refused(tmp_path):
    path = dynamic_model(tmp_path / "external.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                         location="weights.data", size_threshold=64)
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = "../elsewhere.data"
    onnx.save(model, str(path))
    with pytest.raises(volvox.VolvoxError, match="not a file beside the model"):
        read_onnx(path)


def one_node(path, op, inputs, outputs, opset, inits=(), **attrs):
    graph = helper.make_graph([helper.make_node(op, [n for n, _ in inputs], outputs, name="the_node", **attrs)], "g",
                              [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs if n not in dict(inits)],
                              [helper.make_tensor_value_info(o, 0, None) for o in outputs],
                              [numpy_helper.from_array(v, n) for n, v in inits])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def test_refusal_names_op_opset_and_node(tmp_path):
    path = one_node(tmp_path / "random.onnx", "TfIdfVectorizer", [("x", (TensorProto.FLOAT, [1, 4, 3, 3]))], ["y"], 13)
    with pytest.raises(volvox.UnsupportedError,
                       match=r"node 'the_node' \(TfIdfVectorizer\): op TfIdfVectorizer is not supported at opset 13"):
        read_onnx(path)


def test_shape_operand_computed_at_run_time_is_refused_naming_it(tmp_path):
    path = one_node(tmp_path / "reshape.onnx", "Reshape", [("x", (TensorProto.FLOAT, [2, 6])), ("shape", (TensorProto.INT64, [2]))],
                    ["y"], 13)
    with pytest.raises(ConstantRequired, match=r"the shape \('shape'\) must be a constant") as e:
        read_onnx(path)
    assert e.value.tensor == "shape"


def test_opset_7_attributes_are_read(tmp_path):
    """Opset-7 Slice and Squeeze take attributes (inputs from opsets 10 / 13 on)."""
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    nodes = [helper.make_node("Slice", ["x"], ["s"], starts=[1, 0], ends=[4, 5], axes=[2, 3]),
             helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[2, 2], strides=[1, 1]),
             helper.make_node("Squeeze", ["p"], ["q"], axes=[0])]
    graph = helper.make_graph(nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("q", TensorProto.FLOAT, None)])
    path = tmp_path / "opset7.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=3), str(path))
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(volvox.load(path).run({"x": x})["q"], want, rtol=1e-6)


def test_info_lists_ops_and_missing_ones_before_loading(tmp_path):
    path = one_node(tmp_path / "random.onnx", "TfIdfVectorizer", [("x", (TensorProto.FLOAT, [1, 4, 3, 3]))], ["y"], 13)
    assert op_report(path) == {"opset": 13, "ops": {"TfIdfVectorizer": 1}, "missing": ["TfIdfVectorizer"]}
    r = subprocess.run([sys.executable, "-m", "volvox", "info", str(path)], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    info = json.loads(r.stdout)
    assert info["model_ops"]["missing"] == ["TfIdfVectorizer"]
    assert "op TfIdfVectorizer is not supported at opset 13" in info["load_error"]


@pytest.mark.parametrize("attrs, scales", [
    (dict(mode="cubic"), [1, 1, 1.5, 2]),
    (dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5), [1, 1, 0.6, 0.75]),
    (dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"), [1, 1, 2, 1.5]),
    (dict(mode="nearest"), [1, 2, 2, 1]),   # channels too: outside the NHWC kernel
])
def test_resize_beyond_the_nhwc_kernel_equals_onnxruntime(tmp_path, attrs, scales):
    x = RNG.standard_normal((1, 2, 5, 4)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(scales, np.float32), "scales")])
    path = tmp_path / "resize.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), str(path))
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = volvox.load(path).run({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
