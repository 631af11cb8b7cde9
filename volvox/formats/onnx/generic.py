"""Translations of the ONNX standard ops that run in ONNX's own (logical) layout, in every dtype:
shape manipulation, gathers / scatters, math, comparisons, logic, reductions, quantize /
dequantize. Where an operand moved from an attribute to an input between opsets, both are read
here, per opset. Operands that fix an output's shape (a Reshape's shape, Slice bounds, TopK's k,
Tile's repeats, ...) are read as constants (ConstantRequired otherwise): volvox plans shapes at import,
per value of the graph inputs they come from when they are not constants (value_plans.py).
"""

from __future__ import annotations

import math

import numpy as np

from volvox.errors import UnsupportedError
from volvox.ops.shape import reshape_target
from volvox.ops.tensor import RESIZE_COORDINATES, RESIZE_NEAREST_MODES
from volvox.formats.onnx.importer import CLAMP, Importer, arg, is_symbolic, output_used
from volvox.formats.onnx.reader import OnnxNode, element_dtype
from volvox.formats.onnx.sampling import training_dropout

UNARY = {"Abs": "abs", "Neg": "neg", "Sign": "sign", "Exp": "exp", "Log": "log", "Tanh": "tanh", "Sin": "sin",
         "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh",
         "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "Floor": "floor", "Ceil": "ceil", "Round": "round",
         "Reciprocal": "reciprocal", "Erf": "erf", "Softplus": "softplus", "Softsign": "softsign", "Mish": "mish",
         "Elu": "elu", "Selu": "selu", "Celu": "celu", "Gelu": "gelu_onnx", "ThresholdedRelu": "thresholded_relu",
         "Shrink": "shrink", "Not": "logical_not", "BitwiseNot": "bitwise_not", "IsNaN": "is_nan", "IsInf": "is_inf",
         "Sqrt": "sqrt"}
BINARY = {"Mod": "mod", "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
          "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
          "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor", "BitShift": "bit_shift",
          "PRelu": "prelu", "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}
VARIADIC = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}
REDUCE = {"ReduceSum": "reduce_sum", "ReduceMax": "reduce_max", "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod",
          "ReduceL1": "reduce_l1", "ReduceL2": "reduce_l2", "ReduceSumSquare": "reduce_sum_square",
          "ReduceLogSum": "reduce_log_sum", "ReduceLogSumExp": "reduce_log_sum_exp", "ReduceMean": "reduce_mean"}
# since which opset a reduction reads its axes from an input rather than an attribute
AXES_INPUT_SINCE = {**{op: 18 for op in REDUCE}, "ReduceSum": 13}


def dtype_of(imp: Importer, name: str) -> np.dtype:
    """The element type of a constant or run-time tensor."""
    return np.asarray(imp.consts[name]).dtype if name in imp.consts else np.dtype(imp.specs[name].dtype)


def rank_of(imp: Importer, name: str) -> int:
    """The rank of a constant or run-time tensor."""
    return np.ndim(imp.consts[name]) if name in imp.consts else len(imp.shapes[name])


def shape_of(imp: Importer, name: str) -> tuple:
    """The (logical) shape of a constant or run-time tensor."""
    return np.shape(imp.consts[name]) if name in imp.consts else imp.shapes[name]


def int_list(imp: Importer, n: OnnxNode, i: int, where: str, what: str) -> list[int] | None:
    """Input ``i`` (a constant) as a list of ints, None when absent."""
    name = arg(n, i)
    if name is None:
        return None
    value = imp.const(name, where, what)
    if is_symbolic(value):
        raise UnsupportedError(f"{where}: {what} {value.tolist()} holds symbolic dims")
    return [int(v) for v in np.asarray(value).reshape(-1)]


def attr_or_input(imp: Importer, n: OnnxNode, attr: str, i: int, since: int, where: str) -> list[int] | None:
    """An operand read from attribute ``attr`` before opset ``since`` and from input ``i`` from it on."""
    if imp.opset < since:
        value = n.attrs.get(attr)
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]
    return int_list(imp, n, i, where, attr)


# ------------------------------------------------------------------ constants and shapes
def constant(imp: Importer, n: OnnxNode, where: str) -> None:
    """Constant: its value (tensor, float(s) or int(s)) becomes a folded constant."""
    attrs = n.attrs
    for key, make in (("value", np.asarray), ("value_float", lambda v: np.array(v, np.float32)),
                      ("value_floats", lambda v: np.array(v, np.float32)), ("value_int", lambda v: np.array(v, np.int64)),
                      ("value_ints", lambda v: np.array(v, np.int64))):
        if key in attrs:
            imp.consts[n.outputs[0]] = make(attrs[key])
            return
    raise UnsupportedError(f"{where}: Constant {', '.join(attrs)} is not supported (opset {imp.opset})")


def shape(imp: Importer, n: OnnxNode, where: str) -> None:
    """Shape (``start`` / ``end`` from opset 15): a constant vector, symbols kept for symbolic dims."""
    dims = list(shape_of(imp, n.inputs[0]))
    start, end = n.attrs.get("start", 0), n.attrs.get("end", len(dims))
    dims = dims[slice(start, end)]
    imp.consts[n.outputs[0]] = np.array(dims, np.int64) if all(isinstance(d, int) for d in dims) else np.array(dims, object)


def size(imp: Importer, n: OnnxNode, where: str) -> None:
    """Size of a static shape, as a constant."""
    dims = shape_of(imp, n.inputs[0])
    if not all(isinstance(d, int) for d in dims):
        raise UnsupportedError(f"{where}: Size of a tensor of symbolic shape {dims} is not supported")
    imp.consts[n.outputs[0]] = np.array(math.prod(dims), np.int64)


def constant_of_shape(imp: Importer, n: OnnxNode, where: str) -> None:
    """ConstantOfShape of a constant shape: a folded constant filled with ``value``."""
    dims = int_list(imp, n, 0, where, "the shape")
    value = np.asarray(n.attrs.get("value", np.zeros(1, np.float32))).reshape(-1)
    imp.consts[n.outputs[0]] = np.full(dims, value[0], value.dtype)


def range_(imp: Importer, n: OnnxNode, where: str) -> None:
    """Range of constant bounds, folded at import (a run-time Range has a data-dependent shape)."""
    start, limit, delta = (np.asarray(imp.const(i, where, "Range bounds")).reshape(()) for i in n.inputs[:3])
    count = max(int(np.ceil((limit - start) / delta)), 0)
    imp.consts[n.outputs[0]] = (start + np.arange(count) * delta).astype(start.dtype)


def eye_like(imp: Importer, n: OnnxNode, where: str) -> None:
    """EyeLike of a static 2-D shape, folded at import."""
    dims = shape_of(imp, n.inputs[0])
    if len(dims) != 2 or not all(isinstance(d, int) for d in dims):
        raise UnsupportedError(f"{where}: EyeLike of shape {dims} (volvox: static 2-D)")
    dtype = element_dtype(n.attrs["dtype"], f"{where}: EyeLike to") if "dtype" in n.attrs else dtype_of(imp, n.inputs[0])
    imp.consts[n.outputs[0]] = np.eye(dims[0], dims[1], k=n.attrs.get("k", 0), dtype=dtype)


def identity(imp: Importer, n: OnnxNode, where: str) -> None:
    """Identity: the input under a second name."""
    imp.alias(n.inputs[0], n.outputs[0])


def dropout(imp: Importer, n: OnnxNode, where: str) -> None:
    """Inference Dropout (or a training one of ratio 0): the input unchanged, its mask all true; a
    training one of another ratio draws its mask (sampling.training_dropout)."""
    if arg(n, 2) and bool(np.asarray(imp.const(n.inputs[2], where, "training_mode"))):
        ratio = float(np.asarray(imp.const(n.inputs[1], where, "ratio")).reshape(-1)[0]) if arg(n, 1) else 0.5
        if ratio != 0:
            training_dropout(imp, n, where, ratio)
            return
    imp.alias(n.inputs[0], n.outputs[0])
    if output_used(imp, n, 1):
        dims = shape_of(imp, n.inputs[0])
        if not all(isinstance(d, int) for d in dims):
            raise UnsupportedError(f"{where}: Dropout's mask of symbolic shape {dims}")
        imp.consts[n.outputs[1]] = np.ones(dims, np.bool_)


def cast(imp: Importer, n: OnnxNode, where: str, to: np.dtype | None = None) -> None:
    """Cast to ``to`` (default: the ``to`` attribute), narrow types included (float8 ``saturate``,
    float8e8m0 ``round_mode``); a shape vector with symbols passes unchanged."""
    if to is None:
        to = element_dtype(n.attrs["to"], f"{where}: Cast to")
    src = n.inputs[0]
    if src in imp.consts and is_symbolic(imp.consts[src]):
        imp.consts[n.outputs[0]] = imp.consts[src]   # a shape vector with symbols stays one
        return
    if dtype_of(imp, src) == to:
        imp.alias(src, n.outputs[0])
        return
    imp.apply("cast", n.name, {"x": src}, n.outputs[0], where, to=to.name, saturate=int(n.attrs.get("saturate", 1)),
              round_mode=n.attrs.get("round_mode", "up"))


def bitcast(imp: Importer, n: OnnxNode, where: str) -> None:
    """BitCast: the bits reinterpreted as the ``to`` type of the same width."""
    imp.apply("bitcast", n.name, {"x": n.inputs[0]}, n.outputs[0], where,
              to=element_dtype(n.attrs["to"], f"{where}: BitCast to").name)


def cast_like(imp: Importer, n: OnnxNode, where: str) -> None:
    """CastLike: Cast to the second input's dtype."""
    cast(imp, n, where, dtype_of(imp, n.inputs[1]))


def reshape_like(imp: Importer, n: OnnxNode, where: str, dims: list) -> None:
    """Reshape ``n``'s input to ``dims`` (ints or symbols): symbols become 0 (copy) where they sit at the
    same position of the input's shape, else -1 (inferred)."""
    src = n.inputs[0]
    in_shape = shape_of(imp, src)
    target = []
    for i, d in enumerate(dims):
        if isinstance(d, (int, np.integer)):
            target.append(int(d))
        elif i < len(in_shape) and in_shape[i] == d:
            target.append(0)
        else:
            target.append(-1)
    if target.count(-1) > 1:
        raise UnsupportedError(f"{where}: reshape to {list(dims)} has more than one unknown dim")
    if src in imp.consts:
        imp.consts[n.outputs[0]] = np.asarray(imp.consts[src]).reshape(reshape_target(np.shape(imp.consts[src]), target))
        return
    imp.emit("reshape", n.name, {"x": imp.logical(src, where)}, n.outputs[0], shape=target)


def reshape(imp: Importer, n: OnnxNode, where: str) -> None:
    """Reshape to a constant shape (0 copies an input dim, -1 is inferred). With allowzero=1 a 0 is a
    size: the result holds no values, so it is the empty constant of that shape."""
    dims = list(imp.const(n.inputs[1], where, "the shape").reshape(-1))
    if n.attrs.get("allowzero", 0) and 0 in dims:
        in_shape = shape_of(imp, n.inputs[0])
        if -1 in dims or not all(isinstance(d, (int, np.integer)) for d in dims) or 0 not in in_shape:
            raise UnsupportedError(f"{where}: Reshape allowzero=1 of {in_shape} to {dims}")
        imp.consts[n.outputs[0]] = np.zeros([int(d) for d in dims], dtype_of(imp, n.inputs[0]))
        return
    reshape_like(imp, n, where, dims)


def flatten(imp: Importer, n: OnnxNode, where: str) -> None:
    """Flatten to 2-D at ``axis`` (negative counts from the end)."""
    dims = shape_of(imp, n.inputs[0])
    axis = n.attrs.get("axis", 1)
    axis = axis + len(dims) if axis < 0 else axis
    lead, rest = dims[:axis], dims[axis:]
    if all(isinstance(d, int) for d in dims):
        reshape_like(imp, n, where, [math.prod(lead), math.prod(rest)])
    elif all(isinstance(d, int) for d in rest):
        reshape_like(imp, n, where, [-1, math.prod(rest)])
    elif all(isinstance(d, int) for d in lead):
        reshape_like(imp, n, where, [math.prod(lead), -1])
    else:
        raise UnsupportedError(f"{where}: Flatten of {dims} at axis {axis} mixes symbolic dims on both sides")


def squeeze(imp: Importer, n: OnnxNode, where: str) -> None:
    """Squeeze ``axes`` (attribute before opset 13, input from it; all size-1 dims when absent)."""
    dims = list(shape_of(imp, n.inputs[0]))
    axes = attr_or_input(imp, n, "axes", 1, 13, where)
    if axes is None:
        if not all(isinstance(d, int) for d in dims):
            raise UnsupportedError(f"{where}: Squeeze without axes of symbolic shape {dims}")
        axes = [i for i, d in enumerate(dims) if d == 1]
    axes = [a % len(dims) for a in axes]
    reshape_like(imp, n, where, [d for i, d in enumerate(dims) if i not in axes])


def unsqueeze(imp: Importer, n: OnnxNode, where: str) -> None:
    """Unsqueeze at ``axes`` (attribute before opset 13, input from it)."""
    dims = list(shape_of(imp, n.inputs[0]))
    axes = attr_or_input(imp, n, "axes", 1, 13, where)
    for a in sorted(a % (len(dims) + len(axes)) for a in axes):
        dims.insert(a, 1)
    reshape_like(imp, n, where, dims)


def transpose(imp: Importer, n: OnnxNode, where: str) -> None:
    """Transpose by ``perm`` (reversed axes when absent)."""
    perm = n.attrs.get("perm", list(range(rank_of(imp, n.inputs[0])))[::-1])
    imp.apply("transpose", n.name, {"x": n.inputs[0]}, n.outputs[0], where, perm=list(perm))


def slice_(imp: Importer, n: OnnxNode, where: str) -> None:
    """Slice (attributes before opset 10, inputs from it; INT64 bounds clamp to the ends)."""
    if imp.opset < 10:
        starts, ends, axes, steps = n.attrs["starts"], n.attrs["ends"], n.attrs.get("axes"), None
    else:
        starts, ends = int_list(imp, n, 1, where, "starts"), int_list(imp, n, 2, where, "ends")
        axes, steps = int_list(imp, n, 3, where, "axes"), int_list(imp, n, 4, where, "steps")
    rank = rank_of(imp, n.inputs[0])
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if 0 in steps:
        raise UnsupportedError(f"{where}: Slice step 0")
    clamp = lambda v: int(max(min(v, CLAMP), -CLAMP))  # noqa: E731
    imp.apply("slice", n.name, {"x": n.inputs[0]}, n.outputs[0], where, axes=[a % rank for a in axes],
              starts=[clamp(s) for s in starts], ends=[clamp(e) for e in ends], steps=steps)


def split(imp: Importer, n: OnnxNode, where: str) -> None:
    """Split into slices along ``axis``: sizes from the attribute (opset < 13), the input, or equal parts."""
    dims = shape_of(imp, n.inputs[0])
    axis = n.attrs.get("axis", 0) % len(dims)
    sizes = attr_or_input(imp, n, "split", 1, 13, where)
    d = dims[axis]
    if sizes is None:
        if not isinstance(d, int):
            raise UnsupportedError(f"{where}: Split of symbolic dim {d!r} into equal parts")
        parts = n.attrs.get("num_outputs", len(n.outputs))
        chunk = -(-d // parts)
        sizes = [min(chunk, d - k * chunk) for k in range(parts)]
    start = 0
    for k, (out, length) in enumerate(zip(n.outputs, sizes)):
        if out:
            imp.apply("slice", f"{n.name}.{k}", {"x": n.inputs[0]}, out, where, axes=[axis], starts=[start],
                      ends=[start + length], steps=[1])
        start += length


def pad(imp: Importer, n: OnnxNode, where: str) -> None:
    """Pad (pads an attribute before opset 11, inputs from it; ``axes`` from opset 18): constant, reflect, edge, wrap."""
    mode = n.attrs.get("mode", "constant")
    rank = rank_of(imp, n.inputs[0])
    if imp.opset < 11:
        pads, value = list(n.attrs["pads"]), float(n.attrs.get("value", 0.0))
    else:
        pads = int_list(imp, n, 1, where, "pads")
        value = np.asarray(imp.const(n.inputs[2], where, "constant_value")).reshape(-1)[0] if arg(n, 2) else 0
    axes = int_list(imp, n, 3, where, "axes") if imp.opset >= 18 else None
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    per_axis = [[0, 0] for _ in range(rank)]
    for k, a in enumerate(axes):
        per_axis[a] = [pads[k], pads[k + len(axes)]]
    if mode == "constant":
        if any(v < 0 for pa in per_axis for v in pa):
            raise UnsupportedError(f"{where}: negative constant pads {pads} are not supported")
        imp.apply("pad", n.name, {"x": n.inputs[0]}, n.outputs[0], where, pads=per_axis, value=value.item()
                  if isinstance(value, np.generic) else value)
    elif mode in ("reflect", "edge", "wrap"):
        imp.apply("mirror_pad", n.name, {"x": n.inputs[0]}, n.outputs[0], where, pads=per_axis, mode=mode)
    else:
        raise UnsupportedError(f"{where}: Pad mode {mode!r} is not supported")


# ------------------------------------------------------------------ elementwise
def unary(imp: Importer, n: OnnxNode, where: str) -> None:
    """An elementwise function of ops/math.py (its attributes as params)."""
    params = {k: v for k, v in n.attrs.items() if k in ("alpha", "gamma", "lambd", "bias", "approximate",
                                                         "detect_positive", "detect_negative")}
    imp.apply(UNARY[n.op], n.name, {"x": n.inputs[0]}, n.outputs[0], where, **params)


def clip(imp: Importer, n: OnnxNode, where: str) -> None:
    """Clip of a non-float32 tensor: max then min with the bounds in its dtype."""
    x, kind = n.inputs[0], dtype_of(imp, n.inputs[0])
    bounds = [n.attrs.get("min"), n.attrs.get("max")] if imp.opset < 11 else \
        [np.asarray(imp.const(i, where, "a bound")) if i else None for i in (arg(n, 1), arg(n, 2))]
    steps = [(op, b) for op, b in (("maximum", bounds[0]), ("minimum", bounds[1])) if b is not None]
    if not steps:
        imp.alias(x, n.outputs[0])
    for k, (op, bound) in enumerate(steps):
        imp.consts[f"{n.name}.{op}.bound"] = np.asarray(bound).astype(kind)
        out = n.outputs[0] if k == len(steps) - 1 else f"{n.name}.{op}.out"
        imp.apply(op, n.name if out == n.outputs[0] else f"{n.name}.{op}", {"a": x, "b": f"{n.name}.{op}.bound"}, out, where)
        x = out


def relu_any(imp: Importer, n: OnnxNode, where: str) -> None:
    """Relu of a non-float32 tensor: max(x, 0) in its own dtype."""
    zero = f"{n.name}.zero"
    imp.consts[zero] = np.zeros((), dtype_of(imp, n.inputs[0]))
    imp.apply("maximum", n.name, {"a": n.inputs[0], "b": zero}, n.outputs[0], where)


def binary(imp: Importer, n: OnnxNode, where: str) -> None:
    """A broadcasting binary op in any dtype: integer Div truncates, Pow casts its exponent to the base's type."""
    a, b = n.inputs[:2]
    op = BINARY[n.op]
    kind = dtype_of(imp, a)
    if op == "div" and kind.kind in "iu":
        op = "int_div"
    if op == "pow" and dtype_of(imp, b) != kind:   # the exponent may have another type: cast it to the base's
        imp.apply("cast", f"{n.name}.exponent", {"x": b}, f"{n.name}.exponent", where, to=kind.name)
        b = f"{n.name}.exponent"
    params = {k: v for k, v in n.attrs.items() if k in ("fmod", "direction")}
    imp.apply(op, n.name, {"a": a, "b": b}, n.outputs[0], where, **params)


def variadic(imp: Importer, n: OnnxNode, where: str) -> None:
    """Max / Min / Sum / Mean of any number of broadcasting operands, left to right."""
    ins = [i for i in n.inputs if i]
    op = VARIADIC[n.op]
    acc = ins[0]
    for k, other in enumerate(ins[1:]):
        last = k == len(ins) - 2 and n.op != "Mean"
        out = n.outputs[0] if last else f"{n.name}.acc{k}"
        imp.apply(op, f"{n.name}.{k}" if not last else n.name, {"a": acc, "b": other}, out, where)
        acc = out
    if n.op == "Mean":
        count = f"{n.name}.count"
        imp.consts[count] = np.array(len(ins), dtype_of(imp, ins[0]))
        imp.apply("div", n.name, {"a": acc, "b": count}, n.outputs[0], where)
    elif len(ins) == 1:
        imp.alias(acc, n.outputs[0])


def where_(imp: Importer, n: OnnxNode, where: str) -> None:
    """Where(condition, a, b), broadcast."""
    imp.apply("where", n.name, {"condition": n.inputs[0], "a": n.inputs[1], "b": n.inputs[2]}, n.outputs[0], where)


def softmax(imp: Importer, n: OnnxNode, where: str) -> None:
    """Softmax / LogSoftmax / Hardmax: over ``axis`` (opset 13+), over the flattened axes from ``axis`` on before."""
    op = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Hardmax": "hardmax"}[n.op]
    dims = shape_of(imp, n.inputs[0])
    rank = len(dims)
    axis = n.attrs.get("axis", -1 if imp.opset >= 13 else 1) % max(rank, 1)
    if op != "hardmax" and dtype_of(imp, n.inputs[0]).name in ("float16", "float64") and imp.opset >= 13:
        _softmax_steps(imp, n, axis, where)
        return
    if imp.opset >= 13 or axis == rank - 1:
        imp.apply(op, n.name, {"x": n.inputs[0]}, n.outputs[0], where, axis=axis)
        return
    tail = dims[axis:]
    if not all(isinstance(d, int) for d in tail):
        raise UnsupportedError(f"{where}: opset-{imp.opset} {n.op} over symbolic dims {tail}")
    flat = f"{n.name}.flat"
    imp.apply("reshape", f"{n.name}.flatten", {"x": n.inputs[0]}, flat, where, shape=[0] * axis + [math.prod(tail)])
    imp.apply(op, f"{n.name}.{op}", {"x": flat}, f"{n.name}.out", where, axis=axis)
    imp.apply("reshape", n.name, {"x": f"{n.name}.out"}, n.outputs[0], where, shape=[0] * axis + list(tail))


def _softmax_steps(imp: Importer, n: OnnxNode, axis: int, where: str) -> None:
    """Softmax / LogSoftmax of float16 / float64 in the input's own type, step by step as onnx's
    reference: exp(x - max) / sum, its log for LogSoftmax."""
    names = {k: f"{n.name}.{k}" for k in ("max", "shifted", "exp", "sum", "softmax")}
    imp.apply("reduce_max", f"{n.name}.max", {"x": n.inputs[0]}, names["max"], where, axes=[axis], keepdims=1)
    imp.apply("sub", f"{n.name}.shift", {"a": n.inputs[0], "b": names["max"]}, names["shifted"], where)
    imp.apply("exp", f"{n.name}.exp", {"x": names["shifted"]}, names["exp"], where)
    imp.apply("reduce_sum", f"{n.name}.sum", {"x": names["exp"]}, names["sum"], where, axes=[axis], keepdims=1)
    probabilities = n.outputs[0] if n.op == "Softmax" else names["softmax"]
    imp.apply("div", f"{n.name}.normalize", {"a": names["exp"], "b": names["sum"]}, probabilities, where)
    if n.op == "LogSoftmax":
        imp.apply("log", n.name, {"x": probabilities}, n.outputs[0], where)


# ------------------------------------------------------------------ reductions
def reduce(imp: Importer, n: OnnxNode, where: str) -> None:
    """A Reduce op: axes from the attribute or (opset 13 / 18 on) the input; empty axes reduce all unless noop_with_empty_axes."""
    rank = rank_of(imp, n.inputs[0])
    axes = attr_or_input(imp, n, "axes", 1, AXES_INPUT_SINCE[n.op], where)
    keep = int(n.attrs.get("keepdims", 1))
    if not axes:
        if n.attrs.get("noop_with_empty_axes", 0):
            imp.alias(n.inputs[0], n.outputs[0])
            return
        axes = list(range(rank))
    imp.apply(REDUCE[n.op], n.name, {"x": n.inputs[0]}, n.outputs[0], where, axes=[a % max(rank, 1) for a in axes],
              keepdims=keep)


def arg_reduce(imp: Importer, n: OnnxNode, where: str) -> None:
    """ArgMax / ArgMin along ``axis``."""
    imp.apply("argmax" if n.op == "ArgMax" else "argmin", n.name, {"x": n.inputs[0]}, n.outputs[0], where,
              axis=n.attrs.get("axis", 0), keepdims=n.attrs.get("keepdims", 1),
              select_last_index=n.attrs.get("select_last_index", 0))


def global_max_pool(imp: Importer, n: OnnxNode, where: str) -> None:
    """GlobalMaxPool: the maximum over every spatial axis, kept as size 1."""
    rank = rank_of(imp, n.inputs[0])
    imp.apply("reduce_max", n.name, {"x": n.inputs[0]}, n.outputs[0], where, axes=list(range(2, rank)), keepdims=1)


# ------------------------------------------------------------------ pools the NHWC kernels do not cover
def needs_general_pool(imp: Importer, n: OnnxNode) -> bool:
    """Whether a MaxPool / AveragePool is beyond the NHWC kernels: not 1-D / 2-D, dilated, storage_order,
    MaxPool's Indices, ceil_mode with count_include_pad, or a dtype they do not pool."""
    x = n.inputs[0]
    kind = dtype_of(imp, x).name
    return (rank_of(imp, x) not in (3, 4) or any(d != 1 for d in n.attrs.get("dilations", [1]))
            or bool(n.attrs.get("storage_order", 0)) or (n.op == "MaxPool" and output_used(imp, n, 1))
            or bool(n.attrs.get("ceil_mode", 0) and n.attrs.get("count_include_pad", 0))
            or kind not in ("float32",) + (("int8", "uint8") if n.op == "MaxPool" else ()))


def _explicit_pads(imp: Importer, n: OnnxNode, spatial: tuple, kernel: list, strides: list, dilations: list,
                   where: str) -> list[int]:
    """``pads`` (all begins, then all ends), or the pads ``auto_pad`` SAME_UPPER / SAME_LOWER / VALID implies."""
    rank = len(kernel)
    mode = n.attrs.get("auto_pad", "NOTSET")
    if mode in ("", "NOTSET"):
        return [int(v) for v in n.attrs.get("pads", [0] * 2 * rank)]
    if mode == "VALID":
        return [0] * 2 * rank
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedError(f"{where}: auto_pad {mode!r} is not supported")
    begins, ends = [], []
    for d in range(rank):
        out = -(-spatial[d] // strides[d])
        total = max((out - 1) * strides[d] + dilations[d] * (kernel[d] - 1) + 1 - spatial[d], 0)
        small, large = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else large)
        ends.append(large if mode == "SAME_UPPER" else small)
    return begins + ends


def needs_general_conv(imp: Importer, n: OnnxNode) -> bool:
    """Whether a Conv is beyond the NHWC kernels: not 1-D / 2-D, not float32, or a run-time weight."""
    return (rank_of(imp, n.inputs[0]) not in (3, 4) or n.inputs[1] not in imp.consts
            or dtype_of(imp, n.inputs[0]) != np.float32 or dtype_of(imp, n.inputs[1]) != np.float32)


def conv_nd(imp: Importer, n: OnnxNode, where: str) -> None:
    """Conv over any number of spatial axes, in float16 / float32 / float64, weight and bias constant or
    computed, with volvox's numpy conv_nd."""
    spatial = shape_of(imp, n.inputs[0])[2:]
    kernel = [int(k) for k in n.attrs.get("kernel_shape", shape_of(imp, n.inputs[1])[2:])]
    if not all(isinstance(d, int) for d in list(spatial) + kernel):
        raise UnsupportedError(f"{where}: Conv over symbolic dims {spatial} / kernel {kernel}")
    rank = len(kernel)
    strides = [int(v) for v in n.attrs.get("strides", [1] * rank)]
    dilations = [int(v) for v in n.attrs.get("dilations", [1] * rank)]
    pads = _explicit_pads(imp, n, spatial, kernel, strides, dilations, where)
    ports = {"x": n.inputs[0], "weight": n.inputs[1], **({"bias": n.inputs[2]} if arg(n, 2) else {})}
    imp.apply("conv_nd", n.name, ports, n.outputs[0], where, strides=strides, dilations=dilations, pads=pads,
              groups=int(n.attrs.get("group", 1)))


def deform_conv(imp: Importer, n: OnnxNode, where: str) -> None:
    """DeformConv (2-D) with volvox's numpy deform_conv."""
    if rank_of(imp, n.inputs[0]) != 4:
        raise UnsupportedError(f"{where}: DeformConv of a rank-{rank_of(imp, n.inputs[0])} input (volvox: 2-D)")
    ports = {"x": n.inputs[0], "weight": n.inputs[1], "offset": n.inputs[2]}
    ports.update({port: n.inputs[k] for k, port in ((3, "bias"), (4, "mask")) if arg(n, k)})
    imp.apply("deform_conv", n.name, ports, n.outputs[0], where, strides=list(n.attrs.get("strides", [1, 1])),
              dilations=list(n.attrs.get("dilations", [1, 1])), pads=list(n.attrs.get("pads", [0, 0, 0, 0])),
              groups=int(n.attrs.get("group", 1)), offset_groups=int(n.attrs.get("offset_group", 1)))


def pool_nd(imp: Importer, n: OnnxNode, where: str) -> None:
    """MaxPool / AveragePool / LpPool over any number of spatial axes with volvox's numpy pool_nd:
    dilations, ceil_mode, count_include_pad, auto_pad, MaxPool's Indices (and storage_order)."""
    x = n.inputs[0]
    spatial = shape_of(imp, x)[2:]
    if not all(isinstance(d, int) for d in spatial):
        raise UnsupportedError(f"{where}: {n.op} over symbolic spatial dims {spatial}")
    kernel = [int(k) for k in n.attrs["kernel_shape"]]
    rank = len(kernel)
    strides = [int(v) for v in n.attrs.get("strides", [1] * rank)]
    dilations = [int(v) for v in n.attrs.get("dilations", [1] * rank)]
    pads = _explicit_pads(imp, n, spatial, kernel, strides, dilations, where)
    mode = {"MaxPool": "max", "AveragePool": "avg", "LpPool": "lp"}[n.op]
    indices = n.op == "MaxPool" and output_used(imp, n, 1)
    outputs = {"y": n.outputs[0], **({"indices": n.outputs[1]} if indices else {})}
    imp.apply("pool_nd", n.name, {"x": x}, outputs, where, mode=mode, kernel=kernel, strides=strides,
              dilations=dilations, pads=pads, ceil_mode=int(n.attrs.get("ceil_mode", 0)),
              count_include_pad=int(n.attrs.get("count_include_pad", 0)), p=int(n.attrs.get("p", 2)),
              storage_order=int(n.attrs.get("storage_order", 0)), with_indices=int(indices))


def global_lp_pool(imp: Importer, n: OnnxNode, where: str) -> None:
    """GlobalLpPool: (sum |x|^p)^(1/p) over every spatial axis, kept as size 1."""
    spatial = shape_of(imp, n.inputs[0])[2:]
    if not all(isinstance(d, int) for d in spatial):
        raise UnsupportedError(f"{where}: GlobalLpPool over symbolic spatial dims {spatial}")
    imp.apply("pool_nd", n.name, {"x": n.inputs[0]}, n.outputs[0], where, mode="lp", kernel=list(spatial),
              strides=[1] * len(spatial), dilations=[1] * len(spatial), pads=[0] * 2 * len(spatial),
              p=int(n.attrs.get("p", 2)))


def max_unpool(imp: Importer, n: OnnxNode, where: str) -> None:
    """MaxUnpool: the values written at MaxPool's indices into zeros of the pooled-from size (the
    ``output_shape`` input when given, else the size the kernel, strides and pads imply)."""
    dims = shape_of(imp, n.inputs[0])
    kernel = [int(k) for k in n.attrs["kernel_shape"]]
    rank = len(kernel)
    strides = [int(v) for v in n.attrs.get("strides", [1] * rank)]
    pads = [int(v) for v in n.attrs.get("pads", [0] * 2 * rank)]
    if arg(n, 2):
        output_dims = int_list(imp, n, 2, where, "output_shape")[2:]
    else:
        if not all(isinstance(d, int) for d in dims[2:]):
            raise UnsupportedError(f"{where}: MaxUnpool of symbolic spatial dims {dims}")
        output_dims = [(dims[2 + d] - 1) * strides[d] + kernel[d] - pads[d] - pads[rank + d] for d in range(rank)]
    imp.apply("max_unpool", n.name, {"x": n.inputs[0], "indices": n.inputs[1]}, n.outputs[0], where,
              output_dims=output_dims)


# ------------------------------------------------------------------ ops whose output shape depends on values
def _at_import(imp: Importer, n: OnnxNode, where: str, op: str, ports: dict, outputs: dict, **params) -> None:
    """Fold data-dependent ``op`` at import; ConstantRequired naming the first run-time input."""
    for name in ports.values():
        imp.const(name, where, f"input of {n.op} (its output shape depends on the values)")
    imp.apply(op, n.name, ports, outputs, where, **params)


def nonzero(imp: Importer, n: OnnxNode, where: str) -> None:
    """NonZero of a constant, folded at import."""
    _at_import(imp, n, where, "nonzero", {"x": n.inputs[0]}, {"y": n.outputs[0]})


def compress(imp: Importer, n: OnnxNode, where: str) -> None:
    """Compress of a constant x and condition, folded at import."""
    axis = n.attrs.get("axis")
    _at_import(imp, n, where, "compress", {"x": n.inputs[0], "condition": n.inputs[1]}, {"y": n.outputs[0]},
               axis=None if axis is None else axis % rank_of(imp, n.inputs[0]))


def unique(imp: Importer, n: OnnxNode, where: str) -> None:
    """Unique of a constant, folded at import."""
    axis = n.attrs.get("axis")
    outputs = {port: (n.outputs[k] if arg_out(n, k) else f"{n.name}.{port}")
               for k, port in enumerate(("y", "indices", "inverse_indices", "counts"))}
    _at_import(imp, n, where, "unique", {"x": n.inputs[0]}, outputs, sorted=int(n.attrs.get("sorted", 1)),
               axis=None if axis is None else axis % rank_of(imp, n.inputs[0]))


def non_max_suppression(imp: Importer, n: OnnxNode, where: str) -> None:
    """NonMaxSuppression of constant boxes and scores, folded at import."""
    ports = {port: n.inputs[k] for k, port in enumerate(("boxes", "scores", "max_output_boxes_per_class",
                                                         "iou_threshold", "score_threshold")) if arg(n, k)}
    _at_import(imp, n, where, "non_max_suppression", ports, {"selected": n.outputs[0]},
               center_point_box=int(n.attrs.get("center_point_box", 0)))


# ------------------------------------------------------------------ signal processing
def dft(imp: Importer, n: OnnxNode, where: str) -> None:
    """DFT: ``axis`` an attribute before opset 20 (default 1), an input from it (default -2); the length
    a constant input."""
    rank = rank_of(imp, n.inputs[0])
    if imp.opset < 20:
        axis = n.attrs.get("axis", 1)
    else:
        axis = int_list(imp, n, 2, where, "axis")[0] if arg(n, 2) else -2
    length = int_list(imp, n, 1, where, "dft_length")[0] if arg(n, 1) else 0
    imp.apply("dft", n.name, {"x": n.inputs[0]}, n.outputs[0], where, axis=axis % rank, length=length,
              inverse=int(n.attrs.get("inverse", 0)), onesided=int(n.attrs.get("onesided", 0)))


def stft(imp: Importer, n: OnnxNode, where: str) -> None:
    """STFT with a constant frame step and frame length (else the window's length)."""
    step = int_list(imp, n, 1, where, "frame_step")[0]
    if arg(n, 3):
        length = int_list(imp, n, 3, where, "frame_length")[0]
    elif arg(n, 2):
        length = shape_of(imp, n.inputs[2])[0]
    else:
        length = shape_of(imp, n.inputs[0])[1]
    ports = {"x": n.inputs[0], **({"window": n.inputs[2]} if arg(n, 2) else {})}
    imp.apply("stft", n.name, ports, n.outputs[0], where, frame_step=step, frame_length=length,
              onesided=int(n.attrs.get("onesided", 1)))


def mel_weight_matrix(imp: Importer, n: OnnxNode, where: str) -> None:
    """MelWeightMatrix of constant operands, folded at import."""
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    values = {k: np.asarray(imp.const(i, where, k)).reshape(-1)[0].item() for k, i in zip(names, n.inputs)}
    to = element_dtype(n.attrs.get("output_datatype", 1), f"{where}: output_datatype").name
    imp.apply("mel_weight_matrix", n.name, {}, n.outputs[0], where, to=to, **values)


def col2im(imp: Importer, n: OnnxNode, where: str) -> None:
    """Col2Im with constant image and block shapes."""
    image, kernel = int_list(imp, n, 1, where, "image_shape"), int_list(imp, n, 2, where, "block_shape")
    rank = len(kernel)
    imp.apply("col2im", n.name, {"x": n.inputs[0]}, n.outputs[0], where, image=image, kernel=kernel,
              strides=[int(v) for v in n.attrs.get("strides", [1] * rank)],
              dilations=[int(v) for v in n.attrs.get("dilations", [1] * rank)],
              pads=[int(v) for v in n.attrs.get("pads", [0] * 2 * rank)])


def tensor_scatter(imp: Importer, n: OnnxNode, where: str) -> None:
    """TensorScatter (a KV cache update) along ``axis`` from per-batch write indices."""
    ports = {"cache": n.inputs[0], "update": n.inputs[1], **({"write_indices": n.inputs[2]} if arg(n, 2) else {})}
    imp.apply("tensor_scatter", n.name, ports, n.outputs[0], where, mode=n.attrs.get("mode", "linear"),
              axis=n.attrs.get("axis", -2) % rank_of(imp, n.inputs[0]))


def det(imp: Importer, n: OnnxNode, where: str) -> None:
    """Det of the trailing square matrices."""
    imp.apply("det", n.name, {"x": n.inputs[0]}, n.outputs[0], where)


def roi_align(imp: Importer, n: OnnxNode, where: str) -> None:
    """RoiAlign (opset 10: output_half_pixel, the default before opset 16)."""
    default = "half_pixel" if imp.opset >= 16 else "output_half_pixel"
    params = {k: n.attrs[k] for k in ("mode", "output_height", "output_width", "sampling_ratio", "spatial_scale")
              if k in n.attrs}
    params.setdefault("output_height", 1)
    params.setdefault("output_width", 1)
    imp.apply("roi_align", n.name, {"x": n.inputs[0], "rois": n.inputs[1], "batch_indices": n.inputs[2]}, n.outputs[0],
              where, coordinate_transformation_mode=n.attrs.get("coordinate_transformation_mode", default), **params)


# ------------------------------------------------------------------ gathers, scatters and friends
def gather(imp: Importer, n: OnnxNode, where: str) -> None:
    """Gather along ``axis``."""
    imp.apply("gather", n.name, {"x": n.inputs[0], "indices": n.inputs[1]}, n.outputs[0], where, axis=n.attrs.get("axis", 0))


def gather_elements(imp: Importer, n: OnnxNode, where: str) -> None:
    """GatherElements along ``axis``."""
    imp.apply("gather_elements", n.name, {"x": n.inputs[0], "indices": n.inputs[1]}, n.outputs[0], where,
              axis=n.attrs.get("axis", 0))


def gather_nd(imp: Importer, n: OnnxNode, where: str) -> None:
    """GatherND with ``batch_dims``."""
    imp.apply("gather_nd", n.name, {"x": n.inputs[0], "indices": n.inputs[1]}, n.outputs[0], where,
              batch_dims=n.attrs.get("batch_dims", 0))


def scatter_elements(imp: Importer, n: OnnxNode, where: str) -> None:
    """ScatterElements (and opset 9-10 Scatter) along ``axis`` with ``reduction``."""
    imp.apply("scatter_elements", n.name, {"x": n.inputs[0], "indices": n.inputs[1], "updates": n.inputs[2]},
              n.outputs[0], where, axis=n.attrs.get("axis", 0), reduction=n.attrs.get("reduction", "none"))


def scatter_nd(imp: Importer, n: OnnxNode, where: str) -> None:
    """ScatterND with ``reduction``."""
    imp.apply("scatter_nd", n.name, {"x": n.inputs[0], "indices": n.inputs[1], "updates": n.inputs[2]},
              n.outputs[0], where, reduction=n.attrs.get("reduction", "none"))


def expand(imp: Importer, n: OnnxNode, where: str) -> None:
    """Expand to a constant shape."""
    imp.apply("expand", n.name, {"x": n.inputs[0]}, n.outputs[0], where, shape=int_list(imp, n, 1, where, "the shape"))


def tile(imp: Importer, n: OnnxNode, where: str) -> None:
    """Tile by constant repeats."""
    imp.apply("tile", n.name, {"x": n.inputs[0]}, n.outputs[0], where, repeats=int_list(imp, n, 1, where, "repeats"))


def topk(imp: Importer, n: OnnxNode, where: str) -> None:
    """TopK (k an attribute before opset 10, an input from it): values and int64 indices."""
    k = n.attrs["k"] if imp.opset < 10 else int_list(imp, n, 1, where, "K")[0]
    imp.apply("topk", n.name, {"x": n.inputs[0]}, {"values": n.outputs[0], "indices": n.outputs[1]}, where,
              k=k, axis=n.attrs.get("axis", -1), largest=n.attrs.get("largest", 1))


def cumsum(imp: Importer, n: OnnxNode, where: str) -> None:
    """CumSum / CumProd along a constant axis, ``exclusive`` and ``reverse``."""
    imp.apply("cumsum", n.name, {"x": n.inputs[0]}, n.outputs[0], where, axis=int_list(imp, n, 1, where, "axis")[0],
              product=int(n.op == "CumProd"),
              exclusive=n.attrs.get("exclusive", 0), reverse=n.attrs.get("reverse", 0))


def one_hot(imp: Importer, n: OnnxNode, where: str) -> None:
    """OneHot with a constant depth, along ``axis``."""
    depth = np.asarray(imp.const(n.inputs[1], where, "depth")).reshape(-1)[0]
    imp.apply("one_hot", n.name, {"indices": n.inputs[0], "values": n.inputs[2]}, n.outputs[0], where,
              depth=int(depth), axis=n.attrs.get("axis", -1))


def trilu(imp: Importer, n: OnnxNode, where: str) -> None:
    """Trilu: the upper or lower triangle from diagonal k."""
    k = int_list(imp, n, 1, where, "k")
    imp.apply("trilu", n.name, {"x": n.inputs[0]}, n.outputs[0], where, upper=n.attrs.get("upper", 1), k=k[0] if k else 0)


def depth_space(imp: Importer, n: OnnxNode, where: str) -> None:
    """DepthToSpace (DCR / CRD) and SpaceToDepth."""
    direction = "to_space" if n.op == "DepthToSpace" else "to_depth"
    imp.apply("depth_space", n.name, {"x": n.inputs[0]}, n.outputs[0], where, blocksize=n.attrs["blocksize"],
              direction=direction, mode=n.attrs.get("mode", "DCR"))


# ------------------------------------------------------------------ quantization as float arithmetic
def _quantization_operands(imp: Importer, n: OnnxNode) -> dict:
    """x, scale and (if given) zero point of a Quantize / DequantizeLinear node as op ports."""
    ports = {"x": n.inputs[0], "scale": n.inputs[1]}
    if arg(n, 2):
        ports["zero_point"] = n.inputs[2]
    return ports


def _axis_params(imp: Importer, n: OnnxNode) -> dict:
    return {"axis": n.attrs.get("axis", 1) % max(rank_of(imp, n.inputs[0]), 1), "block_size": n.attrs.get("block_size", 0)}


def dequantize_linear(imp: Importer, n: OnnxNode, where: str) -> None:
    """(x - zero_point) * scale: float32 arithmetic nodes for a constant float32 scale of an 8 / 16-bit x;
    else (blocked, narrow x, float16 scales, run-time scales, ``output_dtype``) volvox's
    dequantize_linear, the onnx reference's arithmetic."""
    x = n.inputs[0]
    rank = rank_of(imp, x)
    scale = imp.consts.get(n.inputs[1])
    zero = np.asarray(imp.consts[n.inputs[2]]) if arg(n, 2) and n.inputs[2] in imp.consts else None
    simple = (scale is not None and np.asarray(scale).dtype == np.float32 and (zero is not None or not arg(n, 2))
              and not n.attrs.get("block_size", 0) and "output_dtype" not in n.attrs
              and dtype_of(imp, x).name in ("int8", "uint8", "int16", "uint16", "int32"))
    if not simple:
        to = element_dtype(n.attrs["output_dtype"], f"{where}: output_dtype").name if "output_dtype" in n.attrs else None
        imp.apply("dequantize_linear", n.name, _quantization_operands(imp, n), n.outputs[0], where, to=to,
                  **_axis_params(imp, n))
        return
    scale = np.asarray(scale)
    zero = np.zeros((), dtype_of(imp, x)) if zero is None else zero
    if scale.ndim == 1 and rank > 1:
        axis = n.attrs.get("axis", 1) % rank
        scale = scale.reshape((-1,) + (1,) * (rank - 1 - axis))
        zero = zero.reshape((-1,) + (1,) * (rank - 1 - axis))
    names = {key: f"{n.name}.{key}" for key in ("xf", "zero", "shifted", "scale")}
    imp.consts[names["zero"]], imp.consts[names["scale"]] = zero.astype(np.float32), scale
    imp.apply("cast", f"{n.name}.cast", {"x": x}, names["xf"], where, to="float32")
    imp.apply("sub", f"{n.name}.sub", {"a": names["xf"], "b": names["zero"]}, names["shifted"], where)
    imp.apply("mul", n.name, {"a": names["shifted"], "b": names["scale"]}, n.outputs[0], where)


def quantize_linear(imp: Importer, n: OnnxNode, where: str) -> None:
    """saturate(round_half_even(x / scale) + zero_point): float32 arithmetic nodes for a float32 x with
    a constant float32 scale to (u)int8 / (u)int16; else (blocked, int4 / int2, float8, float4e2m1,
    float16 scales, run-time scales, ``precision``) volvox's quantize_linear, the onnx reference's
    arithmetic. The output type is the zero point's, else ``output_dtype``, else uint8."""
    x = n.inputs[0]
    rank = rank_of(imp, x)
    if arg(n, 2):
        to = dtype_of(imp, n.inputs[2])
    elif "output_dtype" in n.attrs:
        to = element_dtype(n.attrs["output_dtype"], f"{where}: output_dtype")
    else:
        to = np.dtype(np.uint8)
    scale = imp.consts.get(n.inputs[1])
    zero = np.asarray(imp.consts[n.inputs[2]]) if arg(n, 2) and n.inputs[2] in imp.consts else None
    simple = (scale is not None and np.asarray(scale).dtype == np.float32 and (zero is not None or not arg(n, 2))
              and to.name in ("int8", "uint8", "int16", "uint16") and dtype_of(imp, x) == np.float32
              and not n.attrs.get("block_size", 0) and "precision" not in n.attrs)
    if not simple:
        precision = element_dtype(n.attrs["precision"], f"{where}: precision").name if "precision" in n.attrs else None
        imp.apply("quantize_linear", n.name, _quantization_operands(imp, n), n.outputs[0], where, to=to.name,
                  saturate=int(n.attrs.get("saturate", 1)), precision=precision, **_axis_params(imp, n))
        return
    scale = np.asarray(scale)
    zero = np.zeros((), to) if zero is None else zero
    if scale.ndim == 1 and rank > 1:
        axis = n.attrs.get("axis", 1) % rank
        scale = scale.reshape((-1,) + (1,) * (rank - 1 - axis))
        zero = zero.reshape((-1,) + (1,) * (rank - 1 - axis))
    info = np.iinfo(zero.dtype)
    names = {key: f"{n.name}.{key}" for key in ("scale", "zero", "lo", "hi", "scaled", "rounded", "shifted", "low",
                                                "clamped")}
    imp.consts.update({names["scale"]: scale, names["zero"]: zero.astype(np.float32),
                       names["lo"]: np.array(info.min, np.float32), names["hi"]: np.array(info.max, np.float32)})
    imp.apply("div", f"{n.name}.div", {"a": x, "b": names["scale"]}, names["scaled"], where)
    imp.apply("round", f"{n.name}.round", {"x": names["scaled"]}, names["rounded"], where)
    imp.apply("add", f"{n.name}.add", {"a": names["rounded"], "b": names["zero"]}, names["shifted"], where)
    imp.apply("maximum", f"{n.name}.max", {"a": names["shifted"], "b": names["lo"]}, names["low"], where)
    imp.apply("minimum", f"{n.name}.min", {"a": names["low"], "b": names["hi"]}, names["clamped"], where)
    imp.apply("cast", n.name, {"x": names["clamped"]}, n.outputs[0], where, to=zero.dtype.name)


def lrn(imp: Importer, n: OnnxNode, where: str) -> None:
    """LRN across channels."""
    imp.apply("lrn", n.name, {"x": n.inputs[0]}, n.outputs[0], where, size=n.attrs["size"],
              alpha=float(n.attrs.get("alpha", 1e-4)), beta=float(n.attrs.get("beta", 0.75)), bias=float(n.attrs.get("bias", 1.0)))


def layer_norm(imp: Importer, n: OnnxNode, where: str) -> None:
    """LayerNormalization over the axes from ``axis`` on, as volvox's layer_norm over the last axis of x
    flattened to (rows, normalized size) with a constant scale (and bias) flattened to match."""
    dims = shape_of(imp, n.inputs[0])
    axis = n.attrs.get("axis", -1) % len(dims)
    tail = dims[axis:]
    if output_used(imp, n, 1) or output_used(imp, n, 2):
        layer_norm_parts(imp, n, where)
        return
    if not all(isinstance(d, int) for d in tail):
        raise UnsupportedError(f"{where}: LayerNormalization over symbolic dims {tail}")
    width = math.prod(tail)
    params = {}
    for port, i in (("weight", 1), ("bias", 2)):
        if arg(n, i):
            value = np.asarray(imp.const(n.inputs[i], where, f"the {port}"))
            params[port] = imp.weight(f"{n.name}.{port}", np.broadcast_to(value, tail).reshape(width).astype(np.float32))
    x = imp.operand(n.inputs[0], where)
    flat = x if axis == len(dims) - 1 else imp.emit("reshape", f"{n.name}.flatten", {"x": x}, f"{n.name}.flat",
                                                     shape=[0] * axis + [width])
    if axis == len(dims) - 1:
        imp.emit("layer_norm", n.name, {"x": flat, **params}, n.outputs[0], eps=float(n.attrs.get("epsilon", 1e-5)))
        return
    y = imp.emit("layer_norm", f"{n.name}.norm", {"x": flat, **params}, f"{n.name}.norm",
                 eps=float(n.attrs.get("epsilon", 1e-5)))
    imp.emit("reshape", n.name, {"x": y}, n.outputs[0], shape=[0] * axis + list(tail))


# ------------------------------------------------------------------ matmuls of other dtypes, integer and quantized
def matmul_general(imp: Importer, n: OnnxNode, where: str) -> None:
    """MatMul of float16 / float64 / integers (numpy semantics; floats accumulate in float64)."""
    imp.apply("matmul_general", n.name, {"a": n.inputs[0], "b": n.inputs[1]}, n.outputs[0], where)


def _shifted(imp: Importer, n: OnnxNode, i: int, zero_at: int | None, where: str) -> str:
    """Input ``i`` as int32 minus its zero point (input ``zero_at``; absent: 0)."""
    x = n.inputs[i]
    wide = f"{n.name}.in{i}.i32"
    imp.apply("cast", f"{n.name}.cast{i}", {"x": x}, wide, where, to="int32")
    if zero_at is None or not arg(n, zero_at):
        return wide
    if n.inputs[zero_at] not in imp.consts and shape_of(imp, n.inputs[zero_at]) in ((), (1,)):
        # a run-time zero point (DynamicQuantizeLinear's), one for the whole tensor
        imp.apply("cast", f"{n.name}.zero_cast{i}", {"x": n.inputs[zero_at]}, f"{n.name}.zero{i}", where, to="int32")
        imp.apply("sub", f"{n.name}.shift{i}", {"a": wide, "b": f"{n.name}.zero{i}"}, f"{n.name}.in{i}.shifted", where)
        return f"{n.name}.in{i}.shifted"
    zero = np.asarray(imp.const(n.inputs[zero_at], where, "a zero point")).astype(np.int32)
    rank = rank_of(imp, x)
    if zero.ndim == 1 and zero.size > 1:   # per row of A (axis -2) or per column of B (axis -1)
        zero = zero.reshape(-1, 1) if i == 0 else zero.reshape(1, -1) if rank > 1 else zero
    imp.consts[f"{n.name}.zero{i}"] = zero
    imp.apply("sub", f"{n.name}.shift{i}", {"a": wide, "b": f"{n.name}.zero{i}"}, f"{n.name}.in{i}.shifted", where)
    return f"{n.name}.in{i}.shifted"


def matmul_integer(imp: Importer, n: OnnxNode, where: str) -> None:
    """MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) exactly, in int32."""
    a, b = _shifted(imp, n, 0, 2, where), _shifted(imp, n, 1, 3, where)
    imp.apply("matmul_general", n.name, {"a": a, "b": b}, n.outputs[0], where)


def _requantize(imp: Importer, n: OnnxNode, acc: str, multiplier: np.ndarray, zero: np.ndarray, where: str) -> None:
    """saturate(round_half_even(float32(acc) * multiplier) + zero) into the zero point's (u)int8 type."""
    info = np.iinfo(zero.dtype)
    names = {k: f"{n.name}.{k}" for k in ("accf", "mult", "scaled", "rounded", "zero", "shifted", "lo", "hi", "low", "clamped")}
    imp.consts.update({names["mult"]: multiplier.astype(np.float32), names["zero"]: zero.astype(np.float32),
                       names["lo"]: np.array(info.min, np.float32), names["hi"]: np.array(info.max, np.float32)})
    imp.apply("cast", f"{n.name}.float", {"x": acc}, names["accf"], where, to="float32")
    imp.apply("mul", f"{n.name}.requant", {"a": names["accf"], "b": names["mult"]}, names["scaled"], where)
    imp.apply("round", f"{n.name}.round", {"x": names["scaled"]}, names["rounded"], where)
    imp.apply("add", f"{n.name}.add_zero", {"a": names["rounded"], "b": names["zero"]}, names["shifted"], where)
    imp.apply("maximum", f"{n.name}.max", {"a": names["shifted"], "b": names["lo"]}, names["low"], where)
    imp.apply("minimum", f"{n.name}.min", {"a": names["low"], "b": names["hi"]}, names["clamped"], where)
    imp.apply("cast", n.name, {"x": names["clamped"]}, n.outputs[0], where, to=zero.dtype.name)


def qlinear_conv(imp: Importer, n: OnnxNode, where: str, conv_integer) -> None:
    """QLinearConv: the exact int32 convolution of the zero-point-shifted operands plus the int32 bias,
    requantized per output channel with x_scale * w_scale / y_scale (float32), rounded half to even, saturated."""
    x_scale, w_scale, y_scale = (np.asarray(imp.const(n.inputs[i], where, "a scale")) for i in (1, 4, 6))
    if any(s.dtype != np.float32 for s in (x_scale, w_scale, y_scale)):
        raise UnsupportedError(f"{where}: QLinearConv with {w_scale.dtype} scales is not supported")
    conv = OnnxNode("ConvInteger", [n.inputs[0], n.inputs[3], n.inputs[2], n.inputs[5]], [f"{n.name}.acc"], n.attrs,
                    n.name, n.domain)
    acc = conv_integer(imp, conv, where, out=f"{n.name}.acc")
    if arg(n, 8):
        imp.consts[f"{n.name}.bias"] = np.asarray(imp.const(n.inputs[8], where, "the bias"), np.int32).reshape(-1, 1, 1)
        imp.apply("add", f"{n.name}.add_bias", {"a": acc, "b": f"{n.name}.bias"}, f"{n.name}.biased", where)
        acc = f"{n.name}.biased"
    multiplier = (np.float32(x_scale.reshape(())) * w_scale.astype(np.float32).reshape(-1) / np.float32(y_scale.reshape(())))
    zero = np.asarray(imp.const(n.inputs[7], where, "y_zero_point"))
    _requantize(imp, n, acc, multiplier.astype(np.float32).reshape(-1, 1, 1), zero.reshape(()), where)


def qlinear_matmul(imp: Importer, n: OnnxNode, where: str) -> None:
    """QLinearMatMul: the exact int32 product of the zero-point-shifted operands, requantized with
    a_scale * b_scale / y_scale (float32), rounded half to even, saturated."""
    scales = [np.asarray(imp.const(n.inputs[i], where, "a scale")) for i in (1, 4, 6)]
    kind = scales[0].dtype
    if kind not in (np.float32, np.float16) or any(s.dtype != kind or s.size != 1 for s in scales):
        raise UnsupportedError(f"{where}: QLinearMatMul with {kind} or per-channel scales is not supported")
    zero = np.asarray(imp.const(n.inputs[7], where, "y_zero_point"))
    a, b = _shifted(imp, n, 0, 2, where), _shifted(imp, n, 3, 5, where)
    acc = f"{n.name}.acc"
    imp.apply("matmul_general", f"{n.name}.matmul", {"a": a, "b": b}, acc, where)
    # a_scale * b_scale / y_scale in the scales' own type (float16 scales multiply in float16), as onnx does
    multiplier = scales[0].reshape(()) * scales[1].reshape(()) / scales[2].reshape(())
    _requantize(imp, n, acc, np.asarray(multiplier, np.float32), zero.reshape(()), where)


# ------------------------------------------------------------------ normalizations as composites
def _normalize(imp: Importer, n: OnnxNode, x: str, axes: list[int], eps: float, where: str, centre: bool = True) -> str:
    """(x - mean) / sqrt(var + eps) over ``axes`` (``centre`` False: x / sqrt(mean(x^2) + eps)), float32."""
    names = {k: f"{n.name}.{k}" for k in ("mean", "centred", "square", "var", "eps", "var_eps", "deviation", "normalized")}
    imp.consts[names["eps"]] = np.array(eps, np.float32)
    centred = x
    if centre:
        imp.apply("reduce_mean", f"{n.name}.mean", {"x": x}, names["mean"], where, axes=axes, keepdims=True)
        imp.apply("sub", f"{n.name}.centre", {"a": x, "b": names["mean"]}, names["centred"], where)
        centred = names["centred"]
    imp.apply("mul", f"{n.name}.square", {"a": centred, "b": centred}, names["square"], where)
    imp.apply("reduce_mean", f"{n.name}.var", {"x": names["square"]}, names["var"], where, axes=axes, keepdims=True)
    imp.apply("add", f"{n.name}.add_eps", {"a": names["var"], "b": names["eps"]}, names["var_eps"], where)
    imp.apply("sqrt", f"{n.name}.sqrt", {"x": names["var_eps"]}, names["deviation"], where)
    imp.apply("div", f"{n.name}.normalize", {"a": centred, "b": names["deviation"]}, names["normalized"], where)
    return names["normalized"]


def _affine(imp: Importer, n: OnnxNode, y: str, scale: np.ndarray | None, bias: np.ndarray | None, where: str) -> None:
    """y * scale + bias into the node's output (either may be None)."""
    steps = [(op, value) for op, value in (("mul", scale), ("add", bias)) if value is not None]
    if not steps:
        imp.alias(y, n.outputs[0])
    for k, (op, value) in enumerate(steps):
        imp.consts[f"{n.name}.{op}.value"] = value.astype(np.float32)
        out = n.outputs[0] if k == len(steps) - 1 else f"{n.name}.{op}.out"
        imp.apply(op, n.name if out == n.outputs[0] else f"{n.name}.{op}", {"a": y, "b": f"{n.name}.{op}.value"}, out, where)
        y = out


def _float32_input(imp: Importer, n: OnnxNode, where: str) -> str:
    if dtype_of(imp, n.inputs[0]) != np.float32:
        raise UnsupportedError(f"{where}: {n.op} of {dtype_of(imp, n.inputs[0])} is not supported (volvox: float32)")
    return n.inputs[0]


def batch_norm_training(imp: Importer, n: OnnxNode, where: str) -> None:
    """Training-mode BatchNormalization (opset 14+): normalized by the batch's own mean and (population)
    variance over every axis but the channels, with the running statistics updated by ``momentum``."""
    if imp.opset < 14:
        raise UnsupportedError(f"{where}: training-mode BatchNormalization before opset 14 is not supported")
    x = n.inputs[0]
    rank = rank_of(imp, x)
    axes = [0] + list(range(2, rank))
    per_channel = (-1,) + (1,) * (rank - 2)
    scale, bias, mean, var = (np.asarray(imp.const(i, where, "BatchNormalization parameters")) for i in n.inputs[1:5])
    kind = dtype_of(imp, x)
    momentum, eps = float(n.attrs.get("momentum", 0.9)), float(n.attrs.get("epsilon", 1e-5))
    names = {k: f"{n.name}.{k}" for k in ("mean", "centred", "square", "var", "eps", "var_eps", "deviation", "scale",
                                          "scaled", "normalized", "bias", "batch_mean", "batch_var", "keep", "take",
                                          "old_mean", "old_var", "kept_mean", "kept_var", "new_mean", "new_var")}
    imp.consts.update({names["eps"]: np.array(eps, kind), names["scale"]: scale.reshape(per_channel).astype(kind),
                       names["bias"]: bias.reshape(per_channel).astype(kind),
                       names["keep"]: np.array(momentum, kind), names["take"]: np.array(1 - momentum, kind),
                       names["old_mean"]: mean.astype(kind), names["old_var"]: var.astype(kind)})
    imp.apply("reduce_mean", f"{n.name}.mean", {"x": x}, names["mean"], where, axes=axes, keepdims=1)
    imp.apply("sub", f"{n.name}.centre", {"a": x, "b": names["mean"]}, names["centred"], where)
    imp.apply("mul", f"{n.name}.square", {"a": names["centred"], "b": names["centred"]}, names["square"], where)
    imp.apply("reduce_mean", f"{n.name}.var", {"x": names["square"]}, names["var"], where, axes=axes, keepdims=1)
    imp.apply("add", f"{n.name}.add_eps", {"a": names["var"], "b": names["eps"]}, names["var_eps"], where)
    imp.apply("sqrt", f"{n.name}.sqrt", {"x": names["var_eps"]}, names["deviation"], where)
    imp.apply("mul", f"{n.name}.scale", {"a": names["centred"], "b": names["scale"]}, names["scaled"], where)
    imp.apply("div", f"{n.name}.normalize", {"a": names["scaled"], "b": names["deviation"]}, names["normalized"], where)
    imp.apply("add", n.name, {"a": names["normalized"], "b": names["bias"]}, n.outputs[0], where)
    for k, (stat, old, kept, new) in enumerate((("mean", "old_mean", "kept_mean", "new_mean"),
                                                ("var", "old_var", "kept_var", "new_var")), start=1):
        if not output_used(imp, n, k):
            continue
        batch = names[f"batch_{stat}"]
        imp.apply("reshape", f"{n.name}.{batch}", {"x": names[stat]}, batch, where, shape=[-1])
        imp.apply("mul", f"{n.name}.{kept}", {"a": names[old], "b": names["keep"]}, names[kept], where)
        imp.apply("mul", f"{n.name}.{new}", {"a": batch, "b": names["take"]}, names[new], where)
        imp.apply("add", f"{n.name}.running_{stat}", {"a": names[kept], "b": names[new]}, n.outputs[k], where)


def instance_norm(imp: Importer, n: OnnxNode, where: str) -> None:
    """InstanceNormalization: each (sample, channel) normalized over its spatial axes, then per-channel scale / bias."""
    x = _float32_input(imp, n, where)
    rank = rank_of(imp, x)
    per_channel = (-1,) + (1,) * (rank - 2)
    scale, bias = (np.asarray(imp.const(i, where, "scale / bias")).reshape(per_channel) for i in n.inputs[1:3])
    y = _normalize(imp, n, x, list(range(2, rank)), float(n.attrs.get("epsilon", 1e-5)), where)
    _affine(imp, n, y, scale, bias, where)


def group_norm(imp: Importer, n: OnnxNode, where: str) -> None:
    """GroupNormalization (opset 21: per-channel scale / bias): channels in ``num_groups`` groups, each
    normalized over its channels and spatial axes."""
    if imp.opset < 21:
        raise UnsupportedError(f"{where}: GroupNormalization before opset 21 (per-group scale) is not supported")
    x = _float32_input(imp, n, where)
    dims = shape_of(imp, x)
    groups = n.attrs["num_groups"]
    if not all(isinstance(d, int) for d in dims[1:]) or dims[1] % groups:
        raise UnsupportedError(f"{where}: GroupNormalization of shape {dims} into {groups} groups")
    grouped = f"{n.name}.grouped"
    imp.apply("reshape", f"{n.name}.group", {"x": x}, grouped, where, shape=[0, groups, -1])
    y = _normalize(imp, n, grouped, [2], float(n.attrs.get("epsilon", 1e-5)), where)
    imp.apply("reshape", f"{n.name}.ungroup", {"x": y}, f"{n.name}.ungrouped", where, shape=[0] + list(dims[1:]))
    per_channel = (-1,) + (1,) * (len(dims) - 2)
    scale, bias = (np.asarray(imp.const(i, where, "scale / bias")).reshape(per_channel) for i in n.inputs[1:3])
    _affine(imp, n, f"{n.name}.ungrouped", scale, bias, where)


def rms_norm(imp: Importer, n: OnnxNode, where: str) -> None:
    """RMSNormalization: x / sqrt(mean(x^2) + eps) over the axes from ``axis`` on, times scale."""
    x = _float32_input(imp, n, where)
    rank = rank_of(imp, x)
    axis = n.attrs.get("axis", -1) % rank
    if n.attrs.get("stash_type", 1) != 1:
        raise UnsupportedError(f"{where}: RMSNormalization stash_type {n.attrs['stash_type']} is not supported")
    y = _normalize(imp, n, x, list(range(axis, rank)), float(n.attrs.get("epsilon", 1e-5)), where, centre=False)
    _affine(imp, n, y, np.asarray(imp.const(n.inputs[1], where, "the scale")), None, where)


def swish(imp: Importer, n: OnnxNode, where: str) -> None:
    """Swish: x * sigmoid(alpha * x); float16 / float64 as onnx's reference, x * (1 / (1 + exp(-alpha x)))."""
    alpha = float(n.attrs.get("alpha", 1.0))
    kind = dtype_of(imp, n.inputs[0])
    if kind.name in ("float16", "float64"):
        names = {k: f"{n.name}.{k}" for k in ("minus_alpha", "scaled", "exp", "one", "denominator", "gate")}
        imp.consts[names["minus_alpha"]], imp.consts[names["one"]] = np.array(-alpha, kind), np.array(1, kind)
        imp.apply("mul", f"{n.name}.scale", {"a": n.inputs[0], "b": names["minus_alpha"]}, names["scaled"], where)
        imp.apply("exp", f"{n.name}.exp", {"x": names["scaled"]}, names["exp"], where)
        imp.apply("add", f"{n.name}.add", {"a": names["exp"], "b": names["one"]}, names["denominator"], where)
        imp.apply("div", f"{n.name}.gate", {"a": names["one"], "b": names["denominator"]}, names["gate"], where)
        imp.apply("mul", n.name, {"a": n.inputs[0], "b": names["gate"]}, n.outputs[0], where)
        return
    x = _float32_input(imp, n, where)
    scaled = x
    if alpha != 1.0:
        imp.consts[f"{n.name}.alpha"] = np.array(alpha, np.float32)
        imp.apply("mul", f"{n.name}.scale", {"a": x, "b": f"{n.name}.alpha"}, f"{n.name}.scaled", where)
        scaled = f"{n.name}.scaled"
    imp.apply("sigmoid", f"{n.name}.sigmoid", {"x": scaled}, f"{n.name}.gate", where)
    imp.apply("mul", n.name, {"a": x, "b": f"{n.name}.gate"}, n.outputs[0], where)


def layer_norm_parts(imp: Importer, n: OnnxNode, where: str) -> None:
    """LayerNormalization step by step (float32, float16, float64), with its Mean and InvStdDev outputs:
    the statistics in float32 (``stash_type`` 1) or the input's type (0), as ONNX defines them."""
    x = n.inputs[0]
    kind = dtype_of(imp, x)
    rank = rank_of(imp, x)
    axes = list(range(n.attrs.get("axis", -1) % rank, rank))
    stash = np.float32 if n.attrs.get("stash_type", 1) == 1 else kind
    if kind.kind != "f":
        raise UnsupportedError(f"{where}: LayerNormalization of {kind}")
    wide = x
    if kind != stash:
        wide = f"{n.name}.stash"
        imp.apply("cast", f"{n.name}.to_stash", {"x": x}, wide, where, to=np.dtype(stash).name)
    names = {k: f"{n.name}.{k}" for k in ("mean", "centred", "square", "var", "eps", "var_eps", "deviation", "inv",
                                          "one", "normalized", "narrow", "scaled")}
    imp.consts[names["eps"]] = np.array(n.attrs.get("epsilon", 1e-5), stash)
    imp.consts[names["one"]] = np.array(1, stash)
    imp.apply("reduce_mean", f"{n.name}.mean", {"x": wide}, names["mean"], where, axes=axes, keepdims=True)
    imp.apply("sub", f"{n.name}.centre", {"a": wide, "b": names["mean"]}, names["centred"], where)
    imp.apply("mul", f"{n.name}.square", {"a": names["centred"], "b": names["centred"]}, names["square"], where)
    imp.apply("reduce_mean", f"{n.name}.var", {"x": names["square"]}, names["var"], where, axes=axes, keepdims=True)
    imp.apply("add", f"{n.name}.add_eps", {"a": names["var"], "b": names["eps"]}, names["var_eps"], where)
    imp.apply("sqrt", f"{n.name}.sqrt", {"x": names["var_eps"]}, names["deviation"], where)
    imp.apply("div", f"{n.name}.inv", {"a": names["one"], "b": names["deviation"]}, names["inv"], where)
    imp.apply("mul", f"{n.name}.normalize", {"a": names["centred"], "b": names["inv"]}, names["normalized"], where)
    y = names["normalized"]
    if kind != stash:
        imp.apply("cast", f"{n.name}.from_stash", {"x": y}, names["narrow"], where, to=kind.name)
        y = names["narrow"]
    scaled = names["scaled"] if arg(n, 2) else n.outputs[0]
    imp.apply("mul", f"{n.name}.scale", {"a": y, "b": n.inputs[1]}, scaled, where)
    if arg(n, 2):
        imp.apply("add", f"{n.name}.bias", {"a": scaled, "b": n.inputs[2]}, n.outputs[0], where)
    for i, name in ((1, names["mean"]), (2, names["inv"])):
        if output_used(imp, n, i):
            imp.alias(name, n.outputs[i])


def einsum(imp: Importer, n: OnnxNode, where: str) -> None:
    """Einsum of its operands by ``equation``."""
    ins = [i for i in n.inputs if i]
    imp.apply("einsum", n.name, {f"x{k}": i for k, i in enumerate(ins)}, n.outputs[0], where,
              equation=n.attrs["equation"].replace(" ", ""))


def lp_normalization(imp: Importer, n: OnnxNode, where: str) -> None:
    """LpNormalization: x / ||x||_p along ``axis`` (p 1 or 2); a zero norm gives 0, as onnxruntime."""
    p, axis = n.attrs.get("p", 2), n.attrs.get("axis", -1)
    if p not in (1, 2):
        raise UnsupportedError(f"{where}: LpNormalization p={p}")
    norm = f"{n.name}.norm"
    imp.apply("reduce_l1" if p == 1 else "reduce_l2", f"{n.name}.lp", {"x": n.inputs[0]}, norm, where,
              axes=[axis % rank_of(imp, n.inputs[0])], keepdims=True)
    imp.consts[f"{n.name}.zero"] = np.zeros((), dtype_of(imp, n.inputs[0]))
    imp.consts[f"{n.name}.one"] = np.ones((), dtype_of(imp, n.inputs[0]))
    imp.apply("equal", f"{n.name}.is_zero", {"a": norm, "b": f"{n.name}.zero"}, f"{n.name}.zero_norm", where)
    imp.apply("where", f"{n.name}.safe", {"condition": f"{n.name}.zero_norm", "a": f"{n.name}.one", "b": norm},
              f"{n.name}.divisor", where)
    imp.apply("div", n.name, {"a": n.inputs[0], "b": f"{n.name}.divisor"}, n.outputs[0], where)


def reverse_sequence(imp: Importer, n: OnnxNode, where: str) -> None:
    """ReverseSequence along ``time_axis`` per entry of ``batch_axis``."""
    imp.apply("reverse_sequence", n.name, {"x": n.inputs[0], "lengths": n.inputs[1]}, n.outputs[0], where,
              batch_axis=n.attrs.get("batch_axis", 1), time_axis=n.attrs.get("time_axis", 0))


def recurrent(imp: Importer, n: OnnxNode, where: str) -> None:
    """RNN / GRU / LSTM over the whole sequence (volvox's recurrent op); every sequence must run its full
    length (sequence_lens absent or all equal to it)."""
    cell = n.op.lower()
    x = n.inputs[0]
    if n.attrs.get("input_forget", 0):
        raise UnsupportedError(f"{where}: LSTM input_forget=1 is not supported")
    if arg(n, 4):
        lengths = np.asarray(imp.const(n.inputs[4], where, "sequence_lens"))
        seq = shape_of(imp, x)[1 if n.attrs.get("layout", 0) else 0]
        if not isinstance(seq, int) or np.any(lengths != seq):
            raise UnsupportedError(f"{where}: sequence_lens {lengths.tolist()} shorter than the sequence")
    ports = {"x": x, "w": n.inputs[1], "r": n.inputs[2]}
    for port, i in (("b", 3), ("initial_h", 5), ("initial_c", 6), ("peepholes", 7)):
        if arg(n, i):
            ports[port] = n.inputs[i]
    outputs = {"y": n.outputs[0] if arg_out(n, 0) else f"{n.name}.y", "y_h": n.outputs[1] if arg_out(n, 1) else f"{n.name}.y_h"}
    if cell == "lstm":
        outputs["y_c"] = n.outputs[2] if arg_out(n, 2) else f"{n.name}.y_c"
    params = {key: n.attrs[key] for key in ("activations", "activation_alpha", "activation_beta", "clip", "direction",
                                            "linear_before_reset", "layout") if key in n.attrs}
    imp.apply("recurrent", n.name, ports, outputs, where, cell=cell, hidden_size=n.attrs["hidden_size"], **params)


def arg_out(n: OnnxNode, i: int) -> bool:
    """Whether ``n`` names output ``i``."""
    return len(n.outputs) > i and bool(n.outputs[i])


def resize_nd(imp: Importer, n: OnnxNode, where: str) -> None:
    """Resize / Upsample in full (any axes, cubic, tf_crop_and_resize, keep_aspect_ratio_policy) with
    volvox's numpy resize_nd, from constant scales / sizes / roi, antialias included."""
    attrs, x = n.attrs, n.inputs[0]
    dims = list(shape_of(imp, x))
    if not all(isinstance(d, int) for d in dims):
        raise UnsupportedError(f"{where}: Resize of symbolic shape {dims} outside the NHWC kernel")
    for attr, known in (("coordinate_transformation_mode", RESIZE_COORDINATES), ("nearest_mode", RESIZE_NEAREST_MODES),
                        ("mode", ("nearest", "linear", "cubic"))):
        if attr in attrs and attrs[attr] not in known:
            raise UnsupportedError(f"{where}: attribute {attr}={attrs[attr]!r} is not supported (volvox: {', '.join(known)})")
    rank = len(dims)
    params = {"mode": attrs.get("mode", "nearest"), "cubic_coeff_a": float(attrs.get("cubic_coeff_a", -0.75)),
              "exclude_outside": int(attrs.get("exclude_outside", 0)),
              "extrapolation_value": float(attrs.get("extrapolation_value", 0.0)),
              "antialias": int(attrs.get("antialias", 0))}
    roi = None
    if n.op == "Upsample" or imp.opset < 11:
        scales = np.asarray(attrs["scales"] if n.op == "Upsample" and imp.opset < 9 else imp.const(n.inputs[1], where, "scales"))
        sizes = np.zeros(0)
        params.update(coordinate="asymmetric", nearest_mode="floor", mode="linear" if params["mode"] == "bilinear" else params["mode"])
    else:
        params.update(coordinate=attrs.get("coordinate_transformation_mode", "half_pixel"),
                      nearest_mode=attrs.get("nearest_mode", "round_prefer_floor"))
        scales = np.asarray(imp.const(n.inputs[2], where, "scales")) if arg(n, 2) else np.zeros(0)
        sizes = np.asarray(imp.const(n.inputs[3], where, "sizes")) if arg(n, 3) else np.zeros(0)
        roi = np.asarray(imp.const(n.inputs[1], where, "roi"), np.float64) if arg(n, 1) else None
    axes = [a % rank for a in attrs.get("axes", range(rank))]
    full_scales, full_sizes = [1.0] * rank, list(dims)
    if sizes.size:
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        ratios = [float(s) / dims[a] for a, s in zip(axes, sizes.tolist())]
        if policy != "stretch":
            ratio = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [ratio] * len(axes)
        for a, s, ratio in zip(axes, sizes.tolist(), ratios):
            full_scales[a] = ratio
            full_sizes[a] = int(s) if policy == "stretch" else int(np.floor(dims[a] * ratio + 0.5))
    elif scales.size:
        for a, s in zip(axes, scales.astype(np.float64).tolist()):
            full_scales[a], full_sizes[a] = float(np.float32(s)), int(np.floor(dims[a] * np.float32(s)))
    else:
        raise UnsupportedError(f"{where}: Resize needs constant scales or sizes")
    if roi is not None and roi.size and params["coordinate"] == "tf_crop_and_resize":
        full_roi = [0.0] * rank + [1.0] * rank
        for k, a in enumerate(axes):
            full_roi[a], full_roi[a + rank] = float(roi[k]), float(roi[k + len(axes)])
        params["roi"] = full_roi
    imp.apply("resize_nd", n.name, {"x": x}, n.outputs[0], where, sizes=full_sizes, scales=full_scales, **params)


def grid_sample(imp: Importer, n: OnnxNode, where: str) -> None:
    """GridSample of a 4-D or 5-D input (opset 16 names bilinear / bicubic, opset 20 linear / cubic)."""
    if rank_of(imp, n.inputs[0]) not in (4, 5):
        raise UnsupportedError(f"{where}: GridSample of a rank-{rank_of(imp, n.inputs[0])} input (volvox: 4-D, 5-D)")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(n.attrs.get("mode", "linear"), n.attrs.get("mode", "linear"))
    imp.apply("grid_sample", n.name, {"x": n.inputs[0], "grid": n.inputs[1]}, n.outputs[0], where, mode=mode,
              padding_mode=n.attrs.get("padding_mode", "zeros"), align_corners=n.attrs.get("align_corners", 0))


def dynamic_quantize_linear(imp: Importer, n: OnnxNode, where: str) -> None:
    """DynamicQuantizeLinear: uint8 values, their scale and zero point from the tensor's own range."""
    outputs = {port: (n.outputs[k] if arg_out(n, k) else f"{n.name}.{port}") for k, port in enumerate(("y", "scale", "zero_point"))}
    imp.apply("dynamic_quantize", n.name, {"x": n.inputs[0]}, outputs, where)


def mean_variance_normalization(imp: Importer, n: OnnxNode, where: str) -> None:
    """MeanVarianceNormalization: (x - mean) / sqrt(var) over ``axes`` (default N, H, W), with ONNX's 1e-9."""
    x = _float32_input(imp, n, where)
    rank = rank_of(imp, x)
    axes = [a % rank for a in n.attrs.get("axes", [0, 2, 3])]
    imp.alias(_normalize(imp, n, x, axes, 1e-9, where), n.outputs[0])
