#!/usr/bin/env python3
"""Tests of peer_rows.py (no GPU needed). Run: python3 scripts/device-check.d/peer_rows_test.py"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_rows  # noqa: E402

OK_HW = '{"peer": "nvimagecodec_hw", "img_per_s": 20000.0, "batch": 256, "note": "hw", "reason": null}'
BAD_CUDA = '{"peer": "nvimagecodec_cuda", "img_per_s": null, "batch": 256, "reason": "no backend"}'
TV = '{"peer": "torchvision_cuda", "img_per_s": 25000.0, "batch": 256, "note": "", "reason": null}'


class PeerRows(unittest.TestCase):
    def test_ratios_from_the_named_peer_only(self):
        out = peer_rows.peer_rows(["warning: x", OK_HW, BAD_CUDA], {"ours": "22000"}, None,
                                  "vs_nvimagecodec_hw", "nvimagecodec_hw", ["ours", "missing"])
        self.assertEqual(out, [
            "nvimagecodec_hw\t20000.0\timg/s\thw",
            "ours_vs_nvimagecodec_hw\t1.10\tx\tratio in this run",
            "nvimagecodec_cuda\t-\timg/s\tno backend",
        ])

    def test_a_fixed_name_and_a_default_note(self):
        out = peer_rows.peer_rows([TV], {"a": "20000", "b": "x"}, "torchvision_decode_jpeg_cuda",
                                  "vs_torchvision", None, ["a", "b"])
        self.assertEqual(out, [
            "torchvision_decode_jpeg_cuda\t25000.0\timg/s\tbatch 256, same files, same run",
            "a_vs_torchvision\t0.80\tx\tratio in this run",
        ])

    def test_no_json_at_all_is_one_failure_row(self):
        out = peer_rows.peer_rows(["Traceback ...", "ImportError"], {}, "tv", "vs_tv", None, ["a"])
        self.assertEqual(out, ["tv\t-\timg/s\tpeer failed, see log"])


if __name__ == "__main__":
    unittest.main()
