# The packed f32 GEMM of a single row (M = 1): a 1x1 conv on a 1x1 map, as an SE block's squeeze and
# excite convs run it. The weights are sgemm_pack's panels (kernels/conv.pxi: [panel][k][32]), one
# contiguous stream. sgemm's one-row tile keeps one FMA chain per output vector and waits on its
# latency; here each output sums SV_PHASES chains, k = SV_PHASES * i + phase, each in order from 0,
# then (s0 + s1) + (s2 + s3), + bias, then the activation: the same floats on every tier that has
# FMA, whatever its vector width (a pass: SG_NV vectors of a panel's features, the tier's own).

cdef enum:
    SV_PHASES = 4       # partial sums per output (their chains run side by side)


cdef inline void sgemv_pass(int64_t K, const float *p, const float *x, int nr, const float *bias, int act,
                            float *y) noexcept nogil:
    """y[0 .. nr) = act(bias + sum_k x[k] * the pass's columns) for nr <= SG_NV * VL features
    (p: column 0 of the pass in a packed panel, rows SG_NR apart; bias NULL: none)."""
    cdef vf c[SV_PHASES * SG_NV]                                    # (phases, SG_NV) partial sums
    cdef vf_mask m[SG_NV]                                           # (SG_NV,) lanes stored
    cdef vf xv, s
    cdef const float *row
    cdef int64_t k = 0
    cdef int ph, j
    for j in range(SG_NV):
        m[j] = vf_lanes(nr - j * VL if nr > j * VL else 0)
    for j in range(SV_PHASES * SG_NV):
        c[j] = vf_zero()
    while k + SV_PHASES <= K:
        for ph in range(SV_PHASES):
            xv = vf_set1(x[k + ph])
            row = p + SG_NR * (k + ph)
            for j in range(SG_NV):
                c[ph * SG_NV + j] = vf_fma(xv, vf_load(row + j * VL), c[ph * SG_NV + j])
        k += SV_PHASES
    for ph in range(K - k):                                         # the last k: phases 0 .. K - k - 1
        xv = vf_set1(x[k + ph])
        row = p + SG_NR * (k + ph)
        for j in range(SG_NV):
            c[ph * SG_NV + j] = vf_fma(xv, vf_load(row + j * VL), c[ph * SG_NV + j])
    for j in range(SG_NV):
        s = vf_add(vf_add(c[j], c[SG_NV + j]), vf_add(c[2 * SG_NV + j], c[3 * SG_NV + j]))
        if bias != NULL:
            s = vf_add(s, vf_load_part(m[j], bias + j * VL))
        vf_store_part(m[j], y + j * VL, act_vf(act, s))


cdef void sgemv(int64_t K, const float *packed, int64_t n, const float *x, const float *bias, int act,
                float *y) noexcept nogil:
    """y[r] = act(bias[r] + sum_k x[k] * W[r][k]) for r < n (x: one row of K floats; W packed by
    sgemm_pack; bias may be NULL; act FN_NONE, FN_RELU or FN_RELU6)."""
    cdef int64_t p0 = 0, q
    cdef int nr
    while p0 < n:
        q = 0
        while q < SG_NR and p0 + q < n:                             # the panel's passes
            nr = <int>(n - p0 - q if n - p0 - q < SG_NV * VL else SG_NV * VL)
            sgemv_pass(K, packed + p0 * K + q, x, nr, bias + p0 + q if bias != NULL else NULL, act, y + p0 + q)
            q += SG_NV * VL
        p0 += SG_NR


cdef void fill_sgemv(vx_table *t) noexcept:
    """The one-row f32 GEMM entry of the conv table."""
    cdef vx_conv_table *ct = <vx_conv_table *> t.conv
    ct.sgemv = sgemv
