/* CPU feature detection and ISA tier registry.
 * Compiled with baseline flags; CMake defines VX_HAVE_<TIER>=1 for every tier object
 * linked into the extension. */
#include <string.h>

#include "vx_kernels.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

#ifdef VX_HAVE_GENERIC
const vx_table *vx_table_generic(void);
#endif
#ifdef VX_HAVE_AVX2
const vx_table *vx_table_avx2(void);
#endif
#ifdef VX_HAVE_AVX512
const vx_table *vx_table_avx512(void);
#endif
#ifdef VX_HAVE_NEON
const vx_table *vx_table_neon(void);
#endif
#ifdef VX_HAVE_DOTPROD
const vx_table *vx_table_dotprod(void);
#endif

typedef struct {
    const char *name;
    const vx_table *(*get)(void);
} vx_tier;

/* Ordered from most portable to best. */
static const vx_tier vx_tiers[] = {
#ifdef VX_HAVE_GENERIC
    {"generic", vx_table_generic},
#endif
#ifdef VX_HAVE_AVX2
    {"avx2", vx_table_avx2},
#endif
#ifdef VX_HAVE_AVX512
    {"avx512", vx_table_avx512},
#endif
#ifdef VX_HAVE_NEON
    {"neon", vx_table_neon},
#endif
#ifdef VX_HAVE_DOTPROD
    {"dotprod", vx_table_dotprod},
#endif
};
#define VX_NTIERS ((int)(sizeof(vx_tiers) / sizeof(vx_tiers[0])))

static int cpu_runs(const char *name) {
    if (strcmp(name, "generic") == 0) return 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (strcmp(name, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    if (strcmp(name, "avx512") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
#endif
#if defined(__aarch64__)
    if (strcmp(name, "neon") == 0) return 1; /* Advanced SIMD is mandatory on arm64 */
    if (strcmp(name, "dotprod") == 0) {
#if defined(__linux__)
        return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
        return 1; /* every Apple arm64 core has dotprod */
#else
        return 0;
#endif
    }
#endif
    return 0;
}

int vx_tier_count(void) { return VX_NTIERS; }

const char *vx_tier_name(int i) {
    return (i >= 0 && i < VX_NTIERS) ? vx_tiers[i].name : NULL;
}

int vx_tier_supported(const char *name) {
    for (int i = 0; i < VX_NTIERS; i++)
        if (strcmp(vx_tiers[i].name, name) == 0) return cpu_runs(name);
    return 0;
}

const vx_table *vx_get_table(const char *name) {
    for (int i = 0; i < VX_NTIERS; i++)
        if (strcmp(vx_tiers[i].name, name) == 0) return vx_tiers[i].get();
    return NULL;
}
