# attention kernels: the bodies every tier shares (each tier's own microkernels: kernels/<tier>/attention.pxi).


cdef void fill_attention(vx_table *t) noexcept:
    pass
