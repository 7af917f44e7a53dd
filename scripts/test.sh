#!/usr/bin/env bash
# The README's test command: installs the Python packages the cross-language tests use
# (the `lmdb` reader for the format check), then runs every test, Rust and Python. Everything the tests
# read is inside the repository (testdata/, examples/data/); nothing beside it is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's end, in seconds since the start (CI's time, phase by phase).
lap() { echo "test.sh: $1 done at ${SECONDS}s" >&2; }
# Into the scripts' virtual environment; the tests that run Python take it from
# STOKER_PYTHON (not PATH: pyo3's build script reruns whenever PATH changes).
py=$(scripts/python-venv.sh lmdb)
# The Python tests' packages (torch's wheels are gigabytes) download and unpack while cargo
# compiles: the network and the disk work beside a build that keeps the cores busy. The
# Rust tests' Python needs only `lmdb`, installed above.
# In a process group of its own, so that a failed or interrupted run stops pip too.
installs=$(mktemp)
setsid scripts/python-test.sh --install-only >"$installs" 2>&1 &
installing=$!
trap 'kill -- -"$installing" 2>/dev/null || true; rm -f "$installs"' EXIT
# The Rust tests. With cargo-nextest where the machine has it (.config/nextest.toml): the
# test binaries run side by side instead of one after another, two tests per core, since
# most of a test's time is spent waiting on the threads and processes it starts; its
# doctests then run through cargo (our zune-jpeg fork's are upstream's, which name the
# crate `zune_jpeg`: its manifest turns them off, which `--doc` would override). The Python
# crate stays selected though it has none: without it cargo unifies other features for the
# dependencies, and would compile them again before the first doctest.
# Without cargo-nextest, `cargo test` runs the same tests.
if cargo nextest --version >/dev/null 2>&1; then
  STOKER_PYTHON="$py" cargo nextest run --workspace --test-threads "$((2 * $(nproc)))"
  STOKER_PYTHON="$py" cargo test --workspace --doc --exclude stoker-zune-jpeg
else
  STOKER_PYTHON="$py" cargo test --workspace
fi
lap "Rust tests"
if ! wait "$installing"; then
  cat "$installs" >&2
  echo "test.sh: installing the Python tests' packages failed (above)" >&2
  exit 1
fi
lap "Python packages"
# The Python package (python/): builds it into the virtual environment under target/ that
# has the packages installed above, and runs pytest over tests/python.
scripts/python-test.sh
lap "Python tests"
# The GPU transform kernel compiled by NVRTC, which needs no GPU: the NVRTC wheel is one
# of PyTorch's dependencies, so this usually installs nothing.
scripts/python-venv.sh nvidia-cuda-nvrtc >/dev/null
nvrtc_dir=$(dirname "$(ls target/python-venv/lib/python3*/site-packages/nvidia/cu*/lib/libnvrtc.so.* | head -1)")
STOKER_NVRTC_DIR="$PWD/$nvrtc_dir" STOKER_PYTHON="$py" cargo test --workspace --lib -- nvrtc_compiles_the_transform_kernel --nocapture
# Our zune-jpeg fork against zune-jpeg as published, on every JPEG of testdata/ and mutants
# of each. Fails on any difference in pixels or errors (decode/vendor/zune-jpeg/STOKER-PATCH.md).
# 8 mutants per baseline file and 40 per progressive one (about 4,300 cases, as many as
# the old corpus with the bench set gave at 4 and 20).
cargo run --quiet --release -p zune-patch-check -- testdata 8 40
lap "zune-jpeg fork check"
# The device check's Python helpers: the `nvidia-smi dmon` parser, the pace verdict and the
# peer-row writer (no GPU needed).
python3 scripts/device-check.d/dmon_jpg_test.py
python3 scripts/device-check.d/decode_bound_test.py
python3 scripts/device-check.d/peer_rows_test.py
# The source-shape check (module cycles, file and function length) on made-up crates.
python3 scripts/arch_check_test.py
# The wheel's third-party notices: which licence texts go in, and what stops the script.
python3 scripts/notices_test.py
