#!/usr/bin/env bash
# Build volvox natively for arm64 (aarch64) inside a Debian bookworm root run under QEMU user-mode
# emulation, and run the kernel tests on every arm64 ISA tier the emulated CPU offers.
#
#   bash tools/test_arm64.sh [ROOTFS [pytest args...]]   (as root; default ROOTFS: /tmp/arm64root)
#
# Needs root, debootstrap and qemu-user-static with binfmt_misc registered (the `F` flag, so the
# chroot needs no copy of the emulator): apt-get install debootstrap qemu-user-static binfmt-support.
# ROOTFS is created when missing (debootstrap, ~10 min) and reused after. Each run copies the
# current source tree (git's tracked and untracked-but-not-ignored files) into ROOTFS/src/volvox,
# builds a wheel-equivalent install into a venv (/opt/vx) and runs, from a copy of the tests:
#   1. QEMU's default CPU model (`max`: has dotprod): every tier, generic, neon and dotprod,
#      is compared with the references in-process (the tests parametrize over available_isas()).
#   2. QEMU_CPU=cortex-a72 (Armv8.0, no dotprod): the HWCAP probe must leave dotprod out, pick
#      neon at import, and VOLVOX_ISA=dotprod must be refused.
# Emulation is ~10x slower than native: the build takes several minutes, the tests tens of minutes.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
rootfs="$(realpath -m "${1:-/tmp/arm64root}")"
# The kernel layer's tests (tests/kernels: GEMM / quant, rows, sequence, conv ...); they need only
# numpy, pytest and gguf.
tests=(tests/kernels)
# Default: all but the tests on the real SmolLM2 GGUF (they fetch 100 MB and take minutes per tier emulated).
pytest_args=("${@:2}")
[ ${#pytest_args[@]} -gt 0 ] || pytest_args=(-k "not real")

if [ ! -x "$rootfs/usr/bin/python3" ]; then
  debootstrap --arch=arm64 --foreign --variant=minbase \
    --include=python3,python3-dev,python3-venv,python3-pip,python3-pytest,cmake,gcc,g++,make,ninja-build,libgomp1,ca-certificates \
    bookworm "$rootfs" http://deb.debian.org/debian
  chroot "$rootfs" /debootstrap/debootstrap --second-stage
fi

cleanup() {
  for m in dev proc; do mountpoint -q "$rootfs/$m" && umount "$rootfs/$m"; done
  return 0
}
trap cleanup EXIT
mountpoint -q "$rootfs/proc" || mount -t proc proc "$rootfs/proc"
mountpoint -q "$rootfs/dev" || mount --bind /dev "$rootfs/dev"
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
# The host's CA bundle, for pip behind a TLS-intercepting proxy (harmless otherwise).
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/host-ca-certificates.crt"

# Run a command in the root with a clean environment (no host PIP_* / SSL_* settings).
in_root() {
  env -i PATH=/opt/vx/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"
}
in_root chroot "$rootfs" /usr/bin/python3 -c 'import platform; assert platform.machine() == "aarch64", platform.machine()'
if [ ! -x "$rootfs/opt/vx/bin/python" ]; then
  # Debian's pytest; numpy >= 1.26, Cython 3, scikit-build-core and gguf (test_quant's reference)
  # from PyPI (Debian bookworm's numpy is 1.24, older than volvox needs).
  in_root chroot "$rootfs" python3 -m venv --system-site-packages /opt/vx
  in_root chroot "$rootfs" pip install -q --cert /etc/ssl/certs/host-ca-certificates.crt \
    "numpy>=1.26" "cython>=3" "scikit-build-core>=0.10" gguf
fi

rm -rf "$rootfs/src/volvox" && mkdir -p "$rootfs/src/volvox"
git -C "$src" ls-files -z -co --exclude-standard | (cd "$src" && tar --null --ignore-failed-read -T - -cf -) \
  | tar -xf - -C "$rootfs/src/volvox"
rm -rf "$rootfs/src/volvox/build"  # a host build directory would poison the CMake cache

start=$(date +%s)
in_root chroot "$rootfs" sh -c 'cd /src/volvox && pip install -q --cert /etc/ssl/certs/host-ca-certificates.crt \
  --no-build-isolation --config-settings=build-dir=/tmp/volvox-build .'
echo "arm64 build: $(( $(date +%s) - start )) s"

start=$(date +%s)
in_root chroot "$rootfs" bash /src/volvox/tools/test_installed.sh /opt/vx/bin/python \
  "${tests[@]}" "${pytest_args[@]}"
echo "arm64 kernel tests, QEMU default CPU: $(( $(date +%s) - start )) s"

start=$(date +%s)
in_root QEMU_CPU=cortex-a72 chroot "$rootfs" /opt/vx/bin/python -c '
from volvox import cpu as k
avail = k.available_isas()
assert "dotprod" not in avail and k.isa() == "neon", (avail, k.isa())
print("cortex-a72 (no dotprod): tiers", avail, "picked", k.isa())'
if refused=$(in_root QEMU_CPU=cortex-a72 VOLVOX_ISA=dotprod chroot "$rootfs" /opt/vx/bin/python -c 'import volvox.cpu' 2>&1); then
  echo "VOLVOX_ISA=dotprod was accepted on a CPU without dotprod" >&2; exit 1
fi
grep "KernelError: VOLVOX_ISA='dotprod': this CPU cannot run that tier" <<<"$refused" || { echo "$refused" >&2; exit 1; }
# The tier tests proper already ran on neon and generic above; here only selection and VOLVOX_ISA.
in_root QEMU_CPU=cortex-a72 chroot "$rootfs" bash /src/volvox/tools/test_installed.sh /opt/vx/bin/python \
  tests/kernels/test_kernels.py -k "tiers_detected or volvox_isa_env"
echo "arm64 tier selection, QEMU_CPU=cortex-a72: $(( $(date +%s) - start )) s"
