#!/usr/bin/env bash
# Blocking waits (issue 21, item 4) on the GPU machine (device-check part, see
# scripts/device-check.sh): the same decode of the bench set with the host spinning on
# its GPU waits and with it asleep on blocking-sync events (`WaitMode`), and the CPU
# time each costs.
#   1. stoker-decode-gpu_throughput gpu_decode_wait_modes: the decoder alone, without
#      and with a CPU share (the case blocking waits are for), rows
#      blocking:<case>:{spin,block} (img/s), ..._cpu_s, ..._cores_busy, and the ratios
#      blocking:<case>:cpu_per_img_block_vs_spin / img_per_s_block_vs_spin.
#   2. `stoker bench --gpu-waits spin|block` on the converted bench set: rows
#      blocking:bench:<stage>:<mode> (img/s) and blocking:bench:<stage>:<mode>_cpu_s for
#      gpu_decode and end_to_end, and blocking:bench:<stage>:cpu_per_img_block_vs_spin.
#   3. The GPU tests of the blocking mode (decoder pixels and routes under Block).
# Needs in $BIN: stoker, stoker-decode-gpu_throughput, stoker-decode-gpu; in $DATA: bench/.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${BIN:?}" "${DATA:?}" "${OUT:?}"
T="$OUT/table.tsv"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$T"; }
SECS="${BLOCKING_SECONDS:-4}"
BATCH="${BENCH_BATCH:-256}"
DEVICE="${BENCH_DEVICE:-cuda:0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0

# 1. The decoder alone, spin vs block, without and with a CPU share.
if [ -x "$BIN/stoker-decode-gpu_throughput" ]; then
  STOKER_BENCH_SECONDS="$SECS" STOKER_BENCH_BATCH="$BATCH" "$BIN/stoker-decode-gpu_throughput" \
    gpu_decode_wait_modes --exact --ignored --nocapture --test-threads=1 \
    >"$OUT/blocking-decode.log" 2>&1 || status=1
  grep -P '^ROW\t' "$OUT/blocking-decode.log" | cut -f2- >>"$T"
  grep -E '^# timings' "$OUT/blocking-decode.log"
  grep -q 'STOKER-GPU-SKIP' "$OUT/blocking-decode.log" && status=1
else
  row blocking:decode missing - "stoker-decode-gpu_throughput not carried"
  status=1
fi

# 2. stoker bench, spin vs block: the gpu_decode stage and the loader end to end.
( cd "$DATA/bench" && ls -1 *.jpg | sed 's/$/,0/' ) >"$work/list.csv"
if "$BIN/stoker" convert "$DATA/bench" "$work/ds" --list "$work/list.csv" --shards 4 \
  >"$OUT/blocking-convert.log" 2>&1; then
  for mode in spin block; do
    "$BIN/stoker" bench "$work/ds" --device "$DEVICE" --batch "$BATCH" --size 224 \
      --seconds "$SECS" --gpu-waits "$mode" --json \
      >"$OUT/blocking-bench-$mode.json" 2>"$OUT/blocking-bench-$mode.err" || status=1
  done
  python3 - "$OUT" "$T" <<'PY' || status=1
import json, sys
out, table = sys.argv[1], sys.argv[2]
rows, cpu = [], {}
for mode in ("spin", "block"):
    try:
        r = json.load(open(f"{out}/blocking-bench-{mode}.json"))
    except (OSError, ValueError) as e:
        rows.append((f"blocking:bench:{mode}", "null", "img/s", f"no report: {e}"))
        continue
    for stage in ("gpu_decode", "end_to_end"):
        st = r["stages"].get(stage, {})
        v, c = st.get("img_per_s"), st.get("cpu_s")
        busy = st.get("cores_busy")
        rows.append((f"blocking:bench:{stage}:{mode}", "null" if v is None else "%.0f" % v, "img/s",
                     (st.get("note") or st.get("reason") or "")[-160:]))
        rows.append((f"blocking:bench:{stage}:{mode}_cpu_s", "null" if c is None else "%.2f" % c, "s",
                     "user+sys; %s cores busy" % ("?" if busy is None else "%.2f" % busy)))
        secs = st.get("seconds")
        if v and c and secs:
            cpu[(stage, mode)] = c / (v * secs)  # CPU seconds per image
for stage in ("gpu_decode", "end_to_end"):
    s, b = cpu.get((stage, "spin")), cpu.get((stage, "block"))
    rows.append((f"blocking:bench:{stage}:cpu_per_img_block_vs_spin",
                 "null" if not (s and b) else "%.3f" % (b / s), "ratio",
                 "CPU seconds per image, block / spin (below 1: CPU saved)"))
with open(table, "a") as fh:
    for r in rows:
        fh.write("\t".join(str(c).replace("\t", " ") for c in r) + "\n")
for r in rows:
    print(*r, sep="\t")
PY
else
  row blocking:bench convert-failed - "see blocking-convert.log"
  status=1
fi

# 3. Correctness under blocking waits (also part of 10-decode's full run).
if [ -x "$BIN/stoker-decode-gpu" ]; then
  "$BIN/stoker-decode-gpu" blocking --nocapture --test-threads=1 >"$OUT/blocking-tests.log" 2>&1
  rc=$?
  skips="$(grep -c 'STOKER-GPU-SKIP' "$OUT/blocking-tests.log" || true)"
  summary="$(grep -E '^test result' "$OUT/blocking-tests.log" | tail -1 | sed 's/^test result: //')"
  row blocking_gpu_tests "$rc" exit "${summary:-no summary}; ${skips} skipped"
  [ "$rc" -eq 0 ] && [ "$skips" -eq 0 ] || status=1
fi
exit $status
