# The generic tier's own qconv microkernels (kernels/qconv.pxi has the shared bodies): plain C,
# which the compiler vectorises where it can.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t
from volvox._kernels.vx cimport vx_conv_shape, vx_requant


cdef inline int requant_row_lanes(int n, const int32_t *acc, int64_t corr, const int32_t *wsum,
                                  const int32_t *bias, const int32_t *mult, const int32_t *shift,
                                  const vx_requant *rq, int8_t *y) noexcept nogil:
    """No vector lanes: requant_row's scalar loop takes every channel."""
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
    bytes apart); NP = 1 when the pair's second panel is all padding (16 or fewer channels left)."""
    cdef int i, l, h
    cdef int64_t kq
    cdef const int8_t *b
    cdef const uint8_t *ai
    cdef int32_t *ci
    for i in range(MR):
        for l in range(16 * NP):
            acc[i * QG_NR + l] = init[l] if init != NULL else 0
    for kq in range(K4 // 4):
        for h in range(NP):
            b = pp + h * 16 * K4 + 64 * kq                           # (16, 4)
            for i in range(MR):
                ai = a + i * lda + 4 * kq
                ci = acc + i * QG_NR + 16 * h
                for l in range(16):
                    ci[l] += ai[0] * b[4 * l] + ai[1] * b[4 * l + 1] + ai[2] * b[4 * l + 2] + ai[3] * b[4 * l + 3]


# ------------------------------------------------------------------------------------------------
# Depthwise int8
# ------------------------------------------------------------------------------------------------
cdef inline int64_t qdw_pixels(const vx_conv_shape *s, const int8_t *xp, const int16_t *w, const vx_requant *rq,
                               int64_t oh, int64_t ow, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                               int8_t *yo) noexcept nogil:
    """Output pixel ow of a depthwise row (taps i0..i1 x j0..j1; xp its tap (0, 0), yo its outputs)
    in plain C; returns the pixels done (1)."""
    qdw_pixel_loop(s, xp, w, rq, i0, i1, j0, j1, yo)
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
    """No vector lanes: quantize_i8's loop takes every element."""
    return 0
