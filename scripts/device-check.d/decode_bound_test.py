#!/usr/bin/env python3
"""Tests of decode_bound.py on hand-written tables (no GPU needed).

Run: python3 scripts/device-check.d/decode_bound_test.py
(Not a device-check part: parts are the *.sh files of this directory.)
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_bound  # noqa: E402

ROW = "decode_gpu_hw_lanes4"


def table(rate, jpg, host_us):
    lines = ["decode_cpu_all_cores\t5000.0\timg/s\t16 threads\n"]
    if rate is not None:
        lines.append("%s\t%s\timg/s\tbatch 256\n" % (ROW, rate))
    if host_us is not None:
        lines.append("%s_host_us_per_img\t%s\tus/img\thost\n" % (ROW, host_us))
    if jpg is not None:
        lines.append("%s_jpg_util_pct\t%s\t%%\tdmon\n" % (ROW, jpg))
    return decode_bound.read_table(lines)


def bound(values):
    rows = {r[0]: r for r in decode_bound.verdict(values, ROW)}
    return rows[ROW + "_bound"][1], rows


class Verdicts(unittest.TestCase):
    def test_busy_engines_set_the_pace(self):
        side, rows = bound(table(30400, 97.0, 20.0))
        self.assertEqual(side, "engines")
        # 20 us per image at 30.4k img/s: the host is inside decode_batch 61 % of the time.
        self.assertEqual(rows[ROW + "_host_busy_pct"][1], "60.8")

    def test_a_host_always_inside_decode_batch_sets_the_pace(self):
        side, _ = bound(table(30400, 70.0, 32.5))
        self.assertEqual(side, "host")

    def test_room_on_both_sides_is_neither(self):
        side, rows = bound(table(20000, 60.0, 25.0))
        self.assertEqual(side, "neither")
        self.assertIn("engines busy 60", rows[ROW + "_bound"][3])

    def test_a_missing_figure_says_which(self):
        side, rows = bound(table(30400, None, 20.0))
        self.assertEqual(side, "unknown")
        self.assertIn(ROW + "_jpg_util_pct", rows[ROW + "_bound"][3])
        # The host share is still given.
        self.assertIn(ROW + "_host_busy_pct", rows)

    def test_unparsable_values_and_repeated_names_are_skipped(self):
        values = decode_bound.read_table([
            "x\tnull\timg/s\tno\n", "x\t2.0\timg/s\tfirst\n", "x\t3.0\timg/s\tlater\n", "short\n"])
        self.assertEqual(values, {"x": 2.0})


if __name__ == "__main__":
    unittest.main()
