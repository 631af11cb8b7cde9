"""The op registry: OpDef, the table of every op (OPS), and graph validation through it.

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

from volvox.errors import BlueprintError, ShapeError, UnsupportedError, VolvoxError
from volvox.ir.graph import DTYPES, Graph, Node, TensorSpec, add_spec

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
    # cpu(plan, node): how a step plan runs it, appending its native steps through the plan builder's
    # API (runtime/plan.py: input / output / add ...); None: the plan runs its numpy path as an island
    cpu: Callable | None = None
    # gpu: how a GPU backend runs it (ops/gpu.py's Lowering); None: the CPU runs it on every backend
    gpu: Any = None
    # view: its output "y" is its input "x" reinterpreted (same elements): a plan gives it no step
    # and no buffer of its own (reshape; output_rows keeping every row)
    view: bool = False
    # fresh: no output is ever a view of an input (``fast`` and ``ref`` build new arrays), so the arena
    # planner (compile/memory.plan_run_arena) need not keep its inputs' buffers alive for its outputs'
    # readers. An op with ``into`` is fresh already; this marks ops without one (the loss, weight gradients)
    fresh: bool = False
    # backward(g, node): how reverse-mode autodiff (compile/autodiff.py) propagates gradients through it:
    # reads g.grad(node, port) of its outputs, adds backward nodes with g.emit and hands each input's
    # gradient to g.accumulate(node, port, tensor); None: the op cannot be differentiated through
    backward: Callable | None = None

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


def validate_file(graph: Graph, path: str) -> None:
    """validate(graph), with ``path`` (the file the graph was read from) leading any error message."""
    try:
        validate(graph)
    except VolvoxError as e:
        raise type(e)(f"{path}: {e}") from None

def validate(graph: Graph) -> None:
    """Check a graph's names, order and ops, and infer every tensor's shape into ``graph.specs``;
    raises BlueprintError / ShapeError naming the node, port or tensor at fault."""
    specs: dict[str, TensorSpec] = {}
    for spec in graph.inputs:
        if spec.dtype not in DTYPES:
            raise BlueprintError(f"input {spec.name!r}: unknown dtype {spec.dtype!r}")
        add_spec(specs, spec, "graph input")
    for spec in graph.weights.values():
        add_spec(specs, spec, "weight")
    node_ids: set[str] = set()
    for node in graph.nodes:
        if node.id in node_ids:
            raise BlueprintError(f"node id {node.id!r} is used twice")
        node_ids.add(node.id)
        op = get_op(node.op, node.id)
        op.check_ports(node)
        for port, name in node.inputs.items():
            if name not in specs:
                raise BlueprintError(
                    f"node {node.id!r} ({node.op}): input {port!r} reads tensor {name!r}, "
                    "which no graph input, weight or earlier node produces")
        in_specs = {port: specs[name] for port, name in node.inputs.items()}
        try:
            out_specs = op.infer(in_specs, node.params)
        except (ShapeError, UnsupportedError) as e:
            raise type(e)(f"node {node.id!r} ({node.op}): {e}") from None
        except (KeyError, TypeError, ValueError) as e:
            raise BlueprintError(f"node {node.id!r} ({node.op}): bad params {node.params!r}: {e}") from None
        for port, name in node.outputs.items():
            shape, dtype = out_specs[port]  # infer returns every port it can; nodes may leave optional ones out
            add_spec(specs, TensorSpec(name, tuple(shape), dtype), f"output of node {node.id!r}")
    for name in graph.outputs:
        if name not in specs:
            raise BlueprintError(f"graph output {name!r} is not produced by any node")
    graph.specs = specs
