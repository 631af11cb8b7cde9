# The generic tier's vector layer: portable C, one float per "vector" (the compiler may still
# vectorise loops it can prove independent). See vec_avx2.pxd.

cdef enum:
    VL = 1        # float lanes per vector

ctypedef float vf

# --- attention ---
cdef inline float vx_fma(float a, float b, float c) noexcept nogil:
    """a * b + c as written (vx_ops.c's VX_FMA on the portable tier: never a libm fma call; the
    compiler contracts it to one instruction only where the target has FMA, as it did the C)."""
    return a * b + c
