# The neon tier's vector layer: 4 float lanes (float32x4_t). See vec_avx2.pxd.
from volvox._kernels.simd.neon cimport *

cdef enum:
    VL = 4        # float lanes per vector

ctypedef float32x4_t vf

# --- attention ---
from libc.math cimport fmaf

cdef inline float vx_fma(float a, float b, float c) noexcept nogil:
    """a * b + c rounded once (vx_ops.c's VX_FMA: fmaf, one instruction on this tier)."""
    return fmaf(a, b, c)


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
