#!/usr/bin/env bash
# Run the test suite against an installed volvox (a wheel), never the source tree.
#
#   bash tools/test_installed.sh PYTHON [pytest args...]   (default: all of tests/)
#
# PYTHON is the interpreter of the environment the wheel is installed in (with its `test`
# extra). The tests run from a copy of tests/ (and the tool scripts and data they read) in a
# temporary directory without volvox/__init__.py, so `import volvox` can only find the wheel.
# Used by tools/build_wheel.sh and by cibuildwheel's test-command (pyproject.toml).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="$1"
work="$(mktemp -d "${TMPDIR:-/tmp}/volvox-tests.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Everything the tests read besides the package: the tests, tool scripts, WGSL sources, docs,
# recipes, and pyproject.toml (pytest's settings and markers).
for d in tests tools shaders docs models pyproject.toml; do cp -R "$root/$d" "$work/$d"; done
# The shader tests (tools/compile_shaders.py --check) compare <root>/volvox/_gpu/shaders with
# shaders/*.wgsl: give them the wheel's copy (spv/, glsl/ and the WGSL in wgsl/), so they check
# what ships, with the repository's record of how it was generated (GENERATED.md, which the wheel
# leaves out). (A directory without __init__.py: `import volvox` still finds the installed regular
# package first, PEP 420.)
cd "$work"
pkg="$("$python" -c "import os, volvox; print(os.path.dirname(volvox.__file__))")"
mkdir -p volvox/_gpu
cp -R "$pkg/_gpu/shaders" volvox/_gpu/shaders
cp "$root/volvox/_gpu/shaders/GENERATED.md" volvox/_gpu/shaders/
"$python" - "$root" <<'PY'
import os, platform, sys
import volvox, volvox.cpu as k
here = os.path.realpath(volvox.__file__)
assert not here.startswith(os.path.realpath(sys.argv[1]) + os.sep), f"tests would import the source tree: {here}"
print(f"installed volvox {here}; {platform.machine()}, ISA tier {k.isa()} of {k.available_isas()}")
PY
"$python" -m pytest -q -p no:cacheprovider "${@:2}"  # no paths given: pyproject's testpaths, tests/
