# The neon tier's vector layer: 4 float lanes (float32x4_t). See vec_avx2.pxd.
from volvox._kernels.simd.neon cimport *

cdef enum:
    VL = 4        # float lanes per vector

ctypedef float32x4_t vf

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
