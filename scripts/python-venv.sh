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
  pip=("$venv/bin/python" -m pip --disable-pip-version-check)
  # One distribution at a time: pip keeps every wheel it downloads until the command ends,
  # and torch's, with its CUDA libraries, are gigabytes beside what they unpack into. So
  # resolve first (--dry-run --report, pip >= 22.2; PyPI serves the metadata alone), then
  # install each distribution by itself. A pip without --report installs everything in
  # one command.
  report=$(mktemp)
  if "${pip[@]}" install --quiet --dry-run --report "$report" "$@" 2>/dev/null; then
    # Each as `name @ url`, the file the resolver chose (an index's, a local path's).
    pins=$("$venv/bin/python" -c '
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    print(item["metadata"]["name"] + " @ " + item["download_info"]["url"])' "$report")
    rm -f "$report"
    while IFS= read -r pin; do
      [[ -z $pin ]] || "${pip[@]}" install --quiet --no-deps "$pin"
    done <<<"$pins"  # empty when all is installed already
  else
    rm -f "$report"
    "${pip[@]}" install --quiet "$@"
  fi
fi
echo "$PWD/$venv/bin/python"
