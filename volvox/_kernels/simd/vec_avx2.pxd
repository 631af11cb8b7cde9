# The avx2 tier's vector layer: 8 float lanes (__m256). Every tier's vector layer (vec_<tier>.pxd)
# defines the same names, so a kernel body written with them compiles on each tier.
from volvox._kernels.simd.x86 cimport *

cdef enum:
    VL = 8        # float lanes per vector

ctypedef __m256 vf
