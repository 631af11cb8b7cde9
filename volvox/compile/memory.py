"""Activation memory of a compiled graph: tensor lifetimes, and an arena plan placing every
intermediate at a byte offset so that tensors alive at the same time never overlap.

A buffer is born at the step of the node that writes it and dies after its last reader (graph
outputs live to the end); views (``output_rows``, ``reshape``, the column blocks of
``linear_split``) share their base's buffer and keep it alive. Graph inputs (the caller's
arrays), weights and the KV cache are outside the arena.

``plan_arena`` is the greedy-by-size planner of TFLite's arena (and of TFLite Micro's
GreedyMemoryPlanner): the largest buffers are placed first, each at the lowest offset whose
gap fits it among the already-placed buffers whose lifetimes overlap its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError
from ..graph import Graph, TensorSpec

VIEW_OPS = ("output_rows", "reshape")  # the output is a view of input x: no new bytes
ALIGNMENT = 64  # bytes: every buffer starts on a cache line (TFLite's kDefaultTensorAlignment)


@dataclass(frozen=True)
class Buffer:
    """One allocation: the tensor that names it, its bytes and the steps it is alive at (inclusive)."""

    name: str
    size: int
    first: int
    last: int

    def overlaps_in_time(self, other: Buffer) -> bool:
        """Whether both are alive at some step (a node's inputs and outputs are alive together)."""
        return self.first <= other.last and other.first <= self.last


@dataclass
class ArenaPlan:
    """Where each buffer lives in one arena of ``arena_bytes``; ``alias`` maps each view to its buffer."""

    offsets: dict[str, int]   # buffer -> byte offset in the arena
    buffers: list[Buffer]
    alias: dict[str, str]     # tensor -> the buffer it is a view of
    arena_bytes: int          # the plan's size (>= peak_bytes; sizes rounded to ALIGNMENT)
    peak_bytes: int           # most bytes alive at one step: what any plan needs at least
    naive_bytes: int          # every intermediate in its own buffer

    def offset_of(self, tensor: str) -> int:
        """Byte offset of ``tensor``'s buffer (a view's is its base's)."""
        return self.offsets[self.alias.get(tensor, tensor)]


def tensor_bytes(spec: TensorSpec, dims: dict[str, int]) -> int:
    """Bytes of ``spec`` with its symbolic dims bound by ``dims`` (unbound symbols count as 1)."""
    n = 1
    for d in spec.shape:
        n *= d if isinstance(d, int) else dims.get(d, 1)
    return n * np.dtype(spec.dtype).itemsize


def bind_dims(graph: Graph, dims: dict[str, int]) -> Graph:
    """``graph`` with its inputs' symbolic dims bound by ``dims`` (unbound: 1) and every shape
    inferred again, so derived dims (``"h/2"``, reshapes) become numbers; ShapeError if they do not fit."""
    inputs = [TensorSpec(s.name, tuple(d if isinstance(d, int) else dims.get(d, 1) for d in s.shape), s.dtype)
              for s in graph.inputs]
    bound = Graph(inputs, dict(graph.weights), list(graph.nodes), list(graph.outputs))
    try:
        bound.validate()
    except ShapeError as e:
        symbols = sorted({d for s in graph.inputs for d in s.shape if isinstance(d, str)})
        raise ShapeError(f"input dims {symbols} bound to {[dims.get(d, 1) for d in symbols]} (bind them with '--dims NAME=N'): {e}") from None
    return bound


def lifetimes(graph: Graph, dims: dict[str, int]) -> tuple[list[Buffer], dict[str, str]]:
    """Every intermediate buffer of a validated graph with its lifetime, and each view's base buffer."""
    inputs = {s.name for s in graph.inputs} | set(graph.weights)
    alias: dict[str, str] = {}
    first: dict[str, int] = {}
    size: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        outs = list(node.outputs.values())
        if node.op in VIEW_OPS:
            src = node.inputs["x"]
            alias[outs[0]] = alias.get(src, src)
            continue
        if node.op == "linear_split":  # column blocks of one (rows, sum(sizes)) result
            for name in outs[1:]:
                alias[name] = outs[0]
            outs = outs[:1]
        for name in outs:
            first[name] = i
            size[name] = tensor_bytes(graph.specs[name], dims)
        if node.op == "linear_split":
            size[outs[0]] = sum(tensor_bytes(graph.specs[n], dims) for n in node.outputs.values())
    last = dict(first)
    for i, node in enumerate(graph.nodes):
        for name in node.inputs.values():
            base = alias.get(name, name)
            if base in last:
                last[base] = max(last[base], i)
    for name in graph.outputs:
        base = alias.get(name, name)
        if base in last:
            last[base] = len(graph.nodes)
    buffers = [Buffer(n, size[n], first[n], last[n]) for n in first if n not in inputs]
    return buffers, alias


def _aligned(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def place(buffers: list[Buffer]) -> tuple[dict[str, int], int]:
    """Greedy-by-size byte offsets for ``buffers`` (largest first, each at the lowest ALIGNMENT-
    aligned gap left by the placed buffers alive at the same time) and the arena's size. The
    graph plan below and the native runtime plans (runtime/native_plan.py, vision_plan.py) share it."""
    placed: list[tuple[int, int, Buffer]] = []  # (offset, aligned size, buffer)
    offsets: dict[str, int] = {}
    for buf in sorted(buffers, key=lambda b: (-b.size, b.first)):
        need, offset = _aligned(buf.size), 0
        for start, span, _ in sorted((p for p in placed if p[2].overlaps_in_time(buf)), key=lambda p: p[0]):
            if start - offset >= need:
                break  # first gap that fits
            offset = max(offset, start + span)
        placed.append((offset, need, buf))
        offsets[buf.name] = offset
    return offsets, max((start + span for start, span, _ in placed), default=0)


def plan_arena(graph: Graph, dims: dict[str, int]) -> ArenaPlan:
    """Greedy-by-size offsets for every intermediate of a validated graph with ``dims`` bound."""
    buffers, alias = lifetimes(graph, dims)
    offsets, arena = place(buffers)
    steps = len(graph.nodes) + 1
    live = np.zeros(steps, np.int64)  # (steps,) bytes alive at each step
    for b in buffers:
        live[b.first:b.last + 1] += b.size
    return ArenaPlan(offsets, buffers, alias, arena, int(live.max(initial=0)), sum(b.size for b in buffers))
