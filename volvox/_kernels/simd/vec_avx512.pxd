# The avx512 tier's vector layer: 16 float lanes (__m512). See vec_avx2.pxd.
from volvox._kernels.simd.x86 cimport *

cdef enum:
    VL = 16       # float lanes per vector

ctypedef __m512 vf

# --- attention ---
from libc.math cimport fmaf

cdef inline float vx_fma(float a, float b, float c) noexcept nogil:
    """a * b + c rounded once (vx_ops.c's VX_FMA: fmaf, one instruction on this tier)."""
    return fmaf(a, b, c)
