#!/usr/bin/env bash
# The Python package (issue 17) on the GPU machine. Needs:
#   .device/wheels/stoker-*.whl   (built by scripts/device-prepare.sh; abi3, any CPython >= 3.9)
#   $BIN/gpu_consumer             (the Rust loader's row in the same run)
#   $DATA/bench, $DATA/mixed      (512 ImageNet-like JPEGs; the mixed set)
#   python3 with torch (CUDA) and torchvision (the peer) — installed on the machine.
# Appends rows to $OUT/table.tsv (see python_loader.py for each row).
set -uo pipefail
: "${BIN:?}" "${DATA:?}" "${OUT:?}"
here="$(cd "$(dirname "$0")" && pwd)"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$OUT/table.tsv"; }
wheel=$(ls "$here"/../../.device/wheels/stoker-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
  row python_package missing - "no wheel in .device/wheels (scripts/device-prepare.sh builds it)"
  exit 1
fi
# A private target directory: nothing on the machine's Python is changed; torch and
# torchvision come from the machine's site-packages.
site=/tmp/stoker-python-site
rm -rf "$site"
python3 -m pip install --quiet --no-deps --no-index --target "$site" "$wheel" || {
  row python_package install-failed - "$wheel"
  exit 1
}
PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" timeout 300 python3 "$here/python_loader.py" "$DATA/bench" \
  --tsv "$OUT/table.tsv" --repeat 8 --epochs 4 --rust-consumer "$BIN/gpu_consumer" --resnet50 2>&1 |
  tee "$OUT/python-loader.log" | tail -n 40
status="${PIPESTATUS[0]}"
# The fed ratio of a real ResNet-50 step on mixed data (issue 21): the mixed set
# (25 % progressive, ImageNet-like sizes) x8, two fed epochs.
if [ -d "$DATA/mixed" ]; then
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" timeout 150 python3 "$here/python_loader.py" "$DATA/mixed" \
    --tsv "$OUT/table.tsv" --repeat 8 --epochs 2 --resnet50-only --tag _mixed 2>&1 |
    tee "$OUT/python-resnet50-mixed.log" | tail -n 12
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
exit "$status"
