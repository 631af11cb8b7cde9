# gemv kernels for the k-quants beyond q4_K / q6_K: q2_K, q3_K and q5_K against ggml's q8_K act rows
# (included by kernels/tier.pxi after kernels/gemv.pxi, whose q8_K helpers they use).
#
# A weight row against up to 4 act rows is the tier's kq_row (the x86 tiers' in kernels/avx2/gemv_x86.pxi,
# the portable kq_row_ref below, whose block dots widen the block to int8 in scratch first): int8
# dots per group of 16 (q2_K, q3_K) or sub-block of 32 (q5_K) times the group scales, then the group
# mins and the super-block scales in float:
#   q2_K: xd * (d * sum_g sc_g dot_g - dmin * sum_g mn_g bsum_g)   sc_g, mn_g: 4-bit scale, min
#   q3_K: xd * d * sum_g (sc_g - 32) dot_g                          sc_g: 6-bit scale
#   q5_K: xd * (d * sum_j sc_j dot_j - dmin * sum_j mn_j bsum_j)    get_scale_min_k4, as q4_K
# (xd the act row's d, bsum the act row's sums of 16; q3_K's dots take q + 4 (0..7), minus 4 sc bsum).
# The x86 kq_row sums the floats as the interleaved kernels do (one FMA of (d xd) sumi and one of
# (dmin xd) summ per super-block, then their difference): a weight gives the same bits read as stored
# or interleaved. The portable one adds one float per super-block (ggml's generic order).
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy
from volvox._kernels.vx cimport (
    VX_Q2_K, VX_Q3_K, VX_Q5_K, VX_QK_K, vx_block_q2_K, vx_block_q3_K, vx_block_q5_K, vx_table)
from volvox._kernels.kquant_scales cimport q3k_scales, q4k_scales


cdef inline void q2k_widen(const vx_block_q2_K *blk, int8_t *q) noexcept nogil:
    """q (256,) = the super-block's 2-bit values: value 128 h + 32 s + l is bits 2s..2s+1 of
    qs[32 h + l]."""
    cdef int h, s, l
    for h in range(2):
        for s in range(4):
            for l in range(32):
                q[128 * h + 32 * s + l] = <int8_t>((blk.qs[32 * h + l] >> (2 * s)) & 3)


cdef inline void q3k_widen(const vx_block_q3_K *blk, int8_t *q) noexcept nogil:
    """q (256,) = the super-block's signed values: value 128 h + 32 s + l is bits 2s..2s+1 of
    qs[32 h + l], minus 4 unless bit 4 h + s of hmask[l] is set."""
    cdef int h, s, l, j
    for h in range(2):
        for s in range(4):
            j = 4 * h + s
            for l in range(32):
                q[32 * j + l] = <int8_t>(((blk.qs[32 * h + l] >> (2 * s)) & 3)
                                          - (0 if (blk.hmask[l] >> j) & 1 else 4))


cdef inline void q5k_widen(const vx_block_q5_K *blk, int8_t *q) noexcept nogil:
    """q (256,) = the super-block's 5-bit values: sub-block 2 p takes the low nibbles of qs[32 p ..],
    2 p + 1 the high ones; bit j of qh[l] is the 5th bit of value l of sub-block j."""
    cdef int p, l
    for p in range(4):
        for l in range(32):
            q[64 * p + l] = <int8_t>((blk.qs[32 * p + l] & 0x0F) | (((blk.qh[l] >> (2 * p)) & 1) << 4))
            q[64 * p + 32 + l] = <int8_t>((blk.qs[32 * p + l] >> 4) | (((blk.qh[l] >> (2 * p + 1)) & 1) << 4))


cdef inline int32_t dot16_i8(const int8_t *w, const int8_t *x) noexcept nogil:
    """int8 . int8 over 16 values."""
    cdef int32_t s = 0
    cdef int j
    for j in range(16):
        s += <int32_t>w[j] * <int32_t>x[j]
    return s


cdef inline int32_t q2k_block_dot_ref(const vx_block_q2_K *blk, const int8_t *q8) noexcept nogil:
    """sum over the 16 groups of 16 of (4-bit scale) * dot(q2 (0..3), q8) (before d, dmin)."""
    cdef int8_t q[256]           # (VX_QK_K,)
    cdef int32_t sumi = 0
    cdef int g
    q2k_widen(blk, q)
    for g in range(16):
        sumi += (blk.scales[g] & 0x0F) * dot16_i8(q + 16 * g, q8 + 16 * g)
    return sumi


cdef inline int32_t q3k_block_dot_ref(const vx_block_q3_K *blk, const int8_t *sc, const int8_t *q8) noexcept nogil:
    """sum over the 16 groups of 16 of sc * dot(q3 + 4 (0..7), q8) (before - 4 sc bsum, d)."""
    cdef int8_t q[256]           # (VX_QK_K,)
    cdef int32_t sumi = 0
    cdef int g, l
    q3k_widen(blk, q)
    for l in range(256):
        q[l] += 4
    for g in range(16):
        sumi += sc[g] * dot16_i8(q + 16 * g, q8 + 16 * g)
    return sumi


cdef inline int32_t q5k_block_dot_ref(const vx_block_q5_K *blk, const uint8_t *sc, const int8_t *q8) noexcept nogil:
    """sum over the 8 sub-blocks of 32 of sc * dot(q5 (0..31), q8) (before d, dmin)."""
    cdef int8_t q[256]           # (VX_QK_K,)
    cdef int32_t sumi = 0
    cdef int j
    q5k_widen(blk, q)
    for j in range(8):
        sumi += sc[j] * (dot16_i8(q + 32 * j, q8 + 32 * j) + dot16_i8(q + 32 * j + 16, q8 + 32 * j + 16))
    return sumi


cdef inline float kq_block_dot_ref(int fmt, const uint8_t *blk, const int8_t *xq, float xd,
                                   const int32_t *bsums) noexcept nogil:
    """One q2_K / q3_K / q5_K super-block against 256 q8_K act values (xd, bsums: their scale and
    sums of 16), the float result as the module comment writes it (portable)."""
    cdef int8_t sc3[16]          # (16,) q3_K scales
    cdef uint8_t sc[8]           # (8,) q5_K scales
    cdef uint8_t mn[8]           # (8,) q5_K mins
    cdef int32_t sumi, summ = 0
    cdef int g
    cdef const vx_block_q2_K *b2
    cdef const vx_block_q3_K *b3
    cdef const vx_block_q5_K *b5
    if fmt == VX_Q2_K:
        b2 = <const vx_block_q2_K *>blk
        for g in range(16):
            summ += (b2.scales[g] >> 4) * bsums[g]
        sumi = q2k_block_dot_ref(b2, xq)
        return xd * vx_f16_to_f32(b2.d) * <float>sumi - xd * vx_f16_to_f32(b2.dmin) * <float>summ
    if fmt == VX_Q3_K:
        b3 = <const vx_block_q3_K *>blk
        q3k_scales(b3.scales, sc3)
        for g in range(16):
            summ += sc3[g] * bsums[g]
        sumi = q3k_block_dot_ref(b3, sc3, xq) - 4 * summ
        return xd * vx_f16_to_f32(b3.d) * <float>sumi
    b5 = <const vx_block_q5_K *>blk
    q4k_scales(b5.scales, sc, mn)
    for g in range(8):
        summ += mn[g] * (bsums[2 * g] + bsums[2 * g + 1])
    sumi = q5k_block_dot_ref(b5, sc, xq)
    return xd * (vx_f16_to_f32(b5.d) * <float>sumi - vx_f16_to_f32(b5.dmin) * <float>summ)


cdef inline int kq_block_bytes(int fmt) noexcept nogil:
    """Bytes per super-block of q2_K / q3_K / q5_K."""
    return 84 if fmt == VX_Q2_K else (110 if fmt == VX_Q3_K else 176)


cdef inline void kq_row_ref(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const vx_actK *x,
                            float *out) noexcept nogil:
    """Portable: out[i] = dot(the q2_K / q3_K / q5_K weight row, act row i) for i < MR, one float
    per super-block and act row summed in order (ggml's generic order)."""
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK_K
    cdef int bsz = kq_block_bytes(fmt)
    cdef float acc[4]            # (MR,)
    cdef int64_t b
    cdef int i
    for i in range(4):
        acc[i] = 0.0
    for b in range(nb):
        for i in range(MR):
            acc[i] += kq_block_dot_ref(fmt, row + b * bsz, x[i].qs + VX_QK_K * b, x[i].d[b],
                                       x[i].bsums + 16 * b)
    for i in range(MR):
        out[i] = acc[i]


cdef void gemm_kq(int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n, const void *a,
                  int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . q2_K / q3_K / q5_K weight rows w: act rows in groups of up to 4,
    each weight row read once per group (the tier's kq_row)."""
    cdef int64_t i0, r
    cdef int mr, i
    cdef vx_actK x[4]            # (mr,) act rows
    cdef float out[4]            # (mr,)
    cdef const uint8_t *row
    for i0 in range(0, m, 4):
        mr = <int>(m - i0 if m - i0 < 4 else 4)
        for i in range(mr):
            x[i] = actK_row(a, a_stride, i0 + i, K)
        for r in range(n):
            row = w + r * w_stride
            if mr == 1:
                kq_row(<const count_1 *>NULL, fmt, K, row, x, out)
            elif mr == 2:
                kq_row(<const count_2 *>NULL, fmt, K, row, x, out)
            elif mr == 3:
                kq_row(<const count_3 *>NULL, fmt, K, row, x, out)
            else:
                kq_row(<const count_4 *>NULL, fmt, K, row, x, out)
            for i in range(mr):
                y[(i0 + i) * ldy + r] = out[i]


cdef void gemm_q2_K(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                    int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . q2_K weight rows w."""
    gemm_kq(VX_Q2_K, K, w, ws, n, a, as_, m, y, ldy)


cdef void gemm_q3_K(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                    int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . q3_K weight rows w."""
    gemm_kq(VX_Q3_K, K, w, ws, n, a, as_, m, y, ldy)


cdef void gemm_q5_K(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                    int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . q5_K weight rows w."""
    gemm_kq(VX_Q5_K, K, w, ws, n, a, as_, m, y, ldy)


cdef void dequant_q2_K(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q2_K row w as floats (ggml's dequantize_row_q2_K: d sc q - dmin mn)."""
    cdef const vx_block_q2_K *blk = <const vx_block_q2_K *>w
    cdef int8_t q[256]           # (VX_QK_K,)
    cdef int64_t b
    cdef int g, l
    cdef float d, dmin, dl, ml
    for b in range(K // VX_QK_K):
        q2k_widen(&blk[b], q)
        d = vx_f16_to_f32(blk[b].d)
        dmin = vx_f16_to_f32(blk[b].dmin)
        for g in range(16):
            dl = d * <float>(blk[b].scales[g] & 0x0F)
            ml = dmin * <float>(blk[b].scales[g] >> 4)
            for l in range(16):
                y[16 * g + l] = dl * <float>q[16 * g + l] - ml
        y += VX_QK_K


cdef void dequant_q3_K(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q3_K row w as floats (ggml's dequantize_row_q3_K: d (sc - 32) q)."""
    cdef const vx_block_q3_K *blk = <const vx_block_q3_K *>w
    cdef int8_t q[256]           # (VX_QK_K,)
    cdef int8_t sc[16]           # (16,)
    cdef int64_t b
    cdef int g, l
    cdef float d, dl
    for b in range(K // VX_QK_K):
        q3k_widen(&blk[b], q)
        q3k_scales(blk[b].scales, sc)
        d = vx_f16_to_f32(blk[b].d)
        for g in range(16):
            dl = d * <float>sc[g]
            for l in range(16):
                y[16 * g + l] = dl * <float>q[16 * g + l]
        y += VX_QK_K


cdef void dequant_q5_K(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q5_K row w as floats (ggml's dequantize_row_q5_K: d sc q - dmin mn)."""
    cdef const vx_block_q5_K *blk = <const vx_block_q5_K *>w
    cdef int8_t q[256]           # (VX_QK_K,)
    cdef uint8_t sc[8]
    cdef uint8_t mn[8]
    cdef int64_t b
    cdef int j, l
    cdef float d, dmin, dl, ml
    for b in range(K // VX_QK_K):
        q5k_widen(&blk[b], q)
        q4k_scales(blk[b].scales, sc, mn)
        d = vx_f16_to_f32(blk[b].d)
        dmin = vx_f16_to_f32(blk[b].dmin)
        for j in range(8):
            dl = d * <float>sc[j]
            ml = dmin * <float>mn[j]
            for l in range(32):
                y[32 * j + l] = dl * <float>q[32 * j + l] - ml
        y += VX_QK_K


cdef void fill_gemv_kquants(vx_table *t) noexcept:
    """Point t's q2_K / q3_K / q5_K entries at these kernels (activations: the portable q8_K
    quantizer, as for q4_K / q6_K)."""
    t.quantize[VX_Q2_K] = quantize_aK
    t.quantize[VX_Q3_K] = quantize_aK
    t.quantize[VX_Q5_K] = quantize_aK
    t.gemm[VX_Q2_K] = gemm_q2_K
    t.gemm[VX_Q3_K] = gemm_q3_K
    t.gemm[VX_Q5_K] = gemm_q5_K
    t.dequant[VX_Q2_K] = dequant_q2_K
    t.dequant[VX_Q3_K] = dequant_q3_K
    t.dequant[VX_Q5_K] = dequant_q5_K
