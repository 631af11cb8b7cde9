# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Portable kernels: plain C loops, no SIMD intrinsics (every CPU; the reference the SIMD tiers are tested against).

Built with this tier's compiler flags (CMakeLists.txt) and imported only when the CPU runs them."""
from volvox._kernels.vx cimport vx_table
from volvox._kernels.simd.vec_generic cimport *

cdef const char *TIER_NAME = b"generic"     # the table's name (engine.get_isa())

include "kernels/generic/gemv.pxi"
include "kernels/generic/conv.pxi"
include "kernels/generic/qconv.pxi"
include "kernels/generic/attention.pxi"
include "kernels/tier.pxi"
