#!/usr/bin/env bash
# Listing a flat folder of N images (one folder, no class folders), stoker against Python's
# sorted os.walk (how torchvision's make_dataset lists), three rounds each, then the stat
# calls each stoker makes (strace). stoker runs `convert --part 0 --parts 10000`: it lists
# every input to find its slice and converts only a handful, so its time is the listing's.
# The folder holds N hard links to the bundled photos (no disk space, page cache warm; a file
# takes at most 65,000 links on ext4).
# usage: benches/peers/flat_listing.sh N STOKER_BIN [STOKER_BIN ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
n=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/flat"
python3 - "$work/flat" "$n" <<'PY'
import os, sys
folder, n = sys.argv[1], int(sys.argv[2])
photos = sorted(
    os.path.join(d, f) for d, _, fs in os.walk("testdata/imagefolder") for f in fs
    if f.lower().endswith((".jpg", ".jpeg"))
)
for k in range(n):
    os.link(photos[k % len(photos)], os.path.join(folder, f"img_{k:07d}.jpg"))
PY
peer='
import os, sys, time
t = time.perf_counter(); n = 0
for root, _, names in sorted(os.walk(sys.argv[1], followlinks=True)):
    n += len(sorted(names))
print(f"peer, python sorted os.walk: {n} files, {time.perf_counter() - t:.2f} s")'
for round in 1 2 3; do
  for bin in "$@"; do
    rm -rf "$work/out"
    /usr/bin/time -f "$bin: %e s wall, %U s user, %M KB peak" \
      "$bin" convert -q --part 0 --parts 10000 "$work/flat" "$work/out" >/dev/null 2>"$work/err" ||
      { cat "$work/err"; exit 1; }
    tail -1 "$work/err"
  done
  python3 -c "$peer" "$work/flat"
done
for bin in "$@"; do
  rm -rf "$work/out"
  strace -f -c -o "$work/strace" "$bin" convert -q --part 0 --parts 10000 "$work/flat" "$work/out" \
    >/dev/null 2>&1
  echo "$bin: stat calls (stat, lstat, statx, newfstatat): $(awk '$NF ~ /stat/ {s += $4} END {print s}' "$work/strace")"
done
