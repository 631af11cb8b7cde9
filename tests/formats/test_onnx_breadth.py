"""The ONNX importer's breadth beyond the NHWC kernels, each against onnxruntime on the same model and
inputs: narrow element types read from initializers (packed int4, bfloat16), blocked dequantization,
pools of any rank with dilations / ceil_mode / indices, control flow (If with a run-time condition,
counted Loop, Scan), ops of data-dependent shape (folded at import; read_onnx names a run-time input,
which volvox.load plans per value: test_onnx_value_plans.py),
and files older than opset 7 (converted by onnx's version converter)."""

import numpy as np
import pytest

import volvox
from volvox.formats.onnx import ConstantRequired, read_onnx

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(7)


def save(path, nodes, inputs, outputs, inits=(), opset=21):
    """An ONNX model of ``nodes``; inputs as (name, elem type, dims), outputs by name (float) or (name, elem type)."""
    outputs = [(o, TensorProto.FLOAT) if isinstance(o, str) else o for o in outputs]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
                              [helper.make_tensor_value_info(o, t, None) for o, t in outputs], list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def equal_onnxruntime(path, feeds, rtol=1e-6, atol=1e-6):
    """volvox's outputs of the model at ``path`` equal onnxruntime's (dtype and shape too)."""
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = list(volvox.load(path).run(feeds).values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_packed_int4_initializer_dequantized_in_blocks(tmp_path):
    import ml_dtypes

    weight = RNG.integers(-8, 8, (5, 3)).astype(ml_dtypes.int4)     # 15 values: the last byte half used
    scale = RNG.uniform(0.5, 2, (3, 3)).astype(np.float32)           # blocks of 2 rows, the last one short
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(scale, "s")]
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["dq"], axis=0, block_size=2),
             helper.make_node("MatMul", ["x", "dq"], ["y"])]
    path = save(tmp_path / "int4.onnx", nodes, [("x", TensorProto.FLOAT, [2, 5])], ["y"], inits)
    equal_onnxruntime(path, {"x": RNG.standard_normal((2, 5)).astype(np.float32)}, rtol=1e-5)


def test_bfloat16_cast_round_trip(tmp_path):
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)]
    path = save(tmp_path / "bf16.onnx", nodes, [("x", TensorProto.FLOAT, [3, 4])], ["y"])
    equal_onnxruntime(path, {"x": RNG.standard_normal((3, 4)).astype(np.float32) * 100}, rtol=0, atol=0)


@pytest.mark.parametrize("op, shape, attrs", [
    ("AveragePool", (1, 2, 7, 6, 5), dict(kernel_shape=[3, 2, 2], strides=[2, 2, 1], dilations=[1, 2, 2],
                                          pads=[1, 0, 1, 1, 1, 0], ceil_mode=1, count_include_pad=1)),
    ("AveragePool", (2, 3, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                       count_include_pad=1)),
    ("MaxPool", (1, 3, 8, 9), dict(kernel_shape=[2, 3], strides=[2, 1], dilations=[2, 1], pads=[1, 1, 0, 1])),
    ("MaxPool", (1, 2, 5, 6, 4), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1)),
    ("LpPool", (1, 2, 10), dict(kernel_shape=[3], strides=[2], p=3, pads=[1, 1])),
    ("LpPool", (1, 2, 6, 5), dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER")),
])
def test_pools_beyond_the_nhwc_kernel(tmp_path, op, shape, attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    path = save(tmp_path / "pool.onnx", [node], [("x", TensorProto.FLOAT, list(shape))], ["y"], opset=19)
    equal_onnxruntime(path, {"x": RNG.standard_normal(shape).astype(np.float32)}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices_and_unpool(tmp_path, storage_order):
    pool = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1],
                            storage_order=storage_order)
    nodes = [pool] + ([helper.make_node("MaxUnpool", ["y", "i"], ["u"], kernel_shape=[2, 2], strides=[2, 2],
                                        pads=[0, 0, 1, 1])] if storage_order == 0 else [])
    path = save(tmp_path / "indices.onnx", nodes, [("x", TensorProto.FLOAT, [2, 3, 5, 5])],
                ["y", ("i", TensorProto.INT64)] + (["u"] if storage_order == 0 else []), opset=12)
    equal_onnxruntime(path, {"x": RNG.standard_normal((2, 3, 5, 5)).astype(np.float32)})


def branch(name, op, value):
    """A branch graph: its output ``op``(x, constant ``value``)."""
    node = helper.make_node(op, ["x", f"{name}_c"], [f"{name}_out"])
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(np.float32(value), f"{name}_c")])


def test_if_with_a_run_time_condition(tmp_path):
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", "Add", 1.5),
                            else_branch=branch("else", "Mul", -2.0))
    path = save(tmp_path / "if.onnx", [node], [("cond", TensorProto.BOOL, []), ("x", TensorProto.FLOAT, [2, 3])], ["y"],
                opset=13)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    for cond in (True, False):
        equal_onnxruntime(path, {"cond": np.array(cond), "x": x})


def test_counted_loop_with_carried_state_and_scan_output(tmp_path):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["acc_in", "i_f"], ["sum"]),
         helper.make_node("Mul", ["sum", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["each"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("cond_out", TensorProto.BOOL),
                                                                ("acc_out", TensorProto.FLOAT),
                                                                ("each", TensorProto.FLOAT))])
    node = helper.make_node("Loop", ["trips", "", "start"], ["final", "all"], body=body)
    inits = [numpy_helper.from_array(np.array(4, np.int64), "trips")]
    path = save(tmp_path / "loop.onnx", [node], [("start", TensorProto.FLOAT, [3]), ("x", TensorProto.FLOAT, [3])],
                ["final", "all"], inits, opset=13)
    equal_onnxruntime(path, {"start": RNG.standard_normal(3).astype(np.float32),
                             "x": RNG.uniform(0.5, 1.5, 3).astype(np.float32)}, rtol=1e-6)


def test_scan_backwards_over_axis_1(tmp_path):
    body = helper.make_graph(
        [helper.make_node("Add", ["state_in", "row"], ["state_out"]),
         helper.make_node("Identity", ["state_out"], ["partial"])],
        "body", [helper.make_tensor_value_info("state_in", TensorProto.FLOAT, [2]),
                 helper.make_tensor_value_info("row", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("state_out", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("partial", TensorProto.FLOAT, None)])
    node = helper.make_node("Scan", ["init", "x"], ["total", "partials"], body=body, num_scan_inputs=1,
                            scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1])
    path = save(tmp_path / "scan.onnx", [node], [("init", TensorProto.FLOAT, [2]), ("x", TensorProto.FLOAT, [2, 5])],
                ["total", "partials"], opset=16)
    equal_onnxruntime(path, {"init": RNG.standard_normal(2).astype(np.float32),
                             "x": RNG.standard_normal((2, 5)).astype(np.float32)})


def test_data_dependent_ops_fold_constants_and_name_a_run_time_input(tmp_path):
    mask = (RNG.standard_normal((3, 4)) > 0).astype(np.float32)
    path = save(tmp_path / "nonzero.onnx", [helper.make_node("NonZero", ["m"], ["i"]),
                                            helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
                                            helper.make_node("Add", ["f", "x"], ["y"])],
                [("x", TensorProto.FLOAT, [1, 1])], ["y"], [numpy_helper.from_array(mask, "m")], opset=13)
    equal_onnxruntime(path, {"x": np.ones((1, 1), np.float32)})
    path = save(tmp_path / "runtime.onnx", [helper.make_node("NonZero", ["x"], ["i"])],
                [("x", TensorProto.FLOAT, [3, 4])], [("i", TensorProto.INT64)], opset=13)
    with pytest.raises(ConstantRequired, match=r"NonZero.*output shape depends on the values") as e:
        read_onnx(path)
    assert e.value.tensor == "x"


def test_opset_6_file_is_converted(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Not", ["b"], ["n"])]
    path = save(tmp_path / "old.onnx", nodes, [("x", TensorProto.FLOAT, [2, 3]), ("b", TensorProto.BOOL, [4])],
                ["r", ("n", TensorProto.BOOL)], opset=6)
    equal_onnxruntime(path, {"x": RNG.standard_normal((2, 3)).astype(np.float32),
                             "b": np.array([True, False, False, True])})


def test_ops_defined_as_onnx_functions_run_through_their_body(tmp_path):
    """Attention (opset 23: grouped heads, causal, scaled) and CenterCropPad have no volvox translation:
    they run as the ops of their ONNX function bodies."""
    q = RNG.standard_normal((2, 4, 3, 8)).astype(np.float32)
    k = RNG.standard_normal((2, 2, 5, 8)).astype(np.float32)
    v = RNG.standard_normal((2, 2, 5, 6)).astype(np.float32)
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1, scale=0.3)
    path = save(tmp_path / "attention.onnx", [node], [("q", TensorProto.FLOAT, list(q.shape)),
                                                      ("k", TensorProto.FLOAT, list(k.shape)),
                                                      ("v", TensorProto.FLOAT, list(v.shape))], ["y"], opset=23)
    equal_onnxruntime(path, {"q": q, "k": k, "v": v}, rtol=1e-5, atol=1e-6)
    crop = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[1, 2])
    path = save(tmp_path / "crop.onnx", [crop], [("x", TensorProto.FLOAT, [2, 5, 4])], ["y"],
                [numpy_helper.from_array(np.array([3, 6], np.int64), "shape")], opset=18)
    equal_onnxruntime(path, {"x": RNG.standard_normal((2, 5, 4)).astype(np.float32)})


def test_conv_beyond_the_nhwc_kernel(tmp_path):
    """3-D float16 convs (strided, grouped, SAME_UPPER; dilated with explicit pads) and a conv whose weight
    is an input."""
    w = (RNG.standard_normal((4, 1, 2, 3, 2)) * 0.5).astype(np.float16)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, strides=[1, 2, 1], auto_pad="SAME_UPPER"),
             helper.make_node("Conv", ["x", "w"], ["z"], group=2, dilations=[2, 1, 1], pads=[1, 0, 1, 0, 2, 0])]
    path = save(tmp_path / "conv3d.onnx", nodes, [("x", TensorProto.FLOAT16, [1, 2, 5, 6, 4])],
                [("y", TensorProto.FLOAT16), ("z", TensorProto.FLOAT16)],
                [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([1, -1, 0.5, 0], np.float16), "b")],
                opset=13)
    equal_onnxruntime(path, {"x": RNG.standard_normal((1, 2, 5, 6, 4)).astype(np.float16)}, rtol=2e-3, atol=2e-3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 0, 1, 0])
    path = save(tmp_path / "conv_input_weight.onnx", [node], [("x", TensorProto.FLOAT, [2, 3, 5, 4]),
                                                              ("w", TensorProto.FLOAT, [2, 3, 3, 1])], ["y"], opset=13)
    equal_onnxruntime(path, {"x": RNG.standard_normal((2, 3, 5, 4)).astype(np.float32),
                             "w": RNG.standard_normal((2, 3, 3, 1)).astype(np.float32)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialiased_downsampling_resize(tmp_path, mode):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, antialias=1)
    path = save(tmp_path / "resize.onnx", [node], [("x", TensorProto.FLOAT, [1, 2, 9, 8])], ["y"],
                [numpy_helper.from_array(np.array([1, 1, 0.4, 0.6], np.float32), "scales")], opset=18)
    equal_onnxruntime(path, {"x": RNG.standard_normal((1, 2, 9, 8)).astype(np.float32)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode, transform", [("avg", "half_pixel"), ("max", "output_half_pixel")])
def test_roi_align(tmp_path, mode, transform):
    rois = np.array([[0.5, 1.0, 6.0, 5.5], [2.0, 0.0, 7.5, 7.0], [-1.0, -1.0, 3.0, 2.0]], np.float32)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode, output_height=3, output_width=2,
                            sampling_ratio=2, spatial_scale=0.8, coordinate_transformation_mode=transform)
    path = save(tmp_path / "roi.onnx", [node], [("x", TensorProto.FLOAT, [2, 3, 8, 8])], ["y"],
                [numpy_helper.from_array(rois, "rois"), numpy_helper.from_array(np.array([0, 1, 1], np.int64), "batch")],
                opset=16)
    equal_onnxruntime(path, {"x": RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)}, rtol=1e-5, atol=1e-6)


def test_signal_ops(tmp_path):
    """DFT (one-sided, along axis 1) and STFT with a Hann window, against onnxruntime."""
    nodes = [helper.make_node("DFT", ["x", "", "axis"], ["spectrum"], onesided=1),
             helper.make_node("HannWindow", ["size"], ["window"]),
             helper.make_node("STFT", ["x", "step", "window"], ["stft"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "axis"), numpy_helper.from_array(np.array(8, np.int64), "size"),
             numpy_helper.from_array(np.array(3, np.int64), "step")]
    path = save(tmp_path / "signal.onnx", nodes, [("x", TensorProto.FLOAT, [2, 20, 1])], ["spectrum", "stft"], inits,
                opset=20)
    # atol: onnxruntime's float32 FFT leaves ~1e-5 where the exact imaginary part is 0
    equal_onnxruntime(path, {"x": RNG.standard_normal((2, 20, 1)).astype(np.float32)}, rtol=1e-4, atol=1e-4)


def test_volumetric_grid_sample_and_col2im(tmp_path):
    nodes = [helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", padding_mode="border"),
             helper.make_node("Col2Im", ["cols", "image", "block"], ["im"], strides=[2, 1], pads=[1, 0, 0, 1])]
    inits = [numpy_helper.from_array(np.array([5, 4], np.int64), "image"),
             numpy_helper.from_array(np.array([2, 2], np.int64), "block")]
    path = save(tmp_path / "grid.onnx", nodes, [("x", TensorProto.FLOAT, [1, 2, 3, 4, 5]),
                                                ("grid", TensorProto.FLOAT, [1, 2, 3, 2, 3]),
                                                ("cols", TensorProto.FLOAT, [1, 8, 12])], ["y", "im"], inits, opset=20)
    equal_onnxruntime(path, {"x": RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32),
                             "grid": RNG.uniform(-1.2, 1.2, (1, 2, 3, 2, 3)).astype(np.float32),
                             "cols": RNG.standard_normal((1, 8, 12)).astype(np.float32)}, rtol=1e-5, atol=1e-6)


def test_info_counts_function_defined_ops_as_present(tmp_path):
    from volvox.formats.onnx import op_report

    node = helper.make_node("Attention", ["q", "k", "v"], ["y"])
    noise = helper.make_node("TfIdfVectorizer", ["y"], ["z"])
    path = save(tmp_path / "report.onnx", [node, noise], [(n, TensorProto.FLOAT, [1, 2, 3, 4]) for n in "qkv"], ["z"],
                opset=23)
    assert op_report(path) == {"opset": 23, "ops": {"Attention": 1, "TfIdfVectorizer": 1}, "missing": ["TfIdfVectorizer"]}


def test_constant_required_names_every_input_it_comes_from(tmp_path):
    """Range's bounds computed from two graph inputs: the refusal names both (an exported model holds them)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["limit"]), helper.make_node("Range", ["zero", "limit", "one"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one")]
    path = save(tmp_path / "range.onnx", nodes, [("a", TensorProto.INT64, []), ("b", TensorProto.INT64, [])],
                [("y", TensorProto.INT64)], inits, opset=13)
    with pytest.raises(ConstantRequired, match=r"computed from inputs \['a', 'b'\]") as e:
        read_onnx(path)
    assert e.value.inputs == ("a", "b")


def test_narrow_types_outside_conversions_and_moves_are_refused(tmp_path):
    """A bfloat16 tensor reaching arithmetic is refused at import naming the type, not computed wrongly or
    crashed on at run time; moving it (Transpose) and casting it run."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), helper.make_node("ReduceMax", ["t"], ["y"])]
    path = save(tmp_path / "bf16.onnx", nodes, [("x", TensorProto.BFLOAT16, [2, 3])], [("y", TensorProto.BFLOAT16)],
                opset=18)
    with pytest.raises(volvox.UnsupportedError, match="reduce_max does not take bfloat16"):
        read_onnx(path)
