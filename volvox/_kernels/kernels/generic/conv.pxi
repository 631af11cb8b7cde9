# The generic tier's own conv microkernels (kernels/conv.pxi has the shared bodies).
from libc.string cimport memset

cdef enum:
    SG_MR = 4     # rows of the f32 GEMM's register tile: 4 x 32 features, plain C
    SG_NV = 1     # (sg_pass: unused here)
    SG_ACC = 1
    SG_PAIRS = 0  # (sg_tile_pair: two sg_tiles)


cdef inline void sg_tile(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act, float *y,
                         int64_t ldy, const float *pf) noexcept nogil:
    """y (MR rows x nr <= SG_NR features, ldy apart) = act(bias + A's rows . panel p's columns) (plus
    y's partial sums where A.acc), in plain C (the compiler vectorises the 32 columns); pf: another panel's rows to prefetch (NULL:
    none)."""
    cdef float c[SG_MR][SG_NR]                                      # (MR, 32)
    cdef const float *a = A.a                                       # (run, MR): the rows' values at k
    cdef float av
    cdef int64_t k
    cdef int i, j
    memset(c, 0, sizeof(c))
    if A.acc:                                                       # an earlier K slice's sums
        for i in range(MR):
            for j in range(nr):
                c[i][j] = y[i * ldy + j]
    for k in range(A.run):
        if pf != NULL:
            sg_prefetch(pf + SG_NR * k)
        for i in range(MR):
            av = a[k * MR + i]
            for j in range(SG_NR):
                c[i][j] += av * p[SG_NR * k + j]
    for i in range(MR):
        for j in range(nr):
            y[i * ldy + j] = act_f32(act, c[i][j] + (bias[j] if bias != NULL else <float>0.0))


cdef inline void sg_tile_pair(const int GR, sg_rows A, const float *p, int nr, const float *bias, const int act,
                              float *y, int64_t ldy, const float *pf) noexcept nogil:
    """Two groups of GR rows (A.a: the first) as two sg_tiles (SG_PAIRS = 0: not called)."""
    sg_tile(GR, A, p, nr, bias, act, y, ldy, pf)
    A.a = A.a + GR * A.run
    sg_tile(GR, A, p, nr, bias, act, y + GR * ldy, ldy, NULL)
