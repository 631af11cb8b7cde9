/* volvox CPU kernels, one translation unit compiled once per ISA tier.
 *
 * CMake builds this file several times with -DVX_TIER=<name> and the tier's flags
 * (generic: baseline; avx2: -mavx2 -mfma -mf16c; avx512: + AVX-512 F/BW/VL/DQ/VNNI;
 * neon / dotprod on arm64). Everything is static except vx_table_<tier>().
 *
 * Layout, ggml style: every kernel has a portable `*_ref` version (the fallback and
 * the reference the SIMD versions are tested against), then the SIMD versions
 * under #if for the tier's instruction set.
 *
 * Hot spot: the 32-block GEMV (gemm_b32_* with m == 1): SmolLM2 decode streams
 * ~85 MB of q4_1 / q8_0 weights per token through it.
 *
 * Numerics: activation quantization and the x86 SIMD dot products follow ggml's x86
 * code step for step (see vx_kernels.h), so results equal llama.cpp's bit for bit.
 */
#include <math.h>
#include <string.h>

#include "vx_tier.h"

/* The portable *_ref kernels stay compiled in every tier (reference + fallback). */
#pragma GCC diagnostic ignored "-Wunused-function"

/* ------------------------------------------------------------------------------------
 * fp16 <-> fp32
 * ---------------------------------------------------------------------------------- */
static inline float vx_bits_f32(uint32_t w) { float f; memcpy(&f, &w, 4); return f; }
static inline uint32_t vx_f32_bits(float f) { uint32_t w; memcpy(&w, &f, 4); return w; }

/* Portable IEEE half -> float (Maratyszcza's FP16 method, as in ggml). */
static inline float vx_f16_to_f32_ref(vx_f16 h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const float normalized = vx_bits_f32((two_w >> 4) + (UINT32_C(0xE0) << 23)) * 0x1.0p-112f;
    const float denormalized = vx_bits_f32((two_w >> 17) | (UINT32_C(126) << 23)) - 0.5f;
    const uint32_t r = sign | (two_w < (UINT32_C(1) << 27) ? vx_f32_bits(denormalized)
                                                            : vx_f32_bits(normalized));
    return vx_bits_f32(r);
}

/* Portable float -> IEEE half, round to nearest even, subnormals and overflow to inf
 * included: bit-identical to F16C's _cvtss_sh(x, 0) (ggml_compute_fp32_to_fp16). */
static inline vx_f16 vx_f32_to_f16_ref(float f) {
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = vx_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
    base = vx_bits_f32((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = vx_f32_bits(base);
    const uint32_t nonsign = ((bits >> 13) & UINT32_C(0x00007C00)) + (bits & UINT32_C(0x00000FFF));
    return (vx_f16)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
}

static inline float vx_f16_to_f32(vx_f16 h) {
#if defined(VX_AVX2)
    return _cvtsh_ss(h);
#elif defined(VX_NEON)
    __fp16 f; memcpy(&f, &h, 2); return (float)f;
#else
    return vx_f16_to_f32_ref(h);
#endif
}

/* f rounded to the nearest fp16 (ties to even) and back: how ggml stores act scales. */
static inline float vx_round_f16(float f) {
#if defined(VX_AVX2)
    return _cvtsh_ss(_cvtss_sh(f, 0));
#elif defined(VX_NEON)
    const __fp16 h = (__fp16)f; return (float)h;
#else
    return vx_f16_to_f32_ref(vx_f32_to_f16_ref(f));
#endif
}

static inline int32_t vx_round(float v) { return (int32_t)lrintf(v); } /* half to even */

/* ------------------------------------------------------------------------------------
 * Activation quantization, bit-identical to ggml's x86 build (see vx_kernels.h):
 *   q8_0 / q8_1 (ggml's quantize_row_q8_0 / _q8_1, AVX path), per 32 values:
 *     amax = max |x|,  d = fp16(amax / 127),  q = round_half_even(x * (127 / amax))
 *     q8_1 (q4_1 weights) also s = fp16(d_f32 * sum(q)), with d_f32 the unrounded d;
 *     q4_0 / q8_0 weights get s = d * sum(q) (exact: ggml uses the integers there).
 *   q8_K (quantize_row_q8_K_ref), per 256 values:
 *     max = the first x of largest |x|, iscale = -127 / max,
 *     q = min(127, round_half_even(iscale * x)), d = 1 / iscale (f32, may be < 0).
 * ---------------------------------------------------------------------------------- */
/* How the block sum s is stored: exact (q4_0 / q8_0 weights) or fp16-rounded (q4_1). */
enum { VX_S_EXACT = 0, VX_S_F16 = 1 };

VX_INLINE float act_s(const int smode, float d_f32, float d16, int32_t sum) {
    return smode == VX_S_F16 ? vx_round_f16(d_f32 * (float)sum) : d16 * (float)sum;
}

VX_INLINE void quantize_a32_ref_impl(const int smode, int64_t K, const float *x, void *act) {
    int8_t *qs = (int8_t *)act;                              /* (K,) */
    float *ds = (float *)((char *)act + VX_ALIGN(K));       /* (K/32, 2) */
    for (int64_t b = 0; b < K / VX_QK; b++) {
        const float *xb = x + b * VX_QK;
        float amax = 0.0f;
        for (int j = 0; j < VX_QK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < VX_QK; j++) {
            const int32_t q = vx_round(xb[j] * id);
            qs[b * VX_QK + j] = (int8_t)q;
            sum += q;
        }
        ds[2 * b + 0] = vx_round_f16(d);
        ds[2 * b + 1] = act_s(smode, d, ds[2 * b + 0], sum);
    }
}
static void quantize_a32_ref(int64_t K, const float *x, void *act) {
    quantize_a32_ref_impl(VX_S_EXACT, K, x, act);
}
static void quantize_a32_ref_q4_1(int64_t K, const float *x, void *act) {
    quantize_a32_ref_impl(VX_S_F16, K, x, act);
}

static void quantize_aK_ref(int64_t K, const float *x, void *act) {
    int8_t *qs = (int8_t *)act;                                               /* (K,) */
    float *dd = (float *)((char *)act + VX_ALIGN(K));                         /* (K/256,) */
    int32_t *bsums = (int32_t *)((char *)dd + VX_ALIGN(4 * (K / VX_QK_K)));   /* (K/16,) */
    for (int64_t b = 0; b < K / VX_QK_K; b++) {
        const float *xb = x + b * VX_QK_K;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < VX_QK_K; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        for (int g = 0; g < VX_QK_K / 16; g++) {
            int32_t sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) {
                int32_t q = vx_round(iscale * xb[j]);
                q = q < 127 ? q : 127;
                qs[b * VX_QK_K + j] = (int8_t)q;
                sum += q;
            }
            bsums[b * (VX_QK_K / 16) + g] = sum;
        }
        dd[b] = amax != 0.0f ? 1.0f / iscale : 0.0f;
    }
}

#if defined(VX_AVX2)
VX_INLINE float hmax_ps256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
VX_INLINE float hsum_ps256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
VX_INLINE int32_t hsum_epi32_256(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* ggml's AVX2 quantize_row_q8_0 / q8_1, instruction for instruction. */
VX_INLINE void quantize_a32_avx2_impl(const int smode, int64_t K, const float *x, void *act) {
    int8_t *qs = (int8_t *)act;                              /* (K,) */
    float *ds = (float *)((char *)act + VX_ALIGN(K));       /* (K/32, 2) */
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < K / VX_QK; b++) {
        const float *xb = x + b * VX_QK;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 a = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
        a = _mm256_max_ps(a, _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        const float amax = hmax_ps256(a);
        const float d = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        const int rn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), rn));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), rn));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), rn));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), rn));
        const int32_t sum = hsum_epi32_256(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
        i0 = _mm256_packs_epi32(i0, i1); /* 0-3 8-11 | 4-7 12-15 */
        i2 = _mm256_packs_epi32(i2, i3);
        i0 = _mm256_packs_epi16(i0, i2);
        i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(qs + b * VX_QK), i0);
        ds[2 * b + 0] = vx_round_f16(d);
        ds[2 * b + 1] = act_s(smode, d, ds[2 * b + 0], sum);
    }
}
static void quantize_a32_avx2(int64_t K, const float *x, void *act) {
    quantize_a32_avx2_impl(VX_S_EXACT, K, x, act);
}
static void quantize_a32_avx2_q4_1(int64_t K, const float *x, void *act) {
    quantize_a32_avx2_impl(VX_S_F16, K, x, act);
}
#endif

/* ------------------------------------------------------------------------------------
 * 32-block weights: q4_0, q4_1, q8_0.
 * Every block contributes  wd * dx * dot(wq, xq) + wm * sx  where
 *   q4_0: wq = nibble (0..15), wd = d, wm = -8 d    (q4_0 value = d * (nibble - 8))
 *   q4_1: wq = nibble (0..15), wd = d, wm = m       (q4_1 value = d * nibble + m)
 *   q8_0: wq = int8,           wd = d, wm = 0
 * and dx, sx = dx * sum(xq) come from the act row.
 * ---------------------------------------------------------------------------------- */

/* Decode one block into int8 weights (nibbles stay unsigned 0..15) and its scales. */
VX_INLINE void b32_decode(const int fmt, const uint8_t *row, int64_t b, int8_t wq[VX_QK],
                          float *wd, float *wm) {
    if (fmt == VX_Q8_0) {
        const vx_block_q8_0 *blk = (const vx_block_q8_0 *)row + b;
        memcpy(wq, blk->qs, VX_QK);
        *wd = vx_f16_to_f32(blk->d);
        *wm = 0.0f;
        return;
    }
    const uint8_t *qs;
    if (fmt == VX_Q4_1) {
        const vx_block_q4_1 *blk = (const vx_block_q4_1 *)row + b;
        qs = blk->qs;
        *wd = vx_f16_to_f32(blk->d);
        *wm = vx_f16_to_f32(blk->m);
    } else {
        const vx_block_q4_0 *blk = (const vx_block_q4_0 *)row + b;
        qs = blk->qs;
        *wd = vx_f16_to_f32(blk->d);
        *wm = -8.0f * *wd;
    }
    for (int j = 0; j < VX_QK / 2; j++) {
        wq[j] = (int8_t)(qs[j] & 0x0F);            /* low nibbles: values 0..15  */
        wq[j + VX_QK / 2] = (int8_t)(qs[j] >> 4);  /* high nibbles: values 16..31 */
    }
}

/* int8 . int8 over one 32-value block */
VX_INLINE int32_t dot32_s8(const int8_t *w, const int8_t *x) {
#if defined(VX_NEON) && defined(__ARM_FEATURE_DOTPROD)
    int32x4_t acc = vdupq_n_s32(0);
    acc = vdotq_s32(acc, vld1q_s8(w), vld1q_s8(x));
    acc = vdotq_s32(acc, vld1q_s8(w + 16), vld1q_s8(x + 16));
    return vaddvq_s32(acc);
#elif defined(VX_NEON)
    const int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16);
    const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int16x8_t p = vmull_s8(vget_low_s8(w0), vget_low_s8(x0));
    p = vmlal_s8(p, vget_high_s8(w0), vget_high_s8(x0));
    int16x8_t q = vmull_s8(vget_low_s8(w1), vget_low_s8(x1));
    q = vmlal_s8(q, vget_high_s8(w1), vget_high_s8(x1));
    return vaddvq_s32(vaddq_s32(vpaddlq_s16(p), vpaddlq_s16(q)));
#else
    int32_t s = 0;
    for (int j = 0; j < VX_QK; j++) s += (int32_t)w[j] * (int32_t)x[j];
    return s;
#endif
}

VX_INLINE void gemm_b32_ref_impl(const int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                                 int64_t n, const void *a, int64_t a_stride, int64_t m,
                                 float *y, int64_t ldy) {
    const int64_t nb = K / VX_QK;
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
        const int mr = (int)(m - i0 < 4 ? m - i0 : 4);
        const int8_t *xq[4];  /* (mr, K) */
        const float *ds[4];   /* (mr, K/32, 2) */
        for (int i = 0; i < mr; i++) {
            xq[i] = (const int8_t *)a + (i0 + i) * a_stride;
            ds[i] = (const float *)((const char *)xq[i] + VX_ALIGN(K));
        }
        for (int64_t r = 0; r < n; r++) {
            const uint8_t *row = w + r * w_stride;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t b = 0; b < nb; b++) {
                int8_t wq[VX_QK];
                float wd, wm;
                b32_decode(fmt, row, b, wq, &wd, &wm);
                for (int i = 0; i < mr; i++) {
                    const int32_t s = dot32_s8(wq, xq[i] + b * VX_QK);
                    acc[i] += wd * ds[i][2 * b] * (float)s + wm * ds[i][2 * b + 1];
                }
            }
            for (int i = 0; i < mr; i++) y[(i0 + i) * ldy + r] = acc[i];
        }
    }
}

static void gemm_q4_0_ref(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                          int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_b32_ref_impl(VX_Q4_0, K, w, ws, n, a, as, m, y, ldy);
}
static void gemm_q4_1_ref(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                          int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_b32_ref_impl(VX_Q4_1, K, w, ws, n, a, as, m, y, ldy);
}
static void gemm_q8_0_ref(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                          int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_b32_ref_impl(VX_Q8_0, K, w, ws, n, a, as, m, y, ldy);
}

#if defined(VX_AVX2)
/* u8 (first) x s8 (second) dot products summed in groups of 4 into 8 int32 lanes. */
VX_INLINE __m256i dot_u8s8_256(__m256i u, __m256i s) {
#if defined(VX_AVX512)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* One weight row against MR act rows; out[i] = dot(row, act row i); prefetches the row
 * pf bytes ahead (weights stream from DRAM once per GEMV). Per block: 8 int32
 * lanes of 4 products each, one FMA of (wd * dx) into 8 float lanes, wm * s into a scalar
 * FMA chain; then hsum + the scalar: ggml_vec_dot_q4_1_q8_1 / q8_0_q8_0 (AVX2) exactly. */
VX_INLINE void b32_avx2_tile(const int fmt, const int MR, int64_t K, const uint8_t *row, int64_t pf,
                             const int8_t *const *xq, const float *const *ds, float *out) {
    const int64_t nb = K / VX_QK;
    const int bsz = fmt == VX_Q4_1 ? 20 : fmt == VX_Q4_0 ? 18 : 34; /* block bytes */
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4];
    float accm[4];
    for (int i = 0; i < MR; i++) { acc[i] = _mm256_setzero_ps(); accm[i] = 0.0f; }
    for (int64_t b = 0; b < nb; b++) {
        if (((b * bsz) & 63) < bsz) _mm_prefetch((const char *)(row + pf + b * bsz + 64), _MM_HINT_T0);
        __m256i wq, wv = _mm256_setzero_si256();
        float wd, wm;
        if (fmt == VX_Q8_0) {
            const vx_block_q8_0 *blk = (const vx_block_q8_0 *)row + b;
            wv = _mm256_loadu_si256((const __m256i *)blk->qs);
            wq = _mm256_sign_epi8(wv, wv);
            wd = _cvtsh_ss(blk->d);
            wm = 0.0f;
        } else {
            const uint8_t *qs;
            if (fmt == VX_Q4_1) {
                const vx_block_q4_1 *blk = (const vx_block_q4_1 *)row + b;
                qs = blk->qs; wd = _cvtsh_ss(blk->d); wm = _cvtsh_ss(blk->m);
            } else {
                const vx_block_q4_0 *blk = (const vx_block_q4_0 *)row + b;
                qs = blk->qs; wd = _cvtsh_ss(blk->d); wm = -8.0f * wd;
            }
            const __m128i t = _mm_loadu_si128((const __m128i *)qs);
            wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4);
        }
        for (int i = 0; i < MR; i++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq[i] + b * VX_QK));
            if (fmt == VX_Q8_0) xv = _mm256_sign_epi8(xv, wv);
            const __m256i p = dot_u8s8_256(wq, xv);
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd * ds[i][2 * b]), acc[i]);
            if (fmt != VX_Q8_0) accm[i] += wm * ds[i][2 * b + 1];
        }
    }
    for (int i = 0; i < MR; i++) out[i] = hsum_ps256(acc[i]) + accm[i];
}
#endif

#if defined(VX_AVX512)
/* Weight rows 2 at a time, one per 256-bit half of a zmm, NP zmm (2 * NP rows) per pass
 * over the same blocks: each row's 8 lanes see exactly the products and the FMA
 * sequence of the AVX2 tile (and of ggml's ggml_vec_dot_q4_1_q8_1 / q8_0_q8_0), so the
 * tiers give identical bits; the zmm only doubles the work per instruction.
 * rows: 2 * NP row pointers; out[(2 * NP) * i + j]: act row i, weight row j.
 * pf: bytes from each row to the row it prefetches (the next tiles' rows): decode streams
 * the weights from DRAM once, and the prefetch keeps that stream ahead of the FMAs. */
VX_INLINE void b32_avx512_tile(const int fmt, const int NP, const int MR, int64_t K,
                               const uint8_t *const *rows, int64_t pf, const int8_t *const *xq,
                               const float *const *ds, float *out) {
    const int64_t nb = K / VX_QK;
    const int bsz = fmt == VX_Q4_1 ? 20 : fmt == VX_Q4_0 ? 18 : 34; /* block bytes */
    const int qoff = fmt == VX_Q4_1 ? 4 : 2;                          /* qs offset */
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i nib = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);  /* [q0 q0 q1 q1] */
    /* lanes of [d0 m0 d1 m1 d2 m2 d3 m3]: d of rows (0, 1) and of rows (2, 3) */
    const __m512i pick[2] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                             _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6)};
    __m512 acc[4][2]; /* (MR, NP) x [row 2p: 8 lanes | row 2p+1: 8 lanes] */
    __m256 accm[4];   /* (MR,) x lanes 2j + 1: sum of wm * s of row j */
    for (int i = 0; i < MR; i++) {
        accm[i] = _mm256_setzero_ps();
        for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const int64_t off = b * bsz;
        if ((off & 63) < bsz)
            for (int j = 0; j < 2 * NP; j++) _mm_prefetch((const char *)(rows[j] + pf + off + 64), _MM_HINT_T0);
        /* fp16 (d, m) of each row: q4_1 blocks start with both; q4_0 / q8_0 with d only */
        __m128i hdm = _mm_setzero_si128();
        for (int j = 0; j < 2 * NP; j++) {
            int32_t v;
            memcpy(&v, rows[j] + off, 4);
            hdm = _mm_insert_epi32(hdm, v, j);
        }
        __m256 dm = _mm256_cvtph_ps(hdm);
        if (fmt == VX_Q4_0)
            dm = _mm256_mul_ps(_mm256_moveldup_ps(dm), _mm256_setr_ps(1, -8, 1, -8, 1, -8, 1, -8));
        __m512i wq[2];
        __mmask64 neg[2] = {0, 0};
        __m512 dw[2];
        for (int p = 0; p < NP; p++) {
            const uint8_t *q0 = rows[2 * p] + off + qoff, *q1 = rows[2 * p + 1] + off + qoff;
            if (fmt == VX_Q8_0) {
                const __m512i wv = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q0)),
                    _mm256_loadu_si256((const __m256i *)q1), 1);
                neg[p] = _mm512_movepi8_mask(wv);
                wq[p] = _mm512_abs_epi8(wv);
            } else {
                const __m256i t = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q0)),
                    _mm_loadu_si128((const __m128i *)q1), 1);
                __m512i z = _mm512_permutexvar_epi64(nib, _mm512_castsi256_si512(t));
                z = _mm512_mask_srli_epi16(z, (__mmask32)0xFF00FF00u, z, 4); /* high nibbles */
                wq[p] = _mm512_and_si512(z, m4);
            }
            dw[p] = _mm512_permutexvar_ps(pick[p], _mm512_castps256_ps512(dm));
        }
        for (int i = 0; i < MR; i++) {
            const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xq[i] + b * VX_QK)));
            const __m512 dx = _mm512_set1_ps(ds[i][2 * b]);
            for (int p = 0; p < NP; p++) {
                const __m512i xs = fmt == VX_Q8_0 ? _mm512_mask_sub_epi8(xv, neg[p], _mm512_setzero_si512(), xv) : xv;
                const __m512i prod = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[p], xs);
                acc[i][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw[p], dx), _mm512_cvtepi32_ps(prod), acc[i][p]);
            }
            if (fmt != VX_Q8_0) accm[i] = _mm256_fmadd_ps(dm, _mm256_set1_ps(ds[i][2 * b + 1]), accm[i]);
        }
    }
    for (int i = 0; i < MR; i++) {
        float mterm[8];
        _mm256_storeu_ps(mterm, accm[i]);
        for (int p = 0; p < NP; p++) {
            float *o = out + 2 * NP * i + 2 * p;
            o[0] = hsum_ps256(_mm512_castps512_ps256(acc[i][p])) + (fmt != VX_Q8_0 ? mterm[4 * p + 1] : 0.0f);
            o[1] = hsum_ps256(_mm512_extractf32x8_ps(acc[i][p], 1)) + (fmt != VX_Q8_0 ? mterm[4 * p + 3] : 0.0f);
        }
    }
}
#endif

#if defined(VX_AVX2)
VX_INLINE void gemm_b32_simd_impl(const int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                                  int64_t n, const void *a, int64_t a_stride, int64_t m,
                                  float *y, int64_t ldy) {
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
        const int mr = (int)(m - i0 < 4 ? m - i0 : 4);
        const int8_t *xq[4] = {0, 0, 0, 0};  /* (mr, K) */
        const float *ds[4] = {0, 0, 0, 0};   /* (mr, K/32, 2) */
        for (int i = 0; i < mr; i++) {
            xq[i] = (const int8_t *)a + (i0 + i) * a_stride;
            ds[i] = (const float *)((const char *)xq[i] + VX_ALIGN(K));
        }
        int64_t r = 0;
#if defined(VX_AVX512)
        for (; r + 2 <= n; r += 4) {
            const int np = r + 4 <= n ? 2 : 1;
            const uint8_t *rows[4];  /* 2 * np weight rows */
            for (int j = 0; j < 2 * np; j++) rows[j] = w + (r + j) * w_stride;
            float out[16];           /* (mr, 2 * np) */
            const int64_t pf = 8 * w_stride; /* two tiles ahead */
#define VX_B32_CASE(NP)                                                              \
            switch (mr) {                                                            \
                case 4: b32_avx512_tile(fmt, NP, 4, K, rows, pf, xq, ds, out); break;    \
                case 3: b32_avx512_tile(fmt, NP, 3, K, rows, pf, xq, ds, out); break;    \
                case 2: b32_avx512_tile(fmt, NP, 2, K, rows, pf, xq, ds, out); break;    \
                default: b32_avx512_tile(fmt, NP, 1, K, rows, pf, xq, ds, out); break;   \
            }
            if (np == 2) { VX_B32_CASE(2) } else { VX_B32_CASE(1) }
#undef VX_B32_CASE
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < 2 * np; j++) y[(i0 + i) * ldy + r + j] = out[2 * np * i + j];
            if (np == 1) { r += 2; break; }
        }
#endif
        for (; r < n; r++) {
            const uint8_t *row = w + r * w_stride;
            float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            switch (mr) {
                case 4: b32_avx2_tile(fmt, 4, K, row, 4 * w_stride, xq, ds, out); break;
                case 3: b32_avx2_tile(fmt, 3, K, row, 4 * w_stride, xq, ds, out); break;
                case 2: b32_avx2_tile(fmt, 2, K, row, 4 * w_stride, xq, ds, out); break;
                default: b32_avx2_tile(fmt, 1, K, row, 4 * w_stride, xq, ds, out); break;
            }
            for (int i = 0; i < mr; i++) y[(i0 + i) * ldy + r] = out[i];
        }
    }
}
static void gemm_q4_0_simd(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                           int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_b32_simd_impl(VX_Q4_0, K, w, ws, n, a, as, m, y, ldy);
}
static void gemm_q4_1_simd(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                           int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_b32_simd_impl(VX_Q4_1, K, w, ws, n, a, as, m, y, ldy);
}
static void gemm_q8_0_simd(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                           int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_b32_simd_impl(VX_Q8_0, K, w, ws, n, a, as, m, y, ldy);
}
#endif

/* ------------------------------------------------------------------------------------
 * k-quants: q4_K and q6_K against a q8_K-style act row.
 * ---------------------------------------------------------------------------------- */

/* ggml's get_scale_min_k4: 8 (scale, min) pairs of 6 bits packed in 12 bytes. */
VX_INLINE void q4k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

typedef struct {
    const int8_t *qs;     /* (K,) */
    const float *d;       /* (K/256,) */
    const int32_t *bsums; /* (K/16,) */
} vx_actK;

VX_INLINE vx_actK actK_row(const void *a, int64_t a_stride, int64_t i, int64_t K) {
    vx_actK r;
    r.qs = (const int8_t *)a + i * a_stride;
    r.d = (const float *)((const char *)r.qs + VX_ALIGN(K));
    r.bsums = (const int32_t *)((const char *)r.d + VX_ALIGN(4 * (K / VX_QK_K)));
    return r;
}

/* Integer part of one q4_K super-block against 256 act values (before d, dmin). */
VX_INLINE int32_t q4k_block_dot_ref(const vx_block_q4_K *blk, const uint8_t *sc, const int8_t *q8) {
    int32_t sumi = 0;
    for (int j = 0; j < 4; j++) {
        int32_t s_lo = 0, s_hi = 0;
        for (int l = 0; l < 32; l++) {
            s_lo += (blk->qs[32 * j + l] & 0x0F) * q8[64 * j + l];
            s_hi += (blk->qs[32 * j + l] >> 4) * q8[64 * j + 32 + l];
        }
        sumi += sc[2 * j] * s_lo + sc[2 * j + 1] * s_hi;
    }
    return sumi;
}

/* sum_k scale_k * dot(q6 unsigned (0..63), q8) over the 16 groups of 16 (before -32, d). */
VX_INLINE int32_t q6k_block_dot_ref(const vx_block_q6_K *blk, const int8_t *q8) {
    int32_t sumi = 0;
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = blk->ql + 64 * h, *qh = blk->qh + 32 * h;
        const int8_t *sc = blk->scales + 8 * h, *x = q8 + 128 * h;
        int32_t isum[8] = {0};
        for (int l = 0; l < 32; l++) {
            const int g = l / 16;
            const int q1 = (ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4);
            const int q2 = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
            const int q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            const int q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
            isum[g + 0] += q1 * x[l];
            isum[g + 2] += q2 * x[l + 32];
            isum[g + 4] += q3 * x[l + 64];
            isum[g + 6] += q4 * x[l + 96];
        }
        for (int k = 0; k < 8; k++) sumi += sc[k] * isum[k];
    }
    return sumi;
}

#if defined(VX_AVX2)
/* dot of 32 u8 x s8 with the first 16 products scaled by s_lo, the last 16 by s_hi. */
VX_INLINE __m256i dot_u8s8_scaled(__m256i u, __m256i s, int s_lo, int s_hi) {
#if defined(VX_AVX512)
    return _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s),
                              _mm256_set_m128i(_mm_set1_epi32(s_hi), _mm_set1_epi32(s_lo)));
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                             _mm256_set_m128i(_mm_set1_epi16((short)s_hi), _mm_set1_epi16((short)s_lo)));
#endif
}

VX_INLINE int32_t q4k_block_dot_simd(const vx_block_q4_K *blk, const uint8_t *sc, const int8_t *q8) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i acc = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * j));
        const __m256i lo = _mm256_and_si256(q, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j)),
                                                    sc[2 * j], sc[2 * j]));
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j + 32)),
                                                    sc[2 * j + 1], sc[2 * j + 1]));
    }
    return hsum_epi32_256(acc);
}

VX_INLINE int32_t q6k_block_dot_simd(const vx_block_q6_K *blk, const int8_t *q8) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const int8_t *sc = blk->scales + 8 * h;
        const int8_t *x = q8 + 128 * h;
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk->qh + 32 * h));
        const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * h + 32));
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
        const __m256i q2 = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
        const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
        const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(q1, _mm256_loadu_si256((const __m256i *)(x + 0)), sc[0], sc[1]));
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(q2, _mm256_loadu_si256((const __m256i *)(x + 32)), sc[2], sc[3]));
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(q3, _mm256_loadu_si256((const __m256i *)(x + 64)), sc[4], sc[5]));
        acc = _mm256_add_epi32(acc, dot_u8s8_scaled(q4, _mm256_loadu_si256((const __m256i *)(x + 96)), sc[6], sc[7]));
    }
    return hsum_epi32_256(acc);
}
#define VX_Q4K_DOT q4k_block_dot_simd
#define VX_Q6K_DOT q6k_block_dot_simd
#else
#define VX_Q4K_DOT q4k_block_dot_ref
#define VX_Q6K_DOT q6k_block_dot_ref
#endif

/* k-quant GEMM; `dotfn` picks the portable or SIMD integer block dot. */
#define VX_DEFINE_GEMM_Q4K(NAME, DOTFN)                                                       \
    static void NAME(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n, const void *a, \
                     int64_t a_stride, int64_t m, float *y, int64_t ldy) {                    \
        const int64_t nb = K / VX_QK_K;                                                       \
        for (int64_t i0 = 0; i0 < m; i0 += 4) {                                               \
            const int mr = (int)(m - i0 < 4 ? m - i0 : 4);                                    \
            vx_actK x[4];                                                                     \
            for (int i = 0; i < mr; i++) x[i] = actK_row(a, a_stride, i0 + i, K);             \
            for (int64_t r = 0; r < n; r++) {                                                 \
                const vx_block_q4_K *row = (const vx_block_q4_K *)(w + r * w_stride);         \
                float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                      \
                for (int64_t b = 0; b < nb; b++) {                                            \
                    uint8_t sc[8], mn[8];                                                     \
                    q4k_scales(row[b].scales, sc, mn);                                        \
                    const float d = vx_f16_to_f32(row[b].d);                                  \
                    const float dmin = vx_f16_to_f32(row[b].dmin);                            \
                    for (int i = 0; i < mr; i++) {                                            \
                        const int32_t *bs = x[i].bsums + 16 * b;                              \
                        int32_t summ = 0;                                                     \
                        for (int j = 0; j < 8; j++) summ += mn[j] * (bs[2 * j] + bs[2 * j + 1]); \
                        const int32_t sumi = DOTFN(&row[b], sc, x[i].qs + VX_QK_K * b);       \
                        acc[i] += x[i].d[b] * (d * (float)sumi - dmin * (float)summ);         \
                    }                                                                         \
                }                                                                             \
                for (int i = 0; i < mr; i++) y[(i0 + i) * ldy + r] = acc[i];                  \
            }                                                                                 \
        }                                                                                     \
    }

#define VX_DEFINE_GEMM_Q6K(NAME, DOTFN)                                                       \
    static void NAME(int64_t K, const uint8_t *w, int64_t w_stride, int64_t n, const void *a, \
                     int64_t a_stride, int64_t m, float *y, int64_t ldy) {                    \
        const int64_t nb = K / VX_QK_K;                                                       \
        for (int64_t i0 = 0; i0 < m; i0 += 4) {                                               \
            const int mr = (int)(m - i0 < 4 ? m - i0 : 4);                                    \
            vx_actK x[4];                                                                     \
            for (int i = 0; i < mr; i++) x[i] = actK_row(a, a_stride, i0 + i, K);             \
            for (int64_t r = 0; r < n; r++) {                                                 \
                const vx_block_q6_K *row = (const vx_block_q6_K *)(w + r * w_stride);         \
                float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                      \
                for (int64_t b = 0; b < nb; b++) {                                            \
                    const float d = vx_f16_to_f32(row[b].d);                                  \
                    for (int i = 0; i < mr; i++) {                                            \
                        const int32_t *bs = x[i].bsums + 16 * b;                              \
                        int32_t off = 0;                                                      \
                        for (int k = 0; k < 16; k++) off += row[b].scales[k] * bs[k];         \
                        const int32_t sumi = DOTFN(&row[b], x[i].qs + VX_QK_K * b) - 32 * off; \
                        acc[i] += x[i].d[b] * d * (float)sumi;                                \
                    }                                                                         \
                }                                                                             \
                for (int i = 0; i < mr; i++) y[(i0 + i) * ldy + r] = acc[i];                  \
            }                                                                                 \
        }                                                                                     \
    }


VX_DEFINE_GEMM_Q4K(gemm_q4_K_ref, q4k_block_dot_ref)
VX_DEFINE_GEMM_Q6K(gemm_q6_K_ref, q6k_block_dot_ref)
#if defined(VX_AVX2)
VX_DEFINE_GEMM_Q4K(gemm_q4_K_simd, VX_Q4K_DOT)
VX_DEFINE_GEMM_Q6K(gemm_q6_K_simd, VX_Q6K_DOT)
#endif

/* ------------------------------------------------------------------------------------
 * f32 / f16 weights: y = x . w over K floats (a = float rows, a_stride in bytes).
 * ---------------------------------------------------------------------------------- */
VX_INLINE float wload(const int fmt, const uint8_t *row, int64_t k) {
    if (fmt == VX_F32) { float v; memcpy(&v, row + 4 * k, 4); return v; }
    vx_f16 h; memcpy(&h, row + 2 * k, 2); return vx_f16_to_f32(h);
}

VX_INLINE void gemm_float_ref_impl(const int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                                   int64_t n, const void *a, int64_t a_stride, int64_t m,
                                   float *y, int64_t ldy) {
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
        const int mr = (int)(m - i0 < 4 ? m - i0 : 4);
        for (int64_t r = 0; r < n; r++) {
            const uint8_t *row = w + r * w_stride;
            float acc[4][4] = {{0.0f}};
            int64_t k = 0;
            for (; k + 4 <= K; k += 4) {
                const float w0 = wload(fmt, row, k), w1 = wload(fmt, row, k + 1);
                const float w2 = wload(fmt, row, k + 2), w3 = wload(fmt, row, k + 3);
                for (int i = 0; i < mr; i++) {
                    const float *x = (const float *)((const char *)a + (i0 + i) * a_stride) + k;
                    acc[i][0] += w0 * x[0]; acc[i][1] += w1 * x[1];
                    acc[i][2] += w2 * x[2]; acc[i][3] += w3 * x[3];
                }
            }
            for (; k < K; k++) {
                const float wk = wload(fmt, row, k);
                for (int i = 0; i < mr; i++)
                    acc[i][0] += wk * ((const float *)((const char *)a + (i0 + i) * a_stride))[k];
            }
            for (int i = 0; i < mr; i++)
                y[(i0 + i) * ldy + r] = (acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3]);
        }
    }
}
static void gemm_f32_ref(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                         int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_float_ref_impl(VX_F32, K, w, ws, n, a, as, m, y, ldy);
}
static void gemm_f16_ref(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                         int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_float_ref_impl(VX_F16, K, w, ws, n, a, as, m, y, ldy);
}

#if defined(VX_AVX512)
VX_INLINE __m512 wload16(const int fmt, const uint8_t *row, int64_t k, __mmask16 mask) {
    if (fmt == VX_F32) return _mm512_maskz_loadu_ps(mask, row + 4 * k);
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + 2 * k));
}
VX_INLINE void float_avx512_tile(const int fmt, const int MR, int64_t K, const uint8_t *row,
                                 const float *const *x, float *out) {
    __m512 acc[4];
    for (int i = 0; i < MR; i++) acc[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        const __m512 wv = wload16(fmt, row, k, 0xFFFF);
        for (int i = 0; i < MR; i++) acc[i] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[i] + k), acc[i]);
    }
    if (k < K) {
        const __mmask16 mask = (__mmask16)((1u << (K - k)) - 1u);
        const __m512 wv = wload16(fmt, row, k, mask);
        for (int i = 0; i < MR; i++)
            acc[i] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, x[i] + k), acc[i]);
    }
    for (int i = 0; i < MR; i++) out[i] = _mm512_reduce_add_ps(acc[i]);
}
/* One activation row against 4 weight rows: 4 independent FMA chains and 4 memory streams
 * (a GEMV is bound by them); each row's sum is formed exactly as float_avx512_tile forms it. */
VX_INLINE void float_avx512_rows4(const int fmt, int64_t K, const uint8_t *w, int64_t ws, const float *x,
                                  float *out) {
    __m512 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        const __m512 xv = _mm512_loadu_ps(x + k);
        /* f16 rows are short streams (half f32's bytes): ask for the next 4 rows' line at this k
         * (a 50257x768 GEMV from DRAM: 14.8 -> 27 GB/s at 1 thread; f32 decode is faster without) */
        if (fmt == VX_F16 && k % 32 == 0)
            for (int r = 0; r < 4; r++) _mm_prefetch((const char *)(w + (r + 4) * ws + 2 * k), _MM_HINT_T0);
        for (int r = 0; r < 4; r++) acc[r] = _mm512_fmadd_ps(wload16(fmt, w + r * ws, k, 0xFFFF), xv, acc[r]);
    }
    if (k < K) {
        const __mmask16 mask = (__mmask16)((1u << (K - k)) - 1u);
        const __m512 xv = _mm512_maskz_loadu_ps(mask, x + k);
        for (int r = 0; r < 4; r++) acc[r] = _mm512_fmadd_ps(wload16(fmt, w + r * ws, k, mask), xv, acc[r]);
    }
    for (int r = 0; r < 4; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}
#define VX_FLOAT_TILE float_avx512_tile
#define VX_FLOAT_ROWS4 float_avx512_rows4
#elif defined(VX_AVX2)
VX_INLINE void float_avx2_tile(const int fmt, const int MR, int64_t K, const uint8_t *row,
                               const float *const *x, float *out) {
    __m256 acc[4];
    for (int i = 0; i < MR; i++) acc[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        const __m256 wv = fmt == VX_F32 ? _mm256_loadu_ps((const float *)(row + 4 * k))
                                        : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k)));
        for (int i = 0; i < MR; i++) acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[i] + k), acc[i]);
    }
    for (int i = 0; i < MR; i++) {
        float s = hsum_ps256(acc[i]);
        for (int64_t kk = k; kk < K; kk++) s += wload(fmt, row, kk) * x[i][kk];
        out[i] = s;
    }
}
/* One activation row against 4 weight rows (see float_avx512_rows4); sums as float_avx2_tile's. */
VX_INLINE void float_avx2_rows4(const int fmt, int64_t K, const uint8_t *w, int64_t ws, const float *x,
                                float *out) {
    __m256 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + k);
        for (int r = 0; r < 4; r++) {
            const uint8_t *row = w + r * ws;
            const __m256 wv = fmt == VX_F32 ? _mm256_loadu_ps((const float *)(row + 4 * k))
                                            : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k)));
            acc[r] = _mm256_fmadd_ps(wv, xv, acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) {
        float s = hsum_ps256(acc[r]);
        for (int64_t kk = k; kk < K; kk++) s += wload(fmt, w + r * ws, kk) * x[kk];
        out[r] = s;
    }
}
#define VX_FLOAT_TILE float_avx2_tile
#define VX_FLOAT_ROWS4 float_avx2_rows4
#endif

#if defined(VX_FLOAT_TILE)
VX_INLINE void gemm_float_simd_impl(const int fmt, int64_t K, const uint8_t *w, int64_t w_stride,
                                    int64_t n, const void *a, int64_t a_stride, int64_t m,
                                    float *y, int64_t ldy) {
    int64_t r0 = 0;
    if (m == 1) /* a GEMV: weight rows 4 at a time */
        for (; r0 + 4 <= n; r0 += 4) VX_FLOAT_ROWS4(fmt, K, w + r0 * w_stride, w_stride, (const float *)a, y + r0);
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
        const int mr = (int)(m - i0 < 4 ? m - i0 : 4);
        const float *x[4];
        for (int i = 0; i < mr; i++) x[i] = (const float *)((const char *)a + (i0 + i) * a_stride);
        for (int64_t r = r0; r < n; r++) {
            const uint8_t *row = w + r * w_stride;
            float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            switch (mr) {
                case 4: VX_FLOAT_TILE(fmt, 4, K, row, x, out); break;
                case 3: VX_FLOAT_TILE(fmt, 3, K, row, x, out); break;
                case 2: VX_FLOAT_TILE(fmt, 2, K, row, x, out); break;
                default: VX_FLOAT_TILE(fmt, 1, K, row, x, out); break;
            }
            for (int i = 0; i < mr; i++) y[(i0 + i) * ldy + r] = out[i];
        }
    }
}
static void gemm_f32_simd(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                          int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_float_simd_impl(VX_F32, K, w, ws, n, a, as, m, y, ldy);
}
static void gemm_f16_simd(int64_t K, const uint8_t *w, int64_t ws, int64_t n, const void *a,
                          int64_t as, int64_t m, float *y, int64_t ldy) {
    gemm_float_simd_impl(VX_F16, K, w, ws, n, a, as, m, y, ldy);
}
#endif

/* ------------------------------------------------------------------------------------
 * Row dequantization (embedding lookups) and rms_norm: portable C in every tier.
 * ---------------------------------------------------------------------------------- */
static void dequant_b32(const int fmt, int64_t K, const uint8_t *w, float *y) {
    for (int64_t b = 0; b < K / VX_QK; b++) {
        int8_t wq[VX_QK];
        float wd, wm;
        b32_decode(fmt, w, b, wq, &wd, &wm);
        for (int j = 0; j < VX_QK; j++) y[b * VX_QK + j] = wd * (float)wq[j] + wm;
    }
}
static void dequant_q4_0(int64_t K, const uint8_t *w, float *y) { dequant_b32(VX_Q4_0, K, w, y); }
static void dequant_q4_1(int64_t K, const uint8_t *w, float *y) { dequant_b32(VX_Q4_1, K, w, y); }
static void dequant_q8_0(int64_t K, const uint8_t *w, float *y) { dequant_b32(VX_Q8_0, K, w, y); }

static void dequant_q4_K(int64_t K, const uint8_t *w, float *y) {
    const vx_block_q4_K *blk = (const vx_block_q4_K *)w;
    for (int64_t b = 0; b < K / VX_QK_K; b++, y += VX_QK_K) {
        uint8_t sc[8], mn[8];
        q4k_scales(blk[b].scales, sc, mn);
        const float d = vx_f16_to_f32(blk[b].d), dmin = vx_f16_to_f32(blk[b].dmin);
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 32; l++) {
                y[64 * j + l] = d * sc[2 * j] * (blk[b].qs[32 * j + l] & 0x0F) - dmin * mn[2 * j];
                y[64 * j + 32 + l] = d * sc[2 * j + 1] * (blk[b].qs[32 * j + l] >> 4) - dmin * mn[2 * j + 1];
            }
        }
    }
}

static void dequant_q6_K(int64_t K, const uint8_t *w, float *y) {
    const vx_block_q6_K *blk = (const vx_block_q6_K *)w;
    for (int64_t b = 0; b < K / VX_QK_K; b++, y += VX_QK_K) {
        const float d = vx_f16_to_f32(blk[b].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = blk[b].ql + 64 * h, *qh = blk[b].qh + 32 * h;
            const int8_t *sc = blk[b].scales + 8 * h;
            float *yy = y + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int g = l / 16;
                yy[l] = d * sc[g + 0] * (float)(((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32);
                yy[l + 32] = d * sc[g + 2] * (float)(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
                yy[l + 64] = d * sc[g + 4] * (float)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                yy[l + 96] = d * sc[g + 6] * (float)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
    }
}

static void dequant_f32(int64_t K, const uint8_t *w, float *y) { memcpy(y, w, (size_t)K * 4); }
static void dequant_f16(int64_t K, const uint8_t *w, float *y) {
    int64_t k = 0;
#if defined(VX_AVX512)
    for (; k + 16 <= K; k += 16) _mm512_storeu_ps(y + k, wload16(VX_F16, w, k, 0xFFFF));
#elif defined(VX_AVX2)
    for (; k + 8 <= K; k += 8) _mm256_storeu_ps(y + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 2 * k))));
#endif
    for (; k < K; k++) y[k] = wload(VX_F16, w, k);
}

/* y = x / sqrt(mean(x^2) + eps) * weight, as ggml's rms_norm + mul: squares in float,
 * summed in order in double, mean rounded to float. */
static void rms_norm_ref(int64_t D, const float *x, const float *weight, float eps, float *y) {
    double ss = 0.0;
    for (int64_t k = 0; k < D; k++) ss += (double)(x[k] * x[k]);
    const float scale = 1.0f / sqrtf((float)(ss / (double)D) + eps);
    for (int64_t k = 0; k < D; k++) y[k] = x[k] * scale * weight[k];
}

/* ------------------------------------------------------------------------------------
 * The tier's table.
 * ---------------------------------------------------------------------------------- */
#if defined(VX_AVX2)
#define VX_QUANT_Q4_0 quantize_a32_avx2
#define VX_QUANT_Q4_1 quantize_a32_avx2_q4_1
#define VX_QUANT_Q8_0 quantize_a32_avx2
#else
#define VX_QUANT_Q4_0 quantize_a32_ref
#define VX_QUANT_Q4_1 quantize_a32_ref_q4_1
#define VX_QUANT_Q8_0 quantize_a32_ref
#endif

#if defined(VX_AVX2)
#define VX_GEMM_B32(t) gemm_##t##_simd
#define VX_GEMM_K(t) gemm_##t##_simd
#define VX_GEMM_F(t) gemm_##t##_simd
#else
#define VX_GEMM_B32(t) gemm_##t##_ref
#define VX_GEMM_K(t) gemm_##t##_ref
#define VX_GEMM_F(t) gemm_##t##_ref
#endif

const vx_table *VX_CAT(vx_table, VX_TIER)(void) {
    static const vx_table table = {
        VX_STR(VX_TIER),
        /* quantize */ {VX_QUANT_Q4_0, VX_QUANT_Q4_1, VX_QUANT_Q8_0, quantize_aK_ref, quantize_aK_ref, NULL, NULL},
        /* gemm */ {VX_GEMM_B32(q4_0), VX_GEMM_B32(q4_1), VX_GEMM_B32(q8_0), VX_GEMM_K(q4_K), VX_GEMM_K(q6_K),
                    VX_GEMM_F(f32), VX_GEMM_F(f16)},
        /* dequant */ {dequant_q4_0, dequant_q4_1, dequant_q8_0, dequant_q4_K, dequant_q6_K, dequant_f32, dequant_f16},
        rms_norm_ref,
        VX_CAT(vx_attention, VX_TIER),
        VX_CAT(vx_swiglu, VX_TIER),
        VX_CAT(vx_rope, VX_TIER),
        &VX_CAT(vx_conv, VX_TIER),
    };
    return &table;
}
