# The generic tier's vector layer: portable C, one float per "vector" (the compiler may still
# vectorise loops it can prove independent). See vec_avx2.pxd.

cdef enum:
    VL = 1        # float lanes per vector

ctypedef float vf

# --- attention ---
cdef inline float vx_fma(float a, float b, float c) noexcept nogil:
    """a * b + c as written (never a libm fma call on the portable tier: the compiler contracts it to
    one instruction only where the target has FMA)."""
    return a * b + c


# --- conv ---
# One float per "vector": the shared vector bodies compile here too (the generic tier's own
# kernels are plain C loops). vf_lanes(n): 1 when n >= 1.
cimport cython
from libc.stdint cimport int64_t

cdef enum:
    VF_MASK_STORES = 0    # vf_store_part as cheap as vf_store? (no: a branch)

ctypedef int vf_mask          # the number of lanes taken, 0 or 1

cdef inline vf vf_zero() noexcept nogil:
    """0."""
    return 0.0

cdef inline vf vf_set1(float x) noexcept nogil:
    """x."""
    return x

cdef inline vf vf_load(const float *p) noexcept nogil:
    """p[0]."""
    return p[0]

cdef inline void vf_store(float *p, vf v) noexcept nogil:
    """p[0] = v."""
    p[0] = v

cdef inline vf vf_fma(vf a, vf b, vf c) noexcept nogil:
    """a * b + c (one rounding where the compiler contracts it)."""
    return a * b + c

cdef inline vf vf_add(vf a, vf b) noexcept nogil:
    """a + b."""
    return a + b

cdef inline vf vf_max(vf a, vf b) noexcept nogil:
    """a > b ? a : b (b where a is NaN)."""
    return a if a > b else b

cdef inline vf vf_min(vf a, vf b) noexcept nogil:
    """a < b ? a : b (b where a is NaN)."""
    return a if a < b else b

cdef inline vf vf_max_nan(vf acc, vf x) noexcept nogil:
    """numpy's maximum(acc, x) per lane: x where x > acc or x is NaN, else acc (a NaN acc stays)."""
    return x if (x > acc) | (x != x) else acc

@cython.cdivision(True)
cdef inline vf vf_div(vf a, vf b) noexcept nogil:
    """a / b per lane, correctly rounded (b 0 gives inf or NaN, as C does)."""
    return a / b

cdef inline vf vf_mul(vf a, vf b) noexcept nogil:
    """a * b per lane."""
    return a * b

cdef inline vf_mask vf_lanes(int64_t n) noexcept nogil:
    """1 lane when n >= 1, else none."""
    return 1 if n >= 1 else 0

cdef inline vf vf_load_part(vf_mask k, const float *p) noexcept nogil:
    """p[0] when k, else 0 (p not read)."""
    return p[0] if k else 0.0

cdef inline void vf_store_part(vf_mask k, float *p, vf v) noexcept nogil:
    """p[0] = v when k."""
    if k:
        p[0] = v
