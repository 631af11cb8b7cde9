# The avx512 tier's integer vector layer for the interleaved k-quant GEMVs (kernels/gemv_kquants_il.pxi):
# a vi holds one int32 lane per weight row of a group (VI_ROWS rows: the tier's il_rows), a vf (the
# tier's float vector, vec_avx512.pxd) one float per row. See ivec_avx2.pxd for the same names on AVX2.
from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.string cimport memcpy
from volvox._kernels.simd.x86 cimport *

cdef enum:
    VI_ROWS = 16     # weight rows per vector: one int32 lane each
    VI_DOT_U8_MAX = 255   # the largest unsigned weight byte vi_dot takes (dpbusd: any)

ctypedef __m512i vi


cdef inline vi vi_load(const uint8_t *p) noexcept nogil:
    """4 bytes of each of the VI_ROWS rows (a lane of an interleaved group), unaligned."""
    return _mm512_loadu_si512(<const void *>p)


cdef inline vi vi_zero() noexcept nogil:
    return _mm512_setzero_si512()


cdef inline vi vi_bytes(char c) noexcept nogil:
    """c in every byte."""
    return _mm512_set1_epi8(c)


cdef inline vi vi_set1(int32_t v) noexcept nogil:
    """v in every int32 lane."""
    return _mm512_set1_epi32(v)


cdef inline vi vi_bcast4(const int8_t *x) noexcept nogil:
    """The 4 int8 at x in every int32 lane."""
    cdef int32_t v
    memcpy(&v, x, 4)
    return _mm512_set1_epi32(v)


cdef inline vi vi_and(vi a, vi b) noexcept nogil:
    return _mm512_and_si512(a, b)


cdef inline vi vi_or(vi a, vi b) noexcept nogil:
    return _mm512_or_si512(a, b)


cdef inline vi vi_select(vi m, vi a, vi b) noexcept nogil:
    """a's bits where m has a 1, b's elsewhere (one vpternlogd)."""
    return _mm512_ternarylogic_epi32(a, b, m, 0xE4)


cdef inline vi vi_shr16(vi a, int n) noexcept nogil:
    """a's 16-bit halves shifted right by n (a constant where the callers inline)."""
    return _mm512_srli_epi16(a, n)


cdef inline vi vi_shl16(vi a, int n) noexcept nogil:
    """a's 16-bit halves shifted left by n."""
    return _mm512_slli_epi16(a, n)


cdef inline vi vi_dot(vi acc, vi u, vi s) noexcept nogil:
    """acc + per int32 lane the 4 products of u's bytes (unsigned) and s's (signed) (VNNI)."""
    return _mm512_dpbusd_epi32(acc, u, s)


cdef inline vi vi_add(vi a, vi b) noexcept nogil:
    return _mm512_add_epi32(a, b)


cdef inline vi vi_sub(vi a, vi b) noexcept nogil:
    return _mm512_sub_epi32(a, b)


cdef inline vi vi_mul(vi a, vi b) noexcept nogil:
    """The low 32 bits of a * b per lane."""
    return _mm512_mullo_epi32(a, b)


cdef inline vi vi_sra32(vi a, int n) noexcept nogil:
    """a's int32 lanes shifted right by n, arithmetically (a constant where the callers inline)."""
    return _mm512_srai_epi32(a, n)


cdef inline vi vi_pack16(vi a, vi b) noexcept nogil:
    """Per lane a's low 16 bits in the low half, b's in the high half (a pair for vi_dot16x2)."""
    return vi_select(vi_set1(0xFFFF), a, _mm512_slli_epi32(b, 16))


cdef inline vi vi_pack16_sixteenth(vi a, vi b) noexcept nogil:
    """Per lane a's low 16 bits in the low half, b / 16's in the high half (b a multiple of 16)."""
    return vi_select(vi_set1(0xFFFF), a, _mm512_slli_epi32(b, 12))


cdef inline vi vi_dot16x2(vi acc, vi a, vi b) noexcept nogil:
    """acc + per lane lo(a) lo(b) + hi(a) hi(b), the 16-bit halves signed (VNNI's dpwssd)."""
    return _mm512_dpwssd_epi32(acc, a, b)


cdef inline vi vi_u8x2(const uint8_t *p) noexcept nogil:
    """VI_ROWS pairs of uint8 at p (row r's at 2 r) as the 16-bit halves of int32 lanes."""
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256(<const void *>p))


cdef inline vi vi_s8x2(const uint8_t *p) noexcept nogil:
    """VI_ROWS pairs of int8 at p (row r's at 2 r) as the 16-bit halves of int32 lanes."""
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(<const void *>p))


cdef inline vi vi_u8(const uint8_t *p) noexcept nogil:
    """VI_ROWS uint8 at p as int32 lanes."""
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(<const void *>p))


cdef inline vi vi_s8(const uint8_t *p) noexcept nogil:
    """VI_ROWS int8 at p as int32 lanes."""
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(<const void *>p))


cdef inline __m512 vi_float(vi a) noexcept nogil:
    """a's lanes as floats."""
    return _mm512_cvtepi32_ps(a)


cdef inline __m512 vi_f16(const uint8_t *p) noexcept nogil:
    """VI_ROWS fp16 at p as floats."""
    return _mm512_cvtph_ps(_mm256_loadu_si256(<const void *>p))


cdef inline __m512 vi_fmul(__m512 a, __m512 b) noexcept nogil:
    return _mm512_mul_ps(a, b)


cdef inline __m512 vi_fsub(__m512 a, __m512 b) noexcept nogil:
    return _mm512_sub_ps(a, b)
