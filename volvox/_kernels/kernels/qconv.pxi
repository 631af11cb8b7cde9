# qconv kernels: the bodies every tier shares (each tier's own microkernels: kernels/<tier>/qconv.pxi).


cdef void fill_qconv(vx_table *t) noexcept:
    pass
