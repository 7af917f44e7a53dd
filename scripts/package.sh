#!/usr/bin/env bash
# `cargo package` for every published crate, in dependency order (the fork, decode, formats,
# loader, stoker), each built from its packaged sources against the others' packages; then
# checks that no package carries the test corpus and prints each package's size.
set -euo pipefail
cd "$(dirname "$0")/.."
crates=(stoker-zune-jpeg stoker-decode stoker-formats stoker-loader stoker)
args=()
for c in "${crates[@]}"; do args+=(-p "$c"); done
# Cargo verifies each package by building it from its packaged sources, against the
# others through a local registry under the target directory, whose sources it extracts
# into $CARGO_HOME/registry/src/-<hash of that registry's path>. An extraction of the same
# version left by an earlier run would be reused, stale: ours are removed before and after.
#
# The build goes to this checkout's target/ with the workspace's dev profile (dependencies
# optimized, as `cargo test` and scripts/downstream.sh build them), so that it reuses their
# dependencies instead of building every one again, unoptimized, in a target directory of
# its own. A packaged manifest carries no profile, hence scripts/outside-profile.toml. Our
# zune-jpeg fork, built here from its package as the others' dependency, has nothing to
# reuse and is only built, never run: unoptimized, it builds in a fraction of the time.
target="${CARGO_TARGET_DIR:-$PWD/target}"
home="${CARGO_HOME:-$HOME/.cargo}"
forget_extractions() {
  for c in "${crates[@]}"; do
    rm -rf "$home"/registry/src/-*/"$c"-[0-9]*
  done
}
forget_extractions
trap forget_extractions EXIT
# Cargo takes a registry package's build as fresh while its version is the same (registry
# sources are immutable): ours, verified against each other's packages at one version,
# would build against the last run's and fail where a crate uses what another just gained.
# Those builds' dep-info lists no source file, unlike the workspace's; they go.
for dep in "$target"/debug/.fingerprint/stoker-*/dep-lib-*; do
  [ -e "$dep" ] && ! grep -qa 'src/' "$dep" && rm -rf "$(dirname "$dep")"
done
rm -f "$target"/package/*.crate
cargo package --quiet --allow-dirty --target-dir "$target" \
  --config scripts/outside-profile.toml --config 'profile.dev.package.stoker-zune-jpeg.opt-level=0' \
  "${args[@]}"
status=0
for c in "${crates[@]}"; do
  crate=$(ls "$target"/package/"$c"-[0-9]*.crate)
  files=$(tar -tzf "$crate")
  # The root crate's bench sources are the exception: the Python sdist carries its
  # manifest as written, whose [[bench]] entries cargo refuses without their files.
  if grep -vE '^stoker-[0-9.]+/benches/[^/]+\.rs$' <<<"$files" |
    grep -E '(^|/)(testdata|tests|benches)/|\.(jpe?g|png|mpo|tsv)$'; then
    echo "package: $crate carries test data (above)" >&2
    status=1
  fi
  printf 'package: %-40s %6s KiB, %3d files\n' "$(basename "$crate")" "$(( $(stat -c %s "$crate") / 1024 ))" "$(wc -l <<<"$files")"
done
exit $status
