# shellcheck shell=bash
# Sourced by scripts/aarch64-check.sh, scripts/wheel.sh (WHEEL_TARGET=aarch64-...) and
# scripts/aarch64-smoke.sh: what building for aarch64-unknown-linux-gnu here and running
# the result under qemu-user need. Installs what is missing where it can (as root on
# Debian), registers qemu with binfmt_misc so that aarch64 programs start as any other (a
# test's children, the CLI it runs, a chroot's Python), and exports qemu's library root.
# Sets `target`.
target=aarch64-unknown-linux-gnu
if ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "$0: needs aarch64-linux-gnu-gcc and qemu-aarch64-static (Debian: gcc-aarch64-linux-gnu, qemu-user-static)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc-aarch64-linux-gnu \
    libc6-dev-arm64-cross qemu-user-static binfmt-support >/dev/null
fi
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/qemu-aarch64" ]; then
  [ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt" || true
  update-binfmts --enable qemu-aarch64 || true
fi
if [ ! -e "$binfmt/qemu-aarch64" ]; then
  echo "$0: qemu-aarch64 is not registered with binfmt_misc (update-binfmts --enable qemu-aarch64, as root)" >&2
  exit 1
fi
# Where qemu finds the aarch64 loader and C library.
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
