#!/usr/bin/env bash
# The Rust tests, the zune-jpeg fork check and the Python package's tests that need no
# torch, on aarch64-unknown-linux-gnu (the Grace CPU of GH200 and GB200 nodes):
# cross-built here and run under qemu-user. On aarch64 our zune-jpeg fork decodes with its
# NEON paths, which no x86 test reaches, and `c_char`, the atomics' memory model and the
# libc structures differ from x86_64.
#
# Needs the aarch64 target, a cross C compiler and linker, and qemu-user registered with
# binfmt_misc, so that the test programs' own children (the fault and signal tests
# re-run themselves) and the CLI they start are aarch64 programs too. As root on Debian
# the script installs what is missing (scripts/aarch64-env.sh):
#   rustup target add aarch64-unknown-linux-gnu
#   apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static binfmt-support
# Not part of `.ci/run`: emulation makes the run take about as long as all of CI.
# docs/BENCHMARKS.md ("aarch64 under qemu-user") has the runs.
#
# qemu-user is not an aarch64 machine: the tests left out below check what it does not
# emulate, and need a real one. Each still runs on x86_64 in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/aarch64-env.sh
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# The stand-in CUDA driver of the fake-driver tests is compiled at run time with $CC and
# loaded by the aarch64 test process; anything built for this machine keeps its compiler.
export CC=aarch64-linux-gnu-gcc HOST_CC=cc
# Absolute: the tests run in their crates' folders and are given paths under it.
CARGO_TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-target}/aarch64")
export CARGO_TARGET_DIR
bin="$CARGO_TARGET_DIR/$target"
# The Rust tests' Python (the `lmdb` reader of the format check) runs on this machine.
STOKER_PYTHON=$(scripts/python-venv.sh lmdb)
export STOKER_PYTHON
# The bench set made by the aarch64 build: its bytes come from jpeg-encoder's code paths
# for this CPU, and one test compares a second make with the set the tests read.
cargo build --quiet --target "$target" -p stoker-testdata --bin make-bench-set
export STOKER_BENCH_DIR="$CARGO_TARGET_DIR/stoker-testdata/bench-v1"
"$bin/debug/make-bench-set" "$STOKER_BENCH_DIR"

# What qemu-user does not emulate:
# - RLIMIT_AS: the address space it counts is qemu's, which the guest's allocations do
#   not follow one for one, so the limit the memory_limit test sets from VmSize does not
#   bind;
# - fork in a process whose other threads are running can hang on qemu's own locks
#   (map_guard's and fork_open's fork tests count children still running after 5 s);
# - signal delivery as the kernel does it: a SIGBUS sent by another process to a thread
#   in `read` does not restart the call, and a handler raising SIGBUS again to ours in
#   front of it never ends;
# - `ulimit -f`: qemu writes its own copy of /proc/self/maps to a file before the
#   program's main runs, and dies of SIGXFSZ there under the merge test's limit of 512 B;
# - speed: the signal test stops `stoker decode` within 5-325 ms to land while the output
#   is being written, and emulation moves those points;
# - resident memory: qemu's cache of translated code grows as new code runs, which the
#   flat-RSS test (1 % over five epochs) counts.
skip='test(=coefficients_of_separate_scans_that_cannot_be_allocated_are_an_error_not_an_abort)'
skip+=' | test(=map_guard::tests::children_forked_while_threads_install_ours_never_hang)'
skip+=' | test(=children_forked_while_threads_open_datasets_open_them_too)'
skip+=' | test(=a_system_call_interrupted_by_a_sent_sigbus_restarts_as_without_ours)'
skip+=' | test(=a_fault_a_handler_raises_again_to_ours_in_front_of_itself_ends_the_process)'
skip+=' | test(=a_merge_out_of_room_says_nothing_was_removed_and_runs_again)'
skip+=' | test(=decode_output_stopped_by_a_signal_leaves_no_temporary_file)'
skip+=' | test(=rss_is_flat_over_five_epochs)'
cargo nextest run --target "$target" --workspace --profile qemu \
  --test-threads "$((2 * $(nproc)))" -E "not ($skip)"
# Our zune-jpeg fork against zune-jpeg as published, both on their NEON paths, as
# scripts/test.sh does on x86.
cargo build --quiet --release --target "$target" -p zune-patch-check
"$bin/release/zune-patch-check" testdata 8 40

# The Python package on aarch64: the aarch64 wheel (built and smoke-tested by wheel.sh,
# with its own compiler settings) in an aarch64 Debian root (scripts/aarch64-root.sh), and
# there the Python tests that need neither torch nor a GPU, from a copy of the tree, beside
# this build's `stoker` and `loader_dump`. test_memory_short.py is left out: it sets
# RLIMIT_AS (above).
cargo build --quiet --target "$target" --bin stoker --example loader_dump
env -u CC -u HOST_CC -u CC_aarch64_unknown_linux_gnu -u CARGO_TARGET_DIR \
  -u CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER \
  WHEEL_TARGET="$target" scripts/wheel.sh "$CARGO_TARGET_DIR/wheels"
aroot=$(scripts/aarch64-root.sh)
copy="$aroot/tmp/stoker-tree"
trap 'rm -rf "$copy"' EXIT
trap 'exit 130' INT TERM
rm -rf "$copy"
scripts/copy-tree.sh "$copy"
mkdir -p "$copy/target/debug/examples"
cp "$bin/debug/stoker" "$copy/target/debug/"
cp "$bin/debug/examples/loader_dump" "$copy/target/debug/examples/"
cp "$CARGO_TARGET_DIR"/wheels/stoker-*_aarch64.whl "$copy/"
files=$(cd tests/python && grep -L torch test_*.py | grep -vx test_memory_short.py | tr '\n' ' ')
inside=${copy#"$aroot"}
scripts/aarch64-in-root.sh "$aroot" "$inside" "
  python3 -m venv --system-site-packages venv
  venv/bin/python -m pip install --quiet --disable-pip-version-check --no-index --no-deps stoker-*_aarch64.whl
  cd tests/python
  ../../venv/bin/python -m pytest -q -p no:cacheprovider $files
" CARGO_TARGET_DIR="$inside/target"
echo "aarch64-check: passed"
