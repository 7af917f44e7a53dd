#!/usr/bin/env bash
# Device-check part (see scripts/device-check.sh): the GPU path under a process limit
# below the threads it starts (a container's pids.max, `ulimit -u`). The GPU decoder's
# per-batch threads and parallel steps fall back to the calling thread where no thread
# can start (decode/src/threads.rs); on the CPU machine only that fallback's unit test
# and the CPU path could be run. About 60 s.
# Env: BIN (release binaries), DATA (bench/), OUT (comes back). BENCH_DEVICE=cpu runs the
# same checks on a machine without a GPU (how this script is tested).
# Rows appended to $OUT/table.tsv: threads:<limit>:<command> with the exit status
# (0, or 1 with a message; 101 = a panic, 128+ = a signal: both failures).
set -uo pipefail
cd "$(dirname "$0")/../.."
DEVICE="${BENCH_DEVICE:-cuda:0}"
LIMITS="${THREAD_LIMITS:-6 12 24}"
work="$(mktemp -d)"
group=""
cleanup() {
  [ -n "$group" ] && { echo max >"$group/pids.max"; rmdir "$group"; } 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4//$'\t'/ }" >>"$OUT/table.tsv"; }

# How to limit one command's threads: a pids cgroup of our own (v1, or v2 where the pids
# controller is delegated), else RLIMIT_NPROC as an unprivileged user (root ignores it).
# THREAD_LIMIT_WITH=nproc skips the cgroup (to test the other way).
for g in /sys/fs/cgroup/pids/stoker-check /sys/fs/cgroup/stoker-check; do
  [ "${THREAD_LIMIT_WITH:-}" = nproc ] && break
  if mkdir -p "$g" 2>/dev/null && [ -w "$g/pids.max" ] && echo max >"$g/pids.max" 2>/dev/null; then
    group="$g"
    break
  fi
  rmdir "$g" 2>/dev/null
done
limited() { # limit, command...
  local n=$1
  shift
  if [ -n "$group" ]; then
    echo "$n" >"$group/pids.max"
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$group" "$@"
    local rc=$?
    echo max >"$group/pids.max"
    return $rc
  fi
  # nobody's own processes count against its limit: none are expected here.
  setpriv --reuid=65534 --regid=65534 --clear-groups prlimit --nproc="$n" "$@"
}
how="pids cgroup $group"
if [ -z "$group" ]; then
  if ! command -v setpriv >/dev/null || ! command -v prlimit >/dev/null; then
    row "threads:skipped" "null" "-" "no writable pids cgroup, no setpriv/prlimit"
    exit 1
  fi
  how="RLIMIT_NPROC as uid 65534"
fi
echo "limiting with: $how"

# The bench set, converted as part 30 does, readable by uid 65534.
( cd "$DATA/bench" && ls -1 *.jpg | sed 's/$/,0/' ) >"$work/list.csv"
"$BIN/stoker" convert -q "$DATA/bench" "$work/ds" --list "$work/list.csv" --shards 4 \
  >"$OUT/threads-convert.log" 2>&1 || { cat "$OUT/threads-convert.log"; exit 1; }
chmod -R a+rX "$work"

failed=0
for n in $LIMITS; do
  # Every stage: the decoder alone on batches (routing, lanes, CPU fallback and share)
  # and the loader's GPU path end to end.
  for what in bench; do
    cmd=("$BIN/stoker" bench "$work/ds" --device "$DEVICE" --batch 256 --seconds 1)
    log="$OUT/threads-$n-$what.log"
    limited "$n" "${cmd[@]}" >"$log" 2>&1
    rc=$?
    note="$(grep -m1 -i -E 'panicked|cannot start|error' "$log" | cut -c1-150)"
    if [ "$rc" -gt 1 ] || grep -q -i 'panicked' "$log"; then
      failed=1
      note="FAIL: $note"
    fi
    row "threads:$n:$what" "$rc" "exit" "${note:-ok ($how)}"
    echo "pids $n $what: exit $rc ${note}"
  done
done
exit $failed
