"""The executor: a validated graph compiled into a flat list of steps over numbered slots.

Python plans: each node becomes (function, params, input slots, output slots);
intermediate slots are released right after their last reader.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import ShapeError, VolvoxError
from ..graph import Graph
from ..ops import get_op


@dataclass
class RunContext:
    """State that stateful ops read: the KV cache, tokens already cached, which output rows to keep."""

    kv: Any = None          # KVCache or None
    pos: int = 0
    output_rows: str = "all"


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
            steps.append(Step(fn, node.params, ins, outs, [], node.id, node.op))
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

    def check_feeds(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        """Feed arrays in graph-input order, cast within their kind; ShapeError on any mismatch."""
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
            arrays.append(np.ascontiguousarray(a))
        return arrays

    def run(self, ctx: RunContext, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """Run every step once; returns the graph outputs."""
        env: list[Any] = [None] * self.n_slots
        for slot, a in zip(self.input_slots, self.check_feeds(feeds)):
            env[slot] = a
        for slot, w in self.weight_slots:
            env[slot] = w
        if self.profile is not None:
            self._run_profiled(ctx, env)
            return {n: env[s] for n, s in self.output_slots.items()}
        st = None
        try:
            for st in self.steps:
                out = st.fn(ctx, st.params, *[None if s is None else env[s] for s in st.inputs])
                if len(st.outputs) == 1:
                    env[st.outputs[0]] = out
                else:
                    for s, o in zip(st.outputs, out):
                        env[s] = o
                for s in st.release:
                    env[s] = None
        except VolvoxError as e:  # name the node that failed (shapes only known at run time, bad ids, ...)
            raise type(e)(f"node {st.node_id!r} ({st.op}): {e}") from None
        return {n: env[s] for n, s in self.output_slots.items()}

    def _run_profiled(self, ctx: RunContext, env: list) -> None:
        prof, clock = self.profile, time.perf_counter
        t_run = clock()
        for st in self.steps:
            args = [None if s is None else env[s] for s in st.inputs]
            t0 = clock()
            out = st.fn(ctx, st.params, *args)
            dt = clock() - t0
            for table, key in ((prof.by_op, st.op), (prof.by_node, st.node_id)):
                rec = table[key]
                rec[0] += 1
                rec[1] += dt
            outs = [out] if len(st.outputs) == 1 else out
            prof.events.append((st.node_id, st.op, t0, dt, [list(o.shape) for o in outs], sum(o.nbytes for o in outs)))
            for s, o in zip(st.outputs, outs):
                env[s] = o
            for s in st.release:
                env[s] = None
        prof.runs += 1
        prof.seconds += clock() - t_run
