#!/usr/bin/env bash
# The tests under a sanitizer: `scripts/sanitizer.sh thread` (ThreadSanitizer) or
# `scripts/sanitizer.sh address` (AddressSanitizer). Arguments after the first go to
# pytest.
#
# - thread: data races a test run does not see, two threads touching the same memory, one
#   of them writing, with nothing ordering them. The loader's workers, prefetch and kept
#   batches, the converter's pipeline, verify's readers beside a writer, the SIGBUS
#   guard's table, the decoder's per-thread buffers and the Python package's locks all
#   share memory between threads.
# - address: reads and writes outside an allocation or after it was freed, anywhere in
#   the tests (the fuzzers run it on the parsers alone): the loader's unsafe batch code,
#   the shard maps, the SIGBUS guard, the DLPack capsules.
#
# Needs the nightly toolchain with rust-src (std is rebuilt with the instrumentation: a
# ThreadSanitizer run without it sees every lock and channel inside std as a race), and for
# the Python part gcc and GCC's runtime of the sanitizer (Debian's libtsan2 or libasan8),
# preloaded into the Python that loads the instrumented extension:
#   rustup component add --toolchain nightly rust-src
#   apt-get install libtsan2 libasan8
# Not part of `.ci/run`: the instrumented builds and runs take about half an hour each on
# two cores. docs/BENCHMARKS.md ("Sanitizers") has the runs. SANITIZER_RUST=0 skips the
# Rust part, SANITIZER_PYTHON=0 the Python part. What neither can see: CUDA and nvJPEG (no
# GPU here, and their threads are not instrumented), and Python's or NumPy's own memory.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
case $kind in
  thread | address) shift ;;
  *)
    echo "usage: $0 thread|address [pytest arguments]" >&2
    exit 2
    ;;
esac
target=x86_64-unknown-linux-gnu
# The plain builds (the Python tests' Rust children) stay where scripts/test.sh puts them.
plain_target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
# Frame pointers: the sanitizers record a stack at every allocation by following them,
# and std built without them cut those stacks short at its allocator, before the frame a
# suppression names.
export RUSTFLAGS="-Zsanitizer=$kind -Cforce-frame-pointers=yes" CARGO_UNSTABLE_BUILD_STD=std,panic_unwind
san_target=$plain_target/sanitizer-$kind
export CARGO_TARGET_DIR=$san_target
STOKER_DATA=${STOKER_DATA:-$PWD/testdata}
export STOKER_DATA
# The Rust tests' Python (the `lmdb` reader of the format check).
STOKER_PYTHON=$(scripts/python-venv.sh lmdb)
export STOKER_PYTHON
# The fault tests end children with a SIGBUS of their own on purpose; the sanitizer's
# handler of it would report the fault and exit instead of letting the signal end the
# process. The suppressions file says why each of its reports is the design; a
# suppression matches a frame of either access, so ThreadSanitizer keeps the longest
# history it can (history_size=7), or an older access's stack may be lost ("failed to
# restore the stack") and with it the frame. Leaks are looked for in the Rust part only
# (LeakSanitizer, with AddressSanitizer): the Python interpreter keeps much of what it
# allocates until exit.
if [[ $kind == thread ]]; then
  options_var=TSAN_OPTIONS
  supp=$PWD/scripts/sanitizer.d/thread.supp
  export TSAN_OPTIONS="handle_sigbus=0 history_size=7 suppressions=$supp ${TSAN_OPTIONS:-}"
  runtime=libtsan.so.2
else
  options_var=ASAN_OPTIONS
  export ASAN_OPTIONS="handle_sigbus=0 detect_leaks=1 ${ASAN_OPTIONS:-}"
  export LSAN_OPTIONS="suppressions=$PWD/scripts/sanitizer.d/address.supp ${LSAN_OPTIONS:-}"
  runtime=libasan.so.8
fi

# What the sanitizers cannot run:
# - a memory limit: their shadow memory needs address space that RLIMIT_AS (`ulimit -v`)
#   refuses, and it counts in RSS, which the large-image test bounds;
# - (address) RSS that falls when memory is freed, or stays flat over epochs: freed blocks
#   wait in AddressSanitizer's quarantine (256 MiB) before they are reused or returned;
# - (thread) threads started in the child of a fork from a process with threads:
#   "starting new threads after multi-threaded fork is not supported";
# - an allocation no machine can serve, whose failure is to reach Rust: the sanitizers'
#   allocators report it themselves (`allocator_may_return_null=0`).
# Each still runs natively in CI.
skip='test(=coefficients_of_separate_scans_that_cannot_be_allocated_are_an_error_not_an_abort)'
skip+=' | test(=a_failed_allocation_exits_3_with_a_message_and_other_aborts_stay_aborts)'
skip+=' | test(=concurrent_decodes_that_would_not_fit_together_wait_instead_of_aborting)'
skip+=' | test(=with_max_pixels_raised_an_image_larger_than_memory_is_refused_not_an_abort)'
skip+=' | test(=large_images_are_decoded_one_at_a_time_and_not_kept)'
if [[ $kind == thread ]]; then
  skip+=' | test(=a_child_forked_after_a_decoding_verify_verifies_too)'
  skip+=' | test(=a_child_forked_after_a_batch_decode_decodes_too)'
else
  skip+=' | test(=a_batch_kept_past_its_loader_frees_the_rest_of_the_ring)'
  skip+=' | test(=rss_is_flat_over_five_epochs)'
fi
if [[ ${SANITIZER_RUST:-1} != 0 ]]; then
  cargo +nightly nextest run --profile sanitizer --target "$target" \
    -p stoker-formats -p stoker-decode -p stoker-loader -p stoker --lib --bins --tests \
    -E "not ($skip)"
fi

[[ ${SANITIZER_PYTHON:-1} == 0 ]] && exit 0

# The Python package: the extension built with the instrumentation and put in a folder of
# its own that shadows the installed package, in the venv of scripts/python-test.sh. The
# tests' Rust children (the CLI, loader_dump) are the plain builds, as in that script.
libsan=$(gcc -print-file-name=$runtime)
if [[ ! -e $libsan ]]; then
  echo "$0: the Python part needs GCC's $runtime (Debian: apt-get install libtsan2 libasan8); SANITIZER_PYTHON=0 skips it" >&2
  exit 1
fi
scripts/python-test.sh --install-only
venv=$PWD/target/python-venv
PYO3_PYTHON=$venv/bin/python cargo +nightly build --target "$target" -p stoker-python
unset RUSTFLAGS CARGO_UNSTABLE_BUILD_STD
export CARGO_TARGET_DIR=$plain_target
cargo build --quiet --workspace --bin stoker --example loader_dump
pkg=$san_target/python-package
rm -rf "$pkg"
mkdir -p "$pkg/stoker"
cp python/stoker/*.py python/stoker/*.pyi python/stoker/py.typed "$pkg/stoker/"
cp "$san_target/$target/debug/lib_stoker.so" "$pkg/stoker/_stoker.abi3.so"
cp scripts/sanitizer.d/sitecustomize.py "$pkg/"
preload=$libsan
if [[ $kind == thread ]]; then
  gcc -O1 -shared -fPIC -o "$pkg/libtsan_entry_points.so" scripts/sanitizer.d/tsan_entry_points.c
  preload+=" $pkg/libtsan_entry_points.so"
fi
# Each report goes to a file of its own (log_path), as pytest keeps a passing test's
# output to itself and the tests' children close or redirect theirs.
logs=$san_target/python-reports
rm -rf "$logs"
mkdir -p "$logs"
# Left out, as in the Rust part: the tests that set RLIMIT_AS (test_memory_short.py, one
# of test_loader.py); for threads the one whose forked children start threads; for
# addresses the one that counts the RSS closed loaders give back.
deselect=(--deselect test_loader.py::test_batch_buffers_past_the_memory_limit_say_so
  --ignore test_memory_short.py)
if [[ $kind == thread ]]; then
  deselect+=(--deselect test_logging.py::test_a_forked_child_logs_its_own_events_while_the_parent_logs_on)
else
  deselect+=(--deselect test_loader.py::test_closed_loaders_give_their_memory_back_to_the_system)
fi
status=0
(
  cd tests/python
  export STOKER_SANITIZER_PRELOAD=$preload PYTHONPATH=$pkg
  export "$options_var=${!options_var} log_path=$logs/report"
  [[ $kind == address ]] && export ASAN_OPTIONS="$ASAN_OPTIONS detect_leaks=0"
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 "${deselect[@]}" "$@"
) || status=$?
if compgen -G "$logs/report*" >/dev/null; then
  echo "the sanitizer reported in the Python tests: $logs" >&2
  grep -h "^SUMMARY" "$logs"/report* | sort | uniq -c >&2
  exit 1
fi
exit "$status"
