#!/usr/bin/env bash
# Compile-check the arm64 build's C on an x86 machine: Cython translates the engine and the arm64
# tiers (generic, neon, dotprod) and GCC's aarch64 cross compiler checks them with each tier's
# flags from CMakeLists.txt (-fsyntax-only: types, intrinsics and their -march guards, no object
# code). It catches what only an arm64 build would (a NEON intrinsic misspelt, a kernel table entry
# a tier forgot) in a minute; tools/test_arm64.sh builds and runs the tests under QEMU (much slower).
#
#   bash tools/check_arm64_compile.sh        (needs: apt-get install gcc-aarch64-linux-gnu; Cython >= 3)
#
# The host's pyconfig.h stands in for arm64's (both are 64-bit little-endian glibc builds of the
# same Python): enough for a syntax check, not for linking.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
cc=aarch64-linux-gnu-gcc
command -v "$cc" >/dev/null || { echo "check_arm64_compile: $cc not found (apt-get install gcc-aarch64-linux-gnu)" >&2; exit 2; }
python -c 'import Cython' 2>/dev/null || { echo "check_arm64_compile: Cython not installed (pip install 'cython>=3.0')" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pyinc="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
npinc="$(python -c 'import numpy; print(numpy.get_include())')"
pyver="$(python -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')"
mkdir -p "$work/inc/aarch64-linux-gnu/$pyver"
cp "$(python -c 'import sysconfig; print(sysconfig.get_config_h_filename())')" "$work/inc/aarch64-linux-gnu/$pyver/pyconfig.h"
status=0
for spec in engine:-march=armv8-a tier_generic: tier_neon:-march=armv8-a tier_dotprod:-march=armv8.2-a+dotprod; do
    module="${spec%%:*}"
    flags="${spec#*:}"
    (cd "$src" && python -m cython -3 --fast-fail -I "$src" --module-name "volvox._kernels.$module" \
        -o "$work/$module.c" "volvox/_kernels/$module.pyx")
    if "$cc" -fsyntax-only -fopenmp -Werror=implicit-function-declaration $flags \
            -DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION -I"$work/inc" -I"$pyinc" -I"$npinc" \
            "$work/$module.c" 2> "$work/$module.log"; then
        echo "arm64 $module: ok"
    else
        echo "arm64 $module: FAILED"; grep -E "error" "$work/$module.log" | head -20; status=1
    fi
done
exit $status
