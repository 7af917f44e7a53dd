#!/usr/bin/env python3
"""Tests for scripts/arch-check.py on small made-up crates (no cargo needed).

    python3 scripts/arch_check_test.py
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("arch_check", HERE / "arch-check.py")
ac = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ac)


def write(root: Path, files: dict):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


def cycles(root: Path):
    modules = ac.load_crate(root / "src/lib.rs")
    for m in modules.values():
        ac.parse_uses(m)
    graph = {p: ac.edges_of(modules, m) for p, m in modules.items()}
    return ac.find_cycles(graph), graph


class ModuleGraph(unittest.TestCase):
    def test_a_child_using_its_parent_that_uses_it_back_is_a_cycle(self):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            write(root, {
                "src/lib.rs": "mod gpu;\n",
                "src/gpu/mod.rs": """
                    mod pipeline;
                    pub(crate) fn driver_err() {}
                    pub fn build() { pipeline::start(); }
                """,
                "src/gpu/pipeline.rs": """
                    use super::driver_err;
                    pub(crate) fn start() { driver_err(); }
                """,
            })
            found, _ = cycles(root)
            self.assertEqual(found, [[("gpu",), ("gpu", "pipeline")]])

    def test_a_facade_that_only_reexports_is_not_a_dependency(self):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            write(root, {
                "src/lib.rs": """
                    mod config;
                    mod error;
                    pub use config::Device;
                    pub use error::LoaderError;
                """,
                "src/config.rs": """
                    use crate::LoaderError;
                    pub enum Device { Cpu }
                    pub fn check() -> Result<(), LoaderError> { Ok(()) }
                """,
                "src/error.rs": "pub struct LoaderError;\n",
            })
            found, graph = cycles(root)
            self.assertEqual(found, [])
            # The re-export is followed to the module that defines the item.
            self.assertIn(("error",), graph[("config",)])
            self.assertNotIn((), graph[("config",)])

    def test_code_under_cfg_test_and_comments_and_strings_are_ignored(self):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            write(root, {
                "src/lib.rs": "mod a;\nmod b;\n",
                "src/a.rs": """
                    pub fn f() { crate::b::g(); }
                """,
                "src/b.rs": """
                    // crate::a::f() in a comment
                    pub fn g() { let _ = "crate::a::f()"; }
                    #[cfg(test)]
                    mod tests {
                        #[test]
                        fn t() { crate::a::f(); }
                    }
                """,
            })
            found, _ = cycles(root)
            self.assertEqual(found, [])


class Sizes(unittest.TestCase):
    def test_function_length_counts_the_body_and_skips_declarations(self):
        body = "\n".join(f"    let x{i} = {i};" for i in range(130))
        code = ac.blank_comments_and_literals(
            "trait T { fn decl(&self); }\n"
            f"fn long(a: [u8; 4]) -> u32 {{\n{body}\n    0\n}}\n"
            "fn short() { let s = \"}\"; let c = '}'; }\n"
        )
        found = list(ac.long_functions(code, 120))
        self.assertEqual([(n, first) for n, first, _ in found], [("long", 2)])
        self.assertEqual(found[0][2], 133)

    def test_the_repository_passes_or_names_what_it_finds(self):
        # The script runs on the real tree and exits 0 or 1 with a list, never a traceback.
        p = subprocess.run([sys.executable, str(HERE / "arch-check.py")], capture_output=True, text=True)
        self.assertIn(p.returncode, (0, 1), p.stderr)
        self.assertNotIn("Traceback", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
