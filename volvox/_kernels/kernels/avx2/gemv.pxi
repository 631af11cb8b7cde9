# The avx2 tier's own gemv microkernels (kernels/gemv.pxi has the shared bodies; gemv_x86.pxi the
# x86 code the avx512 tier shares).
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.string cimport memcpy
from volvox._kernels.vx cimport (
    VX_ALIGN, VX_F16, VX_F32, VX_IQ4_NL, VX_Q4_0, VX_Q4_1, VX_Q5_0, VX_Q5_1, VX_Q8_0, VX_QK, vx_act_corrections,
    vx_il_block_bytes, vx_table)

include "gemv_x86.pxi"
from volvox._kernels.simd.ivec_avx2 cimport *
include "../gemv_kquants_il.pxi"


cdef inline __m256i dot_u8s8_256(__m256i u, __m256i s) noexcept nogil:
    """u8 (first) x s8 (second) dot products summed in groups of 4 into 8 int32 lanes."""
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))


cdef inline __m256i dot_u8s8_scaled(__m256i u, __m256i s, int s_lo, int s_hi) noexcept nogil:
    """dot of 32 u8 x s8 (8 int32 lanes) with the first 16 products scaled by s_lo, the last 16 by s_hi."""
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                             _mm256_set_m128i(_mm_set1_epi16(<short>s_hi), _mm_set1_epi16(<short>s_lo)))


cdef inline int64_t b32_wide_rows(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                                  int64_t n, const int8_t **xq, const float **ds, float *y,
                                  int64_t ldy) noexcept nogil:
    """No wide tiles on avx2: every weight row goes through b32_avx2_tile (returns the first row left)."""
    return 0


cdef inline __m256 wload8(int fmt, const uint8_t *row, int64_t k) noexcept nogil:
    """Weights k .. k + 7 of an f32 or f16 row as 8 floats."""
    if fmt == VX_F32:
        return _mm256_loadu_ps(<const float *>(row + 4 * k))
    return _mm256_cvtph_ps(_mm_loadu_si128(<const void *>(row + 2 * k)))


cdef inline void float_tile(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const float **x,
                            float *out) noexcept nogil:
    """One f32 / f16 weight row against MR act rows: out[i] = dot(row, x[i]) (8 lanes, hsum, then
    the tail in order)."""
    cdef int MR = sizeof(act_rows)
    cdef __m256 acc[4]           # (MR,)
    cdef __m256 wv
    cdef int64_t k = 0
    cdef int64_t kk
    cdef int i
    cdef float s
    for i in range(MR):
        acc[i] = _mm256_setzero_ps()
    while k + 8 <= K:
        wv = wload8(fmt, row, k)
        for i in range(MR):
            acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[i] + k), acc[i])
        k += 8
    for i in range(MR):
        s = hsum_ps256(acc[i])
        for kk in range(k, K):
            s += wload(fmt, row, kk) * x[i][kk]
        out[i] = s


cdef inline void float_rows4(int fmt, int64_t K, const uint8_t *w, int64_t ws, const float *x,
                             float *out) noexcept nogil:
    """One act row against 4 weight rows: 4 independent FMA chains and 4 memory streams (a GEMV is
    bound by them); each row's sum is formed exactly as float_tile forms it."""
    cdef __m256 acc[4]           # (4,) one per weight row
    cdef __m256 xv
    cdef int64_t k = 0
    cdef int64_t kk
    cdef int r
    cdef float s
    for r in range(4):
        acc[r] = _mm256_setzero_ps()
    while k + 8 <= K:
        xv = _mm256_loadu_ps(x + k)
        for r in range(4):
            acc[r] = _mm256_fmadd_ps(wload8(fmt, w + r * ws, k), xv, acc[r])
        k += 8
    for r in range(4):
        s = hsum_ps256(acc[r])
        for kk in range(k, K):
            s += wload(fmt, w + r * ws, kk) * x[kk]
        out[r] = s


cdef inline int64_t dequant_f16_vec(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y[k] = f16 weight k for k < K rounded down to 8 (F16C); returns that count."""
    cdef int64_t k = 0
    while k + 8 <= K:
        _mm256_storeu_ps(y + k, _mm256_cvtph_ps(_mm_loadu_si128(<const void *>(w + 2 * k))))
        k += 8
    return k


# ------------------------------------------------------------------------------------------------
# Interleaved 32-block weights (vx.pxd): 8 rows per group, lane l of all 8 rows in one ymm.
# ------------------------------------------------------------------------------------------------
cdef enum:
    IL_ROWS = 8                 # rows per interleaved group: one int32 lane of a ymm each
    IL_PREFETCH = 1024          # bytes ahead of the block being read that a group asks for


cdef inline void b32_il_group(int fmt, int64_t K, const uint8_t *g, const int8_t *xq, const float *ds,
                              float *out) noexcept nogil:
    """One group's 8 weight rows against one act row: out[r] = dot(row r, act row), each formed as
    b32_avx2_tile forms it (ggml's AVX2 order): per block, lane l's 4 products as an exact int32
    (maddubs + madd, as dot_u8s8_256; q4_0's from the act row's corr: (nibble - 8) * q, ggml's lanes)
    times wd * dx into float lane l; q4_1 / q5_1's m-term an FMA chain; then the lanes summed in
    hsum_ps256's order and the m-term added. acc[l] holds lane l of the 8 rows.
    q8_0 bytes are stored + 128 (vx.pxd): xor gives the signed weights back, and |w| times x with w's
    sign is ggml's q8_0 product; iq4_nl's nibbles select its levels (pshufb), multiplied the same way
    (as b32x_row); q5_0 / q5_1's 5th bits (a mask per lane and half, vx.pxd) add 16 to their nibbles
    (q5_0: then - 16, signed as q8_0's)."""
    cdef int64_t nb = K // VX_QK
    cdef int64_t sb = vx_il_block_bytes(fmt, IL_ROWS)          # bytes per block of the group
    cdef bint has_m = fmt == VX_Q4_1 or fmt == VX_Q5_1
    cdef bint has_qh = fmt == VX_Q5_0 or fmt == VX_Q5_1
    cdef int qhoff = (4 if has_m else 2) * IL_ROWS             # offset of q5's 5th bits in the block
    cdef int qoff = qhoff + (4 * IL_ROWS if has_qh else 0)     # offset of qs in the block
    # pshufb control spreading a lane's two 32-bit 5th-bit masks (low, high nibbles) over its bytes:
    # byte j takes mask byte j / 8 (spread_lo) or 4 + j / 8 (spread_hi), then tests bit j % 8 (bit)
    cdef __m256i spread_lo = _mm256_setr_epi32(0, 0, 0x01010101, 0x01010101, 0x02020202, 0x02020202,
                                               0x03030303, 0x03030303)
    cdef __m256i spread_hi = _mm256_setr_epi32(0x04040404, 0x04040404, 0x05050505, 0x05050505, 0x06060606,
                                               0x06060606, 0x07070707, 0x07070707)
    cdef __m256i bit = _mm256_set1_epi64x(-0x7fbfdfeff7fbfdff)   # bytes 0x01, 0x02 .. 0x80
    cdef __m256i sixteen = _mm256_set1_epi8(16)
    cdef __m256i hq
    cdef long long h5            # lane l's two 5th-bit masks: bit 4 r + k, row r's byte k
    cdef __m256i m4 = _mm256_set1_epi8(0x0F)
    cdef __m256i flip = _mm256_set1_epi8(<char>-128)
    cdef __m256 acc[8]           # (lane,) 8 rows each
    cdef __m256 accm = _mm256_setzero_ps()                     # (8,) m-term chains
    cdef __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(<const void *>IQ4_NL_LEVELS))
    cdef __m256 dd
    cdef __m256i p, wq, wlo, whi
    cdef int32_t xl[8]           # the block's 32 act values as 8 groups of 4 bytes
    cdef const int32_t *corr = vx_act_corrections(xq, K)       # (K/4,) q4_0: each lane's start
    cdef const uint8_t *blk
    cdef int64_t b
    cdef int l
    for l in range(8):
        acc[l] = _mm256_setzero_ps()
    for b in range(nb):
        blk = g + b * sb
        for l in range(0, sb, 64):
            _mm_prefetch(<const char *>(blk + IL_PREFETCH + l), _MM_HINT_T0)
        dd = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(<const void *>blk)), _mm256_set1_ps(ds[2 * b]))
        memcpy(xl, xq + b * VX_QK, VX_QK)
        if fmt == VX_Q8_0:
            for l in range(8):
                p = _mm256_xor_si256(_mm256_loadu_si256(<const void *>(blk + qoff + 32 * l)), flip)
                wq = _mm256_sign_epi8(p, p)
                acc[l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8_256(wq, _mm256_sign_epi8(_mm256_set1_epi32(xl[l]), p))),
                                         dd, acc[l])
        elif fmt == VX_IQ4_NL:
            for l in range(4):
                p = _mm256_loadu_si256(<const void *>(blk + qoff + 32 * l))
                wlo = _mm256_shuffle_epi8(levels, _mm256_and_si256(p, m4))
                whi = _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16(p, 4), m4))
                acc[l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8_256(
                    _mm256_sign_epi8(wlo, wlo), _mm256_sign_epi8(_mm256_set1_epi32(xl[l]), wlo))), dd, acc[l])
                acc[l + 4] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8_256(
                    _mm256_sign_epi8(whi, whi), _mm256_sign_epi8(_mm256_set1_epi32(xl[l + 4]), whi))), dd, acc[l + 4])
        elif has_qh:
            for l in range(4):
                p = _mm256_loadu_si256(<const void *>(blk + qoff + 32 * l))
                memcpy(&h5, blk + qhoff + 8 * l, 8)
                hq = _mm256_set1_epi64x(h5)
                wlo = _mm256_or_si256(_mm256_and_si256(p, m4), _mm256_and_si256(
                    _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(hq, spread_lo), bit), bit), sixteen))
                whi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(p, 4), m4), _mm256_and_si256(
                    _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(hq, spread_hi), bit), bit), sixteen))
                if fmt == VX_Q5_1:
                    acc[l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8_256(wlo, _mm256_set1_epi32(xl[l]))), dd, acc[l])
                    acc[l + 4] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8_256(whi, _mm256_set1_epi32(xl[l + 4]))),
                                                 dd, acc[l + 4])
                else:
                    wlo = _mm256_sub_epi8(wlo, sixteen)
                    whi = _mm256_sub_epi8(whi, sixteen)
                    acc[l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8_256(
                        _mm256_sign_epi8(wlo, wlo), _mm256_sign_epi8(_mm256_set1_epi32(xl[l]), wlo))), dd, acc[l])
                    acc[l + 4] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8_256(
                        _mm256_sign_epi8(whi, whi), _mm256_sign_epi8(_mm256_set1_epi32(xl[l + 4]), whi))), dd, acc[l + 4])
            if fmt == VX_Q5_1:
                accm = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(<const void *>(blk + 16))),
                                       _mm256_set1_ps(ds[2 * b + 1]), accm)
        else:
            for l in range(4):
                p = _mm256_loadu_si256(<const void *>(blk + qoff + 32 * l))
                wlo = dot_u8s8_256(_mm256_and_si256(p, m4), _mm256_set1_epi32(xl[l]))
                whi = dot_u8s8_256(_mm256_and_si256(_mm256_srli_epi16(p, 4), m4), _mm256_set1_epi32(xl[l + 4]))
                if fmt == VX_Q4_0:
                    wlo = _mm256_add_epi32(wlo, _mm256_set1_epi32(corr[8 * b + l]))
                    whi = _mm256_add_epi32(whi, _mm256_set1_epi32(corr[8 * b + l + 4]))
                acc[l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(wlo), dd, acc[l])
                acc[l + 4] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(whi), dd, acc[l + 4])
            if fmt == VX_Q4_1:
                accm = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(<const void *>(blk + 16))),
                                       _mm256_set1_ps(ds[2 * b + 1]), accm)
    _mm256_storeu_ps(out, _mm256_add_ps(
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
                      _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]))), accm))


cdef inline void gemm_il_b32(int fmt, int64_t K, const uint8_t *w, int64_t group_bytes, int64_t n, const void *a,
                             int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved weights w (groups of 8 rows, group_bytes apart), each group
    against the act rows one at a time (16 ymm registers hold one row's lanes)."""
    cdef int64_t g, i, r, rows
    cdef const int8_t *xq
    cdef float out[8]            # (IL_ROWS,)
    for g in range((n + IL_ROWS - 1) // IL_ROWS):
        rows = n - g * IL_ROWS if n - g * IL_ROWS < IL_ROWS else IL_ROWS
        for i in range(m):
            xq = <const int8_t *>a + i * a_stride
            b32_il_group(fmt, K, w + g * group_bytes, xq, <const float *>(<const char *>xq + VX_ALIGN(K)), out)
            for r in range(rows):
                y[i * ldy + g * IL_ROWS + r] = out[r]


cdef void gemm_il_q4_0(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q4_0 weights."""
    gemm_il_b32(VX_Q4_0, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q4_1(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q4_1 weights."""
    gemm_il_b32(VX_Q4_1, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q8_0(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q8_0 weights."""
    gemm_il_b32(VX_Q8_0, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_iq4_nl(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                         int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved iq4_nl weights."""
    gemm_il_b32(VX_IQ4_NL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q5_0(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q5_0 weights."""
    gemm_il_b32(VX_Q5_0, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q5_1(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q5_1 weights."""
    gemm_il_b32(VX_Q5_1, K, w, gs, n, a, as_, m, y, ldy)


cdef void fill_gemv_il(vx_table *t, bint vbmi) noexcept:
    """The interleaved GEMVs: 8 rows per group (the k-quants' too: VI_ROWS); vbmi (AVX-512 only) unused."""
    t.il_rows = IL_ROWS
    t.gemm_il[VX_Q4_0] = gemm_il_q4_0
    t.gemm_il[VX_Q4_1] = gemm_il_q4_1
    t.gemm_il[VX_Q8_0] = gemm_il_q8_0
    t.gemm_il[VX_IQ4_NL] = gemm_il_iq4_nl
    t.gemm_il[VX_Q5_0] = gemm_il_q5_0
    t.gemm_il[VX_Q5_1] = gemm_il_q5_1
    fill_gemv_kquants_il(t)
