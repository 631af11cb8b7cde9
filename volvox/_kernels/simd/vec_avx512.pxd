# The avx512 tier's vector layer: 16 float lanes (__m512). See vec_avx2.pxd.
from volvox._kernels.simd.x86 cimport *

cdef enum:
    VL = 16       # float lanes per vector

# AVX-512 VBMI's vpermb, which this tier's flags do not enable (it does not require VBMI): inline asm
# (the assembler takes it whatever the flags; an intrinsic would need the target for the whole caller),
# run only when the engine found VBMI (engine/tiers.pxi hands the tier's fill that flag). The emulated
# build (tools/test_avx512_emulated.sh) has no zmm registers: there SIMDe's permutexvar stands in.
cdef extern from *:
    """
    #include <immintrin.h>
    static inline __m512i vx_permb(__m512i idx, __m512i table) {
    #ifdef __AVX512BW__
        __m512i r;
        __asm__("vpermb %2, %1, %0" : "=v"(r) : "v"(idx), "v"(table));
        return r;
    #else
        return _mm512_permutexvar_epi8(idx, table);
    #endif
    }
    """
    __m512i vx_permb(__m512i idx, __m512i table) nogil      # table[idx & 63], byte by byte

ctypedef __m512 vf

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
    VF_MASK_STORES = 1    # vf_store_part as cheap as vf_store? (yes: AVX-512 masked stores)

ctypedef __mmask16 vf_mask    # bit l: lane l taken

cdef inline vf vf_zero() noexcept nogil:
    """All lanes 0."""
    return _mm512_setzero_ps()

cdef inline vf vf_set1(float x) noexcept nogil:
    """x in every lane."""
    return _mm512_set1_ps(x)

cdef inline vf vf_load(const float *p) noexcept nogil:
    """VL floats from p."""
    return _mm512_loadu_ps(p)

cdef inline void vf_store(float *p, vf v) noexcept nogil:
    """VL floats to p."""
    _mm512_storeu_ps(p, v)

cdef inline vf vf_fma(vf a, vf b, vf c) noexcept nogil:
    """a * b + c, rounded once."""
    return _mm512_fmadd_ps(a, b, c)

cdef inline vf vf_add(vf a, vf b) noexcept nogil:
    """a + b."""
    return _mm512_add_ps(a, b)

cdef inline vf vf_max(vf a, vf b) noexcept nogil:
    """a > b ? a : b per lane (b where a is NaN)."""
    return _mm512_max_ps(a, b)

cdef inline vf vf_min(vf a, vf b) noexcept nogil:
    """a < b ? a : b per lane (b where a is NaN)."""
    return _mm512_min_ps(a, b)

cdef inline vf vf_max_nan(vf acc, vf x) noexcept nogil:
    """numpy's maximum(acc, x) per lane: x where x > acc or x is NaN, else acc (a NaN acc stays)."""
    return _mm512_mask_mov_ps(_mm512_max_ps(x, acc), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x)

cdef inline vf vf_div(vf a, vf b) noexcept nogil:
    """a / b per lane, correctly rounded."""
    return _mm512_div_ps(a, b)

cdef inline vf vf_mul(vf a, vf b) noexcept nogil:
    """a * b per lane."""
    return _mm512_mul_ps(a, b)

cdef inline vf_mask vf_lanes(int64_t n) noexcept nogil:
    """The mask of the first n lanes (n >= 0; all of them from VL on)."""
    return 0xFFFF if n >= 16 else <vf_mask>((<unsigned int>1 << n) - 1)

cdef inline vf vf_load_part(vf_mask k, const float *p) noexcept nogil:
    """p's floats in lanes k, 0 in the others (the others' memory is not read)."""
    return _mm512_maskz_loadu_ps(k, p)

cdef inline void vf_store_part(vf_mask k, float *p, vf v) noexcept nogil:
    """v's lanes k to p (the others' memory is not written)."""
    _mm512_mask_storeu_ps(p, k, v)
