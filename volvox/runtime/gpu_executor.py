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

Decode runs here too: a single-token forward is the same walk with M = 1, so from the second
token on it replays one recording in which only the params (the attention's cache length) and the
4-byte token and position inputs change. Ragged batches (BatchContext) run on the CPU executor.

KV cache: the attention nodes append to and read a device KV cache sized for the whole context
(``_DeviceKV``); a GPU forward never copies keys or values to the host. The host ``KVCache`` is
brought up to date only when something reads it (a CPU forward, inspection, a save), through
its ``pending_download`` hook: one explicit download of the rows it lacks.

Decode steps skip the walk: a forward that picks its token on the device in one segment is kept
as a ``_StepReplay`` (its records, input buffers and the attention dispatches to re-lower), and the
next forward of the same shapes that continues the same session uploads its inputs, patches
attention's and the pick's params and submits those records, without walking the graph again.

Token picking: given a ``TokenPick``, a forward ends with an argmax (greedy) or a seeded draw
(temperature / top-k / top-p) on the device and downloads the chosen id, 4 bytes, not the logits.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from volvox._gpu.backend import Buffer, BufferPool, Device, Record, fmt_bytes, kernel_info
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


@dataclass(frozen=True)
class TokenPick:
    """How a GPU forward picks the next token on the device instead of returning logits: greedy
    (temperature 0: argmax.wgsl) or a draw from softmax(logits / temperature) cut to top_k / top_p
    (sample.wgsl), whose uniform is a hash of (seed, step) (the shader's comment gives the formula)."""

    temperature: float = 0.0
    top_k: int = 0         # 0: no cut
    top_p: float = 1.0     # 1: no cut
    seed: int = 0          # 64 bits are used
    step: int = 0          # the generator's counter: draws made before this one with this seed

    def dispatch(self, vocab: int) -> tuple[str, dict]:
        """(kernel, params) of the one-workgroup dispatch over a logits row of ``vocab``."""
        if self.temperature == 0.0:
            return "argmax", {"n": vocab}
        return "sample", {"n": vocab, "top_k": int(self.top_k), "temperature": float(self.temperature),
                          "top_p": float(self.top_p), "seed_lo": self.seed & 0xFFFFFFFF,
                          "seed_hi": (self.seed >> 32) & 0xFFFFFFFF, "step": self.step & 0xFFFFFFFF}


class _DeviceKV:
    """The attention layers' KV cache on the device: per layer (n_kv_heads, max_tokens, head_dim) keys
    and values, laid out as the host KVCache and sized for the whole context once, so no forward
    reallocates it and every decode step binds the same buffers.

    It serves one host cache (a session) at a time. ``device_rows`` positions of it are valid on the
    device; the host lacks those from ``host_from`` on while ``kv.pending_download`` is set. Another
    session taking the buffers over first has the previous one download its device-only rows.
    """

    def __init__(self, ex: "GpuExecutor", kv, layers: list[int]):
        nkv, max_tokens, hd = kv.host_keys[0].shape
        self.ex, self.shape = ex, (nkv, max_tokens, hd)
        nbytes = nkv * max_tokens * hd * 4
        if nbytes > ex.device.max_binding:
            raise KernelError(f"the KV cache of one layer ({fmt_bytes(nbytes)} for {max_tokens} positions) exceeds "
                              f"{ex.device.name}'s storage binding limit ({fmt_bytes(ex.device.max_binding)})")
        self.bufs = {l: (ex.device.alloc(nbytes), ex.device.alloc(nbytes)) for l in layers}
        self.transfers = ex.device.graph()  # its own command graph: a download may come mid-forward
        self.kv = weakref.ref(kv)
        self.device_rows = 0  # positions [0, device_rows) valid on the device
        self.host_from = 0    # positions [host_from, device_rows) missing on the host while a download is pending

    def bind(self, kv, start: int) -> None:
        """Make the device hold positions [0, start) of ``kv`` before a forward writes from ``start``."""
        if self.kv() is not kv:
            old = self.kv()
            if old is not None:
                old.materialize()  # its device-only rows, before this session overwrites them
            self.kv, self.device_rows = weakref.ref(kv), 0
        if self.device_rows < start:  # the host holds rows the device lacks (a CPU forward ran)
            nkv, cap, hd = self.shape
            upto = ((nkv - 1) * cap + start) * hd  # every head's rows [0, start): a prefix of the buffer
            for l, (kb, vb) in self.bufs.items():
                self.ex.device.upload(kv.keys[l].reshape(-1)[:upto], kb)
                self.ex.device.upload(kv.values[l].reshape(-1)[:upto], vb)
            self.device_rows = start

    def wrote(self, kv, start: int, end: int) -> None:
        """A GPU forward wrote positions [start, end) on the device: the host lacks them until asked."""
        self.host_from = min(self.host_from, start) if kv.pending_download is not None else start
        self.device_rows = end
        kv.pending_download = self.download

    def cpu_wrote(self, kv, start: int) -> None:
        """A CPU forward wrote ``kv`` from ``start`` on (the host is current; the device is not past it)."""
        if self.kv() is kv:
            self.device_rows = min(self.device_rows, start)

    def download(self) -> None:
        """Copy positions [host_from, device_rows) of every layer to the host cache: one submit."""
        kv = self.kv()
        if kv is None or self.host_from >= self.device_rows:
            return
        nkv, cap, hd = self.shape
        lo, hi = self.host_from, self.device_rows
        upto = ((nkv - 1) * cap + hi) * hd  # every head's rows [0, hi): a prefix of the buffer
        g = self.transfers
        g.begin()
        reads = [(l, g.download(kb, upto * 4), g.download(vb, upto * 4)) for l, (kb, vb) in self.bufs.items()]
        g.end()
        for l, rk, rv in reads:
            for host, r in ((kv.host_keys[l], rk), (kv.host_values[l], rv)):
                rows = np.zeros(nkv * cap * hd, np.float32)  # (n_kv_heads * max_tokens * head_dim,)
                rows[:upto] = r.array(np.float32, (upto,))
                host[:, lo:hi] = rows.reshape(nkv, cap, hd)[:, lo:hi]
        self.host_from = hi

    def free(self) -> None:
        """Download what the host lacks, then release the device buffers."""
        kv = self.kv()
        if kv is not None:
            kv.materialize()
        for pair in self.bufs.values():
            for buf in pair:
                self.ex.device.free(buf)


class _StepReplay:
    """A single-segment forward with a token pick, kept to be submitted again without the walk: its
    records (buffers bound, params packed), the buffers its graph inputs were uploaded to, per
    attention node where its dispatches sit and how to lower them for another cache length, and the
    input ids checks the embedding made."""

    def __init__(self, records: list[Record], uploads: list[tuple[int, Buffer]], attention: list[tuple[int, Any]],
                 id_limits: list[tuple[int, int]], token: Buffer, vocab: int, device_kv: "_DeviceKV"):
        self.records, self.uploads, self.attention = records, uploads, attention
        self.id_limits, self.token, self.vocab, self.device_kv = id_limits, token, vocab, device_kv

    def continues(self, ex: "GpuExecutor", ctx: RunContext) -> bool:
        """Whether this step can run for ``ctx``: the same device cache, serving this session, and
        holding exactly the positions before ``ctx.pos`` (nothing to upload first)."""
        dkv = self.device_kv
        return dkv is ex.device_kv and dkv.kv() is ctx.kv and dkv.device_rows == ctx.pos

    def run(self, ex: "GpuExecutor", ctx: RunContext, arrays: list[np.ndarray], pick: TokenPick) -> dict:
        """Upload the inputs, patch the params of attention (cache length) and of the pick, submit."""
        slot_of = dict(zip(ex.cpu.input_slots, arrays))
        for slot, limit in self.id_limits:
            ids = slot_of[slot]
            if ids.size and (ids.min() < 0 or ids.max() >= limit):
                raise KernelError(f"ids must be in [0, {limit}), got {ids.min()}..{ids.max()}")
        start, seq = ctx.pos, arrays[0].shape[0]
        ctx.kv.reserve(start + seq)
        for slot, buf in self.uploads:
            ex.device.upload(np.ascontiguousarray(slot_of[slot]), buf)
        records = list(self.records)
        for first, lowered in self.attention:
            for i, params in enumerate(lowered(start)):
                r = records[first + i]
                records[first + i] = Record(r.kernel, r.buffers, r.grid, params)
        last = records[-1]
        kernel, params = pick.dispatch(self.vocab)
        records[-1] = Record(last.kernel, last.buffers, last.grid, kernel_info(kernel).pack(params))
        read = ex.commands.submit(records, [(self.token, 4)])[0]
        self.device_kv.wrote(ctx.kv, start, start + seq)
        ex.replayed_steps += 1
        return {"token": read.array(np.int32, (1,))}


class GpuExecutor:
    """Runs a validated graph on ``device`` with CPU islands; same ``run(ctx, feeds)`` as Executor."""

    def __init__(self, graph: Graph, weights: dict[str, Any], device: Device, reference: bool = False,
                 profile: bool = False):
        self.cpu = Executor(graph, weights, reference=reference, profile=profile)
        self.graph, self.device = graph, device
        self.placement = place_nodes(graph, device)
        self.picks_on_device = any(w == "gpu" for w, _ in self.placement.values())  # run(..., pick=) works
        self.pool = BufferPool(device)
        self.commands = device.graph()
        self.last_backend = "cpu"  # where the last forward ran ("cpu", or the device's name when any node was on it)
        self.device_kv: _DeviceKV | None = None  # made by the first GPU forward with a KV cache
        self._steps: dict[tuple, _StepReplay] = {}  # (input shapes, output rows, pick kernel) -> kept step
        self.replayed_steps = 0    # forwards run by a kept step, without the walk (tests count them)
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

    def release_kv(self) -> None:
        """Before the device closes: download the served session's device-only KV rows (its host cache
        stays usable) and free the device KV cache. After a device failure there is nothing to fetch:
        reading that session's cache then raises the device's DeviceError."""
        dkv, self.device_kv = self.device_kv, None
        self._steps.clear()
        if dkv is not None and not self.device.failed:
            dkv.free()

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
        return line

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

    def _cpu_forward(self, ctx) -> bool:
        return isinstance(ctx, BatchContext) or not self.picks_on_device

    def run(self, ctx: RunContext, feeds: dict[str, Any], pick: TokenPick | None = None) -> dict[str, np.ndarray]:
        """One forward; returns the graph outputs as host arrays, or with ``pick`` only
        ``{"token": (1,) int32}``, the next token chosen on the device from the last logits row."""
        arrays = self.check_feeds(feeds)
        if self._cpu_forward(ctx):
            if pick is not None:
                raise KernelError("a token pick needs a forward on the GPU; this one runs on the CPU")
            self.last_backend = "cpu"
            result = self.cpu.run(ctx, feeds)  # reading a session's KV cache downloads its device-only rows
            if self.device_kv is not None:
                for part, _ in (ctx.parts if isinstance(ctx, BatchContext) else [(ctx, 0)]):
                    if part.kv is not None:
                        self.device_kv.cpu_wrote(part.kv, part.pos)
            if self.profile is not None:  # these nodes' times now include CPU runs (batched decode steps)
                self.profile.backends.update({n: f"{b}+cpu" for n, b in self.node_backends().items() if b != "cpu"})
            return result
        self.last_backend = self.device.name
        if pick is not None and self.profile is None and type(ctx) is RunContext and ctx.kv is not None:
            step = self._steps.get(self._step_key(ctx, [a.shape for a in arrays], pick))
            if step is not None and step.continues(self, ctx):
                return step.run(self, ctx, arrays, pick)
        return _Forward(self, ctx, arrays, pick).run()

    def _step_key(self, ctx: RunContext, input_shapes, pick: TokenPick) -> tuple:
        return tuple(input_shapes), ctx.output_rows, pick.temperature == 0.0


class _Forward:
    """The state of one GPU forward: per slot a host array, a device buffer and a shape."""

    def __init__(self, ex: GpuExecutor, ctx: RunContext, arrays: list[np.ndarray], pick: TokenPick | None = None):
        self.ex, self.ctx, self.pick = ex, ctx, pick
        n = ex.cpu.n_slots
        self.host: list[np.ndarray | None] = [None] * n
        self.dev: list[Buffer | None] = [None] * n
        self.shape: list[tuple | None] = [None] * n
        self.refs: dict[int, int] = {}           # id(pooled buffer) -> slots holding it
        self.pinned: set[int] = set()            # ids of buffers with a pending download
        self.acquired: dict[int, Buffer] = {}    # every pooled buffer this forward took, by id
        self.kv_written: tuple[int, int] | None = None  # positions [start, end) this forward appends on the device
        self.input_shapes = [a.shape for a in arrays]
        self.segments = 1                         # submits this forward makes (a CPU node ends one)
        self.uploads: list[tuple[int, Buffer]] = []       # (graph input slot, the buffer it went to)
        self.attention: list[tuple[int, Any]] = []        # (first record index, lowering by cache start) per attention
        self.id_limits: list[tuple[int, int]] = []        # (graph input slot of ids, table rows) the embedding checked
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
            if slot in self.ex.cpu.input_slots:
                self.uploads.append((slot, buf))
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
        self.segments += 1
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
            if self.pick is not None:
                reads = {"token": self._record_pick(out_slots["logits"])}
                step = self._keep_step(reads["token"][0].buffer, self.shape[out_slots["logits"]][1])
            else:
                reads = {n: self._download(s) for n, s in out_slots.items() if self.host[s] is None}
            ex.commands.end()
        finally:
            for bid, buf in self.acquired.items():  # every pooled buffer goes back
                if bid in self.refs:
                    ex.pool.release(buf)
            ex.pool.end_segment()
        if self.kv_written is not None:
            ex.device_kv.wrote(self.ctx.kv, *self.kv_written)
        if self.pick is not None and step is not None:
            ex._steps[ex._step_key(self.ctx, self.input_shapes, self.pick)] = step
        if prof is not None:
            prof.runs += 1
        if self.pick is not None:
            return {"token": reads["token"][0].array(np.int32, (1,))}
        return {n: (reads[n][0].array(reads[n][1], reads[n][2]) if n in reads else self.host[s])
                for n, s in out_slots.items()}

    def _keep_step(self, token: Buffer, vocab: int) -> _StepReplay | None:
        """This forward as a step to submit again, when it is one segment over a KV cache (else None)."""
        ex = self.ex
        if self.segments != 1 or self.kv_written is None or ex.profile is not None:
            return None
        return _StepReplay(list(ex.commands.records), self.uploads, self.attention, self.id_limits, token, vocab,
                           ex.device_kv)

    def _record_pick(self, logits_slot: int):
        """Record the token pick over the last logits row; its 4-byte download."""
        rows, vocab = self.shape[logits_slot]
        if rows != 1:
            raise KernelError(f"a token pick reads one logits row, got {rows} (output_rows must be 'last')")
        kernel, params = self.pick.dispatch(vocab)
        token = self._acquire(4)  # (1,) uint32
        self.ex.commands.record(kernel, [self._to_device(logits_slot), token], (1, 1, 1), params)
        self.pinned.add(id(token))
        return self.ex.commands.download(token, 4), np.int32, (1,)

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
            if in_slots["ids"] in ex.cpu.input_slots:
                self.id_limits.append((in_slots["ids"], shapes["table"][0]))
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
        for p, s in in_slots.items():  # a weight bound packed, chunk by chunk
            if s in ex.weight_chunks:
                dtype, per_chunk, chunks = ex.weight_chunks[s]
                extra[f"{p}_layout"] = (dtype, per_chunk)
                bufs.update({f"{p}.{i}": b for i, b in enumerate(chunks)})

        def lowered(extra: dict) -> list[tuple]:
            """(kernel, buffer names, grid, packed params) per dispatch, memoized by shapes and extras."""
            return ex.memo(("lower",) + shape_key + tuple(extra.items()), lambda: [
                (d.kernel, d.buffers, d.grid, kernel_info(d.kernel).pack(d.params))
                for d in low.lower(Call(node.params, shapes, extra))])

        dispatches = lowered(extra)
        if node.op == "attention" and self.ctx.kv is not None:  # a kept step re-lowers it for later positions
            self.attention.append((len(ex.commands.records),
                                   lambda start, cap=extra["capacity"]: [d[3] for d in lowered({"start": start, "capacity": cap})]))
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
        kv, start = ctx.kv, ctx.pos
        kv.reserve(start + seq)
        dkv = ex.device_kv
        if dkv is not None and dkv.shape != kv.host_keys[0].shape:  # another cache geometry: new buffers
            ex.commands.invalidate()  # no recording may bind the old ones
            ex._steps.clear()
            dkv.free()
            dkv = ex.device_kv = None
        if dkv is None:
            layers = sorted({int(n.params.get("layer", 0)) for n in ex.graph.nodes
                             if n.op == "attention" and ex.placement[n.id][0] == "gpu"})
            dkv = ex.device_kv = _DeviceKV(ex, kv, layers)
        if self.kv_written is None:  # the first attention node of this forward
            dkv.bind(kv, start)
            self.kv_written = (start, start + seq)
        bufs["@k_cache"], bufs["@v_cache"] = dkv.bufs[layer]
        return {"start": start, "capacity": dkv.shape[1]}
