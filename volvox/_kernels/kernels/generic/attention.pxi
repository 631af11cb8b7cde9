# The generic tier's own attention microkernels (kernels/attention.pxi has the shared bodies): the
# x86 SIMD tiers' order of operations in plain C, with libm's expf (close to them, not bit-identical).
from libc.math cimport expf
from libc.stdint cimport int64_t


cdef inline float exp8(const float *x, float mx, float *y) noexcept nogil:
    """y[l] = exp(x[l] - mx) for 8 lanes; returns their hsum8_tree."""
    cdef int l
    for l in range(8):
        y[l] = expf(x[l] - mx)
    return hsum8_tree(y)


cdef inline float dot_vec_f32(const float *a, const float *b, int64_t n) noexcept nogil:
    """a . b over n floats as ggml_vec_dot_f32 (ggml_mul_mat of k and the permuted q): four 8-lane
    FMA chains over chunks of 32 (element i feeds lane i % 8 of chain (i / 8) % 4), GGML_F32x8_REDUCE's
    tree, then the leftovers one by one."""
    cdef int64_t np = n & ~(<int64_t>31)
    cdef float l[4][8]                      # (chains, lanes)
    cdef float t[4]                         # (4,) lanes k + (k+4), chains summed
    cdef float x0, x1, sumf
    cdef int64_t i
    cdef int c, k
    for c in range(4):
        for k in range(8):
            l[c][k] = 0
    for i in range(0, np, 32):
        for c in range(4):
            for k in range(8):
                l[c][k] = vx_fma(a[i + 8 * c + k], b[i + 8 * c + k], l[c][k])
    for k in range(4):
        x0 = (l[0][k] + l[2][k]) + (l[1][k] + l[3][k])
        x1 = (l[0][k + 4] + l[2][k + 4]) + (l[1][k + 4] + l[3][k + 4])
        t[k] = x0 + x1
    sumf = (t[0] + t[1]) + (t[2] + t[3])
    for i in range(np, n):
        sumf = vx_fma(a[i], b[i], sumf)
    return sumf


cdef inline float scores8(const float *K, const float *q, int64_t hd, float scale, float *w) noexcept nogil:
    """w[k] = dot_vec_f32(K row k, q, hd) * scale for 8 key rows, one at a time; returns their largest."""
    return scores8_each(K, q, hd, scale, w)


cdef inline int64_t swiglu_blocks(int64_t F, const float *gate, const float *up, float *y) noexcept nogil:
    """No vector expf here: rows.pxi's swiglu_f32 does every element with libm's expf."""
    return 0
