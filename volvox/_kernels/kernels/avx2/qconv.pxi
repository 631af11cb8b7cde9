# The avx2 tier's own qconv microkernels (kernels/qconv.pxi has the shared bodies): the int8 GEMM
# tile on vpmaddwd (no VNNI) and the int8 depthwise pixels in 8 int32 lanes; requantization and
# quantize_i8 are the shared loops, which the compiler vectorises.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy
from volvox._kernels.vx cimport vx_conv_shape, vx_requant

cdef extern from *:
    int qconv_popcount "__builtin_popcount" (unsigned int x) nogil

cdef enum:
    QDW_VL = 8        # int32 lanes of the depthwise accumulators


cdef inline int requant_row_lanes(int n, const int32_t *acc, int64_t corr, const int32_t *wsum,
                                  const int32_t *bias, const int32_t *mult, const int32_t *shift,
                                  const vx_requant *rq, int8_t *y) noexcept nogil:
    """No vector lanes of its own: requant_row's scalar loop (vectorised) takes every channel."""
    return 0


cdef inline void to_u8(int64_t n, const int8_t *src, uint8_t *dst) noexcept nogil:
    """dst[c] = u8(src[c] + 128) for c < n."""
    to_u8_loop(n, src, dst)


cdef inline bint im2col_u8_tier(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np, uint8_t pad_u8,
                                uint8_t *cols, int64_t ldc) noexcept nogil:
    """No windows of its own: im2col_u8's loop lays out every one."""
    return False


# ------------------------------------------------------------------------------------------------
# The int8 GEMM
# ------------------------------------------------------------------------------------------------
ctypedef struct qg_panel:
    int unused        # no per-panel state


cdef inline const int32_t *qg_panel_prepare(qg_panel *panel, int64_t K4, const int8_t *pp, const int32_t *wsum,
                                            const vx_requant *rq, int64_t p0, int nr, int32_t *first,
                                            const int32_t **tile_init) noexcept nogil:
    """The sums start from 0 (NULL), requantized by requant_row."""
    tile_init[0] = NULL
    return NULL


cdef inline bint qg_panel_pairs(qg_panel *panel, int64_t K4, const int8_t *pp, int nr, const uint8_t *a,
                                int64_t lda, int64_t m, int8_t *y, int64_t ldy) noexcept nogil:
    """No panel runs whole: the register tiles do them all."""
    return False


cdef inline int qg_requant_tile(qg_panel *panel, const int32_t *acc, int nr, int mr, int8_t *y,
                                int64_t ldy) noexcept nogil:
    """No tile requantization of its own: requant_row takes every row."""
    return 0


cdef inline void qg_tile(const int MR, const int NP, int64_t K4, const uint8_t *a, int64_t lda, const int8_t *pp,
                         const int32_t *init, int32_t *acc) noexcept nogil:
    """acc (MR, QG_NR) int32 = init (16 * NP lanes, or NULL: 0) + u8 rows a (lda bytes apart) times
    the first NP (1 or 2) panels of the pair pp (K4 bytes per channel, 16-channel panels 16 * K4
    bytes apart). No VNNI: u8 rows widened to int16 and vpmaddwd (exact: |u * w| <= 255 * 128, two
    products per int32 lane), 2 rows x 16 channels at a time; lane 2c + t of accumulator q holds
    channel 4q + c's partial sum t."""
    cdef __m256i c[2][4]                                             # [row][channel quad]
    cdef __m256i wv[4]
    cdef __m256i av
    cdef int32_t t[8]
    cdef int i0, rows, h, i, q, l
    cdef int64_t kq
    cdef const int8_t *b
    cdef const uint8_t *ai
    for i0 in range(0, MR, 2):
        rows = MR - i0 if MR - i0 < 2 else 2
        for h in range(NP):
            b = pp + h * 16 * K4                                     # (K4/4, 16, 4)
            for i in range(2):
                for q in range(4):
                    c[i][q] = _mm256_setzero_si256()
            for kq in range(K4 // 4):
                for q in range(4):
                    wv[q] = _mm256_cvtepi8_epi16(_mm_loadu_si128(<const __m128i *>(b + 64 * kq + 16 * q)))
                for i in range(rows):
                    ai = a + (i0 + i) * lda + 4 * kq
                    av = _mm256_set1_epi64x(<int64_t>(<uint64_t>ai[0] | <uint64_t>ai[1] << 16 |
                                                      <uint64_t>ai[2] << 32 | <uint64_t>ai[3] << 48))
                    for q in range(4):
                        c[i][q] = _mm256_add_epi32(c[i][q], _mm256_madd_epi16(wv[q], av))
            for i in range(rows):
                for q in range(4):
                    _mm256_storeu_si256(<__m256i *>t, c[i][q])
                    for l in range(4):
                        acc[(i0 + i) * QG_NR + 16 * h + 4 * q + l] = \
                            (init[16 * h + 4 * q + l] if init != NULL else 0) + t[2 * l] + t[2 * l + 1]


# ------------------------------------------------------------------------------------------------
# Depthwise int8: 8 channels in int32 lanes, requantized by requant_row
# ------------------------------------------------------------------------------------------------
cdef inline __m256i qdw_lanes(int64_t n) noexcept nogil:
    """The lane mask of the first min(n, 8) int32 lanes."""
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(<int>(n if n < 8 else 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))


cdef inline __m256i qdw_mac(__m256i k, __m256i a, const int8_t *x, const int16_t *w, __m256i zp) noexcept nogil:
    """a + (x - zp) * w in the int32 lanes of mask k (x int8, w int16; lanes past k read nothing)."""
    cdef int64_t xb = 0
    cdef __m128i wb = _mm_setzero_si128()
    cdef int n = 8 if _mm256_movemask_ps(_mm256_castsi256_ps(k)) == 0xFF else \
        qconv_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(k)))
    if n == 8:
        memcpy(&xb, x, 8)
        wb = _mm_loadu_si128(<const __m128i *>w)
    else:
        memcpy(&xb, x, <size_t>n)
        memcpy(&wb, w, <size_t>n * 2)
    cdef __m256i xv = _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(xb)), zp)
    return _mm256_add_epi32(a, _mm256_mullo_epi32(xv, _mm256_cvtepi16_epi32(wb)))


cdef inline void qdw_pixels_i8(const int PX, const vx_conv_shape *s, const int8_t *xp, const int16_t *w,
                               const vx_requant *rq, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                               int8_t *yo) noexcept nogil:
    """Output pixels ow..ow+PX-1 (PX > 1: all see every column tap) of a depthwise row, 8 channels
    at a time, each pixel's sums requantized by requant_row. xp: tap (0, 0) of pixel ow; yo: its
    outputs."""
    cdef int64_t C = s.c, px = s.sw * C, c, i, j
    cdef __m256i zp = _mm256_set1_epi32(rq.zp_in)
    cdef int32_t acc[4][QDW_VL]                                      # [pixel][channel]
    cdef __m256i a0, a1, a2, a3                                      # pixels 0 .. PX - 1 (PX = 1 or 4)
    cdef __m256i k
    cdef int p, n
    cdef const int16_t *wr
    cdef const int8_t *xr
    c = 0
    while c < C:
        k = qdw_lanes(C - c)
        a0 = a1 = a2 = a3 = _mm256_setzero_si256()
        for i in range(i0, i1):
            for j in range(j0, j1):
                wr = w + (i * s.kw + j) * C + c
                xr = xp + (i * s.dh * s.w + j * s.dw) * C + c
                a0 = qdw_mac(k, a0, xr, wr, zp)
                if PX == 4:
                    a1 = qdw_mac(k, a1, xr + px, wr, zp)
                    a2 = qdw_mac(k, a2, xr + 2 * px, wr, zp)
                    a3 = qdw_mac(k, a3, xr + 3 * px, wr, zp)
        n = <int>(C - c if C - c < QDW_VL else QDW_VL)
        _mm256_storeu_si256(<__m256i *>acc[0], a0)
        if PX == 4:
            _mm256_storeu_si256(<__m256i *>acc[1], a1)
            _mm256_storeu_si256(<__m256i *>acc[2], a2)
            _mm256_storeu_si256(<__m256i *>acc[3], a3)
        for p in range(PX):
            requant_row(n, acc[p], 0, NULL, rq, c, yo + p * C + c)
        c += QDW_VL


cdef inline int64_t qdw_pixels(const vx_conv_shape *s, const int8_t *xp, const int16_t *w, const vx_requant *rq,
                               int64_t oh, int64_t ow, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                               int8_t *yo) noexcept nogil:
    """Output pixels from ow of a depthwise row (taps i0..i1 x j0..j1; xp its tap (0, 0), yo its
    outputs): 4 when they all see every kernel column, else 1; returns how many."""
    cdef int64_t e0, e1, f0, f1
    if ow + 4 <= s.ow and j0 == 0 and j1 == s.kw:
        valid_taps(s, oh, ow + 3, &e0, &e1, &f0, &f1)
        if f0 == 0 and f1 == s.kw:
            qdw_pixels_i8(4, s, xp, w, rq, i0, i1, 0, s.kw, yo)
            return 4
    qdw_pixels_i8(1, s, xp, w, rq, i0, i1, j0, j1, yo)
    return 1


cdef inline bint qdwconv_tier(const vx_conv_shape *s, const int8_t *x, const int16_t *w, const vx_requant *rq,
                              int64_t item, int64_t rows, int8_t *y) noexcept nogil:
    """No depthwise rows of its own: qdwconv_row takes them."""
    return False


# ------------------------------------------------------------------------------------------------
# Quantization
# ------------------------------------------------------------------------------------------------
cdef inline int64_t quantize_i8_lanes(int64_t n, const float *x, float scale, int32_t zp, float inv, bint pow2,
                                      int8_t wild, int8_t *y) noexcept nogil:
    """No vector lanes of its own: quantize_i8's loop (vectorised) takes every element."""
    return 0
