"""The generic ops (ops/tensor.py, ops/reduce.py, ops/math.py, ops/conv_general.py) against onnx's
reference evaluator (onnx.reference, an independent implementation of each operator's specification;
onnxruntime where that one is wrong): one single-node ONNX model per case, the same inputs, every
output equal in shape, dtype and value; each op's shape rule agrees with the shape and dtype its
reference returns."""

import numpy as np
import pytest

from volvox.errors import ShapeError
from volvox.ir.graph import TensorSpec
from volvox.ops import OPS

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(7)
F = RNG.standard_normal((2, 3, 4)).astype(np.float32)
H = RNG.standard_normal((2, 3)).astype(np.float16)
I = RNG.integers(-9, 9, (2, 3, 4)).astype(np.int64)
I32 = RNG.integers(-9, 9, (3, 4)).astype(np.int32)
U8 = RNG.integers(0, 255, (3, 4)).astype(np.uint8)
B = RNG.random((2, 3, 4)) > 0.5
POS = (np.abs(F) + 0.1).astype(np.float32)
UNIT = np.tanh(F).astype(np.float32) * 0.9
IMG = RNG.standard_normal((1, 8, 2, 3)).astype(np.float32)
MAP = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32)
UPW = RNG.standard_normal((4, 3, 3, 2)).astype(np.float32)       # (Cin, Cout / groups, kh, kw)
GRID = RNG.uniform(-1.3, 1.3, (2, 3, 4, 2)).astype(np.float32)   # (N, OH, OW, (x, y)), some points outside
QX = RNG.integers(0, 255, (1, 4, 6, 5)).astype(np.uint8)
QW = RNG.integers(-128, 127, (6, 2, 3, 3)).astype(np.int8)


def c(op, params, inputs, onnx_op, attrs=None, onnx_inputs=None, opset=21):
    """A case: volvox op ``op`` with ``params`` on ``inputs`` (port -> array) equals ONNX ``onnx_op``
    with ``attrs`` on ``onnx_inputs`` (the same arrays plus any constant operands) at ``opset``."""
    return pytest.param(op, params, inputs, onnx_op, attrs or {}, onnx_inputs, opset,
                        id=f"{op}-{onnx_op}-{len(params)}-{'-'.join(str(a.dtype) for a in inputs.values())}")


def unary(op, onnx_op, x=F, attrs=None, **params):
    return c(op, {**params, **(attrs or {})}, {"x": x}, onnx_op, attrs)


def binary(op, onnx_op, a, b, attrs=None):
    return c(op, dict(attrs or {}), {"a": a, "b": b}, onnx_op, attrs)


CASES = [
    # math: unary
    *[unary(op, onnx_op) for op, onnx_op in [
        ("abs", "Abs"), ("neg", "Neg"), ("sign", "Sign"), ("exp", "Exp"), ("sin", "Sin"),
        ("cos", "Cos"), ("tan", "Tan"), ("atan", "Atan"), ("sinh", "Sinh"), ("cosh", "Cosh"), ("asinh", "Asinh"),
        ("floor", "Floor"), ("ceil", "Ceil"), ("round", "Round"), ("reciprocal", "Reciprocal"), ("erf", "Erf"),
        ("softplus", "Softplus"), ("softsign", "Softsign"), ("mish", "Mish"), ("elu", "Elu"), ("selu", "Selu"),
        ("celu", "Celu"), ("is_nan", "IsNaN"), ("is_inf", "IsInf"), ("gelu_onnx", "Gelu")]],
    *[unary(op, onnx_op, POS) for op, onnx_op in [("log", "Log"), ("acosh", "Acosh")]],
    *[unary(op, onnx_op, UNIT) for op, onnx_op in [("asin", "Asin"), ("acos", "Acos"), ("atanh", "Atanh")]],
    unary("abs", "Abs", I), unary("neg", "Neg", I32), unary("sign", "Sign", I), unary("exp", "Exp", H),
    unary("round", "Round", np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4], np.float32)),
    unary("elu", "Elu", attrs={"alpha": 0.5}), unary("thresholded_relu", "ThresholdedRelu", attrs={"alpha": 0.3}),
    unary("shrink", "Shrink", attrs={"lambd": 0.7, "bias": 0.2}), unary("shrink", "Shrink", I, attrs={"lambd": 2.0, "bias": 1.0}),
    unary("gelu_onnx", "Gelu", attrs={"approximate": "tanh"}), unary("logical_not", "Not", B),
    unary("bitwise_not", "BitwiseNot", I32), unary("bitwise_not", "BitwiseNot", U8),
    unary("is_inf", "IsInf", np.array([np.inf, -np.inf, 1.0, np.nan], np.float32), attrs={"detect_negative": 0}),
    # conv_general
    c("conv_transpose", {"strides": [2, 3], "pads": [1, 0, 0, 2], "output_padding": [1, 0]},
      {"x": MAP, "weight": UPW}, "ConvTranspose", {"strides": [2, 3], "pads": [1, 0, 0, 2], "output_padding": [1, 0]}),
    c("conv_integer", {"strides": [2, 1], "pads": [1, 1, 0, 1], "groups": 2},
      {"x": QX, "weight": QW, "x_zero_point": np.array(128, np.uint8), "w_zero_point": np.array(3, np.int8)},
      "ConvInteger", {"strides": [2, 1], "pads": [1, 1, 0, 1], "group": 2}),
    c("einsum", {"equation": "bij,bjk->bik"}, {"x0": F[:, :2, :3], "x1": F[:, :3, :]}, "Einsum", {"equation": "bij,bjk->bik"}),
    c("einsum", {"equation": "ii->i"}, {"x0": I32[:, :3]}, "Einsum", {"equation": "ii->i"}),
    c("einsum", {"equation": "abc->cb"}, {"x0": F}, "Einsum", {"equation": "abc->cb"}),
    # math: binary
    binary("maximum", "Max", F, F[0]), binary("minimum", "Min", I, I[:, :1]), binary("maximum", "Max", H, H[:1]),
    binary("mod", "Mod", I, np.array([4, -3, 5, 7], np.int64)), binary("mod", "Mod", F, POS, {"fmod": 1}),
    binary("mod", "Mod", I32, np.array([3, -3, 5, 2], np.int32), {"fmod": 1}),
    binary("equal", "Equal", I, I[:1]), binary("equal", "Equal", B, B[:, :1]), binary("less", "Less", F, F[:, :1]),
    binary("less_equal", "LessOrEqual", I, I[:1]), binary("greater", "Greater", F, F[1]),
    binary("greater_equal", "GreaterOrEqual", I32, I32[:1]),
    binary("logical_and", "And", B, B[0]), binary("logical_or", "Or", B, B[:, 1:2]), binary("logical_xor", "Xor", B, B[1]),
    binary("bitwise_and", "BitwiseAnd", I32, I32[::-1]), binary("bitwise_or", "BitwiseOr", U8, U8[:1]),
    binary("bitwise_xor", "BitwiseXor", I, I[0]),
    binary("bit_shift", "BitShift", U8, np.array([1, 2, 3, 0], np.uint8), {"direction": "LEFT"}),
    binary("bit_shift", "BitShift", U8, np.array([1, 2, 3, 0], np.uint8), {"direction": "RIGHT"}),
    binary("prelu", "PRelu", F, np.array([0.1, -0.2, 0.3, 2.0], np.float32)),
    c("where", {}, {"condition": B[0], "a": F, "b": F[:, :1]}, "Where"),
    c("where", {}, {"condition": B, "a": I, "b": I[0, 0]}, "Where"),
    # reduce
    *[c(op, {"axes": axes, "keepdims": keep}, {"x": x}, onnx_op, {"keepdims": keep},
        [x, np.array(axes, np.int64)])
      for op, onnx_op in [("reduce_sum", "ReduceSum"), ("reduce_max", "ReduceMax"), ("reduce_min", "ReduceMin"),
                          ("reduce_prod", "ReduceProd"), ("reduce_l1", "ReduceL1"), ("reduce_l2", "ReduceL2"),
                          ("reduce_sum_square", "ReduceSumSquare"), ("reduce_log_sum_exp", "ReduceLogSumExp")]
      for x, axes, keep in [(F, [1], 1), (F, [0, -1], 0)]],
    c("reduce_log_sum", {"axes": [2], "keepdims": 1}, {"x": POS}, "ReduceLogSum", {"keepdims": 1},
      [POS, np.array([2], np.int64)]),
    c("reduce_sum", {"axes": [], "keepdims": 0}, {"x": I}, "ReduceSum", {"keepdims": 0}),
    c("reduce_max", {"axes": [1], "keepdims": 1}, {"x": I}, "ReduceMax", {"axes": [1], "keepdims": 1}, opset=13),
    *[c(op, {"axis": axis, "keepdims": keep, "select_last_index": last}, {"x": x}, onnx_op,
        {"axis": axis, "keepdims": keep, "select_last_index": last})
      for op, onnx_op in [("argmax", "ArgMax"), ("argmin", "ArgMin")]
      for x, axis, keep, last in [(F, 1, 1, 0), (F, -1, 0, 0), (np.round(F), 2, 1, 1), (I, 0, 0, 1)]],
    # tensor
    c("gather", {"axis": 1}, {"x": F, "indices": np.array([[2, 0], [-1, 1]], np.int64)}, "Gather", {"axis": 1}),
    c("gather", {"axis": 0}, {"x": I, "indices": np.array(1, np.int64)}, "Gather", {"axis": 0}),
    c("gather_elements", {"axis": 2}, {"x": F, "indices": RNG.integers(-4, 4, (2, 3, 2)).astype(np.int64)},
      "GatherElements", {"axis": 2}),
    c("gather_nd", {"batch_dims": 0}, {"x": F, "indices": np.array([[1, 2], [0, -1]], np.int64)}, "GatherND"),
    c("gather_nd", {"batch_dims": 1}, {"x": F, "indices": np.array([[[1]], [[2]]], np.int64)}, "GatherND",
      {"batch_dims": 1}),
    c("scatter_elements", {"axis": 1, "reduction": "add"},
      {"x": F, "indices": np.array([[[0, 1, 2, 0]], [[2, 2, -1, 1]]], np.int64), "updates": F[:, :1]},
      "ScatterElements", {"axis": 1, "reduction": "add"}),
    c("scatter_elements", {"axis": 0}, {"x": I32, "indices": np.array([[2, 0, 1, 1]], np.int64), "updates": I32[:1]},
      "ScatterElements", {"axis": 0}),
    c("scatter_nd", {}, {"x": F, "indices": np.array([[1, 0], [0, 2]], np.int64), "updates": F[0, :2]}, "ScatterND"),
    c("scatter_nd", {"reduction": "mul"}, {"x": F, "indices": np.array([[1], [1]], np.int64), "updates": F[:2]},
      "ScatterND", {"reduction": "mul"}),
    *[c("cast", {"to": to}, {"x": x}, "Cast", {"to": code}) for x, to, code in [
        (F * 5, "int64", 7), (F, "float16", 10), (I, "float32", 1), (I, "bool", 9), (B, "float32", 1), (U8, "int32", 6)]],
    c("expand", {"shape": [2, 1, 3, 4]}, {"x": F[:, :1]}, "Expand", None, [F[:, :1], np.array([2, 1, 3, 4], np.int64)]),
    c("expand", {"shape": [3, 1]}, {"x": I32[:1]}, "Expand", None, [I32[:1], np.array([3, 1], np.int64)]),
    c("tile", {"repeats": [1, 2, 3]}, {"x": F}, "Tile", None, [F, np.array([1, 2, 3], np.int64)]),
    *[c("topk", {"k": k, "axis": axis, "largest": largest}, {"x": x}, "TopK", {"axis": axis, "largest": largest},
        [x, np.array([k], np.int64)]) for x, k, axis, largest in [
        (F, 2, -1, 1), (F, 3, 1, 0), (np.round(F), 3, 2, 1), (I, 2, 0, 0)]],
    *[c("cumsum", {"axis": axis, "exclusive": ex, "reverse": rev}, {"x": x}, "CumSum", {"exclusive": ex, "reverse": rev},
        [x, np.array(axis, np.int64)]) for x, axis, ex, rev in [(F, 1, 0, 0), (F, -1, 1, 0), (I, 0, 1, 1), (F, 2, 0, 1)]],
    *[c("one_hot", {"depth": 5, "axis": axis}, {"indices": idx, "values": vals}, "OneHot", {"axis": axis},
        [idx, np.array(5, np.int64), vals]) for idx, vals, axis in [
        (np.array([[0, 4], [-1, 2]], np.int64), np.array([0, 1], np.float32), -1),
        (np.array([3, 1, -5], np.int64), np.array([2, 7], np.int64), 0)]],
    *[c("trilu", {"upper": up, "k": k}, {"x": F}, "Trilu", {"upper": up}, [F, np.array(k, np.int64)])
      for up, k in [(1, 0), (0, 1), (1, -1)]],
    c("resize_nd", {"sizes": [2, 4, 7, 9], "scales": [1.0, 1.0, 7 / 5, 9 / 6], "mode": "cubic", "coordinate": "half_pixel",
                    "exclude_outside": 1}, {"x": MAP}, "Resize", {"mode": "cubic", "exclude_outside": 1},
      [MAP, np.zeros(0, np.float32), np.zeros(0, np.float32), np.array([2, 4, 7, 9], np.int64)]),
    c("resize_nd", {"sizes": [2, 1, 3], "scales": [1.0, 0.5, 0.75], "mode": "nearest", "coordinate": "asymmetric",
                    "nearest_mode": "ceil"}, {"x": F}, "Resize", {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                                                 "nearest_mode": "ceil"},
      [F, np.zeros(0, np.float32), np.array([1.0, 0.5, 0.75], np.float32)]),
    c("resize_nd", {"sizes": [2, 4, 3, 3], "scales": [1.0, 1.0, 0.6, 0.5], "mode": "linear", "coordinate": "tf_crop_and_resize",
                    "roi": [0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], "extrapolation_value": 7.0}, {"x": MAP}, "Resize",
      {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.0},
      [MAP, np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], np.float32), np.zeros(0, np.float32), np.array([2, 4, 3, 3], np.int64)]),
    c("reverse_sequence", {"batch_axis": 1, "time_axis": 0}, {"x": F, "lengths": np.array([2, 1, 0], np.int64)},
      "ReverseSequence", {"batch_axis": 1, "time_axis": 0}),
    c("reverse_sequence", {"batch_axis": 0, "time_axis": 2}, {"x": I, "lengths": np.array([4, 3], np.int64)},
      "ReverseSequence", {"batch_axis": 0, "time_axis": 2}),
    c("depth_space", {"blocksize": 2, "direction": "to_space", "mode": "DCR"}, {"x": IMG}, "DepthToSpace",
      {"blocksize": 2, "mode": "DCR"}),
    c("depth_space", {"blocksize": 2, "direction": "to_space", "mode": "CRD"}, {"x": IMG}, "DepthToSpace",
      {"blocksize": 2, "mode": "CRD"}),
    c("depth_space", {"blocksize": 2, "direction": "to_depth"}, {"x": IMG.reshape(1, 2, 4, 6)}, "SpaceToDepth",
      {"blocksize": 2}),
    *[c("mirror_pad", {"pads": pads, "mode": mode}, {"x": F}, "Pad", {"mode": mode},
        [F, np.array([a for a, _ in pads] + [b for _, b in pads], np.int64)]) for pads, mode in [
        ([[0, 0], [1, 2], [2, 1]], "reflect"), ([[1, 0], [0, 2], [1, 1]], "edge"), ([[0, 1], [2, 1], [0, 3]], "wrap")]],
]


# where onnx.reference is wrong (LRN sums the wrong channels unless N == C; grouped ConvTranspose
# fails) or slow (GridSample), onnxruntime is the reference
RUNTIME_CASES = [
    c("lrn", {"size": 3, "alpha": 2e-3, "beta": 0.6, "bias": 1.5}, {"x": MAP}, "LRN",
      {"size": 3, "alpha": 2e-3, "beta": 0.6, "bias": 1.5}),
    c("lrn", {"size": 5}, {"x": MAP}, "LRN", {"size": 5}),
    c("conv_transpose", {"groups": 2, "dilations": [2, 1]}, {"x": MAP, "weight": UPW, "bias": np.arange(6, dtype=np.float32)},
      "ConvTranspose", {"group": 2, "dilations": [2, 1]}),
    *[c("grid_sample", {"mode": mode, "padding_mode": padding, "align_corners": align}, {"x": MAP, "grid": GRID},
        "GridSample", {"mode": mode, "padding_mode": padding, "align_corners": align})
      for mode, padding, align in [("linear", "zeros", 0), ("nearest", "border", 1), ("cubic", "reflection", 0),
                                   ("linear", "reflection", 1), ("cubic", "zeros", 1), ("cubic", "border", 0),
                                   ("cubic", "reflection", 1)]],
]


def one_node_model(onnx_op, attrs, arrays, opset, n_outputs, out_type=0):
    """A one-node ONNX model of ``onnx_op`` with inputs in0.. of ``arrays``' types (outputs of ``out_type``)."""
    names = [f"in{i}" for i in range(len(arrays))]
    node = helper.make_node(onnx_op, names, [f"out{i}" for i in range(n_outputs)], **attrs)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in zip(names, arrays)]
    outputs = [helper.make_tensor_value_info(f"out{i}", out_type, None) for i in range(n_outputs)]
    return helper.make_model(helper.make_graph([node], "case", inputs, outputs), opset_imports=[helper.make_opsetid("", opset)])


def onnx_reference(onnx_op, attrs, arrays, opset, n_outputs):
    """Outputs of a one-node ONNX model of ``onnx_op`` on ``arrays``, by onnx.reference."""
    model = one_node_model(onnx_op, attrs, arrays, opset, n_outputs)
    return ReferenceEvaluator(model).run(None, {f"in{i}": a for i, a in enumerate(arrays)})


def onnxruntime_reference(onnx_op, attrs, arrays, opset, n_outputs):
    """The same, by onnxruntime (every output of the first input's type)."""
    ort = pytest.importorskip("onnxruntime")
    model = one_node_model(onnx_op, attrs, arrays, opset, n_outputs, helper.np_dtype_to_tensor_dtype(arrays[0].dtype))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {f"in{i}": a for i, a in enumerate(arrays)})


@pytest.mark.parametrize("op, params, inputs, onnx_op, attrs, onnx_inputs, opset", CASES)
def test_op_equals_onnx_reference(op, params, inputs, onnx_op, attrs, onnx_inputs, opset):
    check_op(op, params, inputs, onnx_reference(onnx_op, attrs, onnx_inputs or list(inputs.values()), opset,
                                                len(OPS[op].outputs)))


@pytest.mark.parametrize("op, params, inputs, onnx_op, attrs, onnx_inputs, opset", RUNTIME_CASES)
def test_op_equals_onnxruntime(op, params, inputs, onnx_op, attrs, onnx_inputs, opset):
    check_op(op, params, inputs, onnxruntime_reference(onnx_op, attrs, onnx_inputs or list(inputs.values()), opset,
                                                       len(OPS[op].outputs)))


def check_op(op, params, inputs, want):
    """The op's reference on ``inputs`` equals ``want`` and agrees with its shape rule."""
    definition = OPS[op]
    specs = {port: TensorSpec(port, a.shape, a.dtype.name) for port, a in inputs.items()}
    inferred = definition.infer(specs, params)
    got = definition.ref(None, params, *inputs.values())
    got = got if isinstance(got, tuple) else (got,)
    for port, g, w in zip(definition.output_names, got, want):
        w = np.asarray(w)
        assert inferred[port] == (tuple(g.shape), g.dtype.name), f"{op}: shape rule {inferred[port]}, ref {g.dtype}{g.shape}"
        assert g.shape == w.shape and g.dtype == w.dtype, f"{op}.{port}: {g.dtype}{g.shape}, onnx {w.dtype}{w.shape}"
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=2e-3 if g.dtype == np.float16 else 1e-5, atol=1e-6, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op, params, specs", [
    ("gather", {"axis": 3}, {"x": ((2, 3), "float32"), "indices": ((2,), "int64")}),
    ("gather", {"axis": 0}, {"x": ((2, 3), "float32"), "indices": ((2,), "float32")}),
    ("maximum", {}, {"a": ((2, 3), "float32"), "b": ((2, 3), "int64")}),
    ("logical_and", {}, {"a": ((2,), "float32"), "b": ((2,), "float32")}),
    ("exp", {}, {"x": ((2,), "int64")}),
    ("reduce_sum", {"axes": [2]}, {"x": ((2, 3), "float32")}),
    ("topk", {"k": 4, "axis": 1}, {"x": ((2, 3), "float32")}),
    ("cast", {"to": "complex64"}, {"x": ((2,), "float32")}),
    ("depth_space", {"blocksize": 2, "direction": "to_space"}, {"x": ((1, 3, 2, 2), "float32")}),
    ("mirror_pad", {"pads": [[3, 0]], "mode": "reflect"}, {"x": ((3,), "float32")}),
])
def test_shape_rules_refuse_bad_operands(op, params, specs):
    with pytest.raises(ShapeError):
        OPS[op].infer({p: TensorSpec(p, s, d) for p, (s, d) in specs.items()}, params)


def test_gather_refuses_out_of_range_indices():
    with pytest.raises(ShapeError, match="out of range"):
        OPS["gather"].ref(None, {"axis": 0}, F, np.array([2], np.int64))
