# The avx512 tier's own conv microkernels (kernels/conv.pxi has the shared bodies).

cdef enum:
    SG_MR = 8     # rows of the f32 GEMM's register tile: 8 x 32 features (two vectors), one pass
    SG_NV = 2     # vectors per row of a pass
    SG_ACC = 16   # accumulators: 8 x 2 zmm, or sg_half_tiles' 16 x 1
    SG_MR16 = 16  # rows of a tile of a panel of at most 16 features


cdef inline void sg_tile(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act, float *y,
                         int64_t ldy, const float *pf) noexcept nogil:
    """y (MR rows x nr <= SG_NR features, ldy apart) = act(bias + A's rows . panel p's columns), the
    last vector's stores masked; pf: another panel's rows to prefetch (NULL: none)."""
    sg_passes(MR, A, p, nr, bias, act, y, ldy, pf)


cdef inline int64_t sg_half_tiles(sg_rows A, const float *p, int nr, const float *bias, int act, float *y,
                                  int64_t ldy, int64_t m) noexcept nogil:
    """A panel of at most 16 features (nr <= 16): rows in tiles of 16 rows x one vector, twice the
    rows, half the columns (the panel's zero-padded upper 16 columns would double its FMAs).
    Returns the rows done (a multiple of 16; the rest go through sg_tile)."""
    cdef const float *a = A.a
    cdef int64_t i0 = 0
    if nr > VL:
        return 0
    while i0 + SG_MR16 <= m:
        A.a = a + i0 * A.lda
        sg_pass(SG_MR16, 1, A, p, nr, bias, act, y + i0 * ldy, ldy, NULL)
        i0 += SG_MR16
    return i0
