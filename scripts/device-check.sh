#!/usr/bin/env bash
# Run ON THE GPU MACHINE (no Rust there): prepare here with
# scripts/device-prepare.sh, then call the device tool's `run` with
# `carry: [".device"]` and `bash scripts/device-check.sh`.
#
# Each part in scripts/device-check.d/*.sh runs with:
#   BIN  = .device/bin.tar.gz unpacked under /tmp (stoker, examples, test executables
#          `<package>-<target>`)
#   DATA = /tmp/stoker-device-data  (bench/, mixed/, mixed-baseline/: derived sets, made
#          here first, outside the tree: a run on the preparing machine would otherwise
#          leave them in .device/, past the transfer's 64 MiB)
#   STOKER_DATA = testdata (the corpus travels with the tree: photographs, conformance/)
#   OUT  = $OUT          (comes back; full logs go there)
# and appends rows `name<TAB>value<TAB>unit<TAB>note` to $OUT/table.tsv.
# The short table is printed last. PARTS=GLOB (e.g. PARTS="20-*") runs only matching parts.
# All parts together take longer than one device call may run (600 s), and a session's
# device time (15 min, start-up of a few minutes included) holds about two calls. Issue 21's
# acceptance in one call (run 8: 320 s for decode, mixed data and the raw window; the rows
# with nvJPEG's memory from stoker's caches (`*_cached`, decode/tests/gpu_memory.rs), the
# legacy-stream `beside_*` rows and the low-priority fed peer add about 150 s, most of it
# in part 50, and part 55's three runs of the locked part (`*_part`, `raw_staged`) perhaps
# 60 s: about 530 s in all):
#   PARTS="[15]*" PART_TIMEOUT=300 DECODE_SECONDS=2 BENCH_SECONDS=2 bash scripts/device-check.sh
# then, at once while the machine is warm, the loader's GPU tests, not yet run on this code
# (the bfloat16 kernel: kernel_matches_its_reference_on_the_gpu, gpu.rs's CPU/GPU
# comparisons of both bfloat16 layouts; and the datasets earlier builds wrote, on the GPU:
# golden_datasets_of_earlier_builds_load_on_the_gpu_as_on_the_cpu; run 4: 71 s for the
# whole part, with half of today's GPU loaders):
#   PARTS="20-*" QUICK=1 PART_TIMEOUT=200 bash scripts/device-check.sh
# Part 40-python (the Python package's GPU rows, python_bf16_gpu, a real ResNet-50 fed on
# mixed data; never run yet) needs more than a session's remainder: its two runs have limits
# of 300 s and 150 s, so PART_TIMEOUT=480 and a call of its own (the next session's first,
# or this one's second instead of part 20). Part 60 (blocking waits) was measured in run 7
# and is not part of these calls. Parts 30, 35 and 40-node-share (bench, cold epochs, node
# share) need a session of their own.
set -uo pipefail
cd "$(dirname "$0")/.."
# The binaries are unpacked outside the tree, afresh each run (a second, same-named
# .device/bin would travel with the next call, past the 64 MiB).
if [ -z "${BIN:-}" ] && [ -f .device/bin.tar.gz ]; then
  rm -rf /tmp/stoker-device-bin && mkdir -p /tmp/stoker-device-bin &&
    tar xzf .device/bin.tar.gz -C /tmp/stoker-device-bin && BIN=/tmp/stoker-device-bin/bin
fi
export BIN="${BIN:-$PWD/.device/bin}" DATA="${DATA:-/tmp/stoker-device-data}"
export STOKER_DATA="${STOKER_DATA:-$PWD/testdata}" STOKER_BENCH_DIR="${STOKER_BENCH_DIR:-$DATA/bench}"
export OUT="${OUT:-/tmp/stoker-device-out}"
mkdir -p "$OUT" "$DATA"
# The derived sets are made here from the photographs in the tree (a few seconds each)
# rather than carried: the transfer is capped at 64 MiB, tree included.
for set in bench mixed mixed-baseline; do
  [ -d "$DATA/$set" ] && continue
  case "$set" in
    bench) "$BIN/make-bench-set" "$DATA/bench" ;;
    mixed) "$BIN/make-mixed-set" "$DATA/mixed" ;;
    mixed-baseline) "$BIN/make-mixed-set" "$DATA/mixed-baseline" --baseline ;;
  esac >>"$OUT/data.log" 2>&1 || echo "making $DATA/$set failed: see $OUT/data.log"
done
# A safety net only: the library must find nvJPEG by itself.
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RUST_BACKTRACE=1
# tracing colours its key=value fields even into files unless told not to: the parts
# read those fields (the one place this is dealt with).
export NO_COLOR=1
# nvImageCodec, the second GPU-decode peer, when device-prepare.sh packed it: importable
# by every part's python3 (benches/peers/nvimagecodec_decode.py, compare.py).
if [ -f .device/nvimgcodec.tar.gz ]; then
  site=/tmp/stoker-nvimgcodec-site
  mkdir -p "$site" && tar xzf .device/nvimgcodec.tar.gz -C "$site" &&
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
: >"$OUT/table.tsv"
log="$OUT/device-check.log"
: >"$log"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
  python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)' || true
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\))' || true
} >>"$log" 2>&1
# Whether the CPUs are hyperthreads: the offload threads ran at half their idle speed
# under load (run 8), which two threads per core would explain.
printf '%s\t%s\t%s\t%s\n' "cpu_threads_per_core" \
  "$(lscpu 2>/dev/null | sed -n 's/^Thread(s) per core: *//p')" - "lscpu; $(nproc) CPUs" >>"$OUT/table.tsv"
status=0
for part in scripts/device-check.d/${PARTS:-*}.sh; do
  [ -f "$part" ] || continue
  name="$(basename "$part" .sh)"
  echo "=== $name" >>"$log"
  start=$(date +%s)
  timeout "${PART_TIMEOUT:-240}" bash "$part" >>"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    # A part's own `timeout CMD` puts CMD in a process group of its own, which the kill
    # of the part's group does not reach: what it ran would go on beside the next part
    # (and write into $OUT while it is packed). Every such command runs from $BIN or
    # from the parts' folder.
    pkill -KILL -f -- "$BIN/" 2>/dev/null
    pkill -KILL -f -- "device-check.d/" 2>/dev/null
    echo "part $name timed out after ${PART_TIMEOUT:-240} s; what it still ran was killed" >>"$log"
  fi
  printf '%s\t%s\t%s\t%s\n' "part:$name" "$rc" "exit" "$(( $(date +%s) - start )) s" >>"$OUT/table.tsv"
  [ "$rc" -eq 0 ] || status=1
done
# A GPU test that finds no GPU prints one line holding STOKER-GPU-SKIP (stoker_testdata::
# gpu_skip); on this machine that is a failure, whichever part ran it.
gpu_skips=$(cat "$log" "$OUT"/*.log 2>/dev/null | grep -c 'STOKER-GPU-SKIP' || true)
printf '%s\t%s\t%s\t%s\n' "gpu_test_skips" "$gpu_skips" "tests" "must be 0 on the GPU machine" >>"$OUT/table.tsv"
if [ "$gpu_skips" -ne 0 ]; then
  grep -ho 'STOKER-GPU-SKIP.*' "$log" "$OUT"/*.log 2>/dev/null | sort -u | head -20
  status=1
fi
# At most 8 files come back from $OUT: keep the table and the main log, pack the rest.
(
  cd "$OUT" || exit 0
  extra=$(ls -A | grep -v -x -e table.tsv -e device-check.log -e logs.tar.gz || true)
  if [ -n "$extra" ]; then
    # shellcheck disable=SC2086
    tar czf logs.tar.gz $extra && rm -rf $extra
  fi
)
echo "--- last 60 log lines"
tail -n 60 "$log"
echo "--- table"
column -t -s $'\t' "$OUT/table.tsv" || cat "$OUT/table.tsv"
exit $status
