"""Activation memory of a compiled graph: tensor lifetimes, and an arena plan placing every
intermediate at a byte offset so that tensors alive at the same time never overlap.

A buffer is born at the step of the node that writes it and dies after its last reader (graph
outputs live to the end); views (``output_rows``, ``reshape``, the column blocks of
``linear_split``) share their base's buffer and keep it alive. Graph inputs (the caller's
arrays), weights and the KV cache are outside the arena.

``plan_arena`` is the greedy-by-size planner of TFLite's arena (and of TFLite Micro's
GreedyMemoryPlanner): the largest buffers are placed first, each at the lowest offset whose
gap fits it among the already-placed buffers whose lifetimes overlap its own.

``channel_slices`` lets concatenations along the channel axis (NHWC) disappear: the outputs of the
nodes a concat joins are written straight into their slices of one buffer, and the concat's output
(a DenseNet block's growing concats: prefixes of one buffer) is a view of it.

``plan_run_arena`` is the arena the per-op executor (runtime/executor.py) actually runs on:
only nodes whose op can write into a preallocated buffer (``OpDef.into``) are placed, graph
outputs never are, and the output of any other node not marked ``OpDef.fresh`` is taken to be
possibly a view of its inputs (a reshape, a slice or a transpose may return one), keeping their
buffers alive (and out of the arena, when that output is a graph output).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
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


@dataclass(frozen=True)
class ChannelSlice:
    """Where a tensor lives in a shared buffer of ``width`` channels per pixel (rows of the dims
    before the last; the pixel stride, at least the span of the buffer's tensors): its channels
    ``offset`` .. ``offset`` + its own. ``buffer`` names the buffer."""

    buffer: str
    offset: int
    width: int


def channel_slices(graph: Graph, can_place: Callable[[str], bool],
                   can_stride: Callable[[str], bool]) -> dict[str, ChannelSlice]:
    """Channel slices of shared buffers for the float32 concats along the last axis of a validated
    graph with static shapes: each input a concat joins is placed at its offset in the concat's
    output when ``can_place(input)`` (its producer can write a slice: a row stride), a concat that
    feeds another at its offset there (nested concats), and a concat's output is then a view of its
    inputs. Inputs that are not placed (graph inputs, weights, views...) are still copied by the concat
    into their slice. Concats that share inputs (DenseNet: every layer's concat holds all the block's
    earlier outputs at the same offsets) share one buffer, as wide as its widest member.

    A concat joins the buffers of its inputs only if every tensor keeps one offset (an input
    concatenated twice, or at two offsets by two concats, does not) and the tensors written into a
    buffer (placed inputs, and the copies of the others) cover disjoint channels, so nothing written
    is ever overwritten. A member narrower than its buffer is a strided view: ``can_stride(tensor)``
    says whether its readers take one; a concat whose output cannot be is left out (it copies). A
    buffer whose every member can be strided gets a padded pixel stride (``pixel_pitch``). Returns
    each member's slice; tensors not in it keep buffers of their own."""
    concats = [node for node in graph.nodes if node.op == "concat" and _channel_concat(graph, node)]
    refused: set[str] = set()  # concat outputs whose slice would be strided where it cannot be
    while True:
        slices = _join_concats(graph, concats, can_place, refused)
        strided = {name for name, sl in slices.items()
                   if graph.specs[name].shape[-1] != sl.width and not can_stride(name)}
        if not strided & {c.outputs["y"] for c in concats}:
            break
        refused |= strided & {c.outputs["y"] for c in concats}
    unpadded = {sl.buffer for name, sl in slices.items() if not can_stride(name)}
    return {name: sl if sl.buffer in unpadded else ChannelSlice(sl.buffer, sl.offset, pixel_pitch(sl.width))
            for name, sl in slices.items()}


def pixel_pitch(channels: int) -> int:
    """The float32 pixel stride of a shared buffer of ``channels``: an odd number of 64-byte lines.
    A power-of-two stride (a 256-channel DenseNet block: 1 KB) maps the pixels a step reads or
    writes together to a few cache sets, which they then evict from each other; an odd number of
    lines spreads 64 pixels over 64 sets."""
    lines = -(-channels // 16)
    return (lines + 1 - lines % 2) * 16


def _channel_concat(graph: Graph, node) -> bool:
    """Whether ``node`` (a concat) joins float32 tensors of two or more static dims along the last."""
    spec = graph.specs[node.outputs["y"]]
    return (spec.dtype == "float32" and len(spec.shape) >= 2 and all(isinstance(d, int) for d in spec.shape)
            and int(node.params["axis"]) % len(spec.shape) == len(spec.shape) - 1)


def _join_concats(graph: Graph, concats: list, can_place: Callable[[str], bool],
                  refused: set[str]) -> dict[str, ChannelSlice]:
    """channel_slices' placement for ``concats`` in graph order, leaving out the ``refused`` outputs.
    Offsets are channels in a buffer's frame (a merged buffer's may start below 0 until the end)."""
    buffer_of: dict[str, str] = {}    # member tensor -> its buffer
    at: dict[str, int] = {}           # member tensor -> its offset in its buffer's frame
    members: dict[str, list[str]] = {}                   # buffer -> its member tensors
    writes: dict[str, list[tuple[int, int, str]]] = {}   # buffer -> (start, end, tensor) written into it
    for node in concats:
        y = node.outputs["y"]
        if y in refused:
            continue
        xs = list(node.inputs.values())
        starts = np.cumsum([0] + [graph.specs[x].shape[-1] for x in xs[:-1]]).tolist()
        joined, new, copied = [], [], []  # (input, its offset in y)
        for x, o in zip(xs, starts):
            if xs.count(x) > 1:
                copied.append((x, o))
            elif x in buffer_of:
                joined.append((x, o))
            elif can_place(x):
                new.append((x, o))
            else:
                copied.append((x, o))
        if not joined and not new:
            continue  # nothing written in place: the concat copies, as before
        y_at: dict[str, int] = {}     # each joined buffer -> y's offset in its frame
        if any(y_at.setdefault(buffer_of[x], at[x] - o) != at[x] - o for x, o in joined):
            continue  # one buffer at two offsets of y
        # y's buffer: the first joined one (or a new one, y at 0); the others move into its frame
        buf = next(iter(y_at), y)
        base = y_at.get(buf, 0)       # y's offset in buf's frame
        spans = list(writes.get(buf, []))
        for other, other_at in y_at.items():
            if other != buf:
                spans += [(s0 + base - other_at, s1 + base - other_at, t) for s0, s1, t in writes[other]]
        spans += [(base + o, base + o + graph.specs[x].shape[-1], x) for x, o in new + copied]
        if not _disjoint(spans):
            continue
        for other, other_at in y_at.items():
            if other != buf:
                for t in members.pop(other):
                    buffer_of[t], at[t] = buf, at[t] + base - other_at
                    members.setdefault(buf, []).append(t)
                del writes[other]
        for t, o in [(y, 0)] + new:
            buffer_of[t], at[t] = buf, base + o
            members.setdefault(buf, []).append(t)
        writes[buf] = spans
    slices = {}
    for buf, names in members.items():
        lo = min(at[t] for t in names)
        width = max(at[t] + graph.specs[t].shape[-1] for t in names) - lo
        slices.update({t: ChannelSlice(buf, at[t] - lo, width) for t in names})
    return slices


def _disjoint(spans: list[tuple[int, int, str]]) -> bool:
    """Whether the written channel ranges (start, end, tensor) overlap only where one tensor is written
    to the same range twice (a concat input copied by two concats of one buffer)."""
    spans = sorted(set(sp for sp in spans if sp[1] > sp[0]))
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
