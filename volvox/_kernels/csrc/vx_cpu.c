/* CPU feature detection: may this CPU run the kernels of tier `name`? Compiled with baseline
 * flags (a tier module is imported only once this says yes). */
#include <string.h>

#include "vx_kernels.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

int vx_cpu_runs(const char *name) {
    if (strcmp(name, "generic") == 0) return 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (strcmp(name, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    if (strcmp(name, "avx512") == 0)
#ifdef VX_EMULATE_AVX512 /* tools/test_avx512_emulated.sh: the tier is built for AVX2 + SIMDe */
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
#endif
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

