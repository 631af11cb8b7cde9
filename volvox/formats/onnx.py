"""Import an ONNX model (opset 11+, float32) into a volvox graph, NHWC inside.

ONNX is NCHW; volvox runs NHWC. Every tensor keeps its ONNX (logical) shape, and
4-D activations coming out of convs and pools are *laid out* NHWC. Ops that do not
care (elementwise, activations, convs, pools, concat on a remapped axis) keep that
layout; any other op gets a transpose back to NCHW first. Conv weights are
permuted once to (out, kh, kw, in/groups), and BatchNormalization right after a
conv is folded into it. Shape arithmetic (Shape, Cast, Slice, Concat, Gather,
Squeeze, Unsqueeze on shape vectors) is evaluated at import, so Reshape targets
become static (with 0 / -1 for the symbolic width). The graph input stays NCHW,
as onnxruntime takes it; a symbolic batch dim is bound to 1.

Weights come from initializers and Constant nodes; external data is refused.
Any op or attribute volvox does not implement raises UnsupportedError naming it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from volvox.errors import BlueprintError, ShapeError, UnsupportedError, WeightsError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops import get_op
from volvox.ops.codes import FN_PARAMS
from volvox.ops.resize import ONNX_COORDINATES, ONNX_NEAREST_MODES
from volvox.formats.protobuf import floats, ints, parse, text
from volvox.ops import validate_file


class ONNXError(WeightsError):
    """An .onnx file is truncated, malformed or inconsistent."""


ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
# ONNX elementwise functions -> volvox ops; their attributes are the function's parameters (ops/codes.py).
UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Sqrt": "sqrt", "HardSwish": "hard_swish", "HardSigmoid": "hard_sigmoid",
         "LeakyRelu": "leaky_relu"}
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}


def _tensor(buf, where: str, error) -> tuple[str, np.ndarray]:
    """(name, array) of a TensorProto."""
    f = parse(buf, error)
    name = text(f[8][0]) if 8 in f else ""
    dims = ints(f.get(1, []), error)
    code = f.get(2, [0])[0]
    if code not in ONNX_DTYPES:
        raise UnsupportedError(f"{where}: tensor {name!r} has ONNX data type {code}, which volvox does not support")
    if f.get(14, [0])[0] == 1:
        raise UnsupportedError(f"{where}: tensor {name!r} uses external data, which volvox does not read")
    dt = np.dtype(ONNX_DTYPES[code]).newbyteorder("<")
    if 9 in f:
        raw = bytes(f[9][0])
        if len(raw) != int(np.prod(dims, dtype=np.int64)) * dt.itemsize:
            raise ONNXError(f"{where}: tensor {name!r} {dt.name}{dims} holds {len(raw)} raw bytes")
        arr = np.frombuffer(raw, dt).astype(dt.newbyteorder("="))
    elif code in (1, 11):
        arr = np.array(floats(f.get(4, [])) if code == 1 else np.frombuffer(b"".join(bytes(v) for v in f.get(10, [])), "<f8"), dt)
    elif code == 7:
        arr = np.array(ints(f.get(7, []), error), np.int64)
    else:
        arr = np.array(ints(f.get(5, []), error), dt.newbyteorder("="))
    if arr.size != int(np.prod(dims, dtype=np.int64)):
        raise ONNXError(f"{where}: tensor {name!r} has {arr.size} values for shape {dims}")
    return name, arr.reshape(dims)


def _attributes(values: list, where: str, error) -> dict:
    out = {}
    for buf in values:
        f = parse(buf, error)
        name, kind = text(f[1][0]), f.get(20, [0])[0]
        if kind == 1:
            out[name] = floats(f[2])[0]
        elif kind == 2:
            out[name] = ints(f[3], error)[0]
        elif kind == 3:
            out[name] = text(f[4][0])
        elif kind == 4:
            out[name] = _tensor(f[5][0], where, error)[1]
        elif kind == 6:
            out[name] = floats(f.get(7, []))
        elif kind == 7:
            out[name] = ints(f.get(8, []), error)
        else:
            raise UnsupportedError(f"{where}: attribute {name!r} has type {kind}, which volvox does not support")
    return out


def _value_info(buf, error) -> tuple[str, int, list]:
    """(name, elem_type, dims) of a ValueInfoProto; dims are ints or dim_param names."""
    f = parse(buf, error)
    name = text(f[1][0])
    tensor = parse(parse(f[2][0], error)[1][0], error) if 2 in f else {}
    dims = []
    if 2 in tensor:
        for d in parse(tensor[2][0], error).get(1, []):
            df = parse(d, error)
            dims.append(ints(df[1], error)[0] if 1 in df else (text(df[2][0]) if 2 in df else "?"))
    return name, tensor.get(1, [1])[0], dims


class _Importer:
    """Translates ONNX nodes in order, tracking logical shapes, NHWC layout and folded shape values."""

    def __init__(self, path: str, opset: int):
        self.path, self.opset = path, opset
        self.consts: dict[str, np.ndarray] = {}   # initializers, Constant outputs, folded shape values
        self.shapes: dict[str, tuple] = {}        # runtime tensor -> logical (ONNX) shape
        self.nhwc: set[str] = set()               # runtime tensors laid out NHWC
        self.weights: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.specs: dict[str, TensorSpec] = {}
        self.nchw_copies: dict[str, str] = {}
        self.conv_of: dict[str, Node] = {}        # conv output -> its node (for BatchNorm folding)
        self.readers: dict[str, int] = {}

    # ------------------------------------------------------------------ emitting
    def emit(self, op: str, node_id: str, inputs: dict, out: str, logical: tuple | None = None,
             nhwc: bool = False, **params) -> str:
        """Add a node, infer its output spec, record the output's logical shape and layout."""
        node = Node(node_id, op, inputs, {"y": out}, params)
        try:
            spec = get_op(op, node_id).infer({p: self.specs[n] for p, n in inputs.items()}, params)["y"]
        except KeyError as e:
            raise ONNXError(f"{self.path}: node {node_id!r}: missing input {e}") from None
        except (ShapeError, BlueprintError) as e:
            raise type(e)(f"{self.path}: node {node_id!r} ({op}): {e}") from None
        self.specs[out] = TensorSpec(out, tuple(spec[0]), spec[1])
        self.nodes.append(node)
        physical = tuple(spec[0])
        self.shapes[out] = logical if logical is not None else (
            tuple(physical[i] for i in TO_NCHW) if nhwc else physical)
        if nhwc:
            self.nhwc.add(out)
        return out

    def weight(self, name: str, value: np.ndarray) -> str:
        value = np.ascontiguousarray(value)
        self.weights[name] = value
        self.specs[name] = TensorSpec(name, value.shape, value.dtype.name)
        return name

    def logical(self, name: str, where: str) -> str:
        """The tensor in ONNX (NCHW) layout, transposing an NHWC-laid one once."""
        self.runtime(name, where)
        if name not in self.nhwc:
            return name
        if name not in self.nchw_copies:
            self.nchw_copies[name] = self.emit("transpose", f"{name}.to_nchw", {"x": name}, f"{name}.nchw",
                                               logical=self.shapes[name], perm=TO_NCHW)
        return self.nchw_copies[name]

    def laid_nhwc(self, name: str, where: str) -> str:
        """The 4-D tensor laid out NHWC (transposing an NCHW one)."""
        self.runtime(name, where)
        if name in self.nhwc:
            return name
        if len(self.shapes[name]) != 4:
            raise UnsupportedError(f"{where}: needs a 4-D NCHW input, got {self.shapes[name]}")
        out = self.emit("transpose", f"{name}.to_nhwc", {"x": name}, f"{name}.nhwc", logical=self.shapes[name], perm=TO_NHWC)
        self.nhwc.add(out)
        return out

    def runtime(self, name: str, where: str) -> None:
        if name not in self.shapes:
            raise UnsupportedError(f"{where}: input {name!r} is a constant or unknown where an activation is expected")
        if self.specs[name].dtype != "float32":
            raise UnsupportedError(f"{where}: {name!r} is {self.specs[name].dtype}; volvox runs ONNX graphs in float32")

    def const(self, name: str, where: str, what: str) -> np.ndarray:
        if name not in self.consts:
            raise UnsupportedError(f"{where}: {what} ({name!r}) must be a constant")
        return self.consts[name]

    # ------------------------------------------------------------------ ops
    def node(self, op: str, ins: list[str], outs: list[str], attrs: dict, node_id: str) -> None:
        where = f"{self.path}: node {node_id!r} ({op})"
        out = outs[0]
        if op == "Constant":
            if "value" not in attrs:
                raise UnsupportedError(f"{where}: only Constant(value=tensor) is supported")
            self.consts[out] = attrs["value"]
            return
        if ins and all(i in self.consts for i in ins if i) and op in FOLDABLE:
            self.consts[out] = FOLDABLE[op](self, [self.consts[i] if i else None for i in ins], attrs, where)
            return
        if op == "Shape":
            self.runtime(ins[0], where)
            self.consts[out] = np.array(self.shapes[ins[0]], dtype=object)
            return
        if op in ("Identity", "Dropout"):
            self.alias(ins[0], out)
        elif op == "Conv":
            self.conv(ins, out, attrs, node_id, where)
        elif op == "BatchNormalization":
            self.batch_norm(ins, out, attrs, node_id, where)
        elif op in UNARY or op == "Clip":
            x = ins[0]
            self.runtime(x, where)
            if op == "Clip":
                lo = attrs.get("min") if self.opset < 11 else (float(self.const(ins[1], where, "min")) if len(ins) > 1 and ins[1] else None)
                hi = attrs.get("max") if self.opset < 11 else (float(self.const(ins[2], where, "max")) if len(ins) > 2 and ins[2] else None)
                name, params = "clip", {"min": lo, "max": hi}
            else:
                name = UNARY[op]
                params = {key: float(attrs[key]) for key, _ in FN_PARAMS.get(name, ()) if key in attrs}
            self.emit(name, node_id, {"x": x}, out, logical=self.shapes[x], nhwc=x in self.nhwc, **params)
        elif op in BINARY:
            self.binary(BINARY[op], ins, out, node_id, where)
        elif op in ("GlobalAveragePool", "AveragePool", "MaxPool"):
            self.pool(op, ins, out, attrs, node_id, where)
        elif op == "MatMul":
            self.matmul(ins, out, node_id, where)
        elif op == "Concat":
            self.concat(ins, out, attrs, node_id, where)
        elif op == "Resize":
            self.resize(ins, out, attrs, node_id, where)
        else:
            self.layout_op(op, ins, out, attrs, node_id, where)

    def alias(self, src: str, dst: str) -> None:
        if src in self.consts:
            self.consts[dst] = self.consts[src]
            return
        self.emit("reshape", f"{dst}.identity", {"x": src}, dst, logical=self.shapes[src],
                  nhwc=src in self.nhwc, shape=[0] * len(self.shapes[src]))

    def conv(self, ins, out, attrs, node_id, where) -> None:
        w = self.const(ins[1], where, "the weight").astype(np.float32)
        if w.ndim != 4 or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            raise UnsupportedError(f"{where}: only 2-D convolutions with explicit pads are supported")
        x = self.laid_nhwc(ins[0], where)
        inputs = {"x": x, "weight": self.weight(f"{node_id}.weight", w.transpose(0, 2, 3, 1))}
        if len(ins) > 2 and ins[2]:
            inputs["bias"] = self.weight(f"{node_id}.bias", self.const(ins[2], where, "the bias").astype(np.float32))
        pads = attrs.get("pads", [0, 0, 0, 0])  # ONNX: [top, left, bottom, right]
        self.emit("conv2d", node_id, inputs, out, nhwc=True, strides=attrs.get("strides", [1, 1]),
                  dilations=attrs.get("dilations", [1, 1]), pads=list(pads), groups=attrs.get("group", 1))
        self.conv_of[out] = self.nodes[-1]

    def batch_norm(self, ins, out, attrs, node_id, where) -> None:
        gamma, beta, mean, var = (self.const(i, where, "BatchNormalization parameters").astype(np.float64) for i in ins[1:5])
        scale = gamma / np.sqrt(var + attrs.get("epsilon", 1e-5))   # (C,)
        shift = beta - mean * scale                                  # (C,)
        conv = self.conv_of.get(ins[0])
        if conv is not None and self.readers.get(ins[0], 0) == 1:
            # fold: y = conv(x, w * scale) + (b * scale + shift)
            w = self.weights[conv.inputs["weight"]].astype(np.float64)
            b = self.weights[conv.inputs["bias"]].astype(np.float64) if "bias" in conv.inputs else 0.0
            conv.inputs["weight"] = self.weight(conv.inputs["weight"], (w * scale[:, None, None, None]).astype(np.float32))
            conv.inputs["bias"] = self.weight(f"{conv.id}.bias", (b * scale + shift).astype(np.float32))
            conv.outputs["y"] = out
            self.specs[out] = TensorSpec(out, self.specs[ins[0]].shape, "float32")
            self.shapes[out] = self.shapes[ins[0]]
            self.nhwc.add(out)
            return
        x = self.laid_nhwc(ins[0], where)
        m = self.emit("mul", f"{node_id}.scale", {"a": x, "b": self.weight(f"{node_id}.scale", scale.astype(np.float32))},
                      f"{node_id}.scaled", nhwc=True)
        self.emit("add", node_id, {"a": m, "b": self.weight(f"{node_id}.shift", shift.astype(np.float32))}, out, nhwc=True)

    def binary(self, op, ins, out, node_id, where) -> None:
        runtime = [i for i in ins if i not in self.consts]
        if not runtime:
            raise UnsupportedError(f"{where}: constant {op} of non-shape values is not supported")
        laid = any(i in self.nhwc for i in runtime)
        operands = {}
        for port, name in zip(("a", "b"), ins):
            if name in self.consts:
                c = np.asarray(self.consts[name], np.float32)
                if laid and c.ndim >= 2:  # broadcast against NCHW logically -> permute into NHWC
                    c = c.reshape((1,) * (4 - c.ndim) + c.shape).transpose(TO_NHWC)
                operands[port] = self.weight(f"{node_id}.{port}", c)
            elif laid and name not in self.nhwc and int(np.prod([d if isinstance(d, int) else 2 for d in self.shapes[name]])) != 1:
                operands[port] = self.laid_nhwc(name, where)
            else:
                self.runtime(name, where)
                operands[port] = name
        shape = tuple(self.specs[operands["a"]].shape), tuple(self.specs[operands["b"]].shape)
        self.emit(op, node_id, operands, out, nhwc=laid and max(len(s) for s in shape) == 4)

    def pool(self, op, ins, out, attrs, node_id, where) -> None:
        x = self.laid_nhwc(ins[0], where)
        if op == "GlobalAveragePool":
            self.emit("global_avg_pool", node_id, {"x": x}, out, nhwc=True)
            return
        if attrs.get("ceil_mode", 0) or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or \
                any(d != 1 for d in attrs.get("dilations", [1, 1])):
            raise UnsupportedError(f"{where}: ceil_mode, auto_pad SAME and dilated pooling are not supported")
        params = dict(kernel=attrs["kernel_shape"], strides=attrs.get("strides", [1, 1]), pads=attrs.get("pads", [0, 0, 0, 0]))
        if op == "AveragePool":
            params["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
        self.emit("avg_pool2d" if op == "AveragePool" else "max_pool2d", node_id, {"x": x}, out, nhwc=True, **params)

    def matmul(self, ins, out, node_id, where) -> None:
        a = self.logical(ins[0], where)
        if ins[1] in self.consts and self.consts[ins[1]].ndim == 2:
            w = self.weight(f"{node_id}.weight", self.consts[ins[1]].astype(np.float32).T)  # (out, in)
            self.emit("linear", node_id, {"x": a, "weight": w}, out)
        else:
            self.emit("matmul", node_id, {"a": a, "b": self.logical(ins[1], where)}, out)

    def concat(self, ins, out, attrs, node_id, where) -> None:
        axis = attrs["axis"]
        if all(i in self.nhwc for i in ins):
            axis = TO_NHWC.index(axis % 4)
            self.emit("concat", node_id, {f"x{k}": i for k, i in enumerate(ins)}, out, nhwc=True, axis=axis)
        else:
            self.emit("concat", node_id, {f"x{k}": self.logical(i, where) for k, i in enumerate(ins)}, out, axis=axis)

    def resize(self, ins, out, attrs, node_id, where) -> None:
        """Resize (opset 11+) of a 4-D NCHW tensor over H and W, from constant scales or sizes."""
        mode = attrs.get("mode", "nearest")
        coordinate = attrs.get("coordinate_transformation_mode", "half_pixel")
        nearest_mode = attrs.get("nearest_mode", "round_prefer_floor")
        for attr, value, known in (("mode", mode, ("nearest", "linear")),
                                   ("coordinate_transformation_mode", coordinate, ONNX_COORDINATES),
                                   ("nearest_mode", nearest_mode, ONNX_NEAREST_MODES), ("antialias", attrs.get("antialias", 0), (0,)),
                                   ("keep_aspect_ratio_policy", attrs.get("keep_aspect_ratio_policy", "stretch"), ("stretch",))):
            if value not in known:
                raise UnsupportedError(f"{where}: attribute {attr}={value!r} is not supported "
                                       f"(volvox: {', '.join(map(str, known))})")
        params = {"mode": "bilinear" if mode == "linear" else "nearest", "coordinate": coordinate, "nearest_mode": nearest_mode}
        x = self.laid_nhwc(ins[0], where)
        logical = list(self.shapes[ins[0]])  # (N, C, H, W)
        sizes = self.const(ins[3], where, "sizes") if len(ins) > 3 and ins[3] else np.zeros(0)
        scales = self.const(ins[2], where, "scales") if len(ins) > 2 and ins[2] else np.zeros(0)
        if sizes.size:
            key, values, full = "size", sizes.tolist(), list(logical)
        elif scales.size:
            key, values, full = "scales", scales.astype(np.float32).tolist(), [1.0] * 4
        else:
            raise UnsupportedError(f"{where}: needs constant scales or sizes")
        axes = [int(a) % 4 for a in attrs.get("axes", range(len(values)))]
        if len(axes) != len(values):
            raise UnsupportedError(f"{where}: {key} {values} do not match the axes of a 4-D input")
        unchanged = full[:2]
        for a, v in zip(axes, values):
            full[a] = v
        if full[:2] != unchanged:
            raise UnsupportedError(f"{where}: {key} {values} resize batch or channels; volvox resizes H and W")
        if key == "size" and not all(isinstance(v, int) for v in full[2:]):
            raise UnsupportedError(f"{where}: sizes {values} are not static")
        params[key] = full[2:]
        self.emit("resize", node_id, {"x": x}, out, nhwc=True, **params)

    def layout_op(self, op, ins, out, attrs, node_id, where) -> None:
        """Ops that run in ONNX's own layout: reshape family, transpose, slice, reductions, softmax."""
        if op not in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "ReduceMean", "Softmax"):
            raise UnsupportedError(f"{where}: op {op} is not supported")
        x = self.logical(ins[0], where)
        shape = self.shapes[x]
        if op == "Transpose":
            self.emit("transpose", node_id, {"x": x}, out, perm=attrs.get("perm", list(range(len(shape)))[::-1]))
        elif op == "Softmax":
            axis = attrs.get("axis", -1 if self.opset >= 13 else 1) % len(shape)
            if self.opset < 13 and axis != len(shape) - 1:
                raise UnsupportedError(f"{where}: opset-{self.opset} Softmax over axes {axis}.. (flattened) is not supported")
            self.emit("softmax", node_id, {"x": x}, out, axis=axis)
        elif op == "ReduceMean":
            axes = attrs["axes"] if "axes" in attrs else [int(a) for a in self.const(ins[1], where, "axes")]
            self.emit("reduce_mean", node_id, {"x": x}, out, axes=axes, keepdims=bool(attrs.get("keepdims", 1)))
        elif op == "Slice":
            starts, ends = (self.const(i, where, "starts/ends").tolist() for i in ins[1:3])
            axes = self.const(ins[3], where, "axes").tolist() if len(ins) > 3 and ins[3] else list(range(len(starts)))
            steps = self.const(ins[4], where, "steps").tolist() if len(ins) > 4 and ins[4] else [1] * len(starts)
            clamp = lambda v: int(max(min(v, 2 ** 62), -2 ** 62))  # noqa: E731  (INT64_MAX means "to the end")
            self.emit("slice", node_id, {"x": x}, out, axes=[a % len(shape) for a in axes],
                      starts=[clamp(s) for s in starts], ends=[clamp(e) for e in ends], steps=steps)
        else:
            target = self.reshape_target(op, ins, attrs, shape, where)
            self.emit("reshape", node_id, {"x": x}, out, shape=target)

    def reshape_target(self, op, ins, attrs, shape, where) -> list[int]:
        """Static reshape dims (0 = copy, -1 = infer) for Reshape/Flatten/Squeeze/Unsqueeze."""
        n = len(shape)
        if op == "Reshape":
            dims = list(self.const(ins[1], where, "the shape"))
        elif op == "Flatten":
            axis = attrs.get("axis", 1) % max(n, 1)
            dims = [0] * axis + [-1] if axis else [1, -1]
        else:
            axes = attrs["axes"] if "axes" in attrs else [int(a) for a in self.const(ins[1], where, "axes")]
            if op == "Squeeze":
                axes = [a % n for a in axes]
                dims = [d for i, d in enumerate(shape) if i not in axes]
            else:
                dims = list(shape)
                for a in sorted(a % (n + len(axes)) for a in axes):
                    dims.insert(a, 1)
        target = []
        for i, d in enumerate(dims):
            if isinstance(d, (int, np.integer)):
                target.append(int(d))
            elif op == "Reshape" and i < n and shape[i] == d:
                target.append(0)
            else:
                target.append(-1)
        if target.count(-1) > 1:
            raise UnsupportedError(f"{where}: reshape to {dims} has more than one unknown dim")
        return target


def _fold_slice(imp, v, attrs, where):
    data, starts, ends = v[0], v[1], v[2]
    axes = v[3] if len(v) > 3 and v[3] is not None else range(len(starts))
    steps = v[4] if len(v) > 4 and v[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[int(a)] = slice(int(max(min(s, 2 ** 62), -2 ** 62)), int(max(min(e, 2 ** 62), -2 ** 62)), int(st))
    return data[tuple(index)]


def _fold_cast(imp, v, attrs, where):
    if v[0].dtype == object:
        return v[0]  # a shape vector with symbols stays one
    if attrs["to"] not in ONNX_DTYPES:
        raise UnsupportedError(f"{where}: Cast to ONNX type {attrs['to']} is not supported")
    return v[0].astype(ONNX_DTYPES[attrs["to"]])


def _fold_arith(fn):
    def fold(imp, v, attrs, where):
        if any(a.dtype == object and any(isinstance(x, str) for x in a.ravel()) for a in v):
            raise UnsupportedError(f"{where}: arithmetic on a symbolic shape is not supported")
        return fn(v[0], v[1])
    return fold


FOLDABLE = {
    "Cast": _fold_cast,
    "Slice": _fold_slice,
    "Concat": lambda imp, v, a, w: np.concatenate([np.asarray(x) for x in v], axis=a["axis"]),
    "Gather": lambda imp, v, a, w: np.take(v[0], v[1].astype(np.int64), axis=a.get("axis", 0)),
    "Squeeze": lambda imp, v, a, w: np.squeeze(v[0], axis=tuple(a["axes"]) if "axes" in a else tuple(int(x) for x in v[1])),
    "Unsqueeze": lambda imp, v, a, w: np.expand_dims(v[0], tuple(a["axes"]) if "axes" in a else tuple(int(x) for x in v[1])),
    "Add": _fold_arith(np.add), "Sub": _fold_arith(np.subtract), "Mul": _fold_arith(np.multiply),
    "Div": _fold_arith(lambda a, b: a // b if a.dtype.kind in "iu" else a / b),
}


def read_onnx(path: str | Path) -> tuple[Graph, dict[str, np.ndarray], dict]:
    """(validated graph, weights, metadata incl. the model's metadata_props) of an .onnx file."""
    path = str(path)
    try:
        buf = memoryview(Path(path).read_bytes())
    except FileNotFoundError:
        raise ONNXError(f"{path}: no such file") from None
    try:
        return _import(buf, path)
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError) as e:
        # a required field missing or of the wrong wire type deep in the schema (op_type, an
        # attribute's value, a node's inputs): the protobuf reader is schema-less, so these
        # surface as Python lookups failing; report them as the malformed file they are
        raise ONNXError(f"{path}: malformed ONNX model ({type(e).__name__}: {e})") from None


def _import(buf: memoryview, path: str) -> tuple[Graph, dict[str, np.ndarray], dict]:
    """read_onnx's work on the file's bytes."""
    error = lambda msg: ONNXError(f"{path}: {msg} (truncated or not an ONNX file)")  # noqa: E731
    model = parse(buf, error)
    if 7 not in model:
        raise ONNXError(f"{path}: no graph (not an ONNX model)")
    opset = 0
    for o in model.get(8, []):
        f = parse(o, error)
        if not f.get(1) or not text(f[1][0]) or text(f[1][0]) == "ai.onnx":
            opset = ints(f.get(2, [0]), error)[0]
    if opset < 11:
        raise UnsupportedError(f"{path}: opset {opset}; volvox imports ONNX opset 11 and later")
    props = {text(parse(p, error)[1][0]): text(parse(p, error).get(2, [b""])[0]) for p in model.get(14, [])}
    g = parse(model[7][0], error)
    imp = _Importer(path, opset)
    for t in g.get(5, []):
        name, arr = _tensor(t, path, error)
        imp.consts[name] = arr
    nodes = []
    for k, nb in enumerate(g.get(1, [])):
        f = parse(nb, error)
        node_id = text(f[3][0]) if 3 in f else f"node{k}"
        if 7 in f and text(f[7][0]) not in ("", "ai.onnx"):
            raise UnsupportedError(f"{path}: node {node_id!r}: domain {text(f[7][0])!r} is not supported")
        nodes.append((text(f[4][0]), [text(v) for v in f.get(1, [])], [text(v) for v in f.get(2, [])],
                      _attributes(f.get(5, []), f"{path}: node {node_id!r}", error), node_id))
    for _, ins, _, _, _ in nodes:
        for i in ins:
            imp.readers[i] = imp.readers.get(i, 0) + 1
    inputs = []
    for vi in g.get(11, []):
        name, elem, dims = _value_info(vi, error)
        if name in imp.consts:
            continue
        if elem != 1:
            raise UnsupportedError(f"{path}: input {name!r} has ONNX type {elem}; volvox takes float32 inputs")
        dims = [1 if i == 0 and isinstance(d, str) else d for i, d in enumerate(dims)]  # batch 1
        spec = TensorSpec(name, tuple(dims), "float32")
        inputs.append(spec)
        imp.specs[name], imp.shapes[name] = spec, spec.shape
    for op, ins, outs, attrs, node_id in nodes:
        imp.node(op, ins, outs, attrs, node_id)
    outputs = []
    for vo in g.get(12, []):
        name = _value_info(vo, error)[0]
        if name not in imp.shapes:
            raise UnsupportedError(f"{path}: output {name!r} is not computed at run time")
        outputs.append(imp.logical(name, f"{path}: output {name!r}"))
    used = {n for node in imp.nodes for n in node.inputs.values()}
    graph = Graph(inputs, {n: imp.specs[n] for n in imp.weights if n in used}, imp.nodes, outputs)
    validate_file(graph, path)
    weights = {n: imp.weights[n] for n in graph.weights}
    return graph, weights, {"format": "onnx", "opset": opset, "onnx_metadata": props}
