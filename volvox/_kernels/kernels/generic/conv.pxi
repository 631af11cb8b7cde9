# The generic tier's own conv microkernels (kernels/conv.pxi has the shared bodies).
from libc.string cimport memset

cdef enum:
    SG_MR = 4     # rows of the f32 GEMM's register tile: 4 x 32 features, plain C
    SG_NV = 1     # (sg_pass: unused here)
    SG_ACC = 1


cdef inline void sg_tile(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act, float *y,
                         int64_t ldy, const float *pf) noexcept nogil:
    """y (MR rows x nr <= SG_NR features, ldy apart) = act(bias + A's rows . panel p's columns) (plus
    y's partial sums where A.acc), in plain C (the compiler vectorises the 32 columns); pf: another panel's rows to prefetch (NULL:
    none)."""
    cdef float c[SG_MR][SG_NR]                                      # (MR, 32)
    cdef const float *a
    cdef float av
    cdef int64_t r, k
    cdef int i, j
    memset(c, 0, sizeof(c))
    if A.acc:                                                       # an earlier K slice's sums
        for i in range(MR):
            for j in range(nr):
                c[i][j] = y[i * ldy + j]
    for r in range(A.runs):
        a = A.a + r * A.run_stride
        for k in range(A.run):
            if pf != NULL:
                sg_prefetch(pf + SG_NR * (r * A.run + k))
            for i in range(MR):
                av = a[i * A.lda + k]
                for j in range(SG_NR):
                    c[i][j] += av * p[SG_NR * k + j]
        p += SG_NR * A.run
    for i in range(MR):
        for j in range(nr):
            y[i * ldy + j] = act_f32(act, c[i][j] + (bias[j] if bias != NULL else <float>0.0))


cdef inline int64_t sg_half_tiles(sg_rows A, const float *p, int nr, const float *bias, int act, float *y,
                                  int64_t ldy, int64_t m) noexcept nogil:
    """None here: 0 rows done."""
    return 0
