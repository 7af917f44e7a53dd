#!/usr/bin/env bash
# The unsafe code that runs without a GPU, under Miri, which reports undefined behaviour
# that a native test run and the fuzzers' AddressSanitizer let through (a read past a
# slice that stays inside its allocation, uninitialised bytes, a pointer used after the
# borrow it came from ended). Needs the nightly toolchain with Miri:
#   rustup component add --toolchain nightly miri rust-src
# Not part of `.ci/run`: Miri interprets every instruction, and even a small JPEG's decode
# is slow under it. By default: nvJPEG's allocator callbacks and block caches (over a fake
# backing), the DLPack export and batches handed out through it, and the tiniest
# conformance files through every CPU decode; MIRI_ALL=1 adds every conformance file up to
# 20,000 pixels (a run of hours). docs/BENCHMARKS.md ("Miri") has the runs and their times. What it cannot reach: calls into C (the CUDA driver, nvJPEG, NVML, libc's
# mmap and fork, signal handlers), which Miri does not run.
set -euo pipefail
cd "$(dirname "$0")/.."
# Files are read (the conformance corpus); CUDA addresses are integers cast to pointers.
export MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-permissive-provenance ${MIRIFLAGS:-}"
cargo +nightly miri test -p stoker-decode --lib -- nvjpeg::allocator nvjpeg::block_cache
cargo +nightly miri test -p stoker-loader --lib -- dlpack:: batch::
# The decodes with AVX2 and FMA enabled, so that zune-jpeg's SIMD paths run (the ones x86
# machines take), in a target folder of its own, as other flags rebuild every crate. Each
# file is named on stderr as it starts.
tests=tiny
if [ "${MIRI_ALL:-0}" = 1 ]; then
  tests=
fi
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/miri-avx2" RUSTFLAGS="-Ctarget-feature=+avx2,+fma" \
  cargo +nightly miri test -p stoker-decode --test small_inputs -- --test-threads 1 $tests
