# gemv kernels: the bodies every tier shares (each tier's own microkernels: kernels/<tier>/gemv.pxi).


cdef void fill_gemv(vx_table *t) noexcept:
    pass
