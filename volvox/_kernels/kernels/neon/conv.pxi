# The neon tier's own conv microkernels (kernels/conv.pxi has the shared bodies); the dotprod tier
# includes them too.

cdef enum:
    SG_MR = 5     # rows of the f32 GEMM's register tile: 5 x 16 features (four q registers a row), twice
                  # per panel: 20 accumulators + 4 panel vectors + 5 row values = 29 of the 32 registers
                  # (6 rows would need 34: the compiler spills)
    SG_NV = 4     # (sg_pass, the x86 tiers' pass: not used here)
    SG_ACC = 1


cdef inline void sg_row16(int nr, float *y, vf c0, vf c1, vf c2, vf c3, vf b0, vf b1, vf b2, vf b3,
                          int act) noexcept nogil:
    """y[0 .. nr) (nr <= 16) = act(c + b): one row of a 16-feature pass, its accumulators c0..c3
    and the bias vectors b0..b3 (0 past nr)."""
    c0 = act_vf(act, vf_add(c0, b0))
    c1 = act_vf(act, vf_add(c1, b1))
    c2 = act_vf(act, vf_add(c2, b2))
    c3 = act_vf(act, vf_add(c3, b3))
    if nr >= 16:
        vf_store(y, c0)
        vf_store(y + 4, c1)
        vf_store(y + 8, c2)
        vf_store(y + 12, c3)
        return
    vf_store_part(vf_lanes(nr), y, c0)                              # whole vectors, then the last one's lanes
    if nr > 4:
        vf_store_part(vf_lanes(nr - 4), y + 4, c1)
    if nr > 8:
        vf_store_part(vf_lanes(nr - 8), y + 8, c2)
    if nr > 12:
        vf_store_part(vf_lanes(nr - 12), y + 12, c3)


cdef inline void sg_load16(int nr, const float *y, vf *c0, vf *c1, vf *c2, vf *c3) noexcept nogil:
    """c0..c3 = y[0 .. nr) (nr <= 16; 0 past nr): one row's partial sums of an earlier K slice."""
    c0[0] = vf_load_part(vf_lanes(nr), y)
    c1[0] = vf_load_part(vf_lanes(nr - 4 if nr > 4 else 0), y + 4)
    c2[0] = vf_load_part(vf_lanes(nr - 8 if nr > 8 else 0), y + 8)
    c3[0] = vf_load_part(vf_lanes(nr - 12 if nr > 12 else 0), y + 12)


cdef inline void sg_pass16(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act,
                           float *y, int64_t ldy, const float *pf) noexcept nogil:
    """y (MR <= 5 rows x nr <= 16 features, ldy apart) = act(bias + A's rows . the panel's columns
    p[0 .. 16)) (p: column 0 of the pass in a packed panel, rows SG_NR apart), plus y's partial sums
    where A.acc; pf: another panel's
    rows to prefetch as the pass reads its own (NULL: none). Each output one FMA chain over k in
    order (FMLA by element). The accumulators are named variables c<row><vector>, not an array:
    GCC keeps an array of vectors that a loop it does not unroll touches in memory."""
    cdef vf c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33, c40, c41, c42, c43
    cdef vf b0, b1, b2, b3, av
    cdef const float *a
    cdef const float *pk
    cdef int64_t r, k
    c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = c20 = c21 = c22 = c23 = vf_zero()
    c30 = c31 = c32 = c33 = c40 = c41 = c42 = c43 = vf_zero()
    if A.acc:                                                       # an earlier K slice's sums
        sg_load16(nr, y, &c00, &c01, &c02, &c03)
        if MR > 1:
            sg_load16(nr, y + ldy, &c10, &c11, &c12, &c13)
        if MR > 2:
            sg_load16(nr, y + 2 * ldy, &c20, &c21, &c22, &c23)
        if MR > 3:
            sg_load16(nr, y + 3 * ldy, &c30, &c31, &c32, &c33)
        if MR > 4:
            sg_load16(nr, y + 4 * ldy, &c40, &c41, &c42, &c43)
    for r in range(A.runs):
        a = A.a + r * A.run_stride
        for k in range(A.run):
            if pf != NULL:
                sg_prefetch(pf + SG_NR * (r * A.run + k))
            pk = p + SG_NR * k
            b0 = vf_load(pk)
            b1 = vf_load(pk + 4)
            b2 = vf_load(pk + 8)
            b3 = vf_load(pk + 12)
            av = vf_set1(a[k])
            c00 = vf_fma(av, b0, c00)
            c01 = vf_fma(av, b1, c01)
            c02 = vf_fma(av, b2, c02)
            c03 = vf_fma(av, b3, c03)
            if MR > 1:
                av = vf_set1(a[A.lda + k])
                c10 = vf_fma(av, b0, c10)
                c11 = vf_fma(av, b1, c11)
                c12 = vf_fma(av, b2, c12)
                c13 = vf_fma(av, b3, c13)
            if MR > 2:
                av = vf_set1(a[2 * A.lda + k])
                c20 = vf_fma(av, b0, c20)
                c21 = vf_fma(av, b1, c21)
                c22 = vf_fma(av, b2, c22)
                c23 = vf_fma(av, b3, c23)
            if MR > 3:
                av = vf_set1(a[3 * A.lda + k])
                c30 = vf_fma(av, b0, c30)
                c31 = vf_fma(av, b1, c31)
                c32 = vf_fma(av, b2, c32)
                c33 = vf_fma(av, b3, c33)
            if MR > 4:
                av = vf_set1(a[4 * A.lda + k])
                c40 = vf_fma(av, b0, c40)
                c41 = vf_fma(av, b1, c41)
                c42 = vf_fma(av, b2, c42)
                c43 = vf_fma(av, b3, c43)
        p += SG_NR * A.run
    if bias != NULL:                                                # (16,) masked to nr
        b0 = vf_load_part(vf_lanes(nr), bias)
        b1 = vf_load_part(vf_lanes(nr - 4 if nr > 4 else 0), bias + 4)
        b2 = vf_load_part(vf_lanes(nr - 8 if nr > 8 else 0), bias + 8)
        b3 = vf_load_part(vf_lanes(nr - 12 if nr > 12 else 0), bias + 12)
    else:
        b0 = b1 = b2 = b3 = vf_zero()
    sg_row16(nr, y, c00, c01, c02, c03, b0, b1, b2, b3, act)
    if MR > 1:
        sg_row16(nr, y + ldy, c10, c11, c12, c13, b0, b1, b2, b3, act)
    if MR > 2:
        sg_row16(nr, y + 2 * ldy, c20, c21, c22, c23, b0, b1, b2, b3, act)
    if MR > 3:
        sg_row16(nr, y + 3 * ldy, c30, c31, c32, c33, b0, b1, b2, b3, act)
    if MR > 4:
        sg_row16(nr, y + 4 * ldy, c40, c41, c42, c43, b0, b1, b2, b3, act)


cdef inline void sg_tile(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act, float *y,
                         int64_t ldy, const float *pf) noexcept nogil:
    """y (MR rows x nr <= SG_NR features, ldy apart) = act(bias + A's rows . panel p's columns): 5 x 16
    passes (columns 0..15, then 16..31 for nr > 16, without the prefetch); pf: another panel's rows
    to prefetch (NULL: none)."""
    sg_pass16(MR, A, p, nr if nr < 16 else 16, bias, act, y, ldy, pf)
    if nr > 16:
        sg_pass16(MR, A, p + 16, nr - 16, bias + 16 if bias != NULL else NULL, act, y + 16, ldy, NULL)


cdef inline int64_t sg_half_tiles(sg_rows A, const float *p, int nr, const float *bias, int act, float *y,
                                  int64_t ldy, int64_t m) noexcept nogil:
    """None here (a narrow panel already takes one 16-feature pass): 0 rows done."""
    return 0
