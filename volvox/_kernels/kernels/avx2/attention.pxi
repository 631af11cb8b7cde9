# The avx2 tier's own attention microkernels (kernels/attention.pxi has the shared bodies): ggml's
# AVX2 + FMA f32 arithmetic, which the avx512 tier runs too.
from libc.stdint cimport int64_t


cdef inline float hsum8(__m256 x) noexcept nogil:
    """x's 8 lanes summed as hsum8_tree: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))."""
    cdef __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x))
    r = _mm_add_ps(r, _mm_movehl_ps(r, r))
    r = _mm_add_ss(r, _mm_movehdup_ps(r))
    return _mm_cvtss_f32(r)


cdef inline __m256 v_expf(__m256 x) noexcept nogil:
    """ggml_v_expf, AVX2 + FMA: max error 1.45 + 0.5 ulp; > 88.38 -> inf, < -103.97 -> 0."""
    cdef __m256 r = _mm256_set1_ps(EXPF_SHIFT)
    cdef __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(EXPF_INV_LN2), r)
    cdef __m256 n = _mm256_sub_ps(z, r)
    cdef __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXPF_LN2_LO),
                                     _mm256_fnmadd_ps(n, _mm256_set1_ps(EXPF_LN2_HI), x))
    cdef __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23)
    cdef __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(<float>1.0))))
    cdef __m256i c = _mm256_castps_si256(
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(EXPF_NEG_ZERO), n), _mm256_set1_ps(<float>126.0), _CMP_GT_OQ))
    cdef __m256 u = _mm256_mul_ps(b, b)
    cdef __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(EXPF_C4), b, _mm256_set1_ps(EXPF_C3)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(EXPF_C2), b, _mm256_set1_ps(EXPF_C1))),
        u, _mm256_mul_ps(_mm256_set1_ps(EXPF_C0), b))
    if not _mm256_movemask_ps(_mm256_castsi256_ps(c)):
        return _mm256_fmadd_ps(j, k, k)
    # some |n| > 126: 2^n as s1 * s2 (s1 = 2^+-127 or so), and 0 / inf beyond |n| > 192
    cdef __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                      _mm256_set1_epi32(EXPF_SCALE_NEG))
    cdef __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(EXPF_SCALE_BIAS)))
    cdef __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g))
    cdef __m256i d = _mm256_castps_si256(
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(EXPF_NEG_ZERO), n), _mm256_set1_ps(<float>192.0), _CMP_GT_OQ))
    return _mm256_or_ps(
        _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
        _mm256_andnot_ps(_mm256_castsi256_ps(d),
                         _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(c),
                                                    _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                                      _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))))


cdef inline float exp8(const float *x, float mx, float *y) noexcept nogil:
    """y[l] = exp(x[l] - mx) for 8 lanes (ggml_v_expf); returns their hsum8_tree."""
    cdef __m256 v = v_expf(_mm256_sub_ps(_mm256_loadu_ps(x), _mm256_set1_ps(mx)))
    _mm256_storeu_ps(y, v)
    return hsum8(v)


cdef inline float dot_vec_f32(const float *a, const float *b, int64_t n) noexcept nogil:
    """a . b over n floats as ggml_vec_dot_f32 (ggml_mul_mat of k and the permuted q): four 8-lane
    FMA chains over chunks of 32, GGML_F32x8_REDUCE's tree, then the leftovers one by one."""
    cdef int64_t np = n & ~(<int64_t>31)
    cdef __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps()   # chains 0..3
    cdef __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps()
    cdef int64_t i
    for i in range(0, np, 32):
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0)
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1)
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2)
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3)
    s0 = _mm256_add_ps(s0, s2)
    s1 = _mm256_add_ps(s1, s3)
    s0 = _mm256_add_ps(s0, s1)
    cdef __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1))
    cdef __m128 t1 = _mm_hadd_ps(t0, t0)
    cdef float sumf = _mm_cvtss_f32(_mm_hadd_ps(t1, t1))
    for i in range(np, n):
        sumf = vx_fma(a[i], b[i], sumf)
    return sumf


cdef inline __m256 dot_chains(const float *a, const float *b, int64_t n) noexcept nogil:
    """dot_vec_f32's four chains over n (a multiple of 32) floats, added as GGML_F32x8_REDUCE adds them
    ((c0 + c2) + (c1 + c3)), before its horizontal sum."""
    cdef __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps()   # chains 0..3
    cdef __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps()
    cdef int64_t i
    for i in range(0, n, 32):
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0)
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1)
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2)
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3)
    return _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3))


cdef inline __m256 halves_added(__m256 a, __m256 b) noexcept nogil:
    """[lo(a) + hi(a) | lo(b) + hi(b)]: the first step of dot_vec_f32's horizontal sum, two keys at once."""
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31))


cdef inline float scores8(const float *K, const float *q, int64_t hd, float scale, float *w) noexcept nogil:
    """w[k] = dot_vec_f32(K row k, q, hd) * scale for the 8 key rows at K (hd floats apart); returns
    their largest. Each key's sum is dot_vec_f32's to the bit; the horizontal sums of 8 keys run as
    one tree of hadds (the same pair sums, in the same order) instead of 8."""
    if hd % 32:
        return scores8_each(K, q, hd, scale, w)
    cdef __m256 x = _mm256_hadd_ps(halves_added(dot_chains(K, q, hd), dot_chains(K + hd, q, hd)),
                                   halves_added(dot_chains(K + 2 * hd, q, hd), dot_chains(K + 3 * hd, q, hd)))
    cdef __m256 y = _mm256_hadd_ps(halves_added(dot_chains(K + 4 * hd, q, hd), dot_chains(K + 5 * hd, q, hd)),
                                   halves_added(dot_chains(K + 6 * hd, q, hd), dot_chains(K + 7 * hd, q, hd)))
    # hadd(x, y) holds keys (0, 2, 4, 6 | 1, 3, 5, 7)
    cdef __m256 v = _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_hadd_ps(x, y), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)),
                                  _mm256_set1_ps(scale))
    _mm256_storeu_ps(w, v)
    cdef float mx = -INFINITY
    cdef int k
    for k in range(8):
        mx = w[k] if w[k] > mx else mx
    return mx
