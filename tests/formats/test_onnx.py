"""ONNX import against onnxruntime on the same files and inputs: PP-OCRv4's recogniser (probabilities
within 1e-4, identical greedy-CTC strings on rendered text lines), a small NCHW graph exercising the
layout pass, and broken files failing with clear volvox errors."""

import itertools

import numpy as np
import pytest

import volvox
from volvox.tasks.image import preprocess
from volvox.formats.onnx import ONNXError, read_onnx
from volvox.model import Model

from vision_helpers import model_file, text_line

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
LINES = ["Hello volvox 2026", "The quick brown fox", "3.14159 x 42 = 131.95"]


def ort_session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def ort_greedy_ctc(probs, charset):
    """Greedy CTC as RapidOCR decodes: argmax, merge repeats, drop blank (0)."""
    best = probs.argmax(-1)
    return "".join(charset[k] for k, _ in itertools.groupby(best) if k != 0)


@pytest.fixture(scope="module")
def ocr():
    return volvox.load("pp-ocrv4-rec")


@pytest.mark.parametrize("text", LINES)
def test_ppocr_matches_onnxruntime(ocr, text):
    img = text_line(text)
    x = preprocess(img, ocr.metadata["preprocess"]).tensor  # (1, 3, 48, W)
    want = ort_session(model_file("pp-ocrv4-rec")).run(None, {"x": x})[0][0]
    got = ocr.probabilities(img)
    np.testing.assert_allclose(got, want, atol=1e-4)
    line = ocr.ctc(img)
    assert line.text == ort_greedy_ctc(want, ocr.charset)
    assert line.text.strip() == text
    assert len(line.char_scores) == len(line.text) and 0.5 < line.score <= 1.0


def test_ppocr_charset_comes_from_onnx_metadata(ocr):
    chars = onnx.load(model_file("pp-ocrv4-rec")).metadata_props[0].value.splitlines()
    assert ocr.charset == ["<blank>"] + chars + [" "] and len(ocr.charset) == 6625


def small_model(path):
    """Conv+BN+Relu -> MaxPool, depthwise Conv -> Concat -> GlobalAveragePool -> Reshape -> MatMul -> Softmax."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w1", rng.standard_normal((8, 3, 3, 3))), ("b1", rng.standard_normal(8)),
        ("g", rng.uniform(0.5, 2, 8)), ("beta", rng.standard_normal(8)), ("mu", rng.standard_normal(8)),
        ("var", rng.uniform(0.5, 2, 8)), ("wd", rng.standard_normal((8, 1, 3, 3))), ("fc", rng.standard_normal((16, 5))),
        ("ch_scale", rng.standard_normal((1, 8, 1, 1)))]]
    init.append(numpy_helper.from_array(np.array([0, -1], np.int64), "shape"))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 0, 1, 2], strides=[2, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mu", "var"], ["bn"], epsilon=1e-3),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Mul", ["r", "ch_scale"], ["rs"]),
        helper.make_node("MaxPool", ["rs"], ["mp"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
        helper.make_node("Conv", ["rs", "wd"], ["dw"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["mp", "dw"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["gap"]),
        helper.make_node("Reshape", ["gap", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 9, 10])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, None)], init)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_small_nchw_graph_matches_onnxruntime(tmp_path):
    path = small_model(tmp_path / "small.onnx")
    x = np.random.default_rng(1).standard_normal((1, 3, 9, 10)).astype(np.float32)
    want = ort_session(path).run(None, {"x": x})[0]
    graph, weights, meta = read_onnx(path)
    assert not any(n.op == "batch_norm" for n in graph.nodes)  # folded into the conv
    for reference in (False, True):
        got = Model(graph, weights, meta, str(path), reference=reference).run({"x": x})[graph.outputs[0]]
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("op, attrs", [("Relu", {}), ("Sigmoid", {}), ("HardSwish", {}), ("HardSigmoid", {}),
                                       ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("LeakyRelu", {}),
                                       ("LeakyRelu", {"alpha": 0.25})])
def test_elementwise_functions_match_onnxruntime(tmp_path, op, attrs):
    """Each elementwise function with its attributes (or their defaults), against onnxruntime."""
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5, 7])])
    path = tmp_path / f"{op}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    x = np.random.default_rng(2).uniform(-6, 6, (2, 3, 5, 7)).astype(np.float32)
    want = ort_session(path).run(None, {"x": x})[0]
    graph, weights, meta = read_onnx(path)
    for reference in (False, True):
        got = Model(graph, weights, meta, str(path), reference=reference).run({"x": x})[graph.outputs[0]]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_truncated_onnx_is_a_clear_error(tmp_path):
    data = open(model_file("pp-ocrv4-rec"), "rb").read()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ONNXError, match="cut.onnx.*truncated"):
        volvox.load(path)


def test_unknown_op_names_op_and_node(tmp_path):
    from onnx import TensorProto, helper

    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="noise1")   # n-gram counts: volvox does not run them
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "noise.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(volvox.UnsupportedError,
                       match=r"noise.onnx: node 'noise1' \(TfIdfVectorizer\): op TfIdfVectorizer is not supported"):
        volvox.load(path)


def shuffle_model(path, groups: int, extra_reader: bool):
    """Conv -> ShuffleNet's channel shuffle (Reshape (N, G, C/G, H, W), Transpose [0, 2, 1, 3, 4], Reshape
    (N, C, H, W)) -> Slice into halves (one through a Conv) -> Concat; extra_reader: the transposed groups are
    also read as they are (a ReduceSum over them), which needs them in logical layout."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    c = 4 * groups
    init = [numpy_helper.from_array(rng.standard_normal((c, 3, 3, 3)).astype(np.float32), "w1"),
            numpy_helper.from_array(rng.standard_normal((c // 2, c // 2, 1, 1)).astype(np.float32), "w2"),
            numpy_helper.from_array(np.array([1, groups, c // groups, 5, 7], np.int64), "split"),
            numpy_helper.from_array(np.array([1, c, -1, 7], np.int64), "merge")]
    init += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             [("s0", [0]), ("half", [c // 2]), ("end", [c]), ("axis", [1]), ("red", [2])]]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["c1", "split"], ["grouped"]),
        helper.make_node("Transpose", ["grouped"], ["swapped"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["swapped", "merge"], ["shuffled"]),
        helper.make_node("Slice", ["shuffled", "s0", "half", "axis"], ["left"]),
        helper.make_node("Slice", ["shuffled", "half", "end", "axis"], ["right"]),
        helper.make_node("Conv", ["right", "w2"], ["c2"]),
        helper.make_node("Concat", ["left", "c2"], ["y"], axis=1),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        nodes.append(helper.make_node("ReduceSum", ["swapped", "red"], ["sums"], keepdims=0))
        outputs.append(helper.make_tensor_value_info("sums", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 7])],
                              outputs, init)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.mark.parametrize("groups, extra_reader", [(2, False), (3, False), (2, True)])
def test_channel_shuffle_stays_nhwc_and_matches_onnxruntime(tmp_path, groups, extra_reader):
    """The shuffle runs as one transpose of channel groups in NHWC (no transpose to NCHW and back), the
    Slices on NHWC channels; a reader of the groups themselves gets them in logical layout."""
    path = shuffle_model(tmp_path / "shuffle.onnx", groups, extra_reader)
    x = np.random.default_rng(4).standard_normal((1, 3, 5, 7)).astype(np.float32)
    want = ort_session(path).run(None, {"x": x})
    graph, weights, meta = read_onnx(path)
    perms = [n.params["perm"] for n in graph.nodes if n.op == "transpose"]
    assert [0, 1, 2, 4, 3] in perms and [0, 2, 3, 1] in perms   # the shuffle; the input to NHWC
    assert len(perms) == 3 + extra_reader                        # + the output back to NCHW (+ the groups)
    for reference in (False, True):
        got = Model(graph, weights, meta, str(path), reference=reference).run({"x": x})
        for name, value in zip(graph.outputs, want):
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1], pads=[1, 0, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1], count_include_pad=1)),
])
def test_pools_match_onnxruntime(tmp_path, op, attrs):
    """MaxPool / AveragePool on odd sizes and channel counts past a vector (19), with padding, ceil_mode and
    dilations, against onnxruntime."""
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 19, 11, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / f"{op}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = np.random.default_rng(5).standard_normal((2, 19, 11, 9)).astype(np.float32)
    want = ort_session(path).run(None, {"x": x})[0]
    graph, weights, meta = read_onnx(path)
    native = {n.op for n in graph.nodes} & {"max_pool2d", "avg_pool2d"}
    assert bool(native) == ("dilations" not in attrs)  # the NHWC kernels (dilated pools: numpy's pool_nd)
    got = Model(graph, weights, meta, str(path)).run({"x": x})[graph.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
