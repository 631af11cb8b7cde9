"""Step plans: a compiled graph's forward pass as native steps, run by the engine in one call.

Python plans, native runs. The per-op executor crosses from Python into a kernel once per node
(validation, output allocation, an OpenMP region: microseconds each, as much as a small node's
arithmetic). For a graph whose every shape is fixed, ``Plan`` lowers each node once, through its
op's ``cpu`` entry in the op table (volvox/ops), into the engine's typed steps
(volvox/_kernels/engine/steps.pxi) over one arena placed by lifetime (compile/memory.pack_arena:
a node's outputs side by side, float32 offsets, int8 tensors rounded up to whole floats); a run
executes every step in one nogil call, on the calling thread and the engine's team of worker threads
(volvox/_kernels/engine/team.pxi). An op without a ``cpu`` entry runs
as an *island*: its numpy fast path on arena views, between native step ranges, exactly as the
per-op executor runs it. An op whose output is a view of its input (``OpDef.view``: reshape,
output_rows) has no step: its output is its input's buffer. A channel concat's inputs may be
written straight into its output (compile/memory.channel_slices: ``_channel_slices``): the tensors
of such a buffer are channel slices, strided views that only the lowerings asking for one
(``input`` / ``output`` with ``strided``) get.

Two kinds of graphs are planned:
- a language model's single-token step (``layers`` > 0): the inputs ``tokens`` and ``positions``
  are the run's token and position (the embedding, RoPE, KV-store and attention steps read them),
  the KV cache is bound at run time, ``seq`` and ``out_seq`` are 1. ``run_token`` returns the
  logits. A model's first decode step builds it (tasks/generate.py).
- any graph with static shapes (an image model, or one specialised to its inputs' shapes by
  ``PlanHook``): the inputs are arrays the run points its steps at (or copies into the arena:
  ``_feed``); ``run`` returns every graph output.

The nodes are lowered twice into the same steps over the same arena: once with their work split
for the team (``split`` threads), once for one thread (which a one-thread run, or one the pacer
sends to one thread, takes: a 6x6 map is then one band, not two). Each step runs the same tile
functions on the same work items as the per-op kernels (volvox.cpu), so a plan's outputs equal the
per-op executor's bit for bit (tests/runtime/test_native_plan.py, tests/runtime/test_vision_plan.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from volvox import cpu
from volvox.cpu import address, aligned_empty
from volvox.compile.fuse_linear import GraphIndex
from volvox.compile.memory import RUN_TIME_DIMS, ChannelSlice, LiveRange, bind_dims, channel_slices, pack_arena
from volvox.errors import VolvoxError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops import get_op, validate
from volvox.runtime.pacing import Pacer

_DTYPES = {"float32": np.float32, "int8": np.int8, "int32": np.int32}  # activation dtypes a plan holds
RUN_INPUTS = ("tokens", "positions")          # a token step's inputs: the run's token and position
ACT_ROW_BYTES = 1 << 16                       # a quantized activation row's buffer (K up to ~57k)
# Multiply-adds per thread below which a plan runs on fewer threads (waking a second thread
# costs ~10 us). 2-thread gain on a quiet machine (2 cores, runs back to back for 2 s, medians):
# person detector (7.5M MACs) 0.37 -> 0.29 ms, BlazeFace (31M) 1.09 -> 1.08 ms (its steps are
# small and memory-bound), EfficientNet-Lite0 (385M) 8.4 -> 6.7 ms; with one CPU-bound process
# beside it (the policy below) 0.37 -> 0.37, 1.08 -> 1.08 and 9.0 -> 8.8 ms.
MACS_PER_THREAD = 2 << 20
# Under load a team collapses instead: a stalled multi-thread run sends the next ones to one
# thread (runtime/pacing.py).


# The ops whose f32 steps can take the residual add after them (fold_residual).
RESIDUAL_CONVS = ("conv2d", "dwpw_conv2d", "expand_dwpw_conv2d")
# Activations a conv step applies to each block it writes (fold_activation).
FOLDED_ACTIVATIONS = ("silu", "hard_swish")
# Ops whose float32 steps can write their output as a channel slice of a wider NHWC tensor (pixels
# a row stride apart), and ops that can read an input as one: a concat's inputs written by the first
# and read by the second are written straight into the concat's buffer (compile/memory.channel_slices).
SLICE_WRITERS = ("conv2d", "dwpw_conv2d", "max_pool2d", "avg_pool2d")
SLICE_READERS = ("concat", "conv2d", "dwpw_conv2d")

class Unsupported(Exception):
    """The graph has something a plan does not lower (the per-op executor runs it)."""


class SliceRefused(Exception):
    """A lowering cannot take tensor ``name`` as a channel slice (its step reads or writes whole
    pixels): the plan is lowered again with that tensor in a buffer of its own."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class Plan:
    """A compiled graph's forward pass as native steps (see the module doc)."""

    def __init__(self, graph: Graph, weights: dict[str, Any], layers: int = 0, capacity: int = 0):
        self.layers = layers          # > 0: a language model's token step over a KV cache of this many layers
        self.capacity = capacity      # KV cache positions the attention scratch is sized for
        if layers:
            if [s.name for s in graph.inputs] != list(RUN_INPUTS) or len(graph.outputs) != 1:
                raise Unsupported("a token step's inputs must be (tokens, positions) and its output the logits")
            graph = bind_dims(graph, {"seq": 1})
        self.graph = graph
        self._dims = dict.fromkeys(RUN_TIME_DIMS, 1) if layers else {}  # run-time dims a token step binds (one row)
        self.weights = weights
        self.threads = max(cpu.get_num_threads(), os.cpu_count() or 1)  # scratch is sized for this many
        self._keep: list[Any] = []    # every array a step points into
        self._lock = threading.Lock()
        self.runs = 0                 # forward passes run so far
        self.seconds = 0.0            # wall time inside their native step ranges
        self.macs = 0                 # multiply-adds of one forward pass (convs and matrix products)
        self.vocab = self.kv_shape = None  # token steps: set by the embedding and attention lowerings
        self.max_positions = capacity      # and lowered by a learned position table
        self._buffers: dict[str, np.ndarray] = {}  # node id -> a plan buffer of its (both lowerings share it)
        self._packs: dict[tuple, Any] = {}  # (weight name, kind) -> its packing (packed())
        refused: set[str] = set()     # tensors a lowering could not take as channel slices
        while True:
            try:
                self._lower(refused)
                break
            except SliceRefused as e:
                if e.name in refused:  # a lowering refusing what no slice holds: a bug, not a graph
                    raise Unsupported(f"tensor {e.name!r} refused as a channel slice twice") from None
                refused.add(e.name)
        if layers and (self.vocab is None or self.kv_shape is None):
            raise Unsupported("no token embedding or no attention")
        self.useful_threads = max(1, self.macs // MACS_PER_THREAD)
        self.pacer = Pacer()          # one thread after a stalled team run (runtime/pacing.py)
        self._last_pos = -1           # token steps: the position of the last one run

    # ---------------------------------------------------------------------- lowering
    def _lower(self, refused: set[str]) -> None:
        """Place every activation in the arena and lower every node (``refused``: tensors kept out of
        channel slices)."""
        graph, weights = self.graph, self.weights
        self._keep = []
        alias = {node.outputs["y"]: node.inputs["x"] for node in graph.nodes
                 if get_op(node.op, node.id).view and node.inputs["x"] not in weights
                 and self._floats(node.outputs["y"]) == self._floats(node.inputs["x"])}
        idx = GraphIndex(graph)
        in_place = {**self._conv_activations_in_place(idx), **self._conv_residuals_in_place(idx)}
        alias.update(in_place)
        for node in graph.nodes:
            op = get_op(node.op)
            if op.cpu is None and node.outputs.get("y") not in alias and (op.stateful or len(node.outputs) != 1):
                raise Unsupported(f"op {node.op!r} (node {node.id!r}) has no native step")

        def root(name: str) -> str:
            while name in alias:
                name = alias[name]
            return name

        self._root = root
        run_inputs = set(RUN_INPUTS) if self.layers else set()
        last: dict[str, int] = {}  # stored tensor -> index of the last node reading it
        for i, node in enumerate(graph.nodes):
            for name in node.inputs.values():
                if name not in weights:
                    last[root(name)] = i
        for name in graph.outputs:
            last[root(name)] = len(graph.nodes)
        skip = {node.id for node in graph.nodes if node.outputs.get("y") in alias}  # views, in place: no buffer
        views = {node.id for node in graph.nodes if node.id in skip and node.outputs["y"] not in in_place}  # no step
        self._slices = self._channel_slices(idx, alias, refused)
        # each node's outputs side by side (linear_split's column blocks are one GEMV row), alive from
        # the node to its outputs' last reader; inputs from the start; a buffer of channel slices from
        # its first member's node to its members' last reader
        buffers = [LiveRange(s.name, 4 * self._floats(s.name), -1, last.get(s.name, -1))
                   for s in graph.inputs if s.name not in run_inputs]
        self._parts: dict[str, tuple[str, int]] = {}  # tensor -> (its buffer, float offset in it)
        sliced: dict[str, list[int]] = {}  # slice buffer -> [floats, first step, last step]
        for i, node in enumerate(graph.nodes):
            sl = self._slices.get(node.outputs.get("y"))
            if sl is not None:
                y = node.outputs["y"]
                span = sliced.setdefault(sl.buffer, [self._floats(y) // self._shape(y)[-1] * sl.width, i, i])
                span[2] = max(span[2], last.get(y, i))
                self._parts[y] = ("slices:" + sl.buffer, sl.offset)
                continue
            if node.id in skip:
                continue
            ports = [p for p in get_op(node.op).output_names if p in node.outputs]  # in the op's port order
            off = 0
            for port in ports:
                self._parts[node.outputs[port]] = (node.id, off)
                off += self._floats(node.outputs[port])
            buffers.append(LiveRange(node.id, 4 * off, i, max(i, max(last.get(n, i) for n in node.outputs.values()))))
        for s in graph.inputs:
            if s.name not in run_inputs:
                self._parts[s.name] = (s.name, 0)
        buffers += [LiveRange("slices:" + b, 4 * floats, first, end) for b, (floats, first, end) in sliced.items()]
        offsets, nbytes = pack_arena(buffers)
        self._home = {name: offsets[buf] // 4 + off for name, (buf, off) in self._parts.items()}  # float offsets
        self.arena = aligned_empty(nbytes // 4, np.float32)  # (floats,) every activation of one forward pass
        self.arena_bytes = nbytes
        self._act: np.ndarray | None = None  # act_row()'s buffer
        inputs = [s for s in graph.inputs if s.name not in run_inputs]
        # graph inputs: (the addresses of their arena bytes) each, and which must still be copied in (_feed)
        self._input_bytes = [(address(self.arena) + 4 * self._home[s.name],
                              address(self.arena) + 4 * (self._home[s.name] + self._floats(s.name))) for s in inputs]
        self._copied = {i for i, s in enumerate(inputs) if s.name in {root(o) for o in graph.outputs}}
        nodes = [node for node in graph.nodes if node.id not in views]
        self.solo_steps = self._lower_nodes(nodes, 1)
        islands, ports = [i[0] for i in self.islands], self._ports
        if self.threads > 1:  # the team's steps: the same steps, their work split for the team
            self._lower_nodes(nodes, self.threads)
            assert [i[0] for i in self.islands] == islands and self._ports == ports
            assert len(self.steps) == len(self.solo_steps)
        else:
            self.steps = self.solo_steps
        self.inputs = [self._tensor(s.name) for s in inputs]
        self.outputs = {name: self._tensor(name) for name in graph.outputs}
        self._times = np.zeros(len(self.steps), np.float64)  # (steps,) seconds of the last profiled run

    def _lower_nodes(self, nodes: list[Node], split: int) -> Any:
        """Every node's steps into a new ``self.steps``, work items split for ``split`` threads (steps,
        islands and node ids are the same whatever the split); returns the steps."""
        self.split, self.macs = split, 0
        self.steps = cpu.engine.StepPlan(3 * len(self.graph.nodes) + sum(len(n.inputs) for n in self.graph.nodes),
                                         self.layers)
        self.step_nodes: list[tuple[str, str]] = []  # (steps,) the node id and op each step runs
        self.islands: list[tuple] = []  # (steps before it, fn, params, input arrays, output view): numpy nodes
        self._ports: list[tuple] = []  # (step, port 0-2, graph input, byte offset): steps reading an input
        inputs = [s.name for s in self.graph.inputs if not (self.layers and s.name in RUN_INPUTS)]
        for node in nodes:
            roots = {self._root(v) for v in node.inputs.values()}
            self._reads = [i for i, name in enumerate(inputs) if name in roots]  # graph inputs it reads
            op = get_op(node.op)
            if op.cpu is not None:
                op.cpu(self, node)
            else:
                self.island(node)
            self.step_nodes += [(node.id, node.op)] * (len(self.steps) - len(self.step_nodes))
        return self.steps

    # ----------------------------------------------- what the ops' ``cpu`` lowerings call
    def add(self, kind: str, **fields) -> None:
        """Append a step of ``kind`` (a StepPlan method, its typed fields); note where it reads a graph
        input (one of its three input operands), so that a run can point it at the caller's array
        (_feed). An input its output or scratch lies in is copied in."""
        getattr(self.steps, kind)(**fields)
        step = len(self.steps) - 1
        operands = self.steps.operands(step) + (fields.get("scratch", 0),)
        for i in self._reads:
            lo, hi = self._input_bytes[i]
            for port, at in enumerate(operands):
                if lo <= at < hi:
                    if port < 3:
                        self._ports.append((step, port, i, at - lo))
                    else:
                        self._copied.add(i)

    def _conv_activations_in_place(self, idx: GraphIndex) -> dict[str, str]:
        """{output: input} of each silu / hard_swish node whose input a conv2d writes and it alone reads:
        it runs in place (its output stored as its input), so that fold_activation can hand it to the
        conv's step."""
        graph = self.graph
        return {node.outputs["y"]: node.inputs["x"] for node in graph.nodes
                if node.op in FOLDED_ACTIVATIONS and getattr(idx.producer.get(node.inputs["x"]), "op", None) == "conv2d"
                and idx.sole_consumer(node.inputs["x"], node) and graph.specs[node.inputs["x"]].dtype == "float32"
                and self._floats(node.outputs["y"]) == self._floats(node.inputs["x"])}

    def _conv_residuals_in_place(self, idx: GraphIndex) -> dict[str, str]:
        """{output: input} of each float32 two-input add / add_n of one shape (a residual block's sum)
        one of whose inputs a conv2d (or a fused pair ending in a 1x1 conv: dwpw_conv2d,
        expand_dwpw_conv2d) writes and it alone reads: it runs in place on that input, so
        that fold_residual can hand it to the conv's step (of two such inputs, the later conv's: the
        step just before the add)."""
        graph = self.graph
        order = {node.id: i for i, node in enumerate(graph.nodes)}
        in_place = {}
        for node in graph.nodes:
            xs, y = list(node.inputs.values()), node.outputs.get("y")
            if node.op not in ("add", "add_n") or len(xs) != 2 or xs[0] == xs[1] or \
                    graph.specs[y].dtype != "float32" or any(graph.specs[x].shape != graph.specs[y].shape for x in xs):
                continue
            convs = [x for x in xs if getattr(idx.producer.get(x), "op", None) in RESIDUAL_CONVS
                     and idx.sole_consumer(x, node)]
            if convs:
                in_place[y] = max(convs, key=lambda x: order[idx.producer[x].id])
        return in_place

    def _channel_slices(self, idx: GraphIndex, alias: dict[str, str], refused: set[str]) -> dict[str, ChannelSlice]:
        """compile/memory.channel_slices for this plan: a concat input is written in place when its
        producer is a SLICE_WRITERS node, its readers SLICE_READERS nodes, and it is not a view, viewed,
        in place or ``refused``; a concat's output may be a strided view under the same conditions on
        its readers (a whole-width one is contiguous: any reader)."""
        bound = set(alias) | set(alias.values())

        def can_stride(name: str) -> bool:
            return (name not in bound and name not in refused
                    and all(node.op in SLICE_READERS for node in idx.consumers.get(name, [])))

        def can_place(name: str) -> bool:
            node = idx.producer.get(name)
            return (node is not None and node.op in SLICE_WRITERS and list(node.outputs.values()) == [name]
                    and can_stride(name))

        return channel_slices(self.graph, can_place, can_stride)

    def fold_residual(self, node: Node, act: int) -> bool:
        """Whether the step before ``node`` (a residual add in place on a conv's output: see
        _conv_residuals_in_place; FN code ``act``) now applies it: an f32 conv step (or DWPW /
        EXDWPW step) with no activation writing that output adds the add's other input, then act, to each block it
        writes (one step and one pass over the output fewer; the same bits)."""
        xs, y = list(node.inputs.values()), node.outputs["y"]
        conv = next((x for x in xs if self._root(x) == self._root(y)), None)
        if conv is None or self._reads:  # not in place, or the other input is the caller's array (_feed)
            return False
        other = xs[1] if conv == xs[0] else xs[0]
        if other in self.weights or not self._tensor(other).flags.c_contiguous:  # the step reads it whole
            return False
        return self.steps.fold_residual(address(self._tensor(conv)), address(self._tensor(other)), act)

    def fold_activation(self, node: Node, fn: int) -> bool:
        """Whether the step before ``node`` (silu or hard_swish, FN code ``fn``, in place: see
        _conv_activations_in_place) now applies it: an f32 conv or depthwise conv step with no
        activation writing ``node``'s input applies it to each block it writes (one pass over the
        conv's output fewer; the same bits)."""
        x, y = node.inputs["x"], node.outputs["y"]
        if x in self.weights or self._root(y) != self._root(x):
            return False
        return self.steps.fold_activation(fn, address(self._tensor(x)))

    def need(self, node: Node, cond: bool, what: str) -> None:
        """Unsupported (naming the node) unless ``cond``."""
        if not cond:
            raise Unsupported(f"node {node.id!r} ({node.op}): {what}")

    def run_input(self, node: Node, port: str) -> str | None:
        """"tokens" or "positions" when ``port`` reads that run input of a token step, else None."""
        name = node.inputs.get(port)
        return name if self.layers and name in RUN_INPUTS else None

    def input(self, node: Node, port: str, strided: bool = False) -> np.ndarray:
        """An input's array: the weight itself (contiguous, kept alive) or its arena view; a channel
        slice (a strided view: its pixels a row stride apart) only to a lowering that says it reads one
        (``strided``), else SliceRefused."""
        name = node.inputs[port]
        self.need(node, self.run_input(node, port) is None, f"{port} reads the run's {name}")
        if name in self.weights:
            w = self.weights[name]
            self.need(node, isinstance(w, np.ndarray), f"{port} is not a numpy weight")
            # the same array when already contiguous (its packed forms are cached by identity);
            # ascontiguousarray would make a 0-d weight 1-d
            w = np.ascontiguousarray(w) if w.ndim else w.copy()
            self._keep.append(w)
            return w
        return self._whole(name, strided)

    def optional(self, node: Node, port: str) -> np.ndarray | None:
        """input(), or None when the optional port is not wired."""
        return self.input(node, port) if port in node.inputs else None

    def weight(self, node: Node, port: str) -> Any:
        """The weight an input port reads as stored (an array or QuantTensor); Unsupported for activations."""
        self.need(node, node.inputs[port] in self.weights, f"{port} is not a weight")
        return self.weights[node.inputs[port]]

    def output(self, node: Node, port: str = "y", strided: bool = False) -> np.ndarray:
        """The arena view an output port writes (a channel slice only if ``strided``: as input())."""
        return self._whole(node.outputs[port], strided)

    def _whole(self, name: str, strided: bool) -> np.ndarray:
        """_tensor(name); SliceRefused for a strided channel slice unless ``strided``."""
        a = self._tensor(name)
        if not strided and not a.flags.c_contiguous:
            raise SliceRefused(name)
        return a

    @staticmethod
    def pixel_stride(a: np.ndarray) -> int:
        """Elements from one pixel (position of the last axis) of ``a`` to the next: 0 when they are
        contiguous (the steps' default), more for a channel slice."""
        return 0 if a.flags.c_contiguous else a.strides[-2] // a.itemsize

    def outputs_row(self, node: Node) -> np.ndarray:
        """A node's outputs side by side as one float32 row (linear_split's GEMV writes them at once)."""
        ports = [p for p in get_op(node.op).output_names if p in node.outputs]
        start = self._home[node.outputs[ports[0]]]
        n = sum(self._floats(node.outputs[p]) for p in ports)
        return self.arena[start:start + n]

    def scratch(self, per_thread: int, dtype) -> np.ndarray:
        """Scratch of ``per_thread`` elements for each of ``split`` threads (kept alive)."""
        s = aligned_empty(max(self.split * per_thread, 1), dtype)  # (split, per_thread)
        self._keep.append(s)
        return s

    def buffer(self, node: Node, shape: tuple, dtype) -> np.ndarray:
        """A buffer of the plan's own for ``node`` (both lowerings share it): a tensor a fused node
        stores between two of its steps."""
        if node.id not in self._buffers:
            self._buffers[node.id] = np.empty(shape, dtype)
        return self._buffers[node.id]

    def act_row(self, node: Node, nbytes: int) -> np.ndarray:
        """The plan's buffer for one quantized activation row (quantize_act writes it, the next linear
        reads it: steps run in order, so every matrix product shares it)."""
        self.need(node, nbytes <= ACT_ROW_BYTES, "activation row too large")
        if self._act is None:
            self._act = aligned_empty(ACT_ROW_BYTES, np.uint8)  # (bytes,)
        return self._act

    def keep(self, *arrays) -> None:
        """Keep ``arrays`` alive as long as the plan (its steps point into them)."""
        self._keep.extend(a for a in arrays if a is not None)

    def packed(self, name: str, kind: Any, pack) -> Any:
        """Weight ``name``'s packing of ``kind``, ``pack()`` once per plan (both lowerings read it; a
        writeable weight is not in the kernels' cache)."""
        key = (name, kind)
        if key not in self._packs:
            self._packs[key] = pack()
        return self._packs[key]

    def island(self, node: Node) -> None:
        """A node without a native step: its numpy function (fast path, else reference) on arena views
        between native step ranges, exactly as the per-op executor runs it."""
        op = get_op(node.op, node.id)
        self.need(node, not op.stateful and len(node.outputs) == 1, "stateful or several outputs")
        self.need(node, not self.layers, "a numpy island in a token step (run_token runs native steps only)")
        args = [self.input(node, p) if p in node.inputs else None for p in op.input_names]
        self.islands.append((len(self.steps), op.fast or op.ref, node.params, args, self.output(node, next(iter(node.outputs)))))
        self._copied.update(self._reads)  # numpy reads its arena view

    def _shape(self, name: str) -> tuple:
        """Activation ``name``'s shape, the run-time dims a token step binds made numbers."""
        return tuple(self._dims.get(d, d) for d in self.graph.specs[name].shape)

    def _floats(self, name: str) -> int:
        """Arena floats of activation ``name`` (static shape, a dtype the plan holds), else Unsupported."""
        spec, shape = self.graph.specs[name], self._shape(name)
        if spec.dtype not in _DTYPES or not all(isinstance(d, int) for d in shape):
            raise Unsupported(f"tensor {spec.describe()}: not a static float32 / int8 / int32 shape")
        return -(-int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[spec.dtype]).itemsize // 4)

    def _tensor(self, name: str) -> np.ndarray:
        """The arena view holding activation ``name``, in its shape and dtype (a channel slice: its
        pixels its buffer's width apart)."""
        dtype, shape = np.dtype(_DTYPES[self.graph.specs[name].dtype]), self._shape(name)
        start = self._home[self._root(name)]
        sl = self._slices.get(name)  # (a view's base is never strided: _channel_slices)
        if sl is not None and sl.width != shape[-1]:
            strides = [4, 4 * sl.width]  # (float32) channels, then pixels, then the dims before
            for d in reversed(shape[1:-1]):
                strides.append(strides[-1] * d)
            rows = int(np.prod(shape[:-1], dtype=np.int64))
            flat = self.arena[start:start + (rows - 1) * sl.width + shape[-1]]
            return np.lib.stride_tricks.as_strided(flat, shape, strides[::-1])
        n = int(np.prod(shape, dtype=np.int64))
        raw = self.arena[start:start + -(-n * dtype.itemsize // 4)].view(np.uint8)
        return raw[:n * dtype.itemsize].view(dtype).reshape(shape)

    # ------------------------------------------------------------------------ running
    def run(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray] | None:
        """Every graph output for the input arrays (graph-input order, checked by the executor's
        check_feeds); None when this plan cannot run now (another thread is in it, or more threads
        than its scratch is sized for): the caller then runs the per-op executor."""
        threads = cpu.get_num_threads()
        if threads > self.threads:
            return None
        for a, t in zip(arrays, self.inputs):
            if a.shape != t.shape:
                return None
        if not self._lock.acquire(blocking=False):
            return None
        try:
            team = min(self.useful_threads, threads)
            if team == 1:  # nothing to pace
                self._forward(arrays, 1)
            else:
                nt = self.pacer.threads(team)
                self.pacer.pace(nt, self._forward(arrays, nt))
            self.runs += 1
            return {name: t.copy() for name, t in self.outputs.items()}
        finally:
            self._lock.release()

    def run_token(self, kv, token: int, pos: int, profile=None) -> np.ndarray | None:
        """A token step: the logits (1, vocab) for ``token`` at ``pos``, its k/v appended to ``kv``; None
        when this plan cannot run now (another thread is in it, more threads than it has scratch for,
        or a cache of another size): the caller then uses the per-op executor."""
        if (cpu.get_num_threads() > self.threads or kv.max_tokens != self.capacity
                or kv.keys[0].shape != (self.kv_shape[0], self.capacity, self.kv_shape[1])
                or len(kv.keys) != self.layers or not 0 <= token < self.vocab or not 0 <= pos < self.max_positions
                or not self._lock.acquire(blocking=False)):
            return None
        try:
            if kv is not getattr(self, "_bound_cache", None):
                self.steps.bind_cache([address(k) for k in kv.keys], [address(v) for v in kv.values], kv.max_tokens)
                if self.solo_steps is not self.steps:
                    self.solo_steps.bind_cache([address(k) for k in kv.keys], [address(v) for v in kv.values],
                                               kv.max_tokens)
                self._bound_cache = kv
            kv.reserve(pos + 1, pos)
            if abs(pos - self._last_pos) > 32 + self._last_pos // 4:  # another context: new timings
                self.pacer.restart()
            self._last_pos = pos
            nt = self.pacer.threads(cpu.get_num_threads())
            steps = self.solo_steps if nt == 1 else self.steps
            t0 = time.perf_counter()
            steps.run(token, pos, None if profile is None else self._times, nt)
            seconds = time.perf_counter() - t0
            self.pacer.pace(nt, seconds)
            if profile is not None:
                self._record(profile, t0, seconds)
            self.runs += 1
            self.seconds += seconds
            return self.outputs[self.graph.outputs[0]].reshape(1, -1).copy()
        finally:
            self._lock.release()

    def _feed(self, arrays: list[np.ndarray], steps) -> None:
        """Point ``steps``' reads of each graph input at the caller's array (C-contiguous, of the input's
        dtype: check_feeds); an input that an island, a graph output or an unaligned array needs in the
        arena is copied there, and the steps read that."""
        for i, (a, t) in enumerate(zip(arrays, self.inputs)):
            if i in self._copied or not a.flags.aligned:
                np.copyto(t, a)
                a = t
            for step, port, k, offset in self._ports:
                if k == i:
                    steps.point(step, port, a, offset)

    def _forward(self, arrays: list[np.ndarray], threads: int, times: np.ndarray | None = None) -> float:
        """Every step and island once on the input arrays (_feed), in graph order (one thread: the steps
        split for one); returns the seconds the native step ranges took (what a stalled team thread
        slows: the numpy islands, and a garbage collection they start, are the caller's thread alone)."""
        steps = self.solo_steps if threads == 1 else self.steps
        self._feed(arrays, steps)
        start, native = 0, 0.0
        for stop, fn, params, args, y in self.islands:
            if stop > start:
                t0 = time.perf_counter()
                steps.run_range(threads, times, start, stop)
                native += time.perf_counter() - t0
            np.copyto(y, fn(None, params, *args))
            start = stop
        if start < len(steps):
            t0 = time.perf_counter()
            steps.run_range(threads, times, start)
            native += time.perf_counter() - t0
        return native

    def step_seconds(self, arrays: list[np.ndarray], runs: int = 20) -> np.ndarray:
        """(steps,) each step's median wall seconds over ``runs`` forward passes (thread 0 waits for every
        step to finish, so steps do not overlap as they do in ``run``)."""
        times = np.zeros((runs, len(self.steps)), np.float64)  # (runs, steps)
        with self._lock:
            for r in range(runs):
                self._forward(arrays, self.useful_threads, times[r])
        return np.median(times, axis=0)

    def _record(self, prof, t_start: float, seconds: float) -> None:
        """Add the last run's per-node times to a runtime Profile (as the per-op executor does)."""
        t, i, n = t_start, 0, len(self.step_nodes)
        while i < n:
            node_id, op = self.step_nodes[i]
            dt = 0.0
            while i < n and self.step_nodes[i][0] == node_id:  # a node's steps are consecutive
                dt += self._times[i]
                i += 1
            for table, key in ((prof.by_op, op), (prof.by_node, node_id)):
                rec = table[key]
                rec[0] += 1
                rec[1] += dt
            prof.events.append((node_id, op, t, dt, [], 0))
            t += dt
        prof.runs += 1
        prof.seconds += seconds


# Input shapes whose plans a PlanHook keeps for a graph with symbolic input dims (a text line's
# width); the least recently used plan goes first.
PLANS_PER_GRAPH = 4


class PlanHook:
    """Model.run's native path: a plan per input shape (the graph's own when its shapes are static,
    else the graph specialised to the feeds' shapes, the last PLANS_PER_GRAPH kept); run returns
    None (per-op executor) when the graph does not lower or the plan cannot run."""

    def __init__(self, executor):
        self.executor = executor
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()  # input shapes -> plan, oldest first
        self.why: str | None = None  # why the graph did not lower (None: not tried yet, or lowered)
        self._weights = {n: w for (_, w), n in zip(executor.weight_slots, executor.graph.weights)}
        self._lock = threading.Lock()
        inputs = executor.graph.inputs
        # a one-input graph's feed, checked in a few attribute reads: (its name, dtype, the plan
        # used last); an ndarray of that dtype, C-contiguous and of that plan's input shape
        # passes check_feeds unchanged
        self._single = (inputs[0].name, np.dtype(inputs[0].dtype), None) if len(inputs) == 1 else None

    @property
    def plan(self) -> Plan | None:
        """The plan used last (None before the first lowering)."""
        return next(reversed(self.plans.values()), None)

    def run(self, feeds: dict[str, Any]) -> dict[str, np.ndarray] | None:
        """Graph outputs through the plan for the feeds' shapes, or None."""
        if self.why is not None:
            return None
        single = self._single
        if single is not None and single[2] is not None and len(feeds) == 1:
            a = feeds.get(single[0])
            if (type(a) is np.ndarray and a.dtype == single[1] and a.shape == single[2].inputs[0].shape
                    and a.flags.c_contiguous):
                return single[2].run([a])
        arrays = self.executor.check_feeds(feeds)
        key = tuple(a.shape for a in arrays)
        with self._lock:  # callers may share a Model across threads
            plan = self.plans.get(key)
            if plan is None:
                graph = self._graph_for(arrays)
                if graph is None:
                    return None
                try:
                    plan = Plan(graph, self._weights)
                except (Unsupported, VolvoxError) as e:  # the per-op path runs (and reports real errors)
                    self.why = str(e) or type(e).__name__
                    return None
                self.plans[key] = plan
                if len(self.plans) > PLANS_PER_GRAPH:
                    self.plans.popitem(last=False)
            self.plans.move_to_end(key)
            if self._single is not None:
                self._single = self._single[:2] + (plan,)
        return plan.run(arrays)

    def _graph_for(self, arrays: list[np.ndarray]) -> Graph | None:
        """The graph with every input dim bound to the arrays' shapes (itself when already static);
        None when shape inference fails for them (the per-op executor then reports it)."""
        graph = self.executor.graph
        if all(isinstance(d, int) for spec in graph.inputs for d in spec.shape):
            return graph
        inputs = [TensorSpec(spec.name, tuple(a.shape), spec.dtype) for spec, a in zip(graph.inputs, arrays)]
        bound = Graph(inputs, graph.weights, graph.nodes, graph.outputs)
        try:
            validate(bound)
        except VolvoxError:
            return None
        return bound
