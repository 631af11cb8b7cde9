# The neon tier's vector layer: 4 float lanes (float32x4_t). See vec_avx2.pxd.
from volvox._kernels.simd.neon cimport *

cdef enum:
    VL = 4        # float lanes per vector

ctypedef float32x4_t vf
