# The gemv code both x86 SIMD tiers run: included by kernels/avx2/gemv.pxi and
# kernels/avx512/gemv.pxi, each of which adds its own dot_u8s8_256 / dot_u8s8_scaled (maddubs or VNNI), b32_wide_rows (the avx512 tier's
# 2-rows-per-zmm tiles), float_tile / float_rows4 and dequant_f16_vec.
from libc.math cimport fabsf, fmaf
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.string cimport memcpy
from volvox._kernels.vx cimport (
    VX_ALIGN, VX_F32, VX_IQ4_NL, VX_Q4_0, VX_Q4_1, VX_Q5_0, VX_Q5_1, VX_Q8_0, VX_QK, vx_act_corrections,
    vx_block_q2_K, vx_block_q3_K, vx_block_q4_0, vx_block_q4_1, vx_block_q4_K, vx_block_q5_K, vx_block_q6_K,
    vx_block_q8_0, vx_f16)

include "../gemv_counts.pxi"


# ------------------------------------------------------------------------------------------------
# fp16 <-> fp32 (F16C)
# ------------------------------------------------------------------------------------------------
cdef inline float vx_f16_to_f32(vx_f16 h) noexcept nogil:
    """IEEE half -> float (F16C)."""
    return _cvtsh_ss(h)


cdef inline float vx_round_f16(float f) noexcept nogil:
    """f rounded to the nearest fp16 (ties to even) and back: how ggml stores act scales."""
    return _cvtsh_ss(_cvtss_sh(f, 0))


cdef inline int32_t dot32_s8(const int8_t *w, const int8_t *x) noexcept nogil:
    """int8 . int8 over one 32-value block (portable: the x86 tiers' GEMMs never call it)."""
    cdef int32_t s = 0
    cdef int j
    for j in range(VX_QK):
        s += <int32_t>w[j] * <int32_t>x[j]
    return s


# ------------------------------------------------------------------------------------------------
# Horizontal reductions (ggml's order).
# ------------------------------------------------------------------------------------------------
cdef inline float hmax_ps256(__m256 v) noexcept nogil:
    """The largest of v's 8 floats."""
    cdef __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))
    m = _mm_max_ps(m, _mm_movehl_ps(m, m))
    m = _mm_max_ss(m, _mm_movehdup_ps(m))
    return _mm_cvtss_f32(m)


cdef inline float hsum_ps256(__m256 v) noexcept nogil:
    """The sum of v's 8 floats: halves, then pairs, then the last two."""
    cdef __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))
    s = _mm_add_ps(s, _mm_movehl_ps(s, s))
    s = _mm_add_ss(s, _mm_movehdup_ps(s))
    return _mm_cvtss_f32(s)


cdef inline int32_t hsum_epi32_256(__m256i v) noexcept nogil:
    """The sum of v's 8 int32."""
    cdef __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1))
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s))
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1))
    return _mm_cvtsi128_si32(s)


# ------------------------------------------------------------------------------------------------
# Activation quantization: ggml's AVX2 quantize_row_q8_0 / q8_1, instruction for instruction.
# ------------------------------------------------------------------------------------------------
cdef inline void quantize_a32(int smode, int64_t K, const float *x, void *act) noexcept nogil:
    """x (K,) -> act row (q8_0 / q8_1), as ggml's AVX2 quantizer."""
    cdef int8_t *qs = <int8_t *>act                             # (K,)
    cdef float *ds = <float *>(<char *>act + VX_ALIGN(K))       # (K/32, 2)
    cdef __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(<int>0x80000000))  # -0.0f in every lane
    cdef int64_t b
    cdef const float *xb
    cdef __m256 v0, v1, v2, v3, a, id
    cdef __m256i i0, i1, i2, i3
    cdef float amax, d
    cdef int32_t sum
    for b in range(K // VX_QK):
        xb = x + b * VX_QK
        v0 = _mm256_loadu_ps(xb)
        v1 = _mm256_loadu_ps(xb + 8)
        v2 = _mm256_loadu_ps(xb + 16)
        v3 = _mm256_loadu_ps(xb + 24)
        a = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1))
        a = _mm256_max_ps(a, _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)))
        amax = hmax_ps256(a)
        d = amax / <float>127.0
        id = _mm256_set1_ps(<float>127.0 / amax if amax != <float>0.0 else <float>0.0)
        i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
        i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
        i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
        i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
        sum = hsum_epi32_256(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)))
        i0 = _mm256_packs_epi32(i0, i1)    # 0-3 8-11 | 4-7 12-15
        i2 = _mm256_packs_epi32(i2, i3)
        i0 = _mm256_packs_epi16(i0, i2)
        i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
        _mm256_storeu_si256(<void *>(qs + b * VX_QK), i0)
        ds[2 * b + 0] = vx_round_f16(d)
        ds[2 * b + 1] = act_s(smode, d, ds[2 * b + 0], sum)


cdef void quantize_aK(int64_t K, const float *x, void *act) noexcept nogil:
    """x (K,) -> q8_K act row (vx.pxd), quantize_aK_ref's bits in 8-float vectors: the largest |x| by
    vector max, the first x of that magnitude by a scan, then q = min(127, round_half_even(iscale x))
    (the same products, rounded by cvtps in the default nearest-even mode) and the sums of 16."""
    cdef int8_t *qs = <int8_t *>act                                             # (K,)
    cdef float *dd = <float *>(<char *>act + VX_ALIGN(K))                       # (K/256,)
    cdef int32_t *bsums = <int32_t *>(<char *>dd + VX_ALIGN(4 * (K // VX_QK_K)))  # (K/16,)
    cdef __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(<int>0x80000000))  # -0.0f in every lane
    cdef __m256i top = _mm256_set1_epi32(127)
    cdef __m256 a, sc
    cdef __m256i i0, i1
    cdef __m128i packed
    cdef const float *xb
    cdef float amax, mx, iscale
    cdef int64_t b
    cdef int j, g
    for b in range(K // VX_QK_K):
        xb = x + b * VX_QK_K
        a = _mm256_setzero_ps()
        for j in range(0, VX_QK_K, 8):
            a = _mm256_max_ps(a, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)))
        amax = hmax_ps256(a)
        mx = 0.0
        for j in range(VX_QK_K):
            if fabsf(xb[j]) == amax:
                mx = xb[j]
                break
        iscale = <float>-127.0 / mx if amax != <float>0.0 else <float>0.0
        sc = _mm256_set1_ps(iscale)
        for g in range(VX_QK_K // 16):
            i0 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(sc, _mm256_loadu_ps(xb + 16 * g))), top)
            i1 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(sc, _mm256_loadu_ps(xb + 16 * g + 8))), top)
            bsums[b * (VX_QK_K // 16) + g] = hsum_epi32_256(_mm256_add_epi32(i0, i1))
            i0 = _mm256_permutevar8x32_epi32(_mm256_packs_epi32(i0, i1), _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7))
            packed = _mm_packs_epi16(_mm256_castsi256_si128(i0), _mm256_extracti128_si256(i0, 1))  # in order
            _mm_storeu_si128(<void *>(qs + b * VX_QK_K + 16 * g), packed)
        dd[b] = <float>1.0 / iscale if amax != <float>0.0 else <float>0.0


# ------------------------------------------------------------------------------------------------
# 32-block weights (see kernels/gemv.pxi for the block algebra).
# ------------------------------------------------------------------------------------------------
cdef inline void b32_avx2_tile(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, int64_t pf,
                               const int8_t **xq, const float **ds, float *out) noexcept nogil:
    """One weight row against MR act rows; out[i] = dot(row, act row i); prefetches the row pf bytes
    ahead (weights stream from DRAM once per GEMV). Per block: 8 int32 lanes of 4 products each
    (q4_0: from the act row's corr, so a lane is ggml's (nibble - 8) * q sum), one FMA of (wd * dx)
    into 8 float lanes, q4_1's wm * s into a scalar FMA chain; then hsum + the scalar:
    ggml_vec_dot_q4_0_q8_0 / q4_1_q8_1 / q8_0_q8_0 (AVX2) exactly."""
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK
    cdef int bsz = b32_block_bytes(fmt)
    cdef __m256i m4 = _mm256_set1_epi8(0x0F)
    cdef __m256 acc[4]           # (MR,) 8 lanes each
    cdef float accm[4]           # (MR,) q4_1's m-term
    cdef const int32_t *cs[4]    # (MR,) q4_0: the act rows' corr (K/4,)
    cdef int64_t b
    cdef int i
    cdef __m256i wq, wv, xv, p
    cdef __m128i t
    cdef float wd, wm
    cdef const vx_block_q8_0 *b8
    cdef const vx_block_q4_1 *b41
    cdef const vx_block_q4_0 *b40
    cdef const uint8_t *qs
    for i in range(MR):
        acc[i] = _mm256_setzero_ps()
        accm[i] = 0.0
        cs[i] = vx_act_corrections(xq[i], K)
    for b in range(nb):
        if ((b * bsz) & 63) < bsz:
            _mm_prefetch(<const char *>(row + pf + b * bsz + 64), _MM_HINT_T0)
        wv = _mm256_setzero_si256()
        if fmt == VX_Q8_0:
            b8 = <const vx_block_q8_0 *>row + b
            wv = _mm256_loadu_si256(<const void *>b8.qs)
            wq = _mm256_sign_epi8(wv, wv)
            wd = _cvtsh_ss(b8.d)
        else:
            if fmt == VX_Q4_1:
                b41 = <const vx_block_q4_1 *>row + b
                qs = &b41.qs[0]
                wd = _cvtsh_ss(b41.d)
                wm = _cvtsh_ss(b41.m)
            else:
                b40 = <const vx_block_q4_0 *>row + b
                qs = &b40.qs[0]
                wd = _cvtsh_ss(b40.d)
            t = _mm_loadu_si128(<const void *>qs)
            wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4)
        for i in range(MR):
            xv = _mm256_loadu_si256(<const void *>(xq[i] + b * VX_QK))
            if fmt == VX_Q8_0:
                xv = _mm256_sign_epi8(xv, wv)
            p = dot_u8s8_256(wq, xv)
            if fmt == VX_Q4_0:
                p = _mm256_add_epi32(p, _mm256_loadu_si256(<const void *>(cs[i] + 8 * b)))
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd * ds[i][2 * b]), acc[i])
            if fmt == VX_Q4_1:
                # one rounding (ggml's contracted FMA) on every path: fmaf keeps it so
                # whatever GCC's SLP vectoriser makes of the MR chains
                accm[i] = fmaf(wm, ds[i][2 * b + 1], accm[i])
    for i in range(MR):
        out[i] = hsum_ps256(acc[i]) + accm[i]


cdef inline void b32_rows(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                          const int8_t **xq, const float **ds, float *y, int64_t ldy) noexcept nogil:
    """y[i * ldy + r] = dot(weight row r, act row i) for r < n, i < MR, in ggml's x86 order: the
    tier's wide tiles first (avx512: 2 weight rows per zmm), then weight rows one at a time
    (b32_avx2_tile)."""
    cdef int MR = sizeof(act_rows)
    cdef int64_t r = b32_wide_rows(MR_, fmt, K, w, w_stride, n, xq, ds, y, ldy)
    cdef float out[4]            # (MR,)
    cdef int i
    while r < n:
        out[0] = 0.0
        out[1] = 0.0
        out[2] = 0.0
        out[3] = 0.0
        b32_avx2_tile(MR_, fmt, K, w + r * w_stride, 4 * w_stride, xq, ds, out)
        for i in range(MR):
            y[i * ldy + r] = out[i]
        r += 1


# ------------------------------------------------------------------------------------------------
# k-quants: the integer block dots (dot_u8s8_scaled: maddubs on avx2, VNNI on avx512). Every weight is
# unsigned (q3_K's taken + 4: kernels/gemv_kquants.pxi subtracts 4 sc bsum), so u8 x s8 products do.
# ------------------------------------------------------------------------------------------------
cdef inline int32_t q4k_block_dot(const vx_block_q4_K *blk, const uint8_t *sc, const int8_t *q8) noexcept nogil:
    """Integer part of one q4_K super-block against 256 act values (before d, dmin)."""
    cdef __m256i m4 = _mm256_set1_epi8(0x0F)
    cdef __m256i acc = _mm256_setzero_si256()
    cdef __m256i q, lo, hi
    cdef int j
    for j in range(4):
        q = _mm256_loadu_si256(<const void *>(blk.qs + 32 * j))
        lo = _mm256_and_si256(q, m4)
        hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(lo, _mm256_loadu_si256(<const void *>(q8 + 64 * j)),
                                                    sc[2 * j], sc[2 * j]))
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(hi, _mm256_loadu_si256(<const void *>(q8 + 64 * j + 32)),
                                                    sc[2 * j + 1], sc[2 * j + 1]))
    return hsum_epi32_256(acc)


cdef inline int32_t q6k_block_dot(const vx_block_q6_K *blk, const int8_t *q8) noexcept nogil:
    """sum_k scale_k * dot(q6 unsigned (0..63), q8) over the 16 groups of 16 (before -32, d)."""
    cdef __m256i m4 = _mm256_set1_epi8(0x0F)
    cdef __m256i m3 = _mm256_set1_epi8(3)
    cdef __m256i acc = _mm256_setzero_si256()
    cdef __m256i qh, ql0, ql1, q1, q2, q3, q4
    cdef const int8_t *sc
    cdef const int8_t *x
    cdef int h
    for h in range(2):
        sc = blk.scales + 8 * h
        x = q8 + 128 * h
        qh = _mm256_loadu_si256(<const void *>(blk.qh + 32 * h))
        ql0 = _mm256_loadu_si256(<const void *>(blk.ql + 64 * h))
        ql1 = _mm256_loadu_si256(<const void *>(blk.ql + 64 * h + 32))
        q1 = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                             _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4))
        q2 = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4))
        q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4))
        q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4))
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(q1, _mm256_loadu_si256(<const void *>(x + 0)), sc[0], sc[1]))
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(q2, _mm256_loadu_si256(<const void *>(x + 32)), sc[2], sc[3]))
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(q3, _mm256_loadu_si256(<const void *>(x + 64)), sc[4], sc[5]))
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(q4, _mm256_loadu_si256(<const void *>(x + 96)), sc[6], sc[7]))
    return hsum_epi32_256(acc)


cdef inline __m256i two_bits(__m256i q, int s) noexcept nogil:
    """Bits 2s .. 2s+1 of each byte of q (s a constant once the callers' loops are unrolled)."""
    cdef __m256i m3 = _mm256_set1_epi8(3)
    if s == 0:
        return _mm256_and_si256(q, m3)
    if s == 1:
        return _mm256_and_si256(_mm256_srli_epi16(q, 2), m3)
    if s == 2:
        return _mm256_and_si256(_mm256_srli_epi16(q, 4), m3)
    return _mm256_and_si256(_mm256_srli_epi16(q, 6), m3)


cdef inline __m256i bit_as(__m256i bits, int j, char value) noexcept nogil:
    """value in each byte whose bit j is set in bits, else 0."""
    cdef __m256i m = _mm256_set1_epi8(<char>(1 << j))
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bits, m), m), _mm256_set1_epi8(value))


cdef inline __m256i q2k_block_lanes(const vx_block_q2_K *blk, const int8_t *q8) noexcept nogil:
    """8 int32 lanes summing to: over the 16 groups of 16, (4-bit scale) * dot(q2 (0..3), q8)."""
    cdef __m256i acc = _mm256_setzero_si256()
    cdef __m256i q
    cdef int h, s, g
    for h in range(2):
        q = _mm256_loadu_si256(<const void *>(blk.qs + 32 * h))
        for s in range(4):
            g = 8 * h + 2 * s
            acc = _mm256_add_epi32(acc, dot_u8s8_scaled(
                two_bits(q, s), _mm256_loadu_si256(<const void *>(q8 + 16 * g)),
                blk.scales[g] & 0x0F, blk.scales[g + 1] & 0x0F))
    return acc


cdef inline __m256i q3k_block_lanes(const vx_block_q3_K *blk, const int8_t *sc, const int8_t *q8) noexcept nogil:
    """8 int32 lanes summing to: over the 16 groups of 16, sc * dot(q3 + 4 (0..7), q8)."""
    cdef __m256i hm = _mm256_loadu_si256(<const void *>blk.hmask)
    cdef __m256i acc = _mm256_setzero_si256()
    cdef __m256i q
    cdef int h, s, j
    for h in range(2):
        q = _mm256_loadu_si256(<const void *>(blk.qs + 32 * h))
        for s in range(4):
            j = 4 * h + s
            acc = _mm256_add_epi32(acc, dot_u8s8_scaled(
                _mm256_or_si256(two_bits(q, s), bit_as(hm, j, 4)),
                _mm256_loadu_si256(<const void *>(q8 + 32 * j)), sc[2 * j], sc[2 * j + 1]))
    return acc


cdef inline __m256i q5k_block_lanes(const vx_block_q5_K *blk, const uint8_t *sc, const int8_t *q8) noexcept nogil:
    """8 int32 lanes summing to: over the 8 sub-blocks of 32, sc * dot(q5 (0..31), q8)."""
    cdef __m256i m4 = _mm256_set1_epi8(0x0F)
    cdef __m256i hm = _mm256_loadu_si256(<const void *>blk.qh)
    cdef __m256i acc = _mm256_setzero_si256()
    cdef __m256i q, lo, hi
    cdef int p
    for p in range(4):
        q = _mm256_loadu_si256(<const void *>(blk.qs + 32 * p))
        lo = _mm256_or_si256(_mm256_and_si256(q, m4), bit_as(hm, 2 * p, 16))
        hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), bit_as(hm, 2 * p + 1, 16))
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(lo, _mm256_loadu_si256(<const void *>(q8 + 64 * p)),
                                                    sc[2 * p], sc[2 * p]))
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(hi, _mm256_loadu_si256(<const void *>(q8 + 64 * p + 32)),
                                                    sc[2 * p + 1], sc[2 * p + 1]))
    return acc


cdef inline void kq_row(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const vx_actK *x,
                        float *out) noexcept nogil:
    """out[i] = dot(the q2_K / q3_K / q5_K weight row, act row i) for i < MR: per super-block the integer
    lanes summed exactly (q3_K: less its 4 sc bsum), then one FMA of (d xd) sumi and (q2_K, q5_K) one of
    (dmin xd) summ, the result their difference: the float steps of the interleaved kernels
    (kernels/gemv_kquants_il.pxi), so that a weight gives the same bits on either path."""
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK_K
    cdef int bsz = kq_block_bytes(fmt)
    cdef float acc[4]            # (MR,) sum of d xd sumi
    cdef float accm[4]           # (MR,) sum of dmin xd summ
    cdef int8_t sc3[16]          # (16,) q3_K scales
    cdef uint8_t sc[8]           # (8,) q5_K scales
    cdef uint8_t mn[8]           # (8,) q5_K mins
    cdef const uint8_t *blk
    cdef const vx_block_q2_K *b2
    cdef const vx_block_q3_K *b3
    cdef const vx_block_q5_K *b5
    cdef const int32_t *bs
    cdef int32_t summ, sumi
    cdef float d, dmin, xd
    cdef int64_t b
    cdef int i, g
    for i in range(MR):
        acc[i] = 0.0
        accm[i] = 0.0
    for b in range(nb):
        blk = row + b * bsz
        if fmt == VX_Q2_K:
            b2 = <const vx_block_q2_K *>blk
            d = vx_f16_to_f32(b2.d)
            dmin = vx_f16_to_f32(b2.dmin)
        elif fmt == VX_Q3_K:
            b3 = <const vx_block_q3_K *>blk
            q3k_scales(b3.scales, sc3)
            d = vx_f16_to_f32(b3.d)
        else:
            b5 = <const vx_block_q5_K *>blk
            q4k_scales(b5.scales, sc, mn)
            d = vx_f16_to_f32(b5.d)
            dmin = vx_f16_to_f32(b5.dmin)
        for i in range(MR):
            xd = x[i].d[b]
            bs = x[i].bsums + 16 * b
            summ = 0
            if fmt == VX_Q2_K:
                sumi = hsum_epi32_256(q2k_block_lanes(b2, x[i].qs + VX_QK_K * b))
                for g in range(16):
                    summ += (b2.scales[g] >> 4) * bs[g]
            elif fmt == VX_Q3_K:
                sumi = hsum_epi32_256(q3k_block_lanes(b3, sc3, x[i].qs + VX_QK_K * b))
                for g in range(16):
                    summ += sc3[g] * bs[g]
                sumi -= 4 * summ
            else:
                sumi = hsum_epi32_256(q5k_block_lanes(b5, sc, x[i].qs + VX_QK_K * b))
                for g in range(8):
                    summ += mn[g] * (bs[2 * g] + bs[2 * g + 1])
            acc[i] = fmaf(d * xd, <float>sumi, acc[i])
            if fmt != VX_Q3_K:
                accm[i] = fmaf(dmin * xd, <float>summ, accm[i])
    for i in range(MR):
        out[i] = acc[i] - accm[i]


# ------------------------------------------------------------------------------------------------
# q5_0, q5_1, iq4_nl: a block's 32 weights as int8 lanes (ggml's AVX2 unpacking), then u8 x s8 dots
# with each act row (the sign trick for signed weights).
# ------------------------------------------------------------------------------------------------
cdef inline __m256i nibbles_32(const uint8_t *qs) noexcept nogil:
    """The 16 bytes at qs as 32 nibbles: low nibbles in bytes 0..15, high nibbles in 16..31."""
    cdef __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(<const void *>qs))
    cdef __m256i m4 = _mm256_set1_epi8(0x0F)
    # lanes 0..15 keep v, lanes 16..31 take v >> 4: shift the upper 128 bits only
    v = _mm256_inserti128_si256(v, _mm_srli_epi16(_mm256_extracti128_si256(v, 1), 4), 1)
    return _mm256_and_si256(v, m4)


cdef inline __m256i bits_32(const uint8_t *qh) noexcept nogil:
    """0xFF in byte j where bit j of the 4 bytes at qh is set, else 0 (ggml's bytes_from_bits_32)."""
    cdef int32_t x32
    memcpy(&x32, qh, 4)
    cdef __m256i spread = _mm256_setr_epi32(0, 0, 0x01010101, 0x01010101, 0x02020202, 0x02020202,
                                            0x03030303, 0x03030303)
    cdef __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(x32), spread)
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7FBFDFEFF7FBFDFE))
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1))


cdef inline __m256i b32x_weights(int fmt, const uint8_t *blk) noexcept nogil:
    """The block's 32 weights as int8 lanes: q5_0: q - 16, q5_1: q, iq4_nl: its level."""
    if fmt == VX_IQ4_NL:
        return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(<const void *>IQ4_NL_LEVELS)),
                                   nibbles_32(blk + 2))
    if fmt == VX_Q5_0:      # nibble | 0xF0 (= nibble - 16) where the fifth bit is clear
        return _mm256_or_si256(nibbles_32(blk + 6),
                               _mm256_andnot_si256(bits_32(blk + 2), _mm256_set1_epi8(<char>0xF0)))
    return _mm256_or_si256(nibbles_32(blk + 8), _mm256_and_si256(bits_32(blk + 4), _mm256_set1_epi8(0x10)))


cdef inline void b32x_row(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const int8_t **xq,
                          const float **ds, float *out) noexcept nogil:
    """out[i] = dot(the q5_0 / q5_1 / iq4_nl weight row, act row i) for i < MR, as ggml's AVX2 kernels:
    per block the 32 products in 8 int32 lanes (u8 x s8, signed weights through the sign trick) times
    wd * dx into 8 float lanes, q5_1's wm * sx summed aside; then the lanes summed (hsum_ps256)."""
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK
    cdef int bsz = b32x_block_bytes(fmt)
    cdef __m256 acc[4]           # (MR,) 8 float lanes
    cdef float summ[4]           # (MR,) q5_1's m terms
    cdef const uint8_t *blk
    cdef __m256i w, u
    cdef float wd, wm
    cdef int64_t b
    cdef int i
    for i in range(MR):
        acc[i] = _mm256_setzero_ps()
        summ[i] = 0.0
    for b in range(nb):
        blk = row + b * bsz
        w = b32x_weights(fmt, blk)
        b32x_scales(fmt, blk, &wd, &wm)
        if fmt == VX_Q5_1:  # unsigned weights: u8 x s8 as they are
            for i in range(MR):
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(wd * ds[i][2 * b]), _mm256_cvtepi32_ps(
                    dot_u8s8_256(w, _mm256_loadu_si256(<const void *>(xq[i] + b * VX_QK)))), acc[i])
                summ[i] = fmaf(wm, ds[i][2 * b + 1], summ[i])   # one rounding, as the interleaved kernels
        else:
            u = _mm256_sign_epi8(w, w)  # |w|, and x takes w's sign
            for i in range(MR):
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(wd * ds[i][2 * b]), _mm256_cvtepi32_ps(dot_u8s8_256(
                    u, _mm256_sign_epi8(_mm256_loadu_si256(<const void *>(xq[i] + b * VX_QK)), w))), acc[i])
    for i in range(MR):
        out[i] = hsum_ps256(acc[i]) + summ[i]


# ------------------------------------------------------------------------------------------------
# f32 / f16 weights (float_tile / float_rows4: the tier's; the driver: gemm_float_tiles in kernels/gemv.pxi).
# ------------------------------------------------------------------------------------------------
cdef inline void gemm_float(int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                            const void *a, int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """f32 / f16 GEMM: 4 weight rows at a time for a GEMV, tiles of up to 4 act rows (gemm_float_tiles)."""
    gemm_float_tiles(fmt, K, w, w_stride, n, a, a_stride, m, y, ldy)


cdef inline int64_t float_gemv4(int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                                const float *x, float *y) noexcept nogil:
    """A GEMV's weight rows 4 at a time (float_rows4) while 4 are left; returns the rows done."""
    cdef int64_t r0 = 0
    while r0 + 4 <= n:
        float_rows4(fmt, K, w + r0 * w_stride, w_stride, x, y + r0)
        r0 += 4
    return r0


cdef inline void float_rows(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                            int64_t r0, int64_t n, const float **x, float *y, int64_t ldy) noexcept nogil:
    """y[i * ldy + r] = dot(weight row r, x[i]) for r0 <= r < n, i < MR (float_tile per weight row)."""
    cdef int MR = sizeof(act_rows)
    cdef float out[4]            # (MR,)
    cdef int64_t r
    cdef int i
    for r in range(r0, n):
        float_tile(MR_, fmt, K, w + r * w_stride, x, out)
        for i in range(MR):
            y[i * ldy + r] = out[i]
