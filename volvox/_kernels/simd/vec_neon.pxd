# The neon tier's vector layer: 4 float lanes (float32x4_t). See vec_avx2.pxd.
from volvox._kernels.simd.neon cimport *
from volvox._kernels.simd.vec_arm_float cimport *   # VL, vf, vx_fma, the vf_* float layer


# --- qconv ---
# The int8 GEMM's dot products (kernels/neon/qconv.pxi): int8 weights times int8 activations, 4
# products of one k quad summed per channel. Armv8.0 has no dot product: the products go exactly
# into int16 (|a w| <= 128 * 128) and pairs of them into int32 (vpadalq), so each channel quad keeps
# two accumulators (lo: channels 0-1, hi: 2-3, two partial sums each) until qdot_sum.
ctypedef struct qdot_acc:
    int32x4_t lo, hi

cdef enum:
    QDOT_ROWS = 2     # activation rows per GEMM register tile (16 channels: 16 accumulators)
    QDOT_QUADS = 1    # k quads per activation load: one broadcast load per row and k quad, so that
                      # a loop step holds 4 weight vectors, not 16 (with 16 accumulators: no spills)


cdef inline qdot_acc qdot_zero() noexcept nogil:
    """An accumulator of 4 channels at 0."""
    cdef qdot_acc c
    c.lo = vdupq_n_s32(0)
    c.hi = vdupq_n_s32(0)
    return c


cdef inline qdot_acc qdot_lane(qdot_acc c, int8x16_t w, int8x16_t a, const int lane) noexcept nogil:
    """c + for each of w's 4 channels (4 int8 k each) its dot product with a's int8 k quad `lane`."""
    cdef int8x16_t ab = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(a), lane))
    c.lo = vpadalq_s16(c.lo, vmull_s8(vget_low_s8(ab), vget_low_s8(w)))
    c.hi = vpadalq_s16(c.hi, vmull_high_s8(ab, w))
    return c


cdef inline int32x4_t qdot_sum(qdot_acc c) noexcept nogil:
    """The 4 channels' sums of c."""
    return vpaddq_s32(c.lo, c.hi)


# --- gemv ---
# Integer dot products of int8 vectors into int32 lanes (kernels/neon/gemv.pxi): which products land
# in which lane is the tier's, only the lanes' sum is meant. Armv8.0 has no dot product: products
# go into int16 lanes (vmull / vmlal) and pairs of those into int32 (vpaddlq / vpadalq).
cdef inline int32x4_t i8dot(int8x16_t a, int8x16_t b) noexcept nogil:
    """Lanes summing to the 16 products a[k] * b[k] (two per int16 lane: exact while one side stays
    within -127..127, as act rows do)."""
    return vpaddlq_s16(vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b))


cdef inline int32x4_t i8dot_acc(int32x4_t acc, int8x16_t a, int8x16_t b) noexcept nogil:
    """acc + lanes summing to the 16 products a[k] * b[k] (as i8dot)."""
    return vpadalq_s16(acc, vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b))


cdef inline int32x4_t u6dot32(int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1) noexcept nogil:
    """Lanes summing to the 32 products (a0 a1)[k] * (b0 b1)[k] for a values in 0..63 (decoded q4 / q6
    weights): four products per int16 lane (|sum| <= 4 * 63 * 128 < 2^15), then pairs into int32."""
    cdef int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(a0), vget_low_s8(b0)), a0, b0)
    p = vmlal_high_s8(vmlal_s8(p, vget_low_s8(a1), vget_low_s8(b1)), a1, b1)
    return vpaddlq_s16(p)
