# Every tier module's body: the kernel families (each fills its entries of the tier's table),
# then the table itself, handed to the engine as a capsule. Included by tier_<name>.pyx after
# its vector layer; families not yet written in Cython keep the C tier's entries.
from cpython.pycapsule cimport PyCapsule_New
from volvox._kernels.vx cimport vx_table, vx_conv_table

include "rows.pxi"

cdef vx_table _table = c_tier_table()[0]
cdef vx_conv_table _conv = _table.conv[0]
_table.conv = &_conv
fill_rows(&_table)

TABLE = PyCapsule_New(&_table, "volvox._kernels.vx_table", NULL)
