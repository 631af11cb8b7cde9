# The neon tier's own gemv microkernels (kernels/gemv.pxi has the shared bodies). The dotprod tier
# includes this file too: the int8 dot products go through the vector layer's i8dot, i8dot_acc and
# u6dot32 (vmull / vmlal / vpadal on neon, sdot on dotprod).
#
# Numerics: every kernel here computes each output with the operations, in the order, of the
# portable kernels as GCC compiles them for arm64 (FMA contraction included), so the generic, neon
# and dotprod tiers agree bit for bit: integer dot products are exact whatever their grouping, the
# float GEMV's 4 lanes are the portable kernel's 4 partial sums (k mod 4), and the 32-block tile
# applies each block's scales lane by lane as the portable kernel does per weight row.
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint16_t
from volvox._kernels.vx cimport (
    VX_ALIGN, VX_F16, VX_F32, VX_Q4_0, VX_Q4_1, VX_Q8_0, VX_QK, vx_block_q4_0, vx_block_q4_1, vx_block_q4_K,
    vx_block_q6_K, vx_block_q8_0, vx_f16, vx_table)

include "../gemv_counts.pxi"


# ------------------------------------------------------------------------------------------------
# fp16 <-> fp32 (the FP/SIMD unit's conversions, as C's __fp16 casts compile)
# ------------------------------------------------------------------------------------------------
cdef inline float vx_f16_to_f32(vx_f16 h) noexcept nogil:
    """IEEE half -> float (exact)."""
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0)


cdef inline float vx_round_f16(float f) noexcept nogil:
    """f rounded to the nearest fp16 (ties to even) and back: how ggml stores act scales."""
    return vgetq_lane_f32(vcvt_f32_f16(vcvt_f16_f32(vdupq_n_f32(f))), 0)


cdef inline int32_t dot32_s8(const int8_t *w, const int8_t *x) noexcept nogil:
    """int8 . int8 over one 32-value block."""
    return vaddvq_s32(i8dot_acc(i8dot(vld1q_s8(w), vld1q_s8(x)), vld1q_s8(w + 16), vld1q_s8(x + 16)))


cdef inline void quantize_a32(int smode, int64_t K, const float *x, void *act) noexcept nogil:
    """x (K,) -> act row (q8_0 / q8_1): the portable quantizer (it rounds exactly as ggml's x86 one)."""
    quantize_a32_ref_impl(smode, K, x, act)


cdef void quantize_aK(int64_t K, const float *x, void *act) noexcept nogil:
    """x (K,) -> q8_K act row, portable (quantize_aK_ref)."""
    quantize_aK_ref(K, x, act)


# ------------------------------------------------------------------------------------------------
# 32-block weights (see kernels/gemv.pxi for the block algebra).
# ------------------------------------------------------------------------------------------------
cdef inline float32x4_t f16x4_at(const uint8_t *p0, const uint8_t *p1, const uint8_t *p2,
                                 const uint8_t *p3) noexcept nogil:
    """The 4 fp16 values at p0 .. p3 as floats."""
    cdef uint16x4_t h = vdup_n_u16((<const uint16_t *>p0)[0])
    h = vset_lane_u16((<const uint16_t *>p1)[0], h, 1)
    h = vset_lane_u16((<const uint16_t *>p2)[0], h, 2)
    h = vset_lane_u16((<const uint16_t *>p3)[0], h, 3)
    return vcvt_f32_f16(vreinterpret_f16_u16(h))


cdef inline void b32_neon_tile(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t ws,
                               const int8_t **xq, const float **ds, float *y, int64_t ldy) noexcept nogil:
    """4 weight rows (w, ws bytes apart) against MR act rows: y[i * ldy + j] = dot(row j, act row i).
    Per block each row's integer dot lands in one lane (pairwise adds), and the scales apply lane by
    lane as b32_ref_rows applies them per row: acc + fma(wd * dx, s, wm * sx)."""
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK
    cdef int bsz = b32_block_bytes(fmt)                 # block bytes
    cdef int qoff = 4 if fmt == VX_Q4_1 else 2          # qs offset
    cdef uint8x16_t m4 = vdupq_n_u8(0x0F)
    cdef float32x4_t acc[4]      # (MR,) lanes: the 4 weight rows
    cdef int8x16_t wlo[4]        # (4,) weights 0..15 of each row's block
    cdef int8x16_t whi[4]        # (4,) weights 16..31
    cdef int32x4_t dots[4]       # (4,) lanes summing to each row's block dot
    cdef const uint8_t *rp[4]    # (4,) each row's block b
    cdef float32x4_t wd, wm
    cdef int8x16_t x0, x1
    cdef int32x4_t s
    cdef uint8x16_t q
    cdef int64_t b
    cdef int i, j
    for i in range(MR):
        acc[i] = vdupq_n_f32(0.0)
    for j in range(4):
        rp[j] = w + j * ws
    for b in range(nb):
        wd = f16x4_at(rp[0], rp[1], rp[2], rp[3])
        if fmt == VX_Q4_1:
            wm = f16x4_at(rp[0] + 2, rp[1] + 2, rp[2] + 2, rp[3] + 2)
        elif fmt == VX_Q4_0:
            wm = vmulq_n_f32(wd, <float>-8.0)
        else:
            wm = vdupq_n_f32(0.0)
        for j in range(4):
            if fmt == VX_Q8_0:
                wlo[j] = vld1q_s8(<const int8_t *>(rp[j] + qoff))
                whi[j] = vld1q_s8(<const int8_t *>(rp[j] + qoff + 16))
            else:
                q = vld1q_u8(rp[j] + qoff)
                wlo[j] = vreinterpretq_s8_u8(vandq_u8(q, m4))
                whi[j] = vreinterpretq_s8_u8(vshrq_n_u8(q, 4))
        for i in range(MR):
            x0 = vld1q_s8(xq[i] + b * VX_QK)
            x1 = vld1q_s8(xq[i] + b * VX_QK + 16)
            for j in range(4):
                if fmt == VX_Q8_0:
                    dots[j] = i8dot_acc(i8dot(wlo[j], x0), whi[j], x1)
                else:
                    dots[j] = u6dot32(wlo[j], whi[j], x0, x1)
            s = vpaddq_s32(vpaddq_s32(dots[0], dots[1]), vpaddq_s32(dots[2], dots[3]))  # row j's dot in lane j
            acc[i] = vaddq_f32(acc[i], vfmaq_f32(vmulq_n_f32(wm, ds[i][2 * b + 1]),
                                                 vmulq_n_f32(wd, ds[i][2 * b]), vcvtq_f32_s32(s)))
        for j in range(4):
            rp[j] += bsz
    for i in range(MR):
        vst1q_f32(y + i * ldy, acc[i])


cdef inline void b32_rows(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                          const int8_t **xq, const float **ds, float *y, int64_t ldy) noexcept nogil:
    """y[i * ldy + r] = dot(weight row r, act row i) for r < n, i < MR: weight rows 4 at a time
    (b32_neon_tile: the act rows loaded once per 4 weight rows, the weights decoded once per MR act
    rows), the last n mod 4 as the portable kernel."""
    cdef int64_t r = 0
    while r + 4 <= n:
        b32_neon_tile(MR_, fmt, K, w + r * w_stride, w_stride, xq, ds, y + r, ldy)
        r += 4
    if r < n:
        b32_ref_rows(MR_, fmt, K, w + r * w_stride, w_stride, n - r, xq, ds, y + r, ldy)


# ------------------------------------------------------------------------------------------------
# k-quants: the integer block dots (u6dot32 / i8dot: q4 and q6 values are 0..63).
# ------------------------------------------------------------------------------------------------
cdef inline int32_t q4k_block_dot(const vx_block_q4_K *blk, const uint8_t *sc, const int8_t *q8) noexcept nogil:
    """Integer part of one q4_K super-block against 256 act values (before d, dmin)."""
    cdef uint8x16_t m4 = vdupq_n_u8(0x0F)
    cdef int32x4_t acc = vdupq_n_s32(0)
    cdef uint8x16_t q0, q1
    cdef int j
    for j in range(4):
        q0 = vld1q_u8(blk.qs + 32 * j)
        q1 = vld1q_u8(blk.qs + 32 * j + 16)
        acc = vmlaq_n_s32(acc, u6dot32(vreinterpretq_s8_u8(vandq_u8(q0, m4)), vreinterpretq_s8_u8(vandq_u8(q1, m4)),
                                       vld1q_s8(q8 + 64 * j), vld1q_s8(q8 + 64 * j + 16)), sc[2 * j])
        acc = vmlaq_n_s32(acc, u6dot32(vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)),
                                       vld1q_s8(q8 + 64 * j + 32), vld1q_s8(q8 + 64 * j + 48)), sc[2 * j + 1])
    return vaddvq_s32(acc)


cdef inline int32x4_t q6_group(uint8x16_t q, const int8_t *x, int scale) noexcept nogil:
    """scale * (lanes summing to dot(q, x[0:16])) for one group of 16 q6 values (0..63)."""
    return vmulq_n_s32(i8dot(vreinterpretq_s8_u8(q), vld1q_s8(x)), scale)


cdef inline int32_t q6k_block_dot(const vx_block_q6_K *blk, const int8_t *q8) noexcept nogil:
    """sum_k scale_k * dot(q6 unsigned (0..63), q8) over the 16 groups of 16 (before -32, d)."""
    cdef uint8x16_t m4 = vdupq_n_u8(0x0F)
    cdef uint8x16_t m3 = vdupq_n_u8(3)
    cdef int32x4_t acc = vdupq_n_s32(0)
    cdef uint8x16_t qh, ql0, ql1, q1, q2, q3, q4
    cdef const int8_t *sc
    cdef const int8_t *x
    cdef int h, g
    for h in range(2):
        sc = blk.scales + 8 * h
        x = q8 + 128 * h
        for g in range(2):  # values l = 16 g .. 16 g + 15 of each quarter: scale group g
            qh = vld1q_u8(blk.qh + 32 * h + 16 * g)
            ql0 = vld1q_u8(blk.ql + 64 * h + 16 * g)
            ql1 = vld1q_u8(blk.ql + 64 * h + 32 + 16 * g)
            q1 = vorrq_u8(vandq_u8(ql0, m4), vshlq_n_u8(vandq_u8(qh, m3), 4))
            q2 = vorrq_u8(vandq_u8(ql1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 2), m3), 4))
            q3 = vorrq_u8(vshrq_n_u8(ql0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 4), m3), 4))
            q4 = vorrq_u8(vshrq_n_u8(ql1, 4), vshlq_n_u8(vshrq_n_u8(qh, 6), 4))
            acc = vaddq_s32(acc, q6_group(q1, x + 16 * g, sc[g + 0]))
            acc = vaddq_s32(acc, q6_group(q2, x + 32 + 16 * g, sc[g + 2]))
            acc = vaddq_s32(acc, q6_group(q3, x + 64 + 16 * g, sc[g + 4]))
            acc = vaddq_s32(acc, q6_group(q4, x + 96 + 16 * g, sc[g + 6]))
    return vaddvq_s32(acc)


cdef inline void kq_row(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const vx_actK *x,
                        float *out) noexcept nogil:
    """q2_K / q3_K / q5_K weight row against MR act rows (portable)."""
    kq_row_ref(MR_, fmt, K, row, x, out)


cdef inline void b32x_row(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const int8_t **xq,
                          const float **ds, float *out) noexcept nogil:
    """q5_0 / q5_1 / iq4_nl weight row against MR act rows (portable)."""
    b32x_row_ref(MR_, fmt, K, row, xq, ds, out)


# ------------------------------------------------------------------------------------------------
# f32 / f16 weights: 4 float lanes = float_ref_rows' 4 partial sums (k mod 4).
# ------------------------------------------------------------------------------------------------
cdef inline float32x4_t wload4(int fmt, const uint8_t *row, int64_t k) noexcept nogil:
    """Weights k .. k + 3 of an f32 or f16 row as 4 floats."""
    if fmt == VX_F32:
        return vld1q_f32(<const float *>(row + 4 * k))
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(<const uint16_t *>(row + 2 * k))))


cdef inline float float_lanes_sum(float32x4_t acc, int fmt, const uint8_t *row, const float *x, int64_t k,
                                  int64_t K) noexcept nogil:
    """(s0 + s1) + (s2 + s3) of acc's lanes s0..s3, once weights k .. K - 1 (the tail) went into s0
    in order: float_ref_rows' sum."""
    cdef float lanes[4]          # (4,) acc's lanes: a store, not lane reads of the tile's accumulator
    vst1q_f32(lanes, acc)        # array (those kept the array in memory, stored every iteration)
    cdef float s0 = lanes[0]
    cdef float s1 = lanes[1]
    cdef float s2 = lanes[2]
    cdef float s3 = lanes[3]
    cdef int64_t kk
    for kk in range(k, K):
        s0 += wload(fmt, row, kk) * x[kk]
    return (s0 + s1) + (s2 + s3)


cdef inline void float_tile(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const float **x,
                            float *out) noexcept nogil:
    """One f32 / f16 weight row against MR act rows: out[i] = dot(row, x[i])."""
    cdef int MR = sizeof(act_rows)
    cdef float32x4_t acc[4]      # (MR,)
    cdef float32x4_t wv
    cdef int64_t k = 0
    cdef int i
    for i in range(MR):
        acc[i] = vdupq_n_f32(0.0)
    while k + 4 <= K:
        wv = wload4(fmt, row, k)
        for i in range(MR):
            acc[i] = vfmaq_f32(acc[i], wv, vld1q_f32(x[i] + k))
        k += 4
    for i in range(MR):
        out[i] = float_lanes_sum(acc[i], fmt, row, x[i], k, K)


cdef inline void float_rows4(int fmt, int64_t K, const uint8_t *w, int64_t ws, const float *x,
                             float *out) noexcept nogil:
    """One act row against 4 weight rows: 4 independent FMA chains and 4 memory streams (a GEMV is
    bound by them); each row's sum is formed exactly as float_tile forms it."""
    cdef float32x4_t acc[4]      # (4,) one per weight row
    cdef float32x4_t xv
    cdef int64_t k = 0
    cdef int r
    for r in range(4):
        acc[r] = vdupq_n_f32(0.0)
    while k + 4 <= K:
        xv = vld1q_f32(x + k)
        for r in range(4):
            acc[r] = vfmaq_f32(acc[r], wload4(fmt, w + r * ws, k), xv)
        k += 4
    for r in range(4):
        out[r] = float_lanes_sum(acc[r], fmt, w + r * ws, x, k, K)


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


cdef inline int64_t dequant_f16_vec(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y[k] = f16 weight k for k < K rounded down to 4 (exact conversions); returns that count."""
    cdef int64_t k = 0
    while k + 4 <= K:
        vst1q_f32(y + k, wload4(VX_F16, w, k))
        k += 4
    return k


cdef void fill_gemv_il(vx_table *t, bint vbmi) noexcept:
    """No interleaved weights on this tier (vx.pxd): il_rows stays 0, decode reads the rows as stored."""
    pass
