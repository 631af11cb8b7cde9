"""CPU kernels: the Python boundary (validation + dispatch) of volvox's native code.

Every public function here checks dtypes, shapes and layouts once, makes inputs
C-contiguous (copying if needed), then calls typed Cython that runs without the GIL
(OpenMP over output features, per-ISA SIMD tiles in C). Kernels never see a buffer
they could read or write out of bounds.

ISA tiers (x86_64: generic, avx2, avx512; arm64: generic, neon, dotprod) are compiled
as separate objects; the best one this CPU runs is chosen at import.
``VOLVOX_ISA=<tier>`` forces a tier, and a tier that is unknown, not built or not
runnable on this CPU raises :class:`~volvox.errors.KernelError` at import (never a
silent fallback). ``VOLVOX_IQ4_NL_VBMI=0`` makes the avx512 tier's iq4_nl GEMV look its levels
up with pshufb on a CPU with AVX-512 VBMI too (detected in the engine's tiers.pxi; default:
vpermb). ``VOLVOX_NUM_THREADS`` sets the initial thread count (default: the number of physical
cores available to this process).

    linear(x, w, out=None)          y = x @ w.T   (quantized or f32/f16 weights)
    embedding(table, ids, out=None) rows of a (quantized) table
    rms_norm(x, weight, eps, out=None)
    layer_norm(x, weight, bias, eps, out=None)  LayerNorm (statistics in double)
    gelu(x, approximate, out=None)  exact (erf) or tanh GELU
    attention(q, k_cache, v_cache, start, n_heads, scale, window=0, out=None)   causal GQA over a KV cache
    rope(x, positions, head_dim, ..., out=None)   rotary embedding (ggml's arithmetic)
    swiglu(x, out=None), silu(x, out=None)   silu(gate) * up for x = [gate | up]; silu
    conv2d(x, w, bias, ..., out=None)   NHWC f32 conv (dense or depthwise), fused bias + ReLU/ReLU6

Every ``out=`` is an optional caller's buffer of the result's shape, float32, C-contiguous and
writeable (KernelError / ShapeError otherwise), returned as the result. linear, embedding,
layer_norm, attention, rope, swiglu and conv2d refuse one that overlaps an input
(KernelError); gelu and silu may write over x itself.
    qconv2d(x, w, bias, mult, shift, ...)   NHWC int8 conv, TFLite-exact requantization
    quantize_i8, dequantize_i8, qavg_pool2d, qsoftmax   TFLite-exact small int8 ops
    isa(), available_isas(), set_num_threads(n), get_num_threads()
Training (the backward kernels of the LLM path):
    matmul_t(dy, w)                 dx = dy @ w on w as inference holds it (quantized, interleaved, f16, f32)
    weight_grad(dy, x)              dW = dy.T @ x (f32)
    attention_train(q, k, v, ...) -> (out, lse); attention_backward(q, k, v, out, lse, dout, ...) -> dq, dk, dv
    cross_entropy(logits, labels, ignore_index, grad, in_place) -> (loss, dlogits, lse)
    cross_entropy_grad(logits, labels, lse, dloss, ignore_index, out) -> dlogits (from the saved lse)
    rms_norm_backward(x, weight, dy, eps) -> (dx, dweight); embedding_backward(ids, dy, vocab, out)
    layer_norm_backward(x, weight, dy, eps) -> (dx, dweight, dbias); column_sums(x) -> (D,) (bias grads)
    gelu_backward(x, dy, approximate, out), silu_backward(x, dy, out) -> dx (out may be dy)
    adamw_update(p, g, m, v, ...), sgd_update(p, g, buf, ...)   one optimiser step over flat buffers, in place
"""

from __future__ import annotations

import os
import threading
import weakref
from functools import partial

import numpy as np

from volvox.errors import KernelError, ShapeError
from volvox.ir.quant_blocks import K_QTYPES, QuantTensor, StackedQuantTensor



class _MissingEngine:
    """Stands in for the compiled engine when volvox was not built: importing volvox (its readers,
    tokenizers, graph tools) still works, and the first kernel call raises KernelError saying why."""

    def __init__(self, why: str):
        self.why = why

    def __getattr__(self, name: str):
        raise KernelError(self.why)


try:
    from volvox._kernels import engine
    if getattr(engine, "__file__", None) is None:  # the engine/ source folder, seen as a namespace package
        raise ImportError("no compiled volvox._kernels.engine")
except ImportError as exc:  # only without a build
    engine = _MissingEngine(f"volvox's compiled kernels are missing ({exc}); build them with "
                            "`pip install --no-build-isolation -e .` (developers) or `pip install .`")
BUILT = not isinstance(engine, _MissingEngine)  # whether the compiled kernels are here
CONV_PIXELS = 64  # output pixels per work item of an im2col conv (the engine's CONV_STEP_PIXELS)

__all__ = ["linear", "embedding", "rms_norm", "layer_norm", "gelu", "attention", "rope", "swiglu", "silu", "unary", "conv2d",
           "qconv2d",
           "quantize_i8", "dequantize_i8", "qavg_pool2d", "qsoftmax", "isa",
           "available_isas", "set_num_threads", "get_num_threads",
           "matmul_t", "weight_grad", "attention_train", "attention_backward", "cross_entropy", "cross_entropy_grad",
           "rms_norm_backward", "layer_norm_backward", "column_sums", "gelu_backward", "silu_backward",
           "adamw_update", "sgd_update",
           "embedding_backward"]

ALL_ISAS = ("generic", "avx2", "avx512", "neon", "dotprod")

# weight type codes of volvox/_kernels/vx.pxd
_QTYPE_CODE = {"q4_0": 0, "q4_1": 1, "q8_0": 2, "q4_k": 3, "q6_k": 4,
               "q5_0": 7, "q5_1": 8, "iq4_nl": 9, "q2_k": 10, "q3_k": 11, "q5_k": 12}
_F32, _F16 = 5, 6


# ----------------------------------------------------------------------------- ISA tiers
def available_isas() -> list[str]:
    """Tiers compiled into this build that this CPU can run, most portable first (none without a build)."""
    return [t for t in engine.compiled_isas() if engine.isa_supported(t)] if BUILT else []


def isa() -> str:
    """The tier every kernel currently runs on."""
    return engine.get_isa()


def _check_isa(name: str, origin: str) -> str:
    name = name.strip().lower()
    if name not in ALL_ISAS:
        raise KernelError(f"{origin}={name!r} is not an ISA tier (known: {', '.join(ALL_ISAS)})")
    if name not in engine.compiled_isas():
        raise KernelError(f"{origin}={name!r}: that tier is not built for this machine "
                          f"(built: {', '.join(engine.compiled_isas())})")
    if not engine.isa_supported(name):
        raise KernelError(f"{origin}={name!r}: this CPU cannot run that tier "
                          f"(available: {', '.join(available_isas())})")
    return name


def _set_isa_for_testing(name: str) -> None:
    """Switch every kernel to tier `name` in this process (tests compare tiers this way)."""
    engine.set_isa(_check_isa(name, "ISA"))


def _initial_isa() -> str:
    forced = os.environ.get("VOLVOX_ISA", "")
    if forced.strip():
        return _check_isa(forced, "VOLVOX_ISA")
    return available_isas()[-1]


if BUILT:
    assert engine.CONV_STEP_PIXELS == CONV_PIXELS
    engine.set_isa(_initial_isa())


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
    engine.set_num_threads(int(n))


def get_num_threads() -> int:
    return engine.get_num_threads()


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


if BUILT:
    set_num_threads(_initial_threads())


# ------------------------------------------------------------------------------- buffers
ALIGN = 64  # bytes: buffers the kernels stream start on a cache line


def address(a: np.ndarray | None) -> int:
    """The address of ``a``'s first element (0 for None): what a plan's steps point at."""
    return 0 if a is None else a.ctypes.data


def aligned_empty(n: int, dtype) -> np.ndarray:
    """An uninitialised (n,) array whose first element is ALIGN-byte aligned."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n + ALIGN // itemsize, dtype)
    skip = (-raw.ctypes.data % ALIGN) // itemsize
    return raw[skip:skip + n]


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


def _check_apart(out, op: str, **inputs) -> None:
    """KernelError when a caller's ``out`` may share memory with one of ``inputs`` (None: absent)."""
    for name, a in inputs.items():
        if a is not None and np.may_share_memory(out, a):
            raise KernelError(f"{op}: out must not overlap {name}")


def _weight_meta(w, name: str) -> tuple[int, int, int]:
    """(type code, N, K) of a weight matrix, without reading its data."""
    if isinstance(w, QuantTensor):
        return _QTYPE_CODE[w.qtype], w.shape[0], w.shape[1]
    code, _, n, k = _weight_bytes(w, name)
    return code, n, k


def _read_only(w) -> bool:
    """Whether a weight's bytes cannot change (a stacked one: its parts')."""
    if isinstance(w, StackedQuantTensor):
        return all(_read_only(p) for p in w.parts)
    return not (w.data if isinstance(w, QuantTensor) else w).flags.writeable


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
    w:   QuantTensor (N, K) of any SUPPORTED_QTYPES type, or float32 / float16 (N, K)
    out: optional float32 (M, N) (or (N,) for 1-D x), C-contiguous, not overlapping x

    Quantized weights: each activation row is quantized to 8 bits per block (q8_1-style
    for 32-blocks, q8_K-style for k-quants) and multiplied with integer dot products.
    """
    x2, vec = _f32_matrix(x, "x")
    code, n, k = _weight_meta(w, "w")
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
    if code in (_F32, _F16) and m >= SGEMM_MIN_ROWS:
        f16 = code == _F16
        nbytes = 4 * 32 * k * get_num_threads() * (2 if f16 else 1)  # (threads, K, 32) f32 panels (f16: + rows)
        engine.sgemm(_weight_bytes(w, "w")[1], k, x2, y, _scratch(nbytes)[:nbytes].view(np.float32), f16)
    else:
        nbytes = m * engine.act_row_bytes(code, k)
        il = interleaved_weights(w) if nbytes and _read_only(w) else None
        if il is not None:  # read-only quantized weights: the tier's interleaved GEMV (cached packing)
            engine.gemm_il(code, il[0], k, n, x2, y, _scratch(nbytes))
        else:
            engine.gemm(code, _weight_bytes(w, "w")[1], k, x2, y, _scratch(nbytes))
    if out is not None:
        return out
    return y[0] if vec else y


# From this many activation rows on, f32 and f16 weights go through the packed register-tiled
# GEMM (panels of 32 weight rows, 8x32 / 6x16 tiles; f16 rows widened to f32 as each panel is
# packed); fewer rows stream W row by row.
SGEMM_MIN_ROWS = 16


def _align64(n: int) -> int:
    return (n + 63) & ~63


def _quantize_activation(x, qtype: str) -> dict[str, np.ndarray]:
    """The 8-bit activation rows the kernels multiply `qtype` weights with (tests compare
    them with ggml's quantize_row_q8_0 / q8_1 / q8_K); layout in volvox/_kernels/vx.pxd.

    x: float32 (M, K). Returns qs int8 (M, K) and, for 32-block types, d and s float32
    (M, K/32); for k-quants, d float32 (M, K/256) and bsums int32 (M, K/16).
    """
    x2, _ = _f32_matrix(x, "x")
    if qtype not in _QTYPE_CODE:
        raise KernelError(f"no activation quantization for {qtype!r}")
    code, (m, k) = _QTYPE_CODE[qtype], x2.shape
    kq = qtype in K_QTYPES
    block = 256 if kq else 32
    if k % block:
        raise ShapeError(f"{qtype} activations need a multiple of {block} values, got {k}")
    rows = np.empty((m, engine.act_row_bytes(code, k)), np.uint8)  # (M, act row bytes)
    engine.quantize_act(code, x2, rows)
    out = {"qs": rows[:, :k].view(np.int8)}
    if kq:
        d0 = _align64(k)
        out["d"] = rows[:, d0:d0 + 4 * (k // 256)].copy().view(np.float32)
        b0 = d0 + _align64(4 * (k // 256))
        out["bsums"] = rows[:, b0:b0 + 4 * (k // 16)].copy().view(np.int32)
    else:
        ds = rows[:, _align64(k):_align64(k) + 8 * (k // 32)].copy().view(np.float32)  # (M, K/32 * 2)
        out["d"], out["s"] = ds[:, 0::2], ds[:, 1::2]
    return out


def embedding(table, ids, out=None) -> np.ndarray:
    """Rows `ids` of `table` as float32 (S, D).

    table: QuantTensor (V, D) or float32 / float16 (V, D); ids: int32 / int64 (S,);
    out: optional float32 (S, D). An id outside [0, V) raises KernelError (nothing is
    returned, nothing written).
    """
    code, tb, v, d = _weight_bytes(table, "table")
    if not isinstance(ids, np.ndarray):
        raise KernelError(f"ids must be a numpy array, got {type(ids).__name__}")
    if ids.dtype not in (np.int32, np.int64):
        raise KernelError(f"ids must be int32 or int64, got {ids.dtype}")
    if ids.ndim != 1:
        raise ShapeError(f"ids must be 1-D, got shape {ids.shape}")
    ids64 = np.ascontiguousarray(ids, dtype=np.longlong)
    if out is None:
        out = np.empty((ids64.shape[0], d), dtype=np.float32)  # (S, D)
    else:
        _check_out(out, (ids64.shape[0], d))
        _check_apart(out, "embedding", table=tb, ids=ids64)
    bad = engine.embedding(code, tb, d, ids64, out)
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
    engine.rms_norm(x2, weight, eps, y)
    if out is not None:
        return out
    return y[0] if vec else y


def layer_norm(x, weight, bias, eps, out=None) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * weight (+ bias) over the last axis of float32 x (M, D) or (D,);
    ``out``: optional float32 of x's shape."""
    x2, vec = _f32_matrix(x, "x")
    d = x2.shape[1]
    for name, a in (("weight", weight), ("bias", bias)):
        if a is None and name == "bias":
            continue
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != (d,):
            raise ShapeError(f"layer_norm: {name} must be float32 ({d},), got "
                             f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
    eps = float(eps)
    if not eps >= 0.0:
        raise KernelError(f"layer_norm: eps must be >= 0, got {eps}")
    if out is None:
        y = np.empty_like(x2)  # (M, D)
    else:
        _check_out(out, x.shape if vec else x2.shape)
        _check_apart(out, "layer_norm", x=x2, weight=weight, bias=bias)
        y = out.reshape(x2.shape)
    engine.layer_norm(x2, np.ascontiguousarray(weight), None if bias is None else np.ascontiguousarray(bias), eps, y)
    if out is not None:
        return out
    return y[0] if vec else y


def softcap(x, cap: float) -> np.ndarray:
    """cap * tanhf(x * (1 / cap)) for float32 x of any shape, llama.cpp's arithmetic (libm's tanhf)."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise KernelError("softcap: x must be a float32 numpy array")
    if not cap > 0:
        raise KernelError(f"softcap: cap must be > 0, got {cap}")
    y = np.ascontiguousarray(x).copy()  # (x's shape), capped in place
    engine.softcap(y.reshape(-1), y.reshape(-1), float(cap))
    return y


def gelu(x, approximate: str = "none", out=None) -> np.ndarray:
    """x * Phi(x) for float32 x of any shape: exact (``approximate="none"``, through erfc) or
    ``"tanh"``; ``out`` (x's shape, float32, C-contiguous) may be x itself."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise KernelError("gelu: x must be a float32 numpy array")
    if approximate not in ("none", "tanh"):
        raise KernelError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    flat = np.ascontiguousarray(x).reshape(-1)  # (size,)
    y = np.empty_like(x) if out is None else _check_out(out, x.shape)
    yflat = y.reshape(-1)
    engine.gelu(flat, yflat, approximate == "tanh")
    return y


def _f32_rows(a, name: str, ncols: int | None = None) -> np.ndarray:
    """A 2-D float32 C-contiguous view or copy of `a` (ShapeError unless 2-D / ncols)."""
    if not isinstance(a, np.ndarray):
        raise KernelError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise KernelError(f"{name} must be float32, got {a.dtype}")
    if a.ndim != 2 or (ncols is not None and a.shape[1] != ncols):
        want = f"(rows, {ncols})" if ncols is not None else "2-D"
        raise ShapeError(f"{name} must be {want}, got shape {a.shape}")
    return np.ascontiguousarray(a)


def attention(q, k_cache, v_cache, start: int, n_heads: int, scale: float, window: int = 0, out=None,
              causal: bool = True, softcap: float = 0.0) -> np.ndarray:
    """Causal grouped-query attention of new queries over a KV cache (or, not ``causal``, of every
    query over all the cache's rows: an encoder's self-attention, a decoder's cross-attention).

    q:        float32 (seq, n_heads * head_dim), rows at absolute positions start..start+seq-1
    k_cache:  float32 (n_kv_heads, capacity, head_dim), C-contiguous; rows 0..start+seq-1
    v_cache:  the same for values (the new rows already written, as KVCache.append does)
    window:   > 0 limits each query to the last `window` positions (sliding window); causal only
    causal:   False: every query attends to all `capacity` rows of the caches (start must be 0)
    out:      optional float32 (seq, n_heads * head_dim), not overlapping q or the caches
    softcap:  > 0 caps the scores as llama.cpp does for Gemma 2: q * scale first, then
              softcap * tanhf(q.k * (1 / softcap))
    Returns float32 (seq, n_heads * head_dim). Memory: one score row per thread (O(seq)).
    On x86 SIMD tiers the arithmetic is ggml's, bit for bit (see volvox/_kernels/vx.pxd).
    """
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(c, np.ndarray) or c.dtype != np.float32 or c.ndim != 3 or not c.flags.c_contiguous:
            raise KernelError(f"attention: {name} must be a C-contiguous float32 (n_kv_heads, capacity, head_dim) array")
    if k_cache.shape != v_cache.shape:
        raise ShapeError(f"attention: k_cache {k_cache.shape} and v_cache {v_cache.shape} differ")
    nkv, cap, hd = k_cache.shape
    if n_heads < 1 or nkv < 1 or n_heads % nkv:
        raise ShapeError(f"attention: n_heads {n_heads} must be a positive multiple of n_kv_heads {nkv}")
    q2 = _f32_rows(q, "q", n_heads * hd)
    seq = q2.shape[0]
    if causal and (start < 0 or start + seq > cap):
        raise ShapeError(f"attention: positions {start}..{start + seq - 1} are outside the cache's {cap} rows")
    if window < 0:
        raise KernelError(f"attention: window must be >= 0, got {window}")
    if not causal and (start != 0 or window != 0 or cap == 0):
        raise KernelError(f"attention: non-causal attention takes start 0, window 0 and a non-empty cache "
                          f"(got start {start}, window {window}, {cap} rows)")
    keys = 0 if causal else cap  # rows every query sees when not causal
    if out is None:
        out = np.empty((seq, n_heads * hd), np.float32)  # (seq, n_heads * head_dim)
    else:
        _check_out(out, (seq, n_heads * hd))
        _check_apart(out, "attention", q=q2, k_cache=k_cache, v_cache=v_cache)
    per = engine.attention_scratch_floats(keys or start + seq, hd, n_heads // nkv)
    scratch = np.empty(get_num_threads() * per, np.float32)  # (threads, per) score rows + lane sums
    if softcap < 0:
        raise KernelError(f"attention: softcap must be >= 0 (0: none), got {softcap}")
    engine.attention(q2, k_cache, v_cache, int(start), int(n_heads), int(window), float(scale), out, scratch, keys,
                     float(softcap))
    return out


def rope(x, positions, head_dim: int, rope_dim: int | None = None, theta: float = 10000.0,
         scale: float = 1.0, interleaved: bool = False, out=None, yarn: tuple | None = None) -> np.ndarray:
    """Rotary position embedding of x (seq, heads * head_dim) at `positions` (seq,) ints, into a
    new array or ``out`` (float32, x's shape, not overlapping x); x is never modified.

    Pairs (2i, 2i+1) when interleaved (GGUF / ggml LLaMA layout), else (i, i + rope_dim/2);
    angle pos / scale * theta^(-2i/rope_dim), computed as ggml does (float32, repeated
    multiplication, cosf / sinf), so results match llama.cpp bit for bit. ``yarn``: ggml's
    rope_yarn scaling, (freq_factors (rope_dim/2,) or None, ext_factor, (corr_lo, corr_hi),
    attn_factor): each pair's theta divided by its factor, YaRN's ramp between the interpolated
    (pos / scale ...) and kept angles over the correction dims, cos / sin times attn_factor (times
    1 + 0.1 ln(scale) where the ramp applies).
    """
    x2 = _f32_rows(x, "x")
    rd = head_dim if rope_dim is None else int(rope_dim)
    if head_dim < 1 or x2.shape[1] % head_dim or not (0 < rd <= head_dim and rd % 2 == 0):
        raise ShapeError(f"rope: x {x2.shape} needs heads of {head_dim} with an even rope_dim <= head_dim, got {rd}")
    if not isinstance(positions, np.ndarray) or positions.dtype.kind not in "iu" or positions.shape != (x2.shape[0],):
        raise ShapeError(f"rope: positions must be an integer array of shape ({x2.shape[0]},)")
    if not (theta > 0 and scale > 0):
        raise KernelError(f"rope: theta and scale must be positive, got {theta}, {scale}")
    if out is None:
        y = np.empty_like(x2)  # (seq, heads * head_dim)
    else:
        y = _check_out(out, x2.shape)
        _check_apart(out, "rope", x=x2)
    if yarn is not None:
        factors, ext_factor, (corr_lo, corr_hi), attn_factor = yarn
        if factors is not None:
            factors = np.ascontiguousarray(factors, dtype=np.float32)  # (rd/2,)
            if factors.shape != (rd // 2,):
                raise ShapeError(f"rope: freq_factors must be ({rd // 2},), got {factors.shape}")
        yarn = (factors, float(ext_factor), float(corr_lo), float(corr_hi), float(attn_factor))
    engine.rope(x2, np.ascontiguousarray(positions, dtype=np.longlong), x2.shape[1] // head_dim, head_dim,
               rd, int(bool(interleaved)), float(theta), float(np.float32(1.0) / np.float32(scale)), y, yarn)
    return y


def swiglu(x, out=None) -> np.ndarray:
    """silu(gate) * up for float32 x (rows, 2F) = [gate | up]; returns (rows, F) (``out``:
    optional float32 (rows, F), not overlapping x)."""
    x2 = _f32_rows(x, "x")
    if x2.shape[1] % 2:
        raise ShapeError(f"swiglu: x needs an even number of columns [gate | up], got {x2.shape[1]}")
    shape = (x2.shape[0], x2.shape[1] // 2)  # (rows, F)
    if out is None:
        y = np.empty(shape, np.float32)
    else:
        y = _check_out(out, shape)
        _check_apart(out, "swiglu", x=x2)
    engine.swiglu(x2, y, True)
    return y


def silu(x, out=None) -> np.ndarray:
    """x * sigmoid(x) for float32 x of any shape, with swiglu's arithmetic (silu(g) * u
    equals swiglu([g | u]) bit for bit), row by row along the last axis (a row's tail takes the
    scalar expf, as ggml's); ``out`` (float32, x's shape) may be x itself."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise KernelError("silu: x must be a float32 numpy array")
    x2 = np.ascontiguousarray(x).reshape(-1, max(x.shape[-1], 1) if x.ndim else 1)  # (rows, last axis)
    if out is None:
        y = np.empty_like(x2)  # (rows, last axis)
    else:
        _check_out(out, x.shape)
        if not _same_elements(out, x2):  # elementwise: out may be x, but nothing else it overlaps
            _check_apart(out, "silu", x=x2)
        y = out.reshape(x2.shape)
    engine.swiglu(x2, y, False)
    return y.reshape(x.shape) if out is None else out


def unary(x, fn: int, alpha: float = 0.0, beta: float = 0.0, out=None) -> np.ndarray:
    """y = fn(x) elementwise for float32 x of any shape, through the engine's unary step: ``fn`` an
    elementwise function code it computes (volvox/ops/codes.py), ``alpha``, ``beta`` its parameters;
    ``out`` (float32, x's shape) may be x itself."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise KernelError("unary: x must be a float32 numpy array")
    flat = np.ascontiguousarray(x).reshape(-1)  # (size,)
    if out is None:
        y = np.empty_like(flat)  # (size,)
    else:
        _check_out(out, x.shape)
        if not _same_elements(out, flat):  # elementwise: out may be x, but nothing else it overlaps
            _check_apart(out, "unary", x=flat)
        y = out.reshape(-1)
    try:
        engine.unary(fn, flat, y, alpha, beta)
    except ValueError as exc:
        raise KernelError(str(exc)) from None
    return y.reshape(x.shape) if out is None else out


def _same_elements(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two C-contiguous arrays of one size are the same bytes (an elementwise kernel may then run in place)."""
    return a.ctypes.data == b.ctypes.data and a.size == b.size


# ---------------------------------------------------------------------------- convolution
_ACT_CODE = {"none": 0, "relu": 1, "relu6": 2}


def _conv_geometry(x, w, strides, dilations, pads, name: str) -> tuple:
    """(oh, ow, kh, kw, sh, sw, dh, dw, pad_top, pad_left) of an NHWC conv; ShapeError if it cannot run."""
    (sh, sw), (dh, dw) = (tuple(int(v) for v in strides), tuple(int(v) for v in dilations))
    pt, pl, pb, pr = (int(v) for v in pads)
    if min(sh, sw, dh, dw) < 1 or min(pt, pl, pb, pr) < 0:
        raise ShapeError(f"{name}: strides/dilations must be positive and pads >= 0, got "
                         f"{strides}, {dilations}, {pads}")
    _, h, wd, _ = x.shape
    _, kh, kw, _ = w.shape
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if oh < 1 or ow < 1 or kh < 1 or kw < 1:
        raise ShapeError(f"{name}: kernel {kh}x{kw} does not fit input {x.shape} with pads {pads}")
    return (oh, ow, kh, kw, sh, sw, dh, dw, pt, pl)


def _conv_operands(x, w, bias, groups: int, dtype, bias_dtype, name: str) -> tuple:
    """C-contiguous x (N, H, W, C), w (cout, kh, kw, C / groups), bias (or None), and whether the
    conv is depthwise; KernelError / ShapeError for anything the kernels do not take."""
    for arg, a, dt in (("x", x, dtype), ("weight", w, dtype)):
        if not isinstance(a, np.ndarray) or a.dtype != dt:
            raise KernelError(f"{name}: {arg} must be a {np.dtype(dt).name} numpy array")
        if a.ndim != 4:
            raise ShapeError(f"{name}: {arg} must be 4-D (NHWC / OHWI), got shape {a.shape}")
    c, (cout, _, _, cin_g) = x.shape[3], w.shape
    depthwise = groups == c == cout and cin_g == 1 and groups > 1
    if not (groups == 1 and cin_g == c) and not depthwise:
        raise ShapeError(f"{name}: x {x.shape} and weight {w.shape} with groups={groups}: the kernels "
                         "take dense (groups=1) or depthwise multiplier-1 convs")
    if bias is not None:
        if not isinstance(bias, np.ndarray) or bias.dtype != bias_dtype or bias.shape != (cout,):
            raise ShapeError(f"{name}: bias must be {np.dtype(bias_dtype).name}[{cout}], got "
                             f"{getattr(bias, 'dtype', type(bias).__name__)} {getattr(bias, 'shape', '')}")
        bias = np.ascontiguousarray(bias)
    return np.ascontiguousarray(x), np.ascontiguousarray(w), bias, depthwise


# Packed forms of read-only weights (which cannot change), kept while the weight lives:
# (id(weight), kind) -> (weakref to the weight, packed arrays).
_PACKED: dict[tuple[int, str], tuple] = {}


def _packed(w: np.ndarray, kind: str, make):
    """make(), cached for read-only `w` (a model's constant weights repack nothing per run)."""
    if w.flags.writeable:
        return make()
    key = (id(w), kind)
    hit = _PACKED.get(key)
    if hit is not None and hit[0]() is w:
        return hit[1]
    val = make()
    _PACKED[key] = (weakref.ref(w, partial(_forget_packed, key)), val)
    return val


def _forget_packed(key: tuple[int, str], ref: weakref.ref, cache: dict = _PACKED) -> None:
    """A cached weight died: drop its packed form (unless a newer weight took its id and key). The
    cache is bound at definition, so a callback during interpreter shutdown still finds it."""
    hit = cache.get(key)
    if hit is not None and hit[0] is ref:
        del cache[key]


def _pack_f32(w2: np.ndarray) -> np.ndarray:
    packed = np.empty(engine.sgemm_packed_floats(w2.shape[1], w2.shape[0]), np.float32)  # (n/32, K, 32) panels
    engine.sgemm_pack(w2, packed)
    return packed


def _pack_i8(w2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    packed = np.empty(engine.qgemm_packed_bytes(w2.shape[1], w2.shape[0]), np.int8)  # (n/16, K4/4, 16, 4) panels
    wsum = np.empty(w2.shape[0], np.int32)  # (n,) row sums
    engine.qgemm_pack(w2, packed, wsum)
    return packed, wsum


def conv2d(x, w, bias=None, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), groups: int = 1,
           activation: str = "none", out=None) -> np.ndarray:
    """NHWC float32 convolution with fused bias and activation ("none", "relu", "relu6").

    x: float32 (N, H, W, C); w: float32 (cout, kh, kw, C / groups) (OHWI); pads are
    [top, left, bottom, right]. Dense convs (groups=1) run the packed f32 GEMM over row bands
    read from a padded copy of their input rows (conv_band), im2col rows, or (1x1 stride-1
    unpadded) the input rows; depthwise multiplier-1 convs (groups = C =
    cout) a direct kernel. Read-only weights are packed once and the packing cached while
    they live (a writeable weight may change, so it is repacked per call). Returns float32
    (N, OH, OW, cout), in ``out`` when given (not overlapping x, w or bias).
    """
    x, w, bias, depthwise = _conv_operands(x, w, bias, int(groups), np.float32, np.float32, "conv2d")
    if activation not in _ACT_CODE:
        raise KernelError(f"conv2d: activation must be one of {sorted(_ACT_CODE)}, got {activation!r}")
    geo = _conv_geometry(x, w, strides, dilations, pads, "conv2d")
    n, _, _, c = x.shape
    cout, kh, kw, cin_g = w.shape
    if out is None:
        y = np.empty((n, geo[0], geo[1], cout), np.float32)  # (N, OH, OW, cout)
    else:
        y = _check_out(out, (n, geo[0], geo[1], cout))
        _check_apart(out, "conv2d", x=x, weight=w, bias=bias)
    if depthwise:
        engine.dwconv_f32(x, conv_weights(w, True), geo, bias, _ACT_CODE[activation], y)
        return y
    kk = kh * kw * c
    packed = conv_weights(w, False)
    direct = kh == kw == 1 and geo[4:6] == (1, 1) and geo[8:] == (0, 0) and geo[:2] == x.shape[1:3]
    band = 0 if direct else conv_band(geo)
    per = conv_band_floats(x.shape, geo, band) if band else 0 if direct else CONV_PIXELS * kk
    scratch = np.empty(get_num_threads() * per, np.float32)  # (threads, per): a band's padded input, or im2col rows
    engine.conv2d_f32(x, packed, cout, geo, bias, _ACT_CODE[activation], direct, band, per, y, scratch)
    return y


def conv_band(geo: tuple) -> int:
    """Output rows per work item of a dense conv (geo: _conv_geometry's) that runs by row bands
    (the GEMM reading a padded copy of the band's input rows in place), at least CONV_PIXELS
    pixels; 0 for one that runs as im2col blocks: column dilation (a kernel row is not one run),
    a stride wider than the kernel (most of the copied columns unread), or a 1x1 kernel."""
    oh, ow, kh, kw, sh, sw, dh, dw = geo[:8]
    if dw != 1 or sw > kw or kh * kw == 1 or ow == 0:
        return 0
    return max(1, min(oh, -(-CONV_PIXELS // ow)))


def conv_band_floats(x_shape: tuple, geo: tuple, band: int) -> int:
    """Floats of a band's padded input rows (band output rows of a conv_band conv over x_shape)."""
    oh, ow, kh, kw, sh, sw, dh, dw = geo[:8]
    return ((band - 1) * sh + (kh - 1) * dh + 1) * ((ow - 1) * sw + kw) * x_shape[3]


DW_GRAD_BAND_ROWS = 8  # output rows a depthwise dW band sums in float32 before the bands are added


def _f32_nhwc(a, name: str, op: str) -> np.ndarray:
    """``a`` as a C-contiguous float32 4-D array; KernelError / ShapeError otherwise."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise KernelError(f"{op}: {name} must be a float32 numpy array")
    if a.ndim != 4:
        raise ShapeError(f"{op}: {name} must be 4-D, got shape {a.shape}")
    return np.ascontiguousarray(a)


def _window_grad_operands(x, dy, op: str) -> tuple[np.ndarray, np.ndarray]:
    """A window op's input x and output gradient dy (N, *, *, C) as _f32_nhwc arrays of one batch and channel count."""
    x, dy = _f32_nhwc(x, "x", op), _f32_nhwc(dy, "dy", op)
    if x.shape[3] != dy.shape[3] or x.shape[0] != dy.shape[0]:
        raise ShapeError(f"{op}: x {x.shape} and dy {dy.shape} differ in batch or channels")
    return x, dy


def depthwise_conv2d_grad_input(dy, w, input_size, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0)) -> np.ndarray:
    """dL/dx (N, H, W, C) of a depthwise multiplier-1 conv: dy float32 (N, OH, OW, C), w float32 (C, kh, kw, 1),
    ``input_size`` the forward input's (H, W)."""
    h, wd = (int(v) for v in input_size)
    if not isinstance(w, np.ndarray) or w.dtype != np.float32 or w.ndim != 4 or w.shape[3] != 1:
        raise KernelError("depthwise_conv2d_grad_input: weight must be float32 (C, kh, kw, 1)")
    dy = _f32_nhwc(dy, "dy", "depthwise_conv2d_grad_input")
    n, _, _, c = dy.shape
    if w.shape[0] != c:
        raise ShapeError(f"depthwise_conv2d_grad_input: weight {w.shape} for dy with {c} channels")
    geo = _conv_geometry(np.empty((n, h, wd, c), np.uint8), w, strides, dilations, pads, "depthwise_conv2d_grad_input")
    if geo[:2] != dy.shape[1:3]:
        raise ShapeError(f"depthwise_conv2d_grad_input: dy {dy.shape} is not this conv's output (OH, OW) = {geo[:2]}")
    dx = np.empty((n, h, wd, c), np.float32)  # (N, H, W, C)
    engine.dwconv_grad_input_f32(dy, np.ascontiguousarray(w.reshape(c, -1).T), geo, dx)
    return dx


def depthwise_conv2d_grad_weight(x, dy, kernel, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0)) -> np.ndarray:
    """dL/dW (C, kh, kw, 1) of a depthwise multiplier-1 conv: x float32 (N, H, W, C), dy float32
    (N, OH, OW, C), ``kernel`` (kh, kw). Bands of DW_GRAD_BAND_ROWS output rows are summed on their own
    (OpenMP over bands), then added in float64: short float32 chains, and the same bits on any thread count."""
    x, dy = _window_grad_operands(x, dy, "depthwise_conv2d_grad_weight")
    n, _, _, c = x.shape
    kh, kw = (int(v) for v in kernel)
    geo = _conv_geometry(x, np.empty((c, kh, kw, 1), np.uint8), strides, dilations, pads, "depthwise_conv2d_grad_weight")
    if geo[:2] != dy.shape[1:3]:
        raise ShapeError(f"depthwise_conv2d_grad_weight: dy {dy.shape} is not this conv's output (OH, OW) = {geo[:2]}")
    bands = -(-n * geo[0] // DW_GRAD_BAND_ROWS)
    partials = np.empty((bands, kh * kw * c), np.float32)  # (bands, kh*kw * C)
    engine.dwconv_grad_weight_f32(x, dy, geo, partials)
    dw = partials.sum(axis=0, dtype=np.float64).astype(np.float32)  # (kh*kw * C,)
    return np.ascontiguousarray(dw.reshape(kh, kw, c).transpose(2, 0, 1)[..., None])


def max_pool2d_grad(x, dy, kernel, strides=(1, 1), pads=(0, 0, 0, 0)) -> np.ndarray:
    """dL/dx (N, H, W, C) of max pooling: x float32 (N, H, W, C), dy float32 (N, OH, OW, C); each window's dy
    goes to its first maximum in row-major window order (torch's choice among ties)."""
    x, dy = _window_grad_operands(x, dy, "max_pool2d_grad")
    n, _, _, c = x.shape
    kh, kw = (int(v) for v in kernel)
    geo = _conv_geometry(x, np.empty((c, kh, kw, 1), np.uint8), strides, (1, 1), pads, "max_pool2d_grad")
    if geo[:2] != dy.shape[1:3]:
        raise ShapeError(f"max_pool2d_grad: dy {dy.shape} is not this pool's output (OH, OW) = {geo[:2]}")
    dx = np.empty(x.shape, np.float32)                                            # (N, H, W, C)
    engine.max_pool_grad_f32(x, dy, geo, dx, np.empty((n, c), np.float32), np.empty((n, c), np.int64))
    return dx


def conv_weights(w: np.ndarray, depthwise: bool):
    """What the conv kernels read for OHWI weight ``w`` (cached while a read-only ``w`` lives):
    depthwise (kh*kw, C) taps (int16 for int8 w); dense sgemm panels (float32 w) or
    (qgemm panels, row sums) (int8 w)."""
    cout, kh, kw, cin = w.shape
    if w.dtype == np.int8:
        if depthwise:
            return _packed(w, "qdw", lambda: np.ascontiguousarray(w.reshape(cout, kh * kw).T, dtype=np.int16))
        return _packed(w, "i8", lambda: _pack_i8(w.reshape(cout, kh * kw * cin)))
    if depthwise:
        return _packed(w, "dw", lambda: np.ascontiguousarray(w.reshape(cout, kh * kw).T))  # (kh*kw, C)
    return _packed(w, "f32", lambda: _pack_f32(w.reshape(cout, kh * kw * cin)))


def linear_weights(w: np.ndarray) -> np.ndarray:
    """sgemm panels of float32 (N, K) ``w``, as the packed GEMM of ``linear`` reads them (cached
    while a read-only ``w`` lives)."""
    return _packed(w, "f32", lambda: _pack_f32(np.ascontiguousarray(w)))


def interleaved_weights(w) -> tuple[np.ndarray, int] | None:
    """(packed bytes, bytes per group) of quantized weight ``w`` interleaved for this tier's GEMV
    (vx.pxd: ``il_rows`` rows per group), or None where the tier reads its rows as stored. Packed on
    first use and cached while a read-only ``w`` lives (``linear`` and the decode plans share it). A
    StackedQuantTensor's parts are packed in place, the stacked rows never made."""
    if not isinstance(w, QuantTensor):
        return None
    code, n, k = _weight_meta(w, "w")
    rows, group = engine.il_rows(code), engine.il_group_bytes(code, k)
    if not rows:
        return None
    parts = w.parts if isinstance(w, StackedQuantTensor) else [w]
    if any(p.shape[0] % rows for p in parts[:-1]):
        parts = [QuantTensor(w.data, w.qtype, w.shape)]  # a part ends inside a group: pack the stacked rows

    def pack():
        packed = aligned_empty(-(-n // rows) * group, np.uint8)  # (groups, blocks, block of `rows` rows)
        at = 0
        for p in parts:
            size = -(-p.shape[0] // rows) * group
            engine.il_pack(code, _weight_bytes(p, "w")[1], k, packed[at:at + size])
            at += size
        return packed, group

    if not _read_only(w):
        return pack()
    if isinstance(w, StackedQuantTensor):  # cached on the stack itself (it has no array of its own)
        if w.interleaved is None:
            object.__setattr__(w, "interleaved", pack())
        return w.interleaved
    return _packed(w.data, "interleaved", pack)


def requant_args(multiplier, shift, n: int, input_zero_point: int, output_zero_point: int, act_min: int,
                 act_max: int) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(multiplier (n,), shift (n,), (zp_in, zp_out, act_min, act_max)) checked for the int8 kernels."""
    mult, sh = _i32_channels(multiplier, n, "multiplier"), _i32_channels(shift, n, "shift")
    zps = tuple(int(v) for v in (input_zero_point, output_zero_point, act_min, act_max))
    if not (-128 <= zps[0] <= 127 and -128 <= zps[1] <= 127 and -128 <= zps[2] <= zps[3] <= 127):
        raise KernelError(f"qconv2d: zero points and the clamp range must be int8 values, got "
                          f"zp_in={zps[0]} zp_out={zps[1]} act=[{zps[2]}, {zps[3]}]")
    return mult, sh, zps


def _i32_channels(a, n: int, name: str) -> np.ndarray:
    """int32 (n,) C-contiguous from an int32 (n,) or (1,) array (broadcast)."""
    if not isinstance(a, np.ndarray) or a.dtype != np.int32 or a.shape not in ((n,), (1,)):
        raise ShapeError(f"qconv2d: {name} must be int32[{n}] (or [1]), got "
                         f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
    return np.ascontiguousarray(np.broadcast_to(a, (n,)))


def qconv2d(x, w, bias, multiplier, shift, input_zero_point: int, output_zero_point: int,
            act_min: int = -128, act_max: int = 127, strides=(1, 1), dilations=(1, 1),
            pads=(0, 0, 0, 0), groups: int = 1) -> np.ndarray:
    """NHWC int8 convolution, bit-exact to TFLite's W8A8 conv / depthwise conv.

    x: int8 (N, H, W, C); w: int8 (cout, kh, kw, C / groups); bias: int32 (cout,) or None;
    multiplier, shift: int32 per output channel ((cout,) or (1,)), TFLite's
    QuantizeMultiplier pairs. y = clamp(MultiplyByQuantizedMultiplier(sum (x - zp_in) * w
    + bias) + zp_out, act_min, act_max), with int32 accumulation. Dense (groups=1) or
    depthwise multiplier-1 convs; read-only weights are packed once, as in conv2d.
    Returns int8 (N, OH, OW, cout).
    """
    x, w, bias, depthwise = _conv_operands(x, w, bias, int(groups), np.int8, np.int32, "qconv2d")
    geo = _conv_geometry(x, w, strides, dilations, pads, "qconv2d")
    n, _, _, c = x.shape
    cout, kh, kw, _ = w.shape
    mult, sh, zps = requant_args(multiplier, shift, cout, input_zero_point, output_zero_point, act_min, act_max)
    y = np.empty((n, geo[0], geo[1], cout), np.int8)  # (N, OH, OW, cout)
    if depthwise:
        engine.qdwconv(x, conv_weights(w, True), geo, bias, mult, sh, zps, y)
        return y
    kk = kh * kw * c
    packed, wsum = conv_weights(w, False)
    bias, wsum = fold_zero_point(bias, wsum, zps[0])
    scratch = np.empty(get_num_threads() * CONV_PIXELS * ((kk + 3) // 4 * 4), np.uint8)  # (threads, CONV_PIXELS, K4)
    engine.qconv2d(x, packed, wsum, cout, geo, bias, mult, sh, zps, y, scratch)
    return y


def fold_zero_point(bias, wsum: np.ndarray, zp_in: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(bias, row sums) for the int8 GEMM: its input zero point correction, bias - (zp_in + 128) *
    wsum, folded into the bias when every channel fits int32 (then the requantization runs in
    int32 lanes, and the row sums are None), else the bias and row sums unchanged."""
    folded = (0 if bias is None else bias.astype(np.int64)) - (zp_in + 128) * wsum.astype(np.int64)  # (cout,)
    if folded.min() < np.iinfo(np.int32).min or folded.max() > np.iinfo(np.int32).max:
        return bias, wsum
    return folded.astype(np.int32), None


# ------------------------------------------------------------------------ small int8 kernels
def _c_array(a, dtype, ndim: int, name: str) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != ndim:
        raise KernelError(f"{name} must be a {ndim}-D {np.dtype(dtype).name} numpy array, got "
                          f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
    return np.ascontiguousarray(a)


def quantize_i8(x, scale: float, zero_point: int) -> np.ndarray:
    """int8 clamp(round_half_away(x / scale) + zero_point) of float32 ``x`` (any shape), TFLite's Quantize."""
    x = _c_array(x, np.float32, np.ndim(x), "quantize: x")
    if not (scale > 0 and -128 <= zero_point <= 127):
        raise KernelError(f"quantize: scale must be positive and the zero point an int8, got {scale}, {zero_point}")
    y = np.empty(x.shape, np.int8)  # x's shape
    engine.quantize_i8(x.reshape(-1), float(scale), int(zero_point), y.reshape(-1))
    return y


def dequantize_i8(x, scale: float, zero_point: int) -> np.ndarray:
    """float32 scale * (x - zero_point) of int8 ``x`` (any shape)."""
    x = _c_array(x, np.int8, np.ndim(x), "dequantize: x")
    y = np.empty(x.shape, np.float32)  # x's shape
    engine.dequantize_i8(x.reshape(-1), float(scale), int(zero_point), y.reshape(-1))
    return y


def qavg_pool2d(x, kernel, strides, pads, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 NHWC average pool over the in-image taps (rounding half away from zero), TFLite's
    AveragePool; pads [top, left, bottom, right] smaller than the kernel."""
    x = _c_array(x, np.int8, 4, "qavg_pool2d: x")
    kh, kw = (int(k) for k in kernel)
    sh, sw = (int(v) for v in strides)
    pt, pl, pb, pr = (int(v) for v in pads)
    _, h, w, c = x.shape
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    if min(kh, kw, sh, sw) < 1 or not (0 <= min(pt, pb) and max(pt, pb) < kh and 0 <= min(pl, pr)
                                       and max(pl, pr) < kw) or oh < 1 or ow < 1:
        raise ShapeError(f"qavg_pool2d: window {kh}x{kw} stride {sh}x{sw} pads {pads} does not fit {x.shape}")
    y = np.empty((x.shape[0], oh, ow, c), np.int8)  # (N, OH, OW, C)
    engine.qavg_pool2d(x, (oh, ow, kh, kw, sh, sw, pt, pl), int(act_min), int(act_max), y)
    return y


def qsoftmax(x, table, output_scale: float, output_zero_point: int) -> np.ndarray:
    """TFLite's int8 softmax over the last axis of ``x`` with ``table`` (256,) float32 of
    exp(-input_scale * beta * d) for d = max - x."""
    x = _c_array(x, np.int8, np.ndim(x), "qsoftmax: x")
    table = _c_array(table, np.float32, 1, "qsoftmax: table")
    if table.shape != (256,) or x.ndim == 0:
        raise ShapeError(f"qsoftmax: table must be (256,) and x at least 1-D, got {table.shape}, {x.shape}")
    y = np.empty(x.shape, np.int8)  # x's shape
    if x.size:
        engine.qsoftmax(x.reshape(-1, x.shape[-1]), table, float(output_scale), int(output_zero_point),
                       y.reshape(-1, x.shape[-1]))
    return y


# ---------------------------------------------------------------------------- state-space models
def _ssm_state(state, shape: tuple, op: str) -> np.ndarray:
    """A scan's or conv's state: the caller's (float32, ``shape``, C-contiguous, written in place), or
    zeros when it keeps none."""
    if state is None:
        return np.zeros(shape, np.float32)
    return _check_out(state, shape, f"{op}: state")


def causal_conv1d(x, weight, bias, state) -> np.ndarray:
    """Depthwise causal conv over time of float32 x (seq, C) with weight (C, K) and optional bias (C,):
    y[t, c] = sum_k weight[c, k] window[t + k, c] + bias[c], the window being the K-1 rows of
    ``state`` (K-1, C) (zeros when None) then x; ``state`` then holds the window's last K-1 rows."""
    x = _f32_rows(x, "causal_conv1d: x")
    seq, channels = x.shape
    weight = _f32_rows(weight, "causal_conv1d: weight")
    if weight.shape[0] != channels or weight.shape[1] < 1:
        raise ShapeError(f"causal_conv1d: weight must be ({channels}, kernel >= 1), got {weight.shape}")
    if bias is not None:
        bias = _c_array(bias, np.float32, 1, "causal_conv1d: bias")
        if bias.shape != (channels,):
            raise ShapeError(f"causal_conv1d: bias must be ({channels},), got {bias.shape}")
    state = _ssm_state(state, (weight.shape[1] - 1, channels), "causal_conv1d")
    y = np.empty((seq, channels), np.float32)  # (seq, C)
    _check_apart(state, "causal_conv1d (state)", x=x, weight=weight, bias=bias)
    engine.causal_conv1d(x, weight, bias, state, y)
    return y


def selective_scan(x, dt, A, B, C, D, z, state) -> np.ndarray:
    """Mamba's selective scan, float32: x, dt, z (seq, d_inner) (z optional), A (d_inner, N), B, C (seq, N),
    D (d_inner,), state (d_inner, N) or None (zeros, not kept). delta = softplus(dt);
    h = exp(delta A) h + delta x B; y = h . C + D x, times silu(z); returns y (seq, d_inner)."""
    x = _f32_rows(x, "selective_scan: x")
    seq, d_inner = x.shape
    dt = _f32_rows(dt, "selective_scan: dt", d_inner)
    A = _f32_rows(A, "selective_scan: A")
    n = A.shape[1]
    B, C = _f32_rows(B, "selective_scan: B", n), _f32_rows(C, "selective_scan: C", n)
    D = _c_array(D, np.float32, 1, "selective_scan: D")
    if z is not None:
        z = _f32_rows(z, "selective_scan: z", d_inner)
    if A.shape[0] != d_inner or D.shape != (d_inner,) or any(a.shape[0] != seq for a in (dt, B, C) + ((z,) if z is not None else ())):
        raise ShapeError(f"selective_scan: shapes disagree: x {x.shape}, dt {dt.shape}, A {A.shape}, B {B.shape}, "
                         f"C {C.shape}, D {D.shape}")
    state = _ssm_state(state, (d_inner, n), "selective_scan")
    y = np.empty((seq, d_inner), np.float32)  # (seq, d_inner)
    engine.selective_scan(x, dt, A, B, C, D, z, state, y)
    return y


def ssd_scan(x, dt, dt_bias, A, B, C, D, n_heads: int, n_groups: int, state) -> np.ndarray:
    """Mamba-2's SSD scan, float32: x (seq, n_heads * head_dim), dt (seq, n_heads), dt_bias, A, D
    (n_heads,), B, C (seq, n_groups * N), state (n_heads, head_dim, N) or None (zeros, not kept).
    Head h reads group h // (n_heads / n_groups); returns y (seq, n_heads * head_dim)."""
    x = _f32_rows(x, "ssd_scan: x")
    seq, width = x.shape
    if n_heads <= 0 or n_groups <= 0 or width % n_heads or n_heads % n_groups:
        raise ShapeError(f"ssd_scan: {n_heads} heads in {n_groups} groups do not divide x {x.shape}")
    dt = _f32_rows(dt, "ssd_scan: dt", n_heads)
    B = _f32_rows(B, "ssd_scan: B")
    if B.shape[1] % n_groups:
        raise ShapeError(f"ssd_scan: B {B.shape} is not {n_groups} groups")
    n = B.shape[1] // n_groups
    C = _f32_rows(C, "ssd_scan: C", B.shape[1])
    vectors = [_c_array(v, np.float32, 1, f"ssd_scan: {k}") for k, v in (("dt_bias", dt_bias), ("A", A), ("D", D))]
    if any(v.shape != (n_heads,) for v in vectors) or any(a.shape[0] != seq for a in (dt, B, C)):
        raise ShapeError(f"ssd_scan: shapes disagree: x {x.shape}, dt {dt.shape}, B {B.shape}, C {C.shape}")
    state = _ssm_state(state, (n_heads, width // n_heads, n), "ssd_scan")
    y = np.empty((seq, width), np.float32)  # (seq, n_heads * head_dim)
    engine.ssd_scan(x, dt, *vectors[:2], B, C, vectors[2], n_groups, state, y)
    return y


# ------------------------------------------------------------------------------- training
# The backward kernels of the LLM path (kernels/backward.pxi, engine/backward.pxi). Every result is
# the same whatever the thread count: no two work items write one element.
def matmul_t(dy, w, out=None) -> np.ndarray:
    """dx = dy @ w: the gradient of ``linear(x, w)``'s input, on ``w`` as inference holds it.

    dy:  float32 (M, N)
    w:   QuantTensor (N, K) of any SUPPORTED_QTYPES type, or float32 / float16 (N, K); a read-only
         quantized ``w`` is read in the tier's interleaved layout (``linear``'s cached packing)
    out: optional float32 (M, K), C-contiguous, not overlapping dy
    W is never widened: each work item dequantizes up to 128 input columns (one strip of 256 for the
    k-quants) block by block, 256 of W's rows at a time, into per-thread scratch.
    """
    dy2 = _f32_rows(dy, "matmul_t: dy")
    code, n, k = _weight_meta(w, "w")
    m = dy2.shape[0]
    if dy2.shape[1] != n:
        raise ShapeError(f"matmul_t: dy has {dy2.shape[1]} columns but w is {n}x{k}")
    if out is None:
        out = np.empty((m, k), np.float32)  # (M, K)
    else:
        _check_out(out, (m, k))
        _check_apart(out, "matmul_t", dy=dy2)
    il = interleaved_weights(w) if code not in (_F32, _F16) and _read_only(w) else None
    if il is not None:
        data, row_bytes, group_bytes, rows = il[0], 0, il[1], engine.il_rows(code)
    else:
        wb = _weight_bytes(w, "w")[1]
        data, row_bytes, group_bytes, rows = wb.reshape(-1), wb.shape[1], 0, 0
    engine.matmul_t(code, data, row_bytes, group_bytes, rows, k, dy2, out, _matmul_t_panels(code, n))
    return out


def _matmul_t_panels(code: int, n: int) -> np.ndarray:
    """engine.matmul_t's per-thread scratch for a weight of type ``code`` with ``n`` rows."""
    per = max(engine.matmul_t_panel_floats(code, n), 1)
    return np.empty(get_num_threads() * per, np.float32)  # (threads, rows, strip) dequantized W


def weight_grad(dy, x) -> np.ndarray:
    """dW (N, K) = dy.T @ x: the gradient of an f32 ``linear(x, W)``'s weight, dy (M, N), x (M, K)
    float32, through matmul_t's f32 path with x as its "weight" and dy read transposed where it lies:
    nothing is copied. When x has fewer than 128 columns and fewer than dy (a LoRA factor's r), dW.T =
    x.T @ dy is formed instead, so the work still splits over the wider operand, and transposed back."""
    dy2, x2 = _f32_rows(dy, "weight_grad: dy"), _f32_rows(x, "weight_grad: x")
    if dy2.shape[0] != x2.shape[0]:
        raise ShapeError(f"weight_grad: dy {dy2.shape} and x {x2.shape} have different rows")
    if dy2.shape[0] == 0:
        return np.zeros((dy2.shape[1], x2.shape[1]), np.float32)
    if x2.shape[1] >= min(dy2.shape[1], 128):
        return _transposed_product(dy2, x2)                                    # (N, M) @ (M, K)
    return np.ascontiguousarray(_transposed_product(x2, dy2).T)                 # ((K, M) @ (M, N)).T


def _transposed_product(a, b) -> np.ndarray:
    """a.T @ b (P, Q) for f32 a (M, P), b (M, Q), C-contiguous: matmul_t's f32 path reading a transposed."""
    out = np.empty((a.shape[1], b.shape[1]), np.float32)  # (P, Q)
    engine.matmul_t(_F32, b.reshape(-1).view(np.uint8), 4 * b.shape[1], 0, 0, b.shape[1], a, out,
                    _matmul_t_panels(_F32, b.shape[0]), True)
    return out


def _attention_operands(q, k, v, n_heads: int, n_kv_heads: int, op: str) -> tuple:
    """(q, k, v, head_dim) checked for causal GQA self-attention over one sequence."""
    if n_heads < 1 or n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ShapeError(f"{op}: n_heads {n_heads} must be a positive multiple of n_kv_heads {n_kv_heads}")
    q2 = _f32_rows(q, f"{op}: q")
    if q2.shape[1] % n_heads:
        raise ShapeError(f"{op}: q {q2.shape} is not {n_heads} heads")
    hd = q2.shape[1] // n_heads
    k2, v2 = (_f32_rows(a, f"{op}: {name}", n_kv_heads * hd) for name, a in (("k", k), ("v", v)))
    if not q2.shape[0] == k2.shape[0] == v2.shape[0]:
        raise ShapeError(f"{op}: q, k, v have {q2.shape[0]}, {k2.shape[0]}, {v2.shape[0]} rows")
    return q2, k2, v2, hd


def attention_train(q, k, v, n_heads: int, n_kv_heads: int, scale: float, window: int = 0) -> tuple:
    """Causal grouped-query self-attention of one whole sequence, as a training forward keeps it.

    q (seq, n_heads * head_dim), k, v (seq, n_kv_heads * head_dim) float32; row i sees keys j <= i
    (and j > i - window when window > 0). Returns (out (seq, n_heads * head_dim), lse (n_heads, seq)
    float32), lse being each row's softmax logsumexp (what attention_backward recomputes from).
    Flash-attention's forward per (head, block of 32 queries): scores of 32 keys at a time, a running
    max and sum per row; nothing of size (seq, seq) is held.
    """
    q2, k2, v2, hd = _attention_operands(q, k, v, n_heads, n_kv_heads, "attention_train")
    if window < 0:
        raise KernelError(f"attention_train: window must be >= 0, got {window}")
    seq = q2.shape[0]
    out = np.empty_like(q2)  # (seq, n_heads * head_dim)
    lse = np.empty((n_heads, seq), np.float32)  # (n_heads, seq)
    scratch = np.empty(get_num_threads() * engine.attention_forward_scratch_floats(hd), np.float32)  # (threads, per)
    engine.attention_train_forward(q2, k2, v2, n_heads, n_kv_heads, float(scale), int(window), out, lse, scratch)
    return out, lse


def attention_backward(q, k, v, out, lse, dout, n_heads: int, n_kv_heads: int, scale: float,
                       window: int = 0) -> tuple:
    """(dq, dk, dv) of attention_train given dout = dL/dout and its forward's out and lse, float32.

    One sequence (q, out, dout (seq, n_heads * head_dim), k, v (seq, n_kv_heads * head_dim), lse
    (n_heads, seq)) or a batch of them (each with a leading batch axis). Flash-attention-2's backward
    in one pass per (sequence, kv head): per block of 32 queries x 32 keys the probabilities are
    recomputed once from lse and dv, dk, dq accumulated from them; nothing of size (seq, seq) is held.
    """
    batched = isinstance(q, np.ndarray) and q.ndim == 3
    seqs = (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("dout", dout))
    if batched:
        for name, a in seqs:
            if not isinstance(a, np.ndarray) or a.ndim != 3 or a.shape[0] != q.shape[0]:
                raise ShapeError(f"attention_backward: {name} must be 3-D with q's batch {q.shape[0]}, "
                                 f"got {getattr(a, 'shape', type(a).__name__)}")
        rows = [a.reshape(-1, a.shape[-1]) for _, a in seqs]
    else:
        rows = [a for _, a in seqs]
    q2, k2, v2, hd = _attention_operands(rows[0], rows[1], rows[2], n_heads, n_kv_heads, "attention_backward")
    out2 = _f32_rows(rows[3], "attention_backward: out", q2.shape[1])
    lse2 = _f32_rows(rows[4], "attention_backward: lse")
    dout2 = _f32_rows(rows[5], "attention_backward: dout", q2.shape[1])
    batch = q.shape[0] if batched else 1
    seq = q2.shape[0] // batch if batch else 0
    if out2.shape[0] != q2.shape[0] or dout2.shape[0] != q2.shape[0] or lse2.shape != (batch * n_heads, seq):
        raise ShapeError(f"attention_backward: out {out2.shape}, dout {dout2.shape}, lse {lse2.shape} "
                         f"do not match q {q2.shape} and {n_heads} heads")
    if window < 0:
        raise KernelError(f"attention_backward: window must be >= 0, got {window}")
    q3, k3, v3, out3, dout3 = (a.reshape(batch, seq, a.shape[1]) for a in (q2, k2, v2, out2, dout2))
    dq, dk, dv = np.empty_like(q3), np.empty_like(k3), np.empty_like(v3)  # q's, k's, v's (batch, seq, width)
    delta = np.empty((batch, n_heads, seq), np.float32)  # (batch, n_heads, seq) rowwise dout . out
    scratch = np.empty(get_num_threads() * engine.attention_backward_scratch_floats(hd), np.float32)  # (threads, per)
    engine.attention_backward(q3, k3, v3, out3, dout3, lse2.reshape(batch, n_heads, seq), n_heads, n_kv_heads,
                              float(scale), int(window), dq, dk, dv, delta, scratch)
    if not batched:
        return dq[0], dk[0], dv[0]
    return dq, dk, dv


def cross_entropy(logits, labels, ignore_index: int = -100, grad: bool = True, in_place: bool = False) -> tuple:
    """Mean cross-entropy of float32 logits (rows, V) against integer labels (rows,), the softmax fused.

    Rows whose label is ``ignore_index`` count for nothing; the mean is over the others (0.0, and a
    zero gradient, when every row is ignored). Returns (loss float, dlogits (rows, V) or None, lse
    (rows,) float32, every row's): one pass per row for the logsumexp, one for the gradient
    (softmax - onehot) / counted rows, written over ``logits`` when ``in_place`` (logits must then be a
    writeable C-contiguous float32 array). A label outside [0, V) that is not ignore_index raises
    KernelError.
    """
    if in_place:
        x = _check_out(logits, getattr(logits, "shape", None), "cross_entropy: logits")
        if x.ndim != 2:
            raise ShapeError(f"cross_entropy: logits must be (rows, vocab), got shape {x.shape}")
    else:
        x = _f32_rows(logits, "cross_entropy: logits")
    rows, vocab = x.shape
    lab, n = _counted_labels(labels, rows, vocab, ignore_index, "cross_entropy")
    dlogits = (x if in_place else np.empty_like(x)) if grad else None  # (rows, V)
    loss = np.empty(rows, np.float32)  # (rows,) each row's loss (0: ignored)
    lse = np.empty(rows, np.float32)  # (rows,)
    engine.cross_entropy(x, lab, int(ignore_index), float(1.0 / n) if n else 0.0, dlogits, loss, lse)
    return (float(loss.sum(dtype=np.float64) / n) if n else 0.0), dlogits, lse


def cross_entropy_grad(logits, labels, lse, dloss: float = 1.0, ignore_index: int = -100, out=None) -> np.ndarray:
    """dlogits = dloss (softmax(logits) - onehot(labels)) / counted rows, the softmax recomputed in one pass
    from the forward's logsumexp ``lse`` (rows,) (cross_entropy's third result): cross_entropy's gradient
    when the loss and its gradient run as separate steps. float32 logits (rows, V), integer labels
    (rows,); ignored rows get 0. ``out`` (rows, V) float32 may be ``logits`` itself."""
    x = _f32_rows(logits, "cross_entropy_grad: logits")
    rows, vocab = x.shape
    lab, n = _counted_labels(labels, rows, vocab, ignore_index, "cross_entropy_grad")
    lse1 = _c_array(lse, np.float32, 1, "cross_entropy_grad: lse")
    if lse1.shape != (rows,):
        raise ShapeError(f"cross_entropy_grad: lse must have shape ({rows},), got {lse1.shape}")
    if out is None:
        out = np.empty_like(x)  # (rows, V)
    else:
        _check_out(out, (rows, vocab))
        if np.may_share_memory(out, x) and out.ctypes.data != x.ctypes.data:
            raise KernelError("cross_entropy_grad: out must be logits itself or not overlap it")
    engine.cross_entropy_grad(x, lab, lse1, int(ignore_index), float(dloss) / n if n else 0.0, out)
    return out


def _counted_labels(labels, rows: int, vocab: int, ignore_index: int, op: str) -> tuple[np.ndarray, int]:
    """(labels as int64 (rows,), rows not ignored); KernelError naming a counted label outside [0, vocab)."""
    if not isinstance(labels, np.ndarray) or labels.dtype.kind not in "iu" or labels.shape != (rows,):
        raise ShapeError(f"{op}: labels must be an integer array of shape ({rows},)")
    lab = np.ascontiguousarray(labels, dtype=np.int64)
    counted = lab != ignore_index
    bad = counted & ((lab < 0) | (lab >= vocab))
    if bad.any():
        at = int(np.argmax(bad))
        raise KernelError(f"{op}: label {int(lab[at])} at row {at} is outside the {vocab} classes")
    return lab, int(counted.sum())


def _norm_backward_operands(op: str, x, weight, dy, eps) -> tuple:
    """(x (M, D), weight (D,), dy (M, D)) of a norm's backward as contiguous float32, checked."""
    x2 = _f32_rows(x, f"{op}: x")
    d = x2.shape[1]
    w = _c_array(weight, np.float32, 1, f"{op}: weight")
    if w.shape != (d,):
        raise ShapeError(f"{op}: weight must have shape ({d},), got {w.shape}")
    g = _f32_rows(dy, f"{op}: dy", d)
    if g.shape[0] != x2.shape[0]:
        raise ShapeError(f"{op}: dy {g.shape} and x {x2.shape} differ")
    if not float(eps) >= 0.0:
        raise KernelError(f"{op}: eps must be >= 0, got {eps}")
    return x2, w, g


def rms_norm_backward(x, weight, dy, eps) -> tuple:
    """(dx (M, D), dweight (D,)) of ``rms_norm(x, weight, eps)`` given dy = dL/dy, float32; each row's
    sums in double as the forward's."""
    x2, w, g = _norm_backward_operands("rms_norm_backward", x, weight, dy, eps)
    m, d = x2.shape
    dx = np.empty_like(x2)  # (M, D)
    dweight = np.empty(d, np.float32)  # (D,)
    rinv = np.empty(m, np.float32)  # (M,) each row's 1 / rms
    engine.rms_norm_backward(x2, w, g, float(eps), dx, dweight, rinv)
    return dx, dweight


def layer_norm_backward(x, weight, dy, eps) -> tuple:
    """(dx (M, D), dweight (D,), dbias (D,)) of ``layer_norm(x, weight, bias, eps)`` given dy = dL/dy,
    float32; each row's statistics as float lane sums taken in double, the weight's and bias's sums over rows
    in double, rows in order."""
    x2, w, g = _norm_backward_operands("layer_norm_backward", x, weight, dy, eps)
    m, d = x2.shape
    dx = np.empty_like(x2)  # (M, D)
    dweight, dbias = np.empty(d, np.float32), np.empty(d, np.float32)  # (D,) each
    mean, rinv = np.empty(m, np.float32), np.empty(m, np.float32)  # (M,) each row's mean and 1 / std
    engine.layer_norm_backward(x2, w, g, float(eps), dx, dweight, dbias, mean, rinv)
    return dx, dweight, dbias


def column_sums(x) -> np.ndarray:
    """float32 (D,): x (M, D) float32 summed over its rows (in double, rows in order)."""
    x2 = _f32_rows(x, "column_sums: x")
    out = np.empty(x2.shape[1], np.float32)  # (D,)
    engine.column_sums(x2, out)
    return out


def _activation_grad(kind: int, x, dy, out, op: str) -> np.ndarray:
    """dx = dy * act'(x) through the engine's activation_backward (``kind``: its code)."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or not isinstance(dy, np.ndarray) or dy.dtype != np.float32:
        raise KernelError(f"{op}: x and dy must be float32 numpy arrays")
    if x.shape != dy.shape:
        raise ShapeError(f"{op}: dy {dy.shape} is not shaped like x {x.shape}")
    xf, gf = np.ascontiguousarray(x).reshape(-1), np.ascontiguousarray(dy).reshape(-1)  # (size,) each
    if out is None:
        out = np.empty(x.shape, np.float32)  # x's shape
    else:
        _check_out(out, x.shape)
        if not _same_elements(out, gf):  # out may be dy itself, nothing else it overlaps
            _check_apart(out, op, x=xf, dy=gf)
        elif np.may_share_memory(out, xf):
            raise KernelError(f"{op}: out must not overlap x")
    engine.activation_backward(kind, xf, gf, out.reshape(-1))
    return out


def gelu_backward(x, dy, approximate: str = "none", out=None) -> np.ndarray:
    """dx = dy * gelu'(x) for float32 x, dy of one shape: exact (Phi(x) + x phi(x), Phi through gelu's
    erfc fit) or ``"tanh"``'s derivative; ``out`` (x's shape) may be dy itself."""
    if approximate not in ("none", "tanh"):
        raise KernelError(f"gelu_backward: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _activation_grad(1 if approximate == "tanh" else 0, x, dy, out, "gelu_backward")


def silu_backward(x, dy, out=None) -> np.ndarray:
    """dx = dy * s (1 + x (1 - s)), s = sigmoid(x), for float32 x, dy of one shape; ``out`` may be dy."""
    return _activation_grad(2, x, dy, out, "silu_backward")


def _flat_f32(a, n: int, name: str) -> np.ndarray:
    """``a`` itself when it is a writeable-or-not C-contiguous float32 vector of n elements; else KernelError."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != (n,) or not a.flags.c_contiguous:
        raise KernelError(f"{name} must be a C-contiguous float32 ({n},) array, got "
                          f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
    return a


def adamw_update(p, g, m, v, lr: float, b1: float, b2: float, eps: float, weight_decay: float, t: int) -> None:
    """Step ``t`` (from 1) of AdamW over the flat float32 parameters ``p`` with gradient ``g`` and moments
    ``m``, ``v`` (all (n,), updated in place), as torch.optim.AdamW (amsgrad off)."""
    n = _flat_f32(p, np.size(p), "adamw_update: p").shape[0]
    for name, a in (("g", g), ("m", m), ("v", v)):
        _flat_f32(a, n, f"adamw_update: {name}")
    if t < 1:
        raise KernelError(f"adamw_update: step must be >= 1, got {t}")
    engine.adamw_update(p, g, m, v, 1.0 - lr * weight_decay, 1.0 - b1, b2, 1.0 - b2, eps, lr / (1.0 - b1 ** t),
                        float(np.sqrt(1.0 - b2 ** t)))


def sgd_update(p, g, buf, lr: float, momentum: float, dampening: float, weight_decay: float, nesterov: bool,
               first: bool) -> None:
    """One torch.optim.SGD step over the flat float32 parameters ``p`` with gradient ``g`` and momentum
    buffer ``buf`` (all (n,), updated in place); ``first``: the first step (the buffer becomes the direction)."""
    n = _flat_f32(p, np.size(p), "sgd_update: p").shape[0]
    for name, a in (("g", g), ("buf", buf)):
        _flat_f32(a, n, f"sgd_update: {name}")
    engine.sgd_update(p, g, buf, lr, momentum, 1.0 - dampening, weight_decay, bool(nesterov), bool(first))


def embedding_backward(ids, dy, vocab: int, out=None) -> np.ndarray:
    """The gradient of ``embedding(table, ids)``'s table (vocab, D): dy's row i added into row ids[i],
    repeated ids summed. ids int32 / int64 (S,); dy float32 (S, D); ``out`` (vocab, D) float32, when
    given, is added into (not cleared) and returned. An id outside [0, vocab) raises KernelError."""
    if not isinstance(ids, np.ndarray) or ids.dtype.kind not in "iu" or ids.ndim != 1:
        raise KernelError("embedding_backward: ids must be a 1-D integer numpy array")
    g = _f32_rows(dy, "embedding_backward: dy")
    if g.shape[0] != ids.shape[0]:
        raise ShapeError(f"embedding_backward: {ids.shape[0]} ids but dy has {g.shape[0]} rows")
    ids64 = np.ascontiguousarray(ids, dtype=np.int64)
    bad = (ids64 < 0) | (ids64 >= vocab)
    if bad.any():
        at = int(np.argmax(bad))
        raise KernelError(f"embedding_backward: id {int(ids64[at])} at position {at} is outside the table's {vocab} rows")
    if out is None:
        out = np.zeros((vocab, g.shape[1]), np.float32)  # (vocab, D)
    else:
        _check_out(out, (vocab, g.shape[1]))
        _check_apart(out, "embedding_backward", dy=g)
    engine.embedding_backward(ids64, g, out)
    return out
