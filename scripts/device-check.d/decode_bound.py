#!/usr/bin/env python3
"""Which side sets the pace of a GPU decode row: the JPEG engines or the host.

Usage: decode_bound.py TABLE ROW [ROW ...]   (rows for table.tsv on stdout)

TABLE is the device check's table.tsv (`name<TAB>value<TAB>unit<TAB>note`). For
each ROW (a throughput row of decode/tests/gpu_throughput.rs, in img/s) it reads,
from the same run, `<ROW>_jpg_util_pct` (the engines' mean utilization over the
row's timed loop, dmon_jpg.py) and `<ROW>_host_us_per_img` (decode_batch's wall
time per image on the calling thread), and prints

  <ROW>_host_busy_pct   host time per image x images per second: how much of the
                        wall time the calling thread spent inside decode_batch
  <ROW>_bound           engines | host | neither, with the figures in the note

Engines: they were busy at least ENGINES_BUSY % of the time (more images per second
need more engine time). Host: the engines had room and the calling thread was
inside decode_batch at least HOST_BUSY % of the time (its parsing and submission
set the pace). Neither: both had room (waits between batches, the consumer).
A figure that is missing gives `unknown`, saying which.
"""

import sys

ENGINES_BUSY = 90.0
HOST_BUSY = 90.0


def read_table(lines):
    """name -> float value (the first parsable one of that name)."""
    values = {}
    for line in lines:
        cols = line.rstrip("\n").split("\t")
        if len(cols) < 2 or cols[0] in values:
            continue
        try:
            values[cols[0]] = float(cols[1])
        except ValueError:
            continue
    return values


def verdict(values, row):
    """Rows (name, value, unit, note) for `row`."""
    rate = values.get(row)
    jpg = values.get(row + "_jpg_util_pct")
    host_us = values.get(row + "_host_us_per_img")
    missing = [n for n, v in ((row, rate), (row + "_jpg_util_pct", jpg),
                              (row + "_host_us_per_img", host_us)) if v is None]
    out = []
    host_busy = None
    if rate is not None and host_us is not None:
        host_busy = 100.0 * host_us * rate / 1e6
        out.append((row + "_host_busy_pct", "%.1f" % host_busy, "%",
                    "host us/img x img/s: share of the wall time inside decode_batch"))
    if missing:
        out.append((row + "_bound", "unknown", "-", "missing: " + ", ".join(missing)))
        return out
    if jpg >= ENGINES_BUSY:
        side = "engines"
    elif host_busy >= HOST_BUSY:
        side = "host"
    else:
        side = "neither"
    out.append((row + "_bound", side, "-",
                "%.0f img/s; engines busy %.0f %% (>= %.0f: engines); host busy %.0f %% (>= %.0f: host)"
                % (rate, jpg, ENGINES_BUSY, host_busy, HOST_BUSY)))
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as fh:
        values = read_table(fh)
    for row in argv[2:]:
        for r in verdict(values, row):
            print("\t".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
