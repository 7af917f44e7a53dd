#!/usr/bin/env bash
# scripts/aarch64-smoke.sh WHEEL: tests/wheel/smoke.py run by an aarch64 CPython on the
# aarch64 wheel that `WHEEL_TARGET=aarch64-unknown-linux-gnu scripts/wheel.sh` built: in a
# fresh virtual environment of an aarch64 Debian root (scripts/aarch64-root.sh) entered
# with chroot (scripts/aarch64-in-root.sh), its programs run by qemu-user. NumPy is
# Debian's (1.24), so the DLPack exchange is also checked against a NumPy older than the
# one from PyPI that the x86 smoke test installs. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=$(realpath "$1")
. scripts/aarch64-env.sh
aroot=$(scripts/aarch64-root.sh)
work=$(mktemp -d "$aroot/tmp/stoker-smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
cp "$wheel" tests/wheel/smoke.py "$work/"
cp -r examples/data/sample "$work/sample"
scripts/aarch64-in-root.sh "$aroot" "${work#"$aroot"}" "
  python3 -m venv --system-site-packages venv
  venv/bin/python -m pip install --quiet --disable-pip-version-check --no-index --no-deps $(basename "$wheel")
  venv/bin/python -c 'import platform; print(\"aarch64-smoke: CPython\", platform.python_version(), platform.machine())'
  venv/bin/python smoke.py sample \"\$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')\"
"
