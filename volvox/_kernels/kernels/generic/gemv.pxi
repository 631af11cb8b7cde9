# The generic tier's own gemv microkernels (kernels/gemv.pxi has the shared bodies): the portable
# kernels, plain C loops (the compiler may still vectorise what it can prove independent).
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from volvox._kernels.vx cimport VX_QK, vx_block_q4_K, vx_block_q6_K, vx_f16, vx_table

include "../gemv_counts.pxi"


cdef inline float vx_f16_to_f32(vx_f16 h) noexcept nogil:
    """IEEE half -> float (portable)."""
    return vx_f16_to_f32_ref(h)


cdef inline float vx_round_f16(float f) noexcept nogil:
    """f rounded to the nearest fp16 (ties to even) and back: how ggml stores act scales."""
    return vx_f16_to_f32_ref(vx_f32_to_f16_ref(f))


cdef inline int32_t dot32_s8(const int8_t *w, const int8_t *x) noexcept nogil:
    """int8 . int8 over one 32-value block."""
    cdef int32_t s = 0
    cdef int j
    for j in range(VX_QK):
        s += <int32_t>w[j] * <int32_t>x[j]
    return s


cdef inline void quantize_a32(int smode, int64_t K, const float *x, void *act) noexcept nogil:
    """x (K,) -> act row (q8_0 / q8_1), portable."""
    quantize_a32_ref_impl(smode, K, x, act)


cdef void quantize_aK(int64_t K, const float *x, void *act) noexcept nogil:
    """x (K,) -> q8_K act row, portable (quantize_aK_ref)."""
    quantize_aK_ref(K, x, act)


cdef inline void b32_rows(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                          const int8_t **xq, const float **ds, float *y, int64_t ldy) noexcept nogil:
    """32-block GEMM of MR act rows, portable."""
    b32_ref_rows(MR_, fmt, K, w, w_stride, n, xq, ds, y, ldy)


cdef inline int32_t q4k_block_dot(const vx_block_q4_K *blk, const uint8_t *sc, const int8_t *q8) noexcept nogil:
    """Integer part of one q4_K super-block (portable)."""
    return q4k_block_dot_ref(blk, sc, q8)


cdef inline int32_t q6k_block_dot(const vx_block_q6_K *blk, const int8_t *q8) noexcept nogil:
    """Integer part of one q6_K super-block (portable)."""
    return q6k_block_dot_ref(blk, q8)


cdef inline void kq_row(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const vx_actK *x,
                        float *out) noexcept nogil:
    """q2_K / q3_K / q5_K weight row against MR act rows (portable)."""
    kq_row_ref(MR_, fmt, K, row, x, out)


cdef inline void b32x_row(const act_rows *MR_, int fmt, int64_t K, const uint8_t *row, const int8_t **xq,
                          const float **ds, float *out) noexcept nogil:
    """q5_0 / q5_1 / iq4_nl weight row against MR act rows (portable)."""
    b32x_row_ref(MR_, fmt, K, row, xq, ds, out)


cdef inline void gemm_float(int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                            const void *a, int64_t a_stride, int64_t m, float *y, int64_t ldy) noexcept nogil:
    """f32 / f16 GEMM, portable."""
    gemm_float_ref_impl(fmt, K, w, w_stride, n, a, a_stride, m, y, ldy)


# gemm_float_tiles' parts (kernels/gemv.pxi builds its table of float_rows in every tier; the portable
# tier's gemm_float does not use it).
cdef inline int64_t float_gemv4(int fmt, int64_t K, const uint8_t *w, int64_t w_stride, int64_t n,
                                const float *x, float *y) noexcept nogil:
    """No 4-row GEMV pass on the portable tier (returns 0)."""
    return 0


cdef inline void float_rows(const act_rows *MR_, int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                            int64_t r0, int64_t n, const float **x, float *y, int64_t ldy) noexcept nogil:
    """f32 / f16 GEMM of MR act rows, portable."""
    float_ref_rows(fmt, sizeof(act_rows), K, w, w_stride, r0, n, x, y, ldy)


cdef inline int64_t dequant_f16_vec(int64_t K, const uint8_t *w, float *y) noexcept nogil:
    """No vector part on the portable tier: dequant_f16 converts every value (returns 0)."""
    return 0


cdef void fill_gemv_il(vx_table *t, bint vbmi) noexcept:
    """No interleaved weights on this tier (vx.pxd): il_rows stays 0, decode reads the rows as stored."""
    pass
