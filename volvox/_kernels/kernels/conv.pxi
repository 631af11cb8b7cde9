# conv kernels: the bodies every tier shares (each tier's own microkernels: kernels/<tier>/conv.pxi).


cdef void fill_conv(vx_table *t) noexcept:
    pass
