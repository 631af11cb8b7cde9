"""The in-memory graph: tensor specs, nodes, validation, shape inference, topological order.

A graph is what a blueprint's config.json describes and what importers build.
Shapes may hold symbolic dimensions (strings such as ``"seq"``) that are bound
when the graph runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from volvox.errors import BlueprintError, ShapeError, UnsupportedError, VolvoxError

Dim = int | str
FLOAT_DTYPES = ("float32", "float16")
INT_DTYPES = ("int32", "int64", "int8", "uint8")
DTYPES = FLOAT_DTYPES + INT_DTYPES


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor's static description: shape (ints or symbols) and dtype.

    ``dtype`` is a numpy dtype name, or a block-quantized format ("q4_1", ...)
    for weights multiplied in packed form.
    """

    name: str
    shape: tuple[Dim, ...]
    dtype: str

    def describe(self) -> str:
        """``name: dtype[d0, d1]`` for error messages."""
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass
class Node:
    """One op application: named input ports -> tensor names, output ports -> tensor names."""

    id: str
    op: str
    inputs: dict[str, str]
    outputs: dict[str, str]
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Graph:
    """Inputs, weights, nodes and outputs; ``specs`` holds every tensor's inferred spec after validate()."""

    inputs: list[TensorSpec]
    weights: dict[str, TensorSpec]
    nodes: list[Node]
    outputs: list[str]
    specs: dict[str, TensorSpec] = field(default_factory=dict)

    def validate_file(self, path: str) -> None:
        """validate(), with ``path`` (the file the graph was read from) leading any error message."""
        try:
            self.validate()
        except VolvoxError as e:
            raise type(e)(f"{path}: {e}") from None

    def validate(self) -> None:
        """Check names, order and ops, and infer every tensor's shape; raises BlueprintError/ShapeError."""
        from volvox.ops import get_op  # the registry imports graph; import late to avoid a cycle

        specs: dict[str, TensorSpec] = {}
        for spec in self.inputs:
            if spec.dtype not in DTYPES:
                raise BlueprintError(f"input {spec.name!r}: unknown dtype {spec.dtype!r}")
            _add_spec(specs, spec, "graph input")
        for spec in self.weights.values():
            _add_spec(specs, spec, "weight")
        node_ids: set[str] = set()
        for node in self.nodes:
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
                _add_spec(specs, TensorSpec(name, tuple(shape), dtype), f"output of node {node.id!r}")
        for name in self.outputs:
            if name not in specs:
                raise BlueprintError(f"graph output {name!r} is not produced by any node")
        self.specs = specs


def _add_spec(specs: dict[str, TensorSpec], spec: TensorSpec, what: str) -> None:
    if spec.name in specs:
        raise BlueprintError(f"tensor {spec.name!r} ({what}) is defined twice")
    specs[spec.name] = spec


def same_dim(a: Dim, b: Dim) -> bool:
    """True unless both dims are known integers that differ (symbols match anything)."""
    return not (isinstance(a, int) and isinstance(b, int) and a != b)


def expect(cond: bool, message: str) -> None:
    """Raise ShapeError(message) when a shape rule does not hold."""
    if not cond:
        raise ShapeError(message)
