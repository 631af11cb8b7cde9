# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Kernels for x86-64 with AVX-512 F/BW/VL/DQ and VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later).

Built with this tier's compiler flags (CMakeLists.txt) and imported only when the CPU runs them."""
from volvox._kernels.vx cimport vx_table
from volvox._kernels.simd.x86 cimport *
from volvox._kernels.simd.vec_avx512 cimport *

cdef const char *TIER_NAME = b"avx512"     # the table's name (engine.get_isa())

include "kernels/avx512/gemv.pxi"
include "kernels/avx512/conv.pxi"
include "kernels/avx512/qconv.pxi"
include "kernels/avx512/attention.pxi"
include "kernels/avx512/swiglu.pxi"
include "kernels/tier.pxi"
