"""The importer's state and its building blocks: emitting volvox nodes, the NHWC layout of conv
activations, constants and their folding.

Every tensor keeps its ONNX (logical) shape; 4-D activations coming out of convs and pools are
*laid out* NHWC (``nhwc``). An op that does not care about layout keeps it; any other op reads the
tensor through ``logical``, which transposes it back to NCHW once. Constants (initializers, Constant
nodes, and whatever is computed from constants only, shape values included) are folded at import
by the very op references the runtime would use, so shape subgraphs disappear.
"""

from __future__ import annotations

import numpy as np

from volvox.errors import BlueprintError, ShapeError, UnsupportedError
from volvox.ir.graph import DTYPES, NARROW_DTYPES, Node, TensorSpec
from volvox.ops import get_op
from volvox.formats.onnx.reader import ONNXError, OnnxNode

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
GROUPED_TO_LOGICAL = [0, 3, 4, 1, 2]  # a channel-grouped NHWC tensor (N, H, W, A, B) -> its logical (N, A, B, H, W)
CLAMP = 2 ** 62   # ONNX's INT64_MAX / INT64_MIN slice bounds mean "to the end"
# ops that only move values: folding them keeps a shape vector's symbolic dims as they are
MOVES_VALUES = ("slice", "concat", "gather", "reshape", "transpose", "expand", "tile")
# ops that take ONNX's narrow types (ml_dtypes) as they are: conversions, products that sum in float64,
# and ops that only move or pick values; any other op refuses them
NARROW_NATIVE = MOVES_VALUES + ("cast", "bitcast", "quantize_linear", "dequantize_linear", "matmul_general", "einsum",
                                "gather_elements", "gather_nd", "scatter_elements", "scatter_nd", "where", "one_hot",
                                "reverse_sequence", "depth_space", "trilu", "tensor_scatter", "compress", "unique",
                                "nonzero")
# families of ops that compute each output element on its own (or only move values): on bfloat16 they run
# in float32 and round each element once, which is what onnx's reference (ml_dtypes' ufuncs) and
# onnxruntime do; ops that accumulate (reductions, softmax, products, norms) refuse bfloat16: onnx's
# reference rounds every partial sum to bfloat16 where volvox would sum in float32, a different answer
PER_ELEMENT_FAMILIES = ("elementwise", "activation", "math", "shape")
ACCUMULATING = ("add_n", "softmax", "log_softmax", "hardmax", "einsum", "det", "matmul_general", "lrn",
                "dynamic_quantize", "swiglu")


class ConstantRequired(UnsupportedError):
    """An operand volvox needs at import (a shape, axes, a count) is computed at run time.

    ``tensor`` names it (or the graph input it is computed from); ``inputs`` every graph input it is
    computed from; ``value_of`` the tensor whose value is needed. ``value_plans.ValuePlannedModel``
    computes that value at run time and imports the graph again with it held as a constant."""

    def __init__(self, message: str, tensor: str, inputs: tuple = (), value_of: str | None = None):
        super().__init__(message)
        self.tensor = tensor
        self.inputs = tuple(inputs) or (tensor,)
        self.value_of = value_of or tensor


def is_symbolic(value: np.ndarray) -> bool:
    """True for a folded shape vector holding a symbolic dim (a str in an object array)."""
    return value.dtype == object and any(isinstance(v, str) for v in value.ravel())


class Importer:
    """Translates ONNX nodes in order, tracking logical shapes, NHWC layout and folded constants."""

    def __init__(self, path: str, opset: int):
        self.path, self.opset = path, opset
        self.consts: dict[str, np.ndarray] = {}   # initializers, Constant outputs, folded values
        self.shapes: dict[str, tuple] = {}        # run-time tensor -> logical (ONNX) shape
        self.nhwc: set[str] = set()               # run-time tensors laid out NHWC
        self.grouped: set[str] = set()            # 5-D run-time tensors of logical shape (N, A, B, H, W) laid out
                                                  # (N, H, W, A, B): an NHWC tensor's channels split in groups
        self.weights: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.specs: dict[str, TensorSpec] = {}
        self.nchw_copies: dict[str, str] = {}     # NHWC-laid tensor -> its NCHW transpose
        self.nhwc_copies: dict[str, str] = {}     # NCHW tensor -> its NHWC transpose
        self.conv_of: dict[str, Node] = {}        # conv output -> its node (BatchNormalization folding)
        self.readers: dict[str, int] = {}
        self.const_weights: dict[tuple, str] = {}  # (const name, dtype) -> its weight
        self.sources: dict[str, frozenset] = {}   # run-time tensor -> the graph inputs it is computed from
        # expand(importer, node, where, translations) -> bool: an op without a translation through its
        # ONNX function body (functions.expand); False when it has none
        self.expand = None

    # ------------------------------------------------------------------ emitting
    def emit(self, op: str, node_id: str, inputs: dict, outputs: str | dict, logical: tuple | None = None,
             nhwc: bool = False, **params) -> str:
        """Add a node, infer its outputs' specs, record their logical shapes and layout; the first output's name."""
        outputs = {"y": outputs} if isinstance(outputs, str) else {p: n for p, n in outputs.items() if n}
        node = Node(node_id, op, inputs, outputs, params)
        try:
            in_specs = {p: self.specs[n] for p, n in inputs.items()}
        except KeyError as e:
            raise ONNXError(f"{self.path}: node {node_id!r}: missing input {e}") from None
        try:
            specs = get_op(op, node_id).infer(in_specs, params)
        except (ShapeError, BlueprintError) as e:
            dtypes = {s.dtype for s in in_specs.values()}
            if dtypes - {"float32"} and isinstance(e, ShapeError):
                raise UnsupportedError(f"{self.path}: node {node_id!r}: volvox's {op} does not take "
                                       f"{', '.join(sorted(dtypes))} operands ({e})") from None
            raise type(e)(f"{self.path}: node {node_id!r} ({op}): {e}") from None
        self.nodes.append(node)
        origin = frozenset().union(*(self.sources.get(n, frozenset()) for n in inputs.values()))
        for port, name in outputs.items():
            self.sources[name] = origin
            shape, dtype = specs[port]
            self.specs[name] = TensorSpec(name, tuple(shape), dtype)
            physical = tuple(shape)
            self.shapes[name] = logical if logical is not None else (
                tuple(physical[i] for i in TO_NCHW) if nhwc else physical)
            if nhwc:
                self.nhwc.add(name)
        return next(iter(outputs.values()))

    def weight(self, name: str, value: np.ndarray) -> str:
        """Register ``value`` as the weight ``name``."""
        value = np.ascontiguousarray(value).reshape(np.shape(value))   # a 0-d value stays 0-d
        if value.dtype.name not in DTYPES:
            raise UnsupportedError(f"{self.path}: weight {name!r} is {value.dtype}, which volvox does not run")
        self.weights[name] = value
        self.specs[name] = TensorSpec(name, value.shape, value.dtype.name)
        return name

    def const_operand(self, name: str, dtype=None) -> str:
        """The weight holding constant ``name`` (in ``dtype`` if given), registered once."""
        value = self.consts[name]
        if is_symbolic(value):
            raise UnsupportedError(f"{self.path}: tensor {name!r} holds symbolic dims {value.tolist()} where "
                                   "a run-time value is needed")
        value = np.asarray(value if dtype is None else value.astype(dtype))
        key = (name, value.dtype.name)
        if key not in self.const_weights:
            self.const_weights[key] = self.weight(f"{name}.const" + ("" if dtype is None else f".{value.dtype.name}"), value)
        return self.const_weights[key]

    def operand(self, name: str, where: str, dtype=None) -> str:
        """A node input in logical layout: a run-time tensor (transposed back to NCHW if laid NHWC) or a constant's weight."""
        if name in self.consts:
            return self.const_operand(name, dtype)
        return self.logical(name, where)

    def logical(self, name: str, where: str) -> str:
        """The run-time tensor in ONNX (NCHW) layout, transposing an NHWC-laid (or channel-grouped) one once."""
        self.runtime(name, where)
        if name not in self.nhwc and name not in self.grouped:
            return name
        if name not in self.nchw_copies:
            self.nchw_copies[name] = self.emit("transpose", f"{name}.to_nchw", {"x": name}, f"{name}.nchw",
                                               logical=self.shapes[name],
                                               perm=TO_NCHW if name in self.nhwc else GROUPED_TO_LOGICAL)
        return self.nchw_copies[name]

    def laid_nhwc(self, name: str, where: str) -> str:
        """The 4-D float32 tensor laid out NHWC (transposing an NCHW one)."""
        self.float32(name, where)
        if name in self.nhwc:
            return name
        if len(self.shapes[name]) != 4:
            raise UnsupportedError(f"{where}: needs a 4-D NCHW input, got {self.shapes[name]}")
        if name not in self.nhwc_copies:
            self.nhwc_copies[name] = self.emit("transpose", f"{name}.to_nhwc", {"x": name}, f"{name}.nhwc",
                                               logical=self.shapes[name], perm=TO_NHWC)
            self.nhwc.add(self.nhwc_copies[name])
        return self.nhwc_copies[name]

    def runtime(self, name: str, where: str) -> None:
        """Check ``name`` is a tensor computed at run time."""
        if name not in self.shapes:
            raise UnsupportedError(f"{where}: input {name!r} is a constant or unknown where an activation is expected")

    def float32(self, name: str, where: str) -> None:
        """Check ``name`` is a float32 run-time tensor (what the vision kernels take)."""
        self.runtime(name, where)
        if self.specs[name].dtype != "float32":
            raise UnsupportedError(f"{where}: {name!r} is {self.specs[name].dtype}; this op runs float32 tensors")

    def const(self, name: str, where: str, what: str) -> np.ndarray:
        """The value of constant ``name``; ConstantRequired when it is computed at run time."""
        if name not in self.consts:
            origin = self.sources.get(name, frozenset())
            if len(origin) == 1 and name not in origin:   # computed from one graph input: name that input
                (source,) = origin
                raise ConstantRequired(f"{where}: {what} ({name!r}, computed from input {source!r}) must be a "
                                       "constant; volvox fixes it at import", source, value_of=name)
            sources = f", computed from inputs {sorted(origin)}" if origin and name not in origin else ""
            raise ConstantRequired(f"{where}: {what} ({name!r}{sources}) must be a constant; volvox fixes it at import",
                                   name, tuple(sorted(origin)) if sources else (), value_of=name)
        return self.consts[name]

    def alias(self, src: str, dst: str) -> None:
        """``dst`` is ``src`` (Identity): a constant stays one, a run-time tensor gets a view."""
        if src in self.consts:
            self.consts[dst] = self.consts[src]
            return
        self.emit("reshape", f"{dst}.identity", {"x": src}, dst, logical=self.shapes[src],
                  nhwc=src in self.nhwc, shape=[0] * len(self.shapes[src]))

    def apply(self, op: str, node_id: str, inputs: dict, outputs: str | dict, where: str, **params) -> None:
        """Volvox op ``op`` in logical layout on ``inputs`` (port -> ONNX tensor name): folded at import
        when every input is a constant, else emitted. A per-element op outside NARROW_NATIVE computes
        bfloat16 in float32, its float outputs rounded back to bfloat16 (PER_ELEMENT_FAMILIES); other
        ops refuse ONNX's narrow types (their numpy references may not compute in them, or would not
        round as onnx's reference does)."""
        outputs = {"y": outputs} if isinstance(outputs, str) else outputs
        narrow = {self.dtype(n) for n in inputs.values()} & set(NARROW_DTYPES)
        if (narrow == {"bfloat16"} and op not in NARROW_NATIVE and op not in ACCUMULATING
                and get_op(op, node_id).family in PER_ELEMENT_FAMILIES):
            self._through_float32(op, node_id, inputs, outputs, where, params)
            return
        if narrow and op not in NARROW_NATIVE:
            why = (" (it accumulates: onnx's reference rounds each partial result to bfloat16, volvox would "
                   "accumulate in float32)" if narrow == {"bfloat16"} else "")
            raise UnsupportedError(f"{where}: volvox's {op} does not take {', '.join(sorted(narrow))} operands{why}")
        if all(name in self.consts for name in inputs.values()):
            definition = get_op(op, node_id)
            values = [self.consts[inputs[p]] if p in inputs else None for p in definition.input_names]
            if op not in MOVES_VALUES and any(v is not None and is_symbolic(v) for v in values):
                raise UnsupportedError(f"{where}: {op} of a symbolic shape is not supported")
            try:
                result = definition.ref(None, params, *values)
            except (ValueError, IndexError, TypeError) as e:
                raise ShapeError(f"{where}: folding {op} at import: {e}") from None
            result = result if isinstance(result, tuple) else (result,)
            for port, value in zip(definition.output_names, result):
                if outputs.get(port):
                    value = np.asarray(value)   # a symbolic dim taken out of a shape vector stays an object
                    self.consts[outputs[port]] = value.astype(object) if value.dtype.kind == "U" else value
            return
        self.emit(op, node_id, {p: self.operand(n, where) for p, n in inputs.items()}, outputs, **params)

    def _through_float32(self, op: str, node_id: str, inputs: dict, outputs: dict, where: str, params: dict) -> None:
        """``op`` on bfloat16 operands: they are cast to float32, the op runs in float32 and each float32
        output is rounded to bfloat16 (round to nearest even)."""
        widened = {}
        for port, name in inputs.items():
            if self.dtype(name) == "bfloat16":
                widened[port] = f"{name}.as_float32"
                if widened[port] not in self.consts and widened[port] not in self.specs:
                    self.apply("cast", f"{node_id}.{port}.float32", {"x": name}, widened[port], where, to="float32")
            else:
                widened[port] = name
        wide_outputs = {port: f"{name}.unrounded" for port, name in outputs.items() if name}
        self.apply(op, node_id, widened, wide_outputs, where, **params)
        for port, name in outputs.items():
            if not name:
                continue
            wide = wide_outputs[port]
            if self.dtype(wide) == "float32":
                self.apply("cast", f"{node_id}.{port}.bfloat16", {"x": wide}, name, where, to="bfloat16")
            else:
                self.alias(wide, name)

    def dtype(self, name: str) -> str:
        """The dtype name of a constant or run-time tensor."""
        return np.asarray(self.consts[name]).dtype.name if name in self.consts else self.specs[name].dtype

    def node(self, n: OnnxNode, translations: dict) -> None:
        """Translate one ONNX node through ``translations`` (op type -> function(importer, node, where))."""
        where = f"{self.path}: node {n.name!r} ({n.op})"
        if n.domain not in ("", "ai.onnx"):
            raise UnsupportedError(f"{where}: domain {n.domain!r} is not supported (opset {self.opset})")
        fn = translations.get(n.op)
        try:
            if fn is None and not (self.expand is not None and self.expand(self, n, where, translations)):
                raise UnsupportedError(f"{where}: op {n.op} is not supported at opset {self.opset}")
            if fn is not None:
                fn(self, n, where)
        except UnsupportedError as e:   # every refusal names the opset (the node and op are in ``where``)
            if f"opset {self.opset}" not in str(e):
                e.args = (f"{e} (opset {self.opset})",)
            raise


def arg(n: OnnxNode, i: int) -> str | None:
    """The name of input ``i`` of ``n``, None when absent."""
    return n.inputs[i] if len(n.inputs) > i and n.inputs[i] else None


def output_used(imp: Importer, n: OnnxNode, i: int) -> bool:
    """Whether output ``i`` of ``n`` exists and is read by a node or the graph."""
    return len(n.outputs) > i and bool(n.outputs[i]) and imp.readers.get(n.outputs[i], 0) > 0
