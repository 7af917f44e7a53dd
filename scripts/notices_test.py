#!/usr/bin/env python3
"""Tests for scripts/notices.py on made-up packages (no cargo needed).

    python3 scripts/notices_test.py
"""

import importlib.util
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("notices", HERE / "notices.py")
notices = importlib.util.module_from_spec(spec)
spec.loader.exec_module(notices)


class Notices(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def package(self, name, licence, files):
        folder = self.root / name
        folder.mkdir()
        for file, text in files.items():
            (folder / file).write_text(text)
        return {"name": name, "version": "1.0.0", "license": licence, "license_file": None,
                "manifest_path": str(folder / "Cargo.toml"), "source": "registry",
                "repository": f"https://example.org/{name}"}

    def test_a_crate_offering_mit_ships_its_mit_text_and_what_it_adds(self):
        out = notices.render([
            self.package("a", "MIT OR Apache-2.0", {"LICENSE-MIT": "Copyright A\nMIT text",
                                                    "LICENSE-APACHE": "Apache text"}),
            self.package("b", "(MIT OR Apache-2.0) AND Unicode-3.0",
                         {"LICENSE-MIT": "Copyright B", "LICENSE-UNICODE": "Unicode text"}),
            self.package("c", "BSD-3-Clause OR Apache-2.0",
                         {"LICENSE.md": "BSD text", "LICENSE-APACHE.md": "Apache text"}),
        ])
        self.assertIn("Copyright A\nMIT text", out)
        self.assertIn("Unicode text", out)
        # No MIT to take: both texts, the Apache one once for both crates that ship it.
        self.assertIn("BSD text", out)
        self.assertIn("Shipped by: c 1.0.0 (LICENSE-APACHE.md)\n\nApache text", out)
        self.assertEqual(out.count("Apache text"), 1)
        self.assertNotIn("Independent JPEG Group", out)

    def test_the_same_text_laid_out_differently_is_written_once(self):
        out = notices.render([
            self.package("a", "MIT", {"LICENSE": "Copyright X\n\nPermission is granted"}),
            self.package("b", "MIT", {"LICENSE": "Copyright X\r\n\r\n  Permission is\n granted\n"}),
        ])
        self.assertIn("Shipped by: a 1.0.0 (LICENSE), b 1.0.0 (LICENSE)", out)

    def test_ijg_terms_bring_their_statement(self):
        out = notices.render([self.package("jpeg", "(MIT OR Apache-2.0) AND IJG",
                                           {"LICENSE-MIT": "m", "LICENSE-IJG": "ijg"})])
        self.assertIn("based in part on the work of the Independent JPEG Group", out)

    def test_an_unread_licence_or_a_crate_without_a_licence_file_stops_it(self):
        for package in (self.package("gpl", "GPL-3.0-only", {"COPYING": "GPL"}),
                        self.package("bare", "MIT", {})):
            with self.assertRaises(SystemExit) as stop:
                notices.render([package])
            self.assertIn(package["name"], str(stop.exception))


if __name__ == "__main__":
    unittest.main()
