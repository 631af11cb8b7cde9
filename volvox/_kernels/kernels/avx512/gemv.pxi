# The avx512 tier's own gemv microkernels (kernels/gemv.pxi has the shared bodies; the x86 code it
# shares with the avx2 tier is kernels/avx2/gemv_x86.pxi).
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy
from volvox._kernels.vx cimport (
    VX_F16, VX_F32, VX_IQ4_NL, VX_NTYPES, VX_Q4_0, VX_Q4_1, VX_Q5_0, VX_Q5_1, VX_Q8_0, VX_QK, VX_ALIGN, vx_act_corrections,
    vx_il_block_bytes, vx_table)

include "../avx2/gemv_x86.pxi"
from volvox._kernels.simd.ivec_avx512 cimport *
include "../gemv_kquants_il.pxi"


cdef inline __m256i dot_u8s8_256(__m256i u, __m256i s) noexcept nogil:
    """u8 (first) x s8 (second) dot products summed in groups of 4 into 8 int32 lanes (VNNI)."""
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)


cdef inline __m256i dot_u8s8_scaled(__m256i u, __m256i s, int s_lo, int s_hi) noexcept nogil:
    """dot of 32 u8 x s8 (8 int32 lanes) with the first 16 products scaled by s_lo, the last 16 by s_hi."""
    return _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s),
                              _mm256_set_m128i(_mm_set1_epi32(s_hi), _mm_set1_epi32(s_lo)))


cdef inline void b32_avx512_tile(const row_pairs *NP_, const act_rows *MR_, int fmt, int64_t K,
                                 const uint8_t **rows, int64_t pf, const int8_t **xq, const float **ds,
                                 float *out) noexcept nogil:
    """Weight rows 2 at a time, one per 256-bit half of a zmm, NP zmm (2 * NP rows) per pass over the
    same blocks: each row's 8 lanes see exactly the products and the FMA sequence of the AVX2 tile
    (and of ggml's ggml_vec_dot_q4_0_q8_0 / q4_1_q8_1 / q8_0_q8_0: q4_0's lanes start at the act
    row's corr), so the tiers give identical bits; the zmm only doubles the work per instruction.
    rows: 2 * NP row pointers; out[(2 * NP) * i + j]: act row i, weight row j.
    pf: bytes from each row to the row it prefetches (the next tiles' rows): decode streams the
    weights from DRAM once, and the prefetch keeps that stream ahead of the FMAs."""
    cdef int NP = sizeof(row_pairs)
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK
    cdef int bsz = b32_block_bytes(fmt)                 # block bytes
    cdef int qoff = 4 if fmt == VX_Q4_1 else 2          # qs offset
    cdef __m512i m4 = _mm512_set1_epi8(0x0F)
    cdef __m512i nib = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3)  # [q0 q0 q1 q1]
    # lanes of [d0 m0 d1 m1 d2 m2 d3 m3]: d of rows (0, 1) and of rows (2, 3)
    cdef __m512i pick[2]
    pick[0] = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2)
    pick[1] = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6)
    cdef __m512 acc[4][2]        # (MR, NP) x [row 2p: 8 lanes | row 2p+1: 8 lanes]
    cdef __m256 accm[4]          # (MR,) x lanes 2j + 1: sum of wm * s of row j (q4_1)
    cdef const int32_t *cs[4]    # (MR,) q4_0: the act rows' corr (K/4,)
    cdef int64_t b, off
    cdef int i, j, p
    cdef int32_t v
    cdef __m128i hdm
    cdef __m256 dm
    cdef __m512i wq[2]
    cdef __mmask64 neg[2]
    cdef __m512 dw[2]
    cdef const uint8_t *q0
    cdef const uint8_t *q1
    cdef __m512i wv, z, xv, xs, prod, start
    cdef __m256i t
    cdef __m512 dx
    cdef float mterm[8]
    cdef float *o
    for i in range(MR):
        accm[i] = _mm256_setzero_ps()
        cs[i] = vx_act_corrections(xq[i], K)
        for p in range(NP):
            acc[i][p] = _mm512_setzero_ps()
    for b in range(nb):
        off = b * bsz
        if (off & 63) < bsz:
            for j in range(2 * NP):
                _mm_prefetch(<const char *>(rows[j] + pf + off + 64), _MM_HINT_T0)
        # fp16 (d, m) of each row: q4_1 blocks start with both; q4_0 / q8_0 with d only
        hdm = _mm_setzero_si128()
        memcpy(&v, rows[0] + off, 4)
        hdm = _mm_insert_epi32(hdm, v, 0)
        memcpy(&v, rows[1] + off, 4)
        hdm = _mm_insert_epi32(hdm, v, 1)
        if NP == 2:
            memcpy(&v, rows[2] + off, 4)
            hdm = _mm_insert_epi32(hdm, v, 2)
            memcpy(&v, rows[3] + off, 4)
            hdm = _mm_insert_epi32(hdm, v, 3)
        dm = _mm256_cvtph_ps(hdm)
        neg[0] = 0
        neg[1] = 0
        for p in range(NP):
            q0 = rows[2 * p] + off + qoff
            q1 = rows[2 * p + 1] + off + qoff
            if fmt == VX_Q8_0:
                wv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(<const void *>q0)),
                                        _mm256_loadu_si256(<const void *>q1), 1)
                neg[p] = _mm512_movepi8_mask(wv)
                wq[p] = _mm512_abs_epi8(wv)
            else:
                t = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(<const void *>q0)),
                                            _mm_loadu_si128(<const void *>q1), 1)
                z = _mm512_permutexvar_epi64(nib, _mm512_castsi256_si512(t))
                z = _mm512_mask_srli_epi16(z, <__mmask32>0xFF00FF00, z, 4)  # high nibbles
                wq[p] = _mm512_and_si512(z, m4)
            dw[p] = _mm512_permutexvar_ps(pick[p], _mm512_castps256_ps512(dm))
        for i in range(MR):
            xv = _mm512_broadcast_i64x4(_mm256_loadu_si256(<const void *>(xq[i] + b * VX_QK)))
            dx = _mm512_set1_ps(ds[i][2 * b])
            start = _mm512_setzero_si512()
            if fmt == VX_Q4_0:
                start = _mm512_broadcast_i64x4(_mm256_loadu_si256(<const void *>(cs[i] + 8 * b)))
            for p in range(NP):
                xs = _mm512_mask_sub_epi8(xv, neg[p], _mm512_setzero_si512(), xv) if fmt == VX_Q8_0 else xv
                prod = _mm512_dpbusd_epi32(start, wq[p], xs)
                acc[i][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw[p], dx), _mm512_cvtepi32_ps(prod), acc[i][p])
            if fmt == VX_Q4_1:
                accm[i] = _mm256_fmadd_ps(dm, _mm256_set1_ps(ds[i][2 * b + 1]), accm[i])
    for i in range(MR):
        _mm256_storeu_ps(mterm, accm[i])
        for p in range(NP):
            o = out + 2 * NP * i + 2 * p
            o[0] = hsum_ps256(_mm512_castps512_ps256(acc[i][p])) + (mterm[4 * p + 1] if fmt == VX_Q4_1 else <float>0.0)
            o[1] = hsum_ps256(_mm512_extractf32x8_ps(acc[i][p], 1)) + (mterm[4 * p + 3] if fmt == VX_Q4_1 else <float>0.0)


cdef inline int64_t b32_wide_rows(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                                  int64_t n, const int8_t **xq, const float **ds, float *y,
                                  int64_t ldy) noexcept nogil:
    """Weight rows 4 (then 2) at a time against the MR act rows xq / ds into y[i * ldy + r];
    returns the first row left for b32_avx2_tile (n odd: the last)."""
    cdef int MR = sizeof(act_rows)
    cdef int64_t r = 0
    cdef int np, i, j
    cdef const uint8_t *rows[4]  # (2 * np,) weight rows
    cdef float out[16]           # (MR, 2 * np)
    cdef int64_t pf = 8 * w_stride  # two tiles ahead
    while r + 2 <= n:
        np = 2 if r + 4 <= n else 1
        for j in range(2 * np):
            rows[j] = w + (r + j) * w_stride
        if np == 2:
            b32_avx512_tile(<const count_2 *>NULL, MR_, fmt, K, rows, pf, xq, ds, out)
        else:
            b32_avx512_tile(<const count_1 *>NULL, MR_, fmt, K, rows, pf, xq, ds, out)
        for i in range(MR):
            for j in range(2 * np):
                y[i * ldy + r + j] = out[2 * np * i + j]
        if np == 1:
            r += 2
            break
        r += 4
    return r


cdef inline __m512 wload16(int fmt, const uint8_t *row, int64_t k, __mmask16 mask) noexcept nogil:
    """Weights k .. k + 15 of an f32 or f16 row as 16 floats (lanes outside mask: 0)."""
    if fmt == VX_F32:
        return _mm512_maskz_loadu_ps(mask, row + 4 * k)
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + 2 * k))


cdef inline void float_tile(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const float **x,
                            float *out) noexcept nogil:
    """One f32 / f16 weight row against MR act rows: out[i] = dot(row, x[i]) (16 lanes, the tail
    masked, then the zmm reduction)."""
    cdef int MR = sizeof(act_rows)
    cdef __m512 acc[4]           # (MR,)
    cdef __m512 wv
    cdef int64_t k = 0
    cdef int i
    cdef __mmask16 mask
    for i in range(MR):
        acc[i] = _mm512_setzero_ps()
    while k + 16 <= K:
        wv = wload16(fmt, row, k, 0xFFFF)
        for i in range(MR):
            acc[i] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[i] + k), acc[i])
        k += 16
    if k < K:
        mask = <__mmask16>((1u << (K - k)) - 1u)
        wv = wload16(fmt, row, k, mask)
        for i in range(MR):
            acc[i] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, x[i] + k), acc[i])
    for i in range(MR):
        out[i] = _mm512_reduce_add_ps(acc[i])


cdef inline void float_rows4(int fmt, int64_t K, const uint8_t *w, int64_t ws, const float *x,
                             float *out) noexcept nogil:
    """One act row against 4 weight rows: 4 independent FMA chains and 4 memory streams (a GEMV is
    bound by them); each row's sum is formed exactly as float_tile forms it."""
    cdef __m512 acc[4]           # (4,) one per weight row
    cdef __m512 xv
    cdef int64_t k = 0
    cdef int r
    cdef __mmask16 mask
    for r in range(4):
        acc[r] = _mm512_setzero_ps()
    while k + 16 <= K:
        xv = _mm512_loadu_ps(x + k)
        # f16 rows are short streams (half f32's bytes): ask for the next 4 rows' line at this k
        # (a 50257x768 GEMV from DRAM: 14.8 -> 27 GB/s at 1 thread; f32 decode is faster without)
        if fmt == VX_F16 and k % 32 == 0:
            for r in range(4):
                _mm_prefetch(<const char *>(w + (r + 4) * ws + 2 * k), _MM_HINT_T0)
        for r in range(4):
            acc[r] = _mm512_fmadd_ps(wload16(fmt, w + r * ws, k, 0xFFFF), xv, acc[r])
        k += 16
    if k < K:
        mask = <__mmask16>((1u << (K - k)) - 1u)
        xv = _mm512_maskz_loadu_ps(mask, x + k)
        for r in range(4):
            acc[r] = _mm512_fmadd_ps(wload16(fmt, w + r * ws, k, mask), xv, acc[r])
    for r in range(4):
        out[r] = _mm512_reduce_add_ps(acc[r])


cdef inline int64_t dequant_f16_vec(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y[k] = f16 weight k for k < K rounded down to 16; returns that count."""
    cdef int64_t k = 0
    while k + 16 <= K:
        _mm512_storeu_ps(y + k, wload16(VX_F16, w, k, 0xFFFF))
        k += 16
    return k


# ------------------------------------------------------------------------------------------------
# Interleaved 32-block weights (vx.pxd): 16 rows per group, lane l of all 16 rows in one zmm.
# ------------------------------------------------------------------------------------------------
cdef enum:
    IL_ROWS = 16                # rows per interleaved group: one int32 lane of a zmm each
    IL_PREFETCH = 8192          # bytes ahead of the block being read that a group asks into L2


cdef inline __m512i act_lane(const int8_t *xb, int l) noexcept nogil:
    """Act values 4 l .. 4 l + 3 of a block (xb: its 32 int8) in all 16 int32 lanes. Read from the act
    row itself: from a copy of the block on the stack, each broadcast waits on a store it only partly
    overlaps (store-to-load forwarding), which slows the tile on AMD Zen 4."""
    cdef int32_t v
    memcpy(&v, xb + 4 * l, 4)
    return _mm512_set1_epi32(v)


# A q4_0 / q4_1 / q8_0 format as a type: b32_il_tile takes `const b32_format *`, a null pointer whose
# type's size is the format's VX_ code (modulo VX_NTYPES: VX_Q4_0 is 0), so Cython emits one function
# per format with its branches folded (as kq_format in kernels/gemv_kquants_il.pxi).
ctypedef struct b32_q4_0:
    char n[13]                  # [VX_Q4_0 + VX_NTYPES]
ctypedef struct b32_q4_1:
    char n[1]                   # [VX_Q4_1]
ctypedef struct b32_q8_0:
    char n[2]                   # [VX_Q8_0]
ctypedef fused b32_format:
    b32_q4_0
    b32_q4_1
    b32_q8_0


cdef inline void b32_il_tile(const b32_format *F_, const act_rows *MR_, int64_t K, const uint8_t *g,
                             const int8_t **xq, const float **ds, float *out) noexcept nogil:
    """One group's 16 q4_0 / q4_1 / q8_0 weight rows against MR act rows: out[16 i + r] = dot(row r, act
    row i), each formed as b32_avx2_tile forms it (ggml's order): per block, lane l's 4 products as an
    exact int32 times wd * dx into float lane l; q4_1's m-term an FMA chain; then the lanes summed in
    hsum_ps256's order and the m-term added. acc[i][l] holds lane l of the 16 rows, so every instruction
    serves 16 rows (the row-by-row tile: 2) and the unpacked weights serve MR act rows. q8_0 bytes are
    stored + 128 (VNNI multiplies u8 by s8): each lane starts from -128 * (its 4 act values' sum), so it
    ends at the same int32; q4_0's from -8 * the sum (nibble - 8, ggml's lanes), which comes with its act
    rows (vx.pxd's corr, summed once per act row, not per group); q8_0's are summed here, per block.
    (q5_0 / q5_1 / iq4_nl: b32x_il_tile, kernels/avx512/gemv_il_q5_iq4.pxi.)"""
    cdef int fmt = sizeof(b32_format) % VX_NTYPES
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK
    cdef int64_t sb = vx_il_block_bytes(fmt, IL_ROWS)          # bytes per block of the group
    cdef bint has_m = fmt == VX_Q4_1
    cdef int qoff = (4 if has_m else 2) * IL_ROWS              # offset of qs in the block
    cdef __m512i m4 = _mm512_set1_epi8(0x0F)
    cdef __m512 acc[2][8]        # (MR, lane) 16 rows each
    cdef __m512 accm[2]          # (MR,) 16 m-term chains
    cdef __m512 dd[2]            # (MR,) wd * dx
    cdef __m512 dw, wm
    cdef __m512i p, lo, hi
    cdef __m256i sums
    cdef const int8_t *xb[2]     # (MR,) the block's 32 act values: lane l's 4 bytes at xb[i] + 4 l
    cdef int32_t corr[2][8]      # (MR, group) q8_0: -128 * each group's sum
    cdef const int32_t *cs[2]    # (MR,) q4_0: the act rows' corr (K/4,)
    cdef const int32_t *c[2]     # (MR,) this block's 8 lane starts (q8_0: corr[i])
    cdef const uint8_t *blk
    cdef int64_t b
    cdef int i, l
    for i in range(MR):
        accm[i] = _mm512_setzero_ps()
        for l in range(8):
            acc[i][l] = _mm512_setzero_ps()
        cs[i] = vx_act_corrections(xq[i], K)
        c[i] = corr[i]
    for b in range(nb):
        blk = g + b * sb
        for l in range(0, sb, 64):
            _mm_prefetch(<const char *>(blk + IL_PREFETCH + l), _MM_HINT_T1)
        dw = _mm512_cvtph_ps(_mm256_loadu_si256(<const void *>blk))
        for i in range(MR):
            dd[i] = _mm512_mul_ps(dw, _mm512_set1_ps(ds[i][2 * b]))
            xb[i] = xq[i] + b * VX_QK
        if fmt == VX_Q8_0:
            for i in range(MR):
                sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1),
                                           _mm256_loadu_si256(<const void *>(xq[i] + b * VX_QK)))
                _mm256_storeu_si256(<void *>corr[i], _mm256_sub_epi32(_mm256_setzero_si256(),
                                                                      _mm256_slli_epi32(sums, 7)))
        elif fmt == VX_Q4_0:
            for i in range(MR):
                c[i] = cs[i] + 8 * b
        if fmt == VX_Q8_0:
            for l in range(8):
                p = _mm512_loadu_si512(<const void *>(blk + qoff + 64 * l))
                for i in range(MR):
                    acc[i][l] = _mm512_fmadd_ps(dd[i], _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                        _mm512_set1_epi32(c[i][l]), p, act_lane(xb[i], l))), acc[i][l])
        else:
            for l in range(4):
                p = _mm512_loadu_si512(<const void *>(blk + qoff + 64 * l))
                lo = _mm512_and_si512(p, m4)
                hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4)
                for i in range(MR):
                    acc[i][l] = _mm512_fmadd_ps(dd[i], _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                        _mm512_setzero_si512() if has_m else _mm512_set1_epi32(c[i][l]), lo,
                        act_lane(xb[i], l))), acc[i][l])
                    acc[i][l + 4] = _mm512_fmadd_ps(dd[i], _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                        _mm512_setzero_si512() if has_m else _mm512_set1_epi32(c[i][l + 4]), hi,
                        act_lane(xb[i], l + 4))), acc[i][l + 4])
            if not has_m:
                continue
            wm = _mm512_cvtph_ps(_mm256_loadu_si256(<const void *>(blk + 32)))
            for i in range(MR):
                accm[i] = _mm512_fmadd_ps(wm, _mm512_set1_ps(ds[i][2 * b + 1]), accm[i])
    for i in range(MR):
        _mm512_storeu_ps(out + IL_ROWS * i, _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][4]), _mm512_add_ps(acc[i][2], acc[i][6])),
                          _mm512_add_ps(_mm512_add_ps(acc[i][1], acc[i][5]), _mm512_add_ps(acc[i][3], acc[i][7]))),
            accm[i]))


include "gemv_il_q5_iq4.pxi"


ctypedef fused b32_any_format:
    b32_q4_0
    b32_q4_1
    b32_q8_0
    b32x_q5_0
    b32x_q5_1
    b32x_iq4_nl
    b32x_iq4_nl_vbmi


cdef inline void b32_any_tile(const b32_any_format *F_, const act_rows *MR_, int64_t K, const uint8_t *g,
                              const int8_t **xq, const float **ds, float *out) noexcept nogil:
    """The format's tile: b32_il_tile (q4_0 / q4_1 / q8_0) or b32x_il_tile (q5_0 / q5_1 / iq4_nl)."""
    if b32_any_format is b32_q4_0 or b32_any_format is b32_q4_1 or b32_any_format is b32_q8_0:
        b32_il_tile(F_, MR_, K, g, xq, ds, out)
    else:
        b32x_il_tile(F_, MR_, K, g, xq, ds, out)


cdef inline void gemm_il_b32(const b32_any_format *F_, int64_t K, const uint8_t *w, int64_t group_bytes, int64_t n,
                             const void *a, int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved 32-block weights w (groups of 16 rows, group_bytes apart):
    each group against the act rows 2 at a time (then the last alone)."""
    cdef int64_t g, i0, r, rows
    cdef int i, mr
    cdef const int8_t *xq[2]     # (mr, K)
    cdef const float *ds[2]      # (mr, K/32, 2)
    cdef float out[32]           # (mr, IL_ROWS)
    for g in range((n + IL_ROWS - 1) // IL_ROWS):
        rows = n - g * IL_ROWS if n - g * IL_ROWS < IL_ROWS else IL_ROWS
        for i0 in range(0, m, 2):
            mr = 2 if i0 + 2 <= m else 1
            for i in range(mr):
                xq[i] = <const int8_t *>a + (i0 + i) * a_stride
                ds[i] = <const float *>(<const char *>xq[i] + VX_ALIGN(K))
            if mr == 2:
                b32_any_tile(F_, <const count_2 *>NULL, K, w + g * group_bytes, xq, ds, out)
            else:
                b32_any_tile(F_, <const count_1 *>NULL, K, w + g * group_bytes, xq, ds, out)
            for i in range(mr):
                for r in range(rows):
                    y[(i0 + i) * ldy + g * IL_ROWS + r] = out[IL_ROWS * i + r]


cdef void gemm_il_q4_0(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q4_0 weights."""
    gemm_il_b32(<const b32_q4_0 *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q4_1(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q4_1 weights."""
    gemm_il_b32(<const b32_q4_1 *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void gemm_il_q8_0(int64_t K, const uint8_t *w, int64_t gs, int64_t n, const void *a, int64_t as_,
                       int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . interleaved q8_0 weights."""
    gemm_il_b32(<const b32_q8_0 *>NULL, K, w, gs, n, a, as_, m, y, ldy)


cdef void fill_gemv_il(vx_table *t, bint vbmi) noexcept:
    """The interleaved GEMVs: 16 rows per group (the k-quants' too: VI_ROWS). vbmi (engine/tiers.pxi:
    the CPU has AVX-512 VBMI, not turned off by VOLVOX_IQ4_NL_VBMI=0): iq4_nl looks its levels up
    with vpermb, else with pshufb + masks."""
    t.il_rows = IL_ROWS
    t.gemm_il[VX_Q4_0] = gemm_il_q4_0
    t.gemm_il[VX_Q4_1] = gemm_il_q4_1
    t.gemm_il[VX_Q8_0] = gemm_il_q8_0
    t.gemm_il[VX_IQ4_NL] = gemm_il_iq4_nl_vbmi if vbmi else gemm_il_iq4_nl
    t.gemm_il[VX_Q5_0] = gemm_il_q5_0
    t.gemm_il[VX_Q5_1] = gemm_il_q5_1
    fill_gemv_kquants_il(t)
