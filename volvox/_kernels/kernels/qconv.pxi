# qconv kernels: the bodies every tier shares (each tier's own microkernels: kernels/<tier>/qconv.pxi).
#
# int8 conv (TFLite's W8A8, per-output-channel requantization): activations are offset by +128 to
# u8 (im2col pads with zp_in + 128, rows padded to a multiple of 4 with 0), weights packed into
# panels of 16 channels [panel][k/4][16][4] (VNNI's vpdpbusd layout; 32-channel pairs of panels).
# Then
#     sum_k (x - zp_in) w = sum_k u w - (zp_in + 128) * sum_k w
# exactly in int32, and MultiplyByQuantizedMultiplier as ops/quantized.py's reference.
#
# What a tier supplies (kernels/<tier>/qconv.pxi), called by the bodies below:
#   requant_row_lanes    requant_row's channels it does in vector lanes (the rest: the scalar loop)
#   to_u8                the +128 offset of a run of bytes
#   im2col_u8_tier       the windows it lays out itself (avx512: narrow kernel rows)
#   qg_panel, qg_panel_prepare, qg_panel_pairs, qg_requant_tile, qg_tile
#                        the int8 GEMM's per-panel state, its register tile and requantization
#   qdw_pixels           a depthwise row's pixels from one output column on
#   qdwconv_tier         depthwise rows it does whole (avx512)
#   quantize_i8_lanes    quantize_i8's elements it does in vector lanes
from libc.math cimport fabsf, frexpf, isfinite, ldexpf
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memset
from volvox._kernels.vx cimport vx_conv_shape, vx_requant

cdef enum:
    QG_NR = 32        # channels per panel pair (two 16-channel panels)
    QG_PAIR_NR = 8    # channels of a dense int8 conv run two pixels per 16-lane vector
    QG_MR = 8         # rows of a GEMM tile's accumulators: acc is (QG_MR, QG_NR) int32
    QDW_CB = 64       # channels per block of the portable depthwise loop


# ------------------------------------------------------------------------------------------------
# Requantization
# ------------------------------------------------------------------------------------------------
cdef inline void requant_scalar(int r, int n, const int32_t *acc, int64_t corr, const int32_t *wsum,
                                const int32_t *bias, const int32_t *mult, const int32_t *shift,
                                const vx_requant *rq, int8_t *y) noexcept nogil:
    """requant_row's channels r .. n - 1, one at a time (the branch-free loop the compiler vectorizes)."""
    cdef int64_t v, sh, lsh, rsh, ab, t, st, high, mask, thr, q
    while r < n:
        v = <int64_t>acc[r] - (corr * wsum[r] if wsum != NULL else 0) + (bias[r] if bias != NULL else 0)
        sh = shift[r]
        lsh = sh if sh > 0 else 0
        rsh = 0 if sh > 0 else (-sh if -sh < 63 else 63)
        ab = <int64_t>((<uint64_t>v << lsh) * <uint64_t><int64_t>mult[r])
        t = ab + (<int64_t>1 << 30) + ((ab >> 63) & (1 - (<int64_t>1 << 31)))  # + nudge
        st = t >> 63                                                       # t / 2^31 toward zero
        high = ((((t ^ st) - st) >> 31) ^ st) - st
        mask = (<int64_t>1 << rsh) - 1                                     # RoundingDivideByPOT
        thr = (mask >> 1) - (high >> 63)
        q = (high >> rsh) + <int64_t>((high & mask) > thr) + rq.zp_out
        q = rq.lo if q < rq.lo else q
        y[r] = <int8_t>(rq.hi if q > rq.hi else q)
        r += 1


cdef void requant_row(int n, const int32_t *acc, int64_t corr, const int32_t *wsum, const vx_requant *rq,
                      int64_t c0, int8_t *y) noexcept nogil:
    """y[r] = clamp(MultiplyByQuantizedMultiplier(acc[r] - corr * wsum[r] + bias[r]) + zp_out, lo, hi)
    for r < n (channels c0 + r of rq; wsum may be NULL): TFLite's arithmetic on int64 as
    ops/quantized.py's reference, written without branches so the compiler vectorizes it (a tier's
    requant_row_lanes takes the channels its vector lanes do exactly: avx512 16 in int32 lanes where
    that is exact, else 8 in int64 lanes; neon 4 in int32 lanes, TFLite's own NEON form)."""
    cdef const int32_t *bias = rq.bias + c0 if rq.bias != NULL else NULL
    cdef const int32_t *mult = rq.mult + c0
    cdef const int32_t *shift = rq.shift + c0
    cdef int r = requant_row_lanes(n, acc, corr, wsum, bias, mult, shift, rq, y)
    requant_scalar(r, n, acc, corr, wsum, bias, mult, shift, rq, y)


# ------------------------------------------------------------------------------------------------
# Packing and im2col
# ------------------------------------------------------------------------------------------------
cdef void qgemm_pack(int64_t K, const int8_t *w, int64_t n, int8_t *packed, int32_t *wsum) noexcept nogil:
    """w (n, K) int8 -> panels [n/16][K4/4][16][4] (K4 = K rounded up to 4; zero padded, n rounded
    up to 32); wsum[r] = sum_k w[r][k]. A last panel of exactly 8 channels holds them twice (lane l:
    channel l % 8): qgemm then runs two pixels per vector there."""
    cdef int64_t K4 = (K + 3) & ~(<int64_t>3)
    cdef int64_t np = (n + QG_NR - 1) // QG_NR * QG_NR
    cdef int64_t doubled = n - QG_PAIR_NR if n % 16 == QG_PAIR_NR else -1  # first channel of such a panel
    cdef int64_t lanes = n + QG_PAIR_NR if doubled >= 0 else n
    cdef int64_t lane, r, k
    cdef int8_t *pp
    cdef int32_t s
    memset(packed, 0, <size_t>(np * K4))
    for lane in range(lanes):
        r = lane - QG_PAIR_NR if doubled >= 0 and lane >= n else lane
        pp = packed + (lane // 16) * 16 * K4 + (lane % 16) * 4      # (K4/4, 16, 4) from lane's column
        s = 0
        for k in range(K):
            pp[(k // 4) * 64 + (k % 4)] = w[r * K + k]
            s += w[r * K + k]
        wsum[r] = s


cdef inline void to_u8_loop(int64_t n, const int8_t *src, uint8_t *dst) noexcept nogil:
    """dst[c] = u8(src[c] + 128) for c < n: one loop the compiler vectorises (to_u8 of the tiers
    without masked byte loads)."""
    cdef int64_t c
    for c in range(n):
        dst[c] = <uint8_t>(src[c] ^ 0x80)


cdef void im2col_u8(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np, uint8_t pad_u8,
                    uint8_t *cols, int64_t ldc) noexcept nogil:
    """cols[q * ldc + (i*kw + j)*C + c] = u8(x + 128) at tap (i, j) of output pixel p0 + q, or pad_u8
    in the padding; columns KK..ldc-1 are 0. A 1x1 stride-1 unpadded conv's rows are the input's; a
    kernel row wholly inside the image (no column dilation) is one run of kw*C bytes."""
    cdef int64_t C = s.c, KK = s.kh * s.kw * C
    cdef int64_t q, i, j, c, iw0, ih, iw
    cdef bint row_inside
    cdef uint8_t *dst
    if s.kh == 1 and s.kw == 1 and s.sh == 1 and s.sw == 1 and s.pt == 0 and s.pl == 0 and s.oh == s.h and \
            s.ow == s.w:
        if ldc == C:
            to_u8(np * C, x + p0 * C, cols)
            return
        for q in range(np):
            to_u8(C, x + (p0 + q) * C, cols + q * ldc)
            memset(cols + q * ldc + C, 0, <size_t>(ldc - C))
        return
    cdef int64_t b = p0 // (s.oh * s.ow), oh = p0 % (s.oh * s.ow) // s.ow, ow = p0 % s.ow  # pixel p0 + q
    if im2col_u8_tier(s, x, p0, np, pad_u8, cols, ldc):
        return
    for q in range(np):
        iw0 = ow * s.sw - s.pl
        row_inside = s.dw == 1 and iw0 >= 0 and iw0 + s.kw <= s.w
        dst = cols + q * ldc                                         # (kh, kw, C) then 0s
        for i in range(s.kh):
            ih = oh * s.sh - s.pt + i * s.dh
            if row_inside and ih >= 0 and ih < s.h:
                to_u8(s.kw * C, x + ((b * s.h + ih) * s.w + iw0) * C, dst)
                dst += s.kw * C
                continue
            for j in range(s.kw):
                iw = iw0 + j * s.dw
                if ih < 0 or ih >= s.h or iw < 0 or iw >= s.w:
                    memset(dst, pad_u8, <size_t>C)
                else:
                    to_u8(C, x + ((b * s.h + ih) * s.w + iw) * C, dst)
                dst += C
        for c in range(KK, ldc):                                     # at most 3 bytes: no memset call
            cols[q * ldc + c] = 0
        next_pixel(s, &b, &oh, &ow)


# ------------------------------------------------------------------------------------------------
# The int8 GEMM
# ------------------------------------------------------------------------------------------------
cdef void qgemm(int64_t K4, const int8_t *packed, const int32_t *wsum, int64_t n, const uint8_t *a,
                int64_t lda, int64_t m, const vx_requant *rq, int8_t *y, int64_t ldy) noexcept nogil:
    """y[i*ldy + r] = requant(sum_k (x - zp_in) w[r][k] + bias[r]) for i < m, r < n, from u8 rows a
    (im2col_u8) and qgemm_pack's panels. Per panel pair, the tier prepares its requantization
    (qg_panel_prepare: avx512 in registers, its sums starting from the bias), may run the whole
    panel itself (qg_panel_pairs: avx512's doubled 8-channel panel), then register tiles of QG_MR
    rows are requantized by the tier (qg_requant_tile) or by requant_row."""
    cdef int32_t acc[QG_MR * QG_NR]                                  # (QG_MR, QG_NR)
    cdef int64_t corr = <int64_t>rq.zp_in + 128
    cdef vx_requant unbiased = rq[0]                                 # for sums that start from the bias
    unbiased.bias = NULL
    cdef qg_panel panel
    cdef int32_t first[QG_NR]                                        # (QG_NR,) where a tier's tiles may start
    cdef int64_t p0, i0
    cdef int nr, mr, i
    cdef const int8_t *pp
    cdef const int32_t *init
    cdef const int32_t *tile_init
    p0 = 0
    while p0 < n:
        pp = packed + p0 * K4
        nr = <int>(n - p0 if n - p0 < QG_NR else QG_NR)
        # init: what the sums start from as requant_row sees them (NULL: 0, else the bias);
        # tile_init: what the tier's qg_tile starts from (init, plus the tier's own offsets)
        init = qg_panel_prepare(&panel, K4, pp, wsum, rq, p0, nr, first, &tile_init)
        if qg_panel_pairs(&panel, K4, pp, nr, a, lda, m, y + p0, ldy):
            p0 += QG_NR
            continue
        i0 = 0
        while i0 < m:
            mr = <int>(m - i0 if m - i0 < QG_MR else QG_MR)
            if nr > 16:
                if mr == QG_MR:
                    qg_tile(QG_MR, 2, K4, a + i0 * lda, lda, pp, tile_init, acc)
                else:
                    qg_tile(mr, 2, K4, a + i0 * lda, lda, pp, tile_init, acc)
            elif mr == QG_MR:
                qg_tile(QG_MR, 1, K4, a + i0 * lda, lda, pp, tile_init, acc)
            else:
                qg_tile(mr, 1, K4, a + i0 * lda, lda, pp, tile_init, acc)
            i = qg_requant_tile(&panel, acc, nr, mr, y + i0 * ldy + p0, ldy)
            while i < mr:  # (a tiled panel's last rows: their sums hold the bias)
                requant_row(nr, acc + i * QG_NR, corr, wsum + p0 if wsum != NULL else NULL,
                            <const vx_requant *>&unbiased if init != NULL else rq, p0, y + (i0 + i) * ldy + p0)
                i += 1
            i0 += QG_MR
        p0 += QG_NR


# ------------------------------------------------------------------------------------------------
# Depthwise int8
# ------------------------------------------------------------------------------------------------
cdef inline void qdw_pixel_loop(const vx_conv_shape *s, const int8_t *xp, const int16_t *w,
                                const vx_requant *rq, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                int8_t *yo) noexcept nogil:
    """One depthwise output pixel in plain C, QDW_CB channels at a time (the tiers without int8
    depthwise vectors). xp: its tap (0, 0); yo: its C outputs."""
    cdef int64_t C = s.c, c0, i, j
    cdef int32_t acc[QDW_CB]
    cdef int cn, c
    cdef const int8_t *xr
    cdef const int16_t *wr
    c0 = 0
    while c0 < C:
        cn = <int>(C - c0 if C - c0 < QDW_CB else QDW_CB)
        memset(acc, 0, sizeof(acc))
        for i in range(i0, i1):
            for j in range(j0, j1):
                xr = xp + (i * s.dh * s.w + j * s.dw) * C + c0
                wr = w + (i * s.kw + j) * C + c0
                for c in range(cn):
                    acc[c] += (<int32_t>xr[c] - rq.zp_in) * <int32_t>wr[c]
        requant_row(cn, acc, 0, NULL, rq, c0, yo + c0)
        c0 += QDW_CB


cdef void qdwconv_row(const vx_conv_shape *s, const int8_t *x, const int16_t *w, const vx_requant *rq,
                      int64_t item, int8_t *y) noexcept nogil:
    """Depthwise int8 (multiplier 1) output row `item` = b * OH + oh into y (OW, C), that row's own
    buffer (the output's row, or a scratch row). w: (kh*kw, C) int16. Padding taps contribute
    (zp_in - zp_in) * w = 0 and are skipped; a tier's qdw_pixels may take interior pixels 4 at a time."""
    cdef int64_t C = s.c, b = item // s.oh, oh = item % s.oh
    cdef int64_t ow = 0, i0, i1, j0, j1
    cdef const int8_t *xp
    while ow < s.ow:
        valid_taps(s, oh, ow, &i0, &i1, &j0, &j1)
        xp = x + ((b * s.h + oh * s.sh - s.pt) * s.w + ow * s.sw - s.pl) * C  # tap (0, 0)
        ow += qdw_pixels(s, xp, w, rq, oh, ow, i0, i1, j0, j1, y + ow * C)


cdef void qdwconv(const vx_conv_shape *s, const int8_t *x, const int16_t *w, const vx_requant *rq,
                  int64_t item, int64_t rows, int8_t *y) noexcept nogil:
    """Depthwise int8 output rows item .. item + rows - 1 into y (rows, OW, C)."""
    cdef int64_t r
    if qdwconv_tier(s, x, w, rq, item, rows, y):
        return
    for r in range(rows):
        qdwconv_row(s, x, w, rq, item + r, y + r * s.ow * s.c)


# ------------------------------------------------------------------------------------------------
# Quantization of float activations
# ------------------------------------------------------------------------------------------------
cdef void quantize_i8(int64_t n, const float *x, float scale, int32_t zp, int8_t *y) noexcept nogil:
    """y[i] = clamp(round_half_away(x[i] / scale) + zp) as ops/quantized.py's reference (numpy's
    float32 division, then its int64 cast on x86), in float32 / int32 lanes (the loop vectorises):
    for |v| < 2^31 the halves-away rounding is trunc(|v|) + (|v| - trunc(|v|) >= 0.5), both exact
    in float32 (|v| + 0.5 is not); beyond that q saturates to the int8 range by sign, and NaN or
    |v| >= 2^63 (INT64_MIN from round_away_i64, plus zp with numpy's wrap) to -128 when zp >= 0,
    else 127. A power-of-two scale (the person detector's 1.0) multiplies by its reciprocal: the
    same real quotient, so the same float. A tier's quantize_i8_lanes may take whole vectors first
    (avx512: in fixed point)."""
    cdef int8_t wild = -128 if zp >= 0 else 127
    cdef int e
    # 1 / scale when exact
    cdef float inv = ldexpf(<float>1.0, 1 - e) if frexpf(scale, &e) == <float>0.5 else <float>0.0
    cdef bint pow2 = inv != <float>0.0 and isfinite(inv) and inv * scale == <float>1.0
    cdef int64_t i = quantize_i8_lanes(n, x, scale, zp, inv, pow2, wild, y)
    cdef float v, av, a
    cdef bint small
    cdef int32_t t, r, q
    cdef int8_t big
    while i < n:
        v = x[i] * inv if pow2 else x[i] / scale
        av = fabsf(v)
        small = av < <float>2147483648.0                             # false for NaN
        a = av if small else <float>0.0
        t = <int32_t>a
        r = t + <int32_t>(a - <float>t >= <float>0.5)
        q = (-r if v < <float>0.0 else r) + zp
        q = -128 if q < -128 else (127 if q > 127 else q)
        big = (127 if v > <float>0.0 else -128) if av < <float>9223372036854775808.0 else wild
        y[i] = <int8_t>q if small else big
        i += 1


cdef void fill_qconv(vx_table *t) noexcept:
    cdef vx_conv_table *conv = <vx_conv_table *>t.conv              # the tier's conv table (tier.pxi)
    conv.qgemm_pack = qgemm_pack
    conv.im2col_u8 = im2col_u8
    conv.qgemm = qgemm
    conv.qdwconv = qdwconv
    conv.quantize_i8 = quantize_i8
