# The dotprod tier's vector layer: the neon tier's, whose int8 dot products become vdotq_s32
# (Armv8.2-A dotprod). See vec_avx2.pxd.
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
# products of one k quad summed per channel by one sdot (vdotq_laneq_s32) into int32 lanes.
ctypedef int32x4_t qdot_acc

cdef enum:
    QDOT_ROWS = 4     # activation rows per GEMM register tile (16 channels: 16 accumulators)
    QDOT_QUADS = 4    # k quads per activation load: 16 bytes per row, used lane by lane (sdot's
                      # indexed form), one flip per 4 k quads


cdef inline qdot_acc qdot_zero() noexcept nogil:
    """An accumulator of 4 channels at 0."""
    return vdupq_n_s32(0)


cdef inline qdot_acc qdot_lane(qdot_acc c, int8x16_t w, int8x16_t a, const int lane) noexcept nogil:
    """c + for each of w's 4 channels (4 int8 k each) its dot product with a's int8 k quad `lane`."""
    return vdotq_laneq_s32(c, w, a, lane)


cdef inline int32x4_t qdot_sum(qdot_acc c) noexcept nogil:
    """The 4 channels' sums of c."""
    return c
