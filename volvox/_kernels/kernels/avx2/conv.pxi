# The avx2 tier's own conv microkernels (kernels/conv.pxi has the shared bodies).

cdef enum:
    SG_MR = 6     # rows of the f32 GEMM's register tile: 6 x 16 features (two vectors), twice per panel
    SG_NV = 2     # vectors per row of a pass
    SG_ACC = 12   # accumulators: 6 x 2 ymm (+ 2 panel vectors and a broadcast: 15 of 16)


cdef inline void sg_tile(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act, float *y,
                         int64_t ldy, const float *pf) noexcept nogil:
    """y (MR rows x nr <= SG_NR features, ldy apart) = act(bias + A's rows . panel p's columns): 6 x 16
    passes (columns 0..15, then 16..31 for nr > 16); pf: another panel's rows to prefetch (NULL: none)."""
    sg_passes(MR, A, p, nr, bias, act, y, ldy, pf)


cdef inline int64_t sg_half_tiles(sg_rows A, const float *p, int nr, const float *bias, int act, float *y,
                                  int64_t ldy, int64_t m) noexcept nogil:
    """None here (a narrow panel already takes one 16-feature pass): 0 rows done."""
    return 0
