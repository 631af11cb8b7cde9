# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False, embedsignature=True
"""Native CPU kernels: OpenMP loops over per-ISA C tiles.

Everything here trusts its arguments: volvox.kernels validates dtypes, shapes and
layouts once at the Python boundary, then calls in here, where the work runs
without the GIL. Parallelism: `prange` over activation rows (quantization, norms, RoPE,
SwiGLU), over (head, query row) items (attention) and, dynamically scheduled so a thread
the OS delays does not hold the others back, over chunks of output features (the GEMM).
One thread, or a GEMV's few rows of quantization, never enters an OpenMP region.
Every output is computed by one thread in a fixed order: results do not depend on
the thread count.
"""
import importlib
import importlib.util
import os

from cpython.pycapsule cimport PyCapsule_GetPointer
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int64_t, uint8_t

from volvox._kernels.vx cimport (
    VX_F16, VX_F32, VX_NTYPES, vx_act_row_bytes, vx_attn_scratch_floats, vx_attn_shape,
    vx_cpu_runs, vx_dequant_fn, vx_gemm_fn, vx_quantize_fn, vx_table, vx_layer_norm_row, vx_gelu_row,
)

# OpenMP shim (scikit-learn style): builds without OpenMP run every loop on one thread.
cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define VX_OPENMP 1
    #else
    #define VX_OPENMP 0
    static int omp_get_max_threads(void) { return 1; }
    #endif
    """
    int VX_OPENMP
    int omp_get_max_threads() noexcept nogil

cdef const vx_table *_tbl = NULL
cdef int _nthreads = 1

# Output features per parallel work item: weight rows of one chunk stay in L1/L2 while
# every group of 4 activation rows passes over them.
cdef int64_t CHUNK_ROWS = 16
# Below this many multiply-adds a call runs on one thread (fork/join costs ~µs).
cdef int64_t MIN_PARALLEL_MACS = 1 << 16


# Every tier a build may hold, most portable first; each is a module volvox._kernels.tier_<name>.
TIERS = ("generic", "avx2", "avx512", "neon", "dotprod")
_tier_modules = {}  # name -> imported tier module (its table lives as long as it does)


def compiled_isas():
    """ISA tiers compiled into this build, most portable first."""
    return [t for t in TIERS if importlib.util.find_spec(f"volvox._kernels.tier_{t}") is not None]


def isa_supported(str name):
    """True when tier `name` is compiled in and this CPU can run it."""
    return name in compiled_isas() and bool(vx_cpu_runs(name.encode()))


def set_isa(str name):
    """Route every kernel through tier `name`. Its module is imported only here, once the CPU
    is known to run its instructions (module code built with its flags may use them anywhere)."""
    global _tbl
    if not isa_supported(name):
        raise ValueError(name)
    module = _tier_modules.get(name)
    if module is None:
        module = _tier_modules[name] = importlib.import_module(f"volvox._kernels.tier_{name}")
    # (transition: VOLVOX_KERNELS_C=1 takes the C tier's table, to compare a Cython port with it)
    table = module.C_TABLE if os.environ.get("VOLVOX_KERNELS_C") == "1" else module.TABLE
    _tbl = <const vx_table *> PyCapsule_GetPointer(table, "volvox._kernels.vx_table")


def get_isa():
    return None if _tbl == NULL else _tbl.name.decode()


def openmp_enabled():
    return bool(VX_OPENMP)


def set_num_threads(int n):
    global _nthreads
    _nthreads = n if VX_OPENMP else 1


def get_num_threads():
    return _nthreads


def act_row_bytes(int wtype, int64_t K):
    """Scratch bytes per activation row for weights of type `wtype`."""
    return vx_act_row_bytes(wtype, K)


cdef inline int _threads_for(int64_t macs) noexcept nogil:
    return _nthreads if macs >= MIN_PARALLEL_MACS else 1


def gemm(int wtype, const uint8_t[:, ::1] w, int64_t K, const float[:, ::1] x,
         float[:, ::1] y, uint8_t[::1] scratch):
    """y (M, N) = x (M, K) @ W.T, W given as N rows of bytes (quant blocks, f32 or f16).

    scratch: at least M * act_row_bytes(wtype, K) bytes (unused for f32 / f16).
    """
    cdef int64_t M = x.shape[0]
    cdef int64_t N = w.shape[0]
    cdef int64_t w_stride = w.shape[1]
    if M == 0 or N == 0:
        return
    cdef vx_gemm_fn g = _tbl.gemm[wtype]
    cdef vx_quantize_fn q = _tbl.quantize[wtype]
    cdef int64_t ab = vx_act_row_bytes(wtype, K)
    cdef const void *a
    cdef int64_t a_stride
    if q != NULL:
        a = <const void *> &scratch[0]
        a_stride = ab
    else:
        a = <const void *> &x[0, 0]
        a_stride = K * sizeof(float)
    cdef int64_t nchunks = (N + CHUNK_ROWS - 1) // CHUNK_ROWS
    cdef int nt = _threads_for(M * N * K)
    cdef int64_t i, c, n0, n1
    cdef float *yp = &y[0, 0]

    if nt == 1 or (q != NULL and M <= 4):
        # one thread, or a few rows: quantize here, without entering an OpenMP region
        with nogil:
            if q != NULL:
                for i in range(M):
                    q(K, &x[i, 0], &scratch[i * ab])
            if nt == 1:
                g(K, &w[0, 0], w_stride, N, a, a_stride, M, yp, N)
        if nt == 1:
            return
        for c in prange(nchunks, nogil=True, schedule="dynamic", num_threads=nt):
            n0 = c * CHUNK_ROWS
            n1 = n0 + CHUNK_ROWS
            if n1 > N:
                n1 = N
            g(K, &w[n0, 0], w_stride, n1 - n0, a, a_stride, M, yp + n0, N)
        return
    with nogil, parallel(num_threads=nt):
        if q != NULL:
            # step 1: activation rows -> 8-bit act rows, (M, ab) bytes of scratch
            for i in prange(M, schedule="static"):
                q(K, &x[i, 0], &scratch[i * ab])
        # step 2: output features in chunks; each chunk sees all M rows, 4 at a time
        for c in prange(nchunks, schedule="dynamic"):
            n0 = c * CHUNK_ROWS
            n1 = n0 + CHUNK_ROWS
            if n1 > N:
                n1 = N
            g(K, &w[n0, 0], w_stride, n1 - n0, a, a_stride, M, yp + n0, N)


def quantize_act(int wtype, const float[:, ::1] x, uint8_t[:, ::1] out):
    """out[i] = the act row of x[i] for weights of type `wtype` (a quantized type; the
    caller checked K and out's shape (M, act_row_bytes(wtype, K)))."""
    cdef int64_t M = x.shape[0]
    cdef int64_t K = x.shape[1]
    cdef int64_t i
    cdef vx_quantize_fn q = _tbl.quantize[wtype]
    with nogil:
        for i in range(M):
            q(K, &x[i, 0], &out[i, 0])


def embedding(int wtype, const uint8_t[:, ::1] table, int64_t D, const long long[::1] ids,
              float[:, ::1] out):
    """out[s] = dequantized table row ids[s]. Returns the position of the first
    out-of-range id, or -1 (then nothing was written)."""
    cdef int64_t S = ids.shape[0]
    cdef int64_t V = table.shape[0]
    cdef int64_t s, bad = -1
    cdef vx_dequant_fn dq = _tbl.dequant[wtype]
    with nogil:
        for s in range(S):
            if ids[s] < 0 or ids[s] >= V:
                bad = s
                break
    if bad >= 0 or S == 0:
        return bad
    cdef int nt = _threads_for(S * D * 16)
    for s in prange(S, nogil=True, schedule="static", num_threads=nt):
        dq(D, &table[ids[s], 0], &out[s, 0])
    return -1


def rms_norm(const float[:, ::1] x, const float[::1] weight, float eps, float[:, ::1] out):
    """out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * weight, row by row."""
    cdef int64_t M = x.shape[0]
    cdef int64_t D = x.shape[1]
    cdef int64_t i
    if M == 0 or D == 0:
        return
    cdef int nt = _threads_for(M * D * 16)
    if nt == 1:
        with nogil:
            for i in range(M):
                _tbl.rms_norm(D, &x[i, 0], &weight[0], eps, &out[i, 0])
        return
    for i in prange(M, nogil=True, schedule="static", num_threads=nt):
        _tbl.rms_norm(D, &x[i, 0], &weight[0], eps, &out[i, 0])


def layer_norm(const float[:, ::1] x, const float[::1] weight, bias, float eps, float[:, ::1] out):
    """out[i] = (x[i] - mean) / sqrt(var + eps) * weight (+ bias), row by row (bias: None or float32 (D,))."""
    cdef int64_t M = x.shape[0]
    cdef int64_t D = x.shape[1]
    cdef int64_t i
    cdef const float[::1] b
    cdef const float *bp = NULL
    if bias is not None:
        b = bias
        bp = &b[0]
    if M == 0 or D == 0:
        return
    cdef int nt = _threads_for(M * D * 16)
    if nt == 1:
        with nogil:
            for i in range(M):
                vx_layer_norm_row(D, &x[i, 0], &weight[0], bp, eps, &out[i, 0])
        return
    for i in prange(M, nogil=True, schedule="static", num_threads=nt):
        vx_layer_norm_row(D, &x[i, 0], &weight[0], bp, eps, &out[i, 0])


def gelu(const float[:, ::1] x, float[:, ::1] y, bint tanh_approx):
    """y[i] = gelu(x[i]) (exact, or the tanh approximation); y may be x."""
    cdef int64_t M = x.shape[0]
    cdef int64_t N = x.shape[1]
    cdef int64_t i
    if M == 0 or N == 0:
        return
    cdef int nt = _threads_for(M * N * 32)
    if nt == 1:
        with nogil:
            for i in range(M):
                vx_gelu_row(N, &x[i, 0], tanh_approx, &y[i, 0])
        return
    for i in prange(M, nogil=True, schedule="static", num_threads=nt):
        vx_gelu_row(N, &x[i, 0], tanh_approx, &y[i, 0])


def attention_scratch_floats(int64_t total, int64_t head_dim):
    """Scratch floats attention() needs per thread for `total` cached positions."""
    return vx_attn_scratch_floats(total, head_dim)


def attention(const float[:, ::1] q, const float[:, :, ::1] kc, const float[:, :, ::1] vc,
              int64_t start, int64_t n_heads, int64_t window, float scale, float[:, ::1] out,
              float[::1] scratch):
    """out (seq, n_heads*hd) = causal GQA attention of q (seq, n_heads*hd) over the cache
    kc, vc (n_kv_heads, capacity, hd) whose first start+seq rows are filled.
    scratch: get_num_threads() * attention_scratch_floats(start + seq, hd) floats."""
    cdef vx_attn_shape s
    s.seq = q.shape[0]
    s.start = start
    s.n_heads = n_heads
    s.n_kv_heads = kc.shape[0]
    s.head_dim = kc.shape[2]
    s.kv_head_stride = kc.shape[1] * kc.shape[2]
    s.window = window
    s.scale = scale
    cdef int64_t items = n_heads * s.seq
    cdef int64_t it
    cdef int64_t per = vx_attn_scratch_floats(start + s.seq, s.head_dim)
    if items == 0:
        return
    cdef int nt = _threads_for(items * (start + s.seq) * s.head_dim * 4)
    if nt == 1:
        with nogil:
            for it in range(items):
                _tbl.attention(&s, &q[0, 0], &kc[0, 0, 0], &vc[0, 0, 0], it, &scratch[0], &out[0, 0])
        return
    for it in prange(items, nogil=True, schedule="static", num_threads=nt):
        _tbl.attention(&s, &q[0, 0], &kc[0, 0, 0], &vc[0, 0, 0], it,
                       &scratch[threadid() * per], &out[0, 0])


def swiglu(const float[:, ::1] x, float[:, ::1] y, bint gated):
    """gated: y[i] = silu(x[i, :F]) * x[i, F:] with F = y.shape[1] = x.shape[1] / 2;
    else y[i] = silu(x[i]) (y has x's shape)."""
    cdef int64_t M = x.shape[0]
    cdef int64_t F = y.shape[1]
    cdef int64_t i
    if M == 0 or F == 0:
        return
    cdef int nt = _threads_for(M * F * 16)
    if nt == 1:
        with nogil:
            for i in range(M):
                _tbl.swiglu(F, &x[i, 0], &x[i, F] if gated else NULL, &y[i, 0])
        return
    for i in prange(M, nogil=True, schedule="static", num_threads=nt):
        _tbl.swiglu(F, &x[i, 0], &x[i, F] if gated else NULL, &y[i, 0])


def rope(const float[:, ::1] x, const long long[::1] pos, int64_t n_heads, int64_t head_dim,
         int64_t rope_dim, int interleaved, float base, float freq_scale, float[:, ::1] y):
    """y[i] = x[i] rotated for position pos[i] (heads of head_dim, first rope_dim dims)."""
    cdef int64_t M = x.shape[0]
    cdef int64_t i
    if M == 0:
        return
    cdef int nt = _threads_for(M * n_heads * rope_dim * 8)
    if nt == 1:
        with nogil:
            for i in range(M):
                _tbl.rope(n_heads, head_dim, rope_dim, interleaved, pos[i], base, freq_scale, &x[i, 0], &y[i, 0])
        return
    for i in prange(M, nogil=True, schedule="static", num_threads=nt):
        _tbl.rope(n_heads, head_dim, rope_dim, interleaved, pos[i], base, freq_scale, &x[i, 0], &y[i, 0])


include "_conv.pxi"
include "_plan.pxi"
