/* volvox vision kernels: packed f32 GEMM, f32 / int8 convolutions (NHWC). One translation
 * unit per ISA tier (like vx_impl.c); the tier's table in vx_impl.c points at `vx_conv_<tier>`.
 *
 * f32 GEMM: weights (N, K) row-major are packed into panels of VX_SG_NR = 32 output
 * features, [panel][k][32] (zero padded), the same layout on every tier. A register tile
 * of activation rows x 32 features runs over all K (avx512: 8 x 32, avx2: 6 x 16 twice,
 * generic: 4 x 32 in plain C); bias and ReLU / ReLU6 are applied at the store.
 *
 * int8 conv (TFLite's W8A8, per-output-channel requantization): activations are offset
 * by +128 to u8 (im2col pads with zp_in + 128, rows padded to a multiple of 4 with 0),
 * weights packed into panels of 16 channels [panel][k/4][16][4] (VNNI's vpdpbusd
 * layout; 32-channel pairs of panels). Then
 *     sum_k (x - zp_in) w = sum_k u w - (zp_in + 128) * sum_k w
 * exactly in int32, and MultiplyByQuantizedMultiplier as ops/quantized.py's reference.
 */
#include <math.h>
#include <string.h>

#include "vx_tier.h"

#pragma GCC diagnostic ignored "-Wunused-function"

#define VX_SG_NR 32
#define VX_QG_NR 32  /* two 16-channel panels */
#define QG_PAIR_NR 8 /* channels of a dense int8 conv run two pixels per 16-lane vector */

/* ------------------------------------------------------------------------------------
 * f32 GEMM
 * ---------------------------------------------------------------------------------- */
static void sgemm_pack(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n, float *packed) {
    for (int64_t p0 = 0; p0 < n; p0 += VX_SG_NR) {
        float *pp = packed + p0 * K;                                /* (K, 32) */
        const int nr = (int)(n - p0 < VX_SG_NR ? n - p0 : VX_SG_NR);
        const float *rows[VX_SG_NR];
        for (int j = 0; j < nr; j++) rows[j] = (const float *)(w + (p0 + j) * w_stride);
        /* k outer: the panel is written in order; the 32 rows' current lines stay in L1 */
        for (int64_t k = 0; k < K; k++) {
            float *dst = pp + k * VX_SG_NR;
            int j = 0;
            for (; j < nr; j++) dst[j] = rows[j][k];
            for (; j < VX_SG_NR; j++) dst[j] = 0.0f;
        }
    }
}

VX_INLINE float act_f32(const int act, float v) {
    if (act == VX_ACT_NONE) return v;
    v = v > 0.0f ? v : 0.0f;
    return act == VX_ACT_RELU6 && v > 6.0f ? 6.0f : v;
}

/* A register tile's activation rows: row i's K values are `runs` runs of `run` floats, run r at
 * a + i*lda + r*run_stride (a GEMM or im2col row: one run of K; a conv reading its input in
 * place: one run per kernel row). The packed panel's k walks them in order. */
typedef struct {
    const float *a;
    int64_t lda, runs, run, run_stride;
} sg_rows;

/* Ask for a panel row (VX_SG_NR floats, two cache lines) toward L2: sgemm_rows's first tile of a
 * panel fetches the next panel's rows as it goes, so weights that other layers pushed out of the
 * caches (a 7x7 map's 1x1 convs: 0.9-1.6 MB) arrive before their panel starts. */
VX_INLINE void sg_prefetch(const float *row) {
    __builtin_prefetch(row, 0, 2);
    __builtin_prefetch(row + 16, 0, 2);
}

/* y (MR rows x nr <= VX_SG_NR features, ldy apart) = act(bias + A's rows . panel p's columns); pf:
 * another panel's rows to prefetch as the tile reads its own (NULL: none). */
#if defined(VX_AVX512)
#define SG_MR 8
VX_INLINE void sg_tile(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act, float *y,
                       int64_t ldy, const float *pf) {
    __m512 c0[SG_MR], c1[SG_MR];
    for (int i = 0; i < MR; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    for (int64_t r = 0; r < A.runs; r++, p += VX_SG_NR * A.run) {
        const float *a = A.a + r * A.run_stride;
        for (int64_t k = 0; k < A.run; k++) {
            if (pf) sg_prefetch(pf + VX_SG_NR * (r * A.run + k));
            const __m512 b0 = _mm512_loadu_ps(p + VX_SG_NR * k), b1 = _mm512_loadu_ps(p + VX_SG_NR * k + 16);
            for (int i = 0; i < MR; i++) {
                const __m512 av = _mm512_set1_ps(a[i * A.lda + k]);
                c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
                c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
            }
        }
    }
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1u);
    const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1u) : 0;
    const __m512 bv0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 bv1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    for (int i = 0; i < MR; i++) {
        __m512 v0 = _mm512_add_ps(c0[i], bv0), v1 = _mm512_add_ps(c1[i], bv1);
        if (act != VX_ACT_NONE) { v0 = _mm512_max_ps(v0, zero); v1 = _mm512_max_ps(v1, zero); }
        if (act == VX_ACT_RELU6) { v0 = _mm512_min_ps(v0, six); v1 = _mm512_min_ps(v1, six); }
        _mm512_mask_storeu_ps(y + i * ldy, m0, v0);
        _mm512_mask_storeu_ps(y + i * ldy + 16, m1, v1);
    }
}

/* sg_tile for a panel of at most 16 features (nr <= 16): twice the rows, half the columns; the
 * panel's zero-padded upper 16 columns would double its FMAs. */
#define SG_MR16 16
VX_INLINE void sg_tile_half(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act,
                            float *y, int64_t ldy) {
    __m512 c[SG_MR16];
    for (int i = 0; i < MR; i++) c[i] = _mm512_setzero_ps();
    for (int64_t r = 0; r < A.runs; r++, p += VX_SG_NR * A.run) {
        const float *a = A.a + r * A.run_stride;
        for (int64_t k = 0; k < A.run; k++) {
            const __m512 b = _mm512_loadu_ps(p + VX_SG_NR * k);
            for (int i = 0; i < MR; i++) c[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * A.lda + k]), b, c[i]);
        }
    }
    const __mmask16 m = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1u);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias) : _mm512_setzero_ps();
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    for (int i = 0; i < MR; i++) {
        __m512 v = _mm512_add_ps(c[i], bv);
        if (act != VX_ACT_NONE) v = _mm512_max_ps(v, zero);
        if (act == VX_ACT_RELU6) v = _mm512_min_ps(v, six);
        _mm512_mask_storeu_ps(y + i * ldy, m, v);
    }
}
#elif defined(VX_AVX2)
#define SG_MR 6
/* 6 rows x 16 features (columns off..off+15 of a 32-wide panel). */
VX_INLINE void sg_tile16(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act,
                         float *y, int64_t ldy, const float *pf) {
    __m256 c0[SG_MR], c1[SG_MR];
    for (int i = 0; i < MR; i++) c0[i] = c1[i] = _mm256_setzero_ps();
    for (int64_t r = 0; r < A.runs; r++, p += VX_SG_NR * A.run) {
        const float *a = A.a + r * A.run_stride;
        for (int64_t k = 0; k < A.run; k++) {
            if (pf) sg_prefetch(pf + VX_SG_NR * (r * A.run + k));
            const __m256 b0 = _mm256_loadu_ps(p + VX_SG_NR * k), b1 = _mm256_loadu_ps(p + VX_SG_NR * k + 8);
            for (int i = 0; i < MR; i++) {
                const __m256 av = _mm256_set1_ps(a[i * A.lda + k]);
                c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
                c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
            }
        }
    }
    for (int i = 0; i < MR; i++) {
        float t[16];
        _mm256_storeu_ps(t, c0[i]);
        _mm256_storeu_ps(t + 8, c1[i]);
        for (int j = 0; j < nr; j++) y[i * ldy + j] = act_f32(act, t[j] + (bias ? bias[j] : 0.0f));
    }
}
VX_INLINE void sg_tile(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act, float *y,
                       int64_t ldy, const float *pf) {
    sg_tile16(MR, A, p, nr < 16 ? nr : 16, bias, act, y, ldy, pf);
    if (nr > 16) sg_tile16(MR, A, p + 16, nr - 16, bias ? bias + 16 : NULL, act, y + 16, ldy, NULL);
}
#else
#define SG_MR 4
VX_INLINE void sg_tile(const int MR, sg_rows A, const float *p, int nr, const float *bias, const int act, float *y,
                       int64_t ldy, const float *pf) {
    float c[SG_MR][VX_SG_NR];
    memset(c, 0, sizeof(c));
    for (int64_t r = 0; r < A.runs; r++, p += VX_SG_NR * A.run) {
        const float *a = A.a + r * A.run_stride;
        for (int64_t k = 0; k < A.run; k++) {
            if (pf) sg_prefetch(pf + VX_SG_NR * (r * A.run + k));
            for (int i = 0; i < MR; i++) {
                const float av = a[i * A.lda + k];
                for (int j = 0; j < VX_SG_NR; j++) c[i][j] += av * p[VX_SG_NR * k + j];
            }
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < nr; j++) y[i * ldy + j] = act_f32(act, c[i][j] + (bias ? bias[j] : 0.0f));
}
#endif

/* y[i*ldy + r] = act(bias[r] + sum_k A row i's k-th value * W[r][k0 + k]) for i < m, r < n; W
 * packed with K per row (A's runs cover k0 .. k0 + runs*run). */
static void sgemm_rows(int64_t K, int64_t k0, const float *packed, int64_t n, sg_rows A, int64_t m, float *y,
                       int64_t ldy, const float *bias, int act) {
    for (int64_t p0 = 0; p0 < n; p0 += VX_SG_NR) {
        const float *pp = packed + p0 * K + k0 * VX_SG_NR;          /* (K, 32) from row k0 */
        const int nr = (int)(n - p0 < VX_SG_NR ? n - p0 : VX_SG_NR);
        const float *bp = bias ? bias + p0 : NULL;
        const float *a = A.a;
        int64_t i0 = 0;
#if defined(SG_MR16)
        for (; nr <= 16 && i0 + SG_MR16 <= m; i0 += SG_MR16) {
            A.a = a + i0 * A.lda;
            sg_tile_half(SG_MR16, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy);
        }
#endif
        /* rows that fill SG_MR - 1 row tiles once the full ones are done end in those, not in a
         * short tile: 49 rows (a 7x7 map) as 7 tiles of 7, not 6 of 8 and a 1-row tile whose two
         * FMA chains wait on each other */
        const int64_t rows = m - i0, tiles = (rows + SG_MR - 1) / SG_MR, full = rows - (SG_MR - 1) * tiles;
        const int64_t short_tiles = rows % SG_MR != 0 && full >= 0 ? tiles - full : 0;
        const float *next = p0 + VX_SG_NR < n ? pp + VX_SG_NR * K : NULL;  /* the next panel, same rows */
        for (; i0 + SG_MR <= m - short_tiles * (SG_MR - 1); i0 += SG_MR) {
            A.a = a + i0 * A.lda;
            sg_tile(SG_MR, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy, i0 == 0 ? next : NULL);
        }
        for (int64_t t = 0; t < short_tiles; t++, i0 += SG_MR - 1) {
            A.a = a + i0 * A.lda;
            sg_tile(SG_MR - 1, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy, i0 == 0 ? next : NULL);
        }
        A.a = a + i0 * A.lda;
        switch (m - i0) {
#if SG_MR > 7
            case 7: sg_tile(7, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy, NULL); break;
            case 6: sg_tile(6, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy, NULL); break;
#endif
#if SG_MR > 5
            case 5: sg_tile(5, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy, NULL); break;
            case 4: sg_tile(4, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy, NULL); break;
#endif
            case 3: sg_tile(3, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy, NULL); break;
            case 2: sg_tile(2, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy, NULL); break;
            case 1: sg_tile(1, A, pp, nr, bp, act, y + i0 * ldy + p0, ldy, NULL); break;
            default: break;
        }
        A.a = a;
    }
}

/* y[i*ldy + r] = act(bias[r] + sum_k a[i*lda + k] * W[r][k]) for i < m, r < n; W packed. */
static void sgemm(int64_t K, const float *packed, int64_t n, const float *a, int64_t lda, int64_t m,
                  float *y, int64_t ldy, const float *bias, int act) {
    const sg_rows A = {a, lda, 1, K, 0};
    sgemm_rows(K, 0, packed, n, A, m, y, ldy, bias, act);
}

/* ------------------------------------------------------------------------------------
 * f32 convolution pieces: im2col rows, depthwise rows.
 * ---------------------------------------------------------------------------------- */
/* (b, oh, ow) of the next output pixel (im2col's walk: no divisions per pixel). */
VX_INLINE void next_pixel(const vx_conv_shape *s, int64_t *b, int64_t *oh, int64_t *ow) {
    if (++*ow < s->ow) return;
    *ow = 0;
    if (++*oh < s->oh) return;
    *oh = 0;
    ++*b;
}

/* The kernel taps of output pixel (oh, ow) that land inside the image: i in [*i0, *i1), j in [*j0, *j1). */
VX_INLINE void valid_taps(const vx_conv_shape *s, int64_t oh, int64_t ow, int64_t *i0, int64_t *i1,
                          int64_t *j0, int64_t *j1) {
    const int64_t h0 = oh * s->sh - s->pt, w0 = ow * s->sw - s->pl;
    /* divisions only at the borders (interior pixels see every tap) */
    *i0 = h0 >= 0 ? 0 : (-h0 + s->dh - 1) / s->dh;
    *i1 = h0 + (s->kh - 1) * s->dh < s->h ? s->kh : h0 >= s->h ? 0 : (s->h - 1 - h0) / s->dh + 1;
    *j0 = w0 >= 0 ? 0 : (-w0 + s->dw - 1) / s->dw;
    *j1 = w0 + (s->kw - 1) * s->dw < s->w ? s->kw : w0 >= s->w ? 0 : (s->w - 1 - w0) / s->dw + 1;
}

/* cols[q * KK + (i*kw + j)*C + c] = x at tap (i, j) of output pixel p0 + q (0 in the padding). */
static void im2col_f32(const vx_conv_shape *s, const float *x, int64_t p0, int64_t np, float *cols) {
    const int64_t C = s->c, KK = s->kh * s->kw * C;
    int64_t b = p0 / (s->oh * s->ow), oh = p0 % (s->oh * s->ow) / s->ow, ow = p0 % s->ow; /* pixel p0 + q */
    for (int64_t q = 0; q < np; q++, next_pixel(s, &b, &oh, &ow)) {
        const int64_t iw0 = ow * s->sw - s->pl;
        /* a kernel row wholly inside the image (no column dilation) is one run of kw*C floats */
        const int row_inside = s->dw == 1 && iw0 >= 0 && iw0 + s->kw <= s->w;
        float *dst = cols + q * KK;                                  /* (kh, kw, C) */
        for (int64_t i = 0; i < s->kh; i++) {
            const int64_t ih = oh * s->sh - s->pt + i * s->dh;
            if (row_inside && ih >= 0 && ih < s->h) {
                memcpy(dst, x + ((b * s->h + ih) * s->w + iw0) * C, (size_t)(s->kw * C) * sizeof(float));
                dst += s->kw * C;
                continue;
            }
            for (int64_t j = 0; j < s->kw; j++, dst += C) {
                const int64_t iw = iw0 + j * s->dw;
                if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) memset(dst, 0, (size_t)C * sizeof(float));
                else memcpy(dst, x + ((b * s->h + ih) * s->w + iw) * C, (size_t)C * sizeof(float));
            }
        }
    }
}

/* Output pixels p0 .. p0+np-1 (flattened b, oh, ow) of a conv: y[q*ldy + r] = act(bias[r] + the
 * pixel's window . W[r]) for r < n, W packed (kh*kw*C per row). A run of pixels in one output
 * row whose kernel rows lie inside the image columns (no column dilation) reads the input in
 * place, one kw*C run per kernel row (rows in the padding skipped: they add zeros); the other
 * pixels go through im2col rows in cols (np rows of kh*kw*C floats). */
static void conv_f32(const vx_conv_shape *s, const float *x, int64_t p0, int64_t np, const float *packed, int64_t n,
                     const float *bias, int act, float *cols, float *y, int64_t ldy) {
    const int64_t C = s->c, K = s->kh * s->kw * C;
    int64_t owa = (s->pl + s->sw - 1) / s->sw;                       /* [owa, owb): in-place columns */
    int64_t owb = s->w >= s->kw ? (s->w - s->kw + s->pl) / s->sw + 1 : 0;
    owb = owb < s->ow ? owb : s->ow;
    if (s->dw != 1 || owa >= owb) owa = owb = 0;
    for (int64_t q = 0; q < np;) {
        const int64_t p = p0 + q, b = p / (s->oh * s->ow), oh = p / s->ow % s->oh, ow = p % s->ow;
        const int64_t row_end = q + s->ow - ow < np ? q + s->ow - ow : np;  /* this output row's pixels */
        if (ow >= owa && ow < owb) {
            const int64_t m = (row_end < q + owb - ow ? row_end : q + owb - ow) - q;
            int64_t i0, i1, j0, j1;
            valid_taps(s, oh, ow, &i0, &i1, &j0, &j1);
            const sg_rows A = {x + ((b * s->h + oh * s->sh - s->pt + i0 * s->dh) * s->w + ow * s->sw - s->pl) * C,
                               s->sw * C, i1 - i0, s->kw * C, s->dh * s->w * C};
            sgemm_rows(K, i0 * s->kw * C, packed, n, A, m, y + q * ldy, ldy, bias, act);
            q += m;
        } else {
            const int64_t stop = ow < owa && q + owa - ow < row_end ? q + owa - ow : row_end;
            im2col_f32(s, x, p, stop - q, cols);
            sgemm(K, packed, n, cols, K, stop - q, y + q * ldy, ldy, bias, act);
            q = stop;
        }
    }
}

#if defined(VX_AVX512)
/* The requantization of up to 8 channels (lanes k) in int64 lanes, the same steps as requant_row's
 * scalar loop. */
VX_INLINE void requant8_i64(__mmask8 k, const int32_t *acc, int64_t corr, const int32_t *wsum, const int32_t *bias,
                            const int32_t *mult, const int32_t *shift, const vx_requant *rq, int8_t *y) {
    const __m512i one = _mm512_set1_epi64(1), zero = _mm512_setzero_si512();
    __m512i v = _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, acc));
    if (wsum)
        v = _mm512_sub_epi64(v, _mm512_mullo_epi64(_mm512_set1_epi64(corr),
                                                   _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, wsum))));
    if (bias) v = _mm512_add_epi64(v, _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, bias)));
    const __m512i sh = _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, shift));
    const __m512i lsh = _mm512_max_epi64(sh, zero);
    const __m512i rsh = _mm512_min_epi64(_mm512_max_epi64(_mm512_sub_epi64(zero, sh), zero), _mm512_set1_epi64(63));
    const __m512i ab = _mm512_mullo_epi64(_mm512_sllv_epi64(v, lsh),
                                          _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, mult)));
    const __m512i t = _mm512_add_epi64(_mm512_add_epi64(ab, _mm512_set1_epi64(INT64_C(1) << 30)),
                                       _mm512_and_si512(_mm512_srai_epi64(ab, 63),
                                                        _mm512_set1_epi64(1 - (INT64_C(1) << 31))));
    const __m512i st = _mm512_srai_epi64(t, 63);
    const __m512i at = _mm512_srli_epi64(_mm512_sub_epi64(_mm512_xor_si512(t, st), st), 31);
    const __m512i high = _mm512_sub_epi64(_mm512_xor_si512(at, st), st);
    const __m512i mask = _mm512_sub_epi64(_mm512_sllv_epi64(one, rsh), one);
    const __m512i thr = _mm512_sub_epi64(_mm512_srli_epi64(mask, 1), _mm512_srai_epi64(high, 63));
    __m512i q = _mm512_srav_epi64(high, rsh);
    q = _mm512_mask_add_epi64(q, _mm512_cmpgt_epi64_mask(_mm512_and_si512(high, mask), thr), q, one);
    q = _mm512_add_epi64(q, _mm512_set1_epi64(rq->zp_out));
    q = _mm512_min_epi64(_mm512_max_epi64(q, _mm512_set1_epi64(rq->lo)), _mm512_set1_epi64(rq->hi));
    _mm512_mask_cvtepi64_storeu_epi8(y, k, q);
}

/* (ab + nudge) / 2^31 toward zero per int64 lane (ab: 64-bit products), as requant8_i64. */
VX_INLINE __m512i high31_i64(__m512i ab) {
    const __m512i t = _mm512_add_epi64(_mm512_add_epi64(ab, _mm512_set1_epi64(INT64_C(1) << 30)),
                                       _mm512_and_si512(_mm512_srai_epi64(ab, 63),
                                                        _mm512_set1_epi64(1 - (INT64_C(1) << 31))));
    const __m512i st = _mm512_srai_epi64(t, 63);
    return _mm512_sub_epi64(_mm512_xor_si512(_mm512_srli_epi64(_mm512_sub_epi64(_mm512_xor_si512(t, st), st), 31), st),
                            st);
}

/* The requantization of up to 16 channels (lanes k) in int32 lanes, TFLite's own int32 form:
 * equal to the int64 one when every lane's acc + bias, and that << left shift, fit int32, the
 * multiplier is not INT32_MIN (so the high half fits) and the right shift is at most 31. Returns
 * 0 without storing anything when a lane breaks those conditions. */
VX_INLINE int requant16_i32(__mmask16 k, const int32_t *acc, const int32_t *bias, const int32_t *mult,
                            const int32_t *shift, const vx_requant *rq, int8_t *y) {
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
    const __m512i a = _mm512_maskz_loadu_epi32(k, acc);
    const __m512i b = bias ? _mm512_maskz_loadu_epi32(k, bias) : zero;
    const __m512i v = _mm512_add_epi32(a, b);
    const __m512i sh = _mm512_maskz_loadu_epi32(k, shift);
    const __m512i lsh = _mm512_max_epi32(sh, zero), rsh = _mm512_max_epi32(_mm512_sub_epi32(zero, sh), zero);
    const __m512i vl = _mm512_sllv_epi32(v, lsh);
    const __m512i m = _mm512_maskz_loadu_epi32(k, mult);
    __mmask16 bad = _mm512_cmplt_epi32_mask(_mm512_and_si512(_mm512_xor_si512(a, v), _mm512_xor_si512(b, v)), zero);
    bad |= _mm512_cmpneq_epi32_mask(_mm512_srav_epi32(vl, lsh), v);
    bad |= _mm512_cmplt_epi32_mask(sh, _mm512_set1_epi32(-31));  /* rsh > 31, and INT32_MIN */
    bad |= _mm512_cmpeq_epi32_mask(m, _mm512_set1_epi32(INT32_MIN));
    if (bad & k) return 0;
    const __m512i he = high31_i64(_mm512_mul_epi32(vl, m));  /* even lanes, in the low halves */
    const __m512i ho = high31_i64(_mm512_mul_epi32(_mm512_srli_epi64(vl, 32), _mm512_srli_epi64(m, 32)));
    const __m512i high = _mm512_mask_blend_epi32(0xAAAA, he, _mm512_slli_epi64(ho, 32));
    const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, rsh), one);  /* RoundingDivideByPOT */
    const __m512i thr = _mm512_sub_epi32(_mm512_srli_epi32(mask, 1), _mm512_srai_epi32(high, 31));
    __m512i q = _mm512_srav_epi32(high, rsh);
    q = _mm512_mask_add_epi32(q, _mm512_cmpgt_epi32_mask(_mm512_and_si512(high, mask), thr), q, one);
    /* clamp(q + zp_out, lo, hi) without overflowing int32: clamp q to [lo - zp_out, hi - zp_out] first */
    q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(rq->lo - rq->zp_out)), _mm512_set1_epi32(rq->hi - rq->zp_out));
    _mm512_mask_cvtepi32_storeu_epi8(y, k, _mm512_add_epi32(q, _mm512_set1_epi32(rq->zp_out)));
    return 1;
}
#endif

/* y[r] = clamp(MultiplyByQuantizedMultiplier(acc[r] - corr * wsum[r] + bias[r]) + zp_out, lo, hi)
 * for r < n (channels c0 + r of rq; wsum may be NULL): TFLite's arithmetic on int64 as
 * ops/quantized.py's reference, written without branches so the compiler vectorizes it
 * (avx512: 16 channels in int32 lanes where that is exact, else 8 in int64 lanes). */
static void requant_row(int n, const int32_t *acc, int64_t corr, const int32_t *wsum, const vx_requant *rq,
                        int64_t c0, int8_t *y) {
    const int32_t *bias = rq->bias ? rq->bias + c0 : NULL, *mult = rq->mult + c0, *shift = rq->shift + c0;
    int r = 0;
#if defined(VX_AVX512)
    for (; r < n; r += 16) {
        const __mmask16 k = n - r >= 16 ? 0xFFFF : (__mmask16)((1u << (n - r)) - 1u);
        if (!wsum && requant16_i32(k, acc + r, bias ? bias + r : NULL, mult + r, shift + r, rq, y + r)) continue;
        for (int h = r; h < n && h < r + 16; h += 8)
            requant8_i64(n - h >= 8 ? 0xFF : (__mmask8)((1u << (n - h)) - 1u), acc + h, corr, wsum ? wsum + h : NULL,
                         bias ? bias + h : NULL, mult + h, shift + h, rq, y + h);
    }
#endif
    for (; r < n; r++) {
        const int64_t v = (int64_t)acc[r] - (wsum ? corr * wsum[r] : 0) + (bias ? bias[r] : 0);
        const int64_t sh = shift[r];
        const int64_t lsh = sh > 0 ? sh : 0, rsh = sh > 0 ? 0 : (-sh < 63 ? -sh : 63);
        const int64_t ab = (int64_t)(((uint64_t)v << lsh) * (uint64_t)(int64_t)mult[r]);
        const int64_t t = ab + (INT64_C(1) << 30) + ((ab >> 63) & (1 - (INT64_C(1) << 31))); /* + nudge */
        const int64_t st = t >> 63;                                 /* t / 2^31 toward zero */
        const int64_t high = ((((t ^ st) - st) >> 31) ^ st) - st;
        const int64_t mask = (INT64_C(1) << rsh) - 1;               /* RoundingDivideByPOT */
        const int64_t thr = (mask >> 1) - (high >> 63);
        int64_t q = (high >> rsh) + ((high & mask) > thr) + rq->zp_out;
        q = q < rq->lo ? rq->lo : q;
        y[r] = (int8_t)(q > rq->hi ? rq->hi : q);
    }
}

#if defined(VX_AVX512)
/* requant_row for 16 lanes held in a register, prepared once per channel block: lane l
 * requantizes channel c0 + l % nr (nr divides 16; nr < 16 tiles 16 / nr pixels of nr channels
 * into one vector). rq16_prepare checks, for every |acc| <= acc_bound, that the steps below in
 * int32 lanes equal requant_row's int64 ones, and returns 0 (use requant_row) when it cannot:
 *   v = (acc + bias) << lsh                     |acc + bias| << lsh < 2^31: exact in int32
 *   h = (v * mult + 2^30) >> 31                 SaturatingRoundingDoublingHighMul: its nudge and
 *                                               division toward zero are this floor (mult != INT32_MIN;
 *                                               64-bit products, |h| <= |v|)
 *   q = (h + half - (h < 0 && rsh > 0)) >> rsh  RoundingDivideByPOT (half = 2^(rsh-1), rsh <= 31): the
 *                                               sum wraps past 2^31 - 1 only for h >= 0, whose lanes
 *                                               shift it as unsigned (a dead channel's bias near 2^30
 *                                               and rsh = 31 reach that)
 *   y = clamp(q + zp_out, lo, hi)               rq16_int8: the int8 pack saturates, so a clamp to
 *                                               int8's own range is only that                      */
typedef struct {
    __m512i bias, lsh, mult, mult_odd, half, neg, rsh, zp, lo, hi;
    int shifted;  /* some lane shifts left (else the shift is skipped) */
    int wide;     /* some lane's h + half may pass 2^31 - 1 (else the unsigned shift is skipped) */
    int clamp;    /* lo > -128 or hi < 127 (else the pack's saturation is the clamp) */
    int biased;   /* the caller's sums started from bias (rq16_prepare: 0, the bias is added) */
} rq16;

enum { RQ16_LIMIT = 1 << 30 };  /* the largest accumulator bound rq16_prepare takes */

VX_INLINE int rq16_prepare(const vx_requant *rq, int64_t c0, int n, int nr, int64_t acc_bound, rq16 *p) {
    if (acc_bound >= RQ16_LIMIT) return 0;
    const __mmask16 k = (__mmask16)((1u << n) - 1u);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx = _mm512_and_si512(lane, _mm512_set1_epi32(nr - 1));  /* l % nr */
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
    const __m512i bias = rq->bias ? _mm512_permutexvar_epi32(idx, _mm512_maskz_loadu_epi32(k, rq->bias + c0)) : zero;
    const __m512i sh = _mm512_permutexvar_epi32(idx, _mm512_maskz_loadu_epi32(k, rq->shift + c0));
    const __m512i mult = _mm512_permutexvar_epi32(idx, _mm512_maskz_loadu_epi32(k, rq->mult + c0));
    const __m512i lsh = _mm512_max_epi32(sh, zero), rsh = _mm512_max_epi32(_mm512_sub_epi32(zero, sh), zero);
    /* |bias| + acc_bound <= (2^31 - 1) >> lsh (lsh > 30: nothing fits) */
    const __m512i room = _mm512_sub_epi32(_mm512_srlv_epi32(_mm512_set1_epi32(INT32_MAX), lsh),
                                          _mm512_set1_epi32((int32_t)acc_bound));
    __mmask16 bad = _mm512_cmpgt_epi32_mask(_mm512_abs_epi32(bias), room);
    bad |= _mm512_cmpeq_epi32_mask(bias, _mm512_set1_epi32(INT32_MIN));
    bad |= _mm512_cmpeq_epi32_mask(mult, _mm512_set1_epi32(INT32_MIN));
    bad |= _mm512_cmpgt_epi32_mask(rsh, _mm512_set1_epi32(31));
    if (bad) return 0;
    /* |h| <= |v| <= (|bias| + acc_bound) << lsh: "wide" when that plus half passes 2^31 - 1; with
     * no right shift, q + zp_out must stay in int32 too (with one, |q| < 2^30 + 2^29) */
    const __m512i vmax = _mm512_sllv_epi32(_mm512_add_epi32(_mm512_abs_epi32(bias), _mm512_set1_epi32((int32_t)acc_bound)),
                                           lsh);
    if (_mm512_cmpeq_epi32_mask(rsh, zero) & _mm512_cmpgt_epi32_mask(vmax, _mm512_set1_epi32(INT32_MAX - 128))) return 0;
    const __m512i half = _mm512_srli_epi32(_mm512_sllv_epi32(one, rsh), 1);
    p->wide = _mm512_cmpgt_epi32_mask(vmax, _mm512_sub_epi32(_mm512_set1_epi32(INT32_MAX), half)) != 0;
    p->shifted = _mm512_cmpgt_epi32_mask(lsh, zero) != 0;
    p->bias = bias;
    p->lsh = lsh;
    p->mult = mult;
    p->mult_odd = _mm512_srli_epi64(mult, 32);
    p->rsh = rsh;
    p->half = half;
    p->neg = _mm512_maskz_mov_epi32(_mm512_cmpgt_epi32_mask(rsh, zero), _mm512_set1_epi32(-1));
    p->zp = _mm512_set1_epi32(rq->zp_out);
    p->lo = _mm512_set1_epi32(rq->lo);
    p->hi = _mm512_set1_epi32(rq->hi);
    p->clamp = rq->lo > -128 || rq->hi < 127;
    p->biased = 0;
    return 1;
}

/* The requantized int32 lanes of acc (within the prepared acc_bound), clamped once the int8
 * pack saturates them (rq16_int8, rq16_store). */
VX_INLINE __m512i rq16_apply(const rq16 *p, __m512i acc) {
    const __m512i sum = p->biased ? acc : _mm512_add_epi32(acc, p->bias);
    const __m512i v = p->shifted ? _mm512_sllv_epi32(sum, p->lsh) : sum;
    const __m512i r30 = _mm512_set1_epi64(INT64_C(1) << 30);
    /* bits 31..62 of each 64-bit product + 2^30: the low half of even lanes >> 31, the high half
     * of odd lanes << 1 */
    const __m512i he = _mm512_srli_epi64(_mm512_add_epi64(_mm512_mul_epi32(v, p->mult), r30), 31);
    const __m512i ho = _mm512_slli_epi64(_mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(v, 32), p->mult_odd),
                                                          r30), 1);
    const __m512i h = _mm512_mask_blend_epi32(0xAAAA, he, ho);
    const __m512i up = _mm512_add_epi32(_mm512_add_epi32(h, p->half), _mm512_and_si512(_mm512_srai_epi32(h, 31), p->neg));
    const __m512i down = p->wide ? _mm512_mask_blend_epi32(_mm512_movepi32_mask(h), _mm512_srlv_epi32(up, p->rsh),
                                                            _mm512_srav_epi32(up, p->rsh))
                                 : _mm512_srav_epi32(up, p->rsh);
    const __m512i q = _mm512_add_epi32(down, p->zp);
    return p->clamp ? _mm512_min_epi32(_mm512_max_epi32(q, p->lo), p->hi) : q;
}

/* The 16 int8 outputs of acc. */
VX_INLINE __m128i rq16_int8(const rq16 *p, __m512i acc) { return _mm512_cvtsepi32_epi8(rq16_apply(p, acc)); }

/* Store the int8 outputs of acc's lanes k at y. */
VX_INLINE void rq16_store(const rq16 *p, __m512i acc, __mmask16 k, int8_t *y) {
    _mm512_mask_cvtsepi32_storeu_epi8(y, k, rq16_apply(p, acc));
}

/* The requantized channels of pixels i .. i + 16 / nr - 1 (nr = 1, 2 or 4 channels each: acc
 * rows of VX_QG_NR int32, outputs ldy bytes apart) through one prepared rq16 (8 channels: qg_pairs). */
VX_INLINE void requant_tiled(int32_t acc[][VX_QG_NR], int nr, const rq16 *t, int8_t *y, int64_t ldy) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i row = _mm512_srli_epi32(lane, __builtin_ctz((unsigned)nr));
    const __m512i idx = _mm512_add_epi32(_mm512_slli_epi32(row, 5), _mm512_and_si512(lane, _mm512_set1_epi32(nr - 1)));
    const __m512i a = _mm512_i32gather_epi32(idx, (const void *)acc[0], 4);  /* lane l: acc[l / nr][l % nr] */
    const __m128i q = rq16_int8(t, a);
    int8_t out[16];
    _mm_storeu_si128((__m128i *)out, q);
    for (int g = 0; g < 16 / nr; g++) memcpy(y + g * ldy, out + g * nr, (size_t)nr);
}
#endif

/* Vector steps of the depthwise kernels: VL lanes, a lane mask for the last channels. */
#if defined(VX_AVX512)
#define DW_VL 16
typedef __mmask16 dw_mask;
typedef __m512 dw_vf;
VX_INLINE dw_mask dw_lanes(int64_t n) { return n >= 16 ? 0xFFFF : (dw_mask)((1u << n) - 1u); }
VX_INLINE dw_vf dwf_load(dw_mask k, const float *p) { return _mm512_maskz_loadu_ps(k, p); }
VX_INLINE dw_vf dwf_fma(dw_vf a, dw_vf b, dw_vf c) { return _mm512_fmadd_ps(a, b, c); }
VX_INLINE dw_vf dwf_zero(void) { return _mm512_setzero_ps(); }
VX_INLINE void dwf_store(dw_mask k, float *p, dw_vf v, int act) {
    if (act != VX_ACT_NONE) v = _mm512_max_ps(v, _mm512_setzero_ps());
    if (act == VX_ACT_RELU6) v = _mm512_min_ps(v, _mm512_set1_ps(6.0f));
    _mm512_mask_storeu_ps(p, k, v);
}
#elif defined(VX_AVX2)
#define DW_VL 8
typedef __m256i dw_mask;
typedef __m256 dw_vf;
typedef __m256i dw_vi;
VX_INLINE dw_mask dw_lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 8 ? n : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
VX_INLINE dw_vf dwf_load(dw_mask k, const float *p) { return _mm256_maskload_ps(p, k); }
VX_INLINE dw_vf dwf_fma(dw_vf a, dw_vf b, dw_vf c) { return _mm256_fmadd_ps(a, b, c); }
VX_INLINE dw_vf dwf_zero(void) { return _mm256_setzero_ps(); }
VX_INLINE void dwf_store(dw_mask k, float *p, dw_vf v, int act) {
    if (act != VX_ACT_NONE) v = _mm256_max_ps(v, _mm256_setzero_ps());
    if (act == VX_ACT_RELU6) v = _mm256_min_ps(v, _mm256_set1_ps(6.0f));
    _mm256_maskstore_ps(p, k, v);
}
VX_INLINE dw_vi dwi_zero(void) { return _mm256_setzero_si256(); }
VX_INLINE dw_vi dwi_mac(dw_mask k, dw_vi a, const int8_t *x, const int16_t *w, dw_vi zp) {
    int64_t xb = 0;
    __m128i wb = _mm_setzero_si128();
    const int n = _mm256_movemask_ps(_mm256_castsi256_ps(k)) == 0xFF ? 8 : __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(k)));
    if (n == 8) { memcpy(&xb, x, 8); wb = _mm_loadu_si128((const __m128i *)w); }
    else { memcpy(&xb, x, (size_t)n); memcpy(&wb, w, (size_t)n * 2); }
    const dw_vi xv = _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(xb)), zp);
    return _mm256_add_epi32(a, _mm256_mullo_epi32(xv, _mm256_cvtepi16_epi32(wb)));
}
VX_INLINE dw_vi dwi_set1(int32_t v) { return _mm256_set1_epi32(v); }
VX_INLINE void dwi_store(int32_t *p, dw_vi v) { _mm256_storeu_si256((__m256i *)p, v); }
#endif

/* Channels c .. c + CV*DW_VL (the last vector masked by k) of output pixels ow..ow+PX-1 of a
 * depthwise row: PX*CV independent FMA chains, each summing its taps in row-major order. */
#if defined(DW_VL)
VX_INLINE void dwf_block(const int PX, const int CV, dw_mask k, int64_t c, const vx_conv_shape *s, const float *xp,
                         const float *w, const float *bias, int act, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                         float *yo) {
    const int64_t C = s->c, px = s->sw * C;
    dw_vf a[4][4];                                                   /* [pixel][channel vector] */
    for (int v = 0; v < CV; v++) {
        const dw_mask kv = v == CV - 1 ? k : dw_lanes(DW_VL);
        for (int p = 0; p < PX; p++) a[p][v] = bias ? dwf_load(kv, bias + c + v * DW_VL) : dwf_zero();
    }
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) {
            const float *wr = w + (i * s->kw + j) * C + c, *xr = xp + (i * s->dh * s->w + j * s->dw) * C + c;
            for (int v = 0; v < CV; v++) {
                const dw_mask kv = v == CV - 1 ? k : dw_lanes(DW_VL);
                const dw_vf wv = dwf_load(kv, wr + v * DW_VL);
                for (int p = 0; p < PX; p++) a[p][v] = dwf_fma(dwf_load(kv, xr + p * px + v * DW_VL), wv, a[p][v]);
            }
        }
    for (int v = 0; v < CV; v++)
        for (int p = 0; p < PX; p++) dwf_store(v == CV - 1 ? k : dw_lanes(DW_VL), yo + p * C + c + v * DW_VL, a[p][v], act);
}

/* Output pixels ow..ow+PX-1 (PX > 1: all see every column tap) of a depthwise row. xp: tap
 * (0, 0) of pixel ow; yo: its output. One pixel runs 4 channel vectors at a time: its chains
 * would otherwise wait on each other's FMA latency (an edge pixel of a 7x7 map: 1.6x XNNPACK). */
VX_INLINE void dwf_pixels(const int PX, const vx_conv_shape *s, const float *xp, const float *w,
                          const float *bias, int act, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          float *yo) {
    const int64_t C = s->c;
    int64_t c = 0;
    if (PX == 1)
        for (; c + 4 * DW_VL <= C; c += 4 * DW_VL)
            dwf_block(1, 4, dw_lanes(DW_VL), c, s, xp, w, bias, act, i0, i1, j0, j1, yo);
    else
        for (; c + 2 * DW_VL <= C; c += 2 * DW_VL)
            dwf_block(PX, 2, dw_lanes(DW_VL), c, s, xp, w, bias, act, i0, i1, j0, j1, yo);
    for (; c < C; c += DW_VL) dwf_block(PX, 1, dw_lanes(C - c), c, s, xp, w, bias, act, i0, i1, j0, j1, yo);
}

#endif

/* avx2: the int8 depthwise pixels of dwf_pixels' shape, requantized by requant_row (avx512 has
 * qdwconv_avx512). */
#if defined(VX_AVX2) && !defined(VX_AVX512)
VX_INLINE void dwi_pixels(const int PX, const vx_conv_shape *s, const int8_t *xp, const int16_t *w,
                          const vx_requant *rq, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int8_t *yo) {
    const int64_t C = s->c, px = s->sw * C;
    const dw_vi zp = dwi_set1(rq->zp_in);
    int32_t acc[4][DW_VL];
    for (int64_t c = 0; c < C; c += DW_VL) {
        const dw_mask k = dw_lanes(C - c);
        dw_vi a[4];
        for (int p = 0; p < PX; p++) a[p] = dwi_zero();
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = j0; j < j1; j++) {
                const int16_t *wr = w + (i * s->kw + j) * C + c;
                const int8_t *xr = xp + (i * s->dh * s->w + j * s->dw) * C + c;
                for (int p = 0; p < PX; p++) a[p] = dwi_mac(k, a[p], xr + p * px, wr, zp);
            }
        const int n = (int)(C - c < DW_VL ? C - c : DW_VL);
        for (int p = 0; p < PX; p++) {
            dwi_store(acc[p], a[p]);
            requant_row(n, acc[p], 0, NULL, rq, c, yo + p * C + c);
        }
    }
}
#endif

/* Depthwise (multiplier 1) output row `item` = b * OH + oh into y (OW, C), that row's own
 * buffer (the output's row, or a scratch row). w: (kh*kw, C). Interior pixels go up to 4 at a time. */
static void dwconv_f32(const vx_conv_shape *s, const float *x, const float *w, const float *bias,
                       int act, int64_t item, float *y) {
    const int64_t C = s->c, b = item / s->oh, oh = item % s->oh;
    for (int64_t ow = 0; ow < s->ow;) {
        int64_t i0, i1, j0, j1, e0, e1, f0, f1;
        valid_taps(s, oh, ow, &i0, &i1, &j0, &j1);
        const float *xp = x + ((b * s->h + oh * s->sh - s->pt) * s->w + ow * s->sw - s->pl) * C; /* tap (0, 0) */
        float *yo = y + ow * C;                                      /* (C,) */
#if defined(DW_VL)
        int run = 1;                                                 /* pixels from ow seeing every column tap */
        while (j0 == 0 && j1 == s->kw && run < 4 && ow + run < s->ow) {
            valid_taps(s, oh, ow + run, &e0, &e1, &f0, &f1);
            if (f1 != s->kw) break;
            run++;
        }
        switch (run) {
        case 4: dwf_pixels(4, s, xp, w, bias, act, i0, i1, j0, j1, yo); break;
        case 3: dwf_pixels(3, s, xp, w, bias, act, i0, i1, j0, j1, yo); break;
        case 2: dwf_pixels(2, s, xp, w, bias, act, i0, i1, j0, j1, yo); break;
        default: dwf_pixels(1, s, xp, w, bias, act, i0, i1, j0, j1, yo); break;
        }
        ow += run;
        continue;
#else
        (void)e0; (void)e1; (void)f0; (void)f1;
        for (int64_t c = 0; c < C; c++) {
            float a = bias ? bias[c] : 0.0f;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++)
                    a += xp[(i * s->dh * s->w + j * s->dw) * C + c] * w[(i * s->kw + j) * C + c];
            yo[c] = act_f32(act, a);
        }
#endif
        ow++;
    }
}

/* ------------------------------------------------------------------------------------
 * int8: requantization, packing, im2col, GEMM, depthwise.
 * ---------------------------------------------------------------------------------- */
/* w (n, K) int8 -> panels [n/16][K4/4][16][4] (K4 = K rounded up to 4; zero padded, n
 * rounded up to 32); wsum[r] = sum_k w[r][k]. A last panel of exactly 8 channels holds them
 * twice (lane l: channel l % 8): qgemm then runs two pixels per vector there. */
static void qgemm_pack(int64_t K, const int8_t *w, int64_t n, int8_t *packed, int32_t *wsum) {
    const int64_t K4 = (K + 3) & ~(int64_t)3, np = (n + VX_QG_NR - 1) / VX_QG_NR * VX_QG_NR;
    const int64_t doubled = n % 16 == QG_PAIR_NR ? n - QG_PAIR_NR : -1;  /* first channel of such a panel */
    memset(packed, 0, (size_t)(np * K4));
    for (int64_t lane = 0; lane < (doubled >= 0 ? n + QG_PAIR_NR : n); lane++) {
        const int64_t r = doubled >= 0 && lane >= n ? lane - QG_PAIR_NR : lane;
        int8_t *pp = packed + (lane / 16) * 16 * K4 + (lane % 16) * 4;
        int32_t s = 0;
        for (int64_t k = 0; k < K; k++) {
            pp[(k / 4) * 64 + (k % 4)] = w[r * K + k];
            s += w[r * K + k];
        }
        wsum[r] = s;
    }
}

/* dst[c] = u8(src[c] + 128) for c < n (avx512: 64 bytes at a time, the last run masked, since
 * im2col's runs are often a few bytes; else one loop the compiler vectorises). */
VX_INLINE void to_u8(int64_t n, const int8_t *src, uint8_t *dst) {
#if defined(VX_AVX512)
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    int64_t c = 0;
    for (; c + 64 <= n; c += 64)
        _mm512_storeu_si512(dst + c, _mm512_xor_si512(_mm512_loadu_si512(src + c), flip));
    if (c < n) {
        const __mmask64 k = ((__mmask64)1 << (n - c)) - 1;
        _mm512_mask_storeu_epi8(dst + c, k, _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, src + c), flip));
    }
#else
    for (int64_t c = 0; c < n; c++) dst[c] = (uint8_t)(src[c] ^ 0x80);
#endif
}

#if defined(VX_AVX512)
/* im2col_u8 for kernel rows of at most 16 bytes (a first conv's RGB), dilation 1 along rows:
 * one masked load and store per kernel row, the geometry in registers. */
static void im2col_u8_masked(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np, uint8_t pad_u8,
                             uint8_t *cols, int64_t ldc) {
    const int64_t C = s->c, H = s->h, W = s->w, OH = s->oh, OW = s->ow, KH = s->kh, KW = s->kw;
    const int64_t SH = s->sh, SW = s->sw, DH = s->dh, PT = s->pt, PL = s->pl;
    const int64_t run_bytes = KW * C, KK = KH * run_bytes, row_bytes = W * C;
    const __mmask16 run = (__mmask16)((1u << run_bytes) - 1u);
    const __mmask16 tail = (__mmask16)((1u << (ldc - KK)) - 1u);   /* the zero bytes after KK (< 16) */
    const __m128i flip = _mm_set1_epi8((char)0x80), pad = _mm_set1_epi8((char)pad_u8);
    int64_t b = p0 / (OH * OW), oh = p0 % (OH * OW) / OW, ow = p0 % OW; /* pixel p0 + q */
    for (int64_t q = 0; q < np; q++) {
        uint8_t *dst = cols + q * ldc;                               /* (kh, kw*C) then 0s */
        const int64_t iw0 = ow * SW - PL;
        const int inside = iw0 >= 0 && iw0 + KW <= W;
        const int8_t *image = x + b * H * row_bytes + iw0 * C;      /* tap (0, 0) column of row 0 */
        for (int64_t i = 0; i < KH; i++, dst += run_bytes) {
            const int64_t ih = oh * SH - PT + i * DH;
            if (ih < 0 || ih >= H) {
                _mm_mask_storeu_epi8(dst, run, pad);
            } else if (inside) {
                _mm_mask_storeu_epi8(dst, run, _mm_xor_si128(_mm_maskz_loadu_epi8(run, image + ih * row_bytes), flip));
            } else {
                for (int64_t j = 0; j < KW; j++) {
                    const int64_t iw = iw0 + j;
                    const __mmask16 kc = (__mmask16)((1u << C) - 1u);
                    if (iw < 0 || iw >= W) _mm_mask_storeu_epi8(dst + j * C, kc, pad);
                    else _mm_mask_storeu_epi8(dst + j * C, kc, _mm_xor_si128(
                        _mm_maskz_loadu_epi8(kc, x + (b * H + ih) * row_bytes + iw * C), flip));
                }
            }
        }
        _mm_mask_storeu_epi8(dst, tail, _mm_setzero_si128());
        if (++ow == OW) {
            ow = 0;
            if (++oh == OH) { oh = 0; b++; }
        }
    }
}

/* im2col_u8_masked's rows, but a run of pixels whose whole window is inside the image (and not
 * the block's last pixel) takes plain 16-byte loads and stores, each spilling into the next
 * kernel row, the zero tail or the next pixel's row, all written after it: the masked loop ran
 * 2x slower (the person detector's first conv: 17 -> 8 us of im2col). */
static void im2col_u8_narrow(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np, uint8_t pad_u8,
                             uint8_t *cols, int64_t ldc) {
    const int64_t C = s->c, H = s->h, W = s->w, OH = s->oh, OW = s->ow, KH = s->kh, KW = s->kw;
    const int64_t SH = s->sh, SW = s->sw, DH = s->dh, PT = s->pt, PL = s->pl, run_bytes = KW * C, row_bytes = W * C;
    const __m128i flip = _mm_set1_epi8((char)0x80);
    const int8_t *x_end = x + s->n * H * row_bytes;                  /* no load reaches past it */
    int64_t owa = (PL + SW - 1) / SW, owb = W >= KW ? (W - KW + PL) / SW + 1 : 0;  /* [owa, owb): inside columns */
    owb = owb < OW ? owb : OW;
    for (int64_t q = 0; q < np;) {
        const int64_t p = p0 + q, b = p / (OH * OW), oh = p / OW % OH, ow = p % OW;
        const int64_t ih0 = oh * SH - PT, ih1 = ih0 + (KH - 1) * DH;
        int64_t m = 0;                                               /* plain pixels from q */
        if (ow >= owa && ih0 >= 0 && ih1 < H) {
            m = owb - ow < np - 1 - q ? owb - ow : np - 1 - q;
            const int8_t *last = x + ((b * H + ih1) * W + (ow + m - 1) * SW - PL) * C;  /* the last load */
            while (m > 0 && last + 16 > x_end) {
                m--;
                last -= SW * C;
            }
        }
        if (m <= 0) {
            im2col_u8_masked(s, x, p, 1, pad_u8, cols + q * ldc, ldc);
            q++;
            continue;
        }
        const int8_t *src = x + ((b * H + ih0) * W + ow * SW - PL) * C;  /* tap (0, 0) of pixel q */
        uint8_t *dst = cols + q * ldc;
        for (int64_t r = 0; r < m; r++, src += SW * C, dst += ldc) {
            for (int64_t i = 0; i < KH; i++)
                _mm_storeu_si128((__m128i *)(dst + i * run_bytes),
                                 _mm_xor_si128(_mm_loadu_si128((const __m128i *)(src + i * DH * row_bytes)), flip));
            _mm_storeu_si128((__m128i *)(dst + KH * run_bytes), _mm_setzero_si128());
        }
        q += m;
    }
}
#endif

/* cols[q * ldc + (i*kw + j)*C + c] = u8(x + 128) at tap (i, j) of output pixel p0 + q, or
 * pad_u8 in the padding; columns KK..ldc-1 are 0. A 1x1 stride-1 unpadded conv's rows are
 * the input's; a kernel row wholly inside the image (no column dilation) is one run of kw*C bytes. */
static void im2col_u8(const vx_conv_shape *s, const int8_t *x, int64_t p0, int64_t np, uint8_t pad_u8,
                      uint8_t *cols, int64_t ldc) {
    const int64_t C = s->c, KK = s->kh * s->kw * C;
    if (s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && s->pt == 0 && s->pl == 0 && s->oh == s->h &&
        s->ow == s->w) {
        if (ldc == C) {
            to_u8(np * C, x + p0 * C, cols);
            return;
        }
        for (int64_t q = 0; q < np; q++) {
            to_u8(C, x + (p0 + q) * C, cols + q * ldc);
            memset(cols + q * ldc + C, 0, (size_t)(ldc - C));
        }
        return;
    }
    int64_t b = p0 / (s->oh * s->ow), oh = p0 % (s->oh * s->ow) / s->ow, ow = p0 % s->ow; /* pixel p0 + q */
#if defined(VX_AVX512)
    if (s->kw * C <= 16 && s->dw == 1 && ldc - KK < 16) {
        im2col_u8_narrow(s, x, p0, np, pad_u8, cols, ldc);
        return;
    }
#endif
    for (int64_t q = 0; q < np; q++, next_pixel(s, &b, &oh, &ow)) {
        const int64_t iw0 = ow * s->sw - s->pl;
        const int row_inside = s->dw == 1 && iw0 >= 0 && iw0 + s->kw <= s->w;
        uint8_t *dst = cols + q * ldc;                               /* (kh, kw, C) then 0s */
        for (int64_t i = 0; i < s->kh; i++) {
            const int64_t ih = oh * s->sh - s->pt + i * s->dh;
            if (row_inside && ih >= 0 && ih < s->h) {
                to_u8(s->kw * C, x + ((b * s->h + ih) * s->w + iw0) * C, dst);
                dst += s->kw * C;
                continue;
            }
            for (int64_t j = 0; j < s->kw; j++, dst += C) {
                const int64_t iw = iw0 + j * s->dw;
                if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) { memset(dst, pad_u8, (size_t)C); continue; }
                to_u8(C, x + ((b * s->h + ih) * s->w + iw) * C, dst);
            }
        }
        for (int64_t c = KK; c < ldc; c++) cols[q * ldc + c] = 0;  /* at most 3 bytes: no memset call */
    }
}

#define QG_MR 8
/* acc (MR, 16 * NP) int32 = init (16 * NP lanes, or NULL: 0) + u8 rows a (lda bytes apart)
 * times the first NP (1 or 2) panels of the pair pp (K4 bytes per channel, 16-channel panels
 * 16 * K4 bytes apart); NP = 1 when the pair's second panel is all padding (16 or fewer
 * channels left). */
VX_INLINE void qg_tile(const int MR, const int NP, int64_t K4, const uint8_t *a, int64_t lda, const int8_t *pp,
                       const int32_t *init, int32_t acc[QG_MR][VX_QG_NR]) {
#if defined(VX_AVX512)
    __m512i c0[QG_MR], c1[QG_MR];
    const __m512i first0 = init ? _mm512_loadu_si512(init) : _mm512_setzero_si512();
    const __m512i first1 = init && NP == 2 ? _mm512_loadu_si512(init + 16) : _mm512_setzero_si512();
    for (int i = 0; i < MR; i++) {
        c0[i] = first0;
        c1[i] = first1;
    }
    const int8_t *p1 = pp + 16 * K4;
    for (int64_t kq = 0; kq < K4 / 4; kq++) {
        const __m512i b0 = _mm512_loadu_si512(pp + 64 * kq);
        const __m512i b1 = NP == 2 ? _mm512_loadu_si512(p1 + 64 * kq) : b0;
        for (int i = 0; i < MR; i++) {
            int32_t a4;
            memcpy(&a4, a + i * lda + 4 * kq, 4);
            const __m512i av = _mm512_set1_epi32(a4);
            c0[i] = _mm512_dpbusd_epi32(c0[i], av, b0);
            if (NP == 2) c1[i] = _mm512_dpbusd_epi32(c1[i], av, b1);
        }
    }
    for (int i = 0; i < MR; i++) {
        _mm512_storeu_si512(acc[i], c0[i]);
        if (NP == 2) _mm512_storeu_si512(acc[i] + 16, c1[i]);
    }
#elif defined(VX_AVX2)
    /* no VNNI: u8 rows widened to int16 and vpmaddwd (exact: |u * w| <= 255 * 128, two
     * products per int32 lane), 2 rows x 16 channels at a time; lane 2c + t of acc q holds
     * channel 4q + c's partial sum t. */
    for (int i0 = 0; i0 < MR; i0 += 2) {
        const int rows = MR - i0 < 2 ? MR - i0 : 2;
        for (int h = 0; h < NP; h++) {
            const int8_t *b = pp + h * 16 * K4;                     /* (K4/4, 16, 4) */
            __m256i c[2][4];
            for (int i = 0; i < 2; i++)
                for (int q = 0; q < 4; q++) c[i][q] = _mm256_setzero_si256();
            for (int64_t kq = 0; kq < K4 / 4; kq++) {
                __m256i wv[4];
                for (int q = 0; q < 4; q++)
                    wv[q] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 64 * kq + 16 * q)));
                for (int i = 0; i < rows; i++) {
                    const uint8_t *ai = a + (i0 + i) * lda + 4 * kq;
                    const __m256i av = _mm256_set1_epi64x((int64_t)((uint64_t)ai[0] | (uint64_t)ai[1] << 16 |
                                                                    (uint64_t)ai[2] << 32 | (uint64_t)ai[3] << 48));
                    for (int q = 0; q < 4; q++) c[i][q] = _mm256_add_epi32(c[i][q], _mm256_madd_epi16(wv[q], av));
                }
            }
            for (int i = 0; i < rows; i++)
                for (int q = 0; q < 4; q++) {
                    int32_t t[8];
                    _mm256_storeu_si256((__m256i *)t, c[i][q]);
                    for (int l = 0; l < 4; l++)
                        acc[i0 + i][16 * h + 4 * q + l] = (init ? init[16 * h + 4 * q + l] : 0) + t[2 * l] + t[2 * l + 1];
                }
        }
    }
#else
    for (int i = 0; i < MR; i++)
        for (int l = 0; l < 16 * NP; l++) acc[i][l] = init ? init[l] : 0;
    for (int64_t kq = 0; kq < K4 / 4; kq++)
        for (int h = 0; h < NP; h++) {
            const int8_t *b = pp + h * 16 * K4 + 64 * kq;           /* (16, 4) */
            for (int i = 0; i < MR; i++) {
                const uint8_t *ai = a + i * lda + 4 * kq;
                int32_t *ci = acc[i] + 16 * h;
                for (int l = 0; l < 16; l++)
                    ci[l] += ai[0] * b[4 * l] + ai[1] * b[4 * l + 1] + ai[2] * b[4 * l + 2] + ai[3] * b[4 * l + 3];
            }
        }
#endif
}

#if defined(VX_AVX512)
/* 8-channel dense conv rows i0 .. i0 + 2 * MR - 1 (rows = how many exist, 1 .. 2 * MR): pixel
 * 2i in lanes 0-7 and 2i + 1 in lanes 8-15 of one vpdpbusd accumulator against the doubled
 * panel pp (qgemm_pack), requantized in registers by t (prepared with period 8). */
VX_INLINE void qg_pairs(const int MR, int rows, int64_t K4, const uint8_t *a, int64_t lda, const int8_t *pp,
                        const rq16 *t, int8_t *y, int64_t ldy) {
    __m512i c[QG_MR];
    for (int i = 0; i < MR; i++) c[i] = t->biased ? t->bias : _mm512_setzero_si512();
    for (int64_t kq = 0; kq < K4 / 4; kq++) {
        const __m512i b = _mm512_loadu_si512(pp + 64 * kq);
        for (int i = 0; i < MR; i++) {
            int32_t lo, hi;
            memcpy(&lo, a + 2 * i * lda + 4 * kq, 4);
            memcpy(&hi, a + (2 * i + 1 < rows ? 2 * i + 1 : 2 * i) * lda + 4 * kq, 4);
            c[i] = _mm512_dpbusd_epi32(c[i], _mm512_mask_set1_epi32(_mm512_set1_epi32(lo), 0xFF00, hi), b);
        }
    }
    for (int i = 0; i < MR; i++) {
        const __m128i q = rq16_int8(t, c[i]);
        _mm_storel_epi64((__m128i *)(y + 2 * i * ldy), q);
        if (2 * i + 1 < rows) _mm_storel_epi64((__m128i *)(y + (2 * i + 1) * ldy), _mm_unpackhi_epi64(q, q));
    }
}
#endif

/* y[i*ldy + r] = requant(sum_k (x - zp_in) w[r][k] + bias[r]) for i < m, r < n, from u8 rows a
 * (im2col_u8) and qgemm_pack's panels. */
static void qgemm(int64_t K4, const int8_t *packed, const int32_t *wsum, int64_t n, const uint8_t *a,
                  int64_t lda, int64_t m, const vx_requant *rq, int8_t *y, int64_t ldy) {
    int32_t acc[QG_MR][VX_QG_NR];
    const int64_t corr = (int64_t)rq->zp_in + 128;
    vx_requant unbiased = *rq;  /* for sums that start from the bias */
    unbiased.bias = NULL;
    for (int64_t p0 = 0; p0 < n; p0 += VX_QG_NR) {
        const int8_t *pp = packed + p0 * K4;
        const int nr = (int)(n - p0 < VX_QG_NR ? n - p0 : VX_QG_NR);
        const int32_t *init = NULL;  /* the accumulators' first values (NULL: 0) */
#if defined(VX_AVX512)
        /* |acc| <= K4 * 255 * 128 (u8 times int8); with wsum the correction is outside that bound */
        const int64_t bound = K4 * 255 * 128;
        /* few channels: 16 / nr pixels per requantization (exactly 8: a doubled panel, qg_pairs) */
        const int tile = nr <= QG_PAIR_NR && 16 % nr == 0;
        rq16 half[2];
        const int fast = !wsum && rq16_prepare(rq, p0, nr < 16 ? nr : 16, tile ? nr : 16, bound, &half[0]) &&
                         (nr <= 16 || rq16_prepare(rq, p0 + 16, nr - 16, 16, bound, &half[1]));
        int32_t first[VX_QG_NR];  /* the accumulators start from the bias (lanes past nr: ignored) */
        if (fast && rq->bias) {
            _mm512_storeu_si512(first, half[0].bias);
            _mm512_storeu_si512(first + 16, nr > 16 ? half[1].bias : _mm512_setzero_si512());
            init = first;
            half[0].biased = half[1].biased = 1;
        }
        if (fast && nr == QG_PAIR_NR) {  /* a doubled panel (qgemm_pack): two pixels per vector */
            int64_t i0 = 0;
            for (; i0 + 2 * QG_MR <= m; i0 += 2 * QG_MR)
                qg_pairs(QG_MR, 2 * QG_MR, K4, a + i0 * lda, lda, pp, &half[0], y + i0 * ldy + p0, ldy);
            if (i0 < m)
                qg_pairs((int)(m - i0 + 1) / 2, (int)(m - i0), K4, a + i0 * lda, lda, pp, &half[0], y + i0 * ldy + p0,
                         ldy);
            continue;
        }
#endif
        for (int64_t i0 = 0; i0 < m; i0 += QG_MR) {
            const int mr = (int)(m - i0 < QG_MR ? m - i0 : QG_MR);
            if (nr > 16) {
                if (mr == QG_MR) qg_tile(QG_MR, 2, K4, a + i0 * lda, lda, pp, init, acc);
                else qg_tile(mr, 2, K4, a + i0 * lda, lda, pp, init, acc);
            } else if (mr == QG_MR) {
                qg_tile(QG_MR, 1, K4, a + i0 * lda, lda, pp, init, acc);
            } else {
                qg_tile(mr, 1, K4, a + i0 * lda, lda, pp, init, acc);
            }
            int i = 0;
#if defined(VX_AVX512)
            if (fast && tile) {
                for (; i + 16 / nr <= mr; i += 16 / nr) requant_tiled(acc + i, nr, &half[0], y + (i0 + i) * ldy + p0, ldy);
            } else if (fast) {
                const __mmask16 k0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1u);
                const __mmask16 k1 = nr >= 32 ? 0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1u) : 0;
                for (; i < mr; i++) {
                    int8_t *yi = y + (i0 + i) * ldy + p0;
                    rq16_store(&half[0], _mm512_loadu_si512(acc[i]), k0, yi);
                    if (k1) rq16_store(&half[1], _mm512_loadu_si512(acc[i] + 16), k1, yi + 16);
                }
            }
#endif
            for (; i < mr; i++)  /* (a tiled panel's last rows: their sums hold the bias) */
                requant_row(nr, acc[i], corr, wsum ? wsum + p0 : NULL, init ? &unbiased : rq, p0, y + (i0 + i) * ldy + p0);
        }
    }
}

#if defined(VX_AVX512)
/* The int8 depthwise products as vpdpwssd: x in int32 lanes (its low word the int8 value) times
 * w with only its low word set, so each lane adds exactly x * w. The input zero point comes off
 * as zp * (sum of the pixel's valid taps' w), the same for every pixel of a row that sees all
 * kernel columns. Weights in that form, and their column sums, are made once per row and
 * channel block. */
enum { QDW_MAX_TAPS = 64 };  /* larger kernels take qdwconv's portable loop */

/* x (int8, lanes k) at xr as int32 lanes. */
VX_INLINE __m512i qdw_x(const int8_t *xr, __mmask16 k) {
    return _mm512_cvtepi8_epi32(k == 0xFFFF ? _mm_loadu_si128((const __m128i *)xr) : _mm_maskz_loadu_epi8(k, xr));
}

/* a[p] = init + the sums over taps (i0..i1) x (j0..j1) of PX pixels px bytes apart (PX > 1: all see
 * those taps); xp: the first's tap (0, 0), lanes k (pairs: two 8-channel pixels per vector).
 * Kernel rows go two at a time into separate chains (exact integers: the same sums), so a
 * pixel's vpdpwssd need not wait on its last one. */
VX_INLINE void qdw_sums(const int PX, const vx_conv_shape *s, const int8_t *xp, int64_t px, const __m512i *wv,
                        __mmask16 k, int64_t i0, int64_t i1, int64_t j0, int64_t j1, __m512i init, __m512i a[4]) {
    __m512i b[4];                                                    /* the odd rows' chains */
    for (int p = 0; p < PX; p++) {
        a[p] = init;
        b[p] = _mm512_setzero_si512();
    }
    const int64_t row = s->dh * s->w * s->c;                         /* bytes from a kernel row to the next */
    int64_t i = i0;
    for (; i + 1 < i1; i += 2)
        for (int64_t j = j0; j < j1; j++) {
            const __m512i w0 = wv[i * s->kw + j], w1 = wv[(i + 1) * s->kw + j];
            const int8_t *xr = xp + i * row + j * s->dw * s->c;
            for (int p = 0; p < PX; p++) {
                a[p] = _mm512_dpwssd_epi32(a[p], qdw_x(xr + p * px, k), w0);
                b[p] = _mm512_dpwssd_epi32(b[p], qdw_x(xr + row + p * px, k), w1);
            }
        }
    for (; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) {
            const int8_t *xr = xp + i * row + j * s->dw * s->c;
            for (int p = 0; p < PX; p++) a[p] = _mm512_dpwssd_epi32(a[p], qdw_x(xr + p * px, k), wv[i * s->kw + j]);
        }
    for (int p = 0; p < PX; p++) a[p] = _mm512_add_epi32(a[p], b[p]);
}

/* The SW * 3 + KW input columns of kernel row xr (C bytes apart) that 4 pixels SW columns
 * apart read, widened. */
VX_INLINE void qdw_columns(const int SW, const int KW, const int8_t *xr, int64_t C, __mmask16 k, __m512i *xv) {
    for (int c = 0; c < SW * 3 + KW; c++) xv[c] = qdw_x(xr + c * C, k);
}

/* qdw_sums of 4 pixels SW columns apart whose taps are neighbouring columns (all see every one
 * of the KW kernel columns): each input column is widened once for the pixels that read it
 * (SW * 3 + KW per kernel row, not 4 KW); even and odd kernel rows in separate chains. */
VX_INLINE void qdw_sums_row(const int SW, const int KW, const vx_conv_shape *s, const int8_t *xp, const __m512i *wv,
                            __mmask16 k, int64_t i0, int64_t i1, __m512i init, __m512i a[4]) {
    const int64_t C = s->c, row = s->dh * s->w * C;
    __m512i b[4], xv[SW * 3 + KW], xu[SW * 3 + KW];                 /* odd rows' chains; two rows' columns */
    for (int p = 0; p < 4; p++) {
        a[p] = init;
        b[p] = _mm512_setzero_si512();
    }
    int64_t i = i0;
    for (; i + 1 < i1; i += 2) {
        qdw_columns(SW, KW, xp + i * row, C, k, xv);
        qdw_columns(SW, KW, xp + (i + 1) * row, C, k, xu);
        for (int j = 0; j < KW; j++)
            for (int p = 0; p < 4; p++) {
                a[p] = _mm512_dpwssd_epi32(a[p], xv[SW * p + j], wv[i * KW + j]);
                b[p] = _mm512_dpwssd_epi32(b[p], xu[SW * p + j], wv[(i + 1) * KW + j]);
            }
    }
    if (i < i1) {
        qdw_columns(SW, KW, xp + i * row, C, k, xv);
        for (int j = 0; j < KW; j++)
            for (int p = 0; p < 4; p++) a[p] = _mm512_dpwssd_epi32(a[p], xv[SW * p + j], wv[i * KW + j]);
    }
    for (int p = 0; p < 4; p++) a[p] = _mm512_add_epi32(a[p], b[p]);
}

/* zp * (the sum of colsum[j0..j1)): the zero point term of a pixel seeing those kernel columns
 * (colsum: per kernel column, the sum of w over the row's valid kernel rows). */
VX_INLINE __m512i qdw_corr(const __m512i *colsum, __m512i zp, int64_t j0, int64_t j1) {
    __m512i sum = _mm512_setzero_si512();
    for (int64_t j = j0; j < j1; j++) sum = _mm512_add_epi32(sum, colsum[j]);
    return _mm512_mullo_epi32(sum, zp);
}

/* Requantize (rq16 when fast, else requant_row) and store n channels of one pixel
 * (pairs: two 8-channel pixels). */
VX_INLINE void qdw_store(__m512i acc, int fast, const rq16 *prep, int pairs, __mmask16 k, int n,
                         const vx_requant *rq, int64_t c0, int8_t *yo) {
    if (fast && k == 0xFFFF) {
        _mm_storeu_si128((__m128i *)yo, rq16_int8(prep, acc));
        return;
    }
    if (fast) {
        rq16_store(prep, acc, k, yo);
        return;
    }
    int32_t buf[16];
    _mm512_storeu_si512(buf, acc);
    if (pairs) {
        requant_row(8, buf, 0, NULL, rq, 0, yo);
        requant_row(8, buf + 8, 0, NULL, rq, 0, yo + 8);
    } else {
        requant_row(n, buf, 0, NULL, rq, c0, yo);
    }
}

/* qdwconv on avx512: 16 channels at a time (8-channel stride-1 rows: two pixels per vector),
 * requantized in registers (rq16) when the block's bound allows it; pixels that see every kernel
 * column go 4 (pairs: 2) at a time. A channel block's weights and requantization are made once
 * for all the rows; the zero point terms again only when a row sees other kernel rows. */
static void qdwconv_avx512(const vx_conv_shape *s, const int8_t *x, const int16_t *w, const vx_requant *rq,
                           int64_t item, int64_t rows, int8_t *y) {
    const int64_t C = s->c;
    const int64_t bound = s->kh * s->kw * 255 * 128;  /* |x - zp_in| <= 255, |w| <= 128 */
    const __m512i zp = _mm512_set1_epi32(rq->zp_in);
    const int pairs = C == 8 && s->sw == 1 && s->dw == 1;
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
        const int n = (int)(pairs ? 16 : C - c0 < 16 ? C - c0 : 16);
        const __mmask16 k = (__mmask16)((1u << n) - 1u);
        rq16 prep;
        const int fast = rq16_prepare(rq, c0, pairs ? 8 : n, pairs ? 8 : 16, bound, &prep);
        prep.biased = fast;  /* the sums start from bias - zp * (their taps' w) */
        const __m512i base = fast ? prep.bias : _mm512_setzero_si512();
        __m512i wv[QDW_MAX_TAPS];                                   /* (kh*kw,) w in low words */
        __m512i w32[QDW_MAX_TAPS];                                  /* (kh*kw,) w */
        for (int64_t t = 0; t < s->kh * s->kw; t++) {
            w32[t] = _mm512_cvtepi16_epi32(pairs ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(w + t * 8)))
                                                 : _mm256_maskz_loadu_epi16(k, w + t * C + c0));
            wv[t] = _mm512_and_si512(_mm512_set1_epi32(0xFFFF), w32[t]);
        }
        __m512i colsum[QDW_MAX_TAPS], init_full = base;             /* (kw,): over the valid kernel rows */
        int64_t i0 = -1, i1 = -1;
        for (int64_t r = item; r < item + rows; r++) {
            const int64_t b = r / s->oh, oh = r % s->oh;
            int64_t e0, e1, j0, j1;
            valid_taps(s, oh, 0, &e0, &e1, &j0, &j1);  /* the rows are the row's; columns vary per pixel */
            if (e0 != i0 || e1 != i1) {
                i0 = e0;
                i1 = e1;
                for (int64_t j = 0; j < s->kw; j++) {
                    colsum[j] = _mm512_setzero_si512();
                    for (int64_t i = i0; i < i1; i++) colsum[j] = _mm512_add_epi32(colsum[j], w32[i * s->kw + j]);
                }
                init_full = _mm512_sub_epi32(base, qdw_corr(colsum, zp, 0, s->kw));
            }
            int8_t *yr = y + (r - item) * s->ow * C;                 /* (ow, C): output row r */
            for (int64_t ow = 0; ow < s->ow;) {
                int64_t f0, f1;
                valid_taps(s, oh, ow, &e0, &e1, &j0, &j1);
                const int8_t *xp = x + ((b * s->h + oh * s->sh - s->pt) * s->w + ow * s->sw - s->pl) * C + c0;
                int8_t *yo = yr + ow * C + c0;                       /* (n,) of pixel ow */
                int vectors = 0;  /* full-column vectors starting at ow */
                if (j0 == 0 && j1 == s->kw && ow + 4 <= s->ow) {  /* 4 pixels: 4 vectors, or 2 of pairs */
                    valid_taps(s, oh, ow + 3, &e0, &e1, &f0, &f1);
                    if (f0 == 0 && f1 == s->kw) vectors = pairs ? 2 : 4;
                }
                if (pairs && !vectors && j0 == 0 && j1 == s->kw && ow + 2 <= s->ow) {
                    valid_taps(s, oh, ow + 1, &e0, &e1, &f0, &f1);
                    if (f0 == 0 && f1 == s->kw) vectors = 1;
                }
                __m512i a[4];
                if (vectors == 2) {  /* two pairs */
                    qdw_sums(2, s, xp, 2 * C, wv, k, i0, i1, 0, s->kw, init_full, a);
                    for (int p = 0; p < 2; p++) qdw_store(a[p], fast, &prep, 1, k, n, rq, c0, yo + 2 * p * C);
                    ow += 4;
                    continue;
                }
                if (vectors == 1) {  /* a pair */
                    qdw_sums(1, s, xp, 0, wv, k, i0, i1, 0, s->kw, init_full, a);
                    qdw_store(a[0], fast, &prep, 1, k, n, rq, c0, yo);
                    ow += 2;
                    continue;
                }
                if (vectors == 4) {
                    if (s->sw == 1 && s->dw == 1 && s->kw == 3) qdw_sums_row(1, 3, s, xp, wv, k, i0, i1, init_full, a);
                    else if (s->sw == 2 && s->dw == 1 && s->kw == 3) qdw_sums_row(2, 3, s, xp, wv, k, i0, i1, init_full, a);
                    else qdw_sums(4, s, xp, s->sw * C, wv, k, i0, i1, 0, s->kw, init_full, a);
                    for (int p = 0; p < 4; p++) qdw_store(a[p], fast, &prep, 0, k, n, rq, c0, yo + p * C);
                    ow += 4;
                    continue;
                }
                const __mmask16 k1 = pairs ? 0xFF : k;  /* one pixel of a pairs row: its 8 channels */
                qdw_sums(1, s, xp, 0, wv, k1, i0, i1, j0, j1, _mm512_sub_epi32(base, qdw_corr(colsum, zp, j0, j1)), a);
                qdw_store(a[0], fast, &prep, 0, k1, pairs ? 8 : n, rq, c0, yo);
                ow++;
            }
        }
    }
}
#endif

/* Depthwise int8 (multiplier 1) output row `item` = b * OH + oh into y (OW, C), that row's own
 * buffer (the output's row, or a scratch row). w: (kh*kw, C) int16.
 * Padding taps contribute (zp_in - zp_in) * w = 0 and are skipped; interior pixels go 4 at a time. */
static void qdwconv_row(const vx_conv_shape *s, const int8_t *x, const int16_t *w, const vx_requant *rq,
                        int64_t item, int8_t *y) {
    const int64_t C = s->c, b = item / s->oh, oh = item % s->oh;
    for (int64_t ow = 0; ow < s->ow;) {
        int64_t i0, i1, j0, j1, e0, e1, f0, f1;
        valid_taps(s, oh, ow, &i0, &i1, &j0, &j1);
        const int8_t *xp = x + ((b * s->h + oh * s->sh - s->pt) * s->w + ow * s->sw - s->pl) * C; /* tap (0, 0) */
        int8_t *yo = y + ow * C;                                     /* (C,) */
#if defined(DW_VL) && !defined(VX_AVX512)
        if (ow + 4 <= s->ow && j0 == 0 && j1 == s->kw) {
            valid_taps(s, oh, ow + 3, &e0, &e1, &f0, &f1);
            if (f0 == 0 && f1 == s->kw) {
                dwi_pixels(4, s, xp, w, rq, i0, i1, 0, s->kw, yo);
                ow += 4;
                continue;
            }
        }
        dwi_pixels(1, s, xp, w, rq, i0, i1, j0, j1, yo);
#else
        enum { CB = 64 };
        int32_t acc[CB];
        (void)e0; (void)e1; (void)f0; (void)f1;
        for (int64_t c0 = 0; c0 < C; c0 += CB) {
            const int cn = (int)(C - c0 < CB ? C - c0 : CB);
            memset(acc, 0, sizeof(acc));
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++) {
                    const int8_t *xr = xp + (i * s->dh * s->w + j * s->dw) * C + c0;
                    const int16_t *wr = w + (i * s->kw + j) * C + c0;
                    for (int c = 0; c < cn; c++) acc[c] += ((int32_t)xr[c] - rq->zp_in) * (int32_t)wr[c];
                }
            requant_row(cn, acc, 0, NULL, rq, c0, yo + c0);
        }
#endif
        ow++;
    }
}

/* Depthwise int8 output rows item .. item + rows - 1 into y (rows, OW, C). */
static void qdwconv(const vx_conv_shape *s, const int8_t *x, const int16_t *w, const vx_requant *rq,
                    int64_t item, int64_t rows, int8_t *y) {
#if defined(VX_AVX512)
    if (s->kh * s->kw <= QDW_MAX_TAPS) {
        qdwconv_avx512(s, x, w, rq, item, rows, y);
        return;
    }
#endif
    for (int64_t r = 0; r < rows; r++) qdwconv_row(s, x, w, rq, item + r, y + r * s->ow * s->c);
}

/* y[i] = clamp(round_half_away(x[i] / scale) + zp) as ops/quantized.py's reference (numpy's
 * float32 division, then its int64 cast on x86), in float32 / int32 lanes (the loop vectorises): for |v| < 2^31 the halves-away
 * rounding is trunc(|v|) + (|v| - trunc(|v|) >= 0.5), both exact in float32 (|v| + 0.5 is not);
 * beyond that q saturates to the int8 range by sign, and NaN or |v| >= 2^63 (INT64_MIN from
 * round_away_i64, plus zp with numpy's wrap) to -128 when zp >= 0, else 127.
 * A power-of-two scale (the person detector's 1.0) multiplies by its reciprocal: the same real
 * quotient, so the same float. avx512 takes whole vectors of |v| < 256 in fixed point first:
 * u = trunc(v * 2^22) (scaling by 2^22 is exact, and truncation keeps every comparison with a
 * half, (k + 1/2) 2^22 being an integer), then q + zp = (u + 2^21 - (u < 0) + zp 2^22) >> 22
 * rounds halves away from zero in int32 (|u| < 2^30) and the pack saturates. 96x96x3 at scale 1:
 * 7.8 -> 2.6 us (the division was the bound). */
static void quantize_i8(int64_t n, const float *x, float scale, int32_t zp, int8_t *y) {
    const int8_t wild = zp >= 0 ? -128 : 127;
    int e;
    const float inv = frexpf(scale, &e) == 0.5f ? ldexpf(1.0f, 1 - e) : 0.0f;  /* 1 / scale when exact */
    const int pow2 = inv != 0.0f && isfinite(inv) && inv * scale == 1.0f;
    int64_t i = 0;
#if defined(VX_AVX512)
    const int fused = pow2 && isfinite(inv * 4194304.0f);
    const __m512 sc = _mm512_set1_ps(scale), iv = _mm512_set1_ps(inv), ivf = _mm512_set1_ps(inv * 4194304.0f);
    const __m512 s22 = _mm512_set1_ps(4194304.0f), half = _mm512_set1_ps(0.5f), zero = _mm512_setzero_ps();
    const __m512 lim31 = _mm512_set1_ps(2147483648.0f), lim63 = _mm512_set1_ps(9223372036854775808.0f);
    const __m512i two30 = _mm512_set1_epi32(1 << 30), two31 = _mm512_set1_epi32(INT32_MIN);
    const __m512i bias = _mm512_set1_epi32((1 << 21) + zp * (1 << 22));
    const __m512i zpv = _mm512_set1_epi32(zp), lo = _mm512_set1_epi32(-128), hi = _mm512_set1_epi32(127);
    for (; i + 16 <= n; i += 16) {
        const __m512 xv = _mm512_loadu_ps(x + i);
        /* u = trunc(v * 2^22) of v = x / scale (x * (2^22 / scale) when that is exact) */
        const __m512i u = _mm512_cvttps_epi32(_mm512_mul_ps(fused ? xv : pow2 ? _mm512_mul_ps(xv, iv) : _mm512_div_ps(xv, sc),
                                                            fused ? ivf : s22));
        if (_mm512_cmplt_epu32_mask(u, two30) == 0xFFFF) {  /* 0 <= u < 2^30 (indefinite: 2^31) */
            _mm_storeu_si128((__m128i *)(y + i), _mm512_cvtsepi32_epi8(_mm512_srai_epi32(_mm512_add_epi32(u, bias), 22)));
            continue;
        }
        if (_mm512_cmplt_epu32_mask(_mm512_add_epi32(u, two30), two31) == 0xFFFF) {  /* |u| <= 2^30 */
            const __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_srai_epi32(u, 31));
            _mm_storeu_si128((__m128i *)(y + i), _mm512_cvtsepi32_epi8(_mm512_srai_epi32(r, 22)));
            continue;
        }
        /* the loop below in 16 lanes (GCC does not if-convert it for this tier) */
        const __m512 v = pow2 ? _mm512_mul_ps(xv, iv) : _mm512_div_ps(xv, sc), av = _mm512_abs_ps(v);
        const __mmask16 small = _mm512_cmp_ps_mask(av, lim31, _CMP_LT_OQ);  /* false for NaN */
        const __m512 a = _mm512_maskz_mov_ps(small, av);
        const __m512i t = _mm512_cvttps_epi32(a);
        const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(a, _mm512_cvtepi32_ps(t)), half, _CMP_GE_OQ);
        __m512i q = _mm512_mask_add_epi32(t, up, t, _mm512_set1_epi32(1));
        q = _mm512_mask_sub_epi32(q, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), _mm512_setzero_si512(), q);
        q = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(q, zpv), lo), hi);
        const __m512i big = _mm512_mask_mov_epi32(_mm512_set1_epi32(wild), _mm512_cmp_ps_mask(av, lim63, _CMP_LT_OQ),
                                                  _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), lo, hi));
        _mm_storeu_si128((__m128i *)(y + i), _mm512_cvtepi32_epi8(_mm512_mask_blend_epi32(small, big, q)));
    }
#endif
    for (; i < n; i++) {
        const float v = pow2 ? x[i] * inv : x[i] / scale, av = fabsf(v);
        const int small = av < 2147483648.0f;  /* false for NaN */
        const float a = small ? av : 0.0f;
        const int32_t t = (int32_t)a;
        const int32_t r = t + (int32_t)(a - (float)t >= 0.5f);
        int32_t q = (v < 0.0f ? -r : r) + zp;
        q = q < -128 ? -128 : q > 127 ? 127 : q;
        const int8_t big = av < 9223372036854775808.0f ? (v > 0.0f ? 127 : -128) : wild;
        y[i] = small ? (int8_t)q : big;
    }
}

const vx_conv_table VX_CAT(vx_conv, VX_TIER) = {
    sgemm_pack, sgemm, conv_f32, dwconv_f32, qgemm_pack, im2col_u8, qgemm, qdwconv, quantize_i8,
};
