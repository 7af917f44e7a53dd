#!/usr/bin/env python3
"""Tests of dmon_jpg.py on hand-written `nvidia-smi dmon` logs (no GPU needed).

Run: python3 scripts/device-check.d/dmon_jpg_test.py
(Not a device-check part: parts are the *.sh files of this directory.)

The logs follow the layout dmon prints with `-s u -o DT` (driver 5xx: a names
header, a units header, one line per GPU per second, headers repeated now and
then), with the columns in driver order; the parser looks columns up by name.
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dmon_jpg  # noqa: E402

BASE = 1_800_000_000  # a whole second, in local time below


def stamp(t):
    lt = time.localtime(t)
    return time.strftime("%Y%m%d", lt), time.strftime("%H:%M:%S", lt)


def dmon_log(jpg_by_second, with_date=True, gpus=(0,), jpg_column=True, repeat_header_at=None):
    cols = ["gpu", "sm", "mem", "enc", "dec"] + (["jpg", "ofa"] if jpg_column else [])
    units = ["Idx", "%", "%", "%", "%"] + (["%", "%"] if jpg_column else [])
    if with_date:
        head = "#Date       Time        " + "  ".join("%5s" % c for c in cols)
        unit = "#YYYYMMDD   HH:MM:SS    " + "  ".join("%5s" % u for u in units)
    else:
        head = "#Time        " + "  ".join("%5s" % c for c in cols)
        unit = "#HH:MM:SS    " + "  ".join("%5s" % u for u in units)
    lines = [head, unit]
    for k, (t, jpg) in enumerate(jpg_by_second):
        if repeat_header_at == k:
            lines += [head, unit]
        d, c = stamp(t)
        for g in gpus:
            vals = [str(g), "37", "9", "0", "0"] + ([str(jpg if g == gpus[0] else 99), "0"] if jpg_column else [])
            prefix = (" %s   %s  " % (d, c)) if with_date else (" %s  " % c)
            lines.append(prefix + "  ".join("%5s" % v for v in vals))
        if k == 2:
            lines.append("")  # blank lines happen
    return [l + "\n" for l in lines]


def throughput_log(spans):
    out = ["running 1 test\n", "\n", "ROW\tdecode_cpu_all_cores\t9000.0\timg/s\tx\n"]
    for name, a, b in spans:
        out += ["\n", "ROWSPAN\t%s\t%.3f\t%.3f\n" % (name, a, b), "ROW\t%s\t20000.0\timg/s\tnote\n" % name]
    return out


class DmonJpgTest(unittest.TestCase):
    def setUp(self):
        # Seconds BASE+1 .. BASE+12: row a runs over 1..6 (jpg 60), row b over 7..12 (jpg 80),
        # with one "-" sample inside b.
        self.seconds = [(BASE + s, 60 if s <= 6 else 80) for s in range(1, 13)]
        self.seconds[9] = (BASE + 10, "-")
        self.spans = [("decode_gpu_hw_lanes4", BASE + 0.4, BASE + 6.2), ("decode_gpu_hw_lanes8", BASE + 6.3, BASE + 12.1)]

    def test_means_per_span_with_date_column(self):
        got = dmon_jpg.rows(dmon_log(self.seconds, repeat_header_at=5), throughput_log(self.spans))
        self.assertEqual([r[0] for r in got], ["decode_gpu_hw_lanes4_jpg_util_pct", "decode_gpu_hw_lanes8_jpg_util_pct"])
        self.assertEqual(got[0][1], "60.0")
        self.assertEqual(got[1][1], "80.0")  # the "-" sample is skipped, not read as 0
        self.assertEqual(got[0][2], "%")
        self.assertIn("samples", got[0][3])

    def test_time_only_column_borrows_the_span_date(self):
        got = dmon_jpg.rows(dmon_log(self.seconds, with_date=False), throughput_log(self.spans))
        self.assertEqual(got[0][1], "60.0")
        self.assertEqual(got[1][1], "80.0")

    def test_mixed_values_average(self):
        secs = [(BASE + s, v) for s, v in [(1, 10), (2, 20), (3, 30), (4, 40)]]
        got = dmon_jpg.rows(dmon_log(secs), throughput_log([("r", BASE + 0.5, BASE + 4.0)]))
        # Seconds 2, 3, 4 lie inside (0.5, 4.0]; 1 covers (0, 1], which starts before the span.
        self.assertEqual(got[0][1], "30.0")

    def test_only_the_first_gpu_counts(self):
        got = dmon_jpg.rows(dmon_log(self.seconds, gpus=(0, 1)), throughput_log(self.spans))
        self.assertEqual(got[0][1], "60.0")

    def test_short_span_uses_neighbouring_samples(self):
        got = dmon_jpg.rows(dmon_log(self.seconds), throughput_log([("short", BASE + 2.2, BASE + 2.6)]))
        self.assertEqual(got[0][1], "60.0")

    def test_no_jpg_column(self):
        got = dmon_jpg.rows(dmon_log(self.seconds, jpg_column=False), throughput_log(self.spans))
        self.assertEqual([r[1] for r in got], ["-", "-"])
        self.assertIn("no jpg column", got[0][3])

    def test_empty_or_failed_dmon(self):
        failed = ["Failed to initialize NVML: Driver/library version mismatch\n"]
        for log in ([], failed):
            got = dmon_jpg.rows(log, throughput_log(self.spans))
            self.assertEqual([r[1] for r in got], ["-", "-"])

    def test_span_outside_the_samples(self):
        got = dmon_jpg.rows(dmon_log(self.seconds), throughput_log([("late", BASE + 100, BASE + 105)]))
        self.assertEqual(got[0][1], "-")
        self.assertIn("no dmon jpg samples", got[0][3])

    def test_columns_found_by_name_in_a_wider_layout(self):
        # The layout of `dmon -s mutc -o TD` on a 5xx driver: jpg is the 11th column here.
        head = "#Date       Time        gpu     fb   bar1   ccpm     sm    mem    enc    dec    jpg    ofa  rxpci  txpci   mclk   pclk \n"
        unit = "#YYYYMMDD   HH:MM:SS    Idx     MB     MB     MB      %      %      %      %      %      %   MB/s   MB/s    MHz    MHz \n"
        lines = [head, unit]
        for s, jpg in [(1, 50), (2, 70), (3, 90)]:
            d, c = stamp(BASE + s)
            lines.append(" %s   %s      0    239      3      0      6      1      0      0     %2d      0      5     10   6250   1695 \n" % (d, c, jpg))
        got = dmon_jpg.rows(lines, throughput_log([("wide", BASE + 0.0, BASE + 3.0)]))
        self.assertEqual(got[0][1], "70.0")

    def test_no_spans_no_rows(self):
        self.assertEqual(dmon_jpg.rows(dmon_log(self.seconds), ["ROW\tx\t1\timg/s\tn\n"]), [])


if __name__ == "__main__":
    unittest.main()
