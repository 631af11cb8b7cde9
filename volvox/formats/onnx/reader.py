"""An .onnx file's protobuf as plain Python: opset, graph inputs / outputs, initializers (external
data memory-mapped), nodes with decoded attributes. No interpretation of the ops here."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from volvox.errors import UnsupportedError, WeightsError
from volvox.formats.mapped_file import map_file
from volvox.formats.protobuf import floats, ints, parse, text


class ONNXError(WeightsError):
    """An .onnx file is truncated, malformed or inconsistent."""


# ONNX TensorProto.DataType -> numpy; strings and complex numbers are not read
ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
               10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
# ONNX's narrow types -> (ml_dtypes name, bits per element in raw_data); numpy knows them once ml_dtypes is imported
NARROW_TYPES = {16: ("bfloat16", 16), 17: ("float8_e4m3fn", 8), 18: ("float8_e4m3fnuz", 8), 19: ("float8_e5m2", 8),
                20: ("float8_e5m2fnuz", 8), 21: ("uint4", 4), 22: ("int4", 4), 23: ("float4_e2m1fn", 4),
                24: ("float8_e8m0fnu", 8), 25: ("uint2", 2), 26: ("int2", 2)}
ONNX_TYPE_NAMES = {0: "undefined", 8: "string", 14: "complex64", 15: "complex128", 16: "bfloat16", 17: "float8e4m3fn",
                   18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1",
                   24: "float8e8m0", 25: "uint2", 26: "int2"}
# the value of a GRAPHS attribute (a list of sub-graphs, which no standard op volvox runs takes)
GRAPH_ATTRIBUTE = object()


@dataclass
class OnnxNode:
    """One NodeProto: op type, input / output tensor names ("" for an absent optional), attributes."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict
    name: str
    domain: str


@dataclass
class OnnxModel:
    """What the importer reads of a ModelProto, or of a GraphProto attribute (If's branches, Loop's and
    Scan's bodies: ``opset`` and ``metadata`` those of the model)."""

    opset: int
    metadata: dict[str, str]
    initializers: dict[str, np.ndarray]
    inputs: list[tuple[str, int, list]]        # (name, elem_type, dims: ints or dim_param names)
    outputs: list[str]
    nodes: list[OnnxNode] = field(default_factory=list)


def type_name(code: int) -> str:
    """The ONNX name of a tensor element type."""
    return np.dtype(ONNX_DTYPES[code]).name if code in ONNX_DTYPES else ONNX_TYPE_NAMES.get(code, f"type {code}")


def element_dtype(code: int, where: str) -> np.dtype:
    """The numpy dtype of ONNX element type ``code``; the narrow types come from ml_dtypes (what the onnx
    package itself uses), UnsupportedError when it is missing or the type is one volvox does not take."""
    if code in ONNX_DTYPES:
        return np.dtype(ONNX_DTYPES[code])
    if code in NARROW_TYPES:
        try:
            import ml_dtypes
        except ImportError:
            raise UnsupportedError(f"{where}: ONNX type {type_name(code)} needs the ml_dtypes package") from None
        return np.dtype(getattr(ml_dtypes, NARROW_TYPES[code][0]))
    raise UnsupportedError(f"{where}: ONNX type {type_name(code)} is not one volvox takes")


def _unpack_bits(packed: np.ndarray, bits: int, count: int, dtype: np.dtype) -> np.ndarray:
    """``count`` elements of ``bits`` bits each, packed lowest bits first into ``packed`` (uint8), as ``dtype``."""
    per_byte = 8 // bits
    lanes = [(packed >> (bits * k)) & ((1 << bits) - 1) for k in range(per_byte)]
    return np.stack(lanes, axis=1).reshape(-1)[:count].astype(np.uint8).view(dtype)


class _Reader:
    def __init__(self, path: str):
        self.path = path
        self.error = lambda msg: ONNXError(f"{path}: {msg} (truncated or not an ONNX file)")  # noqa: E731
        self.maps: dict[str, object] = {}   # external data file -> its memory map

    def tensor(self, buf, where: str) -> tuple[str, np.ndarray]:
        """(name, array) of a TensorProto."""
        f = parse(buf, self.error)
        name = text(f[8][0]) if 8 in f else ""
        dims = ints(f.get(1, []), self.error)
        code = f.get(2, [0])[0]
        if code not in ONNX_DTYPES and code not in NARROW_TYPES:
            raise UnsupportedError(f"{where}: tensor {name!r} has ONNX data type {type_name(code)}, which volvox does not read")
        count = int(np.prod(dims, dtype=np.int64))
        if code in NARROW_TYPES:
            return name, self.narrow(f, code, name, count, where).reshape(dims)
        dt = np.dtype(ONNX_DTYPES[code]).newbyteorder("<")
        if f.get(14, [0])[0] == 1:
            arr = self.external(f, name, dt, count, where)
        elif 9 in f:
            raw = f[9][0]
            if len(raw) != count * dt.itemsize:
                raise ONNXError(f"{where}: tensor {name!r} {dt.name}{dims} holds {len(raw)} raw bytes")
            arr = np.frombuffer(bytes(raw), dt).astype(dt.newbyteorder("="))
        elif code == 1:
            arr = np.array(floats(f.get(4, [])), np.float32)
        elif code == 11:
            arr = np.frombuffer(b"".join(bytes(v) if not isinstance(v, int) else int(v).to_bytes(8, "little")
                                         for v in f.get(10, [])), "<f8").astype(np.float64)
        elif code == 7:
            arr = np.array(ints(f.get(7, []), self.error), np.int64)
        elif code in (12, 13):
            arr = np.array([v & (2 ** 64 - 1) for v in ints(f.get(11, []), self.error)], np.uint64).astype(dt.newbyteorder("="))
        elif code == 10:
            arr = np.array(ints(f.get(5, []), self.error), np.int64).astype(np.uint16).view(np.float16)
        else:
            arr = np.array(ints(f.get(5, []), self.error), np.int64).astype(dt.newbyteorder("="))
        if arr.size != count:
            raise ONNXError(f"{where}: tensor {name!r} has {arr.size} values for shape {dims}")
        return name, arr.reshape(dims)

    def narrow(self, f: dict, code: int, name: str, count: int, where: str) -> np.ndarray:
        """A tensor of a narrow type: raw_data packed (sub-byte types lowest bits first) or one element
        per int32_data entry (the sub-byte types packed there too)."""
        dtype, bits = element_dtype(code, f"{where}: tensor {name!r}"), NARROW_TYPES[code][1]
        if f.get(14, [0])[0] == 1:
            raise UnsupportedError(f"{where}: tensor {name!r} of ONNX type {type_name(code)} in external data")
        if 9 in f:
            raw = np.frombuffer(bytes(f[9][0]), np.uint8)
        else:
            storage = np.array(ints(f.get(5, []), self.error), np.int64).astype(np.uint32)
            raw = storage.astype(np.uint16).view(np.uint8) if bits == 16 else storage.astype(np.uint8)
        if raw.size != -(-count * bits // 8):
            raise ONNXError(f"{where}: tensor {name!r} {type_name(code)} holds {raw.size} bytes for {count} values")
        if bits >= 8:
            return raw.view(dtype).copy()
        return _unpack_bits(raw, bits, count, dtype)

    def external(self, f: dict, name: str, dt: np.dtype, count: int, where: str) -> np.ndarray:
        """A tensor stored beside the model: a read-only view of its memory-mapped data file."""
        entries = {}
        for e in f.get(13, []):
            kv = parse(e, self.error)
            entries[text(kv[1][0])] = text(kv[2][0]) if 2 in kv else ""
        location = entries.get("location", "")
        base = Path(self.path).resolve().parent
        target = (base / location).resolve()
        if not location or os.path.isabs(location) or base not in target.parents:
            raise ONNXError(f"{where}: tensor {name!r}: external data location {location!r} is not a file beside the model")
        key = str(target)
        if key not in self.maps:
            self.maps[key] = map_file(key, ONNXError, "external data")
        data = self.maps[key]
        offset = int(entries.get("offset", 0) or 0)
        length = int(entries.get("length", count * dt.itemsize) or 0)
        if length != count * dt.itemsize or offset < 0 or offset + length > len(data):
            raise ONNXError(f"{where}: tensor {name!r} {dt.name}: external data {location!r} [{offset}, +{length}) "
                            f"does not hold {count} values (file size {len(data)})")
        arr = np.frombuffer(data, dt, count, offset)
        return arr if dt.isnative else arr.astype(dt.newbyteorder("="))

    def attributes(self, values: list, where: str) -> dict:
        out = {}
        for buf in values:
            f = parse(buf, self.error)
            name, kind = text(f[1][0]), f.get(20, [0])[0]
            if kind == 0:   # old writers leave the type out: the field that is present says it
                kind = next((k for field_no, k in ((2, 1), (3, 2), (4, 3), (5, 4), (6, 5), (7, 6), (8, 7), (9, 8))
                             if field_no in f), 0)
            if kind == 1:
                out[name] = floats(f[2])[0]
            elif kind == 2:
                out[name] = ints(f[3], self.error)[0]
            elif kind == 3:
                out[name] = text(f[4][0])
            elif kind == 4:
                out[name] = self.tensor(f[5][0], where)[1]
            elif kind == 5:
                out[name] = self.graph(f[6][0], 0, {}, keep_initializer_inputs=True)
            elif kind == 10:
                out[name] = GRAPH_ATTRIBUTE
            elif kind == 6:
                out[name] = floats(f.get(7, []))
            elif kind == 7:
                out[name] = ints(f.get(8, []), self.error)
            elif kind == 8:
                out[name] = [text(v) for v in f.get(9, [])]
            else:
                raise UnsupportedError(f"{where}: attribute {name!r} has type {kind}, which volvox does not support")
        return out

    def value_info(self, buf) -> tuple[str, int, list]:
        """(name, elem_type, dims) of a ValueInfoProto; dims are ints or dim_param names ("?" if unnamed)."""
        f = parse(buf, self.error)
        name = text(f[1][0])
        type_proto = parse(f[2][0], self.error) if 2 in f else {}
        tensor = parse(type_proto[1][0], self.error) if 1 in type_proto else {}
        dims = []
        if 2 in tensor:
            for d in parse(tensor[2][0], self.error).get(1, []):
                df = parse(d, self.error)
                dims.append(ints(df[1], self.error)[0] if 1 in df else (text(df[2][0]) if 2 in df else "?"))
        return name, tensor.get(1, [0])[0] if tensor else -1, dims

    def model(self, buf) -> OnnxModel:
        model = parse(buf, self.error)
        if 7 not in model:
            raise ONNXError(f"{self.path}: no graph (not an ONNX model)")
        opset = 0
        for o in model.get(8, []):
            f = parse(o, self.error)
            if not f.get(1) or not text(f[1][0]) or text(f[1][0]) == "ai.onnx":
                opset = ints(f.get(2, [0]), self.error)[0]
        props = {}
        for p in model.get(14, []):
            kv = parse(p, self.error)
            props[text(kv[1][0])] = text(kv.get(2, [b""])[0])
        return self.graph(model[7][0], opset, props)

    def graph(self, buf, opset: int, props: dict, keep_initializer_inputs: bool = False) -> OnnxModel:
        """A GraphProto: its initializers, inputs (those an initializer fills left out, unless
        ``keep_initializer_inputs``: a sub-graph's inputs are positional), outputs and nodes."""
        g = parse(buf, self.error)
        inits = dict(self.tensor(t, self.path) for t in g.get(5, []))
        nodes = []
        prefix = text(g[2][0]) + "/" if keep_initializer_inputs and 2 in g else ""
        for k, nb in enumerate(g.get(1, [])):
            f = parse(nb, self.error)
            node_id = text(f[3][0]) if 3 in f and text(f[3][0]) else f"{prefix}node{k}"
            nodes.append(OnnxNode(text(f[4][0]), [text(v) for v in f.get(1, [])], [text(v) for v in f.get(2, [])],
                                  self.attributes(f.get(5, []), f"{self.path}: node {node_id!r}"), node_id,
                                  text(f[7][0]) if 7 in f else ""))
        inputs = [vi for vi in map(self.value_info, g.get(11, [])) if keep_initializer_inputs or vi[0] not in inits]
        outputs = [self.value_info(vo)[0] for vo in g.get(12, [])]
        return OnnxModel(opset, props, inits, inputs, outputs, nodes)


def read_model(path: str) -> OnnxModel:
    """The decoded ModelProto of the .onnx file at ``path``; ONNXError when it is malformed."""
    try:
        buf = memoryview(map_file(path, ONNXError, "ONNX"))
    except FileNotFoundError:
        raise ONNXError(f"{path}: no such file") from None
    try:
        return _Reader(path).model(buf)
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, AttributeError) as e:
        # a required field missing or of the wrong wire type deep in the schema: the protobuf reader
        # is schema-less, so these surface as Python lookups failing; report them as the malformed file they are
        raise ONNXError(f"{path}: malformed ONNX model ({type(e).__name__}: {e})") from None


def read_graph(path: str, buf: bytes, opset: int) -> OnnxModel:
    """A serialized GraphProto built while importing ``path`` (a function body's nodes), decoded."""
    return _Reader(path).graph(buf, opset, {}, keep_initializer_inputs=True)


def read_model_upgraded(path: str, opset: int) -> OnnxModel:
    """The model at ``path`` converted to ``opset`` by the onnx package's version converter (for files
    older than the opsets volvox translates); UnsupportedError when onnx is missing or cannot convert it."""
    try:
        import onnx
        from onnx import version_converter
    except ImportError:
        raise UnsupportedError(f"{path}: converting an ONNX model to opset {opset} needs the onnx package") from None
    try:
        converted = version_converter.convert_version(onnx.load(path), opset)
    except Exception as e:  # noqa: BLE001  the converter raises its own and C++ errors: all mean "cannot convert"
        raise UnsupportedError(f"{path}: onnx's version converter cannot take this model to opset {opset} "
                               f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    try:
        return _Reader(path).model(memoryview(converted.SerializeToString()))
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, AttributeError) as e:
        raise ONNXError(f"{path}: malformed ONNX model after conversion ({type(e).__name__}: {e})") from None
