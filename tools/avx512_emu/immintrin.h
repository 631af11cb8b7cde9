/* Testing only: the avx512 tier's intrinsics in portable code, so that its kernels run (slowly) and
 * are tested on a CPU without AVX-512 (tools/test_avx512_emulated.sh builds with this directory first
 * on the include path). The real header comes first (SSE .. AVX2 stay native); SIMDe's native
 * aliases then route the AVX-512 names to its emulation. The functions below replace what SIMDe
 * 0.8.2 lacks, and its masked loads and stores, which touch every lane (its mask_storeu writes
 * zeros over the masked-off bytes, past the end of a buffer): each lane here is read or written
 * only when its mask bit is set, as the hardware does. */
#include_next <immintrin.h>
#ifndef VX_EMU_IMMINTRIN_H
#define VX_EMU_IMMINTRIN_H
#define SIMDE_ENABLE_NATIVE_ALIASES
#include "simde/x86/avx512.h"
#include <string.h>

static inline simde__m512i vx_emu_mask_srli_epi16(simde__m512i src, simde__mmask32 k, simde__m512i a, unsigned imm) {
    simde__m512i_private s = simde__m512i_to_private(src), x = simde__m512i_to_private(a);
    for (int i = 0; i < 32; i++) if ((k >> i) & 1) s.u16[i] = imm > 15 ? 0 : (uint16_t)(x.u16[i] >> imm);
    return simde__m512i_from_private(s);
}
static inline simde__m512i vx_emu_srai_epi64(simde__m512i a, unsigned imm) {
    simde__m512i_private x = simde__m512i_to_private(a);
    for (int i = 0; i < 8; i++) x.i64[i] = x.i64[i] >> (imm > 63 ? 63 : imm);
    return simde__m512i_from_private(x);
}
static inline simde__m512i vx_emu_srav_epi64(simde__m512i a, simde__m512i c) {
    simde__m512i_private x = simde__m512i_to_private(a), n = simde__m512i_to_private(c);
    for (int i = 0; i < 8; i++) x.i64[i] = x.i64[i] >> (n.u64[i] > 63 ? 63 : n.u64[i]);
    return simde__m512i_from_private(x);
}
static inline simde__m512i vx_emu_cvtepi32_epi64(simde__m256i a) {
    simde__m256i_private x = simde__m256i_to_private(a);
    simde__m512i_private r;
    for (int i = 0; i < 8; i++) r.i64[i] = x.i32[i];
    return simde__m512i_from_private(r);
}
static inline void vx_emu_mask_cvtepi64_storeu_epi8(void *p, simde__mmask8 k, simde__m512i a) {
    simde__m512i_private x = simde__m512i_to_private(a);
    for (int i = 0; i < 8; i++) if ((k >> i) & 1) ((int8_t *)p)[i] = (int8_t)x.i64[i];
}
static inline simde__m256i vx_emu_maskz_loadu_epi32(simde__mmask8 k, const void *p) {
    simde__m256i_private r;
    for (int i = 0; i < 8; i++) { int32_t v = 0; if ((k >> i) & 1) memcpy(&v, (const char *)p + 4 * i, 4); r.i32[i] = v; }
    return simde__m256i_from_private(r);
}
#define _mm512_mask_srli_epi16 vx_emu_mask_srli_epi16
#define _mm512_srai_epi64 vx_emu_srai_epi64
#define _mm512_srav_epi64 vx_emu_srav_epi64
#define _mm512_cvtepi32_epi64 vx_emu_cvtepi32_epi64
#define _mm512_mask_cvtepi64_storeu_epi8 vx_emu_mask_cvtepi64_storeu_epi8
#define _mm256_maskz_loadu_epi32 vx_emu_maskz_loadu_epi32

static inline float vx_emu_reduce_add_ps(simde__m512 a) {
    simde__m512_private x = simde__m512_to_private(a);
    float t3[8], t6[4];
    for (int i = 0; i < 8; i++) t3[i] = x.f32[8 + i] + x.f32[i];
    for (int i = 0; i < 4; i++) t6[i] = t3[4 + i] + t3[i];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}
static inline void vx_emu_mask_cvtepi32_storeu_epi8(void *p, simde__mmask16 k, simde__m512i a) {
    simde__m512i_private x = simde__m512i_to_private(a);
    for (int i = 0; i < 16; i++) if ((k >> i) & 1) ((int8_t *)p)[i] = (int8_t)x.i32[i];
}
static inline simde__m512i vx_emu512_maskz_loadu_epi32(simde__mmask16 k, const void *p) {
    simde__m512i_private r;
    for (int i = 0; i < 16; i++) { int32_t v = 0; if ((k >> i) & 1) memcpy(&v, (const char *)p + 4 * i, 4); r.i32[i] = v; }
    return simde__m512i_from_private(r);
}
static inline simde__m512i vx_emu_srav_epi32(simde__m512i a, simde__m512i c) {
    simde__m512i_private x = simde__m512i_to_private(a), n = simde__m512i_to_private(c);
    for (int i = 0; i < 16; i++) x.i32[i] = x.i32[i] >> (n.u32[i] > 31 ? 31 : n.u32[i]);
    return simde__m512i_from_private(x);
}
static inline simde__mmask16 vx_emu_cmplt_epi32_mask(simde__m512i a, simde__m512i b) {
    simde__m512i_private x = simde__m512i_to_private(a), y = simde__m512i_to_private(b);
    simde__mmask16 k = 0;
    for (int i = 0; i < 16; i++) k |= (simde__mmask16)((x.i32[i] < y.i32[i]) << i);
    return k;
}
static inline simde__mmask16 vx_emu_cmpneq_epi32_mask(simde__m512i a, simde__m512i b) {
    simde__m512i_private x = simde__m512i_to_private(a), y = simde__m512i_to_private(b);
    simde__mmask16 k = 0;
    for (int i = 0; i < 16; i++) k |= (simde__mmask16)((x.i32[i] != y.i32[i]) << i);
    return k;
}
#define _mm512_reduce_add_ps vx_emu_reduce_add_ps
#define _mm512_mask_cvtepi32_storeu_epi8 vx_emu_mask_cvtepi32_storeu_epi8
#define _mm512_maskz_loadu_epi32 vx_emu512_maskz_loadu_epi32
#define _mm512_srav_epi32 vx_emu_srav_epi32
#define _mm512_cmplt_epi32_mask vx_emu_cmplt_epi32_mask
#define _mm512_cmpneq_epi32_mask vx_emu_cmpneq_epi32_mask

static inline simde__m512i vx_emu_i32gather_epi32(simde__m512i idx, const void *base, int scale) {
    simde__m512i_private x = simde__m512i_to_private(idx), r;
    for (int i = 0; i < 16; i++) memcpy(&r.i32[i], (const char *)base + (int64_t)x.i32[i] * scale, 4);
    return simde__m512i_from_private(r);
}
#define _mm512_i32gather_epi32 vx_emu_i32gather_epi32

static inline simde__m512i vx_emu512_maskz_loadu_epi8(simde__mmask64 k, const void *p) {
    simde__m512i_private r;
    for (int i = 0; i < 64; i++) r.i8[i] = ((k >> i) & 1) ? ((const int8_t *)p)[i] : 0;
    return simde__m512i_from_private(r);
}
static inline void vx_emu512_mask_storeu_epi8(void *p, simde__mmask64 k, simde__m512i a) {
    simde__m512i_private x = simde__m512i_to_private(a);
    for (int i = 0; i < 64; i++) if ((k >> i) & 1) ((int8_t *)p)[i] = x.i8[i];
}
static inline simde__m128i vx_emu128_maskz_loadu_epi8(simde__mmask16 k, const void *p) {
    simde__m128i_private r;
    for (int i = 0; i < 16; i++) r.i8[i] = ((k >> i) & 1) ? ((const int8_t *)p)[i] : 0;
    return simde__m128i_from_private(r);
}
static inline void vx_emu128_mask_storeu_epi8(void *p, simde__mmask16 k, simde__m128i a) {
    simde__m128i_private x = simde__m128i_to_private(a);
    for (int i = 0; i < 16; i++) if ((k >> i) & 1) ((int8_t *)p)[i] = x.i8[i];
}
#define _mm512_maskz_loadu_epi8 vx_emu512_maskz_loadu_epi8
#define _mm512_mask_storeu_epi8 vx_emu512_mask_storeu_epi8
#define _mm_maskz_loadu_epi8 vx_emu128_maskz_loadu_epi8
#define _mm_mask_storeu_epi8 vx_emu128_mask_storeu_epi8

static inline simde__mmask16 vx_emu_cmplt_epu32_mask(simde__m512i a, simde__m512i b) {
    simde__m512i_private x = simde__m512i_to_private(a), y = simde__m512i_to_private(b);
    simde__mmask16 k = 0;
    for (int i = 0; i < 16; i++) k |= (simde__mmask16)((x.u32[i] < y.u32[i]) << i);
    return k;
}
static inline simde__m128i vx_emu_cvtepi32_epi8(simde__m512i a) {
    simde__m512i_private x = simde__m512i_to_private(a);
    simde__m128i_private r;
    for (int i = 0; i < 16; i++) r.i8[i] = (int8_t)x.i32[i];
    return simde__m128i_from_private(r);
}
static inline simde__m512i vx_emu_cvtepi8_epi32(simde__m128i a) {
    simde__m128i_private x = simde__m128i_to_private(a);
    simde__m512i_private r;
    for (int i = 0; i < 16; i++) r.i32[i] = x.i8[i];
    return simde__m512i_from_private(r);
}
#define _mm512_cmplt_epu32_mask vx_emu_cmplt_epu32_mask
#define _mm512_cvtepi32_epi8 vx_emu_cvtepi32_epi8
#define _mm512_cvtepi8_epi32 vx_emu_cvtepi8_epi32

static inline void vx_emu512_mask_storeu_ps(void *p, simde__mmask16 k, simde__m512 a) {
    simde__m512_private x = simde__m512_to_private(a);
    for (int i = 0; i < 16; i++) if ((k >> i) & 1) memcpy((char *)p + 4 * i, &x.f32[i], 4);
}
static inline void vx_emu_mask_cvtsepi32_storeu_epi8(void *p, simde__mmask16 k, simde__m512i a) {
    simde__m512i_private x = simde__m512i_to_private(a);
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) ((int8_t *)p)[i] = (int8_t)(x.i32[i] < -128 ? -128 : x.i32[i] > 127 ? 127 : x.i32[i]);
}
static inline simde__m512 vx_emu512_maskz_loadu_ps(simde__mmask16 k, const void *p) {
    simde__m512_private r;
    for (int i = 0; i < 16; i++) { float v = 0.0f; if ((k >> i) & 1) memcpy(&v, (const char *)p + 4 * i, 4); r.f32[i] = v; }
    return simde__m512_from_private(r);
}
static inline simde__m256i vx_emu256_maskz_loadu_epi16(simde__mmask16 k, const void *p) {
    simde__m256i_private r;
    for (int i = 0; i < 16; i++) { int16_t v = 0; if ((k >> i) & 1) memcpy(&v, (const char *)p + 2 * i, 2); r.i16[i] = v; }
    return simde__m256i_from_private(r);
}
#undef _mm512_mask_storeu_ps
#undef _mm512_mask_cvtsepi32_storeu_epi8
#undef _mm512_maskz_loadu_ps
#undef _mm256_maskz_loadu_epi16
#define _mm512_mask_storeu_ps vx_emu512_mask_storeu_ps
#define _mm512_mask_cvtsepi32_storeu_epi8 vx_emu_mask_cvtsepi32_storeu_epi8
#define _mm512_maskz_loadu_ps vx_emu512_maskz_loadu_ps
#define _mm256_maskz_loadu_epi16 vx_emu256_maskz_loadu_epi16
#endif
