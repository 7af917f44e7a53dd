#!/usr/bin/env bash
# The README's test command: installs the Python packages the cross-language
# tests use (the `lmdb` reader for the format check), then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c 'import lmdb' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check lmdb
fi
cargo test --workspace
# The zune-jpeg patch against zune-jpeg as published, on every JPEG of ../shared/data and
# mutants of each (decode/vendor/zune-patch-check: its own workspace, since the main one
# patches zune-jpeg everywhere). Fails on any difference in pixels or errors.
cargo run --quiet --release --manifest-path decode/vendor/zune-patch-check/Cargo.toml -- ../shared/data
# The device check's Python helpers: the `nvidia-smi dmon` parser and the peer-row writer (no GPU needed).
python3 scripts/device-check.d/dmon_jpg_test.py
python3 scripts/device-check.d/peer_rows_test.py
