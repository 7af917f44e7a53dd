#!/usr/bin/env bash
# Mixed data on the GPU (device-check part, see scripts/device-check.sh): what real training
# sets look like to the decoder, beside torchvision's GPU decode of the same files, same run.
#   mixed           $DATA/mixed: 512 files, ImageNet-like sizes, ~25 % progressive, some
#                   grayscale and CMYK (make-mixed-set)
#   mixed_baseline  $DATA/mixed-baseline: the same files at the same sizes, all baseline RGB
#                   (make-mixed-set --baseline): what the engines alone give on those sizes
#   photos          $STOKER_DATA/imagefolder: the 164 corpus photographs as they are
#                   (23 % progressive, 65 px to 1.3 kpx), 28 classes
# Rows: mixed:<set>:gpu_decode and :end_to_end (stoker bench), mixed:<set>:torchvision
# (decode_jpeg on the GPU, CPU fallback for the files it rejects), the ratios
# mixed:mixed_vs_baseline (goal >= 0.9) and mixed:<set>_vs_torchvision (goal >= 1.5), the
# decoder alone with and without the offload of CUDA-decoder images to the CPUs
# (decode_gpu_hw_lanes4{,_no_offload,_offload_threads10,_offload_threads12_cuda2}_{mixed,
# baseline}, stoker-decode-gpu_throughput: the last two give the offload more threads), and
# the loader's fed ratio at ResNet-50 pace on the mixed set (rows fed_jpeg_mixed_*,
# examples/gpu_consumer; goal >= 0.99; fed_jpeg_mixed_k256_*: the step as 256 kernels;
# fed_jpeg_mixed_cached_*: nvJPEG's memory from stoker's caches, as is the decoder row
# decode_gpu_hw_lanes4_cached_{mixed,baseline}; fed_jpeg_mixed_lowprio_*: the decoder's
# own streams at the default priority, the peer of the default's highest).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${BIN:?}" "${DATA:?}" "${OUT:?}" "${STOKER_DATA:?}"
T="$OUT/table.tsv"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$T"; }
BATCH="${BENCH_BATCH:-256}"
SECS="${BENCH_SECONDS:-3}"
DEVICE="${BENCH_DEVICE:-cuda:0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0

for set in mixed mixed_baseline photos; do
  case "$set" in
    mixed) dir="$DATA/mixed" layout=flat ;;
    mixed_baseline) dir="$DATA/mixed-baseline" layout=flat ;;
    photos) dir="$STOKER_DATA/imagefolder" layout=classes ;;
  esac
  if [ ! -d "$dir" ]; then
    row "mixed:$set" missing - "$dir absent (device-check.sh makes it)"
    status=1
    continue
  fi
  if ! "$BIN/stoker" convert "$dir" "$work/$set" --layout "$layout" --shards 4 \
    >"$OUT/mixed-convert-$set.log" 2>&1; then
    row "mixed:$set" convert-failed - "see mixed-convert-$set.log"
    status=1
    continue
  fi
  grep -E 'frame types|hardware' "$OUT/mixed-convert-$set.log" | sed "s/^/# $set: /"
  "$BIN/stoker" bench "$work/$set" --device "$DEVICE" --batch "$BATCH" --size 224 \
    --seconds "$SECS" --json >"$OUT/mixed-bench-$set.json" 2>"$OUT/mixed-bench-$set.err" || status=1
  python3 benches/peers/torchvision_decode.py "$dir" --device cuda --batch "$BATCH" \
    --seconds "$SECS" --cpu-fallback >"$OUT/mixed-torchvision-$set.log" 2>&1
done

python3 - "$OUT" "$T" <<'PY' || status=1
import json, sys
out, table = sys.argv[1], sys.argv[2]
rows, rates = [], {}

def last_json(path):
    try:
        lines = open(path).read().strip().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.strip().startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None

for s in ("mixed", "mixed_baseline", "photos"):
    try:
        r = json.load(open(f"{out}/mixed-bench-{s}.json"))
    except (OSError, ValueError) as e:
        rows.append((f"mixed:{s}:bench", "null", "img/s", f"no report: {e}"))
        continue
    for stage in ("gpu_decode", "end_to_end"):
        st = r["stages"].get(stage, {})
        v = st.get("img_per_s")
        rates[(s, stage)] = v
        rows.append((f"mixed:{s}:{stage}", "null" if v is None else "%.0f" % v, "img/s",
                     (st.get("note") or st.get("reason") or "")[:160]))
    peer = last_json(f"{out}/mixed-torchvision-{s}.log") or {}
    v = peer.get("img_per_s")
    rates[(s, "torchvision")] = v
    rows.append((f"mixed:{s}:torchvision", "null" if v is None else "%.0f" % v, "img/s",
                 (peer.get("note") or peer.get("reason") or "no output")[:160]))

def ratio(name, a, b, goal):
    if a and b:
        rows.append((name, "%.3f" % (a / b), "ratio", f"goal >= {goal}"))
    else:
        rows.append((name, "null", "ratio", "a side was not measured"))

ratio("mixed:mixed_vs_baseline", rates.get(("mixed", "gpu_decode")), rates.get(("mixed_baseline", "gpu_decode")), 0.9)
for s in ("mixed", "mixed_baseline", "photos"):
    ratio(f"mixed:{s}_vs_torchvision", rates.get((s, "gpu_decode")), rates.get((s, "torchvision")), 1.5)
with open(table, "a") as fh:
    for r in rows:
        fh.write("\t".join(str(c).replace("\t", " ") for c in r) + "\n")
for r in rows:
    print(*r, sep="\t")
PY

# The decoder alone on the mixed set, same run: CUDA-decoder images offloaded to the CPU
# share's threads as measured (the default) vs all on the CUDA decoder, beside the
# engines alone on the same sizes (rows decode_gpu_hw_lanes4{,_no_offload}_{mixed,baseline}).
if [ -x "$BIN/stoker-decode-gpu_throughput" ]; then
  for set in mixed mixed-baseline; do
    tag="_${set#mixed-}"
    [ "$set" = mixed ] && tag=_mixed
    STOKER_BENCH_DIR="$DATA/$set" STOKER_BENCH_TAG="$tag" STOKER_BENCH_SECONDS="$SECS" \
      STOKER_BENCH_CASES=decode_gpu_hw_lanes4,decode_gpu_hw_lanes4_cached,decode_gpu_hw_lanes4_no_offload,decode_gpu_hw_lanes4_offload_threads10,decode_gpu_hw_lanes4_offload_threads12_cuda2 \
      timeout 120 "$BIN/stoker-decode-gpu_throughput" gpu_decode_throughput --exact --ignored --nocapture --test-threads=1 \
      >"$OUT/mixed-decode-throughput$tag.log" 2>&1 || status=1
    grep -P '^ROW\t' "$OUT/mixed-decode-throughput$tag.log" | cut -f2- | tee -a "$T"
  done
fi

# The same question as part 10's beside_* rows on the mixed set, where each call's files
# have other sizes: does a decode call wait for another stream's work, with nvJPEG's
# allocators and with stoker's caches (rows beside_{hw,cuda}{,_cached}_mixed_*)?
if [ -x "$BIN/stoker-decode-gpu_beside" ]; then
  STOKER_BENCH_DIR="$DATA/mixed" STOKER_BENCH_TAG=_mixed timeout 150 "$BIN/stoker-decode-gpu_beside" \
    gpu_decode_beside_other_work --exact --ignored --nocapture >"$OUT/mixed-decode-beside.log" 2>&1 || status=1
  grep -P '^ROW\t' "$OUT/mixed-decode-beside.log" | cut -f2- | tee -a "$T"
fi

# The loader at ResNet-50 pace (the consumer's default rate) on the mixed set, 8 copies.
if [ -x "$BIN/gpu_consumer" ] && [ -d "$DATA/mixed" ]; then
  timeout 90 "$BIN/gpu_consumer" --jpeg-dir "$DATA/mixed" --repeat 8 --epochs 3 --tag _mixed \
    --batch-size "$BATCH" --size 224 --tsv "$T" 2>&1 | tee "$OUT/gpu-consumer-mixed.log" | tail -n 25
  rc=${PIPESTATUS[0]}
  row gpu_consumer_mixed "$rc" exit "examples/gpu_consumer --jpeg-dir mixed --tag _mixed"
  [ "$rc" -eq 0 ] || status=1
  # The same step as 256 shorter kernels (about a real ResNet-50 step's count): between
  # two, the loader's higher-priority streams get the SMs, as in training; the one-kernel
  # step above leaves them only the SMs it does not fill, for the whole step.
  timeout 90 "$BIN/gpu_consumer" --jpeg-dir "$DATA/mixed" --repeat 8 --epochs 3 --tag _mixed_k256 \
    --step-kernels 256 --batch-size "$BATCH" --size 224 --tsv "$T" 2>&1 |
    tee "$OUT/gpu-consumer-mixed-k256.log" | tail -n 12
  rc=${PIPESTATUS[0]}
  row gpu_consumer_mixed_k256 "$rc" exit "examples/gpu_consumer --jpeg-dir mixed --step-kernels 256 --tag _mixed_k256"
  [ "$rc" -eq 0 ] || status=1
  # The one-kernel step again with nvJPEG's memory from stoker's caches: if the decode
  # calls waited for the step because nvJPEG freed memory, this fed ratio rises.
  STOKER_NVJPEG_MEMORY=cached timeout 90 "$BIN/gpu_consumer" --jpeg-dir "$DATA/mixed" --repeat 8 \
    --epochs 3 --tag _mixed_cached --batch-size "$BATCH" --size 224 --tsv "$T" 2>&1 |
    tee "$OUT/gpu-consumer-mixed-cached.log" | tail -n 12
  rc=${PIPESTATUS[0]}
  row gpu_consumer_mixed_cached "$rc" exit "STOKER_NVJPEG_MEMORY=cached examples/gpu_consumer --jpeg-dir mixed --tag _mixed_cached"
  [ "$rc" -eq 0 ] || status=1
  # The decoder's own streams (nvJPEG's kernels) at the default priority, as before they
  # took the device's highest: queued behind the step's kernels, or not.
  timeout 90 "$BIN/gpu_consumer" --jpeg-dir "$DATA/mixed" --repeat 8 --epochs 3 --tag _mixed_lowprio \
    --decoder-default-priority --batch-size "$BATCH" --size 224 --tsv "$T" 2>&1 |
    tee "$OUT/gpu-consumer-mixed-lowprio.log" | tail -n 12
  rc=${PIPESTATUS[0]}
  row gpu_consumer_mixed_lowprio "$rc" exit "examples/gpu_consumer --jpeg-dir mixed --decoder-default-priority --tag _mixed_lowprio"
  [ "$rc" -eq 0 ] || status=1
fi
exit $status
