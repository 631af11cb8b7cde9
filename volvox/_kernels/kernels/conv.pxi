# conv kernels: the bodies every tier shares (each tier's own microkernels: kernels/<tier>/conv.pxi).
#
# f32 GEMM: weights (N, K) row-major are packed into panels of SG_NR = 32 output features,
# [panel][k][32] (zero padded), the same layout on every tier. K runs in slices of at most SG_KC
# (equal ones): a panel's slice (SG_KC x 32 floats) stays in L1 while every row of the call runs
# over it. A register tile of activation rows x 32 features (avx512: 8 x 32; avx2: 6 x 16 twice;
# neon: 5 x 16 twice; generic: 4 x 32 in plain C) starts from 0 on the first slice and from the
# partial sums it stored in y on the others; bias and ReLU / ReLU6 are applied at the last slice's
# store. Each output is one chain of FMAs (generic x86: multiply-adds) over k in order, from 0, then
# + bias, then the activation (a partial sum stored and reloaded is the same float): the same
# floats on every tier that has FMA, whatever its tile shape or K slices.
#
# A tier's conv.pxi defines: SG_MR (rows of its main tile), sg_tile (its register tile: sg_passes
# on avx2 and avx512, its own on neon and generic), sg_half_tiles (avx512's 16-row tiles of narrow
# panels; 0 rows elsewhere), and for sg_pass (the x86 tiers' pass) SG_NV (vectors per row of a
# pass) and SG_ACC (its accumulators: the largest MR * NV).
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy, memset
from volvox._kernels.vx cimport vx_conv_shape
from volvox._kernels.codes cimport FN_NONE, FN_RELU6

cdef extern from *:
    void __builtin_prefetch(const void *addr, int rw, int locality) nogil

cdef enum:
    SG_NR = 32    # output features per packed panel
    SG_KC = 256   # most k of a panel slice: 32 KB of weights, in L1 beside a tile's rows


# ------------------------------------------------------------------------------------------------
# Window geometry, shared by the f32 and int8 convolutions (kernels/qconv.pxi uses these too).
# ------------------------------------------------------------------------------------------------
cdef inline void next_pixel(const vx_conv_shape *s, int64_t *b, int64_t *oh, int64_t *ow) noexcept nogil:
    """(b, oh, ow) of the next output pixel (im2col's walk: no divisions per pixel)."""
    ow[0] += 1
    if ow[0] < s.ow:
        return
    ow[0] = 0
    oh[0] += 1
    if oh[0] < s.oh:
        return
    oh[0] = 0
    b[0] += 1


cdef inline void valid_taps(const vx_conv_shape *s, int64_t oh, int64_t ow, int64_t *i0, int64_t *i1,
                            int64_t *j0, int64_t *j1) noexcept nogil:
    """The kernel taps of output pixel (oh, ow) that land inside the image: i in [*i0, *i1), j in
    [*j0, *j1); divisions only at the borders (interior pixels see every tap)."""
    cdef int64_t h0 = oh * s.sh - s.pt, w0 = ow * s.sw - s.pl
    i0[0] = 0 if h0 >= 0 else (-h0 + s.dh - 1) // s.dh
    if h0 + (s.kh - 1) * s.dh < s.h:
        i1[0] = s.kh
    else:
        i1[0] = 0 if h0 >= s.h else (s.h - 1 - h0) // s.dh + 1
    j0[0] = 0 if w0 >= 0 else (-w0 + s.dw - 1) // s.dw
    if w0 + (s.kw - 1) * s.dw < s.w:
        j1[0] = s.kw
    else:
        j1[0] = 0 if w0 >= s.w else (s.w - 1 - w0) // s.dw + 1


# ------------------------------------------------------------------------------------------------
# f32 GEMM
# ------------------------------------------------------------------------------------------------
cdef void sgemm_pack(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n, float *packed) noexcept nogil:
    """packed = W (n rows of K floats, w_stride bytes apart) in panels of SG_NR rows, [panel][k][32],
    zero padded."""
    cdef const float *rows[SG_NR]
    cdef float *pp
    cdef float *dst
    cdef int64_t k
    cdef int nr, j
    cdef int64_t p0 = 0
    while p0 < n:
        pp = packed + p0 * K                                        # (K, 32)
        nr = <int>(n - p0 if n - p0 < SG_NR else SG_NR)
        for j in range(nr):
            rows[j] = <const float *>(w + (p0 + j) * w_stride)
        # k outer: the panel is written in order; the 32 rows' current lines stay in L1
        for k in range(K):
            dst = pp + k * SG_NR
            for j in range(nr):
                dst[j] = rows[j][k]
            for j in range(nr, SG_NR):
                dst[j] = 0.0
        p0 += SG_NR


cdef inline float act_f32(const int act, float v) noexcept nogil:
    """v after the activation act (FN_NONE, FN_RELU, FN_RELU6); NaN becomes 0 under
    ReLU."""
    if act == FN_NONE:
        return v
    v = v if v > <float>0.0 else <float>0.0
    return <float>6.0 if act == FN_RELU6 and v > <float>6.0 else v


cdef inline vf act_vf(const int act, vf v) noexcept nogil:
    """act_f32 per lane (vf_max / vf_min give its NaN and signed-zero results: max(NaN, 0) = 0,
    max(-0, 0) = +0)."""
    if act != FN_NONE:
        v = vf_max(v, vf_zero())
    if act == FN_RELU6:
        v = vf_min(v, vf_set1(<float>6.0))
    return v


# A register tile's activation rows: row i's K values are `runs` runs of `run` floats, run r at
# a + i*lda + r*run_stride (a GEMM or im2col row's K slice: one run, kept a runtime count: see
# sgemm). The packed panel's k walks them in order. acc: 1 where the tile adds to the partial sums
# in y (an earlier K slice's), 0 where it starts from 0.
ctypedef struct sg_rows:
    const float *a
    int64_t lda, runs, run, run_stride
    int acc


cdef inline void sg_prefetch(const float *row) noexcept nogil:
    """Ask for a panel row (SG_NR floats, two cache lines) toward L2: sgemm_rows's first tile of a
    panel fetches the next panel's rows as it goes, so weights that other layers pushed out of the
    caches (a 7x7 map's 1x1 convs: 0.9-1.6 MB) arrive before their panel starts."""
    __builtin_prefetch(row, 0, 2)
    __builtin_prefetch(row + 16, 0, 2)


cdef inline void sg_pass(const int MR, const int NV, sg_rows A, const float *p, int nr, const float *bias,
                         const int act, float *y, int64_t ldy, const float *pf) noexcept nogil:
    """y (MR rows x nr <= NV*VL features, ldy apart) = act(bias + A's rows . the panel's columns
    p[0 .. NV*VL)) (p: column 0 of the pass in a packed panel, rows SG_NR apart), plus y's partial
    sums where A.acc (then the caller passes no bias and FN_NONE until the last slice); pf: another
    panel's rows to prefetch as the pass reads its own (NULL: none). MR * NV accumulators in
    registers: MR and NV are constants once inlined, and every loop over c then unrolls (one that
    did not would keep c in memory: the epilogue is two small nests, not one with branches)."""
    cdef vf c[SG_ACC]                                               # (MR, NV) accumulators
    cdef vf b[4]                                                    # (NV,) the panel's row k
    cdef vf bv[4]                                                   # (NV,) bias
    cdef vf_mask m[4]                                               # (NV,) lanes stored
    cdef vf av
    cdef const float *a
    cdef int64_t r, k
    cdef int i, j
    for j in range(NV):
        m[j] = vf_lanes(nr - j * VL if nr > j * VL else 0)          # the features of vector j
    if A.acc:
        for i in range(MR):
            for j in range(NV):
                c[i * NV + j] = vf_load_part(m[j], y + i * ldy + j * VL)
    else:
        for i in range(MR * NV):
            c[i] = vf_zero()
    for r in range(A.runs):
        a = A.a + r * A.run_stride
        for k in range(A.run):
            if pf != NULL:
                sg_prefetch(pf + SG_NR * (r * A.run + k))
            for j in range(NV):
                b[j] = vf_load(p + SG_NR * k + j * VL)
            for i in range(MR):
                av = vf_set1(a[i * A.lda + k])
                for j in range(NV):
                    c[i * NV + j] = vf_fma(av, b[j], c[i * NV + j])
        p += SG_NR * A.run
    for j in range(NV):
        bv[j] = vf_load_part(m[j], bias + j * VL) if bias != NULL else vf_zero()
    if VF_MASK_STORES or nr != NV * VL:                             # lane stores: as cheap here, or needed
        for i in range(MR):
            for j in range(NV):
                vf_store_part(m[j], y + i * ldy + j * VL, act_vf(act, vf_add(c[i * NV + j], bv[j])))
    else:                                                           # every feature: whole vectors
        for i in range(MR):
            for j in range(NV):
                vf_store(y + i * ldy + j * VL, act_vf(act, vf_add(c[i * NV + j], bv[j])))


cdef inline void sg_passes(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act,
                           float *y, int64_t ldy, const float *pf) noexcept nogil:
    """sg_tile of the vector tiers: MR rows x nr <= SG_NR features as passes of SG_NV vectors (one
    pass where that is the whole panel, avx512; two of 16 features on avx2 and neon, the second
    only for nr > 16 and without the prefetch)."""
    sg_pass(MR, SG_NV, A, p, nr if nr < SG_NV * VL else SG_NV * VL, bias, act, y, ldy, pf)
    if SG_NV * VL < SG_NR and nr > SG_NV * VL:
        sg_pass(MR, SG_NV, A, p + SG_NV * VL, nr - SG_NV * VL, bias + SG_NV * VL if bias != NULL else NULL, act,
                y + SG_NV * VL, ldy, NULL)


cdef inline void sg_rows_of_slice(sg_rows A, const float *pp, int nr, const float *bp, int act, float *y,
                                  int64_t ldy, int64_t m, const float *nxt) noexcept nogil:
    """Rows 0 .. m-1 (A's, y's) times one K slice of a panel (pp: its row k0, (kc, 32)); nxt: the
    slice after it, prefetched by the first tile (NULL: none)."""
    cdef const float *a = A.a
    cdef float *yt
    cdef int64_t i0, rows, tiles, full, short_tiles, t, rest
    i0 = sg_half_tiles(A, pp, nr, bp, act, y, ldy, m)
    # rows that fill SG_MR - 1 row tiles once the full ones are done end in those, not in a
    # short tile: 49 rows (a 7x7 map) as 7 tiles of 7, not 6 of 8 and a 1-row tile whose two
    # FMA chains wait on each other
    rows = m - i0
    tiles = (rows + SG_MR - 1) // SG_MR
    full = rows - (SG_MR - 1) * tiles
    short_tiles = tiles - full if rows % SG_MR != 0 and full >= 0 else 0
    while i0 + SG_MR <= m - short_tiles * (SG_MR - 1):
        A.a = a + i0 * A.lda
        sg_tile(SG_MR, A, pp, nr, bp, act, y + i0 * ldy, ldy, nxt if i0 == 0 else NULL)
        i0 += SG_MR
    for t in range(short_tiles):
        A.a = a + i0 * A.lda
        sg_tile(SG_MR - 1, A, pp, nr, bp, act, y + i0 * ldy, ldy, nxt if i0 == 0 else NULL)
        i0 += SG_MR - 1
    A.a = a + i0 * A.lda
    yt = y + i0 * ldy
    rest = m - i0                                                   # 0 .. SG_MR - 1 rows
    if SG_MR > 7:                                                   # (a constant: the tier's cases only)
        if rest == 7:
            sg_tile(7, A, pp, nr, bp, act, yt, ldy, NULL)
        elif rest == 6:
            sg_tile(6, A, pp, nr, bp, act, yt, ldy, NULL)
    if SG_MR > 5:
        if rest == 5:
            sg_tile(5, A, pp, nr, bp, act, yt, ldy, NULL)
        elif rest == 4:
            sg_tile(4, A, pp, nr, bp, act, yt, ldy, NULL)
    if rest == 3:
        sg_tile(3, A, pp, nr, bp, act, yt, ldy, NULL)
    elif rest == 2:
        sg_tile(2, A, pp, nr, bp, act, yt, ldy, NULL)
    elif rest == 1:
        sg_tile(1, A, pp, nr, bp, act, yt, ldy, NULL)


cdef void sgemm_rows(int64_t K, const float *packed, int64_t n, sg_rows A, int64_t m, float *y, int64_t ldy,
                     const float *bias, int act) noexcept nogil:
    """y[i*ldy + r] = act(bias[r] + sum_k A row i's k-th value * W[r][k]) for i < m, r < n; W packed
    with K per row (A: one run of K, or none for K = 0). Panel by panel, K slice by K slice, every
    row over each slice; bias and act on the last slice."""
    cdef const float *a = A.a
    cdef const float *pp
    cdef const float *nxt
    cdef int64_t p0 = 0, slices = (K + SG_KC - 1) // SG_KC if K > SG_KC else 1
    cdef int64_t kc = (K + slices - 1) // slices, k0                # equal slices of at most SG_KC
    cdef int nr
    while p0 < n:
        nr = <int>(n - p0 if n - p0 < SG_NR else SG_NR)
        k0 = 0
        while True:
            pp = packed + p0 * K + k0 * SG_NR                       # (kc, 32): the panel's slice
            A.a = a + k0
            A.run = kc if kc < K - k0 else K - k0
            A.acc = k0 > 0
            nxt = pp + SG_NR * A.run if p0 + SG_NR < n or k0 + A.run < K else NULL  # the next slice
            if k0 + A.run >= K:                                     # the last slice: bias, act
                sg_rows_of_slice(A, pp, nr, bias + p0 if bias != NULL else NULL, act, y + p0, ldy, m, nxt)
                break
            sg_rows_of_slice(A, pp, nr, NULL, FN_NONE, y + p0, ldy, m, nxt)
            k0 += A.run
        p0 += SG_NR


cdef void sgemm(int64_t K, const float *packed, int64_t n, const float *a, int64_t lda, int64_t m, float *y,
                int64_t ldy, const float *bias, int act) noexcept nogil:
    """y[i*ldy + r] = act(bias[r] + sum_k a[i*lda + k] * W[r][k]) for i < m, r < n; W packed."""
    cdef sg_rows A
    A.a = a
    A.lda = lda
    A.runs = 1 if K > 0 else 0     # (K = 0: no run. Not the constant 1: GCC's copy of sgemm_rows for
                                   # sgemm then kept the avx512 tile's output rows in registers and
                                   # reloaded its input rows from the stack in the k loop)
    A.run = K
    A.run_stride = 0
    A.acc = 0
    sgemm_rows(K, packed, n, A, m, y, ldy, bias, act)



# ------------------------------------------------------------------------------------------------
# f32 convolution: im2col rows, the packed GEMM over them.
# ------------------------------------------------------------------------------------------------
cdef void im2col_f32(const vx_conv_shape *s, const float *x, int64_t p0, int64_t np, float *cols) noexcept nogil:
    """cols[q * KK + (i*kw + j)*C + c] = x at tap (i, j) of output pixel p0 + q (0 in the padding)."""
    cdef int64_t C = s.c, KK = s.kh * s.kw * C
    cdef int64_t b = p0 // (s.oh * s.ow), oh = p0 % (s.oh * s.ow) // s.ow, ow = p0 % s.ow  # pixel p0 + q
    cdef int64_t q, i, j, iw0, ih, iw
    cdef bint row_inside
    cdef float *dst
    for q in range(np):
        iw0 = ow * s.sw - s.pl
        # a kernel row wholly inside the image (no column dilation) is one run of kw*C floats
        row_inside = s.dw == 1 and iw0 >= 0 and iw0 + s.kw <= s.w
        dst = cols + q * KK                                         # (kh, kw, C)
        for i in range(s.kh):
            ih = oh * s.sh - s.pt + i * s.dh
            if row_inside and ih >= 0 and ih < s.h:
                memcpy(dst, x + ((b * s.h + ih) * s.w + iw0) * C, <size_t>(s.kw * C) * sizeof(float))
                dst += s.kw * C
                continue
            for j in range(s.kw):
                iw = iw0 + j * s.dw
                if ih < 0 or ih >= s.h or iw < 0 or iw >= s.w:
                    memset(dst, 0, <size_t>C * sizeof(float))
                else:
                    memcpy(dst, x + ((b * s.h + ih) * s.w + iw) * C, <size_t>C * sizeof(float))
                dst += C
        next_pixel(s, &b, &oh, &ow)


cdef void conv_f32(const vx_conv_shape *s, const float *x, int64_t p0, int64_t np, const float *packed, int64_t n,
                   const float *bias, int act, float *cols, float *y, int64_t ldy) noexcept nogil:
    """Output pixels p0 .. p0+np-1 (flattened b, oh, ow) of a conv: y[q*ldy + r] = act(bias[r] + the
    pixel's window . W[r]) for r < n, W packed (kh*kw*C per row): the pixels' im2col rows in cols
    (np rows of kh*kw*C floats), then one GEMM over them: the convs conv_band_f32 does not take
    (column dilation, a stride wider than the kernel, 1x1 kernels). (Reading the unpadded input in
    place took more time: a row's border pixels and its last few went through GEMM calls of 1 to 7
    rows, each streaming all the weights; conv_band_f32 reads a padded copy instead.)"""
    cdef int64_t K = s.kh * s.kw * s.c
    im2col_f32(s, x, p0, np, cols)
    sgemm(K, packed, n, cols, K, np, y, ldy, bias, act)


# ------------------------------------------------------------------------------------------------
# f32 convolution by row bands: a band's input rows, zero padded, the packed GEMM reading them in place.
# ------------------------------------------------------------------------------------------------
cdef inline int64_t band_input_rows(const vx_conv_shape *s, int64_t rows) noexcept nogil:
    """Input rows (padding included) that `rows` consecutive output rows read."""
    return (rows - 1) * s.sh + (s.kh - 1) * s.dh + 1


cdef inline int64_t band_input_cols(const vx_conv_shape *s) noexcept nogil:
    """Input columns (padding included) an output row reads (unit column dilation)."""
    return (s.ow - 1) * s.sw + s.kw


cdef void pad_band_f32(const vx_conv_shape *s, const float *x, int64_t b, int64_t r0, int64_t rows,
                       float *band) noexcept nogil:
    """band (band_input_rows(rows), band_input_cols, C) = the input rows output rows r0 .. r0+rows-1
    of image b read, their columns from -pl on, 0 outside the image."""
    cdef int64_t C = s.c, wp = band_input_cols(s), iw0 = -s.pl, t, ih, lo, hi
    cdef float *dst
    lo = s.pl if s.pl < wp else wp                                  # columns left of the image
    hi = s.w + s.pl if s.w + s.pl < wp else wp                      # then columns inside it
    for t in range(band_input_rows(s, rows)):
        ih = r0 * s.sh - s.pt + t
        dst = band + t * wp * C                                     # (wp, C)
        if ih < 0 or ih >= s.h:
            memset(dst, 0, <size_t>(wp * C) * sizeof(float))
            continue
        memset(dst, 0, <size_t>(lo * C) * sizeof(float))
        memcpy(dst + lo * C, x + ((b * s.h + ih) * s.w + iw0 + lo) * C, <size_t>((hi - lo) * C) * sizeof(float))
        memset(dst + hi * C, 0, <size_t>((wp - hi) * C) * sizeof(float))


cdef void conv_band_f32(const vx_conv_shape *s, const float *x, int64_t b, int64_t r0, int64_t rows,
                        const float *packed, int64_t n, const float *bias, int act, float *band, float *y,
                        int64_t ldy) noexcept nogil:
    """Output rows r0 .. r0+rows-1 of image b of a conv with unit column dilation: y[(q*ow + j)*ldy + r]
    = act(bias[r] + the window of pixel (r0 + q, j) . W[r]) for r < n, W packed (kh*kw*C per row).
    The rows' input goes once into band (pad_band_f32); there each kernel row of a pixel's window is
    one run of kw*C floats, the next pixel's sw*C floats on, so the GEMM tiles read the band in place
    (no im2col rows). K runs in slices of whole kernel rows (or equal pieces of one, where a row
    exceeds SG_KC): a panel's slice stays in L1 while every output row of the band runs over it.
    Each output is the same chain of FMAs over k in order as conv_f32's."""
    cdef int64_t C = s.c, run = s.kw * C, K = s.kh * run, ld = band_input_cols(s) * C
    cdef int64_t per = SG_KC // run if run <= SG_KC else 1          # kernel rows per slice
    cdef int64_t slices = (s.kh + per - 1) // per, pieces = (run + SG_KC - 1) // SG_KC
    cdef int64_t piece = (run + pieces - 1) // pieces                # floats of a kernel row per slice
    cdef int64_t p0 = 0, i0, e0, q, k0
    cdef const float *pp
    cdef const float *nxt
    cdef const float *bp
    cdef int nr, fn
    cdef sg_rows A
    per = (s.kh + slices - 1) // slices                             # equal slices
    pad_band_f32(s, x, b, r0, rows, band)
    A.lda = s.sw * C
    A.run_stride = s.dh * ld
    while p0 < n:
        nr = <int>(n - p0 if n - p0 < SG_NR else SG_NR)
        i0 = 0
        while i0 < s.kh:
            A.runs = per if per < s.kh - i0 else s.kh - i0
            e0 = 0
            while e0 < run:
                A.run = piece if piece < run - e0 else run - e0
                k0 = i0 * run + e0
                A.acc = k0 > 0
                pp = packed + p0 * K + k0 * SG_NR                   # (A.runs * A.run, 32): the slice
                nxt = pp + SG_NR * A.runs * A.run if p0 + SG_NR < n or k0 + A.runs * A.run < K else NULL
                bp = NULL
                fn = FN_NONE
                if k0 + A.runs * A.run >= K:                        # the last slice: bias, act
                    bp = bias + p0 if bias != NULL else NULL
                    fn = act
                for q in range(rows):
                    A.a = band + (q * s.sh + i0 * s.dh) * ld + e0   # pixel 0's run of kernel row i0
                    sg_rows_of_slice(A, pp, nr, bp, fn, y + q * s.ow * ldy + p0, ldy, s.ow, nxt if q == 0 else NULL)
                e0 += A.run
            i0 += A.runs
        p0 += SG_NR


# ------------------------------------------------------------------------------------------------
# Depthwise f32 (multiplier 1)
# ------------------------------------------------------------------------------------------------
cdef inline void dwf_block(const int PX, const int CV, const int KW, vf_mask k, int64_t c, const vx_conv_shape *s,
                           const float *xp, int64_t ldx, const float *w, const float *bias, int act, int64_t i0,
                           int64_t i1, int64_t j0, int64_t j1, float *yo) noexcept nogil:
    """Channels c .. c + CV*VL (the last vector's lanes k) of output pixels ow..ow+PX-1 of a
    depthwise row (PX = 1 with CV <= 4, or PX <= 4 with CV <= 2): PX*CV independent FMA chains,
    each summing its taps in row-major order from the bias. The chains are named variables
    a<pixel><vector>, not an array: GCC keeps a function with an array of vectors out of its
    callers (its stack frame), and then the array in memory. ldx: floats from one input pixel to
    the next. KW > 0 (stride 1, dilation 1): every pixel sees all KW (= s.kw) column taps, a
    constant the compiler unrolls, so that the taps of neighbouring pixels on one input column
    (pixel p's tap j, pixel p + 1's tap j - 1) are one load: a tap row of PX pixels loads
    PX + KW - 1 input columns, not PX * KW; KW = 0: columns j0..j1-1."""
    cdef int64_t C = s.c, px = ldx if KW > 0 else s.sw * ldx
    cdef int64_t x_row = s.dh * s.w * ldx, x_col = ldx if KW > 0 else s.dw * ldx  # tap (i, j) to (i + 1, j) / (i, j + 1)
    cdef int64_t w_row = s.kw * C                               # floats from tap (i, j)'s weights to (i + 1, j)'s
    cdef int64_t jb = 0 if KW > 0 else j0, je = KW if KW > 0 else j1
    cdef const float *xi = xp + i0 * x_row + jb * x_col + c   # (C,) tap (i, jb) of pixel ow, channel c on
    cdef const float *wi = w + (i0 * s.kw + jb) * C + c       # (C,) its weights
    cdef vf_mask k0 = k if CV == 1 else vf_lanes(VL)               # the vectors' lanes: the last one's k
    cdef vf_mask k1 = k if CV == 2 else vf_lanes(VL)
    cdef vf_mask k2 = k if CV == 3 else vf_lanes(VL)
    cdef vf_mask k3 = k
    cdef vf a00, a01, a02, a03, a10, a11, a20, a21, a30, a31, w0, w1, w2, w3
    cdef const float *wr
    cdef const float *xr
    cdef int64_t i, j
    a00 = vf_load_part(k0, bias + c) if bias != NULL else vf_zero()
    a10 = a20 = a30 = a00
    if CV > 1:
        a01 = vf_load_part(k1, bias + c + VL) if bias != NULL else vf_zero()
        a11 = a21 = a31 = a01
    if CV > 2:
        a02 = vf_load_part(k2, bias + c + 2 * VL) if bias != NULL else vf_zero()
    if CV > 3:
        a03 = vf_load_part(k3, bias + c + 3 * VL) if bias != NULL else vf_zero()
    for i in range(i0, i1):
        for j in range(jb, je):
            xr = xi + (j - jb) * x_col
            wr = wi + (j - jb) * C
            w0 = vf_load_part(k0, wr)
            a00 = vf_fma(vf_load_part(k0, xr), w0, a00)
            if PX > 1:
                a10 = vf_fma(vf_load_part(k0, xr + px), w0, a10)
            if PX > 2:
                a20 = vf_fma(vf_load_part(k0, xr + 2 * px), w0, a20)
            if PX > 3:
                a30 = vf_fma(vf_load_part(k0, xr + 3 * px), w0, a30)
            if CV > 1:
                w1 = vf_load_part(k1, wr + VL)
                a01 = vf_fma(vf_load_part(k1, xr + VL), w1, a01)
                if PX > 1:
                    a11 = vf_fma(vf_load_part(k1, xr + px + VL), w1, a11)
                if PX > 2:
                    a21 = vf_fma(vf_load_part(k1, xr + 2 * px + VL), w1, a21)
                if PX > 3:
                    a31 = vf_fma(vf_load_part(k1, xr + 3 * px + VL), w1, a31)
            if CV > 2:
                w2 = vf_load_part(k2, wr + 2 * VL)
                a02 = vf_fma(vf_load_part(k2, xr + 2 * VL), w2, a02)
            if CV > 3:
                w3 = vf_load_part(k3, wr + 3 * VL)
                a03 = vf_fma(vf_load_part(k3, xr + 3 * VL), w3, a03)
        xi += x_row
        wi += w_row
    yo += c
    vf_store_part(k0, yo, act_vf(act, a00))
    if PX > 1:
        vf_store_part(k0, yo + C, act_vf(act, a10))
    if PX > 2:
        vf_store_part(k0, yo + 2 * C, act_vf(act, a20))
    if PX > 3:
        vf_store_part(k0, yo + 3 * C, act_vf(act, a30))
    if CV > 1:
        vf_store_part(k1, yo + VL, act_vf(act, a01))
        if PX > 1:
            vf_store_part(k1, yo + C + VL, act_vf(act, a11))
        if PX > 2:
            vf_store_part(k1, yo + 2 * C + VL, act_vf(act, a21))
        if PX > 3:
            vf_store_part(k1, yo + 3 * C + VL, act_vf(act, a31))
    if CV > 2:
        vf_store_part(k2, yo + 2 * VL, act_vf(act, a02))
    if CV > 3:
        vf_store_part(k3, yo + 3 * VL, act_vf(act, a03))


cdef inline void dwf_pixels(const int PX, const int KW, const vx_conv_shape *s, const float *xp, int64_t ldx,
                            const float *w, const float *bias, int act, int64_t i0, int64_t i1, int64_t j0,
                            int64_t j1, float *yo) noexcept nogil:
    """Output pixels ow..ow+PX-1 (PX > 1: all see every column tap) of a depthwise row. xp: tap
    (0, 0) of pixel ow; yo: its output; KW as dwf_block's. One pixel runs 4 channel vectors at a
    time: its chains would otherwise wait on each other's FMA latency (an edge pixel of a 7x7 map:
    1.6x XNNPACK)."""
    cdef int64_t C = s.c, c = 0
    if PX == 1:
        while c + 4 * VL <= C:
            dwf_block(1, 4, KW, vf_lanes(VL), c, s, xp, ldx, w, bias, act, i0, i1, j0, j1, yo)
            c += 4 * VL
    else:
        while c + 2 * VL <= C:
            dwf_block(PX, 2, KW, vf_lanes(VL), c, s, xp, ldx, w, bias, act, i0, i1, j0, j1, yo)
            c += 2 * VL
    while c < C:
        dwf_block(PX, 1, KW, vf_lanes(C - c), c, s, xp, ldx, w, bias, act, i0, i1, j0, j1, yo)
        c += VL


cdef void dwconv_f32(const vx_conv_shape *s, const float *x, int64_t ldx, const float *w, const float *bias, int act,
                     int64_t item, float *y) noexcept nogil:
    """Depthwise (multiplier 1) output row `item` = b * OH + oh into y (OW, C), that row's own
    buffer (the output's row, or a scratch row). x: (n, h, w) pixels ldx floats apart (C, or more
    when x is a channel slice of a wider tensor); w: (kh*kw, C). Vector tiers: interior pixels go
    up to 4 at a time (dwf_pixels); generic (VL = 1): one channel at a time, its taps in order."""
    cdef int64_t C = s.c, b = item // s.oh, oh = item % s.oh
    cdef int64_t ow = 0, i0, i1, j0, j1, e0, e1, f0, f1, c, i, j
    cdef const float *xp
    cdef float *yo
    cdef float acc
    cdef int run
    cdef bint fixed
    while ow < s.ow:
        valid_taps(s, oh, ow, &i0, &i1, &j0, &j1)
        xp = x + ((b * s.h + oh * s.sh - s.pt) * s.w + ow * s.sw - s.pl) * ldx  # tap (0, 0)
        yo = y + ow * C                                             # (C,)
        if VL > 1:
            run = 1                                                 # pixels from ow seeing every column tap
            while j0 == 0 and j1 == s.kw and run < 4 and ow + run < s.ow:
                valid_taps(s, oh, ow + run, &e0, &e1, &f0, &f1)
                if f1 != s.kw:
                    break
                run += 1
            fixed = run == 4 and s.sw == 1 and s.dw == 1          # a stride-1 interior run of 4
            if fixed and s.kw == 3:
                dwf_pixels(4, 3, s, xp, ldx, w, bias, act, i0, i1, j0, j1, yo)
            elif fixed and s.kw == 5:
                dwf_pixels(4, 5, s, xp, ldx, w, bias, act, i0, i1, j0, j1, yo)
            elif run == 4:
                dwf_pixels(4, 0, s, xp, ldx, w, bias, act, i0, i1, j0, j1, yo)
            elif run == 3:
                dwf_pixels(3, 0, s, xp, ldx, w, bias, act, i0, i1, j0, j1, yo)
            elif run == 2:
                dwf_pixels(2, 0, s, xp, ldx, w, bias, act, i0, i1, j0, j1, yo)
            else:
                dwf_pixels(1, 0, s, xp, ldx, w, bias, act, i0, i1, j0, j1, yo)
            ow += run
        else:
            for c in range(C):
                acc = bias[c] if bias != NULL else <float>0.0
                for i in range(i0, i1):
                    for j in range(j0, j1):
                        acc += xp[(i * s.dh * s.w + j * s.dw) * ldx + c] * w[(i * s.kw + j) * C + c]
                yo[c] = act_f32(act, acc)
            ow += 1


cdef void fill_conv(vx_table *t) noexcept:
    """The f32 entries of the conv table (the int8 ones: fill_qconv)."""
    cdef vx_conv_table *ct = <vx_conv_table *> t.conv
    ct.sgemm_pack = sgemm_pack
    ct.sgemm = sgemm
    ct.conv_f32 = conv_f32
    ct.conv_band_f32 = conv_band_f32
    ct.dwconv_f32 = dwconv_f32
