#!/usr/bin/env bash
# One-time set-up on a fresh machine: checks the Rust toolchain, installs the
# Python packages the tests and peer benchmarks use into target/python-venv, and
# builds everything.
# No CUDA is needed at build time; on a GPU machine CUDA and nvJPEG are found
# at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null; then
  echo "stoker needs a Rust toolchain (1.88 or newer): https://rustup.rs" >&2
  exit 1
fi
py=$(scripts/python-venv.sh lmdb Pillow numpy)
cargo build --release --workspace --bins --examples
echo "set-up done: try 'cargo run --release --example quickstart'"
echo "(the peer benchmarks' Python, with Pillow and numpy: $py)"
