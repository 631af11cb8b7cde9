# gemv kernels for the 32-block types beyond q4_0 / q4_1 / q8_0: q5_0, q5_1 and iq4_nl (included by
# kernels/tier.pxi after kernels/gemv.pxi, whose helpers they use).
#
# Each block's 32 weights are unpacked to int8 and multiplied with the act row's int8 block (the
# tier's b32x_row: the x86 tiers' in kernels/avx2/gemv_x86.pxi, the portable b32x_row_ref below). The act rows are the ones q4_0 / q4_1 take: q5_0 and iq4_nl pair with
# ggml's q8_0, q5_1 with ggml's q8_1. Every block contributes
#     wd * dx * dot(wq, xq) + wm * sx
# where q5_0: wq = q - 16 (-16..15), wm = 0; q5_1: wq = q (0..31), wm = m; iq4_nl: wq = the level
# (-127..113), wm = 0. The portable tiers sum one float per block and act row in block order (ggml's
# generic order); the x86 tiers keep 8 float lanes per act row (ggml's AVX2 order).
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy
from volvox._kernels.vx cimport (
    VX_ALIGN, VX_IQ4_NL, VX_Q5_0, VX_Q5_1, VX_QK, vx_act_corrections, vx_block_iq4_nl, vx_block_q5_0,
    vx_block_q5_1, vx_f16, vx_table)

# ggml's kvalues_iq4nl: the 16 levels an iq4_nl nibble selects.
cdef int8_t IQ4_NL_LEVELS[16]
IQ4_NL_LEVELS[:] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]


cdef inline int b32x_block_bytes(int fmt) noexcept nogil:
    """Bytes per block of q5_0 / q5_1 / iq4_nl."""
    return 22 if fmt == VX_Q5_0 else (24 if fmt == VX_Q5_1 else 18)


cdef inline void q5_widen(const uint8_t *qs, uint32_t qh, int8_t bias, int8_t *wq) noexcept nogil:
    """32 five-bit values (low nibbles of qs: values 0..15, high: 16..31; bit j of qh: the 5th bit of
    value j) minus bias into wq (32,)."""
    cdef int j
    for j in range(VX_QK // 2):
        wq[j] = <int8_t>(((qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - bias)
        wq[j + VX_QK // 2] = <int8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - bias)


cdef inline void b32x_decode(int fmt, const uint8_t *row, int64_t b, int8_t *wq, float *wd,
                             float *wm) noexcept nogil:
    """Block b of a q5_0 / q5_1 / iq4_nl row into int8 weights wq (32,) and its scales."""
    cdef const vx_block_q5_0 *b50
    cdef const vx_block_q5_1 *b51
    cdef const vx_block_iq4_nl *bnl
    cdef uint32_t qh
    cdef int j
    if fmt == VX_Q5_0:
        b50 = <const vx_block_q5_0 *>row + b
        memcpy(&qh, b50.qh, 4)
        q5_widen(b50.qs, qh, 16, wq)
        wd[0] = vx_f16_to_f32(b50.d)
        wm[0] = 0.0
    elif fmt == VX_Q5_1:
        b51 = <const vx_block_q5_1 *>row + b
        memcpy(&qh, b51.qh, 4)
        q5_widen(b51.qs, qh, 0, wq)
        wd[0] = vx_f16_to_f32(b51.d)
        wm[0] = vx_f16_to_f32(b51.m)
    else:
        bnl = <const vx_block_iq4_nl *>row + b
        for j in range(VX_QK // 2):
            wq[j] = IQ4_NL_LEVELS[bnl.qs[j] & 0x0F]
            wq[j + VX_QK // 2] = IQ4_NL_LEVELS[bnl.qs[j] >> 4]
        wd[0] = vx_f16_to_f32(bnl.d)
        wm[0] = 0.0


cdef inline int32_t dot32_i8(const int8_t *w, const int8_t *x) noexcept nogil:
    """int8 . int8 over one 32-value block."""
    cdef int32_t s = 0
    cdef int j
    for j in range(VX_QK):
        s += <int32_t>w[j] * <int32_t>x[j]
    return s


cdef inline void b32x_scales(int fmt, const uint8_t *blk, float *wd, float *wm) noexcept nogil:
    """A q5_0 / q5_1 / iq4_nl block's d (and q5_1's m; 0 for the others)."""
    cdef vx_f16 h
    memcpy(&h, blk, 2)
    wd[0] = vx_f16_to_f32(h)
    wm[0] = 0.0
    if fmt == VX_Q5_1:
        memcpy(&h, blk + 2, 2)
        wm[0] = vx_f16_to_f32(h)


cdef inline void b32x_row_ref(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const int8_t **xq,
                              const float **ds, float *out) noexcept nogil:
    """Portable: out[i] = dot(the q5_0 / q5_1 / iq4_nl weight row, act row i) for i < MR, each block
    widened once, one float per block and act row summed in block order."""
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK
    cdef int64_t b
    cdef int i
    cdef int8_t wq[32]           # (VX_QK,)
    cdef float acc[4]            # (MR,)
    cdef float wd, wm
    for i in range(4):
        acc[i] = 0.0
    for b in range(nb):
        b32x_decode(fmt, row, b, wq, &wd, &wm)
        for i in range(MR):
            acc[i] += wd * ds[i][2 * b] * <float>dot32_i8(wq, xq[i] + b * VX_QK) + wm * ds[i][2 * b + 1]
    for i in range(MR):
        out[i] = acc[i]


cdef void gemm_b32x(int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                    const void *a, int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . q5_0 / q5_1 / iq4_nl weight rows w: act rows in groups of up to 4, each
    weight row read once per group (the tier's b32x_row)."""
    cdef int64_t i0, r
    cdef int mr, i
    cdef const int8_t *xq[4]     # (mr, K)
    cdef const float *ds[4]      # (mr, K/32, 2)
    cdef const uint8_t *row
    cdef float out[4]            # (mr,)
    for i0 in range(0, m, 4):
        mr = <int>(m - i0 if m - i0 < 4 else 4)
        for i in range(mr):
            xq[i] = <const int8_t *>a + (i0 + i) * a_stride
            ds[i] = <const float *>(<const char *>xq[i] + VX_ALIGN(K))
        for r in range(n):
            row = w + r * w_stride
            if mr == 1:
                b32x_row(<const count_1 *>NULL, fmt, K, row, xq, ds, out)
            elif mr == 2:
                b32x_row(<const count_2 *>NULL, fmt, K, row, xq, ds, out)
            elif mr == 3:
                b32x_row(<const count_3 *>NULL, fmt, K, row, xq, ds, out)
            else:
                b32x_row(<const count_4 *>NULL, fmt, K, row, xq, ds, out)
            for i in range(mr):
                y[(i0 + i) * ldy + r] = out[i]


cdef void gemm_q5_0(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                    int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_0 act rows a . q5_0 weight rows w."""
    gemm_b32x(VX_Q5_0, K, w, ws, n, a, as_, m, y, ldy)


cdef void gemm_q5_1(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                    int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_1 act rows a . q5_1 weight rows w."""
    gemm_b32x(VX_Q5_1, K, w, ws, n, a, as_, m, y, ldy)


cdef void gemm_iq4_nl(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                      int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_0 act rows a . iq4_nl weight rows w."""
    gemm_b32x(VX_IQ4_NL, K, w, ws, n, a, as_, m, y, ldy)


cdef inline void dequant_b32x(int fmt, int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q5_0 / q5_1 / iq4_nl row w as floats: wd * wq + wm (q5_1), wq * wd (others),
    ggml's dequantize_row_* expressions."""
    cdef int64_t b
    cdef int j
    cdef int8_t wq[32]           # (VX_QK,)
    cdef float wd, wm
    for b in range(K // VX_QK):
        b32x_decode(fmt, w, b, wq, &wd, &wm)
        if fmt == VX_Q5_1:
            for j in range(VX_QK):
                y[b * VX_QK + j] = <float>wq[j] * wd + wm
        else:
            for j in range(VX_QK):
                y[b * VX_QK + j] = <float>wq[j] * wd


cdef void dequant_q5_0(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q5_0 row w as floats."""
    dequant_b32x(VX_Q5_0, K, w, y)


cdef void dequant_q5_1(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q5_1 row w as floats."""
    dequant_b32x(VX_Q5_1, K, w, y)


cdef void dequant_iq4_nl(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the iq4_nl row w as floats."""
    dequant_b32x(VX_IQ4_NL, K, w, y)


cdef void quantize_q8_0_q5_0(int64_t K, const float *x, void *act) noexcept nogil:
    """Act row of x for q5_0 weights: ggml's q8_0, then its corr for unsigned weights q (q - 16)."""
    quantize_q8_0(K, x, act)
    act_lane_corrections(K, act, 16)


cdef void quantize_q8_0_iq4_nl(int64_t K, const float *x, void *act) noexcept nogil:
    """Act row of x for iq4_nl weights: ggml's q8_0, then its corr for unsigned levels + 128."""
    quantize_q8_0(K, x, act)
    act_lane_corrections(K, act, 128)


cdef void fill_gemv_q5_iq4(vx_table *t) noexcept:
    """Point t's q5_0 / q5_1 / iq4_nl entries at these kernels (the act quantizers are the tier's
    q8_0 / q8_1 ones, as ggml pairs them; q5_0's and iq4_nl's add the lane corrections)."""
    t.quantize[VX_Q5_0] = quantize_q8_0_q5_0
    t.quantize[VX_Q5_1] = quantize_q8_1
    t.quantize[VX_IQ4_NL] = quantize_q8_0_iq4_nl
    t.gemm[VX_Q5_0] = gemm_q5_0
    t.gemm[VX_Q5_1] = gemm_q5_1
    t.gemm[VX_IQ4_NL] = gemm_iq4_nl
    t.dequant[VX_Q5_0] = dequant_q5_0
    t.dequant[VX_Q5_1] = dequant_q5_1
    t.dequant[VX_IQ4_NL] = dequant_iq4_nl
