#!/usr/bin/env bash
# `cargo package` for every published crate, in dependency order (the fork, decode, formats,
# loader, stoker), each built from its packaged sources against the others' packages; then
# checks that no package carries the test corpus and prints each package's size.
set -euo pipefail
cd "$(dirname "$0")/.."
crates=(stoker-zune-jpeg stoker-decode stoker-formats stoker-loader stoker)
args=()
for c in "${crates[@]}"; do args+=(-p "$c"); done
# Each run packages into a new target directory: cargo verifies a package against the
# others through a local registry under the target directory and extracts those into
# $CARGO_HOME/registry/src/-<hash of its path>, where an extraction of the same version
# from an earlier run would be reused, stale. Extractions this run adds are removed after.
work="$(mktemp -d)"
home="${CARGO_HOME:-$HOME/.cargo}"
before="$(ls -d "$home"/registry/src/-* 2>/dev/null || true)"
cleanup() {
  for d in $(ls -d "$home"/registry/src/-* 2>/dev/null || true); do
    grep -qxF "$d" <<<"$before" || rm -rf "$d"
  done
  rm -rf "$work"
}
trap cleanup EXIT
cargo package --quiet --allow-dirty --target-dir "$work" "${args[@]}"
status=0
for c in "${crates[@]}"; do
  crate=$(ls "$work"/package/"$c"-[0-9]*.crate)
  files=$(tar -tzf "$crate")
  if grep -E '(^|/)(testdata|tests|benches)/|\.(jpe?g|png|mpo|tsv)$' <<<"$files"; then
    echo "package: $crate carries test data (above)" >&2
    status=1
  fi
  printf 'package: %-40s %6s KiB, %3d files\n' "$(basename "$crate")" "$(( $(stat -c %s "$crate") / 1024 ))" "$(wc -l <<<"$files")"
done
exit $status
