# The avx2 tier's own gemv microkernels (kernels/gemv.pxi has the shared bodies; gemv_x86.pxi the
# x86 code the avx512 tier shares).
from libc.stdint cimport int64_t, uint8_t
from volvox._kernels.vx cimport VX_F16, VX_F32, vx_table

include "gemv_x86.pxi"


cdef inline __m256i dot_u8s8_256(__m256i u, __m256i s) noexcept nogil:
    """u8 (first) x s8 (second) dot products summed in groups of 4 into 8 int32 lanes."""
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))


cdef inline __m256i dot_u8s8_scaled(__m256i u, __m256i s, int s_lo, int s_hi) noexcept nogil:
    """dot of 32 u8 x s8 (8 int32 lanes) with the first 16 products scaled by s_lo, the last 16 by s_hi."""
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                             _mm256_set_m128i(_mm_set1_epi16(<short>s_hi), _mm_set1_epi16(<short>s_lo)))


cdef inline int64_t b32_wide_rows(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                                  int64_t n, const int8_t **xq, const float **ds, float *y,
                                  int64_t ldy) noexcept nogil:
    """No wide tiles on avx2: every weight row goes through b32_avx2_tile (returns the first row left)."""
    return 0


cdef inline __m256 wload8(int fmt, const uint8_t *row, int64_t k) noexcept nogil:
    """Weights k .. k + 7 of an f32 or f16 row as 8 floats."""
    if fmt == VX_F32:
        return _mm256_loadu_ps(<const float *>(row + 4 * k))
    return _mm256_cvtph_ps(_mm_loadu_si128(<const void *>(row + 2 * k)))


cdef inline void float_tile(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const float **x,
                            float *out) noexcept nogil:
    """One f32 / f16 weight row against MR act rows: out[i] = dot(row, x[i]) (8 lanes, hsum, then
    the tail in order)."""
    cdef int MR = sizeof(act_rows)
    cdef __m256 acc[4]           # (MR,)
    cdef __m256 wv
    cdef int64_t k = 0
    cdef int64_t kk
    cdef int i
    cdef float s
    for i in range(MR):
        acc[i] = _mm256_setzero_ps()
    while k + 8 <= K:
        wv = wload8(fmt, row, k)
        for i in range(MR):
            acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[i] + k), acc[i])
        k += 8
    for i in range(MR):
        s = hsum_ps256(acc[i])
        for kk in range(k, K):
            s += wload(fmt, row, kk) * x[i][kk]
        out[i] = s


cdef inline void float_rows4(int fmt, int64_t K, const uint8_t *w, int64_t ws, const float *x,
                             float *out) noexcept nogil:
    """One act row against 4 weight rows: 4 independent FMA chains and 4 memory streams (a GEMV is
    bound by them); each row's sum is formed exactly as float_tile forms it."""
    cdef __m256 acc[4]           # (4,) one per weight row
    cdef __m256 xv
    cdef int64_t k = 0
    cdef int64_t kk
    cdef int r
    cdef float s
    for r in range(4):
        acc[r] = _mm256_setzero_ps()
    while k + 8 <= K:
        xv = _mm256_loadu_ps(x + k)
        for r in range(4):
            acc[r] = _mm256_fmadd_ps(wload8(fmt, w + r * ws, k), xv, acc[r])
        k += 8
    for r in range(4):
        s = hsum_ps256(acc[r])
        for kk in range(k, K):
            s += wload(fmt, w + r * ws, kk) * x[kk]
        out[r] = s


cdef inline int64_t dequant_f16_vec(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y[k] = f16 weight k for k < K rounded down to 8 (F16C); returns that count."""
    cdef int64_t k = 0
    while k + 8 <= K:
        _mm256_storeu_ps(y + k, _mm256_cvtph_ps(_mm_loadu_si128(<const void *>(w + 2 * k))))
        k += 8
    return k


cdef void fill_gemv_il(vx_table *t) noexcept:
    """No interleaved weights on this tier (vx.pxd): il_rows stays 0, decode reads the rows as stored."""
    pass
