# Row kernels: RMSNorm, SwiGLU / SiLU, RoPE (the other row kernels follow as they are ported).
from libc.math cimport sqrtf, expf, powf, cosf, sinf, fmaf, logf, fmaxf, fminf
from libc.stdint cimport int64_t
from libc.string cimport memcpy


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


cdef void swiglu_f32(int64_t F, const float *gate, const float *up, float *y) noexcept nogil:
    """y (F,) = silu(gate) * up, or silu(gate) when up is NULL; ggml's ggml_vec_swiglu_f32 (and
    its silu) on the SIMD tiers: whole blocks of 8 (avx512: 16) with the vector expf (the tier's
    swiglu_blocks), the rest x / (1 + expf(-x)) with libm's. silu then a float multiply: the fused
    op's bits."""
    cdef int64_t f = swiglu_blocks(F, gate, up, y)
    cdef float silu
    while f < F:
        silu = gate[f] / (<float>1.0 + expf(-gate[f]))
        y[f] = silu * up[f] if up != NULL else silu
        f += 1


cdef inline void rope_yarn_angle(const vx_rope_yarn *yarn, float theta, float freq_scale, int64_t k,
                                 float *c, float *sn) noexcept nogil:
    """cos and sin of pair k's angle as ggml's rope_cache_init / rope_yarn (float32 steps in its order)."""
    cdef float extrap = theta / yarn.freq_factors[k] if yarn.freq_factors != NULL else theta
    cdef float interp = freq_scale * extrap
    cdef float t = interp
    cdef float mscale = yarn.attn_factor
    cdef float ramp, mix
    if yarn.ext_factor != <float>0.0:
        ramp = (<float>k - yarn.corr_lo) / fmaxf(<float>0.001, yarn.corr_hi - yarn.corr_lo)
        mix = (<float>1.0 - fminf(<float>1.0, fmaxf(<float>0.0, ramp))) * yarn.ext_factor
        t = interp * (<float>1.0 - mix) + extrap * mix
        mscale *= <float>1.0 + <float>0.1 * logf(<float>1.0 / freq_scale)
    c[0] = cosf(t) * mscale
    sn[0] = sinf(t) * mscale


cdef void rope_f32(int64_t n_heads, int64_t head_dim, int64_t rope_dim, int interleaved, int64_t pos,
                   float base, float freq_scale, const vx_rope_yarn *yarn, const float *x, float *y) noexcept nogil:
    """Rotary embedding of one row (n_heads, head_dim) at position pos, as ggml's f32 rope:
    theta_k = pos * base^(-2k/rope_dim) by repeated float multiplication, cosf / sinf of
    freq_scale * theta_k (with yarn: ggml's rope_yarn of theta_k / freq_factor_k), one fmaf per
    output. Pairs (2k, 2k+1) when interleaved (NORM), else (k, k + rope_dim/2) (NEOX); dims
    rope_dim..head_dim copied. x and y may be the same row."""
    cdef float theta_scale = powf(base, <float>-2.0 / <float>rope_dim)
    cdef float theta = <float>pos
    cdef float t, c, sn, x0, x1
    cdef int64_t k, h, i0, i1
    for k in range(rope_dim // 2):
        if yarn == NULL:
            t = freq_scale * theta
            c = cosf(t)
            sn = sinf(t)
        else:
            rope_yarn_angle(yarn, theta, freq_scale, k, &c, &sn)
        i0 = 2 * k if interleaved else k
        i1 = 2 * k + 1 if interleaved else k + rope_dim // 2
        for h in range(n_heads):
            x0 = x[h * head_dim + i0]
            x1 = x[h * head_dim + i1]
            y[h * head_dim + i0] = fmaf(x0, c, -(x1 * sn))
            y[h * head_dim + i1] = fmaf(x0, sn, x1 * c)
        theta *= theta_scale
    if x != y and rope_dim < head_dim:
        for h in range(n_heads):
            memcpy(y + h * head_dim + rope_dim, x + h * head_dim + rope_dim,
                   <size_t>(head_dim - rope_dim) * sizeof(float))


cdef void fill_rows(vx_table *t) noexcept:
    t.rms_norm = rms_norm_f32
    t.swiglu = swiglu_f32
    t.rope = rope_f32
