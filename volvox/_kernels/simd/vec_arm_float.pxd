# The float layer both arm64 SIMD tiers share (neon, dotprod: they differ only in int8 dot
# products): 4 float lanes (float32x4_t). Cimported by vec_neon.pxd and vec_dotprod.pxd; see
# vec_avx2.pxd for the names every tier's vector layer defines.
from volvox._kernels.simd.neon cimport *

cdef enum:
    VL = 4        # float lanes per vector

ctypedef float32x4_t vf

# --- attention ---
from libc.math cimport fmaf

cdef inline float vx_fma(float a, float b, float c) noexcept nogil:
    """a * b + c rounded once (fmaf: one instruction on this tier)."""
    return fmaf(a, b, c)


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

cdef inline vf vf_max_nan(vf acc, vf x) noexcept nogil:
    """numpy's maximum(acc, x) per lane: x where x > acc or x is NaN, else acc (a NaN acc stays)."""
    return vbslq_f32(vorrq_u32(vcgtq_f32(x, acc), vmvnq_u32(vceqq_f32(x, x))), x, acc)

cdef inline vf vf_div(vf a, vf b) noexcept nogil:
    """a / b per lane, correctly rounded."""
    return vdivq_f32(a, b)

cdef inline vf vf_mul(vf a, vf b) noexcept nogil:
    """a * b per lane."""
    return vmulq_f32(a, b)

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
