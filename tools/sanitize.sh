#!/usr/bin/env bash
# Build the native kernels with AddressSanitizer + UndefinedBehaviorSanitizer into a separate
# virtual environment and run the kernel tests under them; exit non-zero on any report.
#
#     tools/sanitize.sh                      # build (or reuse) /tmp/volvox-san-venv, run the tests
#     tools/sanitize.sh -k matmul            # extra arguments go to pytest
#
# CPython itself is not instrumented, so the compiler's libasan is preloaded; leak detection is
# off (CPython's allocator would flood it). UBSan is built non-recoverable, so the first
# undefined behaviour aborts the test process. Every report is also written under $logs and the
# run fails if any appears, even from a subprocess. CMakeLists.txt is untouched: the flags
# travel through scikit-build-core's cmake.define settings.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
venv="${VOLVOX_SAN_VENV:-/tmp/volvox-san-venv}"
build="${VOLVOX_SAN_BUILD:-/tmp/volvox-san-build}"
logs="${VOLVOX_SAN_LOGS:-/tmp/volvox-san-logs}"
cc="${CC:-gcc}"

san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -g"
libasan="$("$cc" -print-file-name=libasan.so)"
[ -f "$libasan" ] || { echo "sanitize.sh: $cc has no libasan.so ($libasan)" >&2; exit 2; }

# 1. A separate environment with the runtime and test dependencies, and volvox built instrumented.
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q numpy cython scikit-build-core pytest regex jinja2 pillow gguf
CC="$cc" "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps --force-reinstall \
    -C build-dir="$build" -C cmake.build-type=RelWithDebInfo \
    -C "cmake.define.CMAKE_C_FLAGS=$san" \
    -C "cmake.define.CMAKE_SHARED_LINKER_FLAGS=$san" \
    -C "cmake.define.CMAKE_MODULE_LINKER_FLAGS=$san" \
    "$repo"
# the extension must really be instrumented, or the run below proves nothing
core="$(cd / && LD_PRELOAD="$libasan" ASAN_OPTIONS=detect_leaks=0 \
        "$venv/bin/python" -c 'import volvox._kernels.engine as c; print(c.__file__)')"
# (ldd's whole output first: `ldd | grep -q` under pipefail fails when grep exits before ldd has written)
linked="$(ldd "$core")"
grep -q libasan <<<"$linked" || { echo "sanitize.sh: $core is not linked against libasan" >&2; exit 2; }

# 2. The kernel tests, from outside the source tree so that the instrumented install is imported.
rm -rf "$logs" && mkdir -p "$logs"
tests="$repo/tests/kernels $repo/tests/runtime/test_vision_plan.py"
status=0
(
    cd "$logs"
    export LD_PRELOAD="$libasan"
    export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:log_path=$logs/asan"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir="$repo" -c "$repo/pyproject.toml" \
        $tests "$@"
) || status=$?

# 3. Any sanitizer report fails the run, whatever pytest said.
if compgen -G "$logs/[au][sb]san*" >/dev/null; then
    echo "sanitize.sh: sanitizer reports:" >&2
    cat "$logs"/[au][sb]san* >&2
    exit 1
fi
[ "$status" -eq 0 ] || { echo "sanitize.sh: tests failed (exit $status)" >&2; exit "$status"; }
echo "sanitize.sh: no ASan/UBSan reports in $tests"
