# The avx512 tier's SwiGLU microkernel (kernels/rows.pxi has the shared body): ggml's AVX-512
# ggml_vec_swiglu_f32, whole blocks of 16 through its AVX-512 ggml_v_expf (which rounds differently
# from the AVX2 one: 1 + the polynomial inside it, then a scalef), the rest left to the shared body.
from libc.stdint cimport int64_t


cdef inline __m512 v_expf16(__m512 x) noexcept nogil:
    """ggml_v_expf, AVX-512 F + DQ: max error 1.45 + 0.5 ulp; > 88.38 -> inf, < -103.97 -> 0."""
    cdef __m512 r = _mm512_set1_ps(EXPF_SHIFT)
    cdef __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(EXPF_INV_LN2), r)
    cdef __m512 n = _mm512_sub_ps(z, r)
    cdef __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXPF_LN2_LO),
                                     _mm512_fnmadd_ps(n, _mm512_set1_ps(EXPF_LN2_HI), x))
    cdef __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(<float>192.0), _CMP_GT_OQ)
    cdef __m512 u = _mm512_mul_ps(b, b)
    cdef __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(EXPF_C4), b, _mm512_set1_ps(EXPF_C3)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(EXPF_C2), b, _mm512_set1_ps(EXPF_C1))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(EXPF_C0), b, _mm512_set1_ps(<float>1.0)))
    cdef __m512 res = _mm512_scalef_ps(j, n)
    if _mm512_kortestz(d, d):
        return res
    # some |n| > 192: inf above, 0 below
    cdef __m512 zero = _mm512_setzero_ps()
    cdef __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero)
    return _mm512_mask_blend_ps(d, res, alt)


cdef inline int64_t swiglu_blocks(int64_t F, const float *gate, const float *up, float *y) noexcept nogil:
    """y[f] = silu(gate[f]) (* up[f] unless up is NULL) over the leading whole blocks of 16 (this tier's
    blocks are ggml's AVX-512 ones), as ggml_vec_swiglu_f32 / ggml_v_silu: x / (1 + v_expf16(0 - x));
    returns the elements done."""
    cdef int64_t f = 0
    cdef __m512 one = _mm512_set1_ps(<float>1.0)
    cdef __m512 xv, silu
    while f + 16 <= F:
        xv = _mm512_loadu_ps(gate + f)
        silu = _mm512_div_ps(xv, _mm512_add_ps(one, v_expf16(_mm512_sub_ps(_mm512_setzero_ps(), xv))))
        if up != NULL:
            _mm512_storeu_ps(y + f, _mm512_mul_ps(silu, _mm512_loadu_ps(up + f)))
        else:
            _mm512_storeu_ps(y + f, silu)
        f += 16
    return f
