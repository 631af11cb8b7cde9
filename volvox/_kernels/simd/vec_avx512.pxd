# The avx512 tier's vector layer: 16 float lanes (__m512). See vec_avx2.pxd.
from volvox._kernels.simd.x86 cimport *

cdef enum:
    VL = 16       # float lanes per vector

ctypedef __m512 vf
