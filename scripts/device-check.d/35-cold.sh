#!/usr/bin/env bash
# Cold epochs with and without the loader's read-ahead (device-check part, see
# scripts/device-check.sh; docs/BENCHMARKS.md "Cold reads with read-ahead" measured it on
# the 2-core CPU machine only). One loader epoch per process after the shard files' pages
# are dropped (loader/examples/cold_epoch), STOKER_READ_AHEAD=0 against on, the same
# binary, the side that runs first alternating per repeat:
#   cpu  raw records (the photographs x40 at 512x384, 3.9 GB): reads are the work
#   cuda JPEG records (the photographs x200, ~3 GB, --gpu-friendly: all on the hardware
#        engines, so that reads, not the CUDA decoder, are what changes): the GPU path.
#        Not raw: the GPU path page-locks raw shards when it is built, which reads them
#        before the drop.
# About 30-60 s to make the sets on 16 cores, then 16 epochs of a few seconds; each run
# gets what is left of PART_TIMEOUT (device-check.sh's limit for the part, 240 s by
# default), and what does not fit is a row saying so, not a run killed from outside.
# Rows: cold:<device>:<order>:off / :on (img/s, median of the repeats) and
# cold:<device>:<order>:ratio (median of the per-repeat on/off ratios).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${BIN:?}" "${DATA:?}" "${OUT:?}" "${STOKER_DATA:?}"
T="$OUT/table.tsv"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$T"; }
[ -x "$BIN/cold_epoch" ] || { row cold missing exit "cold_epoch not in BIN"; exit 1; }
REPEATS="${COLD_REPEATS:-2}"
deadline=$(( $(date +%s) + ${PART_TIMEOUT:-240} - 15 ))
WORKERS="${COLD_WORKERS:-$(nproc)}"
log="$OUT/cold.log"

# ImageFolder-like sources: COPIES copies of the photographs, one class each.
make_set() { # name copies encoding-args...
  local name="$1" copies="$2"
  shift 2
  [ -f "$DATA/$name/manifest.json" ] && return 0
  # What an interrupted earlier run left (shards without a manifest) would be refused.
  rm -rf "${DATA:?}/$name"
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

# Dropped pages are only read again from a disk: on tmpfs every epoch would be warm.
fs="$(stat -f -c %T "$DATA" 2>/dev/null || echo unknown)"
case "$fs" in tmpfs | ramfs)
  row cold:filesystem "$fs" - "DATA=$DATA is in memory: nothing to read cold"
  exit 1 ;;
esac
status=0
make_set cold-raw 40 --encoding raw --size 512x384 || { row cold:raw_set failed exit "see $log"; status=1; }
make_set cold-jpeg 200 --gpu-friendly || { row cold:jpeg_set failed exit "see $log"; status=1; }

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
        left=$(( deadline - $(date +%s) ))
        if [ "$left" -lt 10 ]; then
          row "cold:$device:$order:time" "$r" repeats "PART_TIMEOUT ran out before repeat $r"
          status=1
          break 2
        fi
        # --foreground: the inner timeout stays in the part's process group, which
        # device-check.sh's own timeout kills as a whole.
        line="$(STOKER_READ_AHEAD=$m timeout --foreground "$left" "$BIN/cold_epoch" \
          --dataset "$ds" --order "$order" --device "$device" --workers "$WORKERS" \
          --batch 256 --size 64 2>>"$log")" ||
          { echo "cold_epoch $device $order read_ahead=$m failed" >>"$log"; status=1; }
        # One line per run, with its repeat: the ratio pairs the two sides of a repeat.
        printf '%s %s\n' "$r" "${line:-failed}" >>"$results"
      done
    done
    python3 - "$results" "$T" "$device" "$order" "$ds" <<'PY' || status=1
import json, statistics, sys
path, table, device, order, ds = sys.argv[1:]
# "REPEAT {json}" per run, or "REPEAT failed".
by_repeat = {}
for line in open(path):
    repeat, _, rest = line.strip().partition(" ")
    if rest.startswith("{"):
        run = json.loads(rest)
        by_repeat.setdefault(repeat, {})[run["STOKER_READ_AHEAD"]] = run
pairs = [(r["0"], r["1"]) for r in by_repeat.values() if "0" in r and "1" in r]
if not pairs:
    sys.exit(f"cold {device} {order}: no repeat with both sides")
off = [a["img_per_s"] for a, _ in pairs]
on = [b["img_per_s"] for _, b in pairs]
mb = statistics.median(x["mb_per_s"] for pair in pairs for x in pair)
ratios = [b / a for a, b in zip(off, on)]
note = f"{ds.rsplit('/', 1)[-1]}, {len(pairs)} repeats with both sides, ~{mb:.0f} MB/s of shard bytes"
with open(table, "a") as fh:
    for name, v, unit in [("off", statistics.median(off), "img/s"),
                          ("on", statistics.median(on), "img/s"),
                          ("ratio", statistics.median(ratios), "x")]:
        fh.write(f"cold:{device}:{order}:{name}\t{v:.2f}\t{unit}\t{note}\n")
PY
  done
done
exit "$status"
