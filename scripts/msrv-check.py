#!/usr/bin/env python3
"""Checks the workspace's `rust-version` against what its dependencies declare.

A crate that depends on stoker builds with the same locked versions only when none of
them needs a newer Rust than the one stoker says it needs. Cargo refuses such a build
before compiling anything ("package X requires rustc 1.88"), so an understated
`rust-version` is a promise users find broken. This follows the normal and build
dependencies of the workspace's library and binary crates (not dev-dependencies: users
do not build our tests) and fails when one declares a higher `rust-version`.
Std APIs newer than `rust-version` are caught by clippy's `incompatible_msrv` lint.

Usage: msrv-check.py   (from anywhere in the repository; runs `cargo metadata`)
"""

import json
import subprocess
import sys


def version(text):
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    members = set(meta["workspace_members"])
    ours = {packages[m]["rust_version"] for m in members if packages[m]["name"] == "stoker"}
    if len(ours) != 1 or None in ours:
        sys.exit(f"msrv-check: the root package's rust-version is {ours}")
    ours_text = ours.pop()
    msrv = version(ours_text)
    seen, todo, too_new = set(), list(members), []
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
        p = packages[pid]
        if pid not in members and p["rust_version"] and version(p["rust_version"]) > msrv:
            too_new.append(f"{p['name']} {p['version']} needs rustc {p['rust_version']}")
    if too_new:
        sys.exit(
            f"msrv-check: rust-version is {ours_text}, but\n  "
            + "\n  ".join(sorted(too_new))
        )
    print(f"msrv-check: {len(seen)} crates build with rustc {ours_text}")


if __name__ == "__main__":
    main()
