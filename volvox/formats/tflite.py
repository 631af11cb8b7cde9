"""Import a TFLite flatbuffer (float32, float16 weights, full-integer int8) into a volvox graph.

TFLite is already NHWC with OHWI conv weights, so only depthwise weights
(1, kh, kw, C*mult) are permuted, once, to (C*mult, kh, kw, 1). float16 weights
behind DEQUANTIZE ops are widened to float32 at import (exactly). int8 convs and
fully connected layers become ``qconv2d`` / ``qlinear`` with per-channel
(multiplier, shift) pairs computed here exactly as TFLite's Prepare does, so the
int8 island is bit-exact to TFLite's builtin kernels. Any op, type or option
volvox does not implement raises UnsupportedError naming the op and node.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from volvox.errors import UnsupportedError, WeightsError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops.conv import same_padding
from volvox.ops.int8 import INT8_MAX, INT8_MIN, quantize_multiplier
from volvox.formats.flatbuffers import Table, root
from volvox.ops import validate_file


class TFLiteError(WeightsError):
    """A .tflite file is truncated, malformed or inconsistent."""


# tensorflow/lite/schema/schema.fbs
TENSOR_TYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 9: "int8"}
BUILTIN_NAMES = {0: "ADD", 1: "AVERAGE_POOL_2D", 2: "CONCATENATION", 3: "CONV_2D", 4: "DEPTHWISE_CONV_2D",
                 6: "DEQUANTIZE", 9: "FULLY_CONNECTED", 17: "MAX_POOL_2D", 19: "RELU", 22: "RESHAPE",
                 23: "RESIZE_BILINEAR", 25: "SOFTMAX", 34: "PAD", 97: "RESIZE_NEAREST_NEIGHBOR", 114: "QUANTIZE"}
FUSED_ACTIVATIONS = {0: "none", 1: "relu", 3: "relu6"}
PADDING_SAME, PADDING_VALID = 0, 1




class _Tensor:
    """One TFLite tensor: name, shape, dtype, quantization, constant data (or None)."""

    def __init__(self, t: Table, index: int, buffers: list[Table], file: bytes, path: str):
        self.index = index
        self.name = t.string(3) or f"tensor{index}"
        code = t.scalar(1, "<b")
        if code not in TENSOR_TYPES:
            raise UnsupportedError(f"{path}: tensor {self.name!r} has TFLite type {code}, which volvox does not support "
                                   f"(supported: {', '.join(TENSOR_TYPES.values())})")
        self.dtype = TENSOR_TYPES[code]
        self.shape = tuple(int(d) for d in t.array(0, "<i4"))
        if any(d < 0 for d in self.shape):
            raise TFLiteError(f"{path}: tensor {self.name!r} has negative dims {list(self.shape)}")
        q = t.table(4, "quantization")
        self.scale = q.array(2, "<f4").copy() if q else np.zeros(0, np.float32)        # (1 or C,)
        self.zero_point = q.array(3, "<i8").copy() if q else np.zeros(0, np.int64)     # (1 or C,)
        self.q_axis = q.scalar(6, "<i") if q else 0
        self.data = self._data(t.scalar(2, "<I"), buffers, file, path)

    def _data(self, b: int, buffers: list[Table], file: bytes, path: str) -> np.ndarray | None:
        if b == 0:
            return None  # buffer 0 is the empty sentinel: a runtime tensor
        if b >= len(buffers):
            raise TFLiteError(f"{path}: tensor {self.name!r} names buffer {b} of {len(buffers)}")
        buf = buffers[b]
        raw = buf.array(0, "u1")
        offset, size = buf.scalar(1, "<Q"), buf.scalar(2, "<Q")
        if raw.size == 0 and offset > 1:
            if offset + size > len(file):
                raise TFLiteError(f"{path}: tensor {self.name!r}: buffer {b} [{offset}, {offset + size}) is past the end of the file")
            raw = np.frombuffer(file, np.uint8, size, offset)
        if raw.size == 0:
            return None
        dt = np.dtype(self.dtype).newbyteorder("<")
        want = int(np.prod(self.shape, dtype=np.int64)) * dt.itemsize
        if raw.size != want:
            raise TFLiteError(f"{path}: tensor {self.name!r} {self.dtype}{list(self.shape)} needs {want} bytes, buffer {b} has {raw.size}")
        return raw.view(dt).reshape(self.shape)

    def qparams(self) -> tuple[float, int]:
        """Per-tensor (scale, zero_point) of an activation."""
        if self.scale.size != 1 or self.zero_point.size != 1:
            raise UnsupportedError(f"tensor {self.name!r}: int8 activations need one scale and zero point, "
                                   f"got {self.scale.size} / {self.zero_point.size}")
        return float(self.scale[0]), int(self.zero_point[0])


class _Importer:
    """Walks a subgraph's operators in order and emits volvox nodes and weights."""

    def __init__(self, path: str, tensors: list[_Tensor]):
        self.path = path
        self.tensors = tensors
        self.names: dict[int, str] = {}             # tensor index -> graph tensor name
        self.consts: dict[int, np.ndarray] = {}     # tensor index -> constant value (float16 widened)
        self.weights: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        used: set[str] = set()
        for t in tensors:
            name = t.name if t.name not in used else f"{t.name}#{t.index}"
            used.add(name)
            self.names[t.index] = name
            if t.data is not None:
                self.consts[t.index] = t.data

    def where(self, k: int, op: str) -> str:
        return f"{self.path}: node {k} ({op})"

    def runtime(self, idx: int, where: str) -> str:
        """Graph name of a runtime (non-constant) input tensor."""
        if idx < 0 or idx >= len(self.tensors):
            raise TFLiteError(f"{where}: tensor index {idx} out of range")
        if idx in self.consts:
            raise UnsupportedError(f"{where}: constant tensor {self.tensors[idx].name!r} where an activation is expected")
        return self.names[idx]

    def const(self, idx: int, where: str, what: str) -> np.ndarray:
        if idx < 0 or idx >= len(self.tensors) or idx not in self.consts:
            raise UnsupportedError(f"{where}: {what} must be a constant tensor")
        return self.consts[idx]

    def weight(self, name: str, value: np.ndarray) -> str:
        self.weights[name] = np.ascontiguousarray(value)
        return name

    def add(self, op: str, node_id: str, inputs: dict, out_idx: int, **params) -> None:
        self.nodes.append(Node(node_id, op, inputs, {"y": self.names[out_idx]}, params))

    def act(self, code: int, where: str) -> str:
        if code not in FUSED_ACTIVATIONS:
            raise UnsupportedError(f"{where}: fused activation {code} is not supported (none, relu, relu6)")
        return FUSED_ACTIVATIONS[code]

    def act_range(self, act: str, out: _Tensor) -> dict:
        """TFLite's CalculateActivationRangeQuantized for an int8 output."""
        scale, zp = out.qparams()
        q = lambda f: zp + int(np.floor(abs(np.float32(f) / np.float32(scale)) + 0.5))  # noqa: E731  (f >= 0)
        lo, hi = INT8_MIN, INT8_MAX
        if act in ("relu", "relu6"):
            lo = max(lo, q(0.0))
        if act == "relu6":
            hi = min(hi, q(6.0))
        return {"act_min": lo, "act_max": hi}

    def padding(self, code: int, x: _Tensor, k: tuple, strides: tuple, dil: tuple, where: str) -> list[int]:
        if code == PADDING_VALID:
            return [0, 0, 0, 0]
        if code != PADDING_SAME:
            raise UnsupportedError(f"{where}: padding {code} is not supported")
        (pt, pb), (pl, pr) = (same_padding(x.shape[1 + a], k[a], strides[a], dil[a]) for a in range(2))
        return [pt, pl, pb, pr]

    # ------------------------------------------------------------------ ops
    def conv(self, k: int, op: str, opts: Table | None, ins: list[int], outs: list[int]) -> None:
        where = self.where(k, op)
        depthwise = op == "DEPTHWISE_CONV_2D"
        if opts is None:
            raise TFLiteError(f"{where}: missing options")
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        w = self.const(ins[1], where, "the filter")
        o = 1 if depthwise else 0  # depthwise options have depth_multiplier at field 3
        strides = (opts.scalar(2, "<i", 1), opts.scalar(1, "<i", 1))
        dil = (opts.scalar(5 + o, "<i", 1), opts.scalar(4 + o, "<i", 1))
        act = self.act(opts.scalar(3 + o, "<b"), where)
        if len(x.shape) != 4 or w.ndim != 4:
            raise UnsupportedError(f"{where}: only 4-D NHWC convolutions are supported")
        if depthwise:
            w = w.transpose(3, 1, 2, 0)  # (1, kh, kw, C*mult) -> (C*mult, kh, kw, 1)
        groups = x.shape[3] // w.shape[3]
        pads = self.padding(opts.scalar(0, "<b"), x, w.shape[1:3], strides, dil, where)
        node_id = f"{op.lower()}_{k}"
        inputs = {"x": self.runtime(ins[0], where), "weight": self.weight(f"{node_id}.weight", w)}
        geometry = dict(strides=list(strides), dilations=list(dil), pads=pads, groups=groups)
        bias = self.consts.get(ins[2]) if len(ins) > 2 and ins[2] >= 0 else None
        if x.dtype == "float32":
            if bias is not None:
                inputs["bias"] = self.weight(f"{node_id}.bias", bias.astype(np.float32))
            self.add("conv2d", node_id, inputs, outs[0], activation=act, **geometry)
        elif x.dtype == "int8":
            self.quantized_weights(inputs, node_id, x, self.tensors[ins[1]], out, bias, where, fc=False)
            self.add("qconv2d", node_id, inputs, outs[0], input_zero_point=x.qparams()[1],
                     output_zero_point=out.qparams()[1], **self.act_range(act, out), **geometry)
        else:
            raise UnsupportedError(f"{where}: input type {x.dtype} is not supported (float32, int8)")

    def quantized_weights(self, inputs: dict, node_id: str, x: _Tensor, w: _Tensor, out: _Tensor,
                          bias, where: str, fc: bool) -> None:
        """int32 bias and per-channel (multiplier, shift) weights of an int8 conv / FC node."""
        if w.dtype != "int8" or out.dtype != "int8":
            raise UnsupportedError(f"{where}: int8 input needs int8 filter and output, got {w.dtype} / {out.dtype}")
        if np.any(w.zero_point != 0):
            raise UnsupportedError(f"{where}: filter zero points must be 0 (symmetric int8)")
        in_scale, out_scale = x.qparams()[0], out.qparams()[0]
        pairs = []
        for fs in w.scale:
            # TFLite: conv multiplies scales in double; fully connected multiplies in float first.
            prod = float(np.float32(in_scale) * np.float32(fs)) if fc else in_scale * float(fs)
            pairs.append(quantize_multiplier(prod / out_scale))
        if bias is not None:
            inputs["bias"] = self.weight(f"{node_id}.bias", bias.astype(np.int32))
        inputs["multiplier"] = self.weight(f"{node_id}.multiplier", np.array([m for m, _ in pairs], np.int32))
        inputs["shift"] = self.weight(f"{node_id}.shift", np.array([s for _, s in pairs], np.int32))

    def fully_connected(self, k, op, opts, ins, outs) -> None:
        where = self.where(k, op)
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        w = self.const(ins[1], where, "the weights")
        act = self.act(opts.scalar(0, "<b") if opts else 0, where)
        if opts is not None and (opts.scalar(1, "<b") or opts.scalar(2, "<b")):
            raise UnsupportedError(f"{where}: shuffled weights and keep_num_dims are not supported")
        node_id = f"fully_connected_{k}"
        xname = self.runtime(ins[0], where)
        if len(x.shape) != 2 or x.shape[1] != w.shape[1]:
            self.nodes.append(Node(f"{node_id}.flatten", "reshape", {"x": xname}, {"y": f"{node_id}.x"},
                                   {"shape": [-1, int(w.shape[1])]}))
            xname = f"{node_id}.x"
        inputs = {"x": xname, "weight": self.weight(f"{node_id}.weight", w)}
        bias = self.consts.get(ins[2]) if len(ins) > 2 and ins[2] >= 0 else None
        y_idx = outs[0]
        if x.dtype == "float32":
            if bias is not None:
                inputs["bias"] = self.weight(f"{node_id}.bias", bias.astype(np.float32))
            if act != "none":
                raise UnsupportedError(f"{where}: fused {act} on a float fully connected layer is not supported")
            self.add("linear", node_id, inputs, y_idx)
        elif x.dtype == "int8":
            self.quantized_weights(inputs, node_id, x, self.tensors[ins[1]], out, bias, where, fc=True)
            self.add("qlinear", node_id, inputs, y_idx, input_zero_point=x.qparams()[1],
                     output_zero_point=out.qparams()[1], **self.act_range(act, out))
        else:
            raise UnsupportedError(f"{where}: input type {x.dtype} is not supported (float32, int8)")

    def pool(self, k, op, opts, ins, outs) -> None:
        where = self.where(k, op)
        if opts is None:
            raise TFLiteError(f"{where}: missing options")
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        strides = (opts.scalar(2, "<i", 1), opts.scalar(1, "<i", 1))
        kernel = (opts.scalar(4, "<i", 1), opts.scalar(3, "<i", 1))
        act = self.act(opts.scalar(5, "<b"), where)
        pads = self.padding(opts.scalar(0, "<b"), x, kernel, strides, (1, 1), where)
        params = dict(kernel=list(kernel), strides=list(strides), pads=pads)
        inputs = {"x": self.runtime(ins[0], where)}
        node_id = f"{op.lower()}_{k}"
        if x.dtype == "float32":
            self.add("avg_pool2d" if op == "AVERAGE_POOL_2D" else "max_pool2d", node_id, inputs, outs[0],
                     activation=act, **params)
        elif x.dtype == "int8" and op == "AVERAGE_POOL_2D":
            if x.qparams() != out.qparams():
                raise UnsupportedError(f"{where}: int8 average pool must keep scale and zero point")
            self.add("qavg_pool2d", node_id, inputs, outs[0], **self.act_range(act, out), **params)
        else:
            raise UnsupportedError(f"{where}: input type {x.dtype} is not supported")

    def resize(self, k, op, opts, ins, outs) -> None:
        """RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR with a constant size, as ``resize`` with TFLite's coordinates."""
        where = self.where(k, op)
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        size = self.const(ins[1], where, "the output size") if len(ins) > 1 else None
        if size is None or size.shape != (2,):
            raise UnsupportedError(f"{where}: the output size must be a constant int32[2]")
        nearest = op == "RESIZE_NEAREST_NEIGHBOR"
        o = 0 if nearest else 2  # ResizeBilinearOptions: new_height, new_width (deprecated), align_corners, half_pixel_centers
        align, half = (opts.scalar(o, "<b"), opts.scalar(o + 1, "<b")) if opts else (0, 0)
        if align and half:
            raise UnsupportedError(f"{where}: align_corners and half_pixel_centers together are not supported")
        if x.dtype not in ("float32", "int8") or out.dtype != x.dtype:
            raise UnsupportedError(f"{where}: {x.dtype} -> {out.dtype} is not supported (float32, int8 nearest)")
        if x.dtype == "int8" and (not nearest or x.qparams() != out.qparams()):
            raise UnsupportedError(f"{where}: int8 resize must be nearest and keep scale and zero point")
        if align:
            coordinate = "tflite_align_corners"
        elif half:
            coordinate = "tflite_half_pixel_for_nn" if nearest else "tflite_half_pixel"
        else:
            coordinate = "tflite_asymmetric"
        self.add("resize", f"{op.lower()}_{k}", {"x": self.runtime(ins[0], where)}, outs[0],
                 mode="nearest" if nearest else "bilinear", coordinate=coordinate,
                 nearest_mode="round_half_up" if align else "floor", size=[int(v) for v in size])

    def translate(self, k: int, op: str, opts: Table | None, ins: list[int], outs: list[int]) -> None:
        """Emit the node(s) for operator ``k``."""
        where = self.where(k, op)
        x = self.tensors[ins[0]] if ins and 0 <= ins[0] < len(self.tensors) else None
        out = self.tensors[outs[0]]
        node_id = f"{op.lower()}_{k}"
        if op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            self.conv(k, op, opts, ins, outs)
        elif op == "FULLY_CONNECTED":
            self.fully_connected(k, op, opts, ins, outs)
        elif op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
            self.pool(k, op, opts, ins, outs)
        elif op in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
            self.resize(k, op, opts, ins, outs)
        elif op == "DEQUANTIZE" and ins[0] in self.consts:
            c = self.consts[ins[0]]
            if c.dtype != np.float16:
                raise UnsupportedError(f"{where}: only float16 constants can be dequantized at import")
            self.consts[outs[0]] = c.astype(np.float32)  # exact widening
        elif op == "DEQUANTIZE":
            scale, zp = x.qparams()
            self.add("dequantize", node_id, {"x": self.runtime(ins[0], where)}, outs[0], scale=scale, zero_point=zp)
        elif op == "QUANTIZE":
            if x.dtype != "float32" or out.dtype != "int8":
                raise UnsupportedError(f"{where}: only float32 -> int8 quantization is supported, got {x.dtype} -> {out.dtype}")
            scale, zp = out.qparams()
            self.add("quantize", node_id, {"x": self.runtime(ins[0], where)}, outs[0], scale=scale, zero_point=zp)
        elif op == "RESHAPE":
            self.add("reshape", node_id, {"x": self.runtime(ins[0], where)}, outs[0], shape=list(out.shape))
        elif op == "SOFTMAX":
            beta = opts.scalar(0, "<f", 1.0) if opts else 1.0
            if x.dtype == "float32":
                self.add("softmax", node_id, {"x": self.runtime(ins[0], where)}, outs[0], beta=beta)
            elif x.dtype == "int8" and out.dtype == "int8":
                self.add("qsoftmax", node_id, {"x": self.runtime(ins[0], where)}, outs[0], beta=beta,
                         input_scale=x.qparams()[0], output_scale=out.qparams()[0], output_zero_point=out.qparams()[1])
            else:
                raise UnsupportedError(f"{where}: softmax {x.dtype} -> {out.dtype} is not supported")
        elif op in ("ADD", "RELU", "PAD", "CONCATENATION"):
            if any(self.tensors[i].dtype != "float32" for i in ins if i not in self.consts) or out.dtype != "float32":
                raise UnsupportedError(f"{where}: only float32 {op} is supported")
            self.float_op(k, op, opts, ins, outs, node_id, where)
        else:
            raise UnsupportedError(f"{where}: op {op} is not supported")

    def float_op(self, k, op, opts, ins, outs, node_id, where) -> None:
        if op == "RELU":
            self.add("relu", node_id, {"x": self.runtime(ins[0], where)}, outs[0])
            return
        if op == "PAD":
            pads = self.const(ins[1], where, "paddings").astype(np.int64)
            self.add("pad", node_id, {"x": self.runtime(ins[0], where)}, outs[0], pads=pads.tolist())
            return
        act = self.act(opts.scalar(1 if op == "CONCATENATION" else 0, "<b") if opts else 0, where)
        if op == "ADD":
            inputs = {port: (self.weight(f"{node_id}.{port}", self.consts[i].astype(np.float32)) if i in self.consts
                             else self.runtime(i, where)) for port, i in zip(("a", "b"), ins)}
            op_name = "add"
        else:
            inputs = {f"x{j}": self.runtime(i, where) for j, i in enumerate(ins)}
            op_name = "concat"
        if act == "none":
            self.add(op_name, node_id, inputs, outs[0], **({"axis": opts.scalar(0, "<i")} if op_name == "concat" else {}))
            return
        pre = f"{node_id}.pre_{act}"
        params = {"axis": opts.scalar(0, "<i")} if op_name == "concat" else {}
        self.nodes.append(Node(node_id, op_name, inputs, {"y": pre}, params))
        self.nodes.append(Node(f"{node_id}.{act}", "relu" if act == "relu" else "clip", {"x": pre},
                               {"y": self.names[outs[0]]}, {} if act == "relu" else {"min": 0.0, "max": 6.0}))


def read_tflite(path: str | Path) -> tuple[Graph, dict[str, np.ndarray], dict]:
    """(validated graph, weights, metadata) of the .tflite file at ``path`` (its first subgraph)."""
    path = str(path)
    try:
        file = Path(path).read_bytes()
    except FileNotFoundError:
        raise TFLiteError(f"{path}: no such file") from None
    if len(file) < 8 or file[4:8] != b"TFL3":
        raise TFLiteError(f"{path}: not a TFLite file (no 'TFL3' identifier at byte 4)")
    try:
        return _import(file, path)
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError) as e:
        # the flatbuffer reads are bounds-checked; what remains is a schema-valid file whose
        # values contradict each other (a zero channel count, an operator missing its inputs)
        raise TFLiteError(f"{path}: malformed TFLite model ({type(e).__name__}: {e})") from None


def _import(file: bytes, path: str) -> tuple[Graph, dict[str, np.ndarray], dict]:
    """read_tflite's work on the file's bytes."""
    error = TFLiteError
    model = root(file, path, error)
    buffers = model.tables(4, "buffers")
    codes = []
    for oc in model.tables(1, "operator_codes"):
        code = max(oc.scalar(0, "<b"), oc.scalar(3, "<i"))
        codes.append(BUILTIN_NAMES.get(code) or (f"custom op {oc.string(1)!r}" if code == 32 else f"builtin op {code}"))
    subgraphs = model.tables(2, "subgraphs")
    if not subgraphs:
        raise TFLiteError(f"{path}: no subgraphs")
    sg = subgraphs[0]
    tensors = [_Tensor(t, i, buffers, file, path) for i, t in enumerate(sg.tables(0, "subgraphs[0].tensors"))]
    imp = _Importer(path, tensors)
    for k, op in enumerate(sg.tables(3, "subgraphs[0].operators")):
        idx = op.scalar(0, "<I")
        if idx >= len(codes):
            raise TFLiteError(f"{path}: node {k}: opcode index {idx} of {len(codes)}")
        ins = [int(i) for i in op.array(1, "<i4")]
        outs = [int(i) for i in op.array(2, "<i4")]
        if not ins or len(outs) != 1 or not all(-1 <= i < len(tensors) for i in ins + outs) or outs[0] < 0:
            raise TFLiteError(f"{path}: node {k} ({codes[idx]}): bad tensor indices {ins} -> {outs}")
        imp.translate(k, codes[idx], op.table(4, f"operators[{k}].builtin_options"), ins, outs)

    def spec(i: int) -> TensorSpec:
        if not 0 <= i < len(tensors):
            raise TFLiteError(f"{path}: graph input/output index {i} out of range")
        return TensorSpec(imp.names[i], tensors[i].shape, tensors[i].dtype)
    inputs = [spec(int(i)) for i in sg.array(1, "<i4")]
    outputs = [spec(int(i)).name for i in sg.array(2, "<i4")]
    used = {n for node in imp.nodes for n in node.inputs.values()}
    graph = Graph(inputs, {n: TensorSpec(n, w.shape, w.dtype.name) for n, w in imp.weights.items() if n in used},
                  imp.nodes, outputs)
    validate_file(graph, path)
    for name in outputs:
        want = tensors[[imp.names[i] for i in range(len(tensors))].index(name)]
        got = graph.specs[name]
        if tuple(got.shape) != want.shape or got.dtype != want.dtype:
            raise TFLiteError(f"{path}: output {name!r}: volvox infers {got.describe()}, the file says "
                              f"{want.dtype}{list(want.shape)}")
    weights = {n: imp.weights[n] for n in graph.weights}
    meta = {"format": "tflite", "inputs": {s.name: _qmeta(tensors, imp, s.name) for s in inputs}}
    return graph, weights, meta


def _qmeta(tensors: list[_Tensor], imp: _Importer, name: str) -> dict:
    t = tensors[[imp.names[i] for i in range(len(tensors))].index(name)]
    return {"scale": float(t.scale[0]), "zero_point": int(t.zero_point[0])} if t.scale.size == 1 else {}
