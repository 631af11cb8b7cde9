# gemv kernels: the bodies every tier shares (each tier's own microkernels: kernels/<tier>/gemv.pxi).
#
# Weights are ggml blocks read in place; activations are quantized on the fly into an 8-bit "act"
# row (layout: vx.pxd), then the kernels do integer dot products per block and apply
# the block scales in float. Every kernel has a portable version here (the fallback, and the
# reference the SIMD versions are tested against); a tier supplies these names:
#   vx_f16_to_f32, vx_round_f16      fp16 conversions (F16C, NEON fcvt, or the portable ones below)
#   dot32_s8                         int8 . int8 over one 32-value block
#   quantize_a32                     the 32-block activation quantizer (ggml's AVX2 one on x86)
#   quantize_aK                      the q8_K activation quantizer (quantize_aK_ref's bits)
#   b32_rows                         the 32-block GEMM of a group of act rows
#   gemm_float                       the f32 / f16 GEMM (gemm_float_tiles or the portable one)
#   float_gemv4, float_rows          gemm_float_tiles' GEMV 4-row passes, GEMM of a group of act rows
#   q4k_block_dot, q6k_block_dot     the integer part of one k-quant super-block
#   dequant_f16_vec                  the f16 row conversion's vector part
#
# Hot spot: the 32-block GEMV (gemm_b32 with m == 1): SmolLM2 decode streams ~85 MB of q4_1 / q8_0
# weights per token through it (b32_rows with MR == 1).
#
# Numerics: activation quantization and the x86 SIMD dot products follow ggml's x86 code step for
# step (see vx.pxd), so results equal llama.cpp's bit for bit. Expressions keep ggml's shapes:
# GCC contracts a * b + c into an FMA where the tier has one, as it does for ggml's C.
from libc.math cimport fabsf, fmaf, fmaxf, lrintf
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy
from volvox._kernels.vx cimport (
    VX_ALIGN, VX_F16, VX_F32, VX_Q4_0, VX_Q4_1, VX_Q4_K, VX_Q6_K, VX_Q8_0, VX_QK, VX_QK_K, vx_act_corrections,
    vx_block_q4_0, vx_block_q4_1, vx_block_q4_K, vx_block_q6_K, vx_block_q8_0, vx_f16, vx_table)
from volvox._kernels.kquant_scales cimport q4k_scales

cdef extern from *:
    # Powers of two as C literals (hex float literals: exact, and Python has no syntax for them).
    float P2_112 "0x1.0p+112f"
    float P2_M110 "0x1.0p-110f"
    float P2_M112 "0x1.0p-112f"


# ------------------------------------------------------------------------------------------------
# fp16 <-> fp32
# ------------------------------------------------------------------------------------------------
cdef inline float bits_f32(uint32_t w) noexcept nogil:
    """The float whose bits are w."""
    cdef float f
    memcpy(&f, &w, 4)
    return f


cdef inline uint32_t f32_bits(float f) noexcept nogil:
    """The bits of f."""
    cdef uint32_t w
    memcpy(&w, &f, 4)
    return w


cdef inline float vx_f16_to_f32_ref(vx_f16 h) noexcept nogil:
    """Portable IEEE half -> float (Maratyszcza's FP16 method, as in ggml)."""
    cdef uint32_t w = <uint32_t>h << 16
    cdef uint32_t sign = w & <uint32_t>0x80000000
    cdef uint32_t two_w = w + w
    cdef float normalized = bits_f32((two_w >> 4) + (<uint32_t>0xE0 << 23)) * P2_M112
    cdef float denormalized = bits_f32((two_w >> 17) | (<uint32_t>126 << 23)) - <float>0.5
    cdef uint32_t r = sign | (f32_bits(denormalized) if two_w < (<uint32_t>1 << 27) else f32_bits(normalized))
    return bits_f32(r)


cdef inline vx_f16 vx_f32_to_f16_ref(float f) noexcept nogil:
    """Portable float -> IEEE half, round to nearest even, subnormals and overflow to inf included:
    bit-identical to F16C's _cvtss_sh(x, 0) (ggml_compute_fp32_to_fp16)."""
    cdef float base = (fabsf(f) * P2_112) * P2_M110
    cdef uint32_t w = f32_bits(f)
    cdef uint32_t shl1_w = w + w
    cdef uint32_t sign = w & <uint32_t>0x80000000
    cdef uint32_t bias = shl1_w & <uint32_t>0xFF000000
    if bias < <uint32_t>0x71000000:
        bias = <uint32_t>0x71000000
    base = bits_f32((bias >> 1) + <uint32_t>0x07800000) + base
    cdef uint32_t bits = f32_bits(base)
    cdef uint32_t nonsign = ((bits >> 13) & <uint32_t>0x00007C00) + (bits & <uint32_t>0x00000FFF)
    return <vx_f16>((sign >> 16) | (<uint32_t>0x7E00 if shl1_w > <uint32_t>0xFF000000 else nonsign))


cdef inline int32_t vx_round(float v) noexcept nogil:
    """v rounded half to even (the current rounding mode, as ggml's x86 quantizers)."""
    return <int32_t>lrintf(v)


# ------------------------------------------------------------------------------------------------
# Activation quantization, bit-identical to ggml's x86 build (see vx.pxd):
#   q8_0 / q8_1 (ggml's quantize_row_q8_0 / _q8_1, AVX path), per 32 values:
#     amax = max |x|,  d = fp16(amax / 127),  q = round_half_even(x * (127 / amax))
#     q8_1 (q4_1 weights) also s = fp16(d_f32 * sum(q)), with d_f32 the unrounded d;
#     q4_0 / q8_0 weights get s = d * sum(q) (exact: ggml uses the integers there).
#   q8_K (quantize_row_q8_K_ref), per 256 values:
#     max = the first x of largest |x|, iscale = -127 / max,
#     q = min(127, round_half_even(iscale * x)), d = 1 / iscale (f32, may be < 0).
# ------------------------------------------------------------------------------------------------
# How the block sum s is stored: exact (q4_0 / q8_0 weights) or fp16-rounded (q4_1).
cdef enum:
    VX_S_EXACT = 0
    VX_S_F16 = 1


cdef inline float act_s(int smode, float d_f32, float d16, int32_t sum) noexcept nogil:
    """The act row's s of one block: fp16(d_f32 * sum) (q8_1) or the exact d16 * sum (q8_0)."""
    return vx_round_f16(d_f32 * <float>sum) if smode == VX_S_F16 else d16 * <float>sum


cdef inline void quantize_a32_ref_impl(int smode, int64_t K, const float *x, void *act) noexcept nogil:
    """x (K,) -> act row (q8_0 / q8_1): portable, the same bits as ggml's AVX2 quantizer."""
    cdef int8_t *qs = <int8_t *>act                             # (K,)
    cdef float *ds = <float *>(<char *>act + VX_ALIGN(K))       # (K/32, 2)
    cdef int64_t b
    cdef int j
    cdef const float *xb
    cdef float amax, d, id
    cdef int32_t q, sum
    for b in range(K // VX_QK):
        xb = x + b * VX_QK
        amax = 0.0
        for j in range(VX_QK):
            amax = fmaxf(amax, fabsf(xb[j]))
        d = amax / <float>127.0
        id = <float>127.0 / amax if amax != <float>0.0 else <float>0.0
        sum = 0
        for j in range(VX_QK):
            q = vx_round(xb[j] * id)
            qs[b * VX_QK + j] = <int8_t>q
            sum += q
        ds[2 * b + 0] = vx_round_f16(d)
        ds[2 * b + 1] = act_s(smode, d, ds[2 * b + 0], sum)


cdef void quantize_q8_0(int64_t K, const float *x, void *act) noexcept nogil:
    """Act row of x for q8_0 weights (ggml's q8_0; s exact)."""
    quantize_a32(VX_S_EXACT, K, x, act)


cdef inline void act_lane_corrections(int64_t K, void *act, int32_t factor) noexcept nogil:
    """The q8_0 act row's corr (vx.pxd): corr[j] = -factor * sum(qs[4 j .. 4 j + 3]) for j < K/4."""
    cdef const int8_t *qs = <const int8_t *>act                                  # (K,)
    cdef int32_t *corr = <int32_t *>vx_act_corrections(act, K)                   # (K/4,)
    cdef int64_t j
    for j in range(K // 4):
        corr[j] = -factor * (<int32_t>qs[4 * j] + qs[4 * j + 1] + qs[4 * j + 2] + qs[4 * j + 3])


cdef void quantize_q8_0_q4_0(int64_t K, const float *x, void *act) noexcept nogil:
    """Act row of x for q4_0 weights: ggml's q8_0 (s exact), then its corr for the unsigned nibbles
    (nibble - 8)."""
    quantize_q8_0(K, x, act)
    act_lane_corrections(K, act, 8)


cdef void quantize_q8_1(int64_t K, const float *x, void *act) noexcept nogil:
    """Act row of x for q4_1 weights (ggml's q8_1; s rounded to fp16)."""
    quantize_a32(VX_S_F16, K, x, act)


cdef void quantize_aK_ref(int64_t K, const float *x, void *act) noexcept nogil:
    """x (K,) -> q8_K act row (ggml's quantize_row_q8_K_ref; every tier)."""
    cdef int8_t *qs = <int8_t *>act                                             # (K,)
    cdef float *dd = <float *>(<char *>act + VX_ALIGN(K))                       # (K/256,)
    cdef int32_t *bsums = <int32_t *>(<char *>dd + VX_ALIGN(4 * (K // VX_QK_K)))  # (K/16,)
    cdef int64_t b
    cdef int j, g
    cdef const float *xb
    cdef float amax, mx, ax, iscale
    cdef int32_t q, sum
    for b in range(K // VX_QK_K):
        xb = x + b * VX_QK_K
        amax = 0.0
        mx = 0.0
        for j in range(VX_QK_K):
            ax = fabsf(xb[j])
            if ax > amax:
                amax = ax
                mx = xb[j]
        iscale = <float>-127.0 / mx if amax != <float>0.0 else <float>0.0
        for g in range(VX_QK_K // 16):
            sum = 0
            for j in range(16 * g, 16 * g + 16):
                q = vx_round(iscale * xb[j])
                q = q if q < 127 else 127
                qs[b * VX_QK_K + j] = <int8_t>q
                sum += q
            bsums[b * (VX_QK_K // 16) + g] = sum
        dd[b] = <float>1.0 / iscale if amax != <float>0.0 else <float>0.0


# ------------------------------------------------------------------------------------------------
# 32-block weights: q4_0, q4_1, q8_0.
# Every block contributes  wd * dx * dot(wq, xq) + wm * sx  where
#   q4_0: wq = nibble (0..15), wd = d, wm = -8 d    (q4_0 value = d * (nibble - 8))
#   q4_1: wq = nibble (0..15), wd = d, wm = m       (q4_1 value = d * nibble + m)
#   q8_0: wq = int8,           wd = d, wm = 0
# and dx, sx = dx * sum(xq) come from the act row (the portable tiers' steps). The x86 tiers take q4_0's
# -8 d into the integer lanes instead (each lane of 4 products starts at the act row's corr, -8 times
# its 4 act values' sum: ggml's (nibble - 8) * q lanes) and have no m-term for it.
# ------------------------------------------------------------------------------------------------
cdef inline int b32_block_bytes(int fmt) noexcept nogil:
    """Bytes per block of a 32-block format."""
    return 20 if fmt == VX_Q4_1 else (18 if fmt == VX_Q4_0 else 34)


cdef inline void b32_decode(int fmt, const uint8_t *row, int64_t b, int8_t *wq, float *wd,
                            float *wm) noexcept nogil:
    """Block b of row into int8 weights wq (32,) (nibbles stay unsigned 0..15) and its scales."""
    cdef const vx_block_q8_0 *b8
    cdef const vx_block_q4_1 *b41
    cdef const vx_block_q4_0 *b40
    cdef const uint8_t *qs
    cdef int j
    if fmt == VX_Q8_0:
        b8 = <const vx_block_q8_0 *>row + b
        memcpy(wq, b8.qs, VX_QK)
        wd[0] = vx_f16_to_f32(b8.d)
        wm[0] = 0.0
        return
    if fmt == VX_Q4_1:
        b41 = <const vx_block_q4_1 *>row + b
        qs = &b41.qs[0]
        wd[0] = vx_f16_to_f32(b41.d)
        wm[0] = vx_f16_to_f32(b41.m)
    else:
        b40 = <const vx_block_q4_0 *>row + b
        qs = &b40.qs[0]
        wd[0] = vx_f16_to_f32(b40.d)
        wm[0] = <float>-8.0 * wd[0]
    for j in range(VX_QK // 2):
        wq[j] = <int8_t>(qs[j] & 0x0F)            # low nibbles: values 0..15
        wq[j + VX_QK // 2] = <int8_t>(qs[j] >> 4)  # high nibbles: values 16..31


cdef inline void b32_ref_rows(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                              int64_t n, const int8_t **xq, const float **ds, float *y,
                              int64_t ldy) noexcept nogil:
    """Portable: y[i * ldy + r] = dot(weight row r, act row i) for r < n, i < MR, block by block,
    one float per block and act row (ggml's generic order)."""
    cdef int MR = sizeof(act_rows)
    cdef int64_t nb = K // VX_QK
    cdef int64_t r, b
    cdef int i
    cdef const uint8_t *row
    cdef float acc[4]            # (MR,)
    cdef int8_t wq[32]           # (VX_QK,)
    cdef float wd, wm
    cdef int32_t s
    for r in range(n):
        row = w + r * w_stride
        acc[0] = 0.0
        acc[1] = 0.0
        acc[2] = 0.0
        acc[3] = 0.0
        for b in range(nb):
            b32_decode(fmt, row, b, wq, &wd, &wm)
            for i in range(MR):
                s = dot32_s8(wq, xq[i] + b * VX_QK)
                acc[i] += wd * ds[i][2 * b] * <float>s + wm * ds[i][2 * b + 1]
        for i in range(MR):
            y[i * ldy + r] = acc[i]


# The 32-block GEMM of each (format, number of act rows), b32_rows of the tier, as a function of its
# own: gemm_b32 calls them through B32_ROWS, a table GCC cannot see through, so each is compiled by
# itself. (Inlined into the dispatcher by GCC's late inliner, the block loop lost registers to the
# dispatcher's values: the avx2 q8_0 GEMV loop took 28 instructions per block, 4 of them stack
# loads, against 24 compiled alone.)
ctypedef void (*b32_rows_fn)(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n, const int8_t **xq,
                             const float **ds, float *y, int64_t ldy) noexcept nogil

cdef void b32_rows_q4_0_1(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q4_0 weight rows against 1 act row."""
    b32_rows(<const count_1 *>NULL, VX_Q4_0, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q4_0_2(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q4_0 weight rows against 2 act rows."""
    b32_rows(<const count_2 *>NULL, VX_Q4_0, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q4_0_3(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q4_0 weight rows against 3 act rows."""
    b32_rows(<const count_3 *>NULL, VX_Q4_0, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q4_0_4(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q4_0 weight rows against 4 act rows."""
    b32_rows(<const count_4 *>NULL, VX_Q4_0, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q4_1_1(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q4_1 weight rows against 1 act row."""
    b32_rows(<const count_1 *>NULL, VX_Q4_1, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q4_1_2(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q4_1 weight rows against 2 act rows."""
    b32_rows(<const count_2 *>NULL, VX_Q4_1, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q4_1_3(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q4_1 weight rows against 3 act rows."""
    b32_rows(<const count_3 *>NULL, VX_Q4_1, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q4_1_4(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q4_1 weight rows against 4 act rows."""
    b32_rows(<const count_4 *>NULL, VX_Q4_1, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q8_0_1(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q8_0 weight rows against 1 act row."""
    b32_rows(<const count_1 *>NULL, VX_Q8_0, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q8_0_2(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q8_0 weight rows against 2 act rows."""
    b32_rows(<const count_2 *>NULL, VX_Q8_0, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q8_0_3(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q8_0 weight rows against 3 act rows."""
    b32_rows(<const count_3 *>NULL, VX_Q8_0, K, w, ws, n, xq, ds, y, ldy)

cdef void b32_rows_q8_0_4(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const int8_t **xq,
                          const float **ds, float *y, int64_t ldy) noexcept nogil:
    """q8_0 weight rows against 4 act rows."""
    b32_rows(<const count_4 *>NULL, VX_Q8_0, K, w, ws, n, xq, ds, y, ldy)

cdef b32_rows_fn B32_ROWS[3][4]      # [format: VX_Q4_0, VX_Q4_1, VX_Q8_0][act rows - 1]
B32_ROWS[VX_Q4_0][0] = b32_rows_q4_0_1
B32_ROWS[VX_Q4_0][1] = b32_rows_q4_0_2
B32_ROWS[VX_Q4_0][2] = b32_rows_q4_0_3
B32_ROWS[VX_Q4_0][3] = b32_rows_q4_0_4
B32_ROWS[VX_Q4_1][0] = b32_rows_q4_1_1
B32_ROWS[VX_Q4_1][1] = b32_rows_q4_1_2
B32_ROWS[VX_Q4_1][2] = b32_rows_q4_1_3
B32_ROWS[VX_Q4_1][3] = b32_rows_q4_1_4
B32_ROWS[VX_Q8_0][0] = b32_rows_q8_0_1
B32_ROWS[VX_Q8_0][1] = b32_rows_q8_0_2
B32_ROWS[VX_Q8_0][2] = b32_rows_q8_0_3
B32_ROWS[VX_Q8_0][3] = b32_rows_q8_0_4


cdef inline void gemm_b32(int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                          const void *a, int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """32-block GEMM: act rows in groups of up to 4, each group against every weight row (the weights
    are read once per group; the tier's b32_rows)."""
    cdef int64_t i0
    cdef int mr, i
    cdef const int8_t *xq[4]     # (mr, K)
    cdef const float *ds[4]      # (mr, K/32, 2)
    for i0 in range(0, m, 4):
        mr = <int>(m - i0 if m - i0 < 4 else 4)
        for i in range(4):
            xq[i] = NULL
            ds[i] = NULL
        for i in range(mr):
            xq[i] = <const int8_t *>a + (i0 + i) * a_stride
            ds[i] = <const float *>(<const char *>xq[i] + VX_ALIGN(K))
        B32_ROWS[fmt][mr - 1](K, w, w_stride, n, xq, ds, y + i0 * ldy, ldy)


cdef void gemm_q4_0(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                    int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . q4_0 weight rows w (the tier's 32-block GEMM)."""
    gemm_b32(VX_Q4_0, K, w, ws, n, a, as_, m, y, ldy)


cdef void gemm_q4_1(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                    int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . q4_1 weight rows w (the tier's 32-block GEMM)."""
    gemm_b32(VX_Q4_1, K, w, ws, n, a, as_, m, y, ldy)


cdef void gemm_q8_0(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                    int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = act rows a . q8_0 weight rows w (the tier's 32-block GEMM)."""
    gemm_b32(VX_Q8_0, K, w, ws, n, a, as_, m, y, ldy)


# ------------------------------------------------------------------------------------------------
# k-quants: q4_K and q6_K against a q8_K-style act row.
# ------------------------------------------------------------------------------------------------
ctypedef struct vx_actK:
    const int8_t *qs         # (K,)
    const float *d           # (K/256,)
    const int32_t *bsums     # (K/16,)


cdef inline vx_actK actK_row(const void *a, int64_t a_stride, int64_t i, int64_t K) noexcept nogil:
    """The parts of q8_K act row i."""
    cdef vx_actK r
    r.qs = <const int8_t *>a + i * a_stride
    r.d = <const float *>(<const char *>r.qs + VX_ALIGN(K))
    r.bsums = <const int32_t *>(<const char *>r.d + VX_ALIGN(4 * (K // VX_QK_K)))
    return r


cdef inline int32_t q4k_block_dot_ref(const vx_block_q4_K *blk, const uint8_t *sc, const int8_t *q8) noexcept nogil:
    """Integer part of one q4_K super-block against 256 act values (before d, dmin)."""
    cdef int32_t sumi = 0
    cdef int32_t s_lo, s_hi
    cdef int j, l
    for j in range(4):
        s_lo = 0
        s_hi = 0
        for l in range(32):
            s_lo += (blk.qs[32 * j + l] & 0x0F) * q8[64 * j + l]
            s_hi += (blk.qs[32 * j + l] >> 4) * q8[64 * j + 32 + l]
        sumi += sc[2 * j] * s_lo + sc[2 * j + 1] * s_hi
    return sumi


cdef inline int32_t q6k_block_dot_ref(const vx_block_q6_K *blk, const int8_t *q8) noexcept nogil:
    """sum_k scale_k * dot(q6 unsigned (0..63), q8) over the 16 groups of 16 (before -32, d)."""
    cdef int32_t sumi = 0
    cdef int h, l, g, k, q1, q2, q3, q4
    cdef const uint8_t *ql
    cdef const uint8_t *qh
    cdef const int8_t *sc
    cdef const int8_t *x
    cdef int32_t isum[8]
    for h in range(2):
        ql = blk.ql + 64 * h
        qh = blk.qh + 32 * h
        sc = blk.scales + 8 * h
        x = q8 + 128 * h
        for k in range(8):
            isum[k] = 0
        for l in range(32):
            g = l // 16
            q1 = (ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)
            q2 = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)
            q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)
            q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)
            isum[g + 0] += q1 * x[l]
            isum[g + 2] += q2 * x[l + 32]
            isum[g + 4] += q3 * x[l + 64]
            isum[g + 6] += q4 * x[l + 96]
        for k in range(8):
            sumi += sc[k] * isum[k]
    return sumi


cdef void gemm_q4_K(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n, const void *a,
                    int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . q4_K weight rows w (the tier's q4k_block_dot per super-block): per
    super-block one FMA of (d xd) sumi and one of (dmin xd) summ, then their difference, the float
    steps of the interleaved kernels (kernels/gemv_kquants_il.pxi), so that both give the same bits."""
    cdef int64_t nb = K // VX_QK_K
    cdef int64_t i0, r, b
    cdef int mr, i, j
    cdef vx_actK x[4]
    cdef const vx_block_q4_K *row
    cdef float acc[4]            # (mr,) sum of d xd sumi
    cdef float accm[4]           # (mr,) sum of dmin xd summ
    cdef uint8_t sc[8]
    cdef uint8_t mn[8]
    cdef float d, dmin
    cdef const int32_t *bs
    cdef int32_t summ, sumi
    for i0 in range(0, m, 4):
        mr = <int>(m - i0 if m - i0 < 4 else 4)
        for i in range(mr):
            x[i] = actK_row(a, a_stride, i0 + i, K)
        for r in range(n):
            row = <const vx_block_q4_K *>(w + r * w_stride)
            for i in range(4):
                acc[i] = 0.0
                accm[i] = 0.0
            for b in range(nb):
                q4k_scales(row[b].scales, sc, mn)
                d = vx_f16_to_f32(row[b].d)
                dmin = vx_f16_to_f32(row[b].dmin)
                for i in range(mr):
                    bs = x[i].bsums + 16 * b
                    summ = 0
                    for j in range(8):
                        summ += mn[j] * (bs[2 * j] + bs[2 * j + 1])
                    sumi = q4k_block_dot(&row[b], sc, x[i].qs + VX_QK_K * b)
                    acc[i] = fmaf(d * x[i].d[b], <float>sumi, acc[i])
                    accm[i] = fmaf(dmin * x[i].d[b], <float>summ, accm[i])
            for i in range(mr):
                y[(i0 + i) * ldy + r] = acc[i] - accm[i]


cdef void gemm_q6_K(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n, const void *a,
                    int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = q8_K act rows a . q6_K weight rows w (the tier's q6k_block_dot per super-block): one FMA
    of (d xd) sumi per super-block, as the interleaved kernels."""
    cdef int64_t nb = K // VX_QK_K
    cdef int64_t i0, r, b
    cdef int mr, i, k
    cdef vx_actK x[4]
    cdef const vx_block_q6_K *row
    cdef float acc[4]
    cdef float d
    cdef const int32_t *bs
    cdef int32_t off, sumi
    for i0 in range(0, m, 4):
        mr = <int>(m - i0 if m - i0 < 4 else 4)
        for i in range(mr):
            x[i] = actK_row(a, a_stride, i0 + i, K)
        for r in range(n):
            row = <const vx_block_q6_K *>(w + r * w_stride)
            acc[0] = 0.0
            acc[1] = 0.0
            acc[2] = 0.0
            acc[3] = 0.0
            for b in range(nb):
                d = vx_f16_to_f32(row[b].d)
                for i in range(mr):
                    bs = x[i].bsums + 16 * b
                    off = 0
                    for k in range(16):
                        off += row[b].scales[k] * bs[k]
                    sumi = q6k_block_dot(&row[b], x[i].qs + VX_QK_K * b) - 32 * off
                    acc[i] = fmaf(d * x[i].d[b], <float>sumi, acc[i])
            for i in range(mr):
                y[(i0 + i) * ldy + r] = acc[i]


# ------------------------------------------------------------------------------------------------
# f32 / f16 weights: y = x . w over K floats (a = float rows, a_stride in bytes).
# ------------------------------------------------------------------------------------------------
cdef inline float wload(int fmt, const uint8_t *row, int64_t k) noexcept nogil:
    """Weight k of an f32 or f16 row, as a float."""
    cdef float v
    cdef vx_f16 h
    if fmt == VX_F32:
        memcpy(&v, row + 4 * k, 4)
        return v
    memcpy(&h, row + 2 * k, 2)
    return vx_f16_to_f32(h)


cdef inline void float_ref_rows(int fmt, int MR, int64_t K, const uint8_t *w, int64_t w_stride, int64_t r0,
                                int64_t n, const float **x, float *y, int64_t ldy) noexcept nogil:
    """Portable: y[i * ldy + r] = dot(weight row r, x[i]) for r0 <= r < n, i < MR, with 4 partial
    sums per output (k mod 4), the tail into the first, then (s0 + s1) + (s2 + s3)."""
    cdef int64_t r, k
    cdef int i
    cdef const uint8_t *row
    cdef float acc[4][4]         # (MR, k mod 4)
    cdef float w0, w1, w2, w3, wk
    cdef const float *xk
    for r in range(r0, n):
        row = w + r * w_stride
        for i in range(4):
            acc[i][0] = 0.0
            acc[i][1] = 0.0
            acc[i][2] = 0.0
            acc[i][3] = 0.0
        k = 0
        while k + 4 <= K:
            w0 = wload(fmt, row, k)
            w1 = wload(fmt, row, k + 1)
            w2 = wload(fmt, row, k + 2)
            w3 = wload(fmt, row, k + 3)
            for i in range(MR):
                xk = x[i] + k
                acc[i][0] += w0 * xk[0]
                acc[i][1] += w1 * xk[1]
                acc[i][2] += w2 * xk[2]
                acc[i][3] += w3 * xk[3]
            k += 4
        while k < K:
            wk = wload(fmt, row, k)
            for i in range(MR):
                acc[i][0] += wk * x[i][k]
            k += 1
        for i in range(MR):
            y[i * ldy + r] = (acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3])


cdef inline void gemm_float_ref_impl(int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                                     const void *a, int64_t a_stride, int64_t m, float *y,
                                     int64_t ldy) noexcept nogil:
    """Portable float GEMM (the portable tier's): act rows in groups of up to 4, their count a
    runtime value. (With it a constant, GCC's SLP vectoriser left some of arm64's products
    unfused in the f16 kernel: other bits than the SIMD tiers'.)"""
    cdef int64_t i0
    cdef int mr, i
    cdef const float *x[4]       # (mr,) act rows
    for i0 in range(0, m, 4):
        mr = <int>(m - i0 if m - i0 < 4 else 4)
        for i in range(mr):
            x[i] = <const float *>(<const char *>a + (i0 + i) * a_stride)
        float_ref_rows(fmt, mr, K, w, w_stride, 0, n, x, y + i0 * ldy, ldy)


# The float GEMM of each (format, number of act rows), float_rows of the tier, as a function of its
# own (called through FLOAT_ROWS, as B32_ROWS above: inlined into the dispatcher, the avx2 f16 tile
# of 4 act rows took 12 instructions per 8 k, 4 of them stack loads, against 8 alone).
ctypedef void (*float_rows_fn)(int64_t K, const uint8_t *w, int64_t w_stride, int64_t r0, int64_t n,
                               const float **x, float *y, int64_t ldy) noexcept nogil

cdef void float_rows_f32_1(int64_t K, const uint8_t *w, int64_t ws, int64_t r0, int64_t n, const float **x,
                           float *y, int64_t ldy) noexcept nogil:
    """f32 weight rows r0 .. n - 1 against 1 act row."""
    float_rows(<const count_1 *>NULL, VX_F32, K, w, ws, r0, n, x, y, ldy)

cdef void float_rows_f32_2(int64_t K, const uint8_t *w, int64_t ws, int64_t r0, int64_t n, const float **x,
                           float *y, int64_t ldy) noexcept nogil:
    """f32 weight rows r0 .. n - 1 against 2 act rows."""
    float_rows(<const count_2 *>NULL, VX_F32, K, w, ws, r0, n, x, y, ldy)

cdef void float_rows_f32_3(int64_t K, const uint8_t *w, int64_t ws, int64_t r0, int64_t n, const float **x,
                           float *y, int64_t ldy) noexcept nogil:
    """f32 weight rows r0 .. n - 1 against 3 act rows."""
    float_rows(<const count_3 *>NULL, VX_F32, K, w, ws, r0, n, x, y, ldy)

cdef void float_rows_f32_4(int64_t K, const uint8_t *w, int64_t ws, int64_t r0, int64_t n, const float **x,
                           float *y, int64_t ldy) noexcept nogil:
    """f32 weight rows r0 .. n - 1 against 4 act rows."""
    float_rows(<const count_4 *>NULL, VX_F32, K, w, ws, r0, n, x, y, ldy)

cdef void float_rows_f16_1(int64_t K, const uint8_t *w, int64_t ws, int64_t r0, int64_t n, const float **x,
                           float *y, int64_t ldy) noexcept nogil:
    """f16 weight rows r0 .. n - 1 against 1 act row."""
    float_rows(<const count_1 *>NULL, VX_F16, K, w, ws, r0, n, x, y, ldy)

cdef void float_rows_f16_2(int64_t K, const uint8_t *w, int64_t ws, int64_t r0, int64_t n, const float **x,
                           float *y, int64_t ldy) noexcept nogil:
    """f16 weight rows r0 .. n - 1 against 2 act rows."""
    float_rows(<const count_2 *>NULL, VX_F16, K, w, ws, r0, n, x, y, ldy)

cdef void float_rows_f16_3(int64_t K, const uint8_t *w, int64_t ws, int64_t r0, int64_t n, const float **x,
                           float *y, int64_t ldy) noexcept nogil:
    """f16 weight rows r0 .. n - 1 against 3 act rows."""
    float_rows(<const count_3 *>NULL, VX_F16, K, w, ws, r0, n, x, y, ldy)

cdef void float_rows_f16_4(int64_t K, const uint8_t *w, int64_t ws, int64_t r0, int64_t n, const float **x,
                           float *y, int64_t ldy) noexcept nogil:
    """f16 weight rows r0 .. n - 1 against 4 act rows."""
    float_rows(<const count_4 *>NULL, VX_F16, K, w, ws, r0, n, x, y, ldy)

cdef float_rows_fn FLOAT_ROWS[2][4]  # [format: VX_F32, VX_F16][act rows - 1]
FLOAT_ROWS[0][0] = float_rows_f32_1
FLOAT_ROWS[0][1] = float_rows_f32_2
FLOAT_ROWS[0][2] = float_rows_f32_3
FLOAT_ROWS[0][3] = float_rows_f32_4
FLOAT_ROWS[1][0] = float_rows_f16_1
FLOAT_ROWS[1][1] = float_rows_f16_2
FLOAT_ROWS[1][2] = float_rows_f16_3
FLOAT_ROWS[1][3] = float_rows_f16_4


cdef inline void gemm_float_tiles(int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                                  const void *a, int64_t a_stride, int64_t m, float *y,
                                  int64_t ldy) noexcept nogil:
    """Float GEMM of the SIMD tiers: a GEMV (m == 1) first takes the weight rows the tier's
    float_gemv4 takes (4 at a time), then act rows in groups of up to 4 against the (other) weight
    rows (the tier's float_rows)."""
    cdef int64_t r0 = 0
    cdef int64_t i0
    cdef int mr, i
    cdef const float *x[4]       # (mr,) act rows
    if m == 1:
        r0 = float_gemv4(fmt, K, w, w_stride, n, <const float *>a, y)
    for i0 in range(0, m, 4):
        mr = <int>(m - i0 if m - i0 < 4 else 4)
        for i in range(mr):
            x[i] = <const float *>(<const char *>a + (i0 + i) * a_stride)
        FLOAT_ROWS[fmt - VX_F32][mr - 1](K, w, w_stride, r0, n, x, y + i0 * ldy, ldy)


cdef void gemm_f32(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                   int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = float rows a . f32 weight rows w (the tier's float GEMM)."""
    gemm_float(VX_F32, K, w, ws, n, a, as_, m, y, ldy)


cdef void gemm_f16(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a, int64_t as_,
                   int64_t m, float *y, int64_t ldy) noexcept nogil:
    """y (m, n) = float rows a . f16 weight rows w (the tier's float GEMM)."""
    gemm_float(VX_F16, K, w, ws, n, a, as_, m, y, ldy)


# ------------------------------------------------------------------------------------------------
# Row dequantization (embedding lookups).
# ------------------------------------------------------------------------------------------------
cdef inline void dequant_b32(int fmt, int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the 32-block row w as floats: wd * wq + wm."""
    cdef int64_t b
    cdef int j
    cdef int8_t wq[32]           # (VX_QK,)
    cdef float wd, wm
    for b in range(K // VX_QK):
        b32_decode(fmt, w, b, wq, &wd, &wm)
        for j in range(VX_QK):
            y[b * VX_QK + j] = wd * <float>wq[j] + wm


cdef void dequant_q4_0(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q4_0 row w as floats."""
    dequant_b32(VX_Q4_0, K, w, y)


cdef void dequant_q4_1(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q4_1 row w as floats."""
    dequant_b32(VX_Q4_1, K, w, y)


cdef void dequant_q8_0(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q8_0 row w as floats."""
    dequant_b32(VX_Q8_0, K, w, y)


cdef void dequant_q4_K(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q4_K row w as floats."""
    cdef const vx_block_q4_K *blk = <const vx_block_q4_K *>w
    cdef int64_t b
    cdef int j, l
    cdef uint8_t sc[8]
    cdef uint8_t mn[8]
    cdef float d, dmin
    for b in range(K // VX_QK_K):
        q4k_scales(blk[b].scales, sc, mn)
        d = vx_f16_to_f32(blk[b].d)
        dmin = vx_f16_to_f32(blk[b].dmin)
        for j in range(4):
            for l in range(32):
                y[64 * j + l] = d * sc[2 * j] * (blk[b].qs[32 * j + l] & 0x0F) - dmin * mn[2 * j]
                y[64 * j + 32 + l] = d * sc[2 * j + 1] * (blk[b].qs[32 * j + l] >> 4) - dmin * mn[2 * j + 1]
        y += VX_QK_K


cdef void dequant_q6_K(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the q6_K row w as floats."""
    cdef const vx_block_q6_K *blk = <const vx_block_q6_K *>w
    cdef int64_t b
    cdef int h, l, g
    cdef const uint8_t *ql
    cdef const uint8_t *qh
    cdef const int8_t *sc
    cdef float *yy
    cdef float d
    for b in range(K // VX_QK_K):
        d = vx_f16_to_f32(blk[b].d)
        for h in range(2):
            ql = blk[b].ql + 64 * h
            qh = blk[b].qh + 32 * h
            sc = blk[b].scales + 8 * h
            yy = y + 128 * h
            for l in range(32):
                g = l // 16
                yy[l] = d * sc[g + 0] * <float>(((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32)
                yy[l + 32] = d * sc[g + 2] * <float>(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32)
                yy[l + 64] = d * sc[g + 4] * <float>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32)
                yy[l + 96] = d * sc[g + 6] * <float>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32)
        y += VX_QK_K


cdef void dequant_f32(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the f32 row w."""
    memcpy(y, w, <size_t>K * 4)


cdef void dequant_f16(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """y (K,) = the f16 row w as floats (the tier's vectors, then one at a time)."""
    cdef int64_t k = dequant_f16_vec(K, w, y)
    while k < K:
        y[k] = wload(VX_F16, w, k)
        k += 1


# ------------------------------------------------------------------------------------------------
# The tier's table entries.
# ------------------------------------------------------------------------------------------------
cdef void fill_gemv(vx_table *t, bint vbmi) noexcept:
    """Point t's quantize / gemm / dequant entries at this tier's kernels (k-quant activations: the
    tier's quantize_aK, ggml's quantize_row_q8_K_ref bit for bit on every tier); vbmi: the CPU's
    AVX-512 VBMI may serve (engine/tiers.pxi), as fill_gemv_il takes it."""
    t.quantize[VX_Q4_0] = quantize_q8_0_q4_0
    t.quantize[VX_Q4_1] = quantize_q8_1
    t.quantize[VX_Q8_0] = quantize_q8_0
    t.quantize[VX_Q4_K] = quantize_aK
    t.quantize[VX_Q6_K] = quantize_aK
    t.quantize[VX_F32] = NULL
    t.quantize[VX_F16] = NULL
    t.gemm[VX_Q4_0] = gemm_q4_0
    t.gemm[VX_Q4_1] = gemm_q4_1
    t.gemm[VX_Q8_0] = gemm_q8_0
    t.gemm[VX_Q4_K] = gemm_q4_K
    t.gemm[VX_Q6_K] = gemm_q6_K
    t.gemm[VX_F32] = gemm_f32
    t.gemm[VX_F16] = gemm_f16
    t.dequant[VX_Q4_0] = dequant_q4_0
    t.dequant[VX_Q4_1] = dequant_q4_1
    t.dequant[VX_Q8_0] = dequant_q8_0
    t.dequant[VX_Q4_K] = dequant_q4_K
    t.dequant[VX_Q6_K] = dequant_q6_K
    t.dequant[VX_F32] = dequant_f32
    t.dequant[VX_F16] = dequant_f16
    fill_gemv_il(t, vbmi)
