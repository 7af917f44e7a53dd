#!/usr/bin/env bash
# Converter throughput beside `cp -r` of the same tree, in the same run, from the page cache.
#
#   formats/benches/convert_throughput.sh [STOKER_BIN] [COPIES] [REPS]
#
# Builds a tree of COPIES classes, each a copy of the bench set (512 JPEGs derived from
# testdata/imagefolder, ~45 kB mean; made by `make-bench-set` if missing), warms the page cache, then times (median of REPS, wall clock):
#   cp -r                        the tree, no fsync
#   cp -r + sync                 the tree, then fsync of every copied file (stoker fsyncs shards)
#   stoker convert --no-check    store mode: header probe + EOI check, original bytes stored
#   stoker convert               store mode with a test decode of every JPEG (the default)
#   stoker convert --max-side 256, --jobs 1 and --jobs N: re-encode mode, img/s per core
#   stoker convert --encoding raw --size 224x224 --jobs 1: decode+resize, raw pixels
#   peer: Pillow doing the --max-side 256 work on one core (pil_reencode.py), if installed
# and prints one line per measurement (also as JSON lines when JSON=1).
#
# ONLY=store times just `cp -r` and `stoker convert --no-check` of the tree, alternating
# (cp, convert, cp, convert, ...) so both see the same machine state, REPS times each, and
# prints both medians and their ratio; a second binary in PEER_BIN (e.g. an older build)
# joins the alternation. The tree and outputs live under TMPDIR (tmpfs or disk).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${1:-$repo/target/release/stoker}"
copies="${2:-4}"
reps="${3:-3}"
data="$repo/target/stoker-testdata/bench-v1"
[ -d "$data" ] || cargo run --quiet --release --manifest-path "$repo/Cargo.toml" -p stoker-testdata --bin make-bench-set -- "$data"
work="$(mktemp -d "${TMPDIR:-/tmp}/stoker-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cores="$(nproc)"

tree="$work/tree"
for i in $(seq -w 1 "$copies"); do
  mkdir -p "$tree/class$i"
  cp "$data"/*.jpg "$tree/class$i/"
done
small="$work/small"   # 512 images, for the re-encode modes
mkdir -p "$small/c"
cp "$data"/*.jpg "$small/c/"
files=$(find "$tree" -type f | wc -l)
bytes=$(du -sb "$tree" | cut -f1)
sbytes=$(du -sb "$small" | cut -f1)
# Warm the page cache (twice), so storage is not what is measured.
for _ in 1 2; do cat "$tree"/*/* "$small"/*/* > /dev/null; done

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
now() { date +%s.%N; }

# time_cmd NAME MB IMAGES -- command...
time_cmd() {
  local name="$1" b="$2" n="$3"; shift 4
  local ts=()
  for _ in $(seq "$reps"); do
    rm -rf "$work/out"
    local t0 t1
    t0=$(now); "$@" > /dev/null; t1=$(now)
    ts+=("$(echo "$t1 - $t0" | bc -l)")
  done
  rm -rf "$work/out"
  local t; t=$(printf '%s\n' "${ts[@]}" | median)
  local mbs ips
  mbs=$(echo "$b / 1000000 / $t" | bc -l)
  ips=$(echo "$n / $t" | bc -l)
  printf '%-44s %8.3f s  %8.1f MB/s  %8.1f img/s   (runs: %s)\n' "$name" "$t" "$mbs" "$ips" "${ts[*]}"
  if [ "${JSON:-0}" = 1 ]; then
    printf '{"name":"%s","seconds":%.4f,"mb_per_s":%.2f,"img_per_s":%.2f}\n' "$name" "$t" "$mbs" "$ips"
  fi
}

cp_sync() { cp -r "$1" "$2" && find "$2" -type f -exec sync {} +; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $cores cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${ONLY:-}" = store ]; then
  echo "tree: $files JPEGs, $bytes bytes under $work ($(df --output=fstype "$work" | tail -1)); alternating, $reps runs each"
  names=("cp -r" "convert --no-check")
  cmds=("cp -r $tree $work/out" "$bin convert $tree $work/out --no-check")
  if [ -n "${PEER_BIN:-}" ]; then
    names+=("convert --no-check ($PEER_BIN)")
    cmds+=("$PEER_BIN convert $tree $work/out --no-check")
  fi
  declare -A runs
  for _ in $(seq "$reps"); do
    for i in "${!cmds[@]}"; do
      rm -rf "$work/out"; sync
      t0=$(now); ${cmds[$i]} > /dev/null; t1=$(now)
      runs[$i]+="$(echo "$t1 - $t0" | bc -l) "
    done
  done
  rm -rf "$work/out"
  cp_med=$(printf '%s\n' ${runs[0]} | median)
  for i in "${!cmds[@]}"; do
    t=$(printf '%s\n' ${runs[$i]} | median)
    printf '%-60s %8.3f s  %8.1f MB/s  %5.2fx cp -r   (runs: %s)\n' "${names[$i]}" "$t" \
      "$(echo "$bytes / 1000000 / $t" | bc -l)" "$(echo "$cp_med / $t" | bc -l)" "${runs[$i]}"
  done
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi
echo "tree: $files JPEGs, $bytes bytes ($copies x the bench set); re-encode set: 512 JPEGs, $sbytes bytes; median of $reps"
time_cmd "cp -r" "$bytes" "$files" -- cp -r "$tree" "$work/out"
time_cmd "cp -r + fsync each file" "$bytes" "$files" -- cp_sync "$tree" "$work/out"
time_cmd "convert store --no-check (jobs $cores)" "$bytes" "$files" -- "$bin" convert "$tree" "$work/out" --no-check
time_cmd "convert store, test-decode (jobs $cores)" "$bytes" "$files" -- "$bin" convert "$tree" "$work/out"
time_cmd "convert --max-side 256 --jobs 1" "$sbytes" 512 -- "$bin" convert "$small" "$work/out" --max-side 256 --jobs 1
time_cmd "convert --max-side 256 --jobs $cores" "$sbytes" 512 -- "$bin" convert "$small" "$work/out" --max-side 256 --jobs "$cores"
time_cmd "convert --encoding raw --size 224x224 --jobs 1" "$sbytes" 512 -- "$bin" convert "$small" "$work/out" --encoding raw --size 224x224 --jobs 1
if python3 -c 'import PIL' 2>/dev/null; then
  time_cmd "peer: Pillow re-encode, long side 256, 1 core" "$sbytes" 512 -- python3 "$here/pil_reencode.py" "$small" "$work/out"
else
  echo "peer: Pillow not installed (pip install Pillow) - no Pillow row"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
