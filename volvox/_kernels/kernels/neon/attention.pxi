# The neon tier's own attention microkernels (kernels/attention.pxi has the shared bodies), the
# dotprod tier's too. Each of the x86 tiers' 8-lane vectors is two float32x4 halves (lanes 0-3,
# 4-7) summed in the same tree, and ggml_v_expf is ggml's NEON version (the same algorithm and
# FMAs as its AVX2 one), so these give the avx2 tier's bits: arm64 agrees with x86 and llama.cpp.
from libc.stdint cimport int64_t, uint32_t


cdef inline float hsum8_halves(float32x4_t lo, float32x4_t hi) noexcept nogil:
    """The 8 lanes (lo, hi) summed as hsum8_tree: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))."""
    cdef float32x4_t r = vaddq_f32(hi, lo)                           # l0+l4, l1+l5, l2+l6, l3+l7
    cdef float32x2_t r2 = vadd_f32(vget_low_f32(r), vget_high_f32(r))  # (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
    return vget_lane_f32(r2, 0) + vget_lane_f32(r2, 1)


cdef inline float32x4_t v_expf(float32x4_t x) noexcept nogil:
    """ggml_v_expf, NEON: the avx2 tier's v_expf operation for operation (max error 1.45 + 0.5 ulp;
    > 88.38 -> inf, < -103.97 -> 0)."""
    cdef float32x4_t r = vdupq_n_f32(EXPF_SHIFT)
    cdef float32x4_t z = vfmaq_f32(r, x, vdupq_n_f32(EXPF_INV_LN2))
    cdef float32x4_t n = vsubq_f32(z, r)
    cdef float32x4_t b = vfmsq_f32(vfmsq_f32(x, n, vdupq_n_f32(EXPF_LN2_HI)), n, vdupq_n_f32(EXPF_LN2_LO))
    cdef uint32x4_t e = vshlq_n_u32(vreinterpretq_u32_f32(z), 23)
    cdef float32x4_t k = vreinterpretq_f32_u32(vaddq_u32(e, vreinterpretq_u32_f32(vdupq_n_f32(<float>1.0))))
    cdef uint32x4_t c = vcagtq_f32(n, vdupq_n_f32(<float>126.0))
    cdef float32x4_t u = vmulq_f32(b, b)
    cdef float32x4_t j = vfmaq_f32(
        vmulq_f32(vdupq_n_f32(EXPF_C0), b),
        vfmaq_f32(vfmaq_f32(vdupq_n_f32(EXPF_C1), vdupq_n_f32(EXPF_C2), b),
                  vfmaq_f32(vdupq_n_f32(EXPF_C3), vdupq_n_f32(EXPF_C4), b), u), u)
    if not vpaddd_u64(vreinterpretq_u64_u32(c)):
        return vfmaq_f32(k, j, k)
    # some |n| > 126: 2^n as s1 * s2 (s1 = 2^+-127 or so), and 0 / inf beyond |n| > 192
    cdef uint32x4_t d = vandq_u32(vclezq_f32(n), vdupq_n_u32(<uint32_t>EXPF_SCALE_NEG))
    cdef float32x4_t s1 = vreinterpretq_f32_u32(vaddq_u32(d, vdupq_n_u32(<uint32_t>EXPF_SCALE_BIAS)))
    cdef float32x4_t s2 = vreinterpretq_f32_u32(vsubq_u32(e, d))
    return vbslq_f32(vcagtq_f32(n, vdupq_n_f32(<float>192.0)), vmulq_f32(s1, s1),
                     vbslq_f32(c, vmulq_f32(vfmaq_f32(s2, s2, j), s1), vfmaq_f32(k, k, j)))


cdef inline float exp8(const float *x, float mx, float *y) noexcept nogil:
    """y[l] = exp(x[l] - mx) for 8 lanes (ggml_v_expf); returns their hsum8_tree."""
    cdef float32x4_t m = vdupq_n_f32(mx)
    cdef float32x4_t lo = v_expf(vsubq_f32(vld1q_f32(x), m))
    cdef float32x4_t hi = v_expf(vsubq_f32(vld1q_f32(x + 4), m))
    vst1q_f32(y, lo)
    vst1q_f32(y + 4, hi)
    return hsum8_halves(lo, hi)


cdef inline float dot_vec_f32(const float *a, const float *b, int64_t n) noexcept nogil:
    """a . b over n floats as ggml_vec_dot_f32 on AVX2: four 8-lane FMA chains (each two float32x4
    halves) over chunks of 32, GGML_F32x8_REDUCE's tree, then the leftovers one by one."""
    cdef int64_t np = n & ~(<int64_t>31)
    cdef float32x4_t z = vdupq_n_f32(<float>0.0)
    cdef float32x4_t s0l = z, s0h = z, s1l = z, s1h = z    # chains 0..3, lanes 0-3 / 4-7
    cdef float32x4_t s2l = z, s2h = z, s3l = z, s3h = z
    cdef int64_t i
    for i in range(0, np, 32):
        s0l = vfmaq_f32(s0l, vld1q_f32(a + i), vld1q_f32(b + i))
        s0h = vfmaq_f32(s0h, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4))
        s1l = vfmaq_f32(s1l, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8))
        s1h = vfmaq_f32(s1h, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12))
        s2l = vfmaq_f32(s2l, vld1q_f32(a + i + 16), vld1q_f32(b + i + 16))
        s2h = vfmaq_f32(s2h, vld1q_f32(a + i + 20), vld1q_f32(b + i + 20))
        s3l = vfmaq_f32(s3l, vld1q_f32(a + i + 24), vld1q_f32(b + i + 24))
        s3h = vfmaq_f32(s3h, vld1q_f32(a + i + 28), vld1q_f32(b + i + 28))
    # chains (0+2)+(1+3), then lanes k + (k+4), then hadd twice: (t0+t1)+(t2+t3)
    cdef float32x4_t lo = vaddq_f32(vaddq_f32(s0l, s2l), vaddq_f32(s1l, s3l))
    cdef float32x4_t hi = vaddq_f32(vaddq_f32(s0h, s2h), vaddq_f32(s1h, s3h))
    cdef float32x4_t t = vpaddq_f32(vaddq_f32(lo, hi), z)                # t0+t1, t2+t3, 0, 0
    cdef float sumf = vgetq_lane_f32(t, 0) + vgetq_lane_f32(t, 1)
    for i in range(np, n):
        sumf = vx_fma(a[i], b[i], sumf)
    return sumf


cdef inline float scores8(const float *K, const float *q, int64_t hd, float scale, float *w) noexcept nogil:
    """w[k] = dot_vec_f32(K row k, q, hd) * scale for 8 key rows, one at a time; returns their largest."""
    return scores8_each(K, q, hd, scale, w)


cdef inline int64_t swiglu_blocks(int64_t F, const float *gate, const float *up, float *y) noexcept nogil:
    """y[f] = silu(gate[f]) (* up[f] unless up is NULL) over the leading whole blocks of 8 (as the
    x86 tiers, so the same elements get the vector expf), as ggml_v_silu: x / (1 + v_expf(0 - x));
    returns the elements done."""
    cdef int64_t f = 0, o
    cdef float32x4_t one = vdupq_n_f32(<float>1.0)
    cdef float32x4_t zero = vdupq_n_f32(<float>0.0)
    cdef float32x4_t xv, silu
    while f + 8 <= F:
        for o in range(f, f + 8, 4):
            xv = vld1q_f32(gate + o)
            silu = vdivq_f32(xv, vaddq_f32(one, v_expf(vsubq_f32(zero, xv))))
            if up != NULL:
                vst1q_f32(y + o, vmulq_f32(silu, vld1q_f32(up + o)))
            else:
                vst1q_f32(y + o, silu)
        f += 8
    return f
