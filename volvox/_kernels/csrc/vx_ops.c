/* volvox sequence kernels: attention, SwiGLU, RoPE. One translation unit per ISA tier
 * (like vx_impl.c); the tier's table in vx_impl.c points at these.
 *
 * The x86 SIMD tiers redo ggml's f32 CPU arithmetic operation for operation: the same
 * products, FMA chains and horizontal-sum trees, and ggml's vectorised expf (AVX2 + FMA
 * variant, ported from ARM's optimized-routines). Together with the quantized GEMMs this
 * makes a llama-style forward pass match llama.cpp's CPU build bit for bit. The portable
 * tier follows the same order in plain C, with libm's expf: close, not bit-identical.
 */
#include <math.h>
#include <string.h>

#include "vx_tier.h"

#if defined(VX_AVX2)
#define VX_FMA(a, b, c) fmaf(a, b, c)
#else
#define VX_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* ggml's hsum_float_8 tree over 8 lanes: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
static inline float hsum8_tree(const float *l) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

#if defined(VX_AVX2)
VX_INLINE float hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* ggml_v_expf, AVX2 + FMA: max error 1.45 + 0.5 ulp; > 88.38 -> inf, < -103.97 -> 0. */
VX_INLINE __m256 v_expf(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
    const __m256i c = _mm256_castps_si256(
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256i d = _mm256_castps_si256(
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
    return _mm256_or_ps(
        _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
        _mm256_andnot_ps(_mm256_castsi256_ps(d),
                         _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(c),
                                                    _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                                      _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}
#endif

/* y[l] = exp(x[l] - mx) for 8 lanes; returns their hsum8_tree. */
static inline float exp8(const float *x, float mx, float *y) {
#if defined(VX_AVX2)
    const __m256 v = v_expf(_mm256_sub_ps(_mm256_loadu_ps(x), _mm256_set1_ps(mx)));
    _mm256_storeu_ps(y, v);
    return hsum8(v);
#else
    for (int l = 0; l < 8; l++) y[l] = expf(x[l] - mx);
    return hsum8_tree(y);
#endif
}

/* a . b over n floats as ggml_vec_dot_f32 (ggml_mul_mat of k and the permuted q): four 8-lane FMA chains
 * over chunks of 32, GGML_F32x8_REDUCE's tree, then the leftovers one by one. */
static inline float dot_vec_f32(const float *a, const float *b, int64_t n) {
    const int64_t np = n & ~(int64_t)31;
    float sumf;
#if defined(VX_AVX2)
    __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            s[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * j), _mm256_loadu_ps(b + i + 8 * j), s[j]);
    s[0] = _mm256_add_ps(s[0], s[2]);
    s[1] = _mm256_add_ps(s[1], s[3]);
    s[0] = _mm256_add_ps(s[0], s[1]);
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s[0]), _mm256_extractf128_ps(s[0], 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    sumf = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
#else
    float l[4][8] = {{0}};
    for (int64_t i = 0; i < np; i++) l[(i >> 3) & 3][i & 7] = VX_FMA(a[i], b[i], l[(i >> 3) & 3][i & 7]);
    float t[4];
    for (int k = 0; k < 4; k++) {
        const float x0 = (l[0][k] + l[2][k]) + (l[1][k] + l[3][k]);
        const float x1 = (l[0][k + 4] + l[2][k + 4]) + (l[1][k + 4] + l[3][k + 4]);
        t[k] = x0 + x1;
    }
    sumf = (t[0] + t[1]) + (t[2] + t[3]);
#endif
    for (int64_t i = np; i < n; i++) sumf = VX_FMA(a[i], b[i], sumf);
    return sumf;
}

/* a[d] = fma(v[d], w, a[d]) for d < n */
static inline void axpy(int64_t n, float w, const float *v, float *a) {
    int64_t d = 0;
#if defined(VX_AVX2)
    const __m256 wv = _mm256_set1_ps(w);
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(a + d, _mm256_fmadd_ps(_mm256_loadu_ps(v + d), wv, _mm256_loadu_ps(a + d)));
#endif
    for (; d < n; d++) a[d] = VX_FMA(v[d], w, a[d]);
}

void VX_CAT(vx_attention, VX_TIER)(const vx_attn_shape *s, const float *q, const float *kc,
                                   const float *vc, int64_t item, float *scratch, float *out) {
    const int64_t hd = s->head_dim, nh = s->n_heads;
    const int64_t h = item / s->seq, i = item % s->seq;
    const int64_t kvh = h / (nh / s->n_kv_heads);
    const int64_t nk = s->start + i + 1;                       /* keys 0..start+i */
    const int64_t j0 = s->window > 0 && nk > s->window ? nk - s->window : 0; /* first visible */
    const int64_t np = (nk + 7) / 8 * 8;
    const float *qr = q + i * nh * hd + h * hd;                 /* (hd,) */
    const float *K = kc + kvh * s->kv_head_stride;             /* (capacity, hd) */
    const float *V = vc + kvh * s->kv_head_stride;             /* (capacity, hd) */
    float *w = scratch;                                         /* (np,) scores, then weights */
    float *acc = scratch + np;                                  /* (32, hd): lane sums of w * V */
    /* kq = k . q (ggml_mul_mat), * scale (ggml_vec_scale_f32), masked to -inf */
    float mx = -INFINITY;
    for (int64_t j = 0; j < np; j++) {
        if (j < j0 || j >= nk) { w[j] = -INFINITY; continue; }
        const float *kr = K + j * hd;
        w[j] = dot_vec_f32(kr, qr, hd) * s->scale;
        mx = w[j] > mx ? w[j] : mx;
    }
    /* softmax (ggml_vec_soft_max_f32): exp in chunks of 8, their sums added in double */
    double sum = 0.0;
    for (int64_t c = 0; c < np; c += 8) sum += (double)exp8(w + c, mx, w + c);
    const float inv = (float)(1.0 / sum);
    /* out = w . V, as ggml_mul_mat of v and the weights: one query row runs
     * ggml_vec_dot_f32 (key j feeds lane j % 8 of chain (j / 8) % 4), several rows
     * tinyBLAS (one chain: lane j % 8). acc row (j & 31) or (j & 7) holds that lane. */
    const int chains = s->seq == 1 ? 4 : 1;
    const int64_t lanes_mask = 8 * chains - 1;
    memset(acc, 0, (size_t)(8 * chains * hd) * sizeof(float));
    for (int64_t j = j0; j < nk; j++) axpy(hd, w[j] * inv, V + j * hd, acc + (j & lanes_mask) * hd);
    float *o = out + i * nh * hd + h * hd;                      /* (hd,) */
    for (int64_t d = 0; d < hd; d++) {
        float l[8];
        if (chains == 1) {
            for (int k = 0; k < 8; k++) l[k] = acc[k * hd + d];
            o[d] = hsum8_tree(l);
        } else { /* GGML_F32x8_REDUCE: chains (0+2)+(1+3), then lanes k + (k+4), hadd twice */
            for (int k = 0; k < 8; k++)
                l[k] = (acc[k * hd + d] + acc[(16 + k) * hd + d]) + (acc[(8 + k) * hd + d] + acc[(24 + k) * hd + d]);
            o[d] = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
        }
    }
}

void VX_CAT(vx_swiglu, VX_TIER)(int64_t F, const float *gate, const float *up, float *y) {
    int64_t f = 0;
#if defined(VX_AVX2)
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; f + 8 <= F; f += 8) {
        const __m256 xv = _mm256_loadu_ps(gate + f);
        const __m256 silu = _mm256_div_ps(xv, _mm256_add_ps(one, v_expf(_mm256_sub_ps(_mm256_setzero_ps(), xv))));
        _mm256_storeu_ps(y + f, up ? _mm256_mul_ps(silu, _mm256_loadu_ps(up + f)) : silu);
    }
#endif
    for (; f < F; f++) {
        const float silu = gate[f] / (1.0f + expf(-gate[f]));
        y[f] = up ? silu * up[f] : silu;
    }
}

void VX_CAT(vx_rope, VX_TIER)(int64_t n_heads, int64_t head_dim, int64_t rope_dim, int interleaved,
                              int64_t pos, float base, float freq_scale, const float *x, float *y) {
    const float theta_scale = powf(base, -2.0f / (float)rope_dim);
    float theta = (float)pos;
    for (int64_t k = 0; k < rope_dim / 2; k++) {
        const float t = freq_scale * theta;
        const float c = cosf(t), sn = sinf(t);
        const int64_t i0 = interleaved ? 2 * k : k;
        const int64_t i1 = interleaved ? 2 * k + 1 : k + rope_dim / 2;
        for (int64_t h = 0; h < n_heads; h++) {
            const float x0 = x[h * head_dim + i0], x1 = x[h * head_dim + i1];
            y[h * head_dim + i0] = fmaf(x0, c, -(x1 * sn));
            y[h * head_dim + i1] = fmaf(x0, sn, x1 * c);
        }
        theta *= theta_scale;
    }
    if (x != y && rope_dim < head_dim)
        for (int64_t h = 0; h < n_heads; h++)
            memcpy(y + h * head_dim + rope_dim, x + h * head_dim + rope_dim,
                   (size_t)(head_dim - rope_dim) * sizeof(float));
}
