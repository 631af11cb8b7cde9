# The dotprod tier's vector layer: the neon tier's, whose int8 dot products become vdotq_s32
# (Armv8.2-A dotprod). See vec_avx2.pxd.
from volvox._kernels.simd.neon cimport *

cdef enum:
    VL = 4        # float lanes per vector

ctypedef float32x4_t vf

# --- attention ---
from libc.math cimport fmaf

cdef inline float vx_fma(float a, float b, float c) noexcept nogil:
    """a * b + c rounded once (fmaf: one instruction on this tier)."""
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


# --- conv ---
# Whole vectors, unaligned; lane counts for the last channels of a row (vf_lanes(n): the first n,
# 0 <= n; at most VL are taken). NEON has no masked loads or stores: a part vector goes lane by lane.
from libc.stdint cimport int64_t

cdef enum:
    VF_MASK_STORES = 0    # vf_store_part as cheap as vf_store? (no: lane by lane)

ctypedef int vf_mask          # the number of lanes taken, 0 .. VL

cdef inline vf vf_zero() noexcept nogil:
    """All lanes 0."""
    return vdupq_n_f32(0.0)

cdef inline vf vf_set1(float x) noexcept nogil:
    """x in every lane."""
    return vdupq_n_f32(x)

cdef inline vf vf_load(const float *p) noexcept nogil:
    """VL floats from p."""
    return vld1q_f32(p)

cdef inline void vf_store(float *p, vf v) noexcept nogil:
    """VL floats to p."""
    vst1q_f32(p, v)

cdef inline vf vf_fma(vf a, vf b, vf c) noexcept nogil:
    """a * b + c, rounded once."""
    return vfmaq_f32(c, a, b)

cdef inline vf vf_add(vf a, vf b) noexcept nogil:
    """a + b."""
    return vaddq_f32(a, b)

cdef inline vf vf_max(vf a, vf b) noexcept nogil:
    """a > b ? a : b per lane (b where a is NaN: FMAXNM, as x86's max_ps with a NaN first operand)."""
    return vmaxnmq_f32(a, b)

cdef inline vf vf_min(vf a, vf b) noexcept nogil:
    """a < b ? a : b per lane (b where a is NaN: FMINNM)."""
    return vminnmq_f32(a, b)

cdef inline vf_mask vf_lanes(int64_t n) noexcept nogil:
    """The first n lanes (n >= 0; all of them from VL on)."""
    return <vf_mask>(n if n < 4 else 4)

cdef inline vf vf_load_part(vf_mask k, const float *p) noexcept nogil:
    """p's floats in the first k lanes, 0 in the others (the others' memory is not read)."""
    if k >= 4:
        return vld1q_f32(p)
    cdef vf v = vdupq_n_f32(0.0)
    if k > 0:
        v = vld1q_lane_f32(p, v, 0)
    if k > 1:
        v = vld1q_lane_f32(p + 1, v, 1)
    if k > 2:
        v = vld1q_lane_f32(p + 2, v, 2)
    return v

cdef inline void vf_store_part(vf_mask k, float *p, vf v) noexcept nogil:
    """v's first k lanes to p (the others' memory is not written)."""
    if k >= 4:
        vst1q_f32(p, v)
        return
    if k > 0:
        vst1q_lane_f32(p, v, 0)
    if k > 1:
        vst1q_lane_f32(p + 1, v, 1)
    if k > 2:
        vst1q_lane_f32(p + 2, v, 2)


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
