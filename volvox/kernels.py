"""CPU kernels: the Python boundary (validation + dispatch) of volvox's native code.

Every public function here checks dtypes, shapes and layouts once, makes inputs
C-contiguous (copying if needed), then calls typed Cython that runs without the GIL
(OpenMP over output features, per-ISA SIMD tiles in C). Kernels never see a buffer
they could read or write out of bounds.

ISA tiers (x86_64: generic, avx2, avx512; arm64: generic, neon, dotprod) are compiled
as separate objects; the best one this CPU runs is chosen at import.
``VOLVOX_ISA=<tier>`` forces a tier, and a tier that is unknown, not built or not
runnable on this CPU raises :class:`~volvox.errors.KernelError` at import (never a
silent fallback). ``VOLVOX_NUM_THREADS`` sets the initial thread count (default: the
number of physical cores available to this process).

    linear(x, w, out=None)          y = x @ w.T   (quantized or f32/f16 weights)
    embedding(table, ids)           rows of a (quantized) table
    rms_norm(x, weight, eps, out=None)
    isa(), available_isas(), set_num_threads(n), get_num_threads()
"""

from __future__ import annotations

import os
import threading

import numpy as np

from .errors import KernelError, ShapeError
from .quant import QuantTensor

try:
    from ._kernels import _core
except ImportError as exc:  # pragma: no cover - only without a build
    raise KernelError(
        f"volvox's compiled kernels are missing ({exc}); build them with "
        "`pip install --no-build-isolation -e .` (developers) or `pip install .`") from exc

__all__ = ["linear", "embedding", "rms_norm", "isa", "available_isas",
           "set_num_threads", "get_num_threads"]

ALL_ISAS = ("generic", "avx2", "avx512", "neon", "dotprod")

# weight type codes of csrc/vx_kernels.h
_QTYPE_CODE = {"q4_0": 0, "q4_1": 1, "q8_0": 2, "q4_k": 3, "q6_k": 4}
_F32, _F16 = 5, 6


# ----------------------------------------------------------------------------- ISA tiers
def available_isas() -> list[str]:
    """Tiers compiled into this build that this CPU can run, most portable first."""
    return [t for t in _core.compiled_isas() if _core.isa_supported(t)]


def isa() -> str:
    """The tier every kernel currently runs on."""
    return _core.get_isa()


def _check_isa(name: str, origin: str) -> str:
    name = name.strip().lower()
    if name not in ALL_ISAS:
        raise KernelError(f"{origin}={name!r} is not an ISA tier (known: {', '.join(ALL_ISAS)})")
    if name not in _core.compiled_isas():
        raise KernelError(f"{origin}={name!r}: that tier is not built for this machine "
                          f"(built: {', '.join(_core.compiled_isas())})")
    if not _core.isa_supported(name):
        raise KernelError(f"{origin}={name!r}: this CPU cannot run that tier "
                          f"(available: {', '.join(available_isas())})")
    return name


def _set_isa_for_testing(name: str) -> None:
    """Switch every kernel to tier `name` in this process (tests compare tiers this way)."""
    _core.set_isa(_check_isa(name, "ISA"))


def _initial_isa() -> str:
    forced = os.environ.get("VOLVOX_ISA", "")
    if forced.strip():
        return _check_isa(forced, "VOLVOX_ISA")
    return available_isas()[-1]


_core.set_isa(_initial_isa())


# ------------------------------------------------------------------------------- threads
def _physical_cores() -> int:
    """Physical cores this process may run on (SMT siblings counted once)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(base + "core_id") as f1, open(base + "physical_package_id") as f2:
                cores.add((f2.read().strip(), f1.read().strip()))
        except OSError:
            return max(1, len(cpus))
    return max(1, len(cores))


def set_num_threads(n: int) -> None:
    """Threads the kernels use (1 when volvox was built without OpenMP)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise KernelError(f"set_num_threads needs a positive integer, got {n!r}")
    _core.set_num_threads(int(n))


def get_num_threads() -> int:
    return _core.get_num_threads()


def _initial_threads() -> int:
    env = os.environ.get("VOLVOX_NUM_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise KernelError(f"VOLVOX_NUM_THREADS={env!r} is not a positive integer")
        return n
    return _physical_cores()


set_num_threads(_initial_threads())


# ------------------------------------------------------------------------------- scratch
# Per-Python-thread scratch for quantized activations: grows, never shrinks, so a
# decode step allocates nothing once warm. (Kernels run without the GIL, so two
# Python threads may be inside at once: each has its own buffer.)
_tls = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    buf = getattr(_tls, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        raw = np.empty(max(nbytes, 4096) + nbytes // 2 + 64, dtype=np.uint8)
        off = (-raw.ctypes.data) % 64  # 64-byte aligned start
        buf = raw[off:]
        _tls.buf = buf
    return buf


# ---------------------------------------------------------------------------- validation
def _f32_matrix(a, name: str) -> tuple[np.ndarray, bool]:
    """(M, K) float32 C-contiguous view or copy of `a`; also whether `a` was 1-D."""
    if not isinstance(a, np.ndarray):
        raise KernelError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise KernelError(f"{name} must be float32, got {a.dtype}")
    if a.ndim == 1:
        return np.ascontiguousarray(a).reshape(1, -1), True
    if a.ndim != 2:
        raise ShapeError(f"{name} must be 1-D or 2-D, got shape {a.shape}")
    return np.ascontiguousarray(a), False


def _check_out(out, shape: tuple, name: str = "out") -> np.ndarray:
    """A caller's output buffer: float32, exactly `shape`, C-contiguous, writeable."""
    if not isinstance(out, np.ndarray):
        raise KernelError(f"{name} must be a numpy array, got {type(out).__name__}")
    if out.dtype != np.float32:
        raise KernelError(f"{name} must be float32, got {out.dtype}")
    if out.shape != shape:
        raise ShapeError(f"{name} must have shape {shape}, got {out.shape}")
    if not out.flags.c_contiguous:
        raise KernelError(f"{name} must be C-contiguous")
    if not out.flags.writeable:
        raise KernelError(f"{name} is read-only")
    return out


def _weight_bytes(w, name: str) -> tuple[int, np.ndarray, int, int]:
    """(type code, (N, row_bytes) uint8 C-contiguous, N, K) for a weight matrix."""
    if isinstance(w, QuantTensor):
        data = w.data
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        n, k = w.shape
        return _QTYPE_CODE[w.qtype], data, n, k
    if isinstance(w, np.ndarray):
        if w.dtype == np.float32:
            code = _F32
        elif w.dtype == np.float16:
            code = _F16
        else:
            raise KernelError(f"{name} must be a QuantTensor or a float32/float16 array, got {w.dtype}")
        if w.ndim != 2:
            raise ShapeError(f"{name} must be 2-D (rows, cols), got shape {w.shape}")
        w = np.ascontiguousarray(w)
        n, k = w.shape
        return code, w.view(np.uint8).reshape(n, k * w.itemsize), n, k
    raise KernelError(f"{name} must be a QuantTensor or a numpy array, got {type(w).__name__}")


# ------------------------------------------------------------------------------- kernels
def linear(x, w, out=None) -> np.ndarray:
    """y = x @ w.T.

    x:   float32 (M, K), or (K,) giving (N,)
    w:   QuantTensor (N, K) of q4_0 / q4_1 / q8_0 / q4_k / q6_k, or float32 / float16 (N, K)
    out: optional float32 (M, N) (or (N,) for 1-D x), C-contiguous, not overlapping x

    Quantized weights: each activation row is quantized to 8 bits per block (q8_1-style
    for 32-blocks, q8_K-style for k-quants) and multiplied with integer dot products.
    """
    x2, vec = _f32_matrix(x, "x")
    code, wb, n, k = _weight_bytes(w, "w")
    m = x2.shape[0]
    if x2.shape[1] != k:
        raise ShapeError(f"linear: x has {x2.shape[1]} features but w is {n}x{k}")
    if out is None:
        y = np.empty((m, n), dtype=np.float32)
    else:
        _check_out(out, (n,) if vec else (m, n))
        if np.may_share_memory(out, x2):
            raise KernelError("linear: out must not overlap x")
        y = out.reshape(m, n)
    nbytes = m * _core.act_row_bytes(code, k)
    _core.gemm(code, wb, k, x2, y, _scratch(nbytes))
    if out is not None:
        return out
    return y[0] if vec else y


def embedding(table, ids) -> np.ndarray:
    """Rows `ids` of `table` as float32 (S, D).

    table: QuantTensor (V, D) or float32 / float16 (V, D); ids: int32 / int64 (S,).
    An id outside [0, V) raises KernelError (nothing is returned).
    """
    code, tb, v, d = _weight_bytes(table, "table")
    if not isinstance(ids, np.ndarray):
        raise KernelError(f"ids must be a numpy array, got {type(ids).__name__}")
    if ids.dtype not in (np.int32, np.int64):
        raise KernelError(f"ids must be int32 or int64, got {ids.dtype}")
    if ids.ndim != 1:
        raise ShapeError(f"ids must be 1-D, got shape {ids.shape}")
    ids64 = np.ascontiguousarray(ids, dtype=np.longlong)
    out = np.empty((ids64.shape[0], d), dtype=np.float32)
    bad = _core.embedding(code, tb, d, ids64, out)
    if bad >= 0:
        raise KernelError(f"embedding: id {int(ids64[bad])} at position {bad} is outside "
                          f"the table's {v} rows")
    return out


def rms_norm(x, weight, eps, out=None) -> np.ndarray:
    """out = x / sqrt(mean(x^2, axis=-1) + eps) * weight, for float32 x (M, D) or (D,)."""
    x2, vec = _f32_matrix(x, "x")
    m, d = x2.shape
    if not isinstance(weight, np.ndarray) or weight.dtype != np.float32:
        raise KernelError("rms_norm: weight must be a float32 numpy array")
    if weight.shape != (d,):
        raise ShapeError(f"rms_norm: weight must have shape ({d},), got {weight.shape}")
    weight = np.ascontiguousarray(weight)
    eps = float(eps)
    if not eps >= 0.0:
        raise KernelError(f"rms_norm: eps must be >= 0, got {eps}")
    if out is None:
        y = np.empty((m, d), dtype=np.float32)
    else:
        _check_out(out, x.shape if vec else (m, d))
        y = out.reshape(m, d)
    _core.rms_norm(x2, weight, eps, y)
    if out is not None:
        return out
    return y[0] if vec else y
