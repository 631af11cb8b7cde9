# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Kernels for arm64 with Advanced SIMD (every arm64 CPU).

Built with this tier's compiler flags (CMakeLists.txt) and imported only when the CPU runs them."""
from volvox._kernels.vx cimport vx_table
from volvox._kernels.simd.neon cimport *
from volvox._kernels.simd.vec_neon cimport *

cdef const char *TIER_NAME = b"neon"     # the table's name (engine.get_isa())

include "kernels/neon/gemv.pxi"
include "kernels/neon/conv.pxi"
include "kernels/neon/qconv.pxi"
include "kernels/neon/attention.pxi"
include "kernels/tier.pxi"
