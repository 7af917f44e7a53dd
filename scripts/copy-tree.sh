#!/usr/bin/env bash
# scripts/copy-tree.sh DEST: copies the files of this checkout that git tracks or would
# track (untracked and not ignored; not target/, not .device/) into DEST, as a fresh
# clone with the working tree's changes would hold them. Files deleted but not yet
# committed are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$1
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard |
  xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' |
  tar --null -T - -cf - | tar -xf - -C "$dest"
