#!/usr/bin/env bash
# Device-check part (see scripts/device-check.sh): `stoker bench` on the GPU with every
# stage, and the peers (PIL pool, torchvision decode_jpeg cpu/cuda, nvImageCodec when
# installed) on the same images and batch size in the same run, with ratios.
# Env: BIN (release binaries), DATA (bench/), OUT (comes back).
# Rows appended to $OUT/table.tsv: bench:<stage>, peer:<name>, bench:verdict, ...
set -euo pipefail
cd "$(dirname "$0")/../.."
BATCH="${BENCH_BATCH:-256}"
SECONDS_PER_STAGE="${BENCH_SECONDS:-3}"
DEVICE="${BENCH_DEVICE:-cuda:0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The 512 bench JPEGs, converted the way a user converts them (list file, one class).
( cd "$DATA/bench" && ls -1 *.jpg | sed 's/$/,0/' ) >"$work/list.csv"
"$BIN/stoker" convert "$DATA/bench" "$work/ds" --list "$work/list.csv" --shards 4 \
  >"$OUT/bench-convert.log" 2>&1 || { cat "$OUT/bench-convert.log"; exit 1; }

# 1. Every stage alone + end to end, and the peers, in one run.
python3 benches/peers/compare.py --stoker "$BIN/stoker" --dataset "$work/ds" \
  --images "$DATA/bench" --device "$DEVICE" --batch "$BATCH" --size 224 \
  --seconds "$SECONDS_PER_STAGE" --tsv "$OUT/table.tsv" \
  --json-out "$OUT/bench-peers.json" --markdown | tee "$OUT/bench-peers.txt"

# 2. With a simulated 100 ms training step on the GPU: fed ratio and the verdict.
"$BIN/stoker" bench "$work/ds" --device "$DEVICE" --batch "$BATCH" --seconds "$SECONDS_PER_STAGE" \
  --consumer-ms 100 --json >"$OUT/bench-step100.json"
python3 - "$OUT/bench-step100.json" "$OUT/table.tsv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e = r["stages"]["end_to_end"]
rows = [
    ("bench-step100:end_to_end", e.get("img_per_s"), "img/s", (e.get("note") or e.get("reason") or "")[:160]),
    ("bench-step100:fed_ratio", r.get("fed_ratio"), "ratio", "100 ms step per batch of %d (GPU kernel when the GPU path runs)" % r["run"]["batch"]),
    ("bench-step100:verdict", r["verdict"].get("bound"), "bound", r["verdict"]["text"][:200]),
]
with open(sys.argv[2], "a") as fh:
    for name, v, unit, note in rows:
        v = "null" if v is None else (("%.3f" % v) if isinstance(v, float) else str(v))
        fh.write("\t".join([name, v, unit, note.replace("\t", " ")]) + "\n")
print(json.dumps({k: rows[i][1] for i, k in enumerate(["end_to_end", "fed_ratio", "bound"])}))
print("verdict:", r["verdict"]["text"])
PY
