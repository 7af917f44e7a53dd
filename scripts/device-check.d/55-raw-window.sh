#!/usr/bin/env bash
# Raw records over a dataset larger than the page-locked window (device-check part, see
# scripts/device-check.sh; issue 21 item 3). The raw bench set x4 (2,048 records, 1.1 GB)
# in 64 MiB shards, read in dataset order:
#   raw_seq         locked whole (it fits the default limit): the same-run peer
#   raw_seq_window  a 640 MiB page-lock limit: windows of 320 MiB (5 shards; a batch
#                   reads at most 4) move over it, the next one locked while the
#                   current one is read; each window's shards locked on 4 threads
#   raw_seq_window_t1  the same, locked on one thread (STOKER_LOCK_THREADS=1: how it
#                   was before run 8), the same-run peer of the parallel locking
# Rows (examples/gpu_consumer): h2d_<kind>_gb_s / _wall_gb_s / _fed_gb_s beside
# h2d_pinned_ceiling_gb_s (goal >= 0.95x), pinned_<kind>_mib (no pixel staging: the
# ring's kernel parameters only), fed_<kind>_*; from the loader's per-epoch summary
# line (one set per windowed run, `window<tag>:…`): window:lock_gb_s (how fast windows are locked) and window:producer_waited_ms
# (time the producer waited for a window: > 0 means locking set the pace).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${BIN:?}" "${DATA:?}" "${OUT:?}"
T="$OUT/table.tsv"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$T"; }
[ -x "$BIN/gpu_consumer" ] || { row raw_window missing exit "gpu_consumer not in BIN"; exit 1; }
status=0
# The windowed run's per-epoch summaries (tracing key=value): the figures of the last
# epoch with the most windows (the epoch started early and cancelled after the fed
# epochs also logs one, cut short).
summary() { # LOG TAG
  local w="$1" tag="$2" line v key
  if ! grep -q "page-locked windows of the epoch" "$w"; then
    row "window$tag:summary" missing - "no window summary in $w (backend line says why)"
    return 1
  fi
  # Plain key=value fields: device-check.sh sets NO_COLOR.
  line="$(grep "page-locked windows of the epoch" "$w" |
    awk '{ n = 0; if (match($0, /windows=[0-9]+/)) n = substr($0, RSTART + 8, RLENGTH - 8) + 0
           if (n >= most) { most = n; keep = $0 } } END { print keep }')"
  for key in windows lock_gb_s lock_ms producer_waited_ms locked_mib; do
    v="$(printf '%s\n' "$line" | sed -n "s/.* $key=\([0-9.]*\).*/\1/p")"
    row "window$tag:$key" "${v:-?}" - "last full epoch's summary line, $w"
  done
}
for run in whole window window_t1; do
  extra=() threads=4 tag=""
  case "$run" in
    whole) log="$OUT/gpu-consumer-raw-seq.log" ;;
    window) extra=(--page-lock-limit-mib 640) log="$OUT/gpu-consumer-raw-seq-window.log" ;;
    window_t1) extra=(--page-lock-limit-mib 640 --tag _t1) threads=1 tag=_t1
      log="$OUT/gpu-consumer-raw-seq-window-t1.log" ;;
  esac
  STOKER_LOCK_THREADS=$threads RUST_LOG=stoker_loader=info timeout 90 "$BIN/gpu_consumer" \
    --jpeg-dir "$DATA/bench" --raw --repeat 4 --shard-mib 64 --sequential --epochs 4 \
    --batch-size 256 --size 224 "${extra[@]}" --tsv "$T" >"$log" 2>&1
  rc=$?
  tail -n 25 "$log"
  row "gpu_consumer_raw_seq_$run" "$rc" exit "examples/gpu_consumer --raw --sequential --shard-mib 64 ${extra[*]} (STOKER_LOCK_THREADS=$threads)"
  [ "$rc" -eq 0 ] || status=1
  if [ "$run" != whole ]; then
    summary "$log" "$tag" || status=1
  fi
done
exit "$status"
