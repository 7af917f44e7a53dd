#!/usr/bin/env bash
# Makes the virtual environment the scripts share (target/python-venv) and installs the
# given packages into it from the registry. A venv, not `pip install` into the machine's
# Python: Debian's and Ubuntu's refuse that (PEP 668, "externally-managed-environment").
# --system-site-packages: a torch installed on the machine is seen by the tests.
# Prints the environment's python.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/python-venv
if [[ ! -x $venv/bin/python ]]; then
  if ! python3 -m venv --system-site-packages "$venv"; then
    rm -rf "$venv"
    echo "stoker's scripts need Python 3 with its venv module (Debian/Ubuntu: apt install python3-venv)" >&2
    exit 1
  fi
fi
if (($#)); then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
fi
echo "$PWD/$venv/bin/python"
