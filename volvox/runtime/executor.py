"""The executor: a validated graph compiled into a flat list of steps over numbered slots.

Python plans: each node becomes (function, params, input slots, output slots);
intermediate slots are released right after their last reader.

Nodes whose op can write into a preallocated buffer (``OpDef.into``) write into one arena per
executor: planned once per input signature (compile/memory.plan_run_arena: offsets reused by
lifetime, the last ``ARENA_PLANS`` signatures kept), one 64-byte-aligned buffer grown when a
plan needs more. Every other node allocates its outputs with numpy, and is taken to possibly
return views of its inputs (their buffers stay alive while those are read). Graph outputs are
never in the arena (the caller keeps them), nor are graph inputs, weights or the KV cache.
A run that finds the arena in use by another thread runs without it; ``reference=True`` runs
every op's ``ref`` without it; ``profile=True`` times the same arena run as production.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from volvox.compile.memory import ALIGNMENT, RUN_TIME_DIMS, RunArena, bind_dims, plan_run_arena
from volvox.errors import ShapeError, VolvoxError
from volvox.ir.graph import Graph
from volvox.ops import get_op
from volvox.ops.context import RunContext

ARENA_PLANS = 8  # input signatures whose arena plans an executor keeps (prefill: full chunks and the last one)




@dataclass
class Step:
    """One compiled node."""

    fn: Callable
    params: dict
    inputs: list[int | None]   # slot per input port (None: optional port not wired)
    outputs: list[int]
    release: list[int]         # slots whose last reader is this step
    node_id: str
    op: str
    into: Callable | None = None  # writes fn's result into an arena buffer (OpDef.into); None: fn allocates


@dataclass
class Profile:
    """Accumulated wall time per op type and per node, and a trace of every node run (when profiling)."""

    by_op: dict[str, list] = field(default_factory=lambda: defaultdict(lambda: [0, 0.0]))    # op -> [calls, seconds]
    by_node: dict[str, list] = field(default_factory=lambda: defaultdict(lambda: [0, 0.0]))  # node -> [calls, seconds]
    runs: int = 0
    seconds: float = 0.0
    events: list[tuple] = field(default_factory=list)  # (node_id, op, start_s, seconds, output shapes, output bytes)
    backends: dict[str, str] = field(default_factory=dict)  # node -> backend that runs it (absent: cpu)

    def node_table(self, graph: Graph, top: int = 10) -> str:
        """The ``top`` nodes by total time: id, op, backend, calls, ms."""
        ops = {n.id: n.op for n in graph.nodes}
        rows = sorted(self.by_node.items(), key=lambda kv: -kv[1][1])[:top]
        lines = [f"{'node':<28}{'op':<14}{'backend':<9}{'calls':>7}{'ms':>10}"]
        lines += [f"{node[:27]:<28}{ops.get(node, '?'):<14}{self.backends.get(node, 'cpu'):<9}{calls:>7}{sec * 1e3:>10.2f}"
                  for node, (calls, sec) in rows]
        return "\n".join(lines)

    def reset(self) -> None:
        """Forget everything recorded so far (node placement stays)."""
        self.__init__(backends=self.backends)

    def write_trace(self, path: str) -> None:
        """Chrome trace-event JSON (open in Perfetto or chrome://tracing): one event per node run."""
        import json

        t0 = self.events[0][2] if self.events else 0.0
        events = [{"name": node, "cat": op, "ph": "X", "ts": (start - t0) * 1e6, "dur": dur * 1e6, "pid": 1, "tid": 1,
                   "args": {"backend": self.backends.get(node, "cpu"), "op": op, "shapes": shapes, "bytes": nbytes}}
                  for node, op, start, dur, shapes, nbytes in self.events]
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)

    def table(self) -> str:
        """Per-op-type totals, largest first, as aligned text."""
        rows = sorted(self.by_op.items(), key=lambda kv: -kv[1][1])
        total = sum(v[1] for _, v in rows) or 1e-12
        lines = [f"{'op':<14}{'calls':>8}{'ms':>10}{'%':>7}"]
        for op, (calls, sec) in rows:
            lines.append(f"{op:<14}{calls:>8}{sec * 1e3:>10.2f}{100 * sec / total:>6.1f}%")
        outside = self.seconds - total
        lines.append(f"{'(python)':<14}{'':>8}{outside * 1e3:>10.2f}{100 * outside / max(self.seconds, 1e-12):>6.1f}%  time outside op calls")
        return "\n".join(lines)


class Executor:
    """Runs a validated graph on CPU; ``reference=True`` uses the numpy oracles for every op."""

    def __init__(self, graph: Graph, weights: dict[str, Any], reference: bool = False, profile: bool = False):
        self.graph = graph
        self.reference = reference
        self.profile = Profile() if profile else None
        slot_of: dict[str, int] = {}
        for name in [s.name for s in graph.inputs] + list(graph.weights):
            slot_of[name] = len(slot_of)
        steps: list[Step] = []
        for node in graph.nodes:
            op = get_op(node.op, node.id)
            fn = op.ref if reference or op.fast is None else op.fast
            ins = [slot_of[node.inputs[p]] if p in node.inputs else None for p in op.input_names]
            outs = []
            for port in op.output_names:
                if port in node.outputs:
                    slot_of[node.outputs[port]] = len(slot_of)
                    outs.append(slot_of[node.outputs[port]])
            steps.append(Step(fn, node.params, ins, outs, [], node.id, node.op, None if reference else op.into))
        keep = {slot_of[n] for n in graph.outputs} | {slot_of[n] for n in graph.weights}
        last_reader: dict[int, int] = {}
        for i, st in enumerate(steps):
            for s in st.inputs:
                if s is not None:
                    last_reader[s] = i
        for s, i in last_reader.items():
            if s not in keep:
                steps[i].release.append(s)
        self.steps = steps
        self.n_slots = len(slot_of)
        self.input_slots = [slot_of[s.name] for s in graph.inputs]
        self.output_slots = {n: slot_of[n] for n in graph.outputs}
        self.weight_slots = [(slot_of[n], weights[n]) for n in graph.weights]
        self.use_arena = True  # False: every op allocates its outputs (benchmarks and tests compare)
        self.writers = {st.node_id for st in steps if st.into is not None}  # nodes that may write into the arena
        symbols = {d for s in graph.inputs for d in s.shape if isinstance(d, str)}
        # whether binding the input dims fixes every shape without inferring them again
        self._plain_dims = all(isinstance(d, int) or d in symbols or d in RUN_TIME_DIMS
                               for s in graph.specs.values() for d in s.shape)
        self._arena_lock = threading.Lock()  # one run at a time on the arena; others run without it
        self._arena = _aligned_bytes(0)
        self._plans: OrderedDict[tuple, _Signature] = OrderedDict()  # input shapes -> plan, most recent last
        self._no_buffers = [None] * len(steps)

    def check_feeds(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        """Feed arrays in graph-input order, cast within their kind, C-contiguous and aligned;
        ShapeError on any mismatch."""
        missing = [s.name for s in self.graph.inputs if s.name not in feeds]
        unknown = sorted(set(feeds) - {s.name for s in self.graph.inputs})
        if missing or unknown:
            raise ShapeError(f"inputs must be {[s.name for s in self.graph.inputs]} (missing {missing}, unknown {unknown})")
        bound: dict[str, int] = {}
        arrays = []
        for spec in self.graph.inputs:
            a = np.asarray(feeds[spec.name])
            want = np.dtype(spec.dtype)
            if a.dtype != want:
                if a.dtype.kind not in "iuf" or (a.dtype.kind == "f") != (want.kind == "f"):
                    raise ShapeError(f"input {spec.describe()}: got dtype {a.dtype}")
                a = a.astype(want)
            if a.ndim != len(spec.shape):
                raise ShapeError(f"input {spec.describe()}: got shape {a.shape}")
            for dim, n in zip(spec.shape, a.shape):
                if isinstance(dim, int) and dim != n:
                    raise ShapeError(f"input {spec.describe()}: got shape {a.shape}")
                if isinstance(dim, str) and bound.setdefault(dim, n) != n:
                    raise ShapeError(f"input {spec.describe()}: dim {dim!r} is {bound[dim]} elsewhere, {n} here")
            a = np.require(a, requirements="C")  # (ascontiguousarray would make a 0-d input 1-d)
            arrays.append(a if a.flags.aligned else a.copy())  # the kernels read whole elements
        return arrays

    def run(self, ctx: RunContext, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """Run every step once; returns the graph outputs."""
        arrays = self.check_feeds(feeds)
        env: list[Any] = [None] * self.n_slots
        for slot, a in zip(self.input_slots, arrays):
            env[slot] = a
        for slot, w in self.weight_slots:
            env[slot] = w
        own = self.use_arena and bool(self.writers) and self._arena_lock.acquire(blocking=False)
        try:
            self._walk(ctx, env, self._arena_buffers(arrays) if own else self._no_buffers)
        finally:
            if own:
                self._arena_lock.release()
        return {n: env[s] for n, s in self.output_slots.items()}

    def arena_plan(self, arrays: list[np.ndarray]) -> RunArena | None:
        """The arena plan for inputs shaped like ``arrays`` (graph-input order), or None when the
        graph's shapes cannot be inferred for them (the run then allocates and the op at fault says why)."""
        dims = {d: n for spec, a in zip(self.graph.inputs, arrays) for d, n in zip(spec.shape, a.shape)
                if isinstance(d, str)}
        try:
            graph = self.graph if self._plain_dims else bind_dims(self.graph, dims)
        except VolvoxError:
            return None
        return plan_run_arena(graph, dims, self.writers)

    def _arena_buffers(self, arrays: list[np.ndarray]) -> list[np.ndarray | None]:
        """Per step, the arena array its node writes into (None: the node allocates); the caller holds the lock."""
        key = tuple(a.shape for a in arrays)
        sig = self._plans.get(key)
        if sig is None:
            sig = self._plans[key] = _Signature(self.arena_plan(arrays))
            if len(self._plans) > ARENA_PLANS:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        if sig.plan is None or not sig.plan.slots:
            return self._no_buffers
        if sig.arena is not self._arena:
            if self._arena.nbytes < sig.plan.arena_bytes:
                for other in self._plans.values():  # their views would keep the old arena alive
                    other.buffers = other.arena = None
                self._arena = _aligned_bytes(sig.plan.arena_bytes)
            sig.buffers, sig.arena = [None] * len(self.steps), self._arena
            for i, st in enumerate(self.steps):
                if st.node_id in sig.plan.slots:
                    offset, shape, dtype = sig.plan.slots[st.node_id]
                    sig.buffers[i] = np.ndarray(shape, dtype, buffer=self._arena, offset=offset)
        return sig.buffers

    def _walk(self, ctx: RunContext, env: list, buffers: list) -> None:
        """Run the steps over ``env``, each writing into its arena buffer or allocating (timed when profiling)."""
        prof, clock = self.profile, time.perf_counter
        t_run = clock()
        st = None
        try:
            for st, buf in zip(self.steps, buffers):
                args = [None if s is None else env[s] for s in st.inputs]
                t0 = clock() if prof is not None else 0.0
                out = st.fn(ctx, st.params, *args) if buf is None else st.into(ctx, st.params, buf, *args)
                outs = [out] if len(st.outputs) == 1 else out
                if prof is not None:
                    dt = clock() - t0
                    for table, key in ((prof.by_op, st.op), (prof.by_node, st.node_id)):
                        rec = table[key]
                        rec[0] += 1
                        rec[1] += dt
                    prof.events.append((st.node_id, st.op, t0, dt, [list(o.shape) for o in outs],
                                        sum(o.nbytes for o in outs)))
                for s, o in zip(st.outputs, outs):
                    env[s] = o
                for s in st.release:
                    env[s] = None
        except VolvoxError as e:  # name the node that failed (shapes only known at run time, bad ids, ...)
            raise type(e)(f"node {st.node_id!r} ({st.op}): {e}") from None
        if prof is not None:
            prof.runs += 1
            prof.seconds += clock() - t_run


@dataclass
class _Signature:
    """One input signature's arena plan and the arena views cut for it."""

    plan: RunArena | None
    buffers: list | None = None     # per step: its arena array or None (valid while ``arena`` is the executor's)
    arena: np.ndarray | None = None


def _aligned_bytes(nbytes: int) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` starting on an ALIGNMENT boundary."""
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start:start + nbytes]
