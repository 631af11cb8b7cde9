# The dotprod tier's vector layer: the neon tier's, whose int8 dot products become vdotq_s32
# (Armv8.2-A dotprod). See vec_avx2.pxd.
from volvox._kernels.simd.neon cimport *

cdef enum:
    VL = 4        # float lanes per vector

ctypedef float32x4_t vf
