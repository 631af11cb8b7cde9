# The avx512 tier's own qconv microkernels (kernels/qconv.pxi has the shared bodies): requantization
# in int32 / int64 lanes (rq16: prepared once per channel block, applied in registers), the int8
# GEMM tile on VNNI's vpdpbusd, the doubled 8-channel panel two pixels per vector, masked im2col
# rows, the depthwise rows on vpdpwssd, and quantize_i8 in fixed point.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, INT32_MAX, INT32_MIN
from libc.string cimport memcpy
from volvox._kernels.vx cimport vx_conv_shape, vx_requant

cdef extern from *:
    int qconv_ctz "__builtin_ctz" (unsigned int x) nogil

cdef enum:
    RQ16_LIMIT = 1 << 30  # the largest accumulator bound rq16_prepare takes
    QDW_MAX_TAPS = 64     # larger depthwise kernels take qdwconv_row's portable loop
    QDW_COLUMNS = 9       # qdw_sums_row's widened input columns, SW * 3 + KW for (SW, KW) <= (2, 3)


# ------------------------------------------------------------------------------------------------
# Requantization
# ------------------------------------------------------------------------------------------------
cdef inline void requant8_i64(__mmask8 k, const int32_t *acc, int64_t corr, const int32_t *wsum, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, const vx_requant *rq,
                              int8_t *y) noexcept nogil:
    """The requantization of up to 8 channels (lanes k) in int64 lanes, the same steps as
    requant_row's scalar loop."""
    cdef __m512i one = _mm512_set1_epi64(1), zero = _mm512_setzero_si512()
    cdef __m512i v = _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, acc))
    if wsum != NULL:
        v = _mm512_sub_epi64(v, _mm512_mullo_epi64(_mm512_set1_epi64(corr),
                                                   _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, wsum))))
    if bias != NULL:
        v = _mm512_add_epi64(v, _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, bias)))
    cdef __m512i sh = _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, shift))
    cdef __m512i lsh = _mm512_max_epi64(sh, zero)
    cdef __m512i rsh = _mm512_min_epi64(_mm512_max_epi64(_mm512_sub_epi64(zero, sh), zero), _mm512_set1_epi64(63))
    cdef __m512i ab = _mm512_mullo_epi64(_mm512_sllv_epi64(v, lsh),
                                         _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, mult)))
    cdef __m512i t = _mm512_add_epi64(_mm512_add_epi64(ab, _mm512_set1_epi64(<int64_t>1 << 30)),
                                      _mm512_and_si512(_mm512_srai_epi64(ab, 63),
                                                       _mm512_set1_epi64(1 - (<int64_t>1 << 31))))
    cdef __m512i st = _mm512_srai_epi64(t, 63)
    cdef __m512i at = _mm512_srli_epi64(_mm512_sub_epi64(_mm512_xor_si512(t, st), st), 31)
    cdef __m512i high = _mm512_sub_epi64(_mm512_xor_si512(at, st), st)
    cdef __m512i mask = _mm512_sub_epi64(_mm512_sllv_epi64(one, rsh), one)
    cdef __m512i thr = _mm512_sub_epi64(_mm512_srli_epi64(mask, 1), _mm512_srai_epi64(high, 63))
    cdef __m512i q = _mm512_srav_epi64(high, rsh)
    q = _mm512_mask_add_epi64(q, _mm512_cmpgt_epi64_mask(_mm512_and_si512(high, mask), thr), q, one)
    q = _mm512_add_epi64(q, _mm512_set1_epi64(rq.zp_out))
    q = _mm512_min_epi64(_mm512_max_epi64(q, _mm512_set1_epi64(rq.lo)), _mm512_set1_epi64(rq.hi))
    _mm512_mask_cvtepi64_storeu_epi8(y, k, q)


cdef inline __m512i high31_i64(__m512i ab) noexcept nogil:
    """(ab + nudge) / 2^31 toward zero per int64 lane (ab: 64-bit products), as requant8_i64."""
    cdef __m512i t = _mm512_add_epi64(_mm512_add_epi64(ab, _mm512_set1_epi64(<int64_t>1 << 30)),
                                      _mm512_and_si512(_mm512_srai_epi64(ab, 63),
                                                       _mm512_set1_epi64(1 - (<int64_t>1 << 31))))
    cdef __m512i st = _mm512_srai_epi64(t, 63)
    return _mm512_sub_epi64(_mm512_xor_si512(_mm512_srli_epi64(_mm512_sub_epi64(_mm512_xor_si512(t, st), st), 31), st),
                            st)


cdef inline int requant16_i32(__mmask16 k, const int32_t *acc, const int32_t *bias, const int32_t *mult,
                              const int32_t *shift, const vx_requant *rq, int8_t *y) noexcept nogil:
    """The requantization of up to 16 channels (lanes k) in int32 lanes, TFLite's own int32 form:
    equal to the int64 one when every lane's acc + bias, and that << left shift, fit int32, the
    multiplier is not INT32_MIN (so the high half fits) and the right shift is at most 31. Returns
    0 without storing anything when a lane breaks those conditions."""
    cdef __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1)
    cdef __m512i a = _mm512_maskz_loadu_epi32(k, acc)
    cdef __m512i b = _mm512_maskz_loadu_epi32(k, bias) if bias != NULL else zero
    cdef __m512i v = _mm512_add_epi32(a, b)
    cdef __m512i sh = _mm512_maskz_loadu_epi32(k, shift)
    cdef __m512i lsh = _mm512_max_epi32(sh, zero)
    cdef __m512i rsh = _mm512_max_epi32(_mm512_sub_epi32(zero, sh), zero)
    cdef __m512i vl = _mm512_sllv_epi32(v, lsh)
    cdef __m512i m = _mm512_maskz_loadu_epi32(k, mult)
    cdef __mmask16 bad = _mm512_cmplt_epi32_mask(_mm512_and_si512(_mm512_xor_si512(a, v), _mm512_xor_si512(b, v)),
                                                 zero)
    bad |= _mm512_cmpneq_epi32_mask(_mm512_srav_epi32(vl, lsh), v)
    bad |= _mm512_cmplt_epi32_mask(sh, _mm512_set1_epi32(-31))      # rsh > 31, and INT32_MIN
    bad |= _mm512_cmpeq_epi32_mask(m, _mm512_set1_epi32(INT32_MIN))
    if bad & k:
        return 0
    cdef __m512i he = high31_i64(_mm512_mul_epi32(vl, m))            # even lanes, in the low halves
    cdef __m512i ho = high31_i64(_mm512_mul_epi32(_mm512_srli_epi64(vl, 32), _mm512_srli_epi64(m, 32)))
    cdef __m512i high = _mm512_mask_blend_epi32(0xAAAA, he, _mm512_slli_epi64(ho, 32))
    cdef __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, rsh), one)  # RoundingDivideByPOT
    cdef __m512i thr = _mm512_sub_epi32(_mm512_srli_epi32(mask, 1), _mm512_srai_epi32(high, 31))
    cdef __m512i q = _mm512_srav_epi32(high, rsh)
    q = _mm512_mask_add_epi32(q, _mm512_cmpgt_epi32_mask(_mm512_and_si512(high, mask), thr), q, one)
    # clamp(q + zp_out, lo, hi) without overflowing int32: clamp q to [lo - zp_out, hi - zp_out] first
    q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(rq.lo - rq.zp_out)),
                         _mm512_set1_epi32(rq.hi - rq.zp_out))
    _mm512_mask_cvtepi32_storeu_epi8(y, k, _mm512_add_epi32(q, _mm512_set1_epi32(rq.zp_out)))
    return 1


cdef inline int requant_row_lanes(int n, const int32_t *acc, int64_t corr, const int32_t *wsum,
                                  const int32_t *bias, const int32_t *mult, const int32_t *shift,
                                  const vx_requant *rq, int8_t *y) noexcept nogil:
    """All of requant_row's channels: 16 in int32 lanes where that is exact, else 8 in int64 lanes
    (returns the channels done, n or more)."""
    cdef int r = 0, h
    cdef __mmask16 k
    while r < n:
        k = 0xFFFF if n - r >= 16 else <__mmask16>((1u << (n - r)) - 1u)
        if wsum == NULL and requant16_i32(k, acc + r, bias + r if bias != NULL else NULL, mult + r, shift + r, rq,
                                          y + r):
            r += 16
            continue
        h = r
        while h < n and h < r + 16:
            requant8_i64(0xFF if n - h >= 8 else <__mmask8>((1u << (n - h)) - 1u), acc + h, corr,
                         wsum + h if wsum != NULL else NULL, bias + h if bias != NULL else NULL, mult + h, shift + h,
                         rq, y + h)
            h += 8
        r += 16
    return r


# requant_row for 16 lanes held in a register, prepared once per channel block: lane l requantizes
# channel c0 + l % nr (nr divides 16; nr < 16 tiles 16 / nr pixels of nr channels into one vector).
# rq16_prepare checks, for every |acc| <= acc_bound, that the steps below in int32 lanes equal
# requant_row's int64 ones, and returns 0 (use requant_row) when it cannot:
#   v = (acc + bias) << lsh                     |acc + bias| << lsh < 2^31: exact in int32
#   h = (v * mult + 2^30) >> 31                 SaturatingRoundingDoublingHighMul: its nudge and
#                                               division toward zero are this floor (mult != INT32_MIN;
#                                               64-bit products, |h| <= |v|)
#   q = (h + half - (h < 0 && rsh > 0)) >> rsh  RoundingDivideByPOT (half = 2^(rsh-1), rsh <= 31): the
#                                               sum wraps past 2^31 - 1 only for h >= 0, whose lanes
#                                               shift it as unsigned (a dead channel's bias near 2^30
#                                               and rsh = 31 reach that)
#   y = clamp(q + zp_out, lo, hi)               rq16_int8: the int8 pack saturates, so a clamp to
#                                               int8's own range is only that
ctypedef struct rq16:
    __m512i bias, lsh, mult, mult_odd, half, neg, rsh, zp, lo, hi
    int shifted       # some lane shifts left (else the shift is skipped)
    int wide          # some lane's h + half may pass 2^31 - 1 (else the unsigned shift is skipped)
    int clamp         # lo > -128 or hi < 127 (else the pack's saturation is the clamp)
    int biased        # the caller's sums started from bias (rq16_prepare: 0, the bias is added)


cdef inline int rq16_prepare(const vx_requant *rq, int64_t c0, int n, int nr, int64_t acc_bound,
                             rq16 *p) noexcept nogil:
    """Prepare p for channels c0 .. c0 + n - 1 (lane l: channel c0 + l % nr) and sums within
    +-acc_bound; 0 when the int32 lanes cannot equal requant_row for some such sum."""
    if acc_bound >= RQ16_LIMIT:
        return 0
    cdef __mmask16 k = <__mmask16>((1u << n) - 1u)
    cdef __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
    cdef __m512i idx = _mm512_and_si512(lane, _mm512_set1_epi32(nr - 1))  # l % nr
    cdef __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1)
    cdef __m512i bias = _mm512_permutexvar_epi32(idx, _mm512_maskz_loadu_epi32(k, rq.bias + c0)) \
        if rq.bias != NULL else zero
    cdef __m512i sh = _mm512_permutexvar_epi32(idx, _mm512_maskz_loadu_epi32(k, rq.shift + c0))
    cdef __m512i mult = _mm512_permutexvar_epi32(idx, _mm512_maskz_loadu_epi32(k, rq.mult + c0))
    cdef __m512i lsh = _mm512_max_epi32(sh, zero)
    cdef __m512i rsh = _mm512_max_epi32(_mm512_sub_epi32(zero, sh), zero)
    # |bias| + acc_bound <= (2^31 - 1) >> lsh (lsh > 30: nothing fits)
    cdef __m512i room = _mm512_sub_epi32(_mm512_srlv_epi32(_mm512_set1_epi32(INT32_MAX), lsh),
                                         _mm512_set1_epi32(<int32_t>acc_bound))
    cdef __mmask16 bad = _mm512_cmpgt_epi32_mask(_mm512_abs_epi32(bias), room)
    bad |= _mm512_cmpeq_epi32_mask(bias, _mm512_set1_epi32(INT32_MIN))
    bad |= _mm512_cmpeq_epi32_mask(mult, _mm512_set1_epi32(INT32_MIN))
    bad |= _mm512_cmpgt_epi32_mask(rsh, _mm512_set1_epi32(31))
    if bad:
        return 0
    # |h| <= |v| <= (|bias| + acc_bound) << lsh: "wide" when that plus half passes 2^31 - 1; with no
    # right shift, q + zp_out must stay in int32 too (with one, |q| < 2^30 + 2^29)
    cdef __m512i vmax = _mm512_sllv_epi32(_mm512_add_epi32(_mm512_abs_epi32(bias),
                                                           _mm512_set1_epi32(<int32_t>acc_bound)), lsh)
    if _mm512_cmpeq_epi32_mask(rsh, zero) & _mm512_cmpgt_epi32_mask(vmax, _mm512_set1_epi32(INT32_MAX - 128)):
        return 0
    cdef __m512i half = _mm512_srli_epi32(_mm512_sllv_epi32(one, rsh), 1)
    p.wide = _mm512_cmpgt_epi32_mask(vmax, _mm512_sub_epi32(_mm512_set1_epi32(INT32_MAX), half)) != 0
    p.shifted = _mm512_cmpgt_epi32_mask(lsh, zero) != 0
    p.bias = bias
    p.lsh = lsh
    p.mult = mult
    p.mult_odd = _mm512_srli_epi64(mult, 32)
    p.rsh = rsh
    p.half = half
    p.neg = _mm512_maskz_mov_epi32(_mm512_cmpgt_epi32_mask(rsh, zero), _mm512_set1_epi32(-1))
    p.zp = _mm512_set1_epi32(rq.zp_out)
    p.lo = _mm512_set1_epi32(rq.lo)
    p.hi = _mm512_set1_epi32(rq.hi)
    p.clamp = rq.lo > -128 or rq.hi < 127
    p.biased = 0
    return 1


cdef inline __m512i rq16_apply(const rq16 *p, __m512i acc) noexcept nogil:
    """The requantized int32 lanes of acc (within the prepared acc_bound), clamped once the int8
    pack saturates them (rq16_int8, rq16_store)."""
    cdef __m512i sum = acc if p.biased else _mm512_add_epi32(acc, p.bias)
    cdef __m512i v = _mm512_sllv_epi32(sum, p.lsh) if p.shifted else sum
    cdef __m512i r30 = _mm512_set1_epi64(<int64_t>1 << 30)
    # bits 31..62 of each 64-bit product + 2^30: the low half of even lanes >> 31, the high half of
    # odd lanes << 1
    cdef __m512i he = _mm512_srli_epi64(_mm512_add_epi64(_mm512_mul_epi32(v, p.mult), r30), 31)
    cdef __m512i ho = _mm512_slli_epi64(_mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(v, 32), p.mult_odd),
                                                         r30), 1)
    cdef __m512i h = _mm512_mask_blend_epi32(0xAAAA, he, ho)
    cdef __m512i up = _mm512_add_epi32(_mm512_add_epi32(h, p.half), _mm512_and_si512(_mm512_srai_epi32(h, 31), p.neg))
    cdef __m512i down = _mm512_mask_blend_epi32(_mm512_movepi32_mask(h), _mm512_srlv_epi32(up, p.rsh),
                                                _mm512_srav_epi32(up, p.rsh)) if p.wide \
        else _mm512_srav_epi32(up, p.rsh)
    cdef __m512i q = _mm512_add_epi32(down, p.zp)
    return _mm512_min_epi32(_mm512_max_epi32(q, p.lo), p.hi) if p.clamp else q


cdef inline __m128i rq16_int8(const rq16 *p, __m512i acc) noexcept nogil:
    """The 16 int8 outputs of acc."""
    return _mm512_cvtsepi32_epi8(rq16_apply(p, acc))


cdef inline void rq16_store(const rq16 *p, __m512i acc, __mmask16 k, int8_t *y) noexcept nogil:
    """Store the int8 outputs of acc's lanes k at y."""
    _mm512_mask_cvtsepi32_storeu_epi8(y, k, rq16_apply(p, acc))


cdef inline void requant_tiled(const int32_t *acc, int nr, const rq16 *t, int8_t *y, int64_t ldy) noexcept nogil:
    """The requantized channels of pixels i .. i + 16 / nr - 1 (nr = 1, 2 or 4 channels each: acc
    rows of QG_NR int32, outputs ldy bytes apart) through one prepared rq16 (8 channels: qg_pairs)."""
    cdef __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
    cdef __m512i row = _mm512_srli_epi32(lane, qconv_ctz(<unsigned>nr))
    cdef __m512i idx = _mm512_add_epi32(_mm512_slli_epi32(row, 5), _mm512_and_si512(lane, _mm512_set1_epi32(nr - 1)))
    cdef __m512i a = _mm512_i32gather_epi32(idx, <const void *>acc, 4)  # lane l: acc[l / nr][l % nr]
    cdef __m128i q = rq16_int8(t, a)
    cdef int8_t out[16]
    cdef int g
    _mm_storeu_si128(<__m128i *>out, q)
    for g in range(16 // nr):
        memcpy(y + g * ldy, out + g * nr, <size_t>nr)


# ------------------------------------------------------------------------------------------------
# Packing and im2col
# ------------------------------------------------------------------------------------------------
cdef inline void to_u8(int64_t n, const int8_t *src, uint8_t *dst) noexcept nogil:
    """dst[c] = u8(src[c] + 128) for c < n: 64 bytes at a time, the last run masked, since im2col's
    runs are often a few bytes."""
    cdef __m512i flip = _mm512_set1_epi8(<char>0x80)
    cdef int64_t c = 0
    cdef __mmask64 k
    while c + 64 <= n:
        _mm512_storeu_si512(dst + c, _mm512_xor_si512(_mm512_loadu_si512(src + c), flip))
        c += 64
    if c < n:
        k = (<__mmask64>1 << (n - c)) - 1
        _mm512_mask_storeu_epi8(dst + c, k, _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, src + c), flip))


cdef void im2col_u8_masked(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np, uint8_t pad_u8,
                           uint8_t *cols, int64_t ldc) noexcept nogil:
    """im2col_u8 for kernel rows of at most 16 bytes (a first conv's RGB), dilation 1 along rows: one
    masked load and store per kernel row, the geometry in registers."""
    cdef int64_t C = s.c, H = s.h, W = s.w, OH = s.oh, OW = s.ow, KH = s.kh, KW = s.kw
    cdef int64_t SH = s.sh, SW = s.sw, DH = s.dh, PT = s.pt, PL = s.pl
    cdef int64_t run_bytes = KW * C, KK = KH * run_bytes, row_bytes = W * C
    cdef __mmask16 run = <__mmask16>((1u << run_bytes) - 1u)
    cdef __mmask16 tail = <__mmask16>((1u << (ldc - KK)) - 1u)      # the zero bytes after KK (< 16)
    cdef __mmask16 kc
    cdef __m128i flip = _mm_set1_epi8(<char>0x80), pad = _mm_set1_epi8(<char>pad_u8)
    cdef int64_t b = p0 // (OH * OW), oh = p0 % (OH * OW) // OW, ow = p0 % OW  # pixel p0 + q
    cdef int64_t q, i, j, iw0, ih, iw
    cdef bint inside
    cdef uint8_t *dst
    cdef const int8_t *image
    for q in range(np):
        dst = cols + q * ldc                                         # (kh, kw*C) then 0s
        iw0 = ow * SW - PL
        inside = iw0 >= 0 and iw0 + KW <= W
        image = x + b * H * row_bytes + iw0 * C                      # tap (0, 0) column of row 0
        for i in range(KH):
            ih = oh * SH - PT + i * DH
            if ih < 0 or ih >= H:
                _mm_mask_storeu_epi8(dst, run, pad)
            elif inside:
                _mm_mask_storeu_epi8(dst, run, _mm_xor_si128(_mm_maskz_loadu_epi8(run, image + ih * row_bytes), flip))
            else:
                for j in range(KW):
                    iw = iw0 + j
                    kc = <__mmask16>((1u << C) - 1u)
                    if iw < 0 or iw >= W:
                        _mm_mask_storeu_epi8(dst + j * C, kc, pad)
                    else:
                        _mm_mask_storeu_epi8(dst + j * C, kc, _mm_xor_si128(
                            _mm_maskz_loadu_epi8(kc, x + (b * H + ih) * row_bytes + iw * C), flip))
            dst += run_bytes
        _mm_mask_storeu_epi8(dst, tail, _mm_setzero_si128())
        ow += 1
        if ow == OW:
            ow = 0
            oh += 1
            if oh == OH:
                oh = 0
                b += 1


cdef void im2col_u8_narrow(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np, uint8_t pad_u8,
                           uint8_t *cols, int64_t ldc) noexcept nogil:
    """im2col_u8_masked's rows, but a run of pixels whose whole window is inside the image (and not
    the block's last pixel) takes plain 16-byte loads and stores, each spilling into the next kernel
    row, the zero tail or the next pixel's row, all written after it: the masked loop ran 2x slower
    (the person detector's first conv: 17 -> 8 us of im2col)."""
    cdef int64_t C = s.c, H = s.h, W = s.w, OH = s.oh, OW = s.ow, KH = s.kh, KW = s.kw
    cdef int64_t SH = s.sh, SW = s.sw, DH = s.dh, PT = s.pt, PL = s.pl, run_bytes = KW * C, row_bytes = W * C
    cdef __m128i flip = _mm_set1_epi8(<char>0x80)
    cdef const int8_t *x_end = x + s.n * H * row_bytes               # no load reaches past it
    cdef int64_t owa = (PL + SW - 1) // SW                           # [owa, owb): inside columns
    cdef int64_t owb = (W - KW + PL) // SW + 1 if W >= KW else 0
    owb = owb if owb < OW else OW
    cdef int64_t q = 0, p, b, oh, ow, ih0, ih1, m, r, i
    cdef const int8_t *last
    cdef const int8_t *src
    cdef uint8_t *dst
    while q < np:
        p = p0 + q
        b = p // (OH * OW)
        oh = p // OW % OH
        ow = p % OW
        ih0 = oh * SH - PT
        ih1 = ih0 + (KH - 1) * DH
        m = 0                                                        # plain pixels from q
        if ow >= owa and ih0 >= 0 and ih1 < H:
            m = owb - ow if owb - ow < np - 1 - q else np - 1 - q
            last = x + ((b * H + ih1) * W + (ow + m - 1) * SW - PL) * C  # the last load
            while m > 0 and last + 16 > x_end:
                m -= 1
                last -= SW * C
        if m <= 0:
            im2col_u8_masked(s, x, p, 1, pad_u8, cols + q * ldc, ldc)
            q += 1
            continue
        src = x + ((b * H + ih0) * W + ow * SW - PL) * C             # tap (0, 0) of pixel q
        dst = cols + q * ldc
        for r in range(m):
            for i in range(KH):
                _mm_storeu_si128(<__m128i *>(dst + i * run_bytes),
                                 _mm_xor_si128(_mm_loadu_si128(<const __m128i *>(src + i * DH * row_bytes)), flip))
            _mm_storeu_si128(<__m128i *>(dst + KH * run_bytes), _mm_setzero_si128())
            src += SW * C
            dst += ldc
        q += m


cdef inline bint im2col_u8_tier(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np, uint8_t pad_u8,
                                uint8_t *cols, int64_t ldc) noexcept nogil:
    """Kernel rows of at most 16 bytes without column dilation (and at most 15 zero bytes after
    them) go through im2col_u8_narrow; returns whether it did."""
    if s.kw * s.c <= 16 and s.dw == 1 and ldc - s.kh * s.kw * s.c < 16:
        im2col_u8_narrow(s, x, p0, np, pad_u8, cols, ldc)
        return True
    return False


# ------------------------------------------------------------------------------------------------
# The int8 GEMM
# ------------------------------------------------------------------------------------------------
ctypedef struct qg_panel:
    rq16 half[2]          # the requantization of channels 0-15 and 16-31 in registers
    bint fast             # the panel requantizes through half
    bint tile             # few channels: 16 / nr pixels per requantization


cdef inline const int32_t *qg_panel_prepare(qg_panel *panel, int64_t K4, const int8_t *pp, const int32_t *wsum,
                                            const vx_requant *rq, int64_t p0, int nr, int32_t *first,
                                            const int32_t **tile_init) noexcept nogil:
    """Prepare the requantization of channels p0 .. p0 + nr - 1 in registers where that is exact
    (no row sums); the sums then start from the bias, in first (returned, and the tiles' start;
    NULL: from 0). first: QG_NR int32, lanes past nr ignored."""
    # |acc| <= K4 * 255 * 128 (u8 times int8); with wsum the correction is outside that bound
    cdef int64_t bound = K4 * 255 * 128
    # few channels: 16 / nr pixels per requantization (exactly 8: a doubled panel, qg_pairs)
    panel.tile = nr <= QG_PAIR_NR and 16 % nr == 0
    panel.fast = wsum == NULL and rq16_prepare(rq, p0, nr if nr < 16 else 16, nr if panel.tile else 16, bound,
                                                &panel.half[0]) and \
        (nr <= 16 or rq16_prepare(rq, p0 + 16, nr - 16, 16, bound, &panel.half[1]))
    tile_init[0] = NULL
    if panel.fast and rq.bias != NULL:
        _mm512_storeu_si512(first, panel.half[0].bias)
        _mm512_storeu_si512(first + 16, panel.half[1].bias if nr > 16 else _mm512_setzero_si512())
        panel.half[0].biased = 1
        panel.half[1].biased = 1
        tile_init[0] = first
    return tile_init[0]


cdef inline void qg_tile(const int MR, const int NP, int64_t K4, const uint8_t *a, int64_t lda, const int8_t *pp,
                         const int32_t *init, int32_t *acc) noexcept nogil:
    """acc (MR, QG_NR) int32 = init (16 * NP lanes, or NULL: 0) + u8 rows a (lda bytes apart) times
    the first NP (1 or 2) panels of the pair pp (K4 bytes per channel, 16-channel panels 16 * K4
    bytes apart): one vpdpbusd per row and panel for 4 k."""
    cdef __m512i c0[QG_MR]
    cdef __m512i c1[QG_MR]
    cdef __m512i first0 = _mm512_loadu_si512(init) if init != NULL else _mm512_setzero_si512()
    cdef __m512i first1 = _mm512_loadu_si512(init + 16) if init != NULL and NP == 2 else _mm512_setzero_si512()
    cdef __m512i b0, b1, av
    cdef int i
    cdef int32_t a4
    cdef int64_t kq
    for i in range(MR):
        c0[i] = first0
        c1[i] = first1
    cdef const int8_t *p1 = pp + 16 * K4
    for kq in range(K4 // 4):
        b0 = _mm512_loadu_si512(pp + 64 * kq)
        b1 = _mm512_loadu_si512(p1 + 64 * kq) if NP == 2 else b0
        for i in range(MR):
            memcpy(&a4, a + i * lda + 4 * kq, 4)
            av = _mm512_set1_epi32(a4)
            c0[i] = _mm512_dpbusd_epi32(c0[i], av, b0)
            if NP == 2:
                c1[i] = _mm512_dpbusd_epi32(c1[i], av, b1)
    for i in range(MR):
        _mm512_storeu_si512(acc + i * QG_NR, c0[i])
        if NP == 2:
            _mm512_storeu_si512(acc + i * QG_NR + 16, c1[i])


cdef inline void qg_pairs(const int MR, int rows, int64_t K4, const uint8_t *a, int64_t lda, const int8_t *pp,
                          const rq16 *t, int8_t *y, int64_t ldy) noexcept nogil:
    """8-channel dense conv rows 0 .. 2 * MR - 1 (rows = how many exist, 1 .. 2 * MR): pixel 2i in
    lanes 0-7 and 2i + 1 in lanes 8-15 of one vpdpbusd accumulator against the doubled panel pp
    (qgemm_pack), requantized in registers by t (prepared with period 8)."""
    cdef __m512i c[QG_MR]
    cdef __m512i b
    cdef __m128i q
    cdef int i
    cdef int32_t lo, hi
    cdef int64_t kq
    for i in range(MR):
        c[i] = t.bias if t.biased else _mm512_setzero_si512()
    for kq in range(K4 // 4):
        b = _mm512_loadu_si512(pp + 64 * kq)
        for i in range(MR):
            memcpy(&lo, a + 2 * i * lda + 4 * kq, 4)
            memcpy(&hi, a + (2 * i + 1 if 2 * i + 1 < rows else 2 * i) * lda + 4 * kq, 4)
            c[i] = _mm512_dpbusd_epi32(c[i], _mm512_mask_set1_epi32(_mm512_set1_epi32(lo), 0xFF00, hi), b)
    for i in range(MR):
        q = rq16_int8(t, c[i])
        _mm_storel_epi64(<__m128i *>(y + 2 * i * ldy), q)
        if 2 * i + 1 < rows:
            _mm_storel_epi64(<__m128i *>(y + (2 * i + 1) * ldy), _mm_unpackhi_epi64(q, q))


cdef inline bint qg_panel_pairs(qg_panel *panel, int64_t K4, const int8_t *pp, int nr, const uint8_t *a,
                                int64_t lda, int64_t m, int8_t *y, int64_t ldy) noexcept nogil:
    """A doubled 8-channel panel (qgemm_pack) requantized in registers runs two pixels per vector
    (qg_pairs), all m rows here; returns whether it did."""
    if not (panel.fast and nr == QG_PAIR_NR):
        return False
    cdef int64_t i0 = 0
    while i0 + 2 * QG_MR <= m:
        qg_pairs(QG_MR, 2 * QG_MR, K4, a + i0 * lda, lda, pp, &panel.half[0], y + i0 * ldy, ldy)
        i0 += 2 * QG_MR
    if i0 < m:
        qg_pairs(<int>(m - i0 + 1) // 2, <int>(m - i0), K4, a + i0 * lda, lda, pp, &panel.half[0], y + i0 * ldy, ldy)
    return True


cdef inline int qg_requant_tile(qg_panel *panel, const int32_t *acc, int nr, int mr, int8_t *y,
                                int64_t ldy) noexcept nogil:
    """Requantize a tile's rows in registers when the panel allows it (few channels: 16 / nr rows
    per vector); returns the rows done (the rest: requant_row)."""
    cdef int i = 0
    cdef __mmask16 k0, k1
    cdef int8_t *yi
    if panel.fast and panel.tile:
        while i + 16 // nr <= mr:
            requant_tiled(acc + i * QG_NR, nr, &panel.half[0], y + i * ldy, ldy)
            i += 16 // nr
    elif panel.fast:
        k0 = 0xFFFF if nr >= 16 else <__mmask16>((1u << nr) - 1u)
        k1 = 0xFFFF if nr >= 32 else (<__mmask16>((1u << (nr - 16)) - 1u) if nr > 16 else 0)
        while i < mr:
            yi = y + i * ldy
            rq16_store(&panel.half[0], _mm512_loadu_si512(acc + i * QG_NR), k0, yi)
            if k1:
                rq16_store(&panel.half[1], _mm512_loadu_si512(acc + i * QG_NR + 16), k1, yi + 16)
            i += 1
    return i


# ------------------------------------------------------------------------------------------------
# Depthwise int8
# ------------------------------------------------------------------------------------------------
# The int8 depthwise products as vpdpwssd: x in int32 lanes (its low word the int8 value) times w
# with only its low word set, so each lane adds exactly x * w. The input zero point comes off as
# zp * (sum of the pixel's valid taps' w), the same for every pixel of a row that sees all kernel
# columns. Weights in that form, and their column sums, are made once per row and channel block.
cdef inline __m512i qdw_x(const int8_t *xr, __mmask16 k) noexcept nogil:
    """x (int8, lanes k) at xr as int32 lanes."""
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(<const __m128i *>xr) if k == 0xFFFF else _mm_maskz_loadu_epi8(k, xr))


cdef inline void qdw_sums(const int PX, const vx_conv_shape *s, const int8_t *xp, int64_t px, const __m512i *wv,
                          __mmask16 k, int64_t i0, int64_t i1, int64_t j0, int64_t j1, __m512i init,
                          __m512i *a) noexcept nogil:
    """a[p] = init + the sums over taps (i0..i1) x (j0..j1) of PX pixels px bytes apart (PX > 1: all
    see those taps); xp: the first's tap (0, 0), lanes k (pairs: two 8-channel pixels per vector).
    Kernel rows go two at a time into separate chains (exact integers: the same sums), so a pixel's
    vpdpwssd need not wait on its last one."""
    cdef __m512i b[4]                                                # the odd rows' chains
    cdef __m512i w0, w1
    cdef int p
    cdef int64_t i, j
    cdef const int8_t *xr
    for p in range(PX):
        a[p] = init
        b[p] = _mm512_setzero_si512()
    cdef int64_t row = s.dh * s.w * s.c                              # bytes from a kernel row to the next
    i = i0
    while i + 1 < i1:
        for j in range(j0, j1):
            w0 = wv[i * s.kw + j]
            w1 = wv[(i + 1) * s.kw + j]
            xr = xp + i * row + j * s.dw * s.c
            for p in range(PX):
                a[p] = _mm512_dpwssd_epi32(a[p], qdw_x(xr + p * px, k), w0)
                b[p] = _mm512_dpwssd_epi32(b[p], qdw_x(xr + row + p * px, k), w1)
        i += 2
    while i < i1:
        for j in range(j0, j1):
            xr = xp + i * row + j * s.dw * s.c
            for p in range(PX):
                a[p] = _mm512_dpwssd_epi32(a[p], qdw_x(xr + p * px, k), wv[i * s.kw + j])
        i += 1
    for p in range(PX):
        a[p] = _mm512_add_epi32(a[p], b[p])


cdef inline void qdw_columns(const int SW, const int KW, const int8_t *xr, int64_t C, __mmask16 k,
                             __m512i *xv) noexcept nogil:
    """The SW * 3 + KW input columns of kernel row xr (C bytes apart) that 4 pixels SW columns
    apart read, widened."""
    cdef int c
    for c in range(SW * 3 + KW):
        xv[c] = qdw_x(xr + c * C, k)


cdef inline void qdw_sums_row(const int SW, const int KW, const vx_conv_shape *s, const int8_t *xp,
                              const __m512i *wv, __mmask16 k, int64_t i0, int64_t i1, __m512i init,
                              __m512i *a) noexcept nogil:
    """qdw_sums of 4 pixels SW columns apart whose taps are neighbouring columns (all see every one
    of the KW kernel columns): each input column is widened once for the pixels that read it
    (SW * 3 + KW per kernel row, not 4 KW); even and odd kernel rows in separate chains."""
    cdef int64_t C = s.c, row = s.dh * s.w * C
    cdef __m512i b[4]                                                # odd rows' chains
    cdef __m512i xv[QDW_COLUMNS]                                     # (SW * 3 + KW,) two rows' columns
    cdef __m512i xu[QDW_COLUMNS]
    cdef int p, j
    for p in range(4):
        a[p] = init
        b[p] = _mm512_setzero_si512()
    cdef int64_t i = i0
    while i + 1 < i1:
        qdw_columns(SW, KW, xp + i * row, C, k, xv)
        qdw_columns(SW, KW, xp + (i + 1) * row, C, k, xu)
        for j in range(KW):
            for p in range(4):
                a[p] = _mm512_dpwssd_epi32(a[p], xv[SW * p + j], wv[i * KW + j])
                b[p] = _mm512_dpwssd_epi32(b[p], xu[SW * p + j], wv[(i + 1) * KW + j])
        i += 2
    if i < i1:
        qdw_columns(SW, KW, xp + i * row, C, k, xv)
        for j in range(KW):
            for p in range(4):
                a[p] = _mm512_dpwssd_epi32(a[p], xv[SW * p + j], wv[i * KW + j])
    for p in range(4):
        a[p] = _mm512_add_epi32(a[p], b[p])


cdef inline __m512i qdw_corr(const __m512i *colsum, __m512i zp, int64_t j0, int64_t j1) noexcept nogil:
    """zp * (the sum of colsum[j0..j1)): the zero point term of a pixel seeing those kernel columns
    (colsum: per kernel column, the sum of w over the row's valid kernel rows)."""
    cdef __m512i sum = _mm512_setzero_si512()
    cdef int64_t j
    for j in range(j0, j1):
        sum = _mm512_add_epi32(sum, colsum[j])
    return _mm512_mullo_epi32(sum, zp)


cdef inline void qdw_store(__m512i acc, int fast, const rq16 *prep, int pairs, __mmask16 k, int n,
                           const vx_requant *rq, int64_t c0, int8_t *yo) noexcept nogil:
    """Requantize (rq16 when fast, else requant_row) and store n channels of one pixel (pairs: two
    8-channel pixels)."""
    cdef int32_t buf[16]
    if fast and k == 0xFFFF:
        _mm_storeu_si128(<__m128i *>yo, rq16_int8(prep, acc))
        return
    if fast:
        rq16_store(prep, acc, k, yo)
        return
    _mm512_storeu_si512(buf, acc)
    if pairs:
        requant_row(8, buf, 0, NULL, rq, 0, yo)
        requant_row(8, buf + 8, 0, NULL, rq, 0, yo + 8)
    else:
        requant_row(n, buf, 0, NULL, rq, c0, yo)


cdef void qdwconv_avx512(const vx_conv_shape *s, const int8_t *x, const int16_t *w, const vx_requant *rq,
                         int64_t item, int64_t rows, int8_t *y) noexcept nogil:
    """qdwconv on avx512: 16 channels at a time (8-channel stride-1 rows: two pixels per vector),
    requantized in registers (rq16) when the block's bound allows it; pixels that see every kernel
    column go 4 (pairs: 2) at a time. A channel block's weights and requantization are made once for
    all the rows; the zero point terms again only when a row sees other kernel rows."""
    cdef int64_t C = s.c
    cdef int64_t bound = s.kh * s.kw * 255 * 128                     # |x - zp_in| <= 255, |w| <= 128
    cdef __m512i zp = _mm512_set1_epi32(rq.zp_in)
    cdef bint pairs = C == 8 and s.sw == 1 and s.dw == 1
    cdef int64_t c0, t, r, b, oh, e0, e1, j0, j1, ow, f0, f1, i, j
    cdef int64_t i0, i1
    cdef int n, fast, vectors, p
    cdef __mmask16 k, k1
    cdef rq16 prep
    cdef __m512i base, init_full
    cdef __m512i wv[QDW_MAX_TAPS]                                    # (kh*kw,) w in low words
    cdef __m512i w32[QDW_MAX_TAPS]                                   # (kh*kw,) w
    cdef __m512i colsum[QDW_MAX_TAPS]                                # (kw,): over the valid kernel rows
    cdef __m512i a[4]
    cdef int8_t *yr
    cdef int8_t *yo
    cdef const int8_t *xp
    for c0 in range(0, C, 16):
        n = <int>(16 if pairs else (C - c0 if C - c0 < 16 else 16))
        k = <__mmask16>((1u << n) - 1u)
        fast = rq16_prepare(rq, c0, 8 if pairs else n, 8 if pairs else 16, bound, &prep)
        prep.biased = fast                                           # the sums start from bias - zp * (their taps' w)
        base = prep.bias if fast else _mm512_setzero_si512()
        for t in range(s.kh * s.kw):
            w32[t] = _mm512_cvtepi16_epi32(
                _mm256_broadcastsi128_si256(_mm_loadu_si128(<const __m128i *>(w + t * 8))) if pairs
                else _mm256_maskz_loadu_epi16(k, w + t * C + c0))
            wv[t] = _mm512_and_si512(_mm512_set1_epi32(0xFFFF), w32[t])
        init_full = base
        i0 = -1
        i1 = -1
        for r in range(item, item + rows):
            b = r // s.oh
            oh = r % s.oh
            valid_taps(s, oh, 0, &e0, &e1, &j0, &j1)  # the rows are the row's; columns vary per pixel
            if e0 != i0 or e1 != i1:
                i0 = e0
                i1 = e1
                for j in range(s.kw):
                    colsum[j] = _mm512_setzero_si512()
                    for i in range(i0, i1):
                        colsum[j] = _mm512_add_epi32(colsum[j], w32[i * s.kw + j])
                init_full = _mm512_sub_epi32(base, qdw_corr(colsum, zp, 0, s.kw))
            yr = y + (r - item) * s.ow * C                           # (ow, C): output row r
            ow = 0
            while ow < s.ow:
                valid_taps(s, oh, ow, &e0, &e1, &j0, &j1)
                xp = x + ((b * s.h + oh * s.sh - s.pt) * s.w + ow * s.sw - s.pl) * C + c0
                yo = yr + ow * C + c0                                # (n,) of pixel ow
                vectors = 0                                          # full-column vectors starting at ow
                if j0 == 0 and j1 == s.kw and ow + 4 <= s.ow:        # 4 pixels: 4 vectors, or 2 of pairs
                    valid_taps(s, oh, ow + 3, &e0, &e1, &f0, &f1)
                    if f0 == 0 and f1 == s.kw:
                        vectors = 2 if pairs else 4
                if pairs and not vectors and j0 == 0 and j1 == s.kw and ow + 2 <= s.ow:
                    valid_taps(s, oh, ow + 1, &e0, &e1, &f0, &f1)
                    if f0 == 0 and f1 == s.kw:
                        vectors = 1
                if vectors == 2:                                     # two pairs
                    qdw_sums(2, s, xp, 2 * C, wv, k, i0, i1, 0, s.kw, init_full, a)
                    for p in range(2):
                        qdw_store(a[p], fast, &prep, 1, k, n, rq, c0, yo + 2 * p * C)
                    ow += 4
                    continue
                if vectors == 1:                                     # a pair
                    qdw_sums(1, s, xp, 0, wv, k, i0, i1, 0, s.kw, init_full, a)
                    qdw_store(a[0], fast, &prep, 1, k, n, rq, c0, yo)
                    ow += 2
                    continue
                if vectors == 4:
                    if s.sw == 1 and s.dw == 1 and s.kw == 3:
                        qdw_sums_row(1, 3, s, xp, wv, k, i0, i1, init_full, a)
                    elif s.sw == 2 and s.dw == 1 and s.kw == 3:
                        qdw_sums_row(2, 3, s, xp, wv, k, i0, i1, init_full, a)
                    else:
                        qdw_sums(4, s, xp, s.sw * C, wv, k, i0, i1, 0, s.kw, init_full, a)
                    for p in range(4):
                        qdw_store(a[p], fast, &prep, 0, k, n, rq, c0, yo + p * C)
                    ow += 4
                    continue
                k1 = 0xFF if pairs else k                            # one pixel of a pairs row: its 8 channels
                qdw_sums(1, s, xp, 0, wv, k1, i0, i1, j0, j1, _mm512_sub_epi32(base, qdw_corr(colsum, zp, j0, j1)), a)
                qdw_store(a[0], fast, &prep, 0, k1, 8 if pairs else n, rq, c0, yo)
                ow += 1


cdef inline int64_t qdw_pixels(const vx_conv_shape *s, const int8_t *xp, const int16_t *w, const vx_requant *rq,
                               int64_t oh, int64_t ow, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                               int8_t *yo) noexcept nogil:
    """Output pixel ow of a depthwise row in plain C (the kernels qdwconv_avx512 does not take:
    more than QDW_MAX_TAPS taps); returns the pixels done (1)."""
    qdw_pixel_loop(s, xp, w, rq, i0, i1, j0, j1, yo)
    return 1


cdef inline bint qdwconv_tier(const vx_conv_shape *s, const int8_t *x, const int16_t *w, const vx_requant *rq,
                              int64_t item, int64_t rows, int8_t *y) noexcept nogil:
    """Kernels of at most QDW_MAX_TAPS taps go through qdwconv_avx512; returns whether they did."""
    if s.kh * s.kw <= QDW_MAX_TAPS:
        qdwconv_avx512(s, x, w, rq, item, rows, y)
        return True
    return False


# ------------------------------------------------------------------------------------------------
# Quantization
# ------------------------------------------------------------------------------------------------
cdef inline int64_t quantize_i8_lanes(int64_t n, const float *x, float scale, int32_t zp, float inv, bint pow2,
                                      int8_t wild, int8_t *y) noexcept nogil:
    """quantize_i8's whole vectors of 16 (returns how many elements it did). Those of |v| < 256 go
    in fixed point first: u = trunc(v * 2^22) (scaling by 2^22 is exact, and truncation keeps every
    comparison with a half, (k + 1/2) 2^22 being an integer), then q + zp = (u + 2^21 - (u < 0) +
    zp 2^22) >> 22 rounds halves away from zero in int32 (|u| < 2^30) and the pack saturates.
    96x96x3 at scale 1: 7.8 -> 2.6 us (the division was the bound)."""
    cdef bint fused = pow2 and isfinite(inv * <float>4194304.0)
    cdef __m512 sc = _mm512_set1_ps(scale), iv = _mm512_set1_ps(inv), ivf = _mm512_set1_ps(inv * <float>4194304.0)
    cdef __m512 s22 = _mm512_set1_ps(<float>4194304.0), half = _mm512_set1_ps(<float>0.5), zero = _mm512_setzero_ps()
    cdef __m512 lim31 = _mm512_set1_ps(<float>2147483648.0), lim63 = _mm512_set1_ps(<float>9223372036854775808.0)
    cdef __m512i two30 = _mm512_set1_epi32(1 << 30), two31 = _mm512_set1_epi32(INT32_MIN)
    cdef __m512i bias = _mm512_set1_epi32((1 << 21) + zp * (1 << 22))
    cdef __m512i zpv = _mm512_set1_epi32(zp), lo = _mm512_set1_epi32(-128), hi = _mm512_set1_epi32(127)
    cdef __m512 xv, v, av, a
    cdef __m512i u, r, t, q, big
    cdef __mmask16 small, up
    cdef int64_t i = 0
    while i + 16 <= n:
        xv = _mm512_loadu_ps(x + i)
        # u = trunc(v * 2^22) of v = x / scale (x * (2^22 / scale) when that is exact)
        v = xv if fused else (_mm512_mul_ps(xv, iv) if pow2 else _mm512_div_ps(xv, sc))
        u = _mm512_cvttps_epi32(_mm512_mul_ps(v, ivf if fused else s22))
        if _mm512_cmplt_epu32_mask(u, two30) == 0xFFFF:              # 0 <= u < 2^30 (indefinite: 2^31)
            _mm_storeu_si128(<__m128i *>(y + i),
                             _mm512_cvtsepi32_epi8(_mm512_srai_epi32(_mm512_add_epi32(u, bias), 22)))
            i += 16
            continue
        if _mm512_cmplt_epu32_mask(_mm512_add_epi32(u, two30), two31) == 0xFFFF:  # |u| <= 2^30
            r = _mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_srai_epi32(u, 31))
            _mm_storeu_si128(<__m128i *>(y + i), _mm512_cvtsepi32_epi8(_mm512_srai_epi32(r, 22)))
            i += 16
            continue
        # the scalar loop in 16 lanes (GCC does not if-convert it for this tier)
        v = _mm512_mul_ps(xv, iv) if pow2 else _mm512_div_ps(xv, sc)
        av = _mm512_abs_ps(v)
        small = _mm512_cmp_ps_mask(av, lim31, _CMP_LT_OQ)           # false for NaN
        a = _mm512_maskz_mov_ps(small, av)
        t = _mm512_cvttps_epi32(a)
        up = _mm512_cmp_ps_mask(_mm512_sub_ps(a, _mm512_cvtepi32_ps(t)), half, _CMP_GE_OQ)
        q = _mm512_mask_add_epi32(t, up, t, _mm512_set1_epi32(1))
        q = _mm512_mask_sub_epi32(q, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), _mm512_setzero_si512(), q)
        q = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(q, zpv), lo), hi)
        big = _mm512_mask_mov_epi32(_mm512_set1_epi32(wild), _mm512_cmp_ps_mask(av, lim63, _CMP_LT_OQ),
                                    _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), lo, hi))
        _mm_storeu_si128(<__m128i *>(y + i), _mm512_cvtepi32_epi8(_mm512_mask_blend_epi32(small, big, q)))
        i += 16
    return i
