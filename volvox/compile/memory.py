"""Activation memory of a compiled graph: tensor lifetimes, and an arena plan placing every
intermediate at a byte offset so that tensors alive at the same time never overlap.

A buffer is born at the step of the node that writes it and dies after its last reader (graph
outputs live to the end); views (``output_rows``, ``reshape``, the column blocks of
``linear_split``) share their base's buffer and keep it alive. Graph inputs (the caller's
arrays), weights and the KV cache are outside the arena.

``plan_arena`` is the greedy-by-size planner of TFLite's arena (and of TFLite Micro's
GreedyMemoryPlanner): the largest buffers are placed first, each at the lowest offset whose
gap fits it among the already-placed buffers whose lifetimes overlap its own.

``plan_run_arena`` is the arena the per-op executor (runtime/executor.py) actually runs on:
only nodes whose op can write into a preallocated buffer (``OpDef.into``) are placed, graph
outputs never are, and the output of any other node not marked ``OpDef.fresh`` is taken to be
possibly a view of its inputs (a reshape, a slice or a transpose may return one), keeping their
buffers alive (and out of the arena, when that output is a graph output).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from volvox.errors import ShapeError
from volvox.ir.graph import Graph, TensorSpec
from volvox.ops import get_op, validate

RUN_TIME_DIMS = ("out_seq",)  # dims the run context sets (output_rows' rows), not the graph inputs
ALIGNMENT = 64  # bytes: every buffer starts on a cache line (TFLite's kDefaultTensorAlignment)


@dataclass(frozen=True)
class LiveRange:
    """One allocation: the tensor that names it, its bytes and the steps it is alive at (inclusive)."""

    name: str
    size: int
    first: int
    last: int

    def overlaps_in_time(self, other: LiveRange) -> bool:
        """Whether both are alive at some step (a node's inputs and outputs are alive together)."""
        return self.first <= other.last and other.first <= self.last


@dataclass
class ArenaPlan:
    """Where each buffer lives in one arena of ``arena_bytes``; ``alias`` maps each view to its buffer."""

    offsets: dict[str, int]   # buffer -> byte offset in the arena
    buffers: list[LiveRange]
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
        validate(bound)
    except ShapeError as e:
        symbols = sorted({d for s in graph.inputs for d in s.shape if isinstance(d, str)})
        raise ShapeError(f"input dims {symbols} bound to {[dims.get(d, 1) for d in symbols]} (bind them with '--dims NAME=N'): {e}") from None
    return bound


def lifetimes(graph: Graph, dims: dict[str, int]) -> tuple[list[LiveRange], dict[str, str]]:
    """Every intermediate buffer of a validated graph with its lifetime, and each view's base buffer."""
    inputs = {s.name for s in graph.inputs} | set(graph.weights)
    alias: dict[str, str] = {}
    first: dict[str, int] = {}
    size: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        outs = list(node.outputs.values())
        if get_op(node.op).view:
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
    buffers = [LiveRange(n, size[n], first[n], last[n]) for n in first if n not in inputs]
    return buffers, alias


def _aligned(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def pack_arena(buffers: list[LiveRange]) -> tuple[dict[str, int], int]:
    """Greedy-by-size byte offsets for ``buffers`` (largest first, each at the lowest ALIGNMENT-
    aligned gap left by the placed buffers alive at the same time) and the arena's size. The
    graph plan below, the executor's and the step plans (runtime/plan.py) share it."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, aligned size, first, last), by offset
    offsets: dict[str, int] = {}
    for buf in sorted(buffers, key=lambda b: (-b.size, b.first)):
        need, offset, first, last = _aligned(buf.size), 0, buf.first, buf.last
        for start, span, p_first, p_last in placed:
            if p_first <= last and first <= p_last:  # alive together
                if start - offset >= need:
                    break  # first gap that fits
                offset = max(offset, start + span)
        bisect.insort(placed, (offset, need, first, last))
        offsets[buf.name] = offset
    return offsets, max((start + span for start, span, _, _ in placed), default=0)


def plan_arena(graph: Graph, dims: dict[str, int]) -> ArenaPlan:
    """Greedy-by-size offsets for every intermediate of a validated graph with ``dims`` bound."""
    buffers, alias = lifetimes(graph, dims)
    offsets, arena = pack_arena(buffers)
    steps = len(graph.nodes) + 1
    live = np.zeros(steps, np.int64)  # (steps,) bytes alive at each step
    for b in buffers:
        live[b.first:b.last + 1] += b.size
    return ArenaPlan(offsets, buffers, alias, arena, int(live.max(initial=0)), sum(b.size for b in buffers))


def bound_shape(shape: tuple, dims: dict[str, int]) -> tuple[int, ...] | None:
    """``shape`` with its symbols replaced by ``dims``; None if one is not in ``dims``."""
    out = []
    for d in shape:
        if not isinstance(d, int):
            d = dims.get(d)
            if d is None:
                return None
        out.append(d)
    return tuple(out)


@dataclass
class RunArena:
    """The per-op executor's arena for one input signature: which nodes write their output into
    it, where, as which array; every other node allocates its outputs (or returns views)."""

    slots: dict[str, tuple[int, tuple[int, ...], str]]  # node id -> (byte offset, buffer shape, dtype)
    arena_bytes: int
    buffers: list[LiveRange]           # the placed buffers, each named by its node's first output
    allocating: dict[str, int]      # node id -> output bytes (-1: set at run time), for nodes run outside it

    @property
    def placed_bytes(self) -> int:
        """Bytes of every placed buffer (what the executor no longer allocates per run)."""
        return sum(b.size for b in self.buffers)


def _buffer_shape(node, graph: Graph, dims: dict[str, int]) -> tuple[int, ...] | None:
    """The one array ``node`` writes: its output, or for linear_split the (rows, sum(sizes)) result
    its outputs are column blocks of; None when ``dims`` do not fix it or the op has no such array."""
    shapes = [bound_shape(graph.specs[n].shape, dims) for n in node.outputs.values()]
    if any(s is None for s in shapes):
        return None
    if len(shapes) == 1:
        return shapes[0]
    return shapes[0][:-1] + (sum(s[-1] for s in shapes),) if node.op == "linear_split" else None


def plan_run_arena(graph: Graph, dims: dict[str, int], writers: set[str]) -> RunArena:
    """The per-op executor's arena for ``graph`` with ``dims`` bound (a graph whose derived dims are
    symbolic needs ``bind_dims`` first). ``writers``: ids of the nodes that can write into a
    preallocated buffer (their op has ``into`` and returns no view of an input).

    A writer is placed when ``dims`` fix its buffer's shape and no graph output may view it (the
    caller keeps those). Any other node's outputs, unless its op is ``fresh`` (a loss, a weight's
    gradient: graph outputs that read large activations), may be views of its inputs' buffers, so a buffer
    lives until the last reader of any tensor that may view it; graph inputs, weights and the KV
    cache are never in it."""
    empty: frozenset[str] = frozenset()
    views: dict[str, frozenset[str]] = {}  # tensor -> the candidate buffers it is or may be a view of
    born: dict[str, tuple[str, int, tuple, str]] = {}  # candidate buffer -> (node id, step, shape, dtype)
    for i, node in enumerate(graph.nodes):
        outs = list(node.outputs.values())
        shape = _buffer_shape(node, graph, dims) if node.id in writers else None
        if shape is not None:
            born[outs[0]] = (node.id, i, shape, graph.specs[outs[0]].dtype)
            mine = frozenset(outs[:1])
        elif node.id in writers or get_op(node.op).fresh:
            mine = empty  # an allocating path: fresh outputs
        else:
            mine = empty.union(*(views.get(n, empty) for n in node.inputs.values()))
        for name in outs:
            views[name] = mine
    kept = empty.union(*(views.get(n, empty) for n in graph.outputs))  # may be seen by the caller
    last = {b: born[b][1] for b in born if b not in kept}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs.values():
            for b in views.get(name, empty):
                if b in last:
                    last[b] = max(last[b], i)
    buffers = [LiveRange(b, math.prod(born[b][2]) * np.dtype(born[b][3]).itemsize, born[b][1], last[b]) for b in last]
    offsets, arena = pack_arena(buffers)
    slots = {born[b][0]: (offsets[b], born[b][2], born[b][3]) for b in last}
    allocating = {}
    for node in graph.nodes:
        if node.id not in slots and not get_op(node.op).view:
            shapes = [bound_shape(graph.specs[n].shape, dims) for n in node.outputs.values()]
            allocating[node.id] = -1 if None in shapes else sum(
                math.prod(s) * np.dtype(graph.specs[n].dtype).itemsize for s, n in zip(shapes, node.outputs.values()))
    return RunArena(slots, arena, buffers, allocating)
