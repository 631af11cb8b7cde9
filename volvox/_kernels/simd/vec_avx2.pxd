# The avx2 tier's vector layer: 8 float lanes (__m256). Every tier's vector layer (vec_<tier>.pxd)
# defines the same names, so a kernel body written with them compiles on each tier.
from volvox._kernels.simd.x86 cimport *

cdef enum:
    VL = 8        # float lanes per vector

ctypedef __m256 vf

# --- attention ---
from libc.math cimport fmaf

cdef inline float vx_fma(float a, float b, float c) noexcept nogil:
    """a * b + c rounded once (fmaf: one instruction on this tier)."""
    return fmaf(a, b, c)


# --- conv ---
from libc.stdint cimport int64_t

# Whole vectors, unaligned; lane masks for the last channels of a row (vf_lanes(n): the first n,
# 0 <= n; at most VL are taken).
cdef enum:
    VF_MASK_STORES = 0    # vf_store_part as cheap as vf_store? (no: vmaskmovps stores are slow on AMD)

ctypedef __m256i vf_mask      # all ones in the lanes taken

cdef inline vf vf_zero() noexcept nogil:
    """All lanes 0."""
    return _mm256_setzero_ps()

cdef inline vf vf_set1(float x) noexcept nogil:
    """x in every lane."""
    return _mm256_set1_ps(x)

cdef inline vf vf_load(const float *p) noexcept nogil:
    """VL floats from p."""
    return _mm256_loadu_ps(p)

cdef inline void vf_store(float *p, vf v) noexcept nogil:
    """VL floats to p."""
    _mm256_storeu_ps(p, v)

cdef inline vf vf_fma(vf a, vf b, vf c) noexcept nogil:
    """a * b + c, rounded once."""
    return _mm256_fmadd_ps(a, b, c)

cdef inline vf vf_add(vf a, vf b) noexcept nogil:
    """a + b."""
    return _mm256_add_ps(a, b)

cdef inline vf vf_max(vf a, vf b) noexcept nogil:
    """a > b ? a : b per lane (b where a is NaN)."""
    return _mm256_max_ps(a, b)

cdef inline vf vf_min(vf a, vf b) noexcept nogil:
    """a < b ? a : b per lane (b where a is NaN)."""
    return _mm256_min_ps(a, b)

cdef inline vf vf_max_nan(vf acc, vf x) noexcept nogil:
    """numpy's maximum(acc, x) per lane: x where x > acc or x is NaN, else acc (a NaN acc stays)."""
    return _mm256_blendv_ps(_mm256_max_ps(x, acc), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q))

cdef inline vf vf_div(vf a, vf b) noexcept nogil:
    """a / b per lane, correctly rounded."""
    return _mm256_div_ps(a, b)

cdef inline vf vf_mul(vf a, vf b) noexcept nogil:
    """a * b per lane."""
    return _mm256_mul_ps(a, b)

cdef inline vf_mask vf_lanes(int64_t n) noexcept nogil:
    """The mask of the first n lanes (n >= 0; all of them from VL on)."""
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(<int>(n if n < 8 else 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))

cdef inline vf vf_load_part(vf_mask k, const float *p) noexcept nogil:
    """p's floats in lanes k, 0 in the others (the others' memory is not read)."""
    return _mm256_maskload_ps(p, k)

cdef inline void vf_store_part(vf_mask k, float *p, vf v) noexcept nogil:
    """v's lanes k to p (the others' memory is not written)."""
    _mm256_maskstore_ps(p, k, v)
