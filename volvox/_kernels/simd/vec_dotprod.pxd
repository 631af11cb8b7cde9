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
