"""A small FlatBuffers writer and the TFLite tables built with it (tensorflow/lite/schema/schema.fbs).

Used by tools/make_bad_files.py (the tiny TFLite seed and its broken variants), tools/export_tflite.py
(volvox graphs as .tflite files) and the TFLite tests. Nothing here imports volvox: files are built
from the format's specification alone.
"""

from __future__ import annotations

import struct

import numpy as np


class FB:
    """A flatbuffer value for ``build_flatbuffer``: "table" (fields by slot), "vector" (scalars of
    struct code ``fmt``, or raw bytes for a ubyte vector), "tables" (a vector of tables) or "string"."""

    def __init__(self, kind: str, value, fmt: str = ""):
        self.kind, self.value, self.fmt = kind, value, fmt


def fb_table(*fields) -> FB:
    """A table; each field is None (absent), (struct code, scalar) or an FB (stored as a uoffset)."""
    return FB("table", fields)


def build_flatbuffer(root_table: FB, ident: bytes) -> tuple[bytes, dict[str, list[int]]]:
    """Serialize front to back (every uoffset points forward); return the bytes and the positions
    of every uoffset, vector/string length and table soffset (for the fuzzers)."""
    out = bytearray(struct.pack("<I", 0) + ident)
    at: dict[str, list[int]] = {"uoffset": [], "length": [], "soffset": []}

    def align(n: int) -> None:
        out.extend(bytes(-len(out) % n))

    def link(slot: int, target: int) -> None:
        struct.pack_into("<I", out, slot, target - slot)
        at["uoffset"].append(slot)

    def write(obj: FB) -> int:
        if obj.kind == "table":
            layout, size = [], 4  # field offsets from the table start; the soffset comes first
            for f in obj.value:
                n = 0 if f is None else 4 if isinstance(f, FB) else struct.calcsize("<" + f[0])
                size += -size % max(n, 1)
                layout.append(size if n else 0)
                size += n
            align(8)
            vtable = len(out)
            out.extend(struct.pack(f"<HH{len(layout)}H", 4 + 2 * len(layout), size, *layout))
            align(8)
            table = len(out)
            out.extend(bytes(size))
            struct.pack_into("<i", out, table, table - vtable)
            at["soffset"].append(table)
            for f, pos in zip(obj.value, layout):
                if f is not None and not isinstance(f, FB):
                    struct.pack_into("<" + f[0], out, table + pos, f[1])
            for f, pos in zip(obj.value, layout):
                if isinstance(f, FB):
                    link(table + pos, write(f))
            return table
        if obj.kind == "string":
            align(4)
            start = len(out)
            at["length"].append(start)
            raw = obj.value.encode()
            out.extend(struct.pack("<I", len(raw)) + raw + b"\0")
            return start
        out.extend(bytes(-(len(out) + 4) % 16))  # vector data 16-byte aligned (TFLite buffers)
        start = len(out)
        at["length"].append(start)
        out.extend(struct.pack("<I", len(obj.value)))
        if obj.kind == "vector":
            raw = obj.value if isinstance(obj.value, bytes) else struct.pack(f"<{len(obj.value)}{obj.fmt}", *obj.value)
            out.extend(raw)
            return start
        out.extend(bytes(4 * len(obj.value)))
        for k, child in enumerate(obj.value):
            link(start + 4 + 4 * k, write(child))
        return start

    link(0, write(root_table))
    return bytes(out), at


def fb_vec(fmt: str, values) -> FB:
    """A vector of scalars of struct code ``fmt``; ``bytes`` values are a ubyte vector stored as they are."""
    return FB("vector", values if isinstance(values, bytes) else list(values), fmt)


def tfl_quantization(scale, zero_point, axis: int = 0) -> FB:
    """A TFLite QuantizationParameters: min, max (absent), scale, zero_point, details (absent, two slots),
    quantized_dimension."""
    return fb_table(None, None, fb_vec("f", scale), fb_vec("q", zero_point), None, None, ("i", axis))


def tfl_tensor(name: str, shape, type_code: int, buffer: int, quantization: FB | None = None) -> FB:
    """A TFLite Tensor: shape, type, buffer, name, quantization (the field only when given)."""
    fields = [fb_vec("i", shape), ("b", type_code), ("I", buffer), FB("string", name)]
    return fb_table(*fields, *([quantization] if quantization is not None else []))


def tfl_op(opcode: int, ins, outs, options_type: int = 0, options: FB | None = None) -> FB:
    """A TFLite Operator: opcode_index, inputs, outputs, builtin_options_type, builtin_options."""
    return fb_table(("I", opcode), fb_vec("i", ins), fb_vec("i", outs),
                    ("B", options_type) if options else None, options)


def tfl_opcode(code: int, version: int = 1) -> FB:
    """A TFLite OperatorCode: deprecated_builtin_code (capped at 127), custom_code, version, builtin_code."""
    return fb_table(("b", min(code, 127)), None, ("i", version), ("i", code))


def tfl_model(codes: list[FB], tensors: list[FB], inputs, outputs, operators: list[FB], buffers: list[FB],
              description: str) -> FB:
    """A TFLite Model (version 3) with one SubGraph "main"; ``buffers[0]`` must be the empty sentinel."""
    subgraph = fb_table(FB("tables", tensors), fb_vec("i", inputs), fb_vec("i", outputs),
                        FB("tables", operators), FB("string", "main"))
    # Model: version, operator_codes, subgraphs, description, buffers
    return fb_table(("I", 3), FB("tables", codes), FB("tables", [subgraph]), FB("string", description),
                    FB("tables", buffers))


# BuiltinOperator codes (schema.fbs) of the operators the tests and tools write
BUILTIN_CODES = {
    "ADD": 0, "AVERAGE_POOL_2D": 1, "CONCATENATION": 2, "CONV_2D": 3, "DEPTHWISE_CONV_2D": 4, "DEPTH_TO_SPACE": 5,
    "DEQUANTIZE": 6, "FULLY_CONNECTED": 9, "L2_NORMALIZATION": 11, "L2_POOL_2D": 12, "LOGISTIC": 14,
    "MAX_POOL_2D": 17, "MUL": 18, "RELU": 19, "RELU_N1_TO_1": 20, "RELU6": 21, "RESHAPE": 22,
    "RESIZE_BILINEAR": 23, "SOFTMAX": 25, "SPACE_TO_DEPTH": 26, "TANH": 28, "PAD": 34, "GATHER": 36,
    "TRANSPOSE": 39, "MEAN": 40, "SUB": 41, "DIV": 42, "SQUEEZE": 43, "STRIDED_SLICE": 45, "EXP": 47, "SPLIT": 49,
    "LOG_SOFTMAX": 50, "CAST": 53, "PRELU": 54, "MAXIMUM": 55, "ARG_MAX": 56, "MINIMUM": 57, "PADV2": 60,
    "SLICE": 65, "TRANSPOSE_CONV": 67, "EXPAND_DIMS": 70, "SUM": 74, "SQRT": 75, "RSQRT": 76, "REDUCE_MAX": 82,
    "PACK": 83, "UNPACK": 88, "RESIZE_NEAREST_NEIGHBOR": 97, "LEAKY_RELU": 98, "SQUARED_DIFFERENCE": 99,
    "MIRROR_PAD": 100, "SPLIT_V": 102, "QUANTIZE": 114, "HARD_SWISH": 117, "BATCH_MATMUL": 126,
}

# BuiltinOptions union member -> its type code (its 1-based position in the union, schema.fbs)
OPTION_TYPES = {
    "Conv2DOptions": 1, "DepthwiseConv2DOptions": 2, "Pool2DOptions": 5, "FullyConnectedOptions": 8,
    "SoftmaxOptions": 9, "ConcatenationOptions": 10, "AddOptions": 11, "L2NormOptions": 12,
    "ResizeBilinearOptions": 15, "ReshapeOptions": 17, "SpaceToDepthOptions": 19, "MulOptions": 21,
    "PadOptions": 22, "GatherOptions": 23, "TransposeOptions": 26, "ReducerOptions": 27, "SubOptions": 28,
    "DivOptions": 29, "SqueezeOptions": 30, "StridedSliceOptions": 32, "SplitOptions": 35,
    "LogSoftmaxOptions": 36, "CastOptions": 37, "MaximumMinimumOptions": 39, "ArgMaxOptions": 40,
    "PadV2Options": 43, "SliceOptions": 48, "TransposeConvOptions": 49, "ExpandDimsOptions": 52,
    "PackOptions": 59, "UnpackOptions": 64, "ResizeNearestNeighborOptions": 74, "LeakyReluOptions": 75,
    "SquaredDifferenceOptions": 76, "MirrorPadOptions": 77, "SplitVOptions": 79, "QuantizeOptions": 89,
    "HardSwishOptions": 91, "DepthToSpaceOptions": 94, "BatchMatMulOptions": 101,
}

# TensorType codes (schema.fbs) by numpy dtype name
TYPE_CODES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7, "int8": 9, "uint16": 16}


class ModelBuilder:
    """A one-subgraph TFLite model built tensor by tensor and operator by operator (single-op test
    models, conformance cases). Tensors are numbered in the order they are added."""

    def __init__(self):
        self.tensors: list[FB] = []
        self.buffers: list[FB] = [fb_table()]       # buffer 0: the empty sentinel of runtime tensors
        self.codes: dict[tuple[int, int], int] = {}  # (builtin code, version) -> operator_codes index
        self.operators: list[FB] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    def tensor(self, shape, dtype: str = "float32", data=None, scale=None, zero_point=None, axis: int = 0,
               name: str | None = None) -> int:
        """Index of a new tensor; ``data`` (array-like) makes it a constant, ``scale`` / ``zero_point``
        (scalars or per-channel sequences along ``axis``) quantize it."""
        buffer = 0
        if data is not None:
            raw = np.ascontiguousarray(np.asarray(data).astype(np.dtype(dtype).newbyteorder("<"))).tobytes()
            buffer = len(self.buffers)
            self.buffers.append(fb_table(fb_vec("B", raw)))
        quant = None
        if scale is not None:
            scales = list(scale) if hasattr(scale, "__len__") else [scale]
            zps = list(zero_point) if hasattr(zero_point, "__len__") else [zero_point or 0] * len(scales)
            quant = tfl_quantization([float(v) for v in scales], [int(v) for v in zps], axis)
        self.tensors.append(tfl_tensor(name or f"t{len(self.tensors)}", [int(d) for d in shape], TYPE_CODES[dtype],
                                       buffer, quant))
        return len(self.tensors) - 1

    def input(self, shape, dtype: str = "float32", **quant) -> int:
        """A new runtime tensor that is a graph input."""
        index = self.tensor(shape, dtype, **quant)
        self.inputs.append(index)
        return index

    def output(self, shape, dtype: str = "float32", **quant) -> int:
        """A new runtime tensor that is a graph output."""
        index = self.tensor(shape, dtype, **quant)
        self.outputs.append(index)
        return index

    def op(self, name: str, ins, outs, options: str | None = None, fields=(), version: int = 1) -> None:
        """Append builtin operator ``name`` (BUILTIN_CODES) with its ``options`` table (an OPTION_TYPES
        name) made of ``fields`` (fb_table fields: None, (struct code, scalar) or an FB)."""
        code = self.codes.setdefault((BUILTIN_CODES[name], version), len(self.codes))
        table = fb_table(*fields) if options else None
        self.operators.append(tfl_op(code, list(ins), list(outs), OPTION_TYPES[options] if options else 0, table))

    def build(self, description: str = "volvox tflite_writer") -> bytes:
        """The .tflite bytes."""
        codes = [tfl_opcode(code, version) for code, version in self.codes]
        return build_flatbuffer(tfl_model(codes, self.tensors, self.inputs, self.outputs, self.operators,
                                          self.buffers, description), b"TFL3")[0]
