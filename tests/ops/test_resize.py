"""The resize op against the runtimes that define it, on the same inputs.

- onnxruntime: one-node ONNX models for every mode x coordinate_transformation_mode x nearest_mode,
  on up / down / non-integer / 2x / single-pixel geometries, from sizes and from scales (nearest
  bit-identical, bilinear within 1e-5), plus a Conv -> Resize -> Conv graph through the NHWC layout.
- the TFLite interpreter: one-op .tflite files (written with the flatbuffer writer in
  tools/tflite_writer.py) for RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR x align_corners /
  half_pixel_centers, float32 and int8 nearest (bit-exact to the builtin kernels).
- the fast path against the numpy reference, every GPU backend against the CPU reference (NMSE),
  and unsupported attributes failing with errors that name the node and the attribute.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import volvox
from gpu_helpers import BACKENDS, device_or_skip, nmse
from volvox.errors import ShapeError, UnsupportedError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops import get_op
from volvox.ops.resize import NEAREST_MODES, ONNX_COORDINATES, ONNX_NEAREST_MODES, TFLITE_COORDINATES
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor
from volvox.ops import validate

ROOT = Path(__file__).resolve().parents[2]
rng = np.random.default_rng(7)

# (NCHW input shape, "sizes" or "scales", the 4 values)
ONNX_GEOMETRIES = [
    ((1, 2, 3, 5), "sizes", (1, 2, 7, 11)),        # upsample, odd ratios
    ((1, 2, 9, 8), "sizes", (1, 2, 4, 3)),         # downsample
    ((1, 3, 4, 4), "scales", (1.0, 1.0, 2.0, 2.0)),  # 2x: the asymmetric / nearest ties
    ((2, 2, 5, 6), "scales", (1.0, 1.0, 1.7, 0.6)),  # non-integer scales drive the coordinates
    ((1, 2, 4, 5), "sizes", (1, 2, 1, 3)),         # one output row (pytorch_half_pixel / align_corners special case)
    # lengths where dividing by the scale and multiplying by its inverse pick different pixels, for
    # every coordinate transform x nearest_mode (found by search): only the exact float32 order passes
    ((1, 1, 15, 6), "sizes", (1, 1, 25, 26)),
    ((1, 1, 8, 20), "sizes", (1, 1, 28, 6)),
    ((1, 1, 14, 23), "sizes", (1, 1, 4, 10)),
    # lengths whose float32 coordinate lands within 1e-6 of k + 0.5 (a tie for onnxruntime) for
    # every coordinate transform x round_prefer_floor / round_prefer_ceil
    ((1, 1, 14, 7), "sizes", (1, 1, 19, 38)),
    ((1, 1, 7, 20), "sizes", (1, 1, 19, 26)),
]
ONNX_MODES = [("nearest", c, m) for c in ONNX_COORDINATES for m in ONNX_NEAREST_MODES] + \
             [("linear", c, "round_prefer_floor") for c in ONNX_COORDINATES]


def run_ops(op, params, x, which):
    o = get_op(op)
    shape, dtype = o.infer({"x": TensorSpec("x", x.shape, x.dtype.name)}, params)["y"]
    y = (o.fast if which == "fast" else o.ref)(None, params, x)
    assert y.shape == tuple(shape) and y.dtype == np.dtype(dtype)
    return y


# -- fast path vs reference ---------------------------------------------------------------------
@pytest.mark.parametrize("coordinate", ONNX_COORDINATES + TFLITE_COORDINATES)
@pytest.mark.parametrize("size", [dict(size=[7, 3]), dict(size=[1, 1]), dict(scales=[1.5, 0.75])])
def test_fast_matches_reference(coordinate, size):
    x = rng.standard_normal((2, 5, 4, 3)).astype(np.float32)
    xq = rng.integers(-128, 128, (2, 5, 4, 3)).astype(np.int8)
    p = dict(mode="bilinear", coordinate=coordinate, **size)
    np.testing.assert_allclose(run_ops("resize", p, x, "fast"), run_ops("resize", p, x, "ref"), rtol=1e-6, atol=1e-6)
    for nearest_mode in NEAREST_MODES:
        p = dict(mode="nearest", coordinate=coordinate, nearest_mode=nearest_mode, **size)
        np.testing.assert_array_equal(run_ops("resize", p, x, "fast"), run_ops("resize", p, x, "ref"))
        np.testing.assert_array_equal(run_ops("resize", p, xq, "fast"), run_ops("resize", p, xq, "ref"))


def test_symbolic_width_infers_a_symbol():
    o = get_op("resize")
    shape, _ = o.infer({"x": TensorSpec("x", (1, 4, "w", 3), "float32")}, dict(mode="nearest", coordinate="asymmetric",
                                                                                scales=[2.0, 2.0]))["y"]
    assert shape[:2] == (1, 8) and isinstance(shape[2], str) and shape[3] == 3


# -- onnxruntime ------------------------------------------------------------------------------------
def onnx_resize_model(path, shape, kind, values, mode, coordinate, nearest_mode, opset=13):
    """x (NCHW) -> Resize -> y, with roi empty and scales or sizes as initializers."""
    from onnx import TensorProto, helper, numpy_helper, save

    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi")]
    if kind == "scales":
        inits.append(numpy_helper.from_array(np.array(values, np.float32), "scales"))
        ins = ["x", "roi", "scales"]
    else:
        inits += [numpy_helper.from_array(np.zeros(0, np.float32), "scales"),
                  numpy_helper.from_array(np.array(values, np.int64), "sizes")]
        ins = ["x", "roi", "scales", "sizes"]
    node = helper.make_node("Resize", ins, ["y"], name="up", mode=mode, coordinate_transformation_mode=coordinate,
                            nearest_mode=nearest_mode)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def only_output(path, x, **kw):
    """The single output of volvox's run of the model at ``path``."""
    (y,) = volvox.load(path, **kw).run({"x": x}).values()
    return y


def ort_run(path, x):
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("mode,coordinate,nearest_mode", ONNX_MODES)
def test_onnx_resize_matches_onnxruntime(tmp_path, mode, coordinate, nearest_mode):
    pytest.importorskip("onnx")
    for k, (shape, kind, values) in enumerate(ONNX_GEOMETRIES):
        path = onnx_resize_model(tmp_path / f"r{k}.onnx", shape, kind, values, mode, coordinate, nearest_mode,
                                 opset=11 if k == 0 else 13)
        x = rng.standard_normal(shape).astype(np.float32)
        want = ort_run(path, x)
        for reference in (False, True):
            got = only_output(path, x, reference=reference)
            assert got.shape == want.shape, (shape, values)
            if mode == "nearest":
                np.testing.assert_array_equal(got, want, err_msg=f"{shape} {kind} {values}")
            else:
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=f"{shape} {kind} {values}")


def test_onnx_resize_between_convs_keeps_nhwc(tmp_path):
    """Conv -> Resize (linear, half_pixel, 2x) -> Conv: the resize reads and writes NHWC, no transposes around it."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((4, 3, 3, 3), (2, 4, 1, 1)))
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c1", "roi", "scales"], ["up"], mode="linear"),
             helper.make_node("Conv", ["up", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "conv_resize.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    x = rng.standard_normal((1, 3, 6, 5)).astype(np.float32)
    assert [n.op for n in volvox.load(path).graph.nodes].count("transpose") == 2  # graph input in, output out
    np.testing.assert_allclose(only_output(path, x), ort_run(path, x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("attrs,inputs,match", [
    (dict(nearest_mode="nearest_even"), None, r"node 'up' \(Resize\): attribute nearest_mode='nearest_even' is not supported"),
])
def test_onnx_unsupported_resize_names_node_and_attribute(tmp_path, attrs, inputs, match):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
             numpy_helper.from_array(np.array(inputs or [1, 1, 2, 2], np.float32), "scales")]
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="up", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "bad_resize.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    with pytest.raises(UnsupportedError, match="bad_resize.onnx: " + match):
        volvox.load(path)


def test_onnx_runtime_scales_plan_per_value(tmp_path):
    """Scales fed at run time: the model is planned per value of ``s`` and equals onnxruntime for each."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Resize", ["x", "roi", "s"], ["y"], name="up")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3]),
                                            helper.make_tensor_value_info("s", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.zeros(0, np.float32), "roi")])
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    model, session = volvox.load(path), ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 3)).astype(np.float32)  # (N, C, H, W)
    for scales in ([1, 1, 2, 2], [1, 1, 3, 1], [1, 1, 2, 2]):
        feeds = {"x": x, "s": np.array(scales, np.float32)}
        (want,) = session.run(None, feeds)
        (got,) = model.run(feeds).values()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_blueprint_resize_errors():
    def graph(**params):
        g = Graph([TensorSpec("x", (1, 4, 4, 2), "float32")], {}, [Node("up", "resize", {"x": "x"}, {"y": "y"}, params)], ["y"])
        validate(g)
    with pytest.raises(UnsupportedError, match=r"node 'up' \(resize\): .*mode='cubic' is not supported"):
        graph(mode="cubic", coordinate="half_pixel", size=[8, 8])
    with pytest.raises(UnsupportedError, match="coordinate='tf_crop_and_resize' is not supported"):
        graph(mode="nearest", coordinate="tf_crop_and_resize", size=[8, 8])
    with pytest.raises(ShapeError, match=r"node 'up' \(resize\): resize needs exactly one of size"):
        graph(mode="nearest", coordinate="asymmetric")
    with pytest.raises(ShapeError, match=r"node 'up' \(resize\): scales \[0.1, 1.0\] give an empty output"):
        graph(mode="nearest", coordinate="asymmetric", scales=[0.1, 1.0])


# -- the TFLite interpreter ----------------------------------------------------------------------
def _fb_tool():
    spec = importlib.util.spec_from_file_location("tflite_writer", ROOT / "tools" / "tflite_writer.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


TFL_RESIZE = {"RESIZE_BILINEAR": (23, 15), "RESIZE_NEAREST_NEIGHBOR": (97, 74)}  # (builtin code, BuiltinOptions type)
TFL_INT8 = (0.05, 3)  # (scale, zero point) of the int8 activations


def tflite_resize_model(path, op, in_shape, size, align, half, dtype="float32"):
    """x -> RESIZE_* (constant size, align_corners / half_pixel_centers) -> y, per tensorflow/lite/schema/schema.fbs."""
    t = _fb_tool()
    FB, table, vec = t.FB, t.fb_table, t.fb_vec
    code, options_type = TFL_RESIZE[op]
    type_code = {"float32": 0, "int8": 9}[dtype]
    # QuantizationParameters: min, max, scale, zero_point
    quant = table(None, None, vec("f", [TFL_INT8[0]]), vec("q", [TFL_INT8[1]])) if dtype == "int8" else None

    def tensor(name, shape, type_code, buffer, q=None):  # Tensor: shape, type, buffer, name, quantization
        return table(vec("i", shape), ("b", type_code), ("I", buffer), FB("string", name), q)
    tensors = [tensor("x", in_shape, type_code, 0, quant), tensor("size", [2], 2, 1),
               tensor("y", [in_shape[0], *size, in_shape[3]], type_code, 0, quant)]
    buffers = [table(), table(vec("B", np.array(size, "<i4").tobytes()))]
    # ResizeBilinearOptions: new_height, new_width (deprecated), align_corners, half_pixel_centers;
    # ResizeNearestNeighborOptions: align_corners, half_pixel_centers
    flags = (("b", int(align)), ("b", int(half)))
    options = table(*flags) if op == "RESIZE_NEAREST_NEIGHBOR" else table(None, None, *flags)
    operator = t.tfl_op(0, [0, 1], [2], options_type, options)
    codes = [table(("b", min(code, 127)), None, ("i", 1), ("i", code))]
    subgraph = table(FB("tables", tensors), vec("i", [0]), vec("i", [2]), FB("tables", [operator]), FB("string", "main"))
    model = table(("I", 3), FB("tables", codes), FB("tables", [subgraph]), FB("string", "resize"), FB("tables", buffers))
    path.write_bytes(t.build_flatbuffer(model, b"TFL3")[0])
    return path


def tflite_run(path, x, delegates):
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    kind = litert.OpResolverType.AUTO if delegates else litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = litert.Interpreter(model_path=str(path), experimental_op_resolver_type=kind)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


TFL_GEOMETRIES = [((1, 3, 5, 2), (7, 11)), ((1, 9, 8, 3), (4, 3)), ((1, 4, 4, 2), (8, 8)), ((2, 3, 3, 1), (9, 9)),
                  ((1, 6, 4, 2), (1, 3)), ((1, 5, 7, 2), (5, 7))]


@pytest.mark.parametrize("op", list(TFL_RESIZE))
@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
def test_tflite_float_resize_matches_interpreter(tmp_path, op, align, half):
    for k, (in_shape, size) in enumerate(TFL_GEOMETRIES):
        path = tflite_resize_model(tmp_path / f"r{k}.tflite", op, in_shape, size, align, half)
        x = rng.standard_normal(in_shape).astype(np.float32)
        for reference in (False, True):
            got = only_output(path, x, reference=reference)
            for delegates in (False, True):  # builtin kernels, XNNPACK
                want = tflite_run(path, x, delegates)
                if op == "RESIZE_NEAREST_NEIGHBOR":
                    np.testing.assert_array_equal(got, want, err_msg=f"{in_shape} -> {size}")
                else:
                    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=f"{in_shape} -> {size}")


@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
def test_tflite_int8_nearest_is_bit_exact(tmp_path, align, half):
    for k, (in_shape, size) in enumerate(TFL_GEOMETRIES):
        path = tflite_resize_model(tmp_path / f"q{k}.tflite", "RESIZE_NEAREST_NEIGHBOR", in_shape, size, align, half, "int8")
        x = rng.integers(-128, 128, in_shape).astype(np.int8)
        want = tflite_run(path, x, delegates=False)
        for reference in (False, True):
            got = only_output(path, x, reference=reference)
            assert got.dtype == np.int8
            np.testing.assert_array_equal(got, want, err_msg=f"{in_shape} -> {size}")


def test_tflite_unsupported_resize_is_a_clear_error(tmp_path):
    path = tflite_resize_model(tmp_path / "both.tflite", "RESIZE_BILINEAR", (1, 3, 3, 2), (6, 6), True, True)
    with pytest.raises(UnsupportedError, match=r"operator 0 \(RESIZE_BILINEAR v1\): align_corners and half_pixel_centers"):
        volvox.load(path)


# -- GPU backends ------------------------------------------------------------------------------------
GPU_CASES = [  # (id, x shape, params)
    ("bilinear_half_pixel_up", (1, 5, 4, 3), dict(mode="bilinear", coordinate="half_pixel", size=[9, 11])),
    ("bilinear_align_down", (2, 9, 8, 2), dict(mode="bilinear", coordinate="align_corners", size=[4, 3])),
    ("bilinear_tflite_2x", (1, 4, 6, 5), dict(mode="bilinear", coordinate="tflite_asymmetric", size=[8, 12])),
    ("bilinear_scales", (1, 5, 6, 2), dict(mode="bilinear", coordinate="pytorch_half_pixel", scales=[1.7, 0.6])),
    ("nearest_asymmetric_2x", (1, 4, 4, 3), dict(mode="nearest", coordinate="asymmetric", scales=[2.0, 2.0])),
    ("nearest_half_pixel_ceil", (1, 7, 5, 2), dict(mode="nearest", coordinate="half_pixel",
                                                  nearest_mode="round_prefer_ceil", size=[3, 12])),
    ("nearest_tflite_half", (1, 3, 5, 4), dict(mode="nearest", coordinate="tflite_half_pixel_for_nn",
                                              nearest_mode="floor", size=[7, 10])),
    ("nearest_tflite_align", (2, 6, 5, 3), dict(mode="nearest", coordinate="tflite_align_corners",
                                               nearest_mode="round_half_up", size=[11, 9])),
    ("nearest_tie_tolerance", (1, 14, 7, 2), dict(mode="nearest", coordinate="half_pixel",
                                                 nearest_mode="round_prefer_floor", size=[19, 38])),
]


@BACKENDS
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c[0])
def test_gpu_resize_matches_reference(backend, case):
    from volvox.runtime.gpu_executor import GpuExecutor

    device = device_or_skip(backend)
    _, shape, params = case
    graph = Graph([TensorSpec("x", shape, "float32")], {}, [Node("n", "resize", {"x": "x"}, {"y": "y"}, params)], ["y"])
    validate(graph)
    ex = GpuExecutor(graph, {}, device)
    where, reason = ex.placement["n"]
    if where != "gpu":
        if not device.supports("resize"):
            pytest.skip(f"not supported on {backend}: {reason}")
        pytest.fail(f"resize placed on the CPU: {reason}")
    x = rng.standard_normal(shape).astype(np.float32)
    want = Executor(graph, {}, reference=True).run(RunContext(), {"x": x})["y"]
    got = ex.run(RunContext(), {"x": x})["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    err = nmse(got, want)
    assert err <= 1e-12, f"{case[0]} on {backend}: NMSE {err:.3g}"


def test_int8_resize_stays_on_cpu():
    from volvox._gpu.lowering import LOWERINGS

    specs = {"x": TensorSpec("x", (1, 4, 4, 2), "int8")}
    assert LOWERINGS["resize"].check(specs, dict(mode="nearest", coordinate="asymmetric", size=[8, 8])) == "x is int8"

