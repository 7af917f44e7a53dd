#!/usr/bin/env bash
# stoker as a dependency of a crate outside this workspace, built the way a user builds it:
# tests/downstream depends on `stoker` by path, a copy of it on the library alone
# (`default-features = false`, no CLI), then another copy on this checkout through
# `git = "file://…"` (offline: cargo clones the local repository). Each build runs the
# crate, which converts the bundled sample and checks the loader's batches. No [patch]
# anywhere: the check below fails if a Cargo.toml grows one.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
if grep -rn --include=Cargo.toml '^\[patch' . --exclude-dir=target; then
  echo "downstream: a [patch] section applies only inside its own workspace, never to a crate depending on stoker" >&2
  exit 1
fi
# The downstream crate starts from the workspace's lock file, and builds with the workspace's
# profile, so it builds the same dependency versions the same way (and CI reuses their
# compiled artifacts).
profile=(--config "$root/scripts/outside-profile.toml")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r tests/downstream "$work/path-dep"
cp Cargo.lock "$work/path-dep/"
sed -i "s|^stoker = { path = \"../..\" }|stoker = { path = \"$root\" }|" "$work/path-dep/Cargo.toml"
echo "downstream: path dependency"
cargo run --quiet "${profile[@]}" --manifest-path "$work/path-dep/Cargo.toml" -- "$root/examples/data/sample"

# The library alone: it builds and runs without the `cli` feature, and brings no crate that
# stoker-loader does not bring itself (clap, indicatif, tracing-subscriber and the crates
# below them are the CLI's: a user who turned the CLI off must not compile them). The
# comparison catches a CLI dependency added under any name; the list of names catches one
# that comes through a feature of a sub-crate (stoker-formats/progress-bar), which would
# be in stoker-loader's tree too.
cp -r "$work/path-dep" "$work/lib-only"
sed -i "s|^stoker = { path = \"$root\" }|stoker = { path = \"$root\", default-features = false }|" "$work/lib-only/Cargo.toml"
grep -q '^stoker = .*default-features = false' "$work/lib-only/Cargo.toml"
echo "downstream: path dependency, default-features = false"
crates_below() {
  cargo tree --quiet --manifest-path "$work/lib-only/Cargo.toml" -p "$1" -e normal,build --prefix none |
    sed -E 's/ \(.*$//' | sort -u
}
with_stoker="$(crates_below stoker)"
with_loader="$(crates_below stoker-loader)"
grep -q '^stoker-loader v' <<<"$with_stoker"
extra="$(comm -23 <(printf '%s\n' "$with_stoker") <(printf '%s\n' "$with_loader") | grep -v '^stoker v' || true)"
if [ -n "$extra" ]; then
  printf 'downstream: stoker without its default features brings crates stoker-loader does not:\n%s\n' "$extra" >&2
  exit 1
fi
# (tempfile is not among them: stoker-formats spools a sample writer's source names into
# unnamed files with it.)
if grep -E '^(clap|indicatif|console|tracing-subscriber|anyhow) v' <<<"$with_stoker"; then
  echo "downstream: stoker without its default features brings the CLI's crates (above)" >&2
  exit 1
fi
cargo run --quiet "${profile[@]}" --manifest-path "$work/lib-only/Cargo.toml" -- "$root/examples/data/sample"
if [ -d .git ] || git rev-parse --git-dir >/dev/null 2>&1; then
  cp -r "$work/path-dep" "$work/git-dep"
  rev="$(git rev-parse HEAD)"
  sed -i "s|^stoker = { path = \"$root\" }|stoker = { git = \"file://$root\", rev = \"$rev\" }|" "$work/git-dep/Cargo.toml"
  echo "downstream: git dependency on file://$root at $rev"
  CARGO_NET_GIT_FETCH_WITH_CLI=true cargo run --quiet "${profile[@]}" --manifest-path "$work/git-dep/Cargo.toml" -- "$root/examples/data/sample"
else
  echo "downstream: not a git checkout; git-dependency build not run" >&2
  exit 1
fi
