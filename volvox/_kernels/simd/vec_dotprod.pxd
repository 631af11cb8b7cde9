# The dotprod tier's vector layer: the neon tier's, whose int8 dot products become vdotq_s32
# (Armv8.2-A dotprod). See vec_avx2.pxd.
from volvox._kernels.simd.neon cimport *
from volvox._kernels.simd.vec_arm_float cimport *   # VL, vf, vx_fma, the vf_* float layer


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


# --- gemv ---
# Integer dot products of int8 vectors into int32 lanes (kernels/neon/gemv.pxi): which products land
# in which lane is the tier's, only the lanes' sum is meant. One sdot: 4 products per lane.
cdef inline int32x4_t i8dot(int8x16_t a, int8x16_t b) noexcept nogil:
    """Lanes summing to the 16 products a[k] * b[k]."""
    return vdotq_s32(vdupq_n_s32(0), a, b)


cdef inline int32x4_t i8dot_acc(int32x4_t acc, int8x16_t a, int8x16_t b) noexcept nogil:
    """acc + lanes summing to the 16 products a[k] * b[k]."""
    return vdotq_s32(acc, a, b)


cdef inline int32x4_t u6dot32(int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1) noexcept nogil:
    """Lanes summing to the 32 products (a0 a1)[k] * (b0 b1)[k] (any int8 a here; the neon tier's
    needs a in 0..63)."""
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), a0, b0), a1, b1)
