# The generic tier's vector layer: portable C, one float per "vector" (the compiler may still
# vectorise loops it can prove independent). See vec_avx2.pxd.

cdef enum:
    VL = 1        # float lanes per vector

ctypedef float vf
