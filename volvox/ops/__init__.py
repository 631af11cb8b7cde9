"""The op registry: the single list of what volvox can compute.

Each op has named input/output ports (optional ones end in '?'), a shape rule (``infer``), a numpy
reference (``ref``, the oracle every kernel is tested against) and optionally
a fast CPU kernel (``fast``). Both compute functions take
``(ctx, params, *inputs)`` with inputs in port order (absent optional inputs
as None) and return one array or a tuple in output-port order. An op may also
say how to write its fast result into a buffer the executor owns (``into``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from volvox.errors import BlueprintError, UnsupportedError
from volvox.ir.graph import Node, TensorSpec

ShapeRule = Callable[[dict[str, TensorSpec], dict[str, Any]], dict[str, tuple[tuple, str]]]


@dataclass(frozen=True)
class OpDef:
    """One op: ports (optional ones end in '?'), shape rule, numpy reference, fast kernel.

    Outputs are returned in port order; absent optional outputs are trailing and not returned.
    """

    name: str
    family: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    infer: ShapeRule
    ref: Callable
    fast: Callable | None = None
    stateful: bool = False  # reads or writes the run context (KV cache, positions)
    # into(ctx, params, out, *inputs): the result of ``fast`` (of ``ref`` if none), bit for bit, in ``out``, a
    # preallocated C-contiguous array of the output's shape and dtype (linear_split: of the
    # (rows, sum(sizes)) result its outputs are column blocks of), returned as ``fast`` returns it.
    # ``out`` never overlaps an input. An op with ``into`` never returns a view of an input, from
    # ``fast`` or ``into``: the executor's arena relies on it (runtime/executor.py).
    into: Callable | None = None

    @property
    def input_names(self) -> tuple[str, ...]:
        """Input port names without the optional marker."""
        return tuple(p.rstrip("?") for p in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """Output port names without the optional marker."""
        return tuple(p.rstrip("?") for p in self.outputs)

    def check_ports(self, node: Node) -> None:
        """Raise BlueprintError unless ``node`` wires exactly this op's ports."""
        required = {p for p in self.inputs if not p.endswith("?")}
        allowed = set(self.input_names)
        missing = required - set(node.inputs)
        extra = set(node.inputs) - allowed
        if missing or extra:
            raise BlueprintError(
                f"node {node.id!r} ({self.name}): inputs must be {sorted(allowed)} "
                f"(missing {sorted(missing)}, unknown {sorted(extra)})")
        required_out = {p for p in self.outputs if not p.endswith("?")}
        if not required_out <= set(node.outputs) <= set(self.output_names):
            raise BlueprintError(
                f"node {node.id!r} ({self.name}): outputs must be {list(self.outputs)}, "
                f"got {sorted(node.outputs)}")


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry (names are unique)."""
    assert op.name not in OPS, op.name
    OPS[op.name] = op
    return op


def get_op(name: str, node_id: str = "?") -> OpDef:
    """The OpDef called ``name``; UnsupportedError naming the node if there is none."""
    try:
        return OPS[name]
    except KeyError:
        raise UnsupportedError(f"node {node_id!r}: unknown op {name!r} "
                               f"(known ops: {', '.join(sorted(OPS))})") from None


from volvox.ops import elementwise, linear, norm, attention, fused, conv, pool, activation, arith, shape, int8, resize, dwpw  # noqa: E402,F401,E501  (registers the ops)
