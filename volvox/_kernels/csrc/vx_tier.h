/* Per-tier compile-time switches shared by the tier translation units (vx_impl.c,
 * vx_ops.c), each compiled once per ISA tier with -DVX_TIER=<name> and its flags. */
#ifndef VX_TIER_H
#define VX_TIER_H

#ifndef VX_TIER
#error "compile with -DVX_TIER=<tier name>"
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VX_AVX2 1
#include <immintrin.h>
#endif
#if defined(VX_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define VX_AVX512 1
#endif
/* Advanced SIMD is baseline on arm64, so the generic tier opts out (-DVX_PORTABLE=1). */
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(VX_PORTABLE)
#define VX_NEON 1
#include <arm_neon.h>
#endif

#define VX_CAT2(a, b) a##_##b
#define VX_CAT(a, b) VX_CAT2(a, b)
#define VX_STR2(a) #a
#define VX_STR(a) VX_STR2(a)
#define VX_INLINE static inline __attribute__((always_inline, unused))

/* This tier's sequence kernels (vx_ops.c), referenced by its table in vx_impl.c. */
#include "vx_kernels.h"
void VX_CAT(vx_attention, VX_TIER)(const vx_attn_shape *s, const float *q, const float *kc,
                                   const float *vc, int64_t item, float *scratch, float *out);
void VX_CAT(vx_swiglu, VX_TIER)(int64_t F, const float *gate, const float *up, float *y);
void VX_CAT(vx_rope, VX_TIER)(int64_t n_heads, int64_t head_dim, int64_t rope_dim, int interleaved,
                              int64_t pos, float base, float freq_scale, const float *x, float *y);
extern const vx_conv_table VX_CAT(vx_conv, VX_TIER); /* vx_conv.c */

#endif /* VX_TIER_H */
