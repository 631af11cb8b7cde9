"""Native decode plans: a language model's one-token forward pass, run by C in one call.

Python plans, native runs. The per-op executor crosses from Python into a kernel once
per node (about 360 times per SmolLM2 token) and opens an OpenMP region each time. For
the single-token decode step, where every shape is fixed, this module lowers the
compiled graph once into a flat array of kernel steps (csrc/vx_plan.h) over buffers it
allocates up front; ``DecodePlan.run`` then runs the whole forward pass in one nogil
call inside one OpenMP region, and allocates nothing.

Buffers live in one arena, placed by compile/memory.pack_arena (as `volvox info --plan` plans it):
each node's outputs get a buffer that later outputs reuse once its last
reader has run (never by a step that still reads it). The KV cache and the weights
stay outside the arena; the logits are copied out so a caller may keep them.

Each step calls the same tile functions as the per-op kernels, and every output
element is still computed by one thread in a fixed order, so a plan's logits equal the
per-op executor's bit for bit (tests/test_native_plan.py). Graphs with an op the plan
does not lower (see ``LOWER``) simply keep the per-op executor.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from volvox import cpu
from volvox.compile.memory import LiveRange, pack_arena
from volvox.ir.graph import Graph
from volvox.ops import get_op
from volvox.runtime.pacing import Pacer

_engine = cpu.engine
ALIGN = 64  # bytes: the arena starts on a cache line


class Unsupported(Exception):
    """The graph has something a decode plan does not lower (the per-op executor runs it)."""


def _addr(a: np.ndarray) -> int:
    return a.ctypes.data


def _aligned(n: int, dtype) -> np.ndarray:
    """An uninitialised (n,) array whose first element is ALIGN-byte aligned."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n + ALIGN // itemsize, dtype)
    skip = (-raw.ctypes.data % ALIGN) // itemsize
    return raw[skip:skip + n]


class DecodePlan:
    """A compiled graph's single-token forward pass as native steps (see the module doc)."""

    def __init__(self, graph: Graph, weights: dict[str, Any], n_layers: int, capacity: int):
        self.graph = graph
        self.capacity = capacity  # KV cache positions the attention scratch is sized for
        self.threads = max(cpu.get_num_threads(), os.cpu_count() or 1)
        self._keep: list[Any] = []  # every array a step points into
        self._lock = threading.Lock()
        self._bound_cache = None
        self.runs = 0  # forward passes run so far
        self.seconds = 0.0  # wall time inside those runs' native call
        self.pacer = Pacer()  # one thread after a stalled team run (runtime/pacing.py)
        self.vocab = self.kv_shape = None  # set by the embedding and attention lowerings
        self.max_positions = capacity  # and lowered by a learned position table
        self._lower(graph, weights, n_layers)
        if self.vocab is None or self.kv_shape is None:
            raise Unsupported("no token embedding or no attention")

    # ----------------------------------------------------------------------- lowering
    def _lower(self, graph: Graph, weights: dict[str, Any], n_layers: int) -> None:
        if [s.name for s in graph.inputs] != ["tokens", "positions"] or len(graph.outputs) != 1:
            raise Unsupported("inputs must be (tokens, positions) and the output the logits")
        nodes = graph.nodes
        for node in nodes:
            if node.op not in LOWER:
                raise Unsupported(f"op {node.op!r} (node {node.id!r})")
        # where each activation lives: (its node's buffer, float offset in it, floats)
        home: dict[str, tuple[str, int, int]] = {}
        alias = {n.outputs["y"]: n.inputs["x"] for n in nodes if n.op == "output_rows"}

        def root(name: str) -> str:
            while name in alias:
                name = alias[name]
            return name

        last = {}
        for i, node in enumerate(nodes):
            for name in node.inputs.values():
                last[root(name)] = i
        out_name = root(graph.outputs[0])
        last[out_name] = len(nodes)
        planned: list[tuple] = []  # (node, {port: (buffer, float offset, floats)}, (buffer, 0, floats of all outputs))
        buffers: list[LiveRange] = []  # one per lowered node: its outputs side by side
        for i, node in enumerate(nodes):
            if node.op == "output_rows":
                continue
            outs = {}
            ports = [p for p in get_op(node.op).output_names if p in node.outputs]  # in the op's port order
            sizes = {port: self._floats(graph, node.outputs[port]) for port in ports}
            off = 0
            for port in ports:  # consecutive: linear_split's column blocks are one GEMV row
                outs[port] = home[node.outputs[port]] = (node.id, off, sizes[port])
                off += sizes[port]
            buffers.append(LiveRange(node.id, 4 * off, i, max(last.get(n, i) for n in node.outputs.values())))
            planned.append((node, outs, (node.id, 0, off)))
        offsets, nbytes = pack_arena(buffers)  # a buffer is reused once its last reader has run
        self.arena = _aligned(nbytes // 4, np.float32)  # (floats,) every activation of one token
        self.arena_bytes = nbytes

        def view(h: tuple[str, int, int]) -> np.ndarray:
            buf, off, n = h
            start = offsets[buf] // 4 + off
            return self.arena[start:start + n]  # (n,)

        self._view = lambda name: view(home[root(name)])
        self._weights = weights
        self._act = _aligned(1 << 16, np.uint8)  # (bytes,) one quantized activation row
        self.n_layers = n_layers
        self.steps = _engine.StepPlan(3 * len(planned), n_layers)  # at most three steps per node
        self.step_nodes: list[tuple[str, str]] = []  # (node id, op) per step
        for node, outs, whole in planned:
            before = len(self.steps)
            LOWER[node.op](self, node, {p: view(h) for p, h in outs.items()}, view(whole))
            self.step_nodes += [(node.id, node.op)] * (len(self.steps) - before)
        self.logits = self._view(out_name)
        self._times = np.zeros(len(self.steps), np.float64)  # (steps,) seconds of the last profiled run

    def _floats(self, graph: Graph, name: str) -> int:
        n = 1
        for d in graph.specs[name].shape:
            if isinstance(d, int):
                n *= d
            elif d not in ("seq", "out_seq"):
                raise Unsupported(f"tensor {name!r} has dim {d!r}")
        if graph.specs[name].dtype != "float32":
            raise Unsupported(f"tensor {name!r} is {graph.specs[name].dtype}")
        return n

    def _input(self, node, port: str) -> np.ndarray:
        name = node.inputs[port]
        if name in self._weights:
            w = self._weights[name]
            if not (isinstance(w, np.ndarray) and w.dtype == np.float32 and w.ndim == 1 and w.flags.c_contiguous):
                raise Unsupported(f"{node.id}.{port}: weight is not a contiguous float32 vector")
            self._keep.append(w)
            return w
        return self._view(name)

    def _matrix(self, node, port: str) -> tuple[int, np.ndarray, int, int]:
        code, wb, n, k = cpu._weight_bytes(self._weights[node.inputs[port]], f"{node.id}.{port}")
        self._keep.append(wb)
        return code, wb, n, k

    def _need(self, node, cond: bool, what: str) -> None:
        if not cond:
            raise Unsupported(f"node {node.id!r} ({node.op}): {what}")

    def _embed(self, node, outs, whole) -> None:
        code, tb, v, d = self._matrix(node, "table")
        ids = node.inputs["ids"]
        self._need(node, ids in ("tokens", "positions") and outs["y"].size == d, "ids must be a graph input")
        if ids == "tokens":
            self.vocab = v
        else:  # learned position embeddings: positions past the table are refused at run time
            self.max_positions = min(self.max_positions, v)
        self.steps.embed(table=_addr(tb), y=_addr(outs["y"]), dim=d, row_bytes=tb.shape[1], vocab=v, wtype=code,
                         by_position=ids == "positions")

    def _layer_norm(self, node, outs, whole) -> None:
        x, w = self._input(node, "x"), self._input(node, "weight")
        b = self._input(node, "bias") if "bias" in node.inputs else None
        self._need(node, x.size == w.size == outs["y"].size and (b is None or b.size == w.size), "sizes differ")
        self.steps.layer_norm(x=_addr(x), weight=_addr(w), bias=0 if b is None else _addr(b), y=_addr(outs["y"]),
                              dim=x.size, eps=float(node.params.get("eps", 1e-5)))

    def _gelu(self, node, outs, whole) -> None:
        x = self._input(node, "x")
        self._need(node, x.size == outs["y"].size, "sizes differ")
        self.steps.gelu(x=_addr(x), y=_addr(outs["y"]), count=x.size,
                        tanh=node.params.get("approximate", "none") == "tanh")

    def _rms_norm(self, node, outs, whole) -> None:
        x, w = self._input(node, "x"), self._input(node, "weight")
        self._need(node, x.size == w.size == outs["y"].size, "x, weight and y sizes differ")
        self.steps.rms_norm(x=_addr(x), weight=_addr(w), y=_addr(outs["y"]), dim=x.size,
                            eps=float(node.params.get("eps", 1e-5)))

    def _linear(self, node, outs, whole) -> None:
        x = self._input(node, "x")
        code, wb, n, k = self._matrix(node, "weight")
        bias = self._input(node, "bias") if "bias" in node.inputs else None
        self._need(node, x.size == k and whole.size == n and (bias is None or bias.size == n), "shapes do not match")
        self._need(node, _engine.act_row_bytes(code, k) <= self._act.nbytes, "activation row too large")
        if _engine.act_row_bytes(code, k):  # quantized weights: quantize the row once, then the matrix rows
            self.steps.quantize_act(x=_addr(x), act=_addr(self._act), K=k, wtype=code)
            x = self._act
        self.steps.linear(x=_addr(x), w=_addr(wb), bias=0 if bias is None else _addr(bias), y=_addr(whole), K=k,
                          N=n, row_bytes=wb.shape[1], wtype=code)
        if node.op == "linear_act":  # the activation in place on the output row
            act = node.params["activation"]
            self._need(node, act in ("silu", "gelu", "gelu_tanh"), f"activation {act!r}")
            if act == "silu":
                self.steps.glu(x=_addr(whole), y=_addr(whole), F=n, gated=False)
            else:
                self.steps.gelu(x=_addr(whole), y=_addr(whole), count=n, tanh=act == "gelu_tanh")

    def _rope(self, node, outs, whole) -> None:
        p = node.params
        x = self._input(node, "x")
        hd = int(p["head_dim"])
        rd = int(p.get("rope_dim", hd))
        self._need(node, "llama3" not in p and node.inputs["positions"] == "positions", "llama3 scaling or "
                   "positions other than the position input")
        self._need(node, x.size % hd == 0 and x.size == outs["y"].size, "x is not whole heads")
        self.steps.rope(x=_addr(x), y=_addr(outs["y"]), n_heads=x.size // hd, head_dim=hd, rope_dim=rd,
                        base=float(p.get("theta", 10000.0)),
                        freq_scale=float(np.float32(1.0) / np.float32(p.get("scale", 1.0))),
                        interleaved=p.get("style", "half") == "interleaved")

    def _attention(self, node, outs, whole) -> None:
        p = node.params
        nh, nkv, hd = int(p["n_heads"]), int(p["n_kv_heads"]), int(p["head_dim"])
        q, k, v = (self._input(node, port) for port in ("q", "k", "v"))
        self._need(node, p.get("causal", True), "not causal")
        self._need(node, q.size == nh * hd and k.size == v.size == nkv * hd, "q, k, v sizes")
        self._need(node, 0 <= int(p.get("layer", 0)) < self.n_layers, "layer outside the KV cache")
        per = _engine.attention_scratch_floats(self.capacity, hd)
        scratch = np.empty(self.threads * per, np.float32)  # (threads, per) score rows
        self._keep.append(scratch)
        layer = int(p.get("layer", 0))
        self.steps.kv_store(k=_addr(k), v=_addr(v), n_kv_heads=nkv, head_dim=hd, layer=layer)
        self.steps.attention(q=_addr(q), y=_addr(outs["y"]), scratch=_addr(scratch), n_heads=nh, n_kv_heads=nkv,
                             head_dim=hd, window=int(p.get("window", 0)), layer=layer, scratch_floats=per,
                             scale=float(np.float32(p.get("scale", hd ** -0.5))))
        self.kv_shape = (nkv, hd)

    def _swiglu(self, node, outs, whole) -> None:
        x = self._input(node, "x")
        gated = node.op == "swiglu"
        self._need(node, x.size == (2 if gated else 1) * outs["y"].size, "x must be [gate | up] for swiglu, y's size for silu")
        self.steps.glu(x=_addr(x), y=_addr(outs["y"]), F=outs["y"].size, gated=gated)

    def _binary(self, node, outs, whole) -> None:
        a, b = self._input(node, "a"), self._input(node, "b")
        self._need(node, a.size == b.size == outs["y"].size, "broadcasting")
        self.steps.binary(a=_addr(a), b=_addr(b), y=_addr(outs["y"]), count=a.size, op=_engine.BINARY_OPS[node.op])

    # ------------------------------------------------------------------------ running
    def run(self, kv, token: int, pos: int, profile=None) -> np.ndarray | None:
        """Logits (1, vocab) for ``token`` at ``pos``, its k/v appended to ``kv``; None when
        this plan cannot run now (another thread is in it, more threads than it has scratch
        for, or a cache of another size): the caller then uses the per-op executor."""
        if (cpu.get_num_threads() > self.threads or kv.max_tokens != self.capacity
                or kv.keys[0].shape != (self.kv_shape[0], self.capacity, self.kv_shape[1])
                or len(kv.keys) != self.n_layers or not 0 <= token < self.vocab or not 0 <= pos < self.max_positions
                or not self._lock.acquire(blocking=False)):
            return None
        try:
            if kv is not self._bound_cache:
                self.steps.bind_cache([_addr(k) for k in kv.keys], [_addr(v) for v in kv.values], kv.max_tokens)
                self._bound_cache = kv
            kv.reserve(pos + 1)
            nt = self.pacer.threads(cpu.get_num_threads())
            t0 = time.perf_counter()
            self.steps.run(token, pos, None if profile is None else self._times, nt)
            seconds = time.perf_counter() - t0
            self.pacer.pace(nt, seconds)
            if profile is not None:
                self._record(profile, t0, seconds)
            self.runs += 1
            self.seconds += seconds
            return self.logits.reshape(1, -1).copy()
        finally:
            self._lock.release()

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


LOWER = {  # op -> its lowering (outputs: each port's view, and all of them as one row)
    "embedding": DecodePlan._embed,
    "rms_norm": DecodePlan._rms_norm,
    "layer_norm": DecodePlan._layer_norm,
    "gelu": DecodePlan._gelu,
    "linear": DecodePlan._linear,
    "linear_split": DecodePlan._linear,
    "linear_act": DecodePlan._linear,
    "rope": DecodePlan._rope,
    "attention": DecodePlan._attention,
    "swiglu": DecodePlan._swiglu,
    "silu": DecodePlan._swiglu,
    "add": DecodePlan._binary,
    "mul": DecodePlan._binary,
    "output_rows": None,  # a view of its input when one row is computed
}
