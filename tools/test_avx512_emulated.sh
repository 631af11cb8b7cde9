#!/usr/bin/env bash
# Test the avx512 tier's kernels on a CPU without AVX-512: build volvox with that tier compiled for
# AVX2 and its AVX-512 intrinsics emulated in portable code (SIMDe, from PyPI's simde-py sdist, plus
# tools/avx512_emu/immintrin.h), into its own virtual environment, then run the kernel tests, whose
# tier fixture now includes avx512, and the native plan tests with VOLVOX_ISA=avx512.
#
#   bash tools/test_avx512_emulated.sh [pytest args...]
#
# Emulation runs the tier about 20x slower than the hardware would, and proves only what the
# tests compare (every tier against the references, int8 bit for bit): the speed of the real
# tier is measured on an AVX-512 machine (tools/bench_kernels.py --isa avx512).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
venv="${VOLVOX_EMU_VENV:-/tmp/volvox-emu-venv}"
build="${VOLVOX_EMU_BUILD:-/tmp/volvox-emu-build}"
shim="${VOLVOX_EMU_SHIM:-/tmp/volvox-emu-shim}"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q numpy cython scikit-build-core ninja pytest hypothesis gguf regex jinja2 pillow tokenizers safetensors transformers "torch==2.13.0"
if [ ! -f "$shim/simde/x86/avx512.h" ]; then
  rm -rf "$shim" && mkdir -p "$shim/dl"
  "$venv/bin/python" -m pip download -q --no-deps --no-binary :all: -d "$shim/dl" simde-py==0.8.2.post1
  tar -xzf "$shim"/dl/simde_py-*.tar.gz -C "$shim/dl"
  mv "$shim"/dl/simde_py-*/simde_py/simde/simde "$shim/simde"
fi
cp tools/avx512_emu/immintrin.h "$shim/immintrin.h"
"$venv/bin/python" -m pip install -q --no-build-isolation --no-deps --force-reinstall \
    -C build-dir="$build" -C "cmake.define.VOLVOX_EMULATE_AVX512=$shim" "$repo"

work="$(mktemp -d "${TMPDIR:-/tmp}/volvox-emu-tests.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -R tests tools pyproject.toml "$work/"
cd "$work"
"$venv/bin/python" -c 'from volvox import cpu as k; assert "avx512" in k.available_isas(), k.available_isas()'
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/kernels -k "not real" "$@"
VOLVOX_ISA=avx512 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/runtime/test_native_plan.py tests/tasks/test_tiny_llama.py -k "not real" "$@"
