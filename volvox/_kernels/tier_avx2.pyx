# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Kernels for x86-64 with AVX2, FMA and F16C (Haswell, Zen and later).

Built with this tier's compiler flags (CMakeLists.txt) and imported only when the CPU runs them."""
from volvox._kernels.vx cimport vx_table
from volvox._kernels.simd.x86 cimport *
from volvox._kernels.simd.vec_avx2 cimport *

cdef const char *TIER_NAME = b"avx2"     # the table's name (engine.get_isa())

include "kernels/avx2/gemv.pxi"
include "kernels/avx2/conv.pxi"
include "kernels/avx2/qconv.pxi"
include "kernels/avx2/attention.pxi"
include "kernels/avx2/swiglu.pxi"
include "kernels/tier.pxi"
