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
mkdir -p .device/bin
cargo build --release --bins --examples
cargo build --release -p stoker-loader --example cold_epoch
cargo build --release -p stoker-testdata --bins
cp target/release/stoker target/release/make-bench-set target/release/make-mixed-set .device/bin/
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
keep=" stoker make-bench-set make-mixed-set gpu_consumer h2d_probe node_share cold_epoch stoker-decode-gpu stoker-decode-gpu_throughput stoker-decode-gpu_beside stoker-decode-gpu_memory stoker-decode-conformance stoker-loader-gpu stoker-loader-stoker_loader "
for f in .device/bin/*; do
  case "$keep" in *" $(basename "$f") "*) strip "$f" ;; *) rm -f "$f" ;; esac
done
for b in $keep; do [ -e ".device/bin/$b" ] || echo "warning: $b was not built" >&2; done
# Binaries travel compressed (device-check.sh unpacks them): ~4x smaller.
tar czf .device/bin.tar.gz -C .device bin && rm -rf .device/bin
# No data is carried: testdata/ travels with the tree, and device-check.sh derives the bench
# and mixed sets there with make-bench-set and make-mixed-set.
# Optional peer: NVIDIA nvImageCodec (not installed on the GPU machine). Its wheel is fetched
# once into .whl/ (git-ignored) and travels trimmed to what the JPEG peer loads, for the
# device's Python 3.12: the module, the core library and the nvJPEG extension (~13 MB
# unpacked instead of 70). No nvidia/__init__.py: `nvidia` stays a namespace package, so
# torch's own nvidia.* packages still import.
NVIMGCODEC=nvidia-nvimgcodec-cu13==0.9.0.20
if ! ls .whl/nvidia_nvimgcodec_cu13-*.whl >/dev/null 2>&1; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    -d .whl "$NVIMGCODEC" || echo "note: $NVIMGCODEC not downloaded; the nvImageCodec peer rows will say so" >&2
fi
if wheel=$(ls .whl/nvidia_nvimgcodec_cu13-*.whl 2>/dev/null | head -1) && [ -n "$wheel" ]; then
  site=$(mktemp -d)
  unzip -q "$wheel" -d "$site" 'nvidia/nvimgcodec/__init__.py' 'nvidia/nvimgcodec/libnvimgcodec.so.0' \
    'nvidia/nvimgcodec/nvimgcodec_impl.cpython-312-*' 'nvidia/nvimgcodec/extensions/libnvjpeg_ext.so.*'
  tar czf .device/nvimgcodec.tar.gz -C "$site" nvidia
  rm -rf "$site"
fi
# The Python package (part 40-python.sh): one abi3 wheel, stripped, for the device's
# CPython; tagged plain linux_x86_64 (no manylinux audit: it only travels to the device).
# maturin from the scripts' venv (as wheel.sh takes it), not installed into the machine's
# Python.
if py=$(scripts/python-venv.sh 'maturin>=1.9.4,<2'); then
  PATH="$(dirname "$py"):$PATH" "$py" -m maturin build --quiet --release --strip --compatibility linux \
    --auditwheel skip -m python/Cargo.toml -o .device/wheels ||
    echo "note: the Python wheel was not built; part 40-python will say so" >&2
else
  echo "note: maturin could not be installed; part 40-python will say so" >&2
fi
du -sh .device .device/bin.tar.gz
total=$(du -sm .device | cut -f1)
if [ "$total" -gt 60 ]; then
  echo "warning: .device is ${total} MiB; the device tool carries at most 64 MiB with the tree" >&2
fi
