# The avx512 tier's own conv microkernels (kernels/conv.pxi has the shared bodies).

cdef enum:
    SG_MR = 8     # rows of the f32 GEMM's register tile: 8 x 32 features (two vectors), one pass
    SG_NV = 2     # vectors per row of a pass
    SG_ACC = 16   # accumulators: 8 x 2 zmm, or sg_tile_pair's 16 x 1
    SG_PAIRS = 1  # a narrow panel's groups run in pairs (sg_tile_pair)


cdef inline void sg_tile(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act, float *y,
                         int64_t ldy, const float *pf) noexcept nogil:
    """y (MR rows x nr <= SG_NR features, ldy apart) = act(bias + A's group of MR rows . panel p's
    columns), the last vector's stores masked; pf: another slice's rows to prefetch (NULL: none)."""
    sg_passes(MR, A, p, nr, bias, act, y, ldy, pf)


cdef inline void sg_tile_pair(const int GR, sg_rows A, const float *p, int nr, const float *bias, const int act,
                              float *y, int64_t ldy, const float *pf) noexcept nogil:
    """Two groups of GR rows (A.a: the first) of a panel of at most 16 features (nr <= 16) as one
    tile of 2 * GR rows x one vector (the panel's zero-padded upper 16 columns would double its
    FMAs)."""
    sg_pass(2 * GR, 1, GR, A, p, nr, bias, act, y, ldy, pf)
