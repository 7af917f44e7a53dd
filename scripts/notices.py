#!/usr/bin/env python3
"""python/LICENSE-THIRD-PARTY: the licences of the crates linked into the Python wheel.

The wheel's extension module is one binary holding some hundred crates from crates.io
(and our zune-jpeg fork); their MIT, BSD, ISC and Zlib terms ask that their notices go
with every binary copy, and jpeg-encoder's IJG terms that its documentation say "this
software is based in part on the work of the Independent JPEG Group". maturin puts
every `LICEN[CS]E*` file of python/ into the wheel's `.dist-info/licenses/`, and the
sdist carries it too.

    scripts/notices.py          writes the file from Cargo.lock and the crates' sources
    scripts/notices.py --check  fails when the file differs from what it would write
                                (CI: a changed Cargo.lock must come with a new file)

The crates are those the `stoker-python` crate reaches through normal (not build or dev)
dependencies on x86-64 and aarch64 Linux, which the wheel and the sdist's builds cover.
Each crate's licence files are the ones it ships (`LICEN[CS]E*`, `COPYING*`, `NOTICE*`);
a text used by several crates is written once, with their names. A crate without such a
file, or whose licence expression names a licence outside ALLOWED, stops the script:
someone must read that licence before the wheel can carry the crate.

Written here rather than taken from cargo-about: that tool builds for minutes on CI's
two cores, and this needs only `cargo metadata`, which CI already has.
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "python", "LICENSE-THIRD-PARTY")
TARGETS = ("x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu")
OURS = {"stoker", "stoker-python", "stoker-formats", "stoker-decode", "stoker-loader"}
# Licences read and found to allow a binary copy in the wheel with their notices.
ALLOWED = {
    "0BSD", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "BSL-1.0", "IJG", "ISC",
    "LLVM-exception", "MIT", "Unicode-3.0", "Unlicense", "Zlib",
}
# Files of the licences that crates offer beside MIT ("MIT OR Apache-2.0").
OFFERED_INSTEAD = re.compile(r"APACHE|BSD|ZLIB|UNLICENSE|BSL|ISC", re.IGNORECASE)
LICENCE_FILE = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE|UNLICENSE)", re.IGNORECASE)


def crates():
    """The packages the wheel links, by (name, version), from cargo metadata."""
    found = {}
    for target in TARGETS:
        meta = json.loads(subprocess.check_output([
            "cargo", "metadata", "--format-version", "1", "--locked",
            "--manifest-path", os.path.join(ROOT, "python", "Cargo.toml"),
            "--filter-platform", target,
        ]))
        packages = {p["id"]: p for p in meta["packages"]}
        nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
        todo = [i for i, p in packages.items() if p["name"] == "stoker-python"]
        seen = set()
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            todo += [d["pkg"] for d in nodes[node]["deps"]
                     if any(k["kind"] is None for k in d["dep_kinds"])]
        for i in seen:
            p = packages[i]
            if p["name"] not in OURS:
                found[(p["name"], p["version"])] = p
    return [found[k] for k in sorted(found)]


def licence_ids(expression):
    """The licence identifiers in an SPDX expression (also the old `MIT/Apache-2.0`)."""
    words = re.split(r"[\s()/]+", expression)
    return {w for w in words if w and w not in ("OR", "AND", "WITH")}


def licence_files(package):
    """The crate's licence files; where MIT is one of the licences it offers, the wheel
    takes it under MIT, and the texts of the licences offered instead of MIT are left out
    (a crate's files name their licence: LICENSE-APACHE, LICENSE-ZLIB, ...)."""
    folder = os.path.dirname(package["manifest_path"])
    names = sorted(n for n in os.listdir(folder) if LICENCE_FILE.match(n))
    if package.get("license_file"):
        named = os.path.basename(package["license_file"])
        names = sorted(set(names) | {named})
    expression = package["license"] or ""
    if re.search(r"\bOR MIT\b|\bMIT OR\b|^MIT/|/MIT$", expression):
        mit = [n for n in names if "MIT" in n.upper()]
        others = [n for n in names if not OFFERED_INSTEAD.search(n)]
        if mit:
            names = others
    return [(n, os.path.join(folder, n)) for n in names]


def render(packages):
    problems = []
    texts = {}  # text -> [(crate, file name)]
    rows = []
    for p in packages:
        crate = f"{p['name']} {p['version']}"
        expression = p["license"] or "(none)"
        bad = licence_ids(expression) - ALLOWED
        if bad or not p["license"]:
            problems.append(f"{crate}: licence {expression!r} names {sorted(bad)} outside ALLOWED")
        files = licence_files(p)
        if not files:
            problems.append(f"{crate}: ships no licence file")
        for name, path in files:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read().replace("\r\n", "\n").strip("\n")
            # The same text laid out differently (line breaks, indents) is written once.
            key = " ".join(text.split())
            texts.setdefault(key, (text, []))[1].append((crate, name))
        source = p.get("repository") or ("our fork, decode/vendor/zune-jpeg" if p["source"] is None else "")
        rows.append(f"  {crate:<34} {expression:<52} {source}".rstrip())
    if problems:
        sys.exit("notices.py:\n  " + "\n  ".join(problems))
    ijg = any("IJG" in licence_ids(p["license"]) for p in packages)
    out = [
        "Third-party software in the stoker Python package",
        "=================================================",
        "",
        "The package's extension module (stoker/_stoker.abi3.so) is built from stoker's own",
        "crates (MIT OR Apache-2.0, LICENSE-MIT and LICENSE-APACHE beside this file) and the",
        f"{len(packages)} crates below, linked into it statically. Each crate's licence files",
        "follow the list, each text once with the crates that ship it.",
        "",
    ]
    if ijg:
        out += [
            "This software is based in part on the work of the Independent JPEG Group",
            "(jpeg-encoder, whose licence includes the IJG terms).",
            "",
        ]
    out += [
        "Written by scripts/notices.py from Cargo.lock; do not edit by hand.",
        "",
        "Crates (name, version, licence, repository):",
        "",
        *rows,
    ]
    for text, users in sorted(texts.values(), key=lambda t: (t[1][0], t[0])):
        out += [
            "",
            "-" * 88,
            "",
            "Shipped by: " + ", ".join(f"{c} ({n})" for c, n in users),
            "",
            text,
        ]
    return "\n".join(out) + "\n"


def main():
    text = render(crates())
    if sys.argv[1:] == ["--check"]:
        try:
            with open(OUT, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current != text:
            sys.exit(f"notices.py: {os.path.relpath(OUT, ROOT)} is not what Cargo.lock "
                     "gives; run scripts/notices.py and commit the file")
        return
    if sys.argv[1:]:
        sys.exit("usage: scripts/notices.py [--check]")
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"notices.py: wrote {os.path.relpath(OUT, ROOT)}, {len(text)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
