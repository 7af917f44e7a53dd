#!/usr/bin/env bash
# Cold epochs with and without the loader's read-ahead (device-check part, see
# scripts/device-check.sh; docs/BENCHMARKS.md "Cold reads with read-ahead" measured it on
# the 2-core CPU machine only). One loader epoch per process after the shard files' pages
# are dropped (loader/examples/cold_epoch), STOKER_READ_AHEAD=0 against on, the same
# binary, the side that runs first alternating per repeat:
#   cpu  raw records (the photographs x40 at 512x384, 3.9 GB): reads are the work
#   cuda JPEG records (the photographs x200, ~3 GB): the GPU path. Not raw: the GPU path
#        page-locks raw shards when it is built, which reads them before the drop.
# Rows: cold:<device>:<order>:off / :on (img/s, median of the repeats) and
# cold:<device>:<order>:ratio (median of the per-repeat on/off ratios).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${BIN:?}" "${DATA:?}" "${OUT:?}" "${STOKER_DATA:?}"
T="$OUT/table.tsv"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$T"; }
[ -x "$BIN/cold_epoch" ] || { row cold missing exit "cold_epoch not in BIN"; exit 1; }
REPEATS="${COLD_REPEATS:-2}"
WORKERS="${COLD_WORKERS:-$(nproc)}"
log="$OUT/cold.log"

# ImageFolder-like sources: COPIES copies of the photographs, one class each.
make_set() { # name copies encoding-args...
  local name="$1" copies="$2"
  shift 2
  [ -f "$DATA/$name/manifest.json" ] && return 0
  local src="$DATA/$name-src"
  rm -rf "$src" && mkdir -p "$src"
  for i in $(seq 1 "$copies"); do
    mkdir -p "$src/c$i" && find "$STOKER_DATA/imagefolder" -type f ! -name '*.tsv' -exec cp -t "$src/c$i" {} +
  done
  "$BIN/stoker" convert -q "$src" "$DATA/$name" "$@" >>"$log" 2>&1
  local rc=$?
  rm -rf "$src"
  return "$rc"
}

status=0
make_set cold-raw 40 --encoding raw --size 512x384 || { row cold:raw_set failed exit "see $log"; status=1; }
make_set cold-jpeg 200 || { row cold:jpeg_set failed exit "see $log"; status=1; }

for case in "cpu cold-raw" "cuda cold-jpeg"; do
  set -- $case
  device="$1" ds="$DATA/$2"
  [ -f "$ds/manifest.json" ] || continue
  for order in sequential global; do
    results="$OUT/cold-$device-$order.jsonl"
    : >"$results"
    for r in $(seq 1 "$REPEATS"); do
      sides="0 1"
      [ $((r % 2)) -eq 0 ] && sides="1 0"
      for m in $sides; do
        STOKER_READ_AHEAD=$m timeout 120 "$BIN/cold_epoch" --dataset "$ds" --order "$order" \
          --device "$device" --workers "$WORKERS" --batch 256 --size 64 >>"$results" 2>>"$log" ||
          { echo "cold_epoch $device $order read_ahead=$m failed" >>"$log"; status=1; }
      done
    done
    python3 - "$results" "$T" "$device" "$order" "$ds" <<'PY' || status=1
import json, statistics, sys
path, table, device, order, ds = sys.argv[1:]
runs = [json.loads(l) for l in open(path) if l.startswith("{")]
off = [r["img_per_s"] for r in runs if r["STOKER_READ_AHEAD"] == "0"]
on = [r["img_per_s"] for r in runs if r["STOKER_READ_AHEAD"] == "1"]
if not off or len(off) != len(on):
    sys.exit(f"cold {device} {order}: {len(off)} runs without and {len(on)} with read-ahead")
mb = statistics.median(r["mb_per_s"] for r in runs)
ratios = [b / a for a, b in zip(off, on)]
note = f"{ds.rsplit('/', 1)[-1]}, {len(off)} repeats, ~{mb:.0f} MB/s of shard bytes"
with open(table, "a") as fh:
    for name, v, unit in [("off", statistics.median(off), "img/s"),
                          ("on", statistics.median(on), "img/s"),
                          ("ratio", statistics.median(ratios), "x")]:
        fh.write(f"cold:{device}:{order}:{name}\t{v:.2f}\t{unit}\t{note}\n")
PY
  done
done
exit "$status"
