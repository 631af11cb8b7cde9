# Row kernels: RMSNorm (the other row kernels follow as they are ported).
from libc.math cimport sqrtf
from libc.stdint cimport int64_t


cdef void rms_norm_f32(int64_t D, const float *x, const float *weight, float eps, float *y) noexcept nogil:
    """y (D,) = x / sqrt(mean(x^2) + eps) * weight, as ggml's rms_norm + mul: squares in float,
    summed in order in double, the mean rounded to float."""
    cdef double ss = 0.0
    cdef int64_t k
    for k in range(D):
        ss += <double>(x[k] * x[k])
    cdef float scale = <float>1.0 / sqrtf(<float>(ss / <double>D) + eps)
    for k in range(D):
        y[k] = x[k] * scale * weight[k]


cdef void fill_rows(vx_table *t) noexcept:
    t.rms_norm = rms_norm_f32
