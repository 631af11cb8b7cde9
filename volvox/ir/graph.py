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
FLOAT_DTYPES = ("float32", "float16", "float64")
INT_DTYPES = ("int32", "int64", "int8", "uint8", "int16", "uint16", "uint32", "uint64")
# ONNX's narrow element types, by their ml_dtypes names (numpy knows them once ml_dtypes is imported):
# the ONNX importer reads and casts them; no kernel computes in them
NARROW_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
                 "float4_e2m1fn", "int4", "uint4", "int2", "uint2")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",) + NARROW_DTYPES


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
    """Inputs, weights, nodes and outputs; ``specs`` holds every tensor's inferred spec once
    volvox.ops.validate(graph) has run."""

    inputs: list[TensorSpec]
    weights: dict[str, TensorSpec]
    nodes: list[Node]
    outputs: list[str]
    specs: dict[str, TensorSpec] = field(default_factory=dict)


def add_spec(specs: dict[str, TensorSpec], spec: TensorSpec, what: str) -> None:
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
