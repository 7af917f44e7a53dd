#!/usr/bin/env bash
# Writes the golden datasets of one stoker build into testdata/golden/DIR:
#   testdata/golden/make.sh STOKER_BINARY DIR COMMIT [merged]
# with the `stoker` binary built from COMMIT, whose output DIR keeps (v1: a build of
# format version 1; v2: format version 2; see README.md). `merged` adds a partitioned
# conversion joined by `stoker merge`, for builds that have both. An absolute DIR is
# written where it says: the golden test (tests/golden.rs) runs this script with today's
# build into a folder of its own and compares the files with v2's.
#
# The source and the list are named relative to testdata/, so the manifests name no
# machine's path. Stored JPEGs and the file layout are the same on every machine; decoded,
# resized and re-encoded pixels may differ in the last bits across CPU generations
# (docs/FORMAT.md, "Determinism"), which is why the test compares those by their pixels.
set -euo pipefail
bin=$(realpath "$1")
dir=$2
commit=$3
cd "$(dirname "$0")/.."
case "$dir" in
  /*) out=$dir ;;
  *) out="golden/$dir" ;;
esac
if [ -e "$out" ]; then
  echo "$out exists: a golden set is written once, by the build it keeps" >&2
  exit 1
fi
mkdir -p "$out"
convert() {
  local name=$1
  shift
  "$bin" convert imagefolder "$out/$name" --list golden/list.csv -j 1 "$@" >/dev/null
}
# Original JPEG bytes: the LMDB layout, the record header and the manifest alone.
convert jpeg --shards 2
# Decoded pixels, 24×16 after a shorter-side resize and centre crop.
convert raw --encoding raw --size 24x16 --shards 2
# Resized and re-encoded JPEGs (every listed photo is over 48 pixels on its longer side).
convert reencoded --max-side 48 --shards 2
if [ "${4:-}" = merged ]; then
  for part in 0 1; do
    convert merged --part "$part" --parts 2 --shards 1
  done
  "$bin" merge "$out/merged" >/dev/null 2>&1
  # Part 0 alone, left unmerged: a job array's task that finished before an upgrade.
  convert parts --part 0 --parts 2 --shards 1
fi
# A conversion stopped after 6 of the 8 records by the build's test hook: one finished
# shard, the resume journal and the next shard's unfinished .tmp, as a killed run leaves
# them, for a later build's `convert --resume` (not a dataset: it has no manifest).
if STOKER_TEST_FAIL_AFTER=6 "$bin" convert imagefolder "$out/interrupted" --list golden/list.csv \
  -j 1 --shard-size 64K >/dev/null 2>&1; then
  echo "the conversion into $out/interrupted was not stopped: does $bin have the test hook?" >&2
  exit 1
fi
printf '%s, commit %s\n' "$("$bin" --version)" "$commit" >"$out/BUILD"
