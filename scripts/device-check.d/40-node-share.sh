#!/usr/bin/env bash
# Device-check part (see scripts/device-check.sh): several loader processes sharing
# the one GPU's JPEG engines, PCIe link and page cache (issue 22). 1, 2 and 4
# processes started the way torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE), each with Device::Auto (local rank mod 1 visible device: all on
# cuda:0) and its default node share of the cores, on its slice of the bench JPEGs
# x16 (8,192 images), batch 256, RRC 224 + flip + normalize, f32 NCHW.
# Needs $BIN/node_share (examples/node_share.rs) and $DATA/bench.
# Rows (examples/node_share.rs): node_share<tag>_<N>p_img_per_s (aggregate loader img/s),
# _decode_img_per_s (aggregate decode stage), _fed_min / _fed_mean (per-process fed
# ratio), _ratio_vs_1p (N processes / 1 process, median of the rounds).
set -uo pipefail
: "${BIN:?}" "${DATA:?}" "${OUT:?}"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$OUT/table.tsv"; }
if [ ! -x "$BIN/node_share" ]; then
  row node_share_gpu missing exit "node_share not in BIN"
  exit 0
fi

# 1. The loader alone (the consumer only takes each batch): aggregate img/s of
#    1, 2 and 4 processes on one GPU; the total should not fall below one process's.
timeout 110 "$BIN/node_share" --images "$DATA/bench" --repeat 16 --procs 1,2,4 --rounds 2 \
  --epochs 3 --device auto --batch 256 --size 224 --tag _gpu \
  --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/node-share-gpu.log" | grep -v '^ ' | tail -n 30
row node_share_gpu "${PIPESTATUS[0]}" exit "examples/node_share --procs 1,2,4 --device auto, no step"
# Device::Auto falls back to the CPU when the GPU path cannot start: then these rows are
# not GPU figures, and the log says why.
if grep -Eq 'devices \[[^]]*cpu' "$OUT/node-share-gpu.log"; then
  row node_share_gpu_device cpu text "some processes ran on the CPU (Device::Auto fell back): not GPU rows"
else
  row node_share_gpu_device cuda text "every process on the GPU (devices [cuda:0,...] in the log)"
fi

# 2. With a stand-in step of 40 ms per batch of 256 in every process (6,400 img/s
#    each, 25,600 img/s for 4): the per-process fed ratio while the engines are shared.
timeout 110 "$BIN/node_share" --images "$DATA/bench" --repeat 16 --procs 1,2,4 --rounds 1 \
  --epochs 3 --device auto --batch 256 --size 224 --consumer-ms 40 --tag _gpu_step40 \
  --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/node-share-gpu-step40.log" | grep -v '^ ' | tail -n 30
row node_share_gpu_step40 "${PIPESTATUS[0]}" exit "examples/node_share --procs 1,2,4 --device auto --consumer-ms 40"
exit 0
