# The dotprod tier's vector layer: the neon tier's, whose int8 dot products become vdotq_s32
# (Armv8.2-A dotprod). See vec_avx2.pxd.
from volvox._kernels.simd.neon cimport *

cdef enum:
    VL = 4        # float lanes per vector

ctypedef float32x4_t vf

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
