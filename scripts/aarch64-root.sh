#!/usr/bin/env bash
# scripts/aarch64-root.sh: prints the folder of an aarch64 Debian 12 root for running the
# Python package under qemu-user (scripts/aarch64-smoke.sh, scripts/aarch64-check.sh),
# made with debootstrap on first use: AARCH64_ROOT, or target/aarch64-root (about 550 MB).
# It holds CPython with Debian's NumPy, pytest and the `lmdb` package, and gcc, which the
# Python tests of machines with a stand-in CUDA driver compile it with. A root whose
# debootstrap was stopped, or that was made with other packages, is made again. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
aroot=$(realpath -m "${AARCH64_ROOT:-target/aarch64-root}")
packages=python3,python3-venv,python3-numpy,python3-pytest,python3-lmdb,gcc,libc6-dev
marker="$aroot/.stoker-root-complete"
if [ "$(cat "$marker" 2>/dev/null)" != "$packages" ]; then
  # Never remove through a mount: a folder bound in from elsewhere (this repository, say)
  # would be emptied along with the root.
  if awk -v r="$aroot/" 'index($2 "/", r) == 1 {found = 1} END {exit !found}' /proc/self/mounts; then
    echo "aarch64-root: something is mounted under $aroot; unmount it, then run again" >&2
    exit 1
  fi
  rm -rf "$aroot"
  command -v debootstrap >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  debootstrap --arch=arm64 --variant=minbase --include="$packages" bookworm "$aroot" \
    "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >&2
  echo "$packages" >"$marker"
fi
echo "$aroot"
