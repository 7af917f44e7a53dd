#!/usr/bin/env bash
# The GPU loader (issue 5) on the GPU machine. Needs, in $BIN:
#   gpu_consumer                  (examples/gpu_consumer.rs)
#   stoker-loader-gpu             (loader/tests/gpu.rs: GPU vs CPU batches, bad records, flat memory)
#   stoker-loader-stoker_loader   (loader unit tests: NVRTC compile of transform.cu, kernel reference)
# and $DATA/bench (512 ImageNet-like JPEGs). Appends rows to $OUT/table.tsv.
# QUICK=1: the tests, one JPEG and one raw loader run only (no variants, no probe: about
# half the time), for a device session short of time.
set -uo pipefail
quick="${QUICK:-0}"
: "${BIN:?}" "${DATA:?}" "${OUT:?}"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$OUT/table.tsv"; }

# The test binaries read the corpus and the bench set through stoker_testdata:
# STOKER_DATA and STOKER_BENCH_DIR are set by device-check.sh.

nvidia-smi --query-gpu=name,driver_version,utilization.gpu,utilization.jpeg --format=csv 2>/dev/null || true

# 1. Correctness on the GPU (GPU batches = CPU batches within tolerance, same
#    labels/indices, every sample once, same bad-record policy, memory flat).
if [ -x "$BIN/stoker-loader-gpu" ]; then
  timeout 180 "$BIN/stoker-loader-gpu" --test-threads 1 --nocapture 2>&1 | tee "$OUT/loader-gpu-tests.log" | tail -n 30
  rc=${PIPESTATUS[0]}
  skipped=$(grep -c 'STOKER-GPU-SKIP' "$OUT/loader-gpu-tests.log" || true)
  row loader_gpu_tests "$rc" exit "loader/tests/gpu.rs; ${skipped} skipped (must be 0 here)"
else
  row loader_gpu_tests missing exit "stoker-loader-gpu not in BIN"
fi
if [ -x "$BIN/stoker-loader-stoker_loader" ]; then
  timeout 40 "$BIN/stoker-loader-stoker_loader" gpu:: --nocapture 2>&1 | tee "$OUT/loader-gpu-kernel.log" | tail -n 15
  row loader_gpu_kernel_unit_tests "${PIPESTATUS[0]}" exit "NVRTC compile + kernel reference vs CPU path"
fi

# 2. Throughput, fed ratio, memory: JPEG bench set x8 (4096 images), F16 NCHW 224,
#    RRC + flip + normalize, batch 256, consumer sized to 4,700 img/s.
if [ -x "$BIN/gpu_consumer" ]; then
  timeout 80 "$BIN/gpu_consumer" --jpeg-dir "$DATA/bench" --repeat 8 --epochs 5 \
    --batch-size 256 --size 224 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/gpu-consumer-jpeg.log" | tail -n 25
  row gpu_consumer_jpeg "${PIPESTATUS[0]}" exit "examples/gpu_consumer, jpeg"
  # Plain key=value fields: device-check.sh sets NO_COLOR.
  verdict=$(grep -o 'verdict=.*' "$OUT/gpu-consumer-jpeg.log" | tail -n 1 | tr '\t' ' ')
  row gpu_util_verdict_jpeg - text "${verdict:-no NVML verdict logged}"
fi
if [ -x "$BIN/gpu_consumer" ] && [ "$quick" != 1 ]; then
  # 2a. The same with 4x the records (64 batches per epoch): each epoch starts with an
  #     empty pipeline (one batch of decode, ~13 ms), which weighs on the fed ratio
  #     in proportion to 1 / batches per epoch (rows jpeg_x32_*). Batches are handed
  #     out already waited on the consumer's stream (LoaderBuilder::cuda_stream).
  timeout 90 "$BIN/gpu_consumer" --jpeg-dir "$DATA/bench" --repeat 32 --epochs 3 --tag _x32 --on-stream \
    --batch-size 256 --size 224 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/gpu-consumer-jpeg-x32.log" | tail -n 25
  row gpu_consumer_jpeg_x32 "${PIPESTATUS[0]}" exit "examples/gpu_consumer --repeat 32 --on-stream, jpeg"
  # 2b. Same with one nvJPEG state per hardware lane (the decoder's default) instead of
  #     the loader's two (rows jpeg_states1_*): with one, a lane waits for the previous
  #     batch's engine work before it takes the next batch. (The GPU-hybrid share
  #     beside the engines is measured on decode alone, in the decode part.)
  timeout 60 "$BIN/gpu_consumer" --jpeg-dir "$DATA/bench" --repeat 8 --epochs 3 --states-per-lane 1 \
    --batch-size 256 --size 224 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/gpu-consumer-jpeg-states1.log" | tail -n 25
  row gpu_consumer_jpeg_states1 "${PIPESTATUS[0]}" exit "examples/gpu_consumer --states-per-lane 1, jpeg"
  # 2c. Same with 15 % of each batch's hardware images decoded on the CPUs, on the
  #     decoder's own pool (cores - lanes - 2 threads) beside the engines (rows jpeg_cpu15_*).
  timeout 60 "$BIN/gpu_consumer" --jpeg-dir "$DATA/bench" --repeat 8 --epochs 3 --cpu-share 0.15 \
    --batch-size 256 --size 224 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/gpu-consumer-jpeg-cpu15.log" | tail -n 25
  row gpu_consumer_jpeg_cpu15 "${PIPESTATUS[0]}" exit "examples/gpu_consumer --cpu-share 0.15, jpeg"
fi
if [ -x "$BIN/gpu_consumer" ]; then
  # 3. Raw pre-decoded records (H2D-bound): loader H2D GB/s vs the pinned ceiling.
  #    2,048 records (8 batches per epoch), 3 fed epochs: with 4 batches per epoch
  #    the per-epoch start and end weighed on the fed figures more than the stages.
  #    By default records go to the device straight from the page-locked dataset
  #    map, one cuMemcpyBatchAsync per batch (the backend line in the log says so).
  timeout 60 "$BIN/gpu_consumer" --jpeg-dir "$DATA/bench" --raw --repeat 4 --epochs 4 \
    --batch-size 256 --size 224 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/gpu-consumer-raw.log" | tail -n 25
  row gpu_consumer_raw "${PIPESTATUS[0]}" exit "examples/gpu_consumer --raw"
fi
if [ -x "$BIN/gpu_consumer" ] && [ "$quick" != 1 ]; then
  # 3'. The same with one cuMemcpyHtoDAsync per record (rows raw_per_record_*).
  STOKER_H2D_PER_RECORD=1 timeout 60 "$BIN/gpu_consumer" --jpeg-dir "$DATA/bench" --raw --repeat 4 --epochs 4 \
    --tag _per_record --batch-size 256 --size 224 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/gpu-consumer-raw-per-record.log" | tail -n 25
  row gpu_consumer_raw_per_record "${PIPESTATUS[0]}" exit "STOKER_H2D_PER_RECORD=1 examples/gpu_consumer --raw"
  # 3a. The same with write-combined pinned staging (rows raw_wc_*): does the H2D
  #     copy get closer to the pinned ceiling when the readers' writes bypass the caches?
  timeout 60 "$BIN/gpu_consumer" --jpeg-dir "$DATA/bench" --raw --repeat 4 --epochs 4 --write-combined \
    --batch-size 256 --size 224 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/gpu-consumer-raw-wc.log" | tail -n 25
  row gpu_consumer_raw_wc "${PIPESTATUS[0]}" exit "examples/gpu_consumer --raw --write-combined"
  # 3b. The same staged in pinned memory instead of copied from the page-locked
  #     dataset map: by non-temporal stores (rows raw_staged_*) and by plain memcpy
  #     (rows raw_memcpy_*).
  timeout 60 "$BIN/gpu_consumer" --jpeg-dir "$DATA/bench" --raw --repeat 4 --epochs 4 --staged \
    --batch-size 256 --size 224 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/gpu-consumer-raw-staged.log" | tail -n 25
  row gpu_consumer_raw_staged "${PIPESTATUS[0]}" exit "examples/gpu_consumer --raw --staged"
  timeout 60 "$BIN/gpu_consumer" --jpeg-dir "$DATA/bench" --raw --repeat 4 --epochs 4 --memcpy-staging \
    --batch-size 256 --size 224 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/gpu-consumer-raw-memcpy.log" | tail -n 25
  row gpu_consumer_raw_memcpy "${PIPESTATUS[0]}" exit "examples/gpu_consumer --raw --memcpy-staging"
fi
[ -x "$BIN/gpu_consumer" ] || row gpu_consumer missing exit "gpu_consumer not in BIN"
# 4. Where H2D time goes: pinned copies of one raw batch alone, in a ring, after idle
#    gaps, beside a kernel that fills the GPU, beside host threads copying or reading
#    (rows h2d_probe_*; examples/h2d_probe.rs).
if [ -x "$BIN/h2d_probe" ] && [ "$quick" != 1 ]; then
  timeout 60 "$BIN/h2d_probe" --threads 1,4,8,16 --tsv "$OUT/table.tsv" 2>&1 | tee "$OUT/h2d-probe.log" | tail -n 40
  row h2d_probe "${PIPESTATUS[0]}" exit "examples/h2d_probe"
fi
exit 0
