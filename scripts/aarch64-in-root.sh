#!/usr/bin/env bash
# scripts/aarch64-in-root.sh ROOT DIR SCRIPT [NAME=VALUE ...]: runs the shell text SCRIPT
# in the aarch64 root ROOT (scripts/aarch64-root.sh), from its folder DIR (a path inside
# the root), its programs run by qemu-user, with an environment of HOME, PATH, LANG and
# the NAME=VALUE pairs only. /proc is mounted there for it (the loader reads the CPUs
# and memory it may use there) and unmounted after, unless it already was. Needs root.
set -euo pipefail
aroot=$1 dir=$2 script=$3
shift 3
mounted=
cleanup() {
  [ -z "$mounted" ] || umount "$aroot/proc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! mountpoint -q "$aroot/proc"; then
  mount -t proc proc "$aroot/proc"
  mounted=1
fi
chroot "$aroot" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin LANG=C.UTF-8 "$@" \
  /bin/sh -ec "cd '$dir'; $script"
