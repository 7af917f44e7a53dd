#!/usr/bin/env python3
"""Turns a peer's JSON rows (benches/peers/*.py, one object per line) into device-check
table rows `name<TAB>value<TAB>unit<TAB>note`, plus `<ours>_<suffix>` ratio rows: our
rows (already in the table) divided by the peer's figure from the same run.

Usage: peer_rows.py LOG TABLE --suffix vs_torchvision [--name NAME] [--ratio-peer PEER] OURS...
  --name        table row name for the peer (default: each JSON row's "peer")
  --ratio-peer  only this peer's row gives ratios (default: every successful row)
Not a device-check part (parts are the *.sh files of this directory); tested by
peer_rows_test.py.
"""

import argparse
import json


def table_rows(path):
    rows = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 3:
            rows[f[0]] = f[1]
    return rows


def peer_rows(log_lines, rows, name, suffix, ratio_peer, ours):
    """The table lines (without newlines) for one peer log."""
    out, seen = [], False
    for line in log_lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except ValueError:
            continue
        seen = True
        row_name = name or r.get("peer", "peer")
        rate = r.get("img_per_s")
        if rate is None:
            out.append("%s\t-\timg/s\t%s" % (row_name, r.get("reason") or "peer failed, see log"))
            continue
        note = r.get("note") or "batch %s, same files, same run" % r.get("batch")
        out.append("%s\t%.1f\timg/s\t%s" % (row_name, rate, note))
        if ratio_peer and r.get("peer") != ratio_peer:
            continue
        for mine in ours:
            try:
                out.append("%s_%s\t%.2f\tx\tratio in this run" % (mine, suffix, float(rows[mine]) / rate))
            except (KeyError, ValueError, ZeroDivisionError):
                pass
    if not seen:
        out.append("%s\t-\timg/s\tpeer failed, see log" % (name or "peer"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("table")
    ap.add_argument("--suffix", required=True)
    ap.add_argument("--name")
    ap.add_argument("--ratio-peer")
    ap.add_argument("ours", nargs="*")
    a = ap.parse_intermixed_args()
    lines = peer_rows(open(a.log), table_rows(a.table), a.name, a.suffix, a.ratio_peer, a.ours)
    with open(a.table, "a") as t:
        for line in lines:
            t.write(line + "\n")


if __name__ == "__main__":
    main()
