# Every tier module's body: the kernel families (each fills its entries of the tier's table),
# then the table itself, handed to the engine as a capsule. Included by tier_<name>.pyx after
# its vector layer and its own microkernels; families not yet written in Cython keep the C tier's
# entries (C_TABLE: the C tier's whole table, which the engine takes instead when VOLVOX_KERNELS_C=1,
# so that a port can be compared with it bit for bit).
from cpython.pycapsule cimport PyCapsule_New
from volvox._kernels.vx cimport vx_table, vx_conv_table

include "rows.pxi"
include "gemv.pxi"
include "conv.pxi"
include "qconv.pxi"
include "attention.pxi"

cdef vx_table _table = c_tier_table()[0]
cdef vx_conv_table _conv = _table.conv[0]
_table.conv = &_conv
fill_rows(&_table)
fill_gemv(&_table)
fill_conv(&_table)
fill_qconv(&_table)
fill_attention(&_table)

TABLE = PyCapsule_New(&_table, "volvox._kernels.vx_table", NULL)
C_TABLE = PyCapsule_New(<void *> c_tier_table(), "volvox._kernels.vx_table", NULL)
