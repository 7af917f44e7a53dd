#!/usr/bin/env bash
# The Python package's tests (tests/python/test_*.py), self-contained: makes a virtual
# environment in target/python-venv, installs maturin, numpy, pytest (with pytest-xdist),
# torch and mypy into it from the registry, builds and installs the package from ./python,
# builds the Rust front ends the tests compare against, and runs pytest. Arguments go to
# pytest; `--install-only` installs the packages and stops (scripts/test.sh, while cargo
# compiles).
#
# Versions: each a release line known to pass, so that a new release upstream cannot turn
# the tests red by itself; moving a bound is a change to test. mypy exactly, as each
# release adds checks.
#
# torch because PyTorch users are whom the package is for: `torch.from_dlpack` of a batch
# and a `torch.distributed` group must be checked with torch itself, on every run, not
# skipped where it is missing. PyPI's Linux build is the CUDA one (about 5 GB with its
# CUDA libraries, installed once into the venv); it runs on the CPU here. A torch the
# machine's Python already has is used instead, if it is in the bounds below (the venv
# sees the system's packages).
#
# The package is built with cargo's dev profile here (dependencies optimized, our
# crates not), which reuses what `cargo test --workspace` already built where the
# features agree (stoker-python alone asks for fewer than the workspace's tests and
# benches, so some dependencies compile again); users get the release build from the
# README's `pip install ./python`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/python-venv
scripts/python-venv.sh 'maturin>=1.9.4,<2' 'numpy<3' 'pytest<10' 'pytest-xdist>=3.6,<4' 'torch<2.16' \
  'mypy==2.4.1' >/dev/null
[[ ${1:-} == --install-only ]] && exit 0
PATH="$PWD/$venv/bin:$PATH" MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/python" -m pip install --quiet \
  --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps ./python
# --workspace: cargo picks each dependency's features from the packages it builds, and the
# workspace's with their dev-dependencies (what `cargo test --workspace` built) is the set
# whose builds are already there. The root package alone would ask for other features, and
# syn, serde_derive, clap_derive and the rest would compile again.
cargo build --quiet --workspace --bin stoker --example loader_dump
cd tests/python
# One process per core, up to 4 (pytest-xdist): half of a test's time is spent waiting on
# the processes and threads it starts, so one process leaves a core idle. Not more: each
# test starts loaders with threads of their own. A `-n` in the arguments wins.
"../../$venv/bin/python" -m pytest -q -p no:cacheprovider -n auto --maxprocesses 4 "$@"
