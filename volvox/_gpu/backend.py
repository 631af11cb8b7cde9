"""The shared GPU backend API: devices, buffers, kernels and the deferred ``CommandGraph``.

A backend (vulkan.py, opengl.py, webgpu.py) is a ``Device`` subclass that can allocate storage
buffers, write them from the host, build a compute pipeline per kernel, turn a list of recorded
dispatches into a native *recording* (a Vulkan command buffer, a GL dispatch list, WebGPU bind
groups) and submit a recording as one submit and one wait. ``CommandGraph`` is what the executor
talks to: ``begin()``, ``record(kernel, buffers, grid, params)`` and ``download(buffer)`` collect
work, ``end()`` runs it all with one submit and one wait, then downloads hold their data. Work
with the same structure as an earlier ``end()`` replays that recording (record once, replay).

Driver failures (out of memory, device lost, a timeout) surface as ``DeviceError`` naming the
backend and what it was doing; after a failed submit the device refuses further work.

Every kernel is a WGSL file (shaders/*.wgsl at the repository root; a wheel carries a copy in
shaders/wgsl/ here), whose ``// #include "include/<file>.wgsl"`` lines stand for shared parts
(wgsl_include.py): its storage buffers are bindings 0..n-1 of group 0 in declaration order, and
its last binding is ``P``, a read-only struct ``Params`` of 4-byte ``u32`` / ``f32`` fields, packed
here from the WGSL declaration. tools/compile_shaders.py generates the committed SPIR-V
(volvox/_gpu/shaders/spv/) and GLSL 430 (volvox/_gpu/shaders/glsl/) from it; the GLSL ES 310 the
gles backend runs is derived from the GLSL when it is loaded (``glsl_source``).
"""

from __future__ import annotations

import itertools
import os
import re
import struct
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from volvox._gpu.wgsl_include import IncludeError, expand_wgsl
from volvox.errors import DeviceError, KernelError, UnsupportedError, VolvoxError
from volvox.ops.gpu import MAX_GROUPS

SHADER_DIR = Path(__file__).resolve().parent / "shaders"  # generated, committed: spv/<name>.spv, glsl/<name>.comp
# The WGSL sources: a wheel's copy (CMakeLists.txt installs shaders/ there), else the source tree's
# shaders/ (an editable install or a checkout, where the package directory has no copy).
WGSL_DIRS = (SHADER_DIR / "wgsl", SHADER_DIR.parents[2] / "shaders")
GLSL_VERSION = "#version 430\n"     # the first line of every generated GLSL file
GLES_VERSION = "#version 310 es\n"  # what the gles backend puts in its place
PARAM_ALIGN = 256       # byte alignment of each dispatch's params (covers every API's offset alignment)
MIN_BUFFER = 256        # smallest buffer the pool hands out
RECORDING_CACHE = 16    # native recordings a CommandGraph keeps for replay (least recently used dropped)


class BackendUnavailable(UnsupportedError):
    """The driver, library or device a GPU backend needs is missing; the message says which."""


# Renderer / adapter names of GPU APIs implemented on the CPU: Mesa's llvmpipe (GL), lavapipe (Vulkan,
# which names itself llvmpipe) and softpipe, Google's SwiftShader, Microsoft's WARP ("Basic Render Driver").
SOFTWARE_ADAPTERS = re.compile(r"llvmpipe|lavapipe|softpipe|swiftshader|basic render driver", re.IGNORECASE)


def software_adapter(description: str, adapter_type: str = "") -> bool:
    """True when an adapter is a CPU implementation of the GPU API: its type says CPU (Vulkan's
    VK_PHYSICAL_DEVICE_TYPE_CPU, wgpu's adapter_type "CPU") or its name is a known software rasterizer."""
    return adapter_type.strip().lower() == "cpu" or bool(SOFTWARE_ADAPTERS.search(description))


GL_ERRORS = {0x500: "invalid enum", 0x501: "invalid value", 0x502: "invalid operation", 0x505: "out of memory",
             0x506: "invalid framebuffer operation", 0x507: "context lost"}


def wait_timeout_ns() -> int:
    """How long a submit may run before the device is declared hung: env VOLVOX_GPU_TIMEOUT
    (seconds, default 600, generous for software drivers), in nanoseconds."""
    raw = os.environ.get("VOLVOX_GPU_TIMEOUT", "600")
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:
        raise DeviceError(f"VOLVOX_GPU_TIMEOUT must be a positive number of seconds, got {raw!r}")
    return int(min(seconds * 1e9, 2 ** 64 - 1))


def timed_out(timeout_ns: int) -> TimeoutError:
    """The error a backend raises when a submit outlived ``timeout_ns``."""
    return TimeoutError(f"the GPU did not finish within {timeout_ns / 1e9:g} s (VOLVOX_GPU_TIMEOUT)")


def describe_driver_error(e: Exception) -> str:
    """A driver exception in one line: PyOpenGL's error and function, else the type and first words."""
    op = getattr(getattr(e, "baseOperation", None), "__name__", "")
    if op:
        err = getattr(e, "err", None)
        desc = getattr(e, "description", None) or GL_ERRORS.get(err, "GL error")
        return f"{desc.decode() if isinstance(desc, bytes) else desc} (GL error {err} in {op})"
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


@dataclass(frozen=True)
class KernelInfo:
    """A shader's interface, read from its WGSL: storage buffers and the ``Params`` fields."""

    name: str
    n_buffers: int                        # storage buffers before the params binding
    fields: tuple[tuple[str, str], ...]   # (name, "u32" | "f32") in struct order

    def pack(self, params: dict) -> bytes:
        """The Params struct as bytes; KernelError naming the kernel on a missing or unknown field."""
        names = [n for n, _ in self.fields]
        if set(params) != set(names):
            raise KernelError(f"kernel {self.name!r}: params must be {names}, got {sorted(params)}")
        fmt = "<" + "".join("f" if t == "f32" else ("i" if t == "i32" else "I") for _, t in self.fields)
        return struct.pack(fmt, *[params[n] for n in names])


def wgsl_dir() -> Path:
    """The directory holding the WGSL sources (see WGSL_DIRS)."""
    for d in WGSL_DIRS:
        if d.is_dir():
            return d
    raise KernelError(f"no WGSL shaders: neither {WGSL_DIRS[0]} (a wheel) nor {WGSL_DIRS[1]} (the source tree) exists")


def wgsl_source(name: str) -> str:
    """The WGSL of kernel ``name`` with its includes expanded (what the webgpu backend runs)."""
    path = wgsl_dir() / f"{name}.wgsl"
    if not path.is_file():
        raise KernelError(f"no shader {path}")
    try:
        return expand_wgsl(path)
    except IncludeError as e:
        raise KernelError(str(e)) from None


def spirv_code(name: str) -> bytes:
    """The SPIR-V of kernel ``name`` (what the vulkan backend runs)."""
    path = SHADER_DIR / "spv" / f"{name}.spv"
    if not path.is_file():
        raise KernelError(f"no shader {path}")
    return path.read_bytes()


def gles_from_glsl(text: str, where: str = "generated GLSL") -> str:
    """GLSL ES 310 from a generated GLSL 430 text: its first line, ``#version 430``, becomes ``#version 310 es``.

    SPIRV-Cross's GLSL 430 and GLSL ES 310 translations of these compute shaders differ in that
    line only (tests/gpu/test_gpu_shaders.py checks it for every kernel against spirv-cross itself)."""
    if not text.startswith(GLSL_VERSION):
        raise KernelError(f"{where}: must start with {GLSL_VERSION.strip()!r} (regenerate: python tools/compile_shaders.py)")
    return GLES_VERSION + text[len(GLSL_VERSION):]


def glsl_source(name: str, es: bool = False) -> str:
    """The GLSL of kernel ``name``: GLSL 430 as generated (opengl), or GLSL ES 310 derived from it (gles)."""
    path = SHADER_DIR / "glsl" / f"{name}.comp"
    if not path.is_file():
        raise KernelError(f"no shader {path}")
    text = path.read_text()
    es_text = gles_from_glsl(text, str(path))  # checks the version line for both
    return es_text if es else text


@lru_cache(maxsize=None)
def kernel_info(name: str) -> KernelInfo:
    """The interface of kernel ``name`` parsed from its WGSL."""
    path = wgsl_dir() / f"{name}.wgsl"
    src = wgsl_source(name)
    body = re.search(r"struct Params\s*\{(.*?)\}", src, re.S)
    if body is None:
        raise KernelError(f"{path}: no struct Params")
    fields = tuple(re.findall(r"(\w+)\s*:\s*(u32|f32|i32)", re.sub(r"//[^\n]*", "", body.group(1))))
    bindings = [int(b) for b in re.findall(r"@binding\((\d+)\)", src)]
    if sorted(bindings) != list(range(len(bindings))):
        raise KernelError(f"{path}: bindings must be 0..n-1, got {bindings}")
    return KernelInfo(name, len(bindings) - 1, fields)


def kernel_names() -> list[str]:
    """Every shipped kernel."""
    return sorted(p.stem for p in wgsl_dir().glob("*.wgsl"))


def fmt_bytes(n: int) -> str:
    """``n`` bytes for a message: 512 B, 3.0 MiB, 1.5 GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


_serials = itertools.count(1)


class Buffer:
    """A device storage buffer of ``nbytes`` bytes; ``native`` is the backend's handle.

    ``serial`` numbers buffers in allocation order, never reused: recordings are keyed by it
    (a freed and reallocated handle can never alias an old recording) and the pool hands out
    the lowest free one first.
    """

    __slots__ = ("native", "nbytes", "extra", "serial")

    def __init__(self, native, nbytes: int, extra=None):
        self.native = native
        self.nbytes = nbytes
        self.extra = extra  # backend-private (memory handle, mapped view, ...)
        self.serial = next(_serials)


@dataclass
class Record:
    """One recorded dispatch."""

    kernel: str
    buffers: list[Buffer]
    grid: tuple[int, int, int]
    params: bytes


class Recording:
    """A device's native, resubmittable form of one graph's dispatches, with its own params buffer.

    ``params`` is the Params blob last written to that buffer (rewritten only when it changes).
    Backends subclass it with their handles.
    """

    params: bytes | None = None


class Readback:
    """A device->host copy requested in a graph; ``array()`` is valid after ``end()``."""

    def __init__(self, buffer: Buffer, nbytes: int):
        self.buffer = buffer
        self.nbytes = nbytes
        self.data: bytes | np.ndarray | None = None

    def array(self, dtype, shape) -> np.ndarray:
        """The downloaded bytes as an array of ``dtype`` and ``shape`` (a copy)."""
        if self.data is None:
            raise KernelError("download read before its command graph ended")
        raw = np.frombuffer(self.data, dtype=np.uint8, count=self.nbytes)
        return raw.view(dtype).reshape(shape).copy()


class Device:
    """One GPU backend instance. Subclasses implement the ``_``-prefixed hooks."""

    name = "?"

    def __init__(self):
        self.description = "?"       # adapter / renderer name
        self.software = False        # a CPU implementation (lavapipe, llvmpipe): software_adapter()
        self.submits = 0             # queue submissions so far (tests count them)
        self.dispatches_recorded = 0  # dispatches made native (descriptor sets, bind groups, GL list entries)
        self.bytes_uploaded = 0      # host -> device bytes written by upload() (tests count the KV traffic)
        self.bytes_downloaded = 0    # device -> host bytes copied by downloads
        self.wait_seconds = 0.0      # of the submits' wall time, spent waiting for the device (fence, sync, map)
        self.max_binding = 1 << 27   # bytes one storage binding may span (each backend reads its driver's limit)
        self.max_buffer = 1 << 62    # bytes one buffer may hold, where the driver says
        self.failed = ""             # why the device refuses work after a failed submit ("" while healthy)
        self._dummy: Buffer | None = None

    # -- hooks -----------------------------------------------------------------
    def _alloc(self, nbytes: int) -> Buffer:
        raise NotImplementedError

    def _free(self, buf: Buffer) -> None:
        raise NotImplementedError

    def _write(self, buf: Buffer, data: bytes | memoryview) -> None:
        raise NotImplementedError

    def _record(self, records: list[Record], offsets: list[int], params_nbytes: int,
                reads: list[Readback]) -> Recording:
        """Build the native form of ``records`` (params of record i at ``offsets[i]`` of a buffer of
        ``params_nbytes`` that the recording owns) and of ``reads``; nothing runs yet."""
        raise NotImplementedError

    def _submit(self, rec: Recording, params: bytes | None, reads: list[Readback], timeout_ns: int) -> None:
        """Write ``params`` (None: unchanged) to ``rec``'s params buffer, run ``rec`` (every dispatch
        sees the writes of the ones before), copy out ``reads`` as one submit and one wait of at most
        ``timeout_ns`` (else raise ``timed_out``); set each Readback's ``data``."""
        raise NotImplementedError

    def _discard(self, rec: Recording) -> None:
        """Release a recording's native objects (it is never submitted again)."""

    def supports(self, kernel: str) -> bool:
        """Whether this device can run ``kernel`` (it compiles, and its bindings fit the limits)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the device (buffers become invalid)."""

    # -- shared ----------------------------------------------------------------
    @contextmanager
    def waiting(self):
        """Time a submit's wait for the device into ``wait_seconds`` (benchmarks split submit from wait)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.wait_seconds += time.perf_counter() - t0

    @contextmanager
    def driver(self, what: str, fatal: bool = False):
        """Run driver calls for ``what``: a driver exception becomes DeviceError naming the backend;
        ``fatal`` (a submit) also marks the device failed, so later work is refused, not attempted."""
        if self.failed:
            raise DeviceError(f"{self.name}: the device is unusable ({self.failed}); load the model again")
        try:
            yield
        except VolvoxError:
            raise
        except Exception as e:
            reason = describe_driver_error(e)
            if fatal:
                self.failed = f"{what}: {reason}"
            raise DeviceError(f"{self.name} ({self.description}): {what} failed: {reason}") from None

    def alloc(self, nbytes: int) -> Buffer:
        """A new storage buffer of at least ``nbytes`` (contents undefined); DeviceError when it cannot be had."""
        nbytes = max(int(nbytes), 16)
        if nbytes > self.max_buffer:
            raise DeviceError(f"{self.name}: a buffer of {fmt_bytes(nbytes)} exceeds the device's maximum "
                              f"of {fmt_bytes(self.max_buffer)}")
        with self.driver(f"allocating {fmt_bytes(nbytes)}"):
            return self._alloc(nbytes)

    def free(self, buf: Buffer) -> None:
        """Release ``buf`` now; no pending or recorded work may use it again."""
        with self.driver("freeing a buffer"):
            self._free(buf)

    def upload(self, array: np.ndarray, buf: Buffer | None = None) -> Buffer:
        """Copy ``array`` to ``buf`` (or a new buffer) now; the buffer must not be read by pending work."""
        data = np.ascontiguousarray(array)
        if buf is None:
            buf = self.alloc(data.nbytes)
        if data.nbytes > buf.nbytes:
            raise KernelError(f"upload of {data.nbytes} bytes into a buffer of {buf.nbytes}")
        if data.nbytes:
            with self.driver(f"uploading {fmt_bytes(data.nbytes)}"):
                self._write(buf, memoryview(data).cast("B"))
            self.bytes_uploaded += data.nbytes
        return buf

    @property
    def dummy(self) -> Buffer:
        """A small buffer bound where a kernel's optional input (bias) is absent."""
        if self._dummy is None:
            self._dummy = self.upload(np.zeros(4, np.float32))
        return self._dummy

    def graph(self) -> "CommandGraph":
        """A new deferred command graph on this device."""
        return CommandGraph(self)


class CommandGraph:
    """Deferred work on one device: ``begin()``, ``record(...)``/``download(...)``, ``end()`` = one submit.

    Record once, replay: ``end()`` keys the work by its structure, each dispatch's kernel, bound
    buffers (by serial) and grid plus each download's buffer and size. The first ``end()`` of a
    structure has the device build a native recording of it; a later ``end()`` with the same
    structure rewrites that recording's params buffer (only if the values changed: e.g. attention's
    cache offset) and resubmits it. Params live in a buffer, never in the recording, so only a
    change of buffers or grids (a new shape) records again. ``RECORDING_CACHE`` structures are kept.
    """

    def __init__(self, device: Device, cache_size: int = RECORDING_CACHE):
        self.device = device
        self.cache_size = max(1, cache_size)  # the recording being submitted is always kept
        self.records: list[Record] = []
        self.reads: list[Readback] = []
        self.recordings = 0    # native recordings built so far (tests count them)
        self.replays = 0       # ends that resubmitted a cached recording
        self.submit_seconds = 0.0  # wall time spent submitting and waiting (the rest of a forward is host work)
        self._cache: OrderedDict[tuple, Recording] = OrderedDict()  # structure -> recording, oldest first

    def begin(self) -> None:
        """Start collecting work."""
        self.records, self.reads = [], []

    def record(self, kernel: str, buffers: list[Buffer], grid: tuple[int, int, int], params: dict | bytes) -> None:
        """Queue one dispatch of ``kernel`` over ``grid`` workgroups with ``buffers`` bound in order;
        ``params``: the Params values, or the bytes ``KernelInfo.pack`` made of them."""
        info = kernel_info(kernel)
        if len(buffers) != info.n_buffers:
            raise KernelError(f"kernel {kernel!r} binds {info.n_buffers} buffers, got {len(buffers)}")
        if not all(1 <= g <= MAX_GROUPS for g in grid):
            raise KernelError(f"kernel {kernel!r}: grid {grid} outside 1..{MAX_GROUPS} per dimension")
        big = max(b.nbytes for b in buffers)
        if big > self.device.max_binding:
            raise KernelError(f"kernel {kernel!r}: a buffer of {fmt_bytes(big)} exceeds {self.device.name}'s "
                              f"storage binding limit of {fmt_bytes(self.device.max_binding)}")
        packed = params if isinstance(params, bytes) else info.pack(params)
        self.records.append(Record(kernel, list(buffers), tuple(grid), packed))

    def download(self, buf: Buffer, nbytes: int) -> Readback:
        """Copy the first ``nbytes`` of ``buf`` to the host when the graph runs."""
        r = Readback(buf, nbytes)
        self.reads.append(r)
        return r

    def end(self) -> None:
        """Run everything recorded since begin(): one submit, one wait (nothing when empty)."""
        records, reads = self.records, self.reads
        self.records, self.reads = [], []
        if not records and not reads:
            return
        offsets, blob = [], bytearray()  # every dispatch's Params struct at a PARAM_ALIGN offset
        for rec in records:
            offsets.append(len(blob))
            blob += rec.params
            blob += bytes(-len(blob) % PARAM_ALIGN)
        key = (tuple((r.kernel, tuple(b.serial for b in r.buffers), r.grid) for r in records),
               tuple((r.buffer.serial, r.nbytes) for r in reads))
        dev = self.device
        native = self._cache.pop(key, None)
        if native is None:
            with dev.driver(f"recording {len(records)} dispatches"):
                while len(self._cache) >= self.cache_size:  # drop the least recently used
                    dev._discard(self._cache.popitem(last=False)[1])
                native = dev._record(records, offsets, len(blob), reads)
            self.recordings += 1
        else:
            self.replays += 1
        self._cache[key] = native  # most recently used last
        params, timeout_ns = bytes(blob), wait_timeout_ns()
        t0 = time.perf_counter()
        with dev.driver(f"running {len(records)} dispatches", fatal=True):
            dev._submit(native, params if params and params != native.params else None, reads, timeout_ns)
        self.submit_seconds += time.perf_counter() - t0
        dev.bytes_downloaded += sum(r.nbytes for r in reads)
        native.params = params

    def submit(self, records: list[Record], reads: list[tuple[Buffer, int]]) -> list[Readback]:
        """Run ``records`` (kept from an earlier graph, which checked them) and download ``(buffer, nbytes)``
        ``reads``: begin, the records, the downloads and end in one call."""
        self.records = list(records)
        self.reads = [Readback(buf, nbytes) for buf, nbytes in reads]
        out = self.reads
        self.end()
        return out

    def invalidate(self) -> None:
        """Drop every cached recording (before freeing buffers they bind)."""
        with self.device.driver("dropping recordings"):
            while self._cache:
                self.device._discard(self._cache.popitem()[1])


@dataclass
class BufferPool:
    """Reuses activation buffers by power-of-two size class.

    A buffer released while a graph is being recorded may still be read by earlier recorded
    dispatches, so it only goes back to the ``free`` list at ``end_segment()``; until then it may
    be reused as the output of a later dispatch (dispatches run in order), but never as the target
    of a host upload (uploads happen at once, before the graph runs): ``acquire(fresh=True)``.

    Free buffers are handed out lowest serial first, so a forward that makes the same requests as
    an earlier one gets the same buffers, even when other forwards grew the pool in between (every
    buffer they added has a higher serial): its command graph then replays the earlier recording.
    """

    device: Device
    free: dict[int, list[Buffer]] = field(default_factory=dict)      # size -> buffers, highest serial first
    released: dict[int, list[Buffer]] = field(default_factory=dict)  # size -> buffers, in release order

    @staticmethod
    def size_class(nbytes: int) -> int:
        """Bytes actually allocated for a request of ``nbytes``."""
        return max(MIN_BUFFER, 1 << (max(int(nbytes), 1) - 1).bit_length())

    def acquire(self, nbytes: int, fresh: bool = False) -> Buffer:
        """A buffer of at least ``nbytes``; ``fresh``: not touched by the graph being recorded."""
        size = self.size_class(nbytes)
        for lists in ((self.free,) if fresh else (self.released, self.free)):
            if lists.get(size):
                return lists[size].pop()
        return self.device.alloc(size)

    def release(self, buf: Buffer) -> None:
        """Give ``buf`` back (usable by later dispatches of this graph, by uploads after it ends)."""
        self.released.setdefault(buf.nbytes, []).append(buf)

    def end_segment(self) -> None:
        """The recorded graph has run: released buffers are free for anything."""
        for size, bufs in self.released.items():
            free = self.free.setdefault(size, [])
            free.extend(bufs)
            free.sort(key=lambda b: -b.serial)
        self.released = {}
