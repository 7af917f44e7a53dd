#!/usr/bin/env python3
"""Checks the shape of stoker's source: file length, function length, module cycles.

    python3 scripts/arch-check.py [--max-file-lines N] [--max-fn-lines N]

Exit 1 (and a list) when a non-test source file is longer than the file limit, a
non-test function is longer than the function limit, or a crate's modules import each
other around a loop. The vendored decoder (decode/vendor) keeps upstream's shape and is
not checked.

Why a script and not a crate: rustc does not expose a module graph, and the tools that do
(cargo-modules) need a nightly-matched rust-analyzer; a tokenizer that knows comments,
strings and char literals is enough for `use` paths and brace matching.

How edges are counted: module A depends on module B when A names an item that B defines,
through a `use` (a private one, or a public re-export whose name A also uses itself) or an
inline path (`crate::b::f`, `super::X`, `child::g`). Re-exports are followed to the module
that defines the item, so a facade (`lib.rs`, a `mod.rs` that only declares and
re-exports) is not a dependency of the modules it re-exports. Code under `#[cfg(test)]`
is left out: tests may reach anywhere.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {"target", "vendor", ".git", "node_modules", "fuzz"}
# (crate root file, crate name) pairs whose module graphs are checked.
CRATE_ROOTS = [
    "src/lib.rs",
    "src/main.rs",
    "formats/src/lib.rs",
    "decode/src/lib.rs",
    "loader/src/lib.rs",
    "python/src/lib.rs",
    "testdata/src/lib.rs",
]
ITEM_KINDS = r"(?:fn|struct|enum|trait|type|const|static|mod|union|macro_rules!)"


# ---------------------------------------------------------------- tokenizing


def blank_comments_and_literals(src: str) -> str:
    """Returns `src` with comments, strings and char literals replaced by spaces.

    Newlines are kept so line numbers still match; string literals keep their quotes so
    `"{"` inside a string cannot unbalance braces.
    """
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_newlines(src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and not is_ident_char(src, i - 1):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('"' + keep_newlines(src[i + 1 : j - 1]) + '"')
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append('"' + keep_newlines(src[i + 1 : j - 1]) + '"')
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}', '\'') or a lifetime ('a).
            m = re.match(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", src[i:], re.S)
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def keep_newlines(s: str) -> str:
    return "".join("\n" if ch == "\n" else " " for ch in s)


def is_ident_char(src: str, i: int) -> bool:
    return i >= 0 and (src[i].isalnum() or src[i] == "_")


def matching_brace(code: str, open_at: int) -> int:
    """Index of the `}` closing the `{` at `open_at` (or the end of the text)."""
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


CFG_TEST = re.compile(r"#\[cfg\((?:test|all\(test[^\]]*\))\)\]")


def strip_test_code(code: str) -> tuple[str, set[str]]:
    """Blanks items under `#[cfg(test)]`; returns the code and the test-only `mod x;` names."""
    test_mods = set()
    chars = list(code)
    for m in CFG_TEST.finditer(code):
        j = m.end()
        # Skip further attributes and whitespace to the item.
        while True:
            rest = code[j:]
            ws = len(rest) - len(rest.lstrip())
            j += ws
            if code.startswith("#[", j):
                j = code.find("]", j) + 1
                continue
            break
        semi = code.find(";", j)
        brace = code.find("{", j)
        decl = re.match(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code[j:])
        if decl:
            test_mods.add(decl.group(1))
            end = j + decl.end()
        elif brace >= 0 and (semi < 0 or brace < semi):
            end = matching_brace(code, brace) + 1
        else:
            end = semi + 1 if semi >= 0 else len(code)
        for k in range(m.start(), end):
            if chars[k] != "\n":
                chars[k] = " "
    return "".join(chars), test_mods


# ---------------------------------------------------------------- sizes


def source_files():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = Path(dirpath).relative_to(ROOT)
        dirnames[:] = [
            d for d in dirnames if d not in SKIP_DIRS and not (rel_dir == Path(".") and d == "tests")
        ]
        parts = rel_dir.parts
        if "tests" in parts or "target" in parts:
            continue
        for f in filenames:
            if f.endswith(".rs"):
                yield rel_dir / f


FN_RE = re.compile(r"\bfn\s+(\w+)")


def long_functions(code: str, limit: int):
    """(name, first line, lines) of each function body longer than `limit` lines."""
    for m in FN_RE.finditer(code):
        # The body starts at the first `{` outside parentheses, brackets and angle
        # brackets' `()`; a `;` first means a declaration (trait method, extern fn).
        depth, j = 0, m.end()
        while j < len(code):
            ch = code[j]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and ch == ";":
                j = -1
                break
            elif depth == 0 and ch == "{":
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        end = matching_brace(code, j)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        if last - first + 1 > limit:
            yield m.group(1), first, last - first + 1


# ---------------------------------------------------------------- module graph


class Module:
    def __init__(self, path: tuple[str, ...], file: Path, code: str):
        self.path = path
        self.file = file
        self.code = code
        self.children: set[str] = set()
        # name -> (absolute target path, is_pub)
        self.imports: dict[str, tuple[tuple[str, ...], bool]] = {}
        self.globs: list[tuple[tuple[str, ...], bool]] = []
        self.defined: set[str] = set(re.findall(ITEM_KINDS + r"\s+(\w+)", code))


def module_file(base: Path, name: str) -> Path | None:
    for cand in (base / f"{name}.rs", base / name / "mod.rs"):
        if cand.exists():
            return cand
    return None


def load_crate(root_file: Path) -> dict[tuple[str, ...], Module]:
    modules: dict[tuple[str, ...], Module] = {}

    def load(path: tuple[str, ...], file: Path, child_dir: Path):
        code = blank_comments_and_literals(file.read_text())
        code, test_mods = strip_test_code(code)
        mod = Module(path, file, code)
        modules[path] = mod
        for m in re.finditer(r"(?:^|\n)\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
            name = m.group(1)
            if name in test_mods:
                continue
            f = module_file(child_dir, name)
            if f is None:
                continue
            mod.children.add(name)
            load(path + (name,), f, f.parent if f.name == "mod.rs" else f.with_suffix(""))

    load((), root_file, root_file.parent)
    return modules


def expand_use_tree(tree: str) -> list[list[str]]:
    """`a::{b, c::d, f::*}` -> [['a','b'], ['a','c','d'], ['a','f','*']] (renames stay in the last segment)."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix: list[str], t: str):
        if t.startswith("::"):
            t = t[2:]
        brace = t.find("{")
        if brace >= 0 and t.endswith("}"):
            head = [s for s in t[:brace].split("::") if s]
            inner = t[brace + 1 : -1]
            depth, start = 0, 0
            for k, ch in enumerate(inner + ","):
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                elif ch == "," and depth == 0:
                    part = inner[start:k]
                    if part:
                        walk(prefix + head, part)
                    start = k + 1
            return
        segs = t.split("::")
        out.append(prefix + segs)

    walk([], tree)
    return out


def parse_uses(mod: Module):
    for m in re.finditer(r"(?:^|[;{}\n])\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", mod.code):
        is_pub = m.group(1) is not None
        body = m.group(2)
        # Keep `as` renames visible after whitespace removal.
        body = re.sub(r"\s+as\s+", "__AS__", body)
        for segs in expand_use_tree(body):
            last = segs[-1]
            alias = None
            if "__AS__" in last:
                last, alias = last.split("__AS__")
                segs = segs[:-1] + [last]
            absolute = absolute_path(mod, segs)
            if absolute is None:
                continue
            if last == "*":
                mod.globs.append((tuple(absolute[:-1]), is_pub))
                continue
            if last == "self":
                absolute = absolute[:-1]
                last = absolute[-1] if absolute else ""
            name = alias or last
            if name and name != "_":
                mod.imports[name] = (tuple(absolute), is_pub)


def absolute_path(mod: Module, segs: list[str]) -> list[str] | None:
    """The path from the crate root, or None for another crate's path."""
    if not segs:
        return None
    head = segs[0]
    if head == "crate":
        return segs[1:]
    if head == "self":
        return list(mod.path) + segs[1:]
    if head == "super":
        base = list(mod.path)
        k = 0
        while k < len(segs) and segs[k] == "super":
            base = base[:-1]
            k += 1
        return base + segs[k:]
    if head in mod.children:
        return list(mod.path) + segs
    if head in mod.imports:
        target, _ = mod.imports[head]
        return list(target) + segs[1:]
    return None


def defining_module(modules, path: tuple[str, ...], seen=None) -> tuple[str, ...] | None:
    """The module that defines the item at `path`, following re-exports."""
    seen = seen or set()
    if path in seen:
        return None
    seen.add(path)
    # Longest prefix that is a module.
    k = len(path)
    while k > 0 and path[:k] not in modules:
        k -= 1
    mod_path = path[:k]
    if k == len(path):
        return mod_path  # the path names a module itself
    mod = modules.get(mod_path)
    if mod is None:
        return None
    name = path[k]
    if name in mod.imports and name not in mod.children:
        target, _ = mod.imports[name]
        if target and target != path:
            return defining_module(modules, target + path[k + 1 :], seen)
    if name in mod.defined:
        return mod_path
    for glob, _ in mod.globs:
        if glob in modules:
            cand = glob + path[k:]
            found = defining_module(modules, cand, seen)
            if found is not None and (found != glob or name in modules[glob].defined):
                return found
    return mod_path


INLINE_PATH = re.compile(r"(?<![\w:])((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::\w+)+)")


def edges_of(modules, mod: Module) -> dict[tuple[str, ...], str]:
    """Dependencies of `mod`: target module -> a short reason."""
    out = {}
    code_without_uses = re.sub(r"(?:pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", " ", mod.code)
    words = set(re.findall(r"\w+", code_without_uses))
    for name, (target, is_pub) in mod.imports.items():
        if is_pub and name not in words:
            continue  # a re-export only: a facade, not a use
        dest = defining_module(modules, target)
        if dest is not None and dest != mod.path:
            out.setdefault(dest, f"use {'::'.join(target)}")
    for glob, is_pub in mod.globs:
        if not is_pub and glob in modules and glob != mod.path:
            out.setdefault(glob, f"use {'::'.join(glob)}::*")
    for m in INLINE_PATH.finditer(code_without_uses):
        segs = m.group(1).split("::")
        absolute = absolute_path(mod, segs)
        if absolute is None:
            continue
        dest = defining_module(modules, tuple(absolute))
        if dest is not None and dest != mod.path:
            out.setdefault(dest, m.group(1))
    return out


def find_cycles(graph: dict[tuple[str, ...], dict]) -> list[list[tuple[str, ...]]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def module_name(path: tuple[str, ...]) -> str:
    return "::".join(("crate",) + path)


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-file-lines", type=int, default=800)
    ap.add_argument("--max-fn-lines", type=int, default=120)
    ap.add_argument("--graph", action="store_true", help="print every module's dependencies")
    args = ap.parse_args()
    problems = []

    for rel in sorted(source_files()):
        text = (ROOT / rel).read_text()
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines > args.max_file_lines:
            problems.append(f"{rel}: {lines} lines (limit {args.max_file_lines})")
        code, _ = strip_test_code(blank_comments_and_literals(text))
        for name, first, count in long_functions(code, args.max_fn_lines):
            problems.append(f"{rel}:{first}: fn {name} is {count} lines (limit {args.max_fn_lines})")

    for root in CRATE_ROOTS:
        root_file = ROOT / root
        if not root_file.exists():
            continue
        modules = load_crate(root_file)
        for mod in modules.values():
            parse_uses(mod)
        graph = {p: edges_of(modules, m) for p, m in modules.items()}
        if args.graph:
            print(f"== {root}")
            for p in sorted(graph):
                for d, why in sorted(graph[p].items()):
                    print(f"  {module_name(p)} -> {module_name(d)}   ({why})")
        for comp in find_cycles(graph):
            members = set(comp)
            detail = []
            for p in comp:
                for d, why in sorted(graph[p].items()):
                    if d in members:
                        detail.append(f"    {module_name(p)} -> {module_name(d)} ({why})")
            problems.append(
                f"{root}: import cycle among {', '.join(module_name(p) for p in comp)}\n"
                + "\n".join(detail)
            )

    for p in problems:
        print(p)
    if problems:
        print(f"arch-check: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("arch-check: files, functions and module graph within limits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
