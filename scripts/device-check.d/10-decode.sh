#!/usr/bin/env bash
# Decode part of the device check (run by scripts/device-check.sh on the GPU machine).
# Needs in $BIN: stoker-decode-gpu (decode/tests/gpu.rs), stoker-decode-gpu_memory
# (decode/tests/gpu_memory.rs), stoker-decode-gpu_throughput
# (decode/tests/gpu_throughput.rs), stoker-decode-conformance (CPU reference run);
# in $DATA: bench/; in $STOKER_DATA: conformance/; python3 with torch/torchvision for the peer.
# Appends rows `name<TAB>value<TAB>unit<TAB>note` to $OUT/table.tsv.
set -uo pipefail
T="$OUT/table.tsv"
status=0

run_tests() { # name binary args...
  local name="$1" bin="$2"
  shift 2
  if [ ! -x "$bin" ]; then
    printf '%s\t%s\t%s\t%s\n' "$name" "missing" "-" "$bin not carried" >>"$T"
    status=1
    return
  fi
  "$bin" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local summary
  summary="$(grep -E '^test result' "$OUT/$name.log" | tail -1 | sed 's/^test result: //')"
  local skips
  skips="$(grep -c 'STOKER-GPU-SKIP' "$OUT/$name.log" || true)"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "exit" "${summary:-no summary}; ${skips} skipped" >>"$T"
  [ "$rc" -eq 0 ] && [ "$skips" -eq 0 ] || status=1
  cat "$OUT/$name.log"
}

# 1. Correctness: GPU output vs CPU output on the conformance corpus and the bench set,
#    every route exercised (the test asserts it), bad images failing alone.
run_tests decode_gpu_tests "$BIN/stoker-decode-gpu" --nocapture --test-threads=1
grep -o 'routes: .*' "$OUT/decode_gpu_tests.log" | sed 's/^/# /'
# 1b. The same tests with nvJPEG's memory from stoker's caches (NvjpegMemory::Cached): blocks
#     reused only after their stream has passed the free must still give the CPU's output.
STOKER_NVJPEG_MEMORY=cached run_tests decode_gpu_tests_cached "$BIN/stoker-decode-gpu" --nocapture --test-threads=1
#     And the caches' own tests: the same pixels as nvJPEG's allocators on the photographs,
#     nothing given back to CUDA once warm, everything given back when the decoder goes.
run_tests decode_gpu_memory_tests "$BIN/stoker-decode-gpu_memory" --nocapture --test-threads=1
grep -E '^(after|round|nvJPEG)' "$OUT/decode_gpu_memory_tests.log" | sed 's/^/# /'
# CPU conformance on this machine too (same binary as CI).
run_tests decode_cpu_conformance "$BIN/stoker-decode-conformance" --test-threads=1

# CLI on the GPU: `stoker decode --backend nvjpeg` on one bench file and one progressive file.
if [ -x "$BIN/stoker" ]; then
  for f in "$(ls "$DATA"/bench/*.jp*g | head -1)" "$STOKER_DATA/conformance/core/go__video-001.q50.420.progressive.jpeg"; do
    "$BIN/stoker" decode --backend nvjpeg --json "$f" >"$OUT/decode_cli.json" 2>>"$OUT/decode_cli.err"
    rc=$?
    route="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("route"))' "$OUT/decode_cli.json" 2>/dev/null)"
    printf '%s\t%s\t%s\t%s\n' "decode_cli_$(basename "$f")" "$rc" "exit" "route ${route:-?}" >>"$T"
    [ "$rc" -eq 0 ] || status=1
  done
fi

# 2. Throughput per route / lane count / host-side option, CPU all cores in the same run,
#    with the JPEG engines' utilization sampled meanwhile: `nvidia-smi dmon -s u` (utilization
#    group: sm mem enc dec jpg ofa) `-o DT` (date and time columns, so samples can be matched
#    to the rows' Unix-time spans) `-d 1` (one sample a second). The test prints
#    `ROWSPAN<TAB>row<TAB>start<TAB>end` around each timed loop; dmon_jpg.py (tested by
#    dmon_jpg_test.py, no GPU needed) adds a `<row>_jpg_util_pct` row per span.
if [ -x "$BIN/stoker-decode-gpu_throughput" ]; then
  dmon_pid=""
  dmon_log="$OUT/decode_dmon.log"
  if command -v nvidia-smi >/dev/null 2>&1; then
    # Line-buffered when stdbuf exists, so a killed dmon leaves every sample in the log.
    line_buffered=""
    command -v stdbuf >/dev/null 2>&1 && line_buffered="stdbuf -oL"
    $line_buffered nvidia-smi dmon -s u -o DT -d 1 >"$dmon_log" 2>&1 &
    dmon_pid=$!
    sleep 1
    if ! kill -0 "$dmon_pid" 2>/dev/null; then
      echo "nvidia-smi dmon exited at once:"
      cat "$dmon_log"
      wait "$dmon_pid" 2>/dev/null
      dmon_pid=""
    fi
  fi
  STOKER_BENCH_SECONDS="${DECODE_SECONDS:-5}" "$BIN/stoker-decode-gpu_throughput" \
    gpu_decode_throughput --exact --ignored --nocapture --test-threads=1 >"$OUT/decode_throughput.log" 2>&1 || status=1
  if [ -n "$dmon_pid" ]; then
    sleep 1 # one more sample after the last span
    kill "$dmon_pid" 2>/dev/null
    wait "$dmon_pid" 2>/dev/null
  fi
  grep -P '^ROW\t' "$OUT/decode_throughput.log" | cut -f2- >>"$T"
  if [ -s "$dmon_log" ]; then
    python3 "$(dirname "$0")/dmon_jpg.py" "$dmon_log" "$OUT/decode_throughput.log" >>"$T" ||
      printf '%s\t%s\t%s\t%s\n' decode_jpg_util - % "dmon_jpg.py failed, see $dmon_log" >>"$T"
  else
    printf '%s\t%s\t%s\t%s\n' decode_jpg_util - % "nvidia-smi dmon unavailable" >>"$T"
  fi
  # Issue 21 item 2: whether the engines or the host set the pace of the main rows
  # (rows <row>_host_busy_pct and <row>_bound; decode_bound.py, tested by decode_bound_test.py).
  python3 "$(dirname "$0")/decode_bound.py" "$T" decode_gpu_hw_lanes4 decode_gpu_hw_lanes7 \
    decode_gpu_hw_lanes4_overlap decode_gpu_hw_lanes4_overlap_states2 \
    decode_gpu_hw_lanes4_overlap_cpu_share_auto >>"$T" ||
    printf '%s\t%s\t%s\t%s\n' decode_bound - - "decode_bound.py failed" >>"$T"
  grep -E '^# (timings|nvJPEG|hardware)' "$OUT/decode_throughput.log"
  cat "$OUT/decode_throughput.log"
else
  printf '%s\t%s\t%s\t%s\n' decode_throughput missing - "stoker-decode-gpu_throughput not carried" >>"$T"
fi

# 2b. Does a decode call wait for unrelated work on another stream (a synchronization inside
#     the call) or only for SMs, with nvJPEG's allocators and with stoker's caches? Rows
#     beside_{hw,cuda}{,_cached}_{alone,one_block,one_block_legacy,all_sms}_ms,
#     beside_*_waits_for_{other_streams,legacy_stream}
#     and beside_*_cached_{device,pinned}_released (decode/tests/gpu_beside.rs).
if [ -x "$BIN/stoker-decode-gpu_beside" ]; then
  timeout 150 "$BIN/stoker-decode-gpu_beside" gpu_decode_beside_other_work --exact --ignored --nocapture \
    >"$OUT/decode_beside.log" 2>&1 || status=1
  grep -P '^ROW\t' "$OUT/decode_beside.log" | cut -f2- | tee -a "$T"
else
  printf '%s\t%s\t%s\t%s\n' decode_beside missing - "stoker-decode-gpu_beside not carried" >>"$T"
fi

# 3. Peer in the same run: torchvision batched GPU decode of the same files.
# The peers travel with the tree (the binaries are unpacked elsewhere).
PEERS="$(cd "$(dirname "$0")/../.." && pwd)/benches/peers"
if [ -f "$PEERS/torchvision_decode.py" ]; then
  python3 "$PEERS/torchvision_decode.py" "$DATA/bench" --device cuda --batch 256 --seconds "${DECODE_SECONDS:-5}" \
    >"$OUT/torchvision_decode.log" 2>&1
  OURS="decode_gpu_hw_lanes4 decode_gpu_hw_lanes4_cached decode_gpu_hw_lanes8 decode_gpu_cuda_only
    decode_gpu_hw_lanes4_no_prealloc decode_gpu_hw_lanes4_handle_per_lane decode_gpu_hw_lanes7
    decode_gpu_hw_lanes4_batch512 decode_gpu_hw_lanes4_overlap decode_gpu_hw_lanes4_overlap_states2
    decode_gpu_gpu_huffman_only decode_gpu_hw_lanes4_overlap_gpu_huffman40
    decode_gpu_hw_lanes4_cpu_share25 decode_gpu_hw_lanes4_cpu_share15
    decode_gpu_hw_lanes4_cpu_share25_all_cores decode_gpu_hw_lanes4_cpu_share_auto
    decode_gpu_hw_lanes4_overlap_cpu_share_auto"
  # shellcheck disable=SC2086 # OURS is a list of row names
  python3 "$(dirname "$0")/peer_rows.py" "$OUT/torchvision_decode.log" "$T" \
    --name torchvision_decode_jpeg_cuda --suffix vs_torchvision $OURS
  # 4. Second peer in the same run: nvImageCodec's hardware and CUDA backends, when carried.
  python3 "$PEERS/nvimagecodec_decode.py" "$DATA/bench" --backend all --batch 256 \
    --seconds "${DECODE_SECONDS:-5}" >"$OUT/nvimagecodec_decode.log" 2>&1
  python3 "$(dirname "$0")/peer_rows.py" "$OUT/nvimagecodec_decode.log" "$T" \
    --suffix vs_nvimagecodec_hw --ratio-peer nvimagecodec_hw \
    decode_gpu_hw_lanes4 decode_gpu_hw_lanes4_overlap decode_gpu_hw_lanes4_overlap_gpu_huffman40
else
  printf '%s\t%s\t%s\t%s\n' torchvision_decode_jpeg_cuda - img/s "peers not carried" >>"$T"
fi
exit $status
