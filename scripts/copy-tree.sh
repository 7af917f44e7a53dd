#!/usr/bin/env bash
# scripts/copy-tree.sh DEST: copies the files of this checkout that git tracks or would
# track (untracked and not ignored; not target/, not .device/) into DEST, as a fresh
# clone with the working tree's changes would hold them. Files deleted but not yet
# committed are left out.
set -euo pipefail
# DEST as the caller named it, before moving to the checkout's root.
dest=$(realpath -m "$1")
cd "$(dirname "$0")/.."
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard |
  xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' |
  tar --null -T - -cf - | tar -xf - -C "$dest"
