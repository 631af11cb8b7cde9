# The avx2 tier's vector layer: 8 float lanes (__m256). Every tier's vector layer (vec_<tier>.pxd)
# defines the same names, so a kernel body written with them compiles on each tier.
from volvox._kernels.simd.x86 cimport *

cdef enum:
    VL = 8        # float lanes per vector

ctypedef __m256 vf

# --- attention ---
from libc.math cimport fmaf

cdef inline float vx_fma(float a, float b, float c) noexcept nogil:
    """a * b + c rounded once (vx_ops.c's VX_FMA: fmaf, one instruction on this tier)."""
    return fmaf(a, b, c)
