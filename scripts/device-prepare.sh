#!/usr/bin/env bash
# Run HERE (the CPU machine with the Rust toolchain) before a GPU-machine check:
# builds release binaries, examples and test executables, strips them, and
# copies them with the benchmark data into .device/ (git-ignored), which the
# device tool carries (`carry: [".device"]`). The whole transfer must stay
# under 64 MiB, so only what scripts/device-check.d/*.sh uses is copied.
#
# Test executables are named `<package>-<target>` (e.g. `stoker-loader-gpu`
# for loader/tests/gpu.rs, `stoker-decode-stoker_decode` for the decode lib's
# unit tests).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .device
mkdir -p .device/bin .device/data
cargo build --release --bins --examples
cp target/release/stoker .device/bin/
for ex in target/release/examples/*; do
  [ -f "$ex" ] && [ -x "$ex" ] || continue
  case "$(basename "$ex")" in *-*) continue ;; esac # skip hashed duplicates
  cp "$ex" .device/bin/
done
cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys, shutil
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m.get("profile", {}).get("test"):
        continue
    # package_id looks like "path+file:///work/main/loader#stoker-loader@0.1.0"
    # or "path+file:///work/main#0.1.0" for the root package.
    pid = m["package_id"]
    tail = pid.split("#", 1)[1] if "#" in pid else pid
    pkg = tail.split("@")[0] if "@" in tail else "stoker"
    target = m["target"]["name"]
    name = pkg + "-" + target
    shutil.copy(m["executable"], ".device/bin/" + name)
    print("test binary:", name)
'
# Keep only what scripts/device-check.d/*.sh runs (the transfer is capped at 64 MiB).
keep=" stoker gpu_consumer stoker-decode-gpu stoker-decode-gpu_throughput stoker-decode-conformance stoker-loader-gpu stoker-loader-stoker_loader "
for f in .device/bin/*; do
  case "$keep" in *" $(basename "$f") "*) strip "$f" ;; *) rm -f "$f" ;; esac
done
for b in $keep; do [ -e ".device/bin/$b" ] || echo "warning: $b was not built" >&2; done
# Binaries travel compressed (device-check.sh unpacks them): ~4x smaller.
tar czf .device/bin.tar.gz -C .device bin && rm -rf .device/bin
cp -r ../shared/data/bench .device/data/bench
cp -r ../shared/data/conformance .device/data/conformance
cp -r benches/peers .device/peers 2>/dev/null || true
du -sh .device .device/bin.tar.gz .device/data
total=$(du -sm .device | cut -f1)
if [ "$total" -gt 60 ]; then
  echo "warning: .device is ${total} MiB; the device tool carries at most 64 MiB with the tree" >&2
fi
