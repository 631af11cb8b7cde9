"""The GPU executor: a compiled graph run on a GPU ``Device`` with CPU islands, one submit per forward.

Placement (once, at build): a node runs on the GPU when its op has a lowering
(``volvox/_gpu/lowering.py``), the device supports its kernels and its specs pass the
lowering's check (float32 activations, weight types a shader reads, ...); everything else stays on
the CPU. Weights the GPU reads are uploaded once: linear / embedding weights packed in their stored
type, in chunks that fit a storage binding (volvox/ops/gpu_weights.py); others as float32.

A forward walks the CPU executor's steps over the same slots. Each tensor has a host array
and/or a device buffer; a GPU node uploads inputs that only live on the host and records its
dispatches into the command graph; a CPU node needs its inputs on the host, so device-only
inputs are downloaded, which ends the graph there (a submit) and starts the next segment.
With the whole graph on the GPU a forward is one submit and one wait.

Record once, replay: a node's output shapes and dispatches (packed params included) depend only
on its input shapes and the run-time extras, so they are computed once per such key; the buffer
pool hands out the same buffers to the same sequence of requests; so a forward with the shapes
of an earlier one records exactly the same work, and the command graph replays that recording
(docs/backends.md, "Record once, replay").

Single-token decode (an input of length 1 in a graph with attention) and ragged batches run
entirely on the CPU executor: per-token GPU round trips lose to the CPU kernels on the
devices measured so far (see docs/backends.md).

KV cache: the host ``KVCache`` stays the source of truth. Attention on the GPU reads a device
mirror of it (uploaded when the host holds rows the mirror lacks), appends this run's keys and
values there, and the new rows are downloaded with the outputs and appended on the host too.
"""

from __future__ import annotations

import math
import time
import weakref
from typing import Any

import numpy as np

from volvox._gpu.backend import Buffer, BufferPool, Device, fmt_bytes, kernel_info
from volvox._gpu.lowering import LOWERINGS, Call
from volvox.errors import KernelError, VolvoxError
from volvox.ir.graph import Graph, TensorSpec
from volvox.ops import get_op
from volvox.ops.context import BatchContext
from volvox.ops.context import RunContext
from volvox.ops.gpu_weights import LAYOUTS, PACKED_PORTS, chunk_rows, chunk_spans, pack_rows
from volvox.runtime.executor import Executor

MEMO_ENTRIES = 4096  # memoized shape inferences + lowerings kept (all dropped when full)


def place_nodes(graph: Graph, device: Device) -> dict[str, tuple[str, str]]:
    """node id -> ("gpu" | "cpu", reason it stays on the CPU or "")."""
    where: dict[str, tuple[str, str]] = {}
    on_gpu: set[str] = set()  # tensors a GPU node produces
    supported: dict[str, bool] = {}
    for node in graph.nodes:
        low = LOWERINGS.get(node.op)
        specs = {port: graph.specs[name] for port, name in node.inputs.items()}
        reason = ""
        if low is None:
            reason = "no GPU kernel"
        else:
            missing = [k for k in low.kernels if not supported.setdefault(k, device.supports(k))]
            if missing:
                reason = f"{device.name} cannot run kernel {missing[0]!r}"
            elif low.alias or node.op == "output_rows":
                reason = "" if node.inputs["x"] in on_gpu else "input is on the CPU"
            else:
                reason = low.check(specs, node.params) or _too_big(graph, node, device) or ""
        where[node.id] = ("cpu", reason) if reason else ("gpu", "")
        if not reason:
            on_gpu.update(node.outputs.values())
    return where


def _too_big(graph: Graph, node, device: Device) -> str | None:
    """Why a node's statically-shaped tensor cannot be bound on ``device`` (None: all fit). A weight on a
    packed port is bound in chunks, so never too big."""
    packed = {name for port, name in node.inputs.items()
              if (node.op, port) in PACKED_PORTS and name in graph.weights and graph.specs[name].dtype in LAYOUTS}
    for name in [*node.inputs.values(), *node.outputs.values()]:
        if name in packed:
            continue
        shape = graph.specs[name].shape
        if all(isinstance(d, int) for d in shape):
            nbytes = math.prod(shape) * 4  # float32 / int32 on the GPU
            bound = nbytes if name in graph.weights else BufferPool.size_class(nbytes)
            if bound > device.max_binding:
                return (f"tensor {name!r} ({fmt_bytes(nbytes)}) exceeds {device.name}'s storage binding limit "
                        f"({fmt_bytes(device.max_binding)})")
    return None


class _KVMirror:
    """Device copies of a KVCache's layers: (n_kv_heads, capacity, head_dim) keys and values.

    The host cache spans the whole context; the device copy starts at 256 positions and doubles
    (new buffers, re-uploading the host rows) when a run needs more. A new host cache (a new
    session) takes over the same buffers with nothing synced, so its forwards bind the same
    buffers and replay the recorded command graphs.
    """

    def __init__(self, kv, device: Device, layers: list[int], need: int):
        nkv, max_tokens, hd = kv.keys[0].shape
        self.kv = weakref.ref(kv)
        self.capacity = min(max_tokens, max(256, 1 << (need - 1).bit_length()))
        self.synced = 0  # positions valid on the device
        nbytes = nkv * self.capacity * hd * 4
        self.bufs = {l: (device.alloc(nbytes), device.alloc(nbytes)) for l in layers}

    def follow(self, kv) -> None:
        """Mirror ``kv`` from now on (nothing of it is on the device yet)."""
        self.kv, self.synced = weakref.ref(kv), 0

    def free(self, device: Device) -> None:
        """Release the device buffers."""
        for pair in self.bufs.values():
            for buf in pair:
                device.free(buf)


class GpuExecutor:
    """Runs a validated graph on ``device`` with CPU islands; same ``run(ctx, feeds)`` as Executor."""

    def __init__(self, graph: Graph, weights: dict[str, Any], device: Device, reference: bool = False,
                 profile: bool = False, decode_on_cpu: bool = True):
        self.cpu = Executor(graph, weights, reference=reference, profile=profile)
        self.graph, self.device = graph, device
        self.placement = place_nodes(graph, device)
        self.decode_on_cpu = decode_on_cpu
        self.stateful = any(n.op == "attention" for n in graph.nodes)
        self.pool = BufferPool(device)
        self.commands = device.graph()
        self.last_backend = "cpu"  # where the last forward ran ("cpu", or the device's name when any node was on it)
        self._mirror: _KVMirror | None = None
        self._memo: dict[tuple, Any] = {}  # (kind, node id, shapes, ...) -> output shapes / packed dispatches
        slot_names = [s.name for s in graph.inputs] + list(graph.weights)
        for node in graph.nodes:
            slot_names += [node.outputs[p] for p in get_op(node.op).output_names if p in node.outputs]
        self.slot_spec = [graph.specs[n] for n in slot_names]  # static spec per slot
        self.weight_bufs: dict[int, Buffer] = {}
        self.weight_chunks: dict[int, tuple[str, int, list[Buffer]]] = {}  # slot -> (dtype, rows a chunk, chunks)
        self.constants: dict[str, dict[str, Buffer]] = {}  # node id -> constant name -> buffer
        self._upload_weights()
        for node in graph.nodes:
            if self.placement[node.id][0] == "gpu":
                consts = LOWERINGS[node.op].constants(node.params)
                self.constants[node.id] = {k: device.upload(v) for k, v in consts.items()}
        if self.profile is not None:
            self.profile.backends.update(self.node_backends())

    def _upload_weights(self) -> None:
        """Upload every weight a GPU node reads, once. One read only through linear / embedding weight
        ports goes packed in its stored type, in chunks of rows that each fit a storage binding, unless
        it is a float32 tensor that fits one (the float matmul reads those); any other is float32
        (float16 widened)."""
        graph, device = self.graph, self.device
        readers: dict[str, set[tuple[str, str]]] = {}  # weight -> (op, port) of its GPU readers
        for node in graph.nodes:
            if self.placement[node.id][0] == "gpu":
                for port, name in node.inputs.items():
                    readers.setdefault(name, set()).add((node.op, port))
        for (slot, w), name in zip(self.cpu.weight_slots, graph.weights):
            if name not in readers:
                continue
            spec = graph.specs[name]
            fits = spec.dtype == "float32" and math.prod(spec.shape) * 4 <= device.max_binding
            if readers[name] <= PACKED_PORTS and spec.dtype in LAYOUTS and not fits:
                per_chunk = chunk_rows(spec.dtype, spec.shape, device.max_binding)
                chunks = [device.upload(pack_rows(w, spec.dtype, r0, r1)) for r0, r1 in chunk_spans(spec.shape[0], per_chunk)]
                self.weight_chunks[slot] = (spec.dtype, per_chunk, chunks)
                self.weight_bufs[slot] = chunks[0]
            else:
                self.weight_bufs[slot] = device.upload(np.asarray(w, dtype=np.float32))

    @property
    def profile(self):
        """The CPU executor's Profile (GPU nodes are timed by syncing after each when profiling)."""
        return self.cpu.profile

    @property
    def weight_slots(self):
        """(slot, host weight) pairs, as Executor."""
        return self.cpu.weight_slots

    @property
    def steps(self):
        """The compiled steps, as Executor."""
        return self.cpu.steps

    def node_backends(self) -> dict[str, str]:
        """node id -> the backend that runs it ("cpu" or the device name)."""
        return {n: (self.device.name if w == "gpu" else "cpu") for n, (w, _) in self.placement.items()}

    def describe(self) -> str:
        """One line for --debug: the device and how many nodes run where (with the first CPU reasons)."""
        cpu = [(n, r) for n, (w, r) in self.placement.items() if w == "cpu"]
        line = (f"backend: {self.device.name} ({self.device.description}): "
                f"{len(self.placement) - len(cpu)} nodes on the GPU, {len(cpu)} on the CPU")
        if cpu:
            line += " (" + "; ".join(f"{n}: {r}" for n, r in cpu[:3]) + (", ..." if len(cpu) > 3 else "") + ")"
        return line + ("; single-token decode on the CPU" if self.stateful and self.decode_on_cpu else "")

    def memo(self, key: tuple, make):
        """``make()``, computed once per ``key`` (shape inference and lowering depend on shapes, not values)."""
        value = self._memo.get(key)
        if value is None:
            if len(self._memo) >= MEMO_ENTRIES:
                self._memo.clear()
            value = self._memo[key] = make()
        return value

    def check_feeds(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        """As Executor.check_feeds."""
        return self.cpu.check_feeds(feeds)

    def _cpu_forward(self, ctx, arrays: list[np.ndarray]) -> bool:
        if isinstance(ctx, BatchContext):
            return True
        if not any(w == "gpu" for w, _ in self.placement.values()):
            return True
        return self.decode_on_cpu and self.stateful and any(a.ndim and a.shape[0] == 1 for a in arrays)

    def run(self, ctx: RunContext, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """One forward; returns the graph outputs as host arrays."""
        arrays = self.check_feeds(feeds)
        if self._cpu_forward(ctx, arrays):
            self.last_backend = "cpu"
            m = self._mirror
            if m is not None and ctx.kv is not None and m.kv() is ctx.kv:  # the CPU writes rows from ctx.pos on
                m.synced = min(m.synced, ctx.pos)
            if self.profile is not None:  # these nodes' times now include CPU runs (decode steps)
                self.profile.backends.update({n: f"{b}+cpu" for n, b in self.node_backends().items() if b != "cpu"})
            return self.cpu.run(ctx, feeds)
        self.last_backend = self.device.name
        return _Forward(self, ctx, arrays).run()


class _Forward:
    """The state of one GPU forward: per slot a host array, a device buffer and a shape."""

    def __init__(self, ex: GpuExecutor, ctx: RunContext, arrays: list[np.ndarray]):
        self.ex, self.ctx = ex, ctx
        n = ex.cpu.n_slots
        self.host: list[np.ndarray | None] = [None] * n
        self.dev: list[Buffer | None] = [None] * n
        self.shape: list[tuple | None] = [None] * n
        self.refs: dict[int, int] = {}           # id(pooled buffer) -> slots holding it
        self.pinned: set[int] = set()            # ids of buffers with a pending download
        self.acquired: dict[int, Buffer] = {}    # every pooled buffer this forward took, by id
        self.kv_reads: list[tuple] = []          # (layer, k download, v download) of GPU attention nodes
        self.kv_start = self.kv_seq = 0
        for slot, a in zip(ex.cpu.input_slots, arrays):
            self.host[slot], self.shape[slot] = a, a.shape
        for slot, w in ex.cpu.weight_slots:
            self.host[slot], self.shape[slot] = w, tuple(ex.slot_spec[slot].shape)
            self.dev[slot] = ex.weight_bufs.get(slot)

    # -- buffers -------------------------------------------------------------------------------
    def _acquire(self, nbytes: int, fresh: bool = False) -> Buffer:
        buf = self.ex.pool.acquire(nbytes, fresh)
        self.acquired[id(buf)] = buf
        self.refs[id(buf)] = 0
        return buf

    def _hold(self, slot: int, buf: Buffer) -> None:
        self.dev[slot] = buf
        if id(buf) in self.refs:
            self.refs[id(buf)] += 1

    def _drop(self, slot: int) -> None:
        buf, self.dev[slot], self.host[slot] = self.dev[slot], None, None
        if buf is not None and id(buf) in self.refs:
            self.refs[id(buf)] -= 1
            if self.refs[id(buf)] == 0 and id(buf) not in self.pinned:
                del self.refs[id(buf)]
                self.ex.pool.release(buf)

    def _to_device(self, slot: int) -> Buffer:
        if self.dev[slot] is None:
            a = np.ascontiguousarray(self.host[slot])
            if a.dtype == np.int64 or a.dtype.kind == "f" and a.dtype != np.float32:
                raise KernelError(f"tensor {self.ex.slot_spec[slot].name!r}: {a.dtype} cannot go to the GPU")
            buf = self._acquire(a.nbytes, fresh=True)
            self.ex.device.upload(a, buf)
            self._hold(slot, buf)
        return self.dev[slot]

    def _download(self, slot: int):
        buf = self.dev[slot]
        self.pinned.add(id(buf))
        spec = self.ex.slot_spec[slot]
        shape = self.shape[slot]
        return self.ex.commands.download(buf, math.prod(shape) * np.dtype(spec.dtype).itemsize), spec.dtype, shape

    def _flush(self) -> None:
        """Run what was recorded (one submit), then let pinned and released buffers be reused."""
        self.ex.commands.end()
        for bid in self.pinned:
            if self.refs.get(bid) == 0:
                del self.refs[bid]
                self.ex.pool.release(self.acquired[bid])
        self.pinned.clear()
        self.ex.pool.end_segment()
        self.ex.commands.begin()

    def _to_host(self, slots: list[int]) -> None:
        want = [s for s in slots if self.host[s] is None]
        if not want:
            return
        reads = [(s, self._download(s)) for s in want]
        self._flush()
        for s, (r, dtype, shape) in reads:
            self.host[s] = r.array(dtype, shape)

    # -- the walk --------------------------------------------------------------------------------
    def run(self) -> dict[str, np.ndarray]:
        ex = self.ex
        prof = ex.profile
        ex.commands.begin()
        try:
            for st, node in zip(ex.cpu.steps, ex.graph.nodes):
                t0 = time.perf_counter()
                try:
                    if ex.placement[node.id][0] == "gpu":
                        self._gpu_step(st, node)
                        if prof is not None:
                            self._flush()  # profiling times each GPU node by syncing after it
                    else:
                        self._cpu_step(st)
                except VolvoxError as e:  # name the node (a submit it triggered, shapes only known now, ...)
                    raise type(e)(f"node {node.id!r} ({node.op}): {e}") from None
                if prof is not None:
                    self._profiled(st, time.perf_counter() - t0, t0)
                for s in st.release:
                    self._drop(s)
            out_slots = ex.cpu.output_slots
            reads = {n: self._download(s) for n, s in out_slots.items() if self.host[s] is None}
            ex.commands.end()
        finally:
            for bid, buf in self.acquired.items():  # every pooled buffer goes back
                if bid in self.refs:
                    ex.pool.release(buf)
            ex.pool.end_segment()
        for layer, (rk, dt, ks), (rv, _, vs) in self.kv_reads:
            self._host_kv_append(layer, rk.array(dt, ks), rv.array(dt, vs))
        if self.kv_reads:
            ex._mirror.synced = self.kv_start + self.kv_seq
        if prof is not None:
            prof.runs += 1
        return {n: (reads[n][0].array(reads[n][1], reads[n][2]) if n in reads else self.host[s])
                for n, s in out_slots.items()}

    def _profiled(self, st, dt: float, t0: float) -> None:
        prof = self.ex.profile
        for table, key in ((prof.by_op, st.op), (prof.by_node, st.node_id)):
            table[key][0] += 1
            table[key][1] += dt
        shapes = [list(self.shape[s]) for s in st.outputs]
        nbytes = sum(math.prod(self.shape[s]) * np.dtype(self.ex.slot_spec[s].dtype).itemsize for s in st.outputs)
        prof.events.append((st.node_id, st.op, t0, dt, shapes, nbytes))
        prof.seconds += dt

    def _cpu_step(self, st) -> None:
        self._to_host([s for s in st.inputs if s is not None])
        out = st.fn(self.ctx, st.params, *[None if s is None else self.host[s] for s in st.inputs])
        outs = [out] if len(st.outputs) == 1 else out
        for s, o in zip(st.outputs, outs):
            self.host[s], self.shape[s] = o, o.shape

    def _gpu_step(self, st, node) -> None:
        ex = self.ex
        op = get_op(node.op)
        in_slots = {p: s for p, s in zip(op.input_names, st.inputs) if s is not None}
        out_ports = [p for p in op.output_names if p in node.outputs]
        out_slots = dict(zip(out_ports, st.outputs))
        shapes = {p: self.shape[s] for p, s in in_slots.items()}
        if node.op == "embedding" and self.host[in_slots["ids"]] is not None:
            ids = self.host[in_slots["ids"]]
            if ids.size and (ids.min() < 0 or ids.max() >= shapes["table"][0]):
                raise KernelError(f"ids must be in [0, {shapes['table'][0]}), got {ids.min()}..{ids.max()}")
        shape_key = (node.id, tuple(shapes.values()), self.ctx.output_rows)
        out_shapes = ex.memo(("shapes",) + shape_key, lambda: self._out_shapes(node, op, in_slots, shapes))
        shapes.update(out_shapes)
        low = LOWERINGS[node.op]
        if low.alias or (node.op == "output_rows" and self.ctx.output_rows == "all"):
            (src,) = in_slots.values()
            (dst,) = out_slots.values()
            self._hold(dst, self._to_device(src))
            self.shape[dst] = out_shapes[out_ports[0]]
            return
        bufs: dict[str, Buffer] = {p: self._to_device(s) for p, s in in_slots.items()}
        for p, s in out_slots.items():
            spec = ex.slot_spec[s]
            buf = self._acquire(math.prod(out_shapes[p]) * np.dtype(spec.dtype).itemsize)
            self._hold(s, buf)
            self.shape[s] = out_shapes[p]
            bufs[p] = buf
        bufs["@dummy"] = ex.device.dummy
        for name, b in ex.constants.get(node.id, {}).items():
            bufs["@" + name] = b
        extra = {}
        if node.op == "attention":
            extra = self._attention_cache(node, shapes, bufs)
            if self.ctx.kv is not None:  # the host cache gets this run's keys and values too
                self.kv_reads.append((int(node.params.get("layer", 0)), self._download(in_slots["k"]),
                                      self._download(in_slots["v"])))
        for p, s in in_slots.items():  # a weight bound packed, chunk by chunk
            if s in ex.weight_chunks:
                dtype, per_chunk, chunks = ex.weight_chunks[s]
                extra[f"{p}_layout"] = (dtype, per_chunk)
                bufs.update({f"{p}.{i}": b for i, b in enumerate(chunks)})
        dispatches = ex.memo(("lower",) + shape_key + tuple(extra.items()), lambda: [
            (d.kernel, d.buffers, d.grid, kernel_info(d.kernel).pack(d.params))
            for d in low.lower(Call(node.params, shapes, extra))])
        for kernel, names, grid, params in dispatches:
            ex.commands.record(kernel, [bufs[b] for b in names], grid, params)

    def _out_shapes(self, node, op, in_slots: dict, shapes: dict) -> dict[str, tuple]:
        if node.op == "output_rows":
            seq, dim = shapes["x"]
            return {"y": (seq if self.ctx.output_rows == "all" else 1, dim)}
        specs = {p: TensorSpec(p, tuple(shapes[p]), self.ex.slot_spec[s].dtype) for p, s in in_slots.items()}
        return {p: tuple(shape) for p, (shape, _) in op.infer(specs, node.params).items() if p in node.outputs}

    def _attention_cache(self, node, shapes: dict, bufs: dict) -> dict:
        """Bind the device KV cache of this node's layer; returns the lowering's extras."""
        ex, ctx = self.ex, self.ctx
        seq = shapes["q"][0]
        layer = int(node.params.get("layer", 0))
        if ctx.kv is None:  # attend over this run's k, v alone: a scratch cache of capacity seq
            nkv, hd = int(node.params["n_kv_heads"]), int(node.params["head_dim"])
            bufs["@k_cache"] = self._acquire(nkv * seq * hd * 4)
            bufs["@v_cache"] = self._acquire(nkv * seq * hd * 4)
            return {"start": 0, "capacity": seq}
        kv = ctx.kv
        start = ctx.pos
        kv.reserve(start + seq)
        m = ex._mirror
        if m is not None and m.capacity < start + seq:  # outgrown: no recording may bind the old buffers
            ex.commands.invalidate()
            m.free(ex.device)
            m = ex._mirror = None
        if m is None:
            layers = sorted({int(n.params.get("layer", 0)) for n in ex.graph.nodes
                             if n.op == "attention" and ex.placement[n.id][0] == "gpu"})
            m = ex._mirror = _KVMirror(kv, ex.device, layers, start + seq)  # fresh buffers: safe to upload now
        elif m.kv() is not kv:
            m.follow(kv)
        if m.synced < start:
            for l, (kb, vb) in m.bufs.items():  # the host holds rows the device lacks (CPU decode ran)
                ex.device.upload(kv.keys[l][:, :m.capacity], kb)
                ex.device.upload(kv.values[l][:, :m.capacity], vb)
            m.synced = start
        self.kv_start, self.kv_seq = start, seq
        bufs["@k_cache"], bufs["@v_cache"] = m.bufs[layer]
        return {"start": start, "capacity": m.capacity}

    def _host_kv_append(self, layer: int, k: np.ndarray, v: np.ndarray) -> None:
        kv = self.ctx.kv
        if kv is None:
            return
        nkv, _, hd = kv.keys[layer].shape
        seq = k.shape[0]
        kv.append(layer, self.kv_start, k.reshape(seq, nkv, hd).transpose(1, 0, 2),
                  v.reshape(seq, nkv, hd).transpose(1, 0, 2))
