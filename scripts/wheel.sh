#!/usr/bin/env bash
# scripts/wheel.sh [OUT]: the Python package as users install it on machines without a
# Rust toolchain (a cluster's login node, a training container), and the proof that it
# installs and works there. Writes into OUT (default target/wheels):
#
# - one abi3 wheel for CPython >= 3.9 on x86-64 Linux with glibc >= 2.28
#   (manylinux_2_28: RHEL/Rocky 8, Ubuntu 20.04, Debian 11 and later; the floor of
#   PyTorch's own wheels, so a machine that installs torch installs this);
# - the sdist, for every other platform (aarch64 Grace Hopper nodes, musl): it carries
#   the workspace crates the package builds from, and builds with a Rust toolchain.
#
# The wheel is linked by zig (the `ziglang` package from PyPI, through maturin's --zig)
# against glibc 2.28's symbol versions: built with the machine's own linker, the
# extension asked for the glibc it was built on (2.34 and later for pthread_create and
# dlopen here), and `pip` refused it on older systems. `--auditwheel check` fails the
# build when the extension needs a library outside the manylinux policy (CUDA and
# nvJPEG are opened at run time, never linked).
#
# Then each artefact is installed into a fresh virtual environment (no system packages,
# no torch, no cargo on PATH) and tests/wheel/smoke.py runs from outside the repository:
# convert the bundled sample, verify it, iterate an epoch through NumPy's DLPack, run the
# `stoker` command. The wheel also under the oldest and newest other CPython (>= 3.9) the
# machine has, if any: on the CI machine, pyenv's 3.9 and 3.13 beside the system's 3.11.
#
# WHEEL_TARGET=aarch64-unknown-linux-gnu scripts/wheel.sh [OUT]: the same wheel for
# aarch64 (the Grace CPU of GH200 and GB200 nodes) instead, and no sdist. It is
# smoke-tested by the aarch64 CPython of a Debian root (scripts/aarch64-root.sh) under
# qemu-user, with Debian's NumPy (scripts/aarch64-smoke.sh). Needs root for the chroot;
# not part of `.ci/run`.
set -euo pipefail
cd "$(dirname "$0")/.."
cross=()
if [ -n "${WHEEL_TARGET:-}" ]; then
  [ "$WHEEL_TARGET" = aarch64-unknown-linux-gnu ] ||
    { echo "wheel.sh: WHEEL_TARGET: only aarch64-unknown-linux-gnu is built" >&2; exit 2; }
  . scripts/aarch64-env.sh
  cross=(--target "$target")
fi
root=$PWD
out=${1:-target/wheels}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -n "${WHEEL_TARGET:-}" ]; then
  rm -f "$out"/stoker-*_aarch64.whl
else
  rm -f "$out"/stoker-*_x86_64.whl "$out"/stoker-*.tar.gz
fi
maturin='maturin>=1.9.4,<2'
py=$(scripts/python-venv.sh "$maturin" 'ziglang==0.17.1')
tools="$(dirname "$py")"
# `python -m maturin` runs the `maturin` program from the environment's own scripts folder.
# A maturin the venv sees only through --system-site-packages (one in the machine's Python)
# keeps it elsewhere, and maturin then stops with "Unable to find `maturin` script": the
# venv gets its own.
if [[ ! -x $tools/maturin ]]; then
  "$py" -m pip install --quiet --disable-pip-version-check --ignore-installed --no-deps "$maturin"
fi
# Its own target directory: zig as the linker changes every crate's build flags, and
# sharing target/ with the tests' builds would rebuild them all on every switch.
export CARGO_TARGET_DIR="$root/target/wheel"
# The wheel is stripped (--strip): the release profile's line tables would be compiled only
# to be thrown away.
export CARGO_PROFILE_RELEASE_DEBUG=false
manylinux=(--zig --compatibility manylinux_2_28 --auditwheel check)
PATH="$tools:$PATH" "$py" -m maturin build --quiet --release --strip "${manylinux[@]}" \
  "${cross[@]}" -m python/Cargo.toml -o "$out"
if [ -n "${WHEEL_TARGET:-}" ]; then
  wheel=$(ls "$out"/stoker-*-cp39-abi3-manylinux_2_28_aarch64.whl)
else
  PATH="$tools:$PATH" "$py" -m maturin sdist -m python/Cargo.toml -o "$out"
  wheel=$(ls "$out"/stoker-*-cp39-abi3-manylinux_2_28_x86_64.whl)
  sdist=$(ls "$out"/stoker-*.tar.gz)
fi

# The sdist: the crates it builds from, none of the test data (the build never reads it;
# testdata/Cargo.toml's `include` keeps the corpus out). A missing crate fails the build
# below; this names what went wrong first.
[ -n "${WHEEL_TARGET:-}" ] || "$py" - "$sdist" <<'EOF'
import sys, tarfile
names = tarfile.open(sys.argv[1]).getnames()
top = names[0].split("/")[0]
rel = {n[len(top) + 1:] for n in names}
for need in ("pyproject.toml", "LICENSE-MIT", "LICENSE-APACHE", "LICENSE-THIRD-PARTY", "python/Cargo.toml", "formats/Cargo.toml", "decode/Cargo.toml",
             "loader/Cargo.toml", "decode/vendor/zune-jpeg/Cargo.toml", "stoker/__init__.py"):
    if not any(r == need or r.endswith("/" + need) for r in rel):
        sys.exit(f"wheel.sh: the sdist lacks {need}")
bad = [r for r in rel if r.lower().endswith((".jpg", ".jpeg", ".png", ".tar", ".lmdb"))]
if bad:
    sys.exit(f"wheel.sh: the sdist carries test data: {sorted(bad)[:5]}")
print(f"wheel.sh: sdist {len(rel)} files", file=sys.stderr)
EOF

# The wheel's metadata: both licences, the notices of the crates linked in (as
# scripts/notices.py wrote them), and the README as the description (a package index's
# page).
"$py" - "$wheel" python/LICENSE-THIRD-PARTY <<'EOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = set(z.namelist())
info = next(n for n in names if n.endswith(".dist-info/METADATA"))
for lic in ("LICENSE-MIT", "LICENSE-APACHE", "LICENSE-THIRD-PARTY"):
    if info.replace("METADATA", "licenses/" + lic) not in names:
        sys.exit(f"wheel.sh: the wheel lacks {lic}")
notices = z.read(info.replace("METADATA", "licenses/LICENSE-THIRD-PARTY"))
if notices != open(sys.argv[2], "rb").read():
    sys.exit("wheel.sh: the wheel's LICENSE-THIRD-PARTY is not python/LICENSE-THIRD-PARTY")
if "Description-Content-Type: text/markdown" not in z.read(info).decode():
    sys.exit("wheel.sh: the wheel has no description")
EOF

# Installs `$1` (a wheel) into a fresh environment of the interpreter `$2` (default
# python3) and runs the smoke test there, with a PATH that has no cargo or rustc: nothing
# may be compiled on the user's side.
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
smoke() {
  rm -rf "$fresh/venv"
  "${2:-python3}" -m venv "$fresh/venv"
  "$fresh/venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: "$1" numpy
  local site
  site=$("$fresh/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  (cd "$fresh" && env -i HOME="$HOME" PATH=/usr/bin:/bin LANG=C.UTF-8 \
    "$fresh/venv/bin/python" "$root/tests/wheel/smoke.py" "$root/examples/data/sample" "$site")
}
if [ -n "${WHEEL_TARGET:-}" ]; then
  scripts/aarch64-smoke.sh "$wheel"
  ls -l "$wheel" | awk '{print "wheel.sh: " $5 " bytes " $NF}' >&2
  exit 0
fi
smoke "$wheel"
# One abi3 wheel claims every CPython from 3.9 on: also the oldest and the newest other
# CPython this machine has (on PATH, or pyenv's), when it has any.
others=$(
  for candidate in python3.{9..14} "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.*/bin/python3; do
    py=$(command -v "$candidate") || continue
    # A CPython >= 3.9 that can make a venv with pip (Debian's needs python3-venv);
    # pyenv's shims on PATH answer only for the version selected, and fail here else.
    "$py" -c 'import sys, ensurepip, venv
sys.exit(sys.version_info < (3, 9) or sys.implementation.name != "cpython")' 2>/dev/null || continue
    echo "$("$py" -c 'import sys; print(sys.version_info[1])') $py"
  done | sort -n | awk -v own="$(python3 -c 'import sys; print(sys.version_info[1])')" \
    '$1 != own && !seen[$1]++ {v[n++] = $2} END {if (n) print v[0]; if (n > 1) print v[n-1]}'
)
for other in $others; do
  echo "wheel.sh: the wheel on $("$other" --version 2>&1) ($other)" >&2
  smoke "$wheel" "$other"
done

# The sdist as pip builds it where no wheel fits, here with the same zig link so that its
# wheel is checked against the same policy; the registry's crates are reused from the
# target directory above, the workspace's are compiled from the unpacked sdist.
PATH="$tools:$PATH" MATURIN_PEP517_ARGS="${manylinux[*]}" "$py" -m pip wheel --quiet \
  --disable-pip-version-check --no-deps --no-build-isolation -w "$fresh/from-sdist" "$sdist"
smoke "$(ls "$fresh"/from-sdist/stoker-*-cp39-abi3-manylinux_2_28_x86_64.whl)"
ls -l "$wheel" "$sdist" | awk '{print "wheel.sh: " $5 " bytes " $NF}' >&2
