# The avx2 tier's SwiGLU microkernel (kernels/rows.pxi has the shared body): ggml's AVX2 + FMA
# ggml_vec_swiglu_f32, through attention.pxi's v_expf.
from libc.stdint cimport int64_t


cdef inline int64_t swiglu_blocks(int64_t F, const float *gate, const float *up, float *y) noexcept nogil:
    """y[f] = silu(gate[f]) (* up[f] unless up is NULL) over the leading whole blocks of 8, as
    ggml_vec_swiglu_f32 / ggml_v_silu: x / (1 + v_expf(0 - x)); returns the elements done."""
    cdef int64_t f = 0
    cdef __m256 one = _mm256_set1_ps(<float>1.0)
    cdef __m256 xv, silu
    while f + 8 <= F:
        xv = _mm256_loadu_ps(gate + f)
        silu = _mm256_div_ps(xv, _mm256_add_ps(one, v_expf(_mm256_sub_ps(_mm256_setzero_ps(), xv))))
        if up != NULL:
            _mm256_storeu_ps(y + f, _mm256_mul_ps(silu, _mm256_loadu_ps(up + f)))
        else:
            _mm256_storeu_ps(y + f, silu)
        f += 8
    return f
