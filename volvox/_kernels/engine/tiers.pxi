# ISA tiers and threads: which tier module's kernels the engine runs, on how many threads.
import importlib
import importlib.util
import os

from cpython.pycapsule cimport PyCapsule_GetPointer
from volvox._kernels.vx cimport vx_table

# Whether this CPU may run tier `name`'s instructions, and whether it has AVX-512 VBMI (which the
# avx512 tier does not require; its iq4_nl GEMV uses it when present): compiler builtins that take
# string literals, behind per-platform #if (the few lines of C the engine has; Cython can say neither).
cdef extern from *:
    """
    #include <string.h>
    #if defined(__aarch64__) && defined(__linux__)
    #include <sys/auxv.h>
    #ifndef HWCAP_ASIMDDP
    #define HWCAP_ASIMDDP (1 << 20)
    #endif
    #endif
    static int vx_cpu_runs(const char *name) {
        if (strcmp(name, "generic") == 0) return 1;
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_cpu_init();
        int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        if (strcmp(name, "avx2") == 0) return avx2;
    #ifdef VX_EMULATE_AVX512  /* tools/test_avx512_emulated.sh: that tier is built for AVX2 + SIMDe */
        if (strcmp(name, "avx512") == 0) return avx2;
    #else
        if (strcmp(name, "avx512") == 0)
            return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vnni");
    #endif
    #endif
    #if defined(__aarch64__)
        if (strcmp(name, "neon") == 0) return 1;  /* Advanced SIMD is mandatory on arm64 */
    #if defined(__linux__)
        if (strcmp(name, "dotprod") == 0) return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
    #elif defined(__APPLE__)
        if (strcmp(name, "dotprod") == 0) return 1;  /* every Apple arm64 core has it */
    #endif
    #endif
        return 0;
    }
    static int vx_cpu_has_avx512vbmi(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512vbmi");
    #else
        return 0;
    #endif
    }
    """
    int vx_cpu_runs(const char *name) nogil
    int vx_cpu_has_avx512vbmi() nogil

# OpenMP shim (scikit-learn style): a build without OpenMP runs every plan on one thread.
cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define VX_OPENMP 1
    #else
    #define VX_OPENMP 0
    static int omp_get_thread_num(void) { return 0; }
    #endif
    """
    int VX_OPENMP
    int omp_get_thread_num() nogil

# Every tier a build may hold, most portable first; each is a module volvox._kernels.tier_<name>.
TIERS = ("generic", "avx2", "avx512", "neon", "dotprod")

cdef const vx_table *_tbl = NULL    # the tier every kernel runs on
# Whether the avx512 tier's iq4_nl GEMV looks its levels up with VBMI's vpermb: the CPU has it and
# VOLVOX_IQ4_NL_VBMI=0 does not turn it off (so that pshufb's path is tested on such a CPU too).
IQ4_NL_VBMI = bool(vx_cpu_has_avx512vbmi()) and os.environ.get("VOLVOX_IQ4_NL_VBMI", "").strip() != "0"
cdef int _nthreads = 1              # threads a plan or per-op call may use
_tier_modules = {}                  # name -> imported tier module (its table lives as long as it does)


def compiled_isas():
    """ISA tiers compiled into this build, most portable first."""
    return [t for t in TIERS if importlib.util.find_spec(f"volvox._kernels.tier_{t}") is not None]


def isa_supported(str name):
    """True when tier `name` is compiled in and this CPU can run it."""
    return name in compiled_isas() and bool(vx_cpu_runs(name.encode()))


def set_isa(str name):
    """Route every kernel through tier `name`. Its module is imported only here, once the CPU is
    known to run its instructions (code built with a tier's flags may use them anywhere)."""
    global _tbl
    if not isa_supported(name):
        raise ValueError(name)
    module = _tier_modules.get(name)
    if module is None:
        module = _tier_modules[name] = importlib.import_module(f"volvox._kernels.tier_{name}")
    _tbl = <const vx_table *> PyCapsule_GetPointer(module.table(IQ4_NL_VBMI), "volvox._kernels.vx_table")


def get_isa():
    """The tier every kernel runs on (None before set_isa)."""
    return None if _tbl == NULL else _tbl.name.decode()


def openmp_enabled():
    """Whether this build runs plans on several threads."""
    return bool(VX_OPENMP)


def set_num_threads(int n):
    """Threads plans and per-op calls may use (1 without OpenMP)."""
    global _nthreads
    _nthreads = n if VX_OPENMP else 1


def get_num_threads():
    """Threads plans and per-op calls may use."""
    return _nthreads
