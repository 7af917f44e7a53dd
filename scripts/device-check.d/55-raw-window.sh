#!/usr/bin/env bash
# Raw records over a dataset larger than the page-locked window (device-check part, see
# scripts/device-check.sh; issue 21 item 3). The raw bench set x4 (2,048 records, 1.1 GB)
# in 64 MiB shards, read in dataset order:
#   raw_seq         locked whole (it fits the default limit): the same-run peer
#   raw_seq_staged  staged through pinned memory (the route a 0 page-lock limit takes)
#   raw_seq_window  a 640 MiB page-lock limit: windows of 320 MiB (5 shards; a batch
#                   reads at most 4) move over it, the next one locked while the
#                   current one is read
#   raw_seq_window_part  the same limit, STOKER_RAW_OVER_LIMIT=part: the 64 MiB shards
#                   that fit in 640 MiB (about 10 of 18) locked for good at build, the others' records staged
#                   (loader/src/gpu/lock_part.rs; which route a dataset over the limit
#                   read in order should take is decided from these four rows)
# and shuffled whole (no window holds a batch), the route a training epoch takes:
#   raw_window_part  the 640 MiB limit: a part locked for good (the default for a
#                   whole-dataset shuffle over the limit)
#   raw_staged      every record staged: the same-run peer (the route such a dataset
#                   took before the part)
# Rows (examples/gpu_consumer): h2d_<kind>_gb_s / _wall_gb_s / _fed_gb_s beside
# h2d_pinned_ceiling_gb_s (goal >= 0.95x), pinned_<kind>_mib (no pixel staging: the
# ring's kernel parameters only), fed_<kind>_*; from the loader's per-epoch summary
# line: window:lock_gb_s (how fast windows are locked) and window:producer_waited_ms
# (time the producer waited for a window: > 0 means locking set the pace).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${BIN:?}" "${DATA:?}" "${OUT:?}"
T="$OUT/table.tsv"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$T"; }
[ -x "$BIN/gpu_consumer" ] || { row raw_window missing exit "gpu_consumer not in BIN"; exit 1; }
status=0
# Third: the same dataset staged through pinned memory (`--staged`, what a page-lock limit
# of 0 gives), the same-run peer of the window: which of the two routes a dataset over
# the limit should take is decided from these two rows.
for limit in none 640 staged 640part global640 globalstaged; do
  extra=(--sequential) log="$OUT/gpu-consumer-raw-seq.log" route=""
  case "$limit" in
    640) extra+=(--page-lock-limit-mib 640) log="$OUT/gpu-consumer-raw-seq-window.log" ;;
    staged) extra+=(--staged) log="$OUT/gpu-consumer-raw-seq-staged.log" ;;
    640part)
      extra+=(--page-lock-limit-mib 640 --tag _part) route=part
      log="$OUT/gpu-consumer-raw-seq-part.log" ;;
    global640) extra=(--page-lock-limit-mib 640 --tag _part) log="$OUT/gpu-consumer-raw-part.log" ;;
    globalstaged) extra=(--staged) log="$OUT/gpu-consumer-raw-staged.log" ;;
  esac
  STOKER_RAW_OVER_LIMIT="$route" RUST_LOG=stoker_loader=info timeout 90 "$BIN/gpu_consumer" \
    --jpeg-dir "$DATA/bench" --raw --repeat 4 --shard-mib 64 --epochs 4 --batch-size 256 \
    --size 224 "${extra[@]}" --tsv "$T" >"$log" 2>&1
  rc=$?
  tail -n 25 "$log"
  row "gpu_consumer_raw_limit_$limit" "$rc" exit "examples/gpu_consumer --raw --shard-mib 64 ${extra[*]}${route:+ (STOKER_RAW_OVER_LIMIT=$route)}"
  [ "$rc" -eq 0 ] || status=1
done
# The windowed run's per-epoch summaries (tracing key=value): the figures of the last
# epoch with the most windows (the epoch started early and cancelled after the fed
# epochs also logs one, cut short).
w="$OUT/gpu-consumer-raw-seq-window.log"
if grep -q "page-locked windows of the epoch" "$w"; then
  # Plain key=value fields: device-check.sh sets NO_COLOR.
  line="$(grep "page-locked windows of the epoch" "$w" |
    awk '{ n = 0; if (match($0, /windows=[0-9]+/)) n = substr($0, RSTART + 8, RLENGTH - 8) + 0
           if (n >= most) { most = n; keep = $0 } } END { print keep }')"
  for key in windows lock_gb_s producer_waited_ms locked_mib; do
    v="$(printf '%s\n' "$line" | sed -n "s/.*$key=\([0-9.]*\).*/\1/p")"
    row "window:$key" "${v:-?}" - "last full epoch's summary line, $w"
  done
else
  row "window:summary" missing - "no window summary in $w (backend line says why)"
  status=1
fi
exit "$status"
