"""Import a TFLite flatbuffer (float32, float16 weights, full-integer int8, 16x8) into a volvox graph.

TFLite is already NHWC with OHWI conv weights, so only depthwise weights
(1, kh, kw, C*mult) are permuted, once, to (C*mult, kh, kw, 1). float16 weights
behind DEQUANTIZE ops are widened to float32 at import (exactly). int8 convs and
fully connected layers become ``qconv2d`` / ``qlinear`` with per-channel
(multiplier, shift) pairs computed here exactly as TFLite's Prepare does; the other int8
operators become ops/quantized.py's ops, which keep the scales and derive the rest, so the int8
island is bit-exact to TFLite's reference kernels. 16x8 operators (int16 activations, int8 weights,
int64 biases) become ops/int16x8.py's ops, bit-exact to LiteRT's int16 reference kernels. Every operator is translated by one method of
``_Importer`` (``HANDLERS``). Any op, version, type or option volvox does not implement raises
UnsupportedError naming the op, its version and the operator index.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from volvox.errors import UnsupportedError, WeightsError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops.conv import same_padding
from volvox.ops.int8 import INT8_MAX, INT8_MIN, quantize_multiplier, tflite_round
from volvox.ops.int16x8 import ACCUMULATOR_BOUND, INT16_MAX, INT16_MIN, sigmoid_input_rescale_16x8
from volvox.ops.quantized import (float32_exp, float32_tanh, hard_swish_table_int8, lut_int8, qlog_softmax_params,
                                   rsqrt_table_int8)
from volvox.ops.shape import MAX_CONCAT_INPUTS
from volvox.formats.flatbuffers import Table, root
from volvox.ops import validate_file



def leaky_relu_multipliers(opts, sx: float, sy: float) -> tuple[int, int, int, int]:
    """(multiplier, shift) of a quantized LEAKY_RELU's identity side and of its alpha side. TFLite: the
    alpha side's real value is float32 arithmetic, the identity's double."""
    alpha = np.float32(opts.scalar(0, "<f") if opts else 0.0)
    m, shift = quantize_multiplier(sx / sy)
    m_neg, shift_neg = quantize_multiplier(float(np.float32(sx) * alpha / np.float32(sy)))
    return m, shift, m_neg, shift_neg

class TFLiteError(WeightsError):
    """A .tflite file is truncated, malformed or inconsistent."""


# tensorflow/lite/schema/schema.fbs
TENSOR_TYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8"}
OTHER_TYPES = {5: "string", 8: "complex64", 10: "float64", 11: "complex128", 12: "uint64",
               15: "uint32", 16: "uint16", 17: "int4"}  # named in refusals
BUILTIN_NAMES = {0: "ADD", 1: "AVERAGE_POOL_2D", 2: "CONCATENATION", 3: "CONV_2D", 4: "DEPTHWISE_CONV_2D",
                 5: "DEPTH_TO_SPACE", 6: "DEQUANTIZE", 9: "FULLY_CONNECTED", 11: "L2_NORMALIZATION", 12: "L2_POOL_2D",
                 14: "LOGISTIC", 17: "MAX_POOL_2D", 18: "MUL", 19: "RELU", 20: "RELU_N1_TO_1", 21: "RELU6",
                 22: "RESHAPE", 23: "RESIZE_BILINEAR", 25: "SOFTMAX", 26: "SPACE_TO_DEPTH", 28: "TANH", 34: "PAD",
                 36: "GATHER", 39: "TRANSPOSE", 40: "MEAN", 41: "SUB", 42: "DIV", 43: "SQUEEZE", 45: "STRIDED_SLICE",
                 49: "SPLIT", 50: "LOG_SOFTMAX", 53: "CAST", 54: "PRELU", 55: "MAXIMUM", 56: "ARG_MAX", 57: "MINIMUM",
                 60: "PADV2", 65: "SLICE", 67: "TRANSPOSE_CONV", 70: "EXPAND_DIMS", 74: "SUM", 75: "SQRT", 76: "RSQRT",
                 82: "REDUCE_MAX", 83: "PACK", 88: "UNPACK", 97: "RESIZE_NEAREST_NEIGHBOR", 98: "LEAKY_RELU",
                 99: "SQUARED_DIFFERENCE", 100: "MIRROR_PAD", 102: "SPLIT_V", 114: "QUANTIZE", 117: "HARD_SWISH",
                 126: "BATCH_MATMUL"}
# The newest version of each operator LiteRT's builtin resolver registers (kernels/register.cc);
# volvox checks each node's types and options itself, so an unknown newer version is refused.
MAX_VERSIONS = {"ADD": 5, "AVERAGE_POOL_2D": 3, "CONCATENATION": 4, "CONV_2D": 8, "DEPTHWISE_CONV_2D": 7,
                "DEPTH_TO_SPACE": 2, "DEQUANTIZE": 6, "FULLY_CONNECTED": 13, "L2_NORMALIZATION": 2, "L2_POOL_2D": 1,
                "LOGISTIC": 3, "MAX_POOL_2D": 3, "MUL": 7, "RELU": 3, "RELU_N1_TO_1": 1, "RELU6": 3, "RESHAPE": 1,
                "RESIZE_BILINEAR": 4, "SOFTMAX": 3, "SPACE_TO_DEPTH": 2, "TANH": 3, "PAD": 5, "GATHER": 7,
                "TRANSPOSE": 7, "MEAN": 3, "SUB": 5, "DIV": 2, "SQUEEZE": 2, "STRIDED_SLICE": 8, "SPLIT": 4,
                "LOG_SOFTMAX": 2, "CAST": 7, "PRELU": 1, "MAXIMUM": 4, "ARG_MAX": 3, "MINIMUM": 4, "PADV2": 5,
                "SLICE": 6, "TRANSPOSE_CONV": 5, "EXPAND_DIMS": 1, "SUM": 2, "SQRT": 2, "RSQRT": 3, "REDUCE_MAX": 3,
                "PACK": 4, "UNPACK": 4, "RESIZE_NEAREST_NEIGHBOR": 4, "LEAKY_RELU": 2, "SQUARED_DIFFERENCE": 2,
                "MIRROR_PAD": 3, "SPLIT_V": 2, "QUANTIZE": 4, "HARD_SWISH": 1, "BATCH_MATMUL": 4}
FUSED_ACTIVATIONS = {0: "none", 1: "relu", 2: "relu_n1_to_1", 3: "relu6"}
ACTIVATION_BOUNDS = {"relu": (0.0, None), "relu_n1_to_1": (-1.0, 1.0), "relu6": (0.0, 6.0)}  # float (min, max)
PADDING_SAME, PADDING_VALID = 0, 1


def pot_log2(scale: float) -> int | None:
    """LiteRT's CheckedLog2: round(log2(scale)) in float32 when its fractional part is under 1e-3, else None."""
    x_log2 = np.float32(np.log(np.float32(scale))) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    rounded = np.float32(tflite_round(x_log2))
    return int(rounded) if abs(np.float32(x_log2 - rounded)) < np.float32(1e-3) else None


class _Tensor:
    """One TFLite tensor: name, shape, dtype, quantization, constant data (or None)."""

    def __init__(self, t: Table, index: int, buffers: list[Table], file: bytes, path: str):
        self.index = index
        self.name = t.string(3) or f"tensor{index}"
        code = t.scalar(1, "<b")
        if code not in TENSOR_TYPES:
            raise UnsupportedError(f"{path}: tensor {self.name!r} has TFLite type {OTHER_TYPES.get(code, code)}, which volvox does not support "
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

    # ------------------------------------------------------------------ tensors
    def runtime(self, idx: int, where: str) -> str:
        """Graph name of a runtime (non-constant) input tensor."""
        if idx < 0 or idx >= len(self.tensors):
            raise TFLiteError(f"{where}: tensor index {idx} out of range")
        if idx in self.consts:
            raise UnsupportedError(f"{where}: constant tensor {self.tensors[idx].name!r} where an activation is expected")
        return self.names[idx]

    def value(self, idx: int, where: str) -> str:
        """Graph name of an input tensor: a runtime tensor, or a constant stored as a weight."""
        if idx in self.consts:
            return self.weight(self.names[idx], self.consts[idx])
        return self.runtime(idx, where)

    def const(self, idx: int, where: str, what: str) -> np.ndarray:
        if idx < 0 or idx >= len(self.tensors) or idx not in self.consts:
            raise UnsupportedError(f"{where}: {what} must be a constant tensor")
        return self.consts[idx]

    def weight(self, name: str, value: np.ndarray) -> str:
        self.weights[name] = np.ascontiguousarray(value)
        return name

    def add(self, op: str, node_id: str, inputs: dict, out_idx: int, **params) -> None:
        self.nodes.append(Node(node_id, op, inputs, {"y": self.names[out_idx]}, params))

    def chain(self, node_id: str, steps: list[tuple[str, dict, dict]], out: str) -> None:
        """Nodes run one after the other, each reading the one before through port ``x`` (its first
        step reads what its inputs say); the last writes ``out``."""
        prev = None
        for j, (op, inputs, params) in enumerate(steps):
            y = out if j == len(steps) - 1 else f"{node_id}.{j}"
            self.nodes.append(Node(node_id if j == len(steps) - 1 else f"{node_id}.step{j}", op,
                                   inputs if prev is None else {"x": prev, **inputs}, {"y": y}, params))
            prev = y

    # ------------------------------------------------------------------ activations and quantization
    def act(self, code: int, where: str) -> str:
        if code not in FUSED_ACTIVATIONS:
            raise UnsupportedError(f"{where}: fused activation {code} is not supported "
                                   f"({', '.join(FUSED_ACTIVATIONS.values())})")
        return FUSED_ACTIVATIONS[code]

    def act_range(self, act: str, out: _Tensor) -> dict:
        """TFLite's CalculateActivationRangeQuantized for an int8 or int16 output."""
        scale, zp = out.qparams()
        lo, hi = (INT16_MIN, INT16_MAX) if out.dtype == "int16" else (INT8_MIN, INT8_MAX)
        if act != "none":
            fmin, fmax = ACTIVATION_BOUNDS[act]
            quantize = lambda f: zp + int(tflite_round(np.float32(f) / np.float32(scale)))  # noqa: E731
            lo = max(lo, quantize(fmin))
            if fmax is not None:
                hi = min(hi, quantize(fmax))
        return {"act_min": lo, "act_max": hi}

    def float_result(self, op: str, node_id: str, inputs: dict, out_idx: int, act: str, **params) -> None:
        """A float op followed by its fused activation (a clamp, as TFLite's ActivationFunctionWithMinMax)."""
        if act == "none":
            return self.add(op, node_id, inputs, out_idx, **params)
        pre = f"{node_id}.pre_{act}"
        self.nodes.append(Node(f"{node_id}.op", op, inputs, {"y": pre}, params))
        lo, hi = ACTIVATION_BOUNDS[act]
        if hi is None:
            self.add("relu", node_id, {"x": pre}, out_idx)
        else:
            self.add("clip", node_id, {"x": pre}, out_idx, min=lo, max=hi)

    def same_quantization(self, where: str, *idx: int) -> None:
        """int8 ops that move values without rescaling need one (scale, zero point) on all their tensors."""
        ts = [self.tensors[i] for i in idx]
        if any(t.dtype in ("int8", "int16") for t in ts):
            q = {t.qparams() for t in ts}
            if len(q) != 1:
                raise UnsupportedError(f"{where}: int8 inputs and output must share scale and zero point, got {sorted(q)}")

    def types(self, where: str, idx, allowed: tuple[str, ...]) -> str:
        """The dtype shared by tensors ``idx`` (constants included), which must be one of ``allowed``."""
        dts = {self.tensors[i].dtype if i not in self.consts or self.consts[i].dtype != np.float32
               else "float32" for i in idx}
        if len(dts) != 1 or next(iter(dts)) not in allowed:
            raise UnsupportedError(f"{where}: types {sorted(dts)} are not supported (supported: {', '.join(allowed)})")
        return next(iter(dts))

    def padding(self, code: int, x: _Tensor, k: tuple, strides: tuple, dil: tuple, where: str) -> list[int]:
        if code == PADDING_VALID:
            return [0, 0, 0, 0]
        if code != PADDING_SAME:
            raise UnsupportedError(f"{where}: padding {code} is not supported")
        (pt, pb), (pl, pr) = (same_padding(x.shape[1 + a], k[a], strides[a], dil[a]) for a in range(2))
        return [pt, pl, pb, pr]

    # ------------------------------------------------------------------ conv / fully connected
    def conv(self, k, op, opts, ins, outs, where) -> None:
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
        if x.dtype == "float32" and w.dtype != np.float32:
            return self.hybrid_conv(node_id, op, self.tensors[ins[1]], inputs, outs[0], bias, act, geometry, where)
        if not self.conv_node(node_id, inputs, outs[0], x, self.tensors[ins[1]], out, bias, act, geometry, where):
            raise UnsupportedError(f"{where}: input type {x.dtype} is not supported (float32, int8, int16)")

    def hybrid_conv(self, node_id: str, op: str, w: _Tensor, inputs: dict, y: int, bias, act: str, geometry: dict,
                    where: str) -> None:
        """Dynamic-range CONV_2D (int8 filter, float32 input and output) as LiteRT: one filter scale as its
        EvalHybrid, per-channel scales that differ as its EvalHybridPerChannel; dilation, groups and
        depthwise filters are refused."""
        scales = np.atleast_1d(np.asarray(w.scale, np.float32))
        if (op != "CONV_2D" or w.dtype != "int8" or np.any(np.asarray(w.zero_point) != 0)
                or geometry["dilations"] != [1, 1] or geometry["groups"] != 1):
            raise UnsupportedError(f"{where}: dynamic-range {op} with {w.dtype} filters is supported only as CONV_2D with "
                                   "symmetric filter scales, no dilation or groups")
        if bias is not None:
            inputs["bias"] = self.weight(f"{node_id}.bias", bias.astype(np.float32))
        if np.any(scales != scales[0]):   # LiteRT takes its per-channel path only when the scales differ
            inputs["channel_scale"] = self.weight(f"{node_id}.channel_scale", scales)
        self.float_result("hybrid_conv2d", node_id, inputs, y, act, strides=geometry["strides"], pads=geometry["pads"],
                          filter_scale=float(scales[0]))

    def conv_node(self, node_id: str, inputs: dict, y: str, x: _Tensor, w: _Tensor, out: _Tensor, bias, act: str,
                  geometry: dict, where: str) -> bool:
        """A conv2d (float32 input) or qconv2d (int8 input) node over ``inputs`` (x and weight) with ``bias`` and
        the fused activation ``act``; False (nothing added) for any other input type."""
        if x.dtype == "float32":
            if bias is not None:
                inputs["bias"] = self.weight(f"{node_id}.bias", bias.astype(np.float32))
            if act in ("none", "relu", "relu6"):
                self.add("conv2d", node_id, inputs, y, activation=act, **geometry)
            else:
                self.float_result("conv2d", node_id, inputs, y, act, activation="none", **geometry)
        elif x.dtype == "int8":
            self.quantized_weights(inputs, node_id, x, w, out, bias, where)
            self.add("qconv2d", node_id, inputs, y, input_zero_point=x.qparams()[1],
                     output_zero_point=out.qparams()[1], **self.act_range(act, out), **geometry)
        elif x.dtype == "int16":
            self.weights_16x8(inputs, node_id, x, w, out, bias, where)
            pairs = [quantize_multiplier(ratio) for ratio in self.scales_16x8(inputs, x, w, out, where)]
            if max(s for _, s in pairs) > 7:
                raise UnsupportedError(f"{where}: an input * filter / output scale ratio of 128 or more is not supported "
                                       "(LiteRT's 64-bit rescale takes shifts up to 7)")
            inputs["multiplier"] = self.weight(f"{node_id}.multiplier", np.array([m for m, _ in pairs], np.int32))
            inputs["shift"] = self.weight(f"{node_id}.shift", np.array([s for _, s in pairs], np.int32))
            self.add("qconv2d_16x8", node_id, inputs, y, **self.act_range(act, out), **geometry)
        else:
            return False
        return True

    def transpose_conv(self, k, op, opts, ins, outs, where) -> None:
        """TRANSPOSE_CONV (output_shape, weights, input[, bias]) as a stride-1 conv over the input with
        stride - 1 zeros (int8: the input zero point) between pixels, padded so that output pixel o reads
        input pixel i through tap o - i * stride + pad_top, with the filter flipped: TFLite's reference
        loop, the same products and (int8) the same integer sums."""
        if opts is None or len(ins) < 3:
            raise TFLiteError(f"{where}: missing options or inputs")
        x, out = self.tensors[ins[2]], self.tensors[outs[0]]
        w = self.const(ins[1], where, "the filter")
        strides = (opts.scalar(2, "<i", 1), opts.scalar(1, "<i", 1))
        act = self.act(opts.scalar(3, "<b"), where)
        if len(x.shape) != 4 or w.ndim != 4 or w.shape[3] != x.shape[3] or min(strides) < 1:
            raise UnsupportedError(f"{where}: needs NHWC input, (out, kh, kw, in) filter and strides >= 1")
        n, h, wd, c = x.shape
        sh, sw = strides
        out_hw = out.shape[1:3]
        pads = []
        for a, (size, stride) in enumerate(((h, sh), (wd, sw))):
            kernel = w.shape[1 + a]
            if opts.scalar(0, "<b") == PADDING_VALID:
                before = 0
            else:  # TFLite's ComputePaddingWithOffset of the conv this one transposes
                total = max(0, ((out_hw[a] + stride - 1) // stride - 1) * stride + kernel - out_hw[a])
                before = total // 2
            if before > kernel - 1:
                raise UnsupportedError(f"{where}: padding {before} past the filter")
            lead = kernel - 1 - before                             # zeros before the dilated input
            span = out_hw[a] + kernel - 1                          # rows / columns the conv reads
            pads.append((lead, span - lead - size * stride))       # after: may be negative (cropped)
        node_id = f"transpose_conv_{k}"
        fill = x.qparams()[1] if x.dtype == "int8" else 0
        steps = [("reshape", {"x": self.runtime(ins[2], where)}, {"shape": [n, h, 1, wd, 1, c]}),
                 ("pad", {}, dict(pads=[[0, 0], [0, 0], [0, sh - 1], [0, 0], [0, sw - 1], [0, 0]],
                                  **({"value": fill} if fill else {}))),
                 ("reshape", {}, {"shape": [n, h * sh, wd * sw, c]}),
                 ("pad", {}, dict(pads=[[0, 0], [pads[0][0], max(pads[0][1], 0)], [pads[1][0], max(pads[1][1], 0)],
                                        [0, 0]], **({"value": fill} if fill else {})))]
        if min(pads[0][1], pads[1][1]) < 0:
            steps.append(("slice", {}, dict(axes=[1, 2], starts=[0, 0],
                                             ends=[out_hw[0] + w.shape[1] - 1, out_hw[1] + w.shape[2] - 1])))
        self.chain(f"{node_id}.dilate", steps, f"{node_id}.x")
        flipped = np.ascontiguousarray(w[:, ::-1, ::-1, :])        # (out, kh, kw, in)
        inputs = {"x": f"{node_id}.x", "weight": self.weight(f"{node_id}.weight", flipped)}
        bias = self.consts.get(ins[3]) if len(ins) > 3 and ins[3] >= 0 else None
        geometry = dict(strides=[1, 1], dilations=[1, 1], pads=[0, 0, 0, 0], groups=1)
        if (x.dtype == "float32" and w.dtype != np.float32) or \
                not self.conv_node(node_id, inputs, outs[0], x, self.tensors[ins[1]], out, bias, act, geometry, where):
            raise UnsupportedError(f"{where}: input / filter types {x.dtype} / {w.dtype} are not supported")

    def quantized_weights(self, inputs: dict, node_id: str, x: _Tensor, w: _Tensor, out: _Tensor,
                          bias, where: str) -> None:
        """int32 bias and per-channel (multiplier, shift) weights of an int8 conv / FC node."""
        if w.dtype != "int8" or out.dtype != "int8":
            raise UnsupportedError(f"{where}: int8 input needs int8 filter and output, got {w.dtype} / {out.dtype}")
        if np.any(w.zero_point != 0):
            raise UnsupportedError(f"{where}: filter zero points must be 0 (symmetric int8)")
        in_scale, out_scale = x.qparams()[0], out.qparams()[0]
        pairs = [quantize_multiplier(in_scale * float(fs) / out_scale) for fs in w.scale]  # in double, as TFLite
        if bias is not None:
            inputs["bias"] = self.weight(f"{node_id}.bias", bias.astype(np.int32))
        inputs["multiplier"] = self.weight(f"{node_id}.multiplier", np.array([m for m, _ in pairs], np.int32))
        inputs["shift"] = self.weight(f"{node_id}.shift", np.array([s for _, s in pairs], np.int32))

    def weights_16x8(self, inputs: dict, node_id: str, x: _Tensor, w: _Tensor, out: _Tensor, bias,
                     where: str) -> None:
        """Checks and int64 bias of a 16x8 conv / FC node (int16 input and output with zero point 0,
        symmetric int8 filter); an int32 bias is refused: LiteRT 2.3's reference kernels read a 16x8
        bias as int64 whatever its type, so their results do not follow from it."""
        if w.dtype != "int8" or out.dtype != "int16":
            raise UnsupportedError(f"{where}: int16 input needs an int8 filter and int16 output, got {w.dtype} / {out.dtype}")
        if x.qparams()[1] != 0 or out.qparams()[1] != 0 or np.any(w.zero_point != 0):
            raise UnsupportedError(f"{where}: 16x8 quantization needs zero points 0 (input, output and filter)")
        if bias is not None and bias.dtype != np.int64:
            raise UnsupportedError(f"{where}: a 16x8 bias must be int64, got {bias.dtype} (LiteRT 2.3's reference "
                                   "kernels read it as int64)")
        depth = int(np.prod(self.weights[inputs["weight"]].shape[1:]))   # products summed per output
        worst = depth * 128 * 32768 + (int(np.abs(bias).max()) if bias is not None and bias.size else 0)
        if worst >= ACCUMULATOR_BOUND:
            raise UnsupportedError(f"{where}: a 16x8 accumulator could reach {worst} (LiteRT's rescale assumes |acc| < 2**47)")
        if bias is not None:
            inputs["bias"] = self.weight(f"{node_id}.bias", bias.astype(np.int64))

    def scales_16x8(self, inputs: dict, x: _Tensor, w: _Tensor, out: _Tensor, where: str) -> list[float]:
        """Per output channel input_scale * filter_scale / output_scale in double (LiteRT's
        PopulateConvolutionQuantizationParams and its int16 FULLY_CONNECTED)."""
        n = self.weights[inputs["weight"]].shape[0]   # output channels (depthwise filters already transposed)
        scales = [float(v) for v in w.scale] if w.scale.size > 1 else [float(w.scale[0])] * n
        if len(scales) != n:
            raise UnsupportedError(f"{where}: {w.scale.size} filter scales for {n} output channels")
        return [x.qparams()[0] * s / out.qparams()[0] for s in scales]

    def fully_connected(self, k, op, opts, ins, outs, where) -> None:
        """FULLY_CONNECTED: x flattened to (rows, in_features) unless keep_num_dims, every fused activation."""
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        w = self.const(ins[1], where, "the weights")
        act = self.act(opts.scalar(0, "<b") if opts else 0, where)
        keep_dims = bool(opts.scalar(2, "<b")) if opts else False
        if opts is not None and opts.scalar(1, "<b"):
            raise UnsupportedError(f"{where}: shuffled weights are not supported")
        if w.ndim != 2:
            raise UnsupportedError(f"{where}: weights must be 2-D, got {list(w.shape)}")
        node_id = f"fully_connected_{k}"
        xname = self.runtime(ins[0], where)
        if keep_dims:
            if x.shape[-1] != w.shape[1]:
                raise TFLiteError(f"{where}: keep_num_dims needs x's last dim {x.shape[-1]} = in_features {w.shape[1]}")
        elif len(x.shape) != 2 or x.shape[1] != w.shape[1]:
            self.nodes.append(Node(f"{node_id}.flatten", "reshape", {"x": xname}, {"y": f"{node_id}.x"},
                                   {"shape": [-1, int(w.shape[1])]}))
            xname = f"{node_id}.x"
        inputs = {"x": xname, "weight": self.weight(f"{node_id}.weight", w)}
        bias = self.consts.get(ins[2]) if len(ins) > 2 and ins[2] >= 0 else None
        if x.dtype == "float32" and w.dtype == np.float32:
            if bias is not None:
                inputs["bias"] = self.weight(f"{node_id}.bias", bias.astype(np.float32))
            self.float_result("linear", node_id, inputs, outs[0], act)
        elif x.dtype == "float32" and w.dtype == np.int8 and out.dtype == "float32":
            # dynamic-range quantization: float activations quantized per row at run time
            wt = self.tensors[ins[1]]
            if np.any(wt.zero_point != 0) or (opts is not None and opts.scalar(3, "<b")):
                raise UnsupportedError(f"{where}: hybrid fully connected with asymmetric inputs or weights is not supported")
            if bias is not None:
                inputs["bias"] = self.weight(f"{node_id}.bias", bias.astype(np.float32))
            inputs["weight_scale"] = self.weight(f"{node_id}.weight_scale", wt.scale.astype(np.float32))
            self.float_result("hybrid_linear", node_id, inputs, outs[0], act)
        elif x.dtype == "int8":
            self.quantized_weights(inputs, node_id, x, self.tensors[ins[1]], out, bias, where)
            # TFLite's reference FULLY_CONNECTED rescales with one rounding (its convs with two)
            self.add("qlinear", node_id, inputs, outs[0], input_zero_point=x.qparams()[1],
                     output_zero_point=out.qparams()[1], rounding="single", **self.act_range(act, out))
        elif x.dtype == "int16":
            wt = self.tensors[ins[1]]
            self.weights_16x8(inputs, node_id, x, wt, out, bias, where)
            inputs["scale"] = self.weight(f"{node_id}.scale", np.array(self.scales_16x8(inputs, x, wt, out, where),
                                                                        np.float64))
            self.add("qlinear_16x8", node_id, inputs, outs[0], **self.act_range(act, out))
        else:
            raise UnsupportedError(f"{where}: input / weight types {x.dtype} / {w.dtype} are not supported "
                                   "(float32 / float32, int8 / int8, int16 / int8)")

    def batch_matmul(self, k, op, opts, ins, outs, where) -> None:
        """BATCH_MATMUL (float32, int8, int16): adj_x / adj_y as transposes of the last two axes."""
        dtype = self.types(where, ins[:2] + outs, ("float32", "int8", "int16"))
        node_id = f"batch_matmul_{k}"
        inputs = {}
        for port, idx, adj in (("a", ins[0], opts.scalar(0, "<b") if opts else 0),
                               ("b", ins[1], opts.scalar(1, "<b") if opts else 0)):
            name = self.value(idx, where)
            if adj:
                rank = len(self.tensors[idx].shape)
                perm = list(range(rank - 2)) + [rank - 1, rank - 2]
                self.nodes.append(Node(f"{node_id}.adj_{port}", "transpose", {"x": name}, {"y": f"{node_id}.{port}T"},
                                       {"perm": perm}))
                name = f"{node_id}.{port}T"
            inputs[port] = name
        if dtype == "float32":
            return self.add("matmul", node_id, inputs, outs[0])
        (sa, za), (sb, zb), (sy, zy) = (self.tensors[i].qparams() for i in (ins[0], ins[1], outs[0]))
        # TFLite's GetQuantizedConvolutionMultipler: the scale product in float32, the quotient in double
        m, shift = quantize_multiplier(float(np.float32(sa) * np.float32(sb)) / sy)
        if dtype == "int16":
            if za or zb or zy:
                raise UnsupportedError(f"{where}: int16 needs zero points 0")
            return self.add("qmatmul_16x8", node_id, inputs, outs[0], multiplier=m, shift=shift)
        self.add("qmatmul", node_id, inputs, outs[0], a_zero_point=za, b_zero_point=zb, y_zero_point=zy,
                 multiplier=m, shift=shift)

    # ------------------------------------------------------------------ pooling / resize
    def pool(self, k, op, opts, ins, outs, where) -> None:
        if opts is None:
            raise TFLiteError(f"{where}: missing options")
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        strides = (opts.scalar(2, "<i", 1), opts.scalar(1, "<i", 1))
        kernel = (opts.scalar(4, "<i", 1), opts.scalar(3, "<i", 1))
        act = self.act(opts.scalar(5, "<b"), where)
        pads = self.padding(opts.scalar(0, "<b"), x, kernel, strides, (1, 1), where)
        params = dict(kernel=list(kernel), strides=list(strides), pads=pads)
        xname = self.runtime(ins[0], where)
        node_id = f"{op.lower()}_{k}"
        if x.dtype == "float32" and op == "L2_POOL_2D":
            self.nodes.append(Node(f"{node_id}.square", "mul", {"a": xname, "b": xname}, {"y": f"{node_id}.sq"}, {}))
            self.nodes.append(Node(f"{node_id}.mean", "avg_pool2d", {"x": f"{node_id}.sq"}, {"y": f"{node_id}.ms"}, params))
            self.float_result("sqrt", node_id, {"x": f"{node_id}.ms"}, outs[0], act)
        elif x.dtype == "float32":
            pool = "avg_pool2d" if op == "AVERAGE_POOL_2D" else "max_pool2d"
            if act in ("none", "relu", "relu6"):
                self.add(pool, node_id, {"x": xname}, outs[0], activation=act, **params)
            else:
                self.float_result(pool, node_id, {"x": xname}, outs[0], act, **params)
        elif x.dtype in ("int8", "int16") and op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
            if x.qparams() != out.qparams() or out.dtype != x.dtype:
                raise UnsupportedError(f"{where}: {x.dtype} pooling must keep type, scale and zero point")
            kind = "qavg_pool2d" if op == "AVERAGE_POOL_2D" else "qmax_pool2d"
            self.add(kind + ("_16x8" if x.dtype == "int16" else ""), node_id, {"x": xname}, outs[0],
                     **self.act_range(act, out), **params)
        else:
            raise UnsupportedError(f"{where}: input type {x.dtype} is not supported")

    def resize(self, k, op, opts, ins, outs, where) -> None:
        """RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR with a constant size, as ``resize`` with TFLite's coordinates."""
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        size = self.const(ins[1], where, "the output size") if len(ins) > 1 else None
        if size is None or size.shape != (2,):
            raise UnsupportedError(f"{where}: the output size must be a constant int32[2]")
        nearest = op == "RESIZE_NEAREST_NEIGHBOR"
        o = 0 if nearest else 2  # ResizeBilinearOptions: new_height, new_width (deprecated), align_corners, half_pixel_centers
        align, half = (opts.scalar(o, "<b"), opts.scalar(o + 1, "<b")) if opts else (0, 0)
        if align and half:
            raise UnsupportedError(f"{where}: align_corners and half_pixel_centers together are not supported")
        if x.dtype not in ("float32", "int8", "int16") or out.dtype != x.dtype:
            raise UnsupportedError(f"{where}: {x.dtype} -> {out.dtype} is not supported (float32, int8, int16)")
        if x.dtype in ("int8", "int16") and x.qparams() != out.qparams():
            raise UnsupportedError(f"{where}: quantized resize must keep scale and zero point")
        if x.dtype in ("int8", "int16") and not nearest:
            return self.add("qresize_bilinear", f"{op.lower()}_{k}", {"x": self.runtime(ins[0], where)}, outs[0],
                            size=[int(v) for v in size], align_corners=bool(align), half_pixel_centers=bool(half))
        if align:
            coordinate = "tflite_align_corners"
        elif half:
            coordinate = "tflite_half_pixel_for_nn" if nearest else "tflite_half_pixel"
        else:
            coordinate = "tflite_asymmetric"
        self.add("resize", f"{op.lower()}_{k}", {"x": self.runtime(ins[0], where)}, outs[0],
                 mode="nearest" if nearest else "bilinear", coordinate=coordinate,
                 nearest_mode="round_half_up" if align else "floor", size=[int(v) for v in size])

    # ------------------------------------------------------------------ elementwise
    def binary(self, k, op, opts, ins, outs, where) -> None:
        """ADD / SUB / MUL / DIV / SQUARED_DIFFERENCE: float32 (fused activation as a clamp) or int8
        (TFLite's fixed-point rescaling, bit-exact)."""
        dtype = self.types(where, ins[:2] + outs, ("float32", "int8", "int16"))
        act = self.act(opts.scalar(0, "<b") if opts and op in ("ADD", "SUB", "MUL", "DIV") else 0, where)
        node_id = f"{op.lower()}_{k}"
        a, b = self.value(ins[0], where), self.value(ins[1], where)
        if dtype == "int16":
            return self.int16_binary(node_id, op, opts, ins, outs, act, a, b, where)
        if dtype == "float32":
            if op == "SQUARED_DIFFERENCE":
                return self.add("squared_difference", node_id, {"a": a, "b": b}, outs[0])
            return self.float_result(op.lower(), node_id, {"a": a, "b": b}, outs[0], act)
        if op not in ("ADD", "SUB", "MUL", "SQUARED_DIFFERENCE"):
            raise UnsupportedError(f"{where}: int8 {op} is not supported (int8 ADD, SUB, MUL, SQUARED_DIFFERENCE)")
        ta, tb, ty = (self.tensors[i] for i in (ins[0], ins[1], outs[0]))
        q = dict(a_scale=ta.qparams()[0], a_zero_point=ta.qparams()[1], b_scale=tb.qparams()[0],
                 b_zero_point=tb.qparams()[1], y_scale=ty.qparams()[0], y_zero_point=ty.qparams()[1])
        if op == "SUB":
            q["subtract"] = True
        kind = {"MUL": "qmul", "SQUARED_DIFFERENCE": "qsquared_difference"}.get(op, "qadd")
        self.add(kind, node_id, {"a": a, "b": b}, outs[0], **q, **self.act_range(act, ty))

    def int16_binary(self, node_id, op, opts, ins, outs, act, a, b, where) -> None:
        """int16 ADD / SUB (LiteRT's general path, or its power-of-two one when every scale is a power of two
        and the options' pot_scale_int16 asks for it) and MUL; zero points must be 0."""
        ta, tb, ty = (self.tensors[i] for i in (ins[0], ins[1], outs[0]))
        if op not in ("ADD", "SUB", "MUL"):
            raise UnsupportedError(f"{where}: int16 {op} is not supported (int16 ADD, SUB, MUL)")
        if any(t.qparams()[1] != 0 for t in (ta, tb, ty)):
            raise UnsupportedError(f"{where}: int16 needs zero points 0")
        q = dict(a_scale=ta.qparams()[0], b_scale=tb.qparams()[0], y_scale=ty.qparams()[0], **self.act_range(act, ty))
        if op == "MUL":
            return self.add("qmul_16x8", node_id, {"a": a, "b": b}, outs[0], **q)
        if opts is None:
            raise UnsupportedError(f"{where}: int16 {op} needs its options (pot_scale_int16)")
        logs = [pot_log2(t.qparams()[0]) for t in (ta, tb, ty)]
        if opts.scalar(1, "<b", 1) and None not in logs:    # pot_scale_int16 (default true) and power-of-two scales
            shifts = (logs[0] - logs[2], logs[1] - logs[2])
            if max(shifts) > 0 or min(shifts) < 0 and max(shifts) < 0 or ta.shape != tb.shape:
                raise UnsupportedError(f"{where}: power-of-two int16 {op} needs one input at the output's scale, the "
                                       f"other at a smaller one, and no broadcast (input shifts {shifts})")
            q.update(pot=True, a_shift=shifts[0], b_shift=shifts[1])
        self.add("qadd_16x8", node_id, {"a": a, "b": b}, outs[0], **q, **({"subtract": True} if op == "SUB" else {}))

    def unary(self, k, op, opts, ins, outs, where) -> None:
        """Activations and unary math: float32 onto volvox's ops; int8 as TFLite computes them (a
        rescale for the ReLUs, a 256-entry table for LOGISTIC / TANH)."""
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        node_id = f"{op.lower()}_{k}"
        xname = self.runtime(ins[0], where)
        dtype = self.types(where, ins[:1] + outs, ("float32", "int8", "int16"))
        if dtype == "int8":
            return self.int8_unary(node_id, op, opts, x, out, xname, outs[0], where)
        if dtype == "int16":
            return self.int16_unary(node_id, op, opts, x, out, xname, outs[0], where)
        if op == "RELU":
            self.add("relu", node_id, {"x": xname}, outs[0])
        elif op in ("RELU6", "RELU_N1_TO_1"):
            lo, hi = ACTIVATION_BOUNDS[op.lower()]
            self.add("clip", node_id, {"x": xname}, outs[0], min=lo, max=hi)
        elif op == "LOGISTIC":
            self.add("sigmoid", node_id, {"x": xname}, outs[0])
        elif op == "HARD_SWISH":
            self.add("hard_swish", node_id, {"x": xname}, outs[0])
        elif op == "LEAKY_RELU":
            self.add("leaky_relu", node_id, {"x": xname}, outs[0], alpha=float(opts.scalar(0, "<f") if opts else 0.0))
        elif op in ("SQRT", "RSQRT", "TANH"):
            self.add(op.lower(), node_id, {"x": xname}, outs[0])
        else:
            raise UnsupportedError(f"{where}: float32 {op} is not supported")

    def int8_unary(self, node_id, op, opts, x, out, xname, out_idx, where) -> None:
        (sx, zx), (sy, zy) = x.qparams(), out.qparams()
        if op in ("RELU", "RELU6", "RELU_N1_TO_1"):
            m, shift = quantize_multiplier(sx / sy)  # TFLite: double(input scale) / double(output scale)
            act = {"RELU": "relu", "RELU6": "relu6", "RELU_N1_TO_1": "relu_n1_to_1"}[op]
            self.add("qrescale", node_id, {"x": xname}, out_idx, input_zero_point=zx, output_zero_point=zy,
                     multiplier=m, shift=shift, **self.act_range(act, out))
        elif op == "LEAKY_RELU":
            m, shift, m_neg, shift_neg = leaky_relu_multipliers(opts, sx, sy)
            self.add("qrescale", node_id, {"x": xname}, out_idx, input_zero_point=zx, output_zero_point=zy,
                     multiplier=m, shift=shift, negative_multiplier=m_neg, negative_shift=shift_neg)
        elif op == "HARD_SWISH":
            table = hard_swish_table_int8(sx, zx, sy, zy)
            self.add("qlookup", node_id, {"x": xname, "table": self.weight(f"{node_id}.table", table)}, out_idx)
        elif op in ("LOGISTIC", "TANH"):
            fn = (lambda v: np.float32(1) / (np.float32(1) + float32_exp(-v))) if op == "LOGISTIC" else float32_tanh
            table = lut_int8(sx, zx, sy, zy, fn)
            self.add("qlookup", node_id, {"x": xname, "table": self.weight(f"{node_id}.table", table)}, out_idx)
        elif op == "RSQRT":
            table = rsqrt_table_int8(sx, zx, sy, zy)
            self.add("qlookup", node_id, {"x": xname, "table": self.weight(f"{node_id}.table", table)}, out_idx)
        else:
            raise UnsupportedError(f"{where}: int8 {op} is not supported "
                                   "(int8 RELU, RELU6, RELU_N1_TO_1, LEAKY_RELU, HARD_SWISH, LOGISTIC, TANH, RSQRT)")

    def int16_unary(self, node_id, op, opts, x, out, xname, out_idx, where) -> None:
        """int16 RELU, RELU6 and LEAKY_RELU: LiteRT's rescale by the in / out scale ratio
        (LEAKY_RELU: another for the values below zero), clamped to the activation's range; LOGISTIC and
        TANH through LiteRT's sigmoid table."""
        (sx, zx), (sy, zy) = x.qparams(), out.qparams()
        if op in ("RELU", "RELU6"):
            m, shift = quantize_multiplier(sx / sy)
            self.add("qrescale_16x8", node_id, {"x": xname}, out_idx, input_zero_point=zx, output_zero_point=zy,
                     multiplier=m, shift=shift, **self.act_range(op.lower(), out))
        elif op == "LEAKY_RELU":
            m, shift, m_neg, shift_neg = leaky_relu_multipliers(opts, sx, sy)
            self.add("qrescale_16x8", node_id, {"x": xname}, out_idx, input_zero_point=zx, output_zero_point=zy,
                     multiplier=m, shift=shift, negative_multiplier=m_neg, negative_shift=shift_neg)
        elif op in ("LOGISTIC", "TANH"):
            self.int16_sigmoid_table(node_id, op, sx, zx, sy, zy, xname, out_idx, where)
        else:
            raise UnsupportedError(f"{where}: int16 {op} is not supported (int16 RELU, RELU6, LEAKY_RELU, LOGISTIC, TANH; "
                                   "LiteRT has no int16 RELU_N1_TO_1)")

    def int16_sigmoid_table(self, node_id, op, sx, zx, sy, zy, xname, out_idx, where) -> None:
        """int16 LOGISTIC / TANH as LiteRT's reference kernels: its 256-entry sigmoid table interpolated on the
        input rescaled as its Prepare does (power-of-two input scales 2**-12, and 2**-11 for TANH, by 3 << shift;
        any other by a truncated multiplier and a rounding shift). The output must be Q0.15."""
        if zx or zy:
            raise UnsupportedError(f"{where}: int16 {op} needs zero points 0")
        # LiteRT: LOGISTIC asks for an output scale of exactly 1 / 32768, TANH for one whose CheckedLog2 is -15
        if (sy != 1 / 32768) if op == "LOGISTIC" else pot_log2(sy) != -15:
            raise UnsupportedError(f"{where}: int16 {op} needs output scale 2**-15, got {sy}")
        log2 = pot_log2(sx)
        pot_shift = None if log2 is None else 12 + log2
        if pot_shift not in ((0,) if op == "LOGISTIC" else (0, 1)):
            pot_shift = None
        multiplier, shift = sigmoid_input_rescale_16x8(sx, pot_shift)
        if multiplier > 0xFFFF:   # int16 * multiplier must stay inside int32, as LiteRT computes it
            raise UnsupportedError(f"{where}: int16 {op} input scale {sx} is too large: its table multiplier "
                                   f"{multiplier} times int16 passes int32")
        self.add("qsigmoid_16x8" if op == "LOGISTIC" else "qtanh_16x8", node_id, {"x": xname}, out_idx,
                 multiplier=multiplier, shift=shift)

    def prelu(self, k, op, opts, ins, outs, where) -> None:
        """PRELU: float32 as relu(x) + alpha * (x - relu(x)), exactly x or alpha * x as TFLite; int8 as
        TFLite's two rescalings (``qprelu``)."""
        if self.tensors[ins[0]].dtype == "int16":
            raise UnsupportedError(f"{where}: int16 PRELU is not supported: LiteRT 2.3's reference kernel scales the "
                                   "negative side by no multiplier its Prepare computes (it prepares uint8 / int8 only)")
        dtype = self.types(where, ins[:2] + outs, ("float32", "int8"))
        node_id = f"prelu_{k}"
        x, alpha = self.runtime(ins[0], where), self.value(ins[1], where)
        if dtype == "int8":
            (sx, zx), (sa, za), (sy, zy) = (self.tensors[i].qparams() for i in (ins[0], ins[1], outs[0]))
            m, shift = quantize_multiplier(sx / sy)
            m_alpha, shift_alpha = quantize_multiplier(sx * sa / sy)
            return self.add("qprelu", node_id, {"x": x, "alpha": alpha}, outs[0], input_zero_point=zx,
                            alpha_zero_point=za, output_zero_point=zy, multiplier=m, shift=shift,
                            alpha_multiplier=m_alpha, alpha_shift=shift_alpha)
        self.nodes.append(Node(f"{node_id}.pos", "relu", {"x": x}, {"y": f"{node_id}.p"}, {}))
        self.nodes.append(Node(f"{node_id}.neg", "sub", {"a": x, "b": f"{node_id}.p"}, {"y": f"{node_id}.n"}, {}))
        self.nodes.append(Node(f"{node_id}.scale", "mul", {"a": alpha, "b": f"{node_id}.n"}, {"y": f"{node_id}.an"}, {}))
        self.add("add", node_id, {"a": f"{node_id}.p", "b": f"{node_id}.an"}, outs[0])

    def softmax(self, k, op, opts, ins, outs, where) -> None:
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        node_id = f"{op.lower()}_{k}"
        xname = self.runtime(ins[0], where)
        beta = opts.scalar(0, "<f", 1.0) if opts else 1.0
        if x.dtype == "float32" and out.dtype == "float32":
            self.add("softmax", node_id, {"x": xname}, outs[0], beta=beta)
        elif x.dtype == "int8" and out.dtype == "int8":
            self.add("qsoftmax", node_id, {"x": xname}, outs[0], beta=beta,
                     input_scale=x.qparams()[0], output_scale=out.qparams()[0], output_zero_point=out.qparams()[1])
        elif x.dtype == "int16" and out.dtype == "int16":
            (sx, zx), (sy, zy) = x.qparams(), out.qparams()
            if zx or zy or abs(sy - 1 / 32768) > 0.001 / 32768 or not 1 <= len(x.shape) <= 4:
                raise UnsupportedError(f"{where}: int16 SOFTMAX needs zero points 0, output scale 2**-15 and 1-4 dims")
            self.add("qsoftmax_16x8", node_id, {"x": xname}, outs[0], beta=beta, input_scale=sx)
        else:
            raise UnsupportedError(f"{where}: softmax {x.dtype} -> {out.dtype} is not supported")

    def quantize(self, k, op, opts, ins, outs, where) -> None:
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        node_id = f"{op.lower()}_{k}"
        if op == "DEQUANTIZE" and ins[0] in self.consts:
            c = self.consts[ins[0]]
            if c.dtype == np.float16:
                self.consts[outs[0]] = c.astype(np.float32)  # exact widening
            elif c.dtype in (np.int8, np.uint8) and x.scale.size >= 1 and x.scale.size == x.zero_point.size:
                # weight-only quantization: float32 (q - zero_point) * scale per channel, as TFLite's Dequantize
                shape = [1] * c.ndim
                if x.scale.size > 1:
                    shape[x.q_axis] = x.scale.size
                zp, scale = x.zero_point.reshape(shape), x.scale.astype(np.float32).reshape(shape)
                self.consts[outs[0]] = ((c.astype(np.int64) - zp).astype(np.float32) * scale).astype(np.float32)
            else:
                raise UnsupportedError(f"{where}: constants of type {c.dtype} cannot be dequantized at import "
                                       "(float16, int8, uint8)")
        elif op == "DEQUANTIZE":
            if x.dtype not in ("int8", "int16") or out.dtype != "float32":
                raise UnsupportedError(f"{where}: only int8 / int16 -> float32 is supported, got {x.dtype} -> {out.dtype}")
            scale, zp = x.qparams()
            if x.dtype == "int16":
                if zp != 0:
                    raise UnsupportedError(f"{where}: int16 needs zero point 0, got {zp}")
                return self.add("dequantize_16x8", node_id, {"x": self.runtime(ins[0], where)}, outs[0], scale=scale)
            self.add("dequantize", node_id, {"x": self.runtime(ins[0], where)}, outs[0], scale=scale, zero_point=zp)
        elif x.dtype == "float32" and out.dtype == "int16":
            scale, zp = out.qparams()
            if zp != 0:
                raise UnsupportedError(f"{where}: int16 needs zero point 0, got {zp}")
            self.add("quantize_16x8", node_id, {"x": self.runtime(ins[0], where)}, outs[0], scale=scale)
        elif x.dtype in ("int8", "int16") and out.dtype in ("int8", "int16") and "int16" in (x.dtype, out.dtype):
            (sx, zx), (sy, zy) = x.qparams(), out.qparams()
            m, shift = quantize_multiplier(sx / sy)
            self.add("qrescale_16x8", node_id, {"x": self.runtime(ins[0], where)}, outs[0], input_zero_point=zx,
                     output_zero_point=zy, multiplier=m, shift=shift, output_dtype=out.dtype)
        elif x.dtype == "float32" and out.dtype == "int8":
            scale, zp = out.qparams()
            self.add("quantize", node_id, {"x": self.runtime(ins[0], where)}, outs[0], scale=scale, zero_point=zp)
        elif x.dtype in ("int8", "uint8") and out.dtype in ("int8", "uint8"):
            # TFLite's Requantize: (x - zp_in) * (s_in / s_out) + zp_out, the ratio in double
            (sx, zx), (sy, zy) = x.qparams(), out.qparams()
            m, shift = quantize_multiplier(sx / sy)
            self.add("qrescale", node_id, {"x": self.runtime(ins[0], where)}, outs[0], input_zero_point=zx,
                     output_zero_point=zy, multiplier=m, shift=shift, output_dtype=out.dtype)
        else:
            raise UnsupportedError(f"{where}: quantization {x.dtype} -> {out.dtype} is not supported "
                                   "(float32 -> int8 / int16, int8 / uint8 -> int8 / uint8, int8 / int16 -> int8 / int16)")

    # ------------------------------------------------------------------ data movement
    def movement(self, k, op, opts, ins, outs, where) -> None:
        """Ops that move values without computing on them: any dtype, int8 / int16 with one (scale, zero point)."""
        data_in = ins if op in ("CONCATENATION", "PACK") else ins[1:2] if op == "SPLIT" else ins[:1]  # value inputs
        x = self.tensors[data_in[0]]
        node_id = f"{op.lower()}_{k}"
        self.types(where, data_in + outs, ("float32", "int8", "int16", "int32"))
        if x.dtype in ("int8", "int16"):
            self.same_quantization(where, *data_in, *outs)
        if op in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
            self.add("reshape", node_id, {"x": self.value(ins[0], where)}, outs[0],
                     shape=list(self.tensors[outs[0]].shape))
        elif op == "TRANSPOSE":
            perm = self.const(ins[1], where, "the permutation")
            self.add("transpose", node_id, {"x": self.value(ins[0], where)}, outs[0], perm=[int(v) for v in perm])
        elif op in ("CONCATENATION", "PACK"):
            self.concat(k, op, opts, ins, outs, where, node_id)
        elif op in ("PAD", "PADV2"):
            pads = self.const(ins[1], where, "paddings").astype(np.int64)
            if pads.shape != (len(x.shape), 2) or pads.min() < 0:
                raise UnsupportedError(f"{where}: paddings must be non-negative int[{len(x.shape)}, 2], got {pads.tolist()}")
            if op == "PADV2" and len(ins) > 2 and ins[2] >= 0:
                fill = self.const(ins[2], where, "the pad value").reshape(-1)[0].item()
            else:
                fill = x.qparams()[1] if x.dtype in ("int8", "int16") else 0
            self.add("pad", node_id, {"x": self.runtime(ins[0], where)}, outs[0], pads=pads.tolist(),
                     **({"value": fill} if fill else {}))
        elif op == "SLICE":
            begin = [int(v) for v in self.const(ins[1], where, "begin")]
            size = [int(v) for v in self.const(ins[2], where, "size")]
            ends = [x.shape[a] if s == -1 else b + s for a, (b, s) in enumerate(zip(begin, size))]
            self.add("slice", node_id, {"x": self.runtime(ins[0], where)}, outs[0], axes=list(range(len(begin))),
                     starts=begin, ends=ends)
        elif op == "STRIDED_SLICE":
            self.strided_slice(k, opts, ins, outs, where, node_id)
        elif op in ("SPLIT", "SPLIT_V", "UNPACK"):
            self.split(k, op, opts, ins, outs, where, node_id)
        elif op in ("SPACE_TO_DEPTH", "DEPTH_TO_SPACE"):
            block = opts.scalar(0, "<i") if opts else 0
            n, h, w, c = x.shape
            if block < 1 or len(x.shape) != 4:
                raise UnsupportedError(f"{where}: needs NHWC input and block size >= 1, got {x.shape}, {block}")
            if op == "SPACE_TO_DEPTH":
                six = [n, h // block, block, w // block, block, c]
            else:
                six = [n, h, w, block, block, c // (block * block)]
            self.chain(node_id, [("reshape", {"x": self.runtime(ins[0], where)}, {"shape": six}),
                                 ("transpose", {}, {"perm": [0, 1, 3, 2, 4, 5]}),
                                 ("reshape", {}, {"shape": list(self.tensors[outs[0]].shape)})], self.names[outs[0]])
        else:
            raise UnsupportedError(f"{where}: op {op} is not supported")

    def concat(self, k, op, opts, ins, outs, where, node_id) -> None:
        """CONCATENATION and PACK (each input given a new axis first)."""
        if len(ins) > MAX_CONCAT_INPUTS:
            raise UnsupportedError(f"{where}: {len(ins)} inputs (at most {MAX_CONCAT_INPUTS})")
        out = self.tensors[outs[0]]
        if op == "PACK":
            axis = (opts.scalar(1, "<i") if opts else 0) % len(out.shape)
            inputs = {}
            for j, i in enumerate(ins):
                shape = list(self.tensors[i].shape)
                shape.insert(axis, 1)
                self.nodes.append(Node(f"{node_id}.expand{j}", "reshape", {"x": self.value(i, where)},
                                       {"y": f"{node_id}.x{j}"}, {"shape": shape}))
                inputs[f"x{j}"] = f"{node_id}.x{j}"
            return self.add("concat", node_id, inputs, outs[0], axis=axis)
        axis = opts.scalar(0, "<i") if opts else 0
        act = self.act(opts.scalar(1, "<b") if opts else 0, where)
        if act != "none":
            raise UnsupportedError(f"{where}: fused {act} on a concatenation is not supported (LiteRT refuses it too)")
        self.add("concat", node_id, {f"x{j}": self.value(i, where) for j, i in enumerate(ins)}, outs[0], axis=axis)

    def strided_slice(self, k, opts, ins, outs, where, node_id) -> None:
        """STRIDED_SLICE with every mask: the spec entries walk the input's axes (an ellipsis spans the
        axes the others leave, a new axis consumes none), each sliced axis becomes one ``slice`` axis, and
        a reshape to the file's output shape adds the new axes and drops the shrunk ones."""
        x = self.tensors[ins[0]]
        begin, end, strides = (self.const(i, where, what).astype(np.int64).reshape(-1).tolist()
                               for i, what in zip(ins[1:4], ("begin", "end", "strides")))
        begin_mask, end_mask, ellipsis, new_axis, shrink = (opts.scalar(f, "<i") if opts else 0 for f in range(5))
        if opts is not None and opts.scalar(5, "<b"):
            raise UnsupportedError(f"{where}: offset (end relative to begin) is not supported")
        if not len(begin) == len(end) == len(strides) or 0 in strides or bin(ellipsis).count("1") > 1:
            raise UnsupportedError(f"{where}: begin / end / strides must have one nonzero entry per spec axis, "
                                   "and at most one ellipsis")
        consumed = sum(1 for i in range(len(begin)) if not (new_axis >> i & 1) and not (ellipsis >> i & 1))
        axes, starts, ends, steps, a = [], [], [], [], 0
        for i, (b, e, st) in enumerate(zip(begin, end, strides)):
            if ellipsis >> i & 1:
                a += len(x.shape) - consumed
                continue
            if new_axis >> i & 1:
                continue
            if a >= len(x.shape):
                raise TFLiteError(f"{where}: the slice spec has more axes than the input {list(x.shape)}")
            n = x.shape[a]
            if shrink >> i & 1:
                b = b + n if b < 0 else b
                e, st = b + 1, 1
            else:
                if begin_mask >> i & 1:
                    b = 0 if st > 0 else n - 1
                if end_mask >> i & 1:
                    e = n if st > 0 else -n - 1
            axes.append(a)
            starts.append(b)
            ends.append(e)
            steps.append(st)
            a += 1
        self.chain(node_id, [("slice", {"x": self.runtime(ins[0], where)}, dict(axes=axes, starts=starts, ends=ends,
                                                                                  steps=steps)),
                             ("reshape", {}, {"shape": list(self.tensors[outs[0]].shape)})], self.names[outs[0]])

    def split(self, k, op, opts, ins, outs, where, node_id) -> None:
        """SPLIT (axis, x), SPLIT_V (x, sizes, axis) and UNPACK: one slice per output."""
        if op == "SPLIT":
            xi, axis = ins[1], int(self.const(ins[0], where, "the axis").reshape(-1)[0])
        elif op == "SPLIT_V":
            xi, axis = ins[0], int(self.const(ins[2], where, "the axis").reshape(-1)[0])
        else:
            xi, axis = ins[0], opts.scalar(1, "<i") if opts else 0
        x = self.tensors[xi]
        axis %= len(x.shape)
        xname = self.runtime(xi, where)
        start = 0
        for j, o in enumerate(outs):
            width = 1 if op == "UNPACK" else self.tensors[o].shape[axis]
            params = dict(axes=[axis], starts=[start], ends=[start + width])
            if op == "UNPACK":
                self.nodes.append(Node(f"{node_id}.slice{j}", "slice", {"x": xname}, {"y": f"{node_id}.s{j}"}, params))
                self.add("reshape", f"{node_id}.{j}", {"x": f"{node_id}.s{j}"}, o, shape=list(self.tensors[o].shape))
            else:
                self.add("slice", f"{node_id}.{j}", {"x": xname}, o, **params)
            start += width
        if start != x.shape[axis]:
            raise TFLiteError(f"{where}: outputs cover {start} of {x.shape[axis]} entries on axis {axis}")

    def reduce(self, k, op, opts, ins, outs, where) -> None:
        """MEAN over constant axes: float32, or int8 / int16 as TFLite's reference kernel."""
        dtype = self.types(where, ins[:1] + outs, ("float32", "int8", "int16"))
        x = self.tensors[ins[0]]
        axes = sorted({int(a) % len(x.shape) for a in self.const(ins[1], where, "the axes").reshape(-1)})
        keep = bool(opts.scalar(0, "<b")) if opts else False
        if op != "MEAN":
            raise UnsupportedError(f"{where}: op {op} is not supported")
        xname = self.runtime(ins[0], where)
        if dtype == "float32":
            return self.add("reduce_mean", f"mean_{k}", {"x": xname}, outs[0], axes=axes, keepdims=keep)
        if not axes:
            raise UnsupportedError(f"{where}: {dtype} MEAN over no axis is not supported")
        (sx, zx), (sy, zy) = x.qparams(), self.tensors[outs[0]].qparams()
        if dtype == "int16":
            if zx or zy:
                raise UnsupportedError(f"{where}: int16 needs zero points 0")
            return self.add("qmean_16x8", f"mean_{k}", {"x": xname}, outs[0], axes=axes, keepdims=keep,
                            input_scale=sx, output_scale=sy)
        self.add("qmean", f"mean_{k}", {"x": xname}, outs[0], axes=axes, keepdims=keep,
                 input_scale=sx, input_zero_point=zx, output_scale=sy, output_zero_point=zy)

    def generic(self, k, op, opts, ins, outs, where) -> None:
        """Ops volvox's generic families compute (ops/math.py, reduce.py, tensor.py), in float32 and int32;
        int8 where TFLite moves or compares values without rescaling (one scale and zero point)."""
        node_id = f"{op.lower()}_{k}"
        x, out = self.tensors[ins[0]], self.tensors[outs[0]]
        if op in ("MAXIMUM", "MINIMUM"):
            dtype = self.types(where, ins[:2] + outs, ("float32", "int8", "int16", "int32"))
            if dtype in ("int8", "int16"):
                self.same_quantization(where, ins[0], ins[1], outs[0])
            return self.add(op.lower(), node_id, {"a": self.value(ins[0], where), "b": self.value(ins[1], where)},
                            outs[0])
        if op == "SUM" and x.dtype in ("int8", "int16"):
            raise UnsupportedError(f"{where}: {x.dtype} SUM is not supported (int8 with rescaling: LiteRT 2.3's "
                                   "reference kernel answers mostly -1 whatever the input)")
        if op in ("SUM", "REDUCE_MAX"):
            dtype = self.types(where, ins[:1] + outs, ("float32", "int32") + (("int8", "int16") if op == "REDUCE_MAX" else ()))
            if dtype in ("int8", "int16"):
                self.same_quantization(where, ins[0], outs[0])
            axes = sorted({int(a) % len(x.shape) for a in self.const(ins[1], where, "the axes").reshape(-1)})
            if not axes:
                raise UnsupportedError(f"{where}: a reduction over no axis is not supported")
            return self.add("reduce_sum" if op == "SUM" else "reduce_max", node_id, {"x": self.runtime(ins[0], where)},
                            outs[0], axes=axes, keepdims=bool(opts.scalar(0, "<b")) if opts else False)
        if op == "ARG_MAX":
            self.types(where, ins[:1], ("float32", "int8", "int32"))
            axis = int(self.const(ins[1], where, "the axis").reshape(-1)[0])
            if out.dtype not in ("int32", "int64"):
                raise UnsupportedError(f"{where}: output type {out.dtype} is not supported (int32, int64)")
            inputs = {"x": self.runtime(ins[0], where)}
            if out.dtype == "int64":
                return self.add("argmax", node_id, inputs, outs[0], axis=axis, keepdims=False)
            self.nodes.append(Node(f"{node_id}.argmax", "argmax", inputs, {"y": f"{node_id}.i64"},
                                   {"axis": axis, "keepdims": False}))
            return self.add("cast", node_id, {"x": f"{node_id}.i64"}, outs[0], to="int32")
        if op == "CAST":
            # LiteRT casts the stored values and ignores quantization: an int8 source gives its raw integers
            if out.dtype == "int8":
                raise UnsupportedError(f"{where}: CAST to int8 is not supported")
            return self.add("cast", node_id, {"x": self.value(ins[0], where)}, outs[0], to=out.dtype)
        if op == "GATHER":
            self.types(where, ins[:1] + outs, ("float32", "int8", "int16", "int32"))
            if x.dtype in ("int8", "int16"):
                self.same_quantization(where, ins[0], outs[0])
            indices = self.tensors[ins[1]]
            axis = (opts.scalar(0, "<i") if opts else 0) % len(x.shape)
            batch = (opts.scalar(1, "<i") if opts else 0) % (len(indices.shape) + 1)   # negative counts from the end
            return self.add("gather", node_id, {"x": self.value(ins[0], where), "indices": self.value(ins[1], where)},
                            outs[0], axis=axis, batch_dims=batch)
        if op == "LOG_SOFTMAX":
            dtype = self.types(where, ins[:1] + outs, ("float32", "int8"))
            if dtype == "int8":
                (sx, _), (sy, zy) = x.qparams(), out.qparams()
                if sy != 16 / 256 or zy != 127:
                    raise UnsupportedError(f"{where}: int8 LOG_SOFTMAX needs output scale 16/256 and zero point 127")
                return self.add("qlog_softmax", node_id, {"x": self.runtime(ins[0], where)}, outs[0],
                                **qlog_softmax_params(sx))
            return self.add("log_softmax", node_id, {"x": self.runtime(ins[0], where)}, outs[0], axis=-1)
        if op == "L2_NORMALIZATION":
            # TFLite: x / max(sqrt(sum(x * x)), 1e-6) over the last axis; int8 in fixed point, out in 1/128 steps
            dtype = self.types(where, ins[:1] + outs, ("float32", "int8"))
            xname = self.runtime(ins[0], where)
            if dtype == "int8":
                (_, zx), (sy, zy) = x.qparams(), self.tensors[outs[0]].qparams()
                if sy != 1 / 128 or zy != 0:
                    raise UnsupportedError(f"{where}: int8 L2_NORMALIZATION needs output scale 1/128 and zero point 0")
                return self.add("ql2_normalize", node_id, {"x": xname}, outs[0], input_zero_point=zx)
            eps = self.weight(f"{node_id}.epsilon", np.array(1e-6, np.float32))
            self.nodes.append(Node(f"{node_id}.square", "mul", {"a": xname, "b": xname}, {"y": f"{node_id}.sq"}, {}))
            self.nodes.append(Node(f"{node_id}.sum", "reduce_sum", {"x": f"{node_id}.sq"}, {"y": f"{node_id}.ss"},
                                   {"axes": [len(x.shape) - 1], "keepdims": True}))
            self.nodes.append(Node(f"{node_id}.sqrt", "sqrt", {"x": f"{node_id}.ss"}, {"y": f"{node_id}.norm"}, {}))
            self.nodes.append(Node(f"{node_id}.floor", "maximum", {"a": f"{node_id}.norm", "b": eps},
                                   {"y": f"{node_id}.safe"}, {}))
            return self.add("div", node_id, {"a": xname, "b": f"{node_id}.safe"}, outs[0])
        if op == "MIRROR_PAD":
            return self.mirror_pad(k, opts, ins, outs, where, node_id)
        raise UnsupportedError(f"{where}: op {op} is not supported")

    def mirror_pad(self, k, opts, ins, outs, where, node_id) -> None:
        """MIRROR_PAD: REFLECT onto mirror_pad; SYMMETRIC (the border repeated) as reversed slices
        concatenated around the input, axis by axis."""
        x = self.tensors[ins[0]]
        self.types(where, ins[:1] + outs, ("float32", "int8", "int32"))
        if x.dtype == "int8":
            self.same_quantization(where, ins[0], outs[0])
        pads = self.const(ins[1], where, "paddings").astype(np.int64)
        if pads.shape != (len(x.shape), 2) or pads.min() < 0:
            raise UnsupportedError(f"{where}: paddings must be non-negative int[{len(x.shape)}, 2], got {pads.tolist()}")
        symmetric = bool(opts.scalar(0, "<b")) if opts else False
        xname = self.runtime(ins[0], where)
        if not symmetric:
            return self.add("mirror_pad", node_id, {"x": xname}, outs[0], pads=pads.tolist(), mode="reflect")
        if any(max(a, b) > n for n, (a, b) in zip(x.shape, pads.tolist())):
            raise UnsupportedError(f"{where}: SYMMETRIC paddings {pads.tolist()} exceed the input {list(x.shape)}")
        shape = list(x.shape)
        axes = [ax for ax, (a, b) in enumerate(pads.tolist()) if a or b]
        if not axes:
            return self.add("reshape", node_id, {"x": xname}, outs[0], shape=shape)
        for j, ax in enumerate(axes):
            n, (a, b) = shape[ax], pads[ax].tolist()
            parts = {}
            if a:  # x[a-1::-1] along ax
                parts["before"] = dict(axes=[ax], starts=[a - 1], ends=[-n - 1], steps=[-1])
            if b:  # x[n-1:n-b-1:-1] along ax
                parts["after"] = dict(axes=[ax], starts=[n - 1], ends=[n - b - 1 if n - b - 1 >= 0 else -n - 1], steps=[-1])
            inputs = {}
            for part in ("before", "after"):
                if part in parts:
                    self.nodes.append(Node(f"{node_id}.{ax}.{part}", "slice", {"x": xname}, {"y": f"{node_id}.{ax}.{part}"},
                                           parts[part]))
            names = ([f"{node_id}.{ax}.before"] if a else []) + [xname] + ([f"{node_id}.{ax}.after"] if b else [])
            inputs = {f"x{i}": name for i, name in enumerate(names)}
            last = j == len(axes) - 1
            if last:
                self.add("concat", node_id, inputs, outs[0], axis=ax)
            else:
                self.nodes.append(Node(f"{node_id}.{ax}", "concat", inputs, {"y": f"{node_id}.{ax}.y"}, {"axis": ax}))
                xname = f"{node_id}.{ax}.y"
            shape[ax] = n + a + b

    # ------------------------------------------------------------------ dispatch
    HANDLERS = {
        "CONV_2D": conv, "DEPTHWISE_CONV_2D": conv, "TRANSPOSE_CONV": transpose_conv, "FULLY_CONNECTED": fully_connected, "BATCH_MATMUL": batch_matmul,
        "AVERAGE_POOL_2D": pool, "MAX_POOL_2D": pool, "L2_POOL_2D": pool,
        "RESIZE_BILINEAR": resize, "RESIZE_NEAREST_NEIGHBOR": resize,
        "ADD": binary, "SUB": binary, "MUL": binary, "DIV": binary, "SQUARED_DIFFERENCE": binary,
        "RELU": unary, "RELU6": unary, "RELU_N1_TO_1": unary, "LOGISTIC": unary, "TANH": unary, "HARD_SWISH": unary,
        "LEAKY_RELU": unary, "SQRT": unary, "RSQRT": unary, "PRELU": prelu,
        "SOFTMAX": softmax, "QUANTIZE": quantize, "DEQUANTIZE": quantize,
        "RESHAPE": movement, "SQUEEZE": movement, "EXPAND_DIMS": movement, "TRANSPOSE": movement,
        "CONCATENATION": movement, "PACK": movement, "UNPACK": movement, "PAD": movement, "PADV2": movement,
        "SLICE": movement, "STRIDED_SLICE": movement, "SPLIT": movement, "SPLIT_V": movement,
        "SPACE_TO_DEPTH": movement, "DEPTH_TO_SPACE": movement, "MEAN": reduce,
        "MAXIMUM": generic, "MINIMUM": generic, "SUM": generic, "REDUCE_MAX": generic, "ARG_MAX": generic,
        "CAST": generic, "GATHER": generic, "LOG_SOFTMAX": generic, "L2_NORMALIZATION": generic, "MIRROR_PAD": generic,
    }

    def translate(self, k: int, op: str, version: int, opts: Table | None, ins: list[int], outs: list[int]) -> None:
        """Emit the node(s) for operator ``k``."""
        where = f"{self.path}: operator {k} ({op} v{version})"
        handler = self.HANDLERS.get(op)
        if handler is None:
            raise UnsupportedError(f"{where}: op {op} is not supported")
        if version > MAX_VERSIONS.get(op, 1):
            raise UnsupportedError(f"{where}: version {version} of {op} is not supported (newest known: "
                                   f"v{MAX_VERSIONS.get(op, 1)})")
        if len(outs) != 1 and op not in ("SPLIT", "SPLIT_V", "UNPACK"):
            raise TFLiteError(f"{where}: {len(outs)} outputs, expected 1")
        handler(self, k, op, opts, ins, outs, where)


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
    codes = []  # (op name, version) per operator code
    for oc in model.tables(1, "operator_codes"):
        code = max(oc.scalar(0, "<b"), oc.scalar(3, "<i"))
        name = BUILTIN_NAMES.get(code) or (f"custom op {oc.string(1)!r}" if code == 32 else f"builtin op {code}")
        codes.append((name, oc.scalar(2, "<i", 1)))
    subgraphs = model.tables(2, "subgraphs")
    if not subgraphs:
        raise TFLiteError(f"{path}: no subgraphs")
    sg = subgraphs[0]
    tensors = [_Tensor(t, i, buffers, file, path) for i, t in enumerate(sg.tables(0, "subgraphs[0].tensors"))]
    imp = _Importer(path, tensors)
    for k, op in enumerate(sg.tables(3, "subgraphs[0].operators")):
        idx = op.scalar(0, "<I")
        if idx >= len(codes):
            raise TFLiteError(f"{path}: operator {k}: opcode index {idx} of {len(codes)}")
        ins = [int(i) for i in op.array(1, "<i4")]
        outs = [int(i) for i in op.array(2, "<i4")]
        name, version = codes[idx]
        if not ins or not outs or not all(-1 <= i < len(tensors) for i in ins + outs) or min(outs) < 0:
            raise TFLiteError(f"{path}: operator {k} ({name}): bad tensor indices {ins} -> {outs}")
        imp.translate(k, name, version, op.table(4, f"operators[{k}].builtin_options"), ins, outs)

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
    for t in tensors:  # every tensor volvox computes has the shape and type the file gives it
        got = graph.specs.get(imp.names[t.index])
        if got is not None and imp.names[t.index] not in graph.weights and (tuple(got.shape) != t.shape or got.dtype != t.dtype):
            raise TFLiteError(f"{path}: tensor {t.name!r}: volvox infers {got.describe()}, the file says "
                              f"{t.dtype}{list(t.shape)}")
    weights = {n: imp.weights[n] for n in graph.weights}
    meta = {"format": "tflite", "inputs": {s.name: _qmeta(tensors, imp, s.name) for s in inputs}}
    return graph, weights, meta


def _qmeta(tensors: list[_Tensor], imp: _Importer, name: str) -> dict:
    t = tensors[[imp.names[i] for i in range(len(tensors))].index(name)]
    return {"scale": float(t.scale[0]), "zero_point": int(t.zero_point[0])} if t.scale.size == 1 else {}
