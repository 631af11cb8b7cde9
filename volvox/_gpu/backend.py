"""The shared GPU backend API: devices, buffers, kernels and the deferred ``CommandGraph``.

A backend (vulkan.py, opengl.py, webgpu.py) is a ``Device`` subclass that can allocate storage
buffers, write them from the host, build a compute pipeline per kernel and run a list of
recorded dispatches as one submit. ``CommandGraph`` is what the executor talks to:
``begin()``, ``record(kernel, buffers, grid, params)`` and ``download(buffer)`` collect work,
``end()`` runs it all with one submit and one wait, then downloads hold their data.

Every kernel is a WGSL file (shaders/*.wgsl, copied to shaders/wgsl/ here): its storage buffers
are bindings 0..n-1 of group 0 in declaration order, and its last binding is ``P``, a read-only
struct ``Params`` of 4-byte ``u32`` / ``f32`` fields, packed here from the WGSL declaration.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import KernelError, UnsupportedError

SHADER_DIR = Path(__file__).resolve().parent / "shaders"
PARAM_ALIGN = 256       # byte alignment of each dispatch's params (covers every API's offset alignment)
MAX_GROUPS = 65535      # workgroups per grid dimension every API guarantees
MIN_BUFFER = 256        # smallest buffer the pool hands out


class BackendUnavailable(UnsupportedError):
    """The driver, library or device a GPU backend needs is missing; the message says which."""


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


@lru_cache(maxsize=None)
def kernel_info(name: str) -> KernelInfo:
    """The interface of kernel ``name`` parsed from shaders/wgsl/<name>.wgsl."""
    path = SHADER_DIR / "wgsl" / f"{name}.wgsl"
    if not path.is_file():
        raise KernelError(f"no shader {path}")
    src = path.read_text()
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
    return sorted(p.stem for p in (SHADER_DIR / "wgsl").glob("*.wgsl"))


class Buffer:
    """A device storage buffer of ``nbytes`` bytes; ``native`` is the backend's handle."""

    __slots__ = ("native", "nbytes", "extra")

    def __init__(self, native, nbytes: int, extra=None):
        self.native = native
        self.nbytes = nbytes
        self.extra = extra  # backend-private (memory handle, mapped view, ...)


@dataclass
class Record:
    """One recorded dispatch."""

    kernel: str
    buffers: list[Buffer]
    grid: tuple[int, int, int]
    params: bytes


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
        self.software = False        # a CPU implementation (lavapipe, llvmpipe)
        self.submits = 0             # queue submissions so far (tests count them)
        self._dummy: Buffer | None = None

    # -- hooks -----------------------------------------------------------------
    def _alloc(self, nbytes: int) -> Buffer:
        raise NotImplementedError

    def _write(self, buf: Buffer, data: bytes | memoryview) -> None:
        raise NotImplementedError

    def _run(self, records: list[Record], params: bytes, offsets: list[int], reads: list[Readback]) -> None:
        """Dispatch ``records`` in order (every dispatch sees the writes of the ones before), copy
        out ``reads``, as one submit and one wait; set each Readback's ``data``."""
        raise NotImplementedError

    def supports(self, kernel: str) -> bool:
        """Whether this device can run ``kernel`` (it compiles, and its bindings fit the limits)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the device (buffers become invalid)."""

    # -- shared ----------------------------------------------------------------
    def alloc(self, nbytes: int) -> Buffer:
        """A new storage buffer of at least ``nbytes`` (contents undefined)."""
        return self._alloc(max(int(nbytes), 16))

    def upload(self, array: np.ndarray, buf: Buffer | None = None) -> Buffer:
        """Copy ``array`` to ``buf`` (or a new buffer) now; the buffer must not be read by pending work."""
        data = np.ascontiguousarray(array)
        if buf is None:
            buf = self.alloc(data.nbytes)
        if data.nbytes:
            self._write(buf, memoryview(data).cast("B"))
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
    """Deferred work on one device: ``begin()``, ``record(...)``/``download(...)``, ``end()`` = one submit."""

    def __init__(self, device: Device):
        self.device = device
        self.records: list[Record] = []
        self.reads: list[Readback] = []

    def begin(self) -> None:
        """Start collecting work."""
        self.records, self.reads = [], []

    def record(self, kernel: str, buffers: list[Buffer], grid: tuple[int, int, int], params: dict) -> None:
        """Queue one dispatch of ``kernel`` over ``grid`` workgroups with ``buffers`` bound in order."""
        info = kernel_info(kernel)
        if len(buffers) != info.n_buffers:
            raise KernelError(f"kernel {kernel!r} binds {info.n_buffers} buffers, got {len(buffers)}")
        if not all(1 <= g <= MAX_GROUPS for g in grid):
            raise KernelError(f"kernel {kernel!r}: grid {grid} outside 1..{MAX_GROUPS} per dimension")
        self.records.append(Record(kernel, list(buffers), tuple(grid), info.pack(params)))

    def download(self, buf: Buffer, nbytes: int) -> Readback:
        """Copy the first ``nbytes`` of ``buf`` to the host when the graph runs."""
        r = Readback(buf, nbytes)
        self.reads.append(r)
        return r

    def end(self) -> None:
        """Run everything recorded since begin(): one submit, one wait (nothing when empty)."""
        if not self.records and not self.reads:
            return
        offsets, blob = [], bytearray()
        for rec in self.records:
            offsets.append(len(blob))
            blob += rec.params
            blob += bytes(-len(blob) % PARAM_ALIGN)
        self.device._run(self.records, bytes(blob), offsets, self.reads)
        self.records, self.reads = [], []


def grid_1d(n_groups: int) -> tuple[int, int, int]:
    """``n_groups`` workgroups folded into x and y (shaders index (wid.y * nwg.x + wid.x))."""
    n_groups = max(1, int(n_groups))
    x = min(n_groups, MAX_GROUPS)
    return (x, -(-n_groups // x), 1)


@dataclass
class BufferPool:
    """Reuses activation buffers by power-of-two size class.

    A buffer released while a graph is being recorded may still be read by earlier recorded
    dispatches, so it only goes back to the ``free`` list at ``end_segment()``; until then it may
    be reused as the output of a later dispatch (dispatches run in order), but never as the target
    of a host upload (uploads happen at once, before the graph runs): ``acquire(fresh=True)``.
    """

    device: Device
    free: dict[int, list[Buffer]] = field(default_factory=dict)
    released: dict[int, list[Buffer]] = field(default_factory=dict)

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
            self.free.setdefault(size, []).extend(bufs)
        self.released = {}
