#!/usr/bin/env bash
# `cargo package` for every published crate, in dependency order (the fork, decode, formats,
# loader, stoker), each built from its packaged sources against the others' packages; then
# checks that no package carries the test corpus and prints each package's size.
set -euo pipefail
cd "$(dirname "$0")/.."
crates=(stoker-zune-jpeg stoker-decode stoker-formats stoker-loader stoker)
args=()
for c in "${crates[@]}"; do args+=(-p "$c"); done
cargo package --quiet --allow-dirty "${args[@]}"
status=0
for c in "${crates[@]}"; do
  crate=$(ls target/package/"$c"-[0-9]*.crate)
  files=$(tar -tzf "$crate")
  if grep -E '(^|/)(testdata|tests|benches)/|\.(jpe?g|png|mpo|tsv)$' <<<"$files"; then
    echo "package: $crate carries test data (above)" >&2
    status=1
  fi
  printf 'package: %-40s %6s KiB, %3d files\n' "$(basename "$crate")" "$(( $(stat -c %s "$crate") / 1024 ))" "$(wc -l <<<"$files")"
done
exit $status
