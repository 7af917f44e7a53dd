#!/usr/bin/env python3
"""Mean JPEG-engine utilization per throughput row, from `nvidia-smi dmon`.

Usage: dmon_jpg.py DMON_LOG THROUGHPUT_LOG  (rows for table.tsv on stdout)

DMON_LOG is the output of `nvidia-smi dmon -s u -o DT -d 1`: '#' header lines
naming the columns (the first holds the names, e.g. `#Date Time gpu sm mem
enc dec jpg ofa`, the second the units, e.g. `#YYYYMMDD HH:MM:SS Idx % ...`;
dmon repeats them now and then), then one line per GPU per second. Columns
are found by name in the header, never by position: which ones appear
depends on the driver and on -s/-o. Without a `Date` column (`-o T`) the
date is taken from the span being averaged. Times are local, as dmon prints
them, and turned into Unix seconds in the same time zone.

THROUGHPUT_LOG holds `ROWSPAN<TAB>row<TAB>unix start<TAB>unix end` lines
(decode/tests/gpu_throughput.rs). For each span this prints
`<row>_jpg_util_pct<TAB>mean<TAB>%<TAB>note`, the mean of the `jpg` column over
the samples stamped inside the span (a sample stamped second s covers about
(s - 1, s]; samples whose second lies strictly inside the span are used, or,
for spans too short to hold one, those within a second of it). Only the
first GPU index seen is used. A `-` (not supported) value is skipped.
"""

import sys
import time


def parse_dmon(lines):
    """Samples as (timestamp or None, date str or None, time str, jpg float or None).

    Returns (samples, has_jpg). A timestamp is None when the log has no date
    column (the caller supplies the date).
    """
    names = None
    samples = []
    has_jpg = False
    first_gpu = None
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            tokens = line.lstrip("#").split()
            lowered = [t.lower() for t in tokens]
            # The names header holds "gpu"; the units header ("Idx", "%") does not.
            if "gpu" in lowered:
                names = lowered
                has_jpg = has_jpg or "jpg" in names
            continue
        if names is None:
            continue
        tokens = line.split()
        if len(tokens) != len(names):
            continue
        row = dict(zip(names, tokens))
        if "gpu" in row:
            if first_gpu is None:
                first_gpu = row["gpu"]
            if row["gpu"] != first_gpu:
                continue
        clock = row.get("time")
        if clock is None:
            continue
        date = row.get("date")
        jpg = None
        if "jpg" in row:
            try:
                jpg = float(row["jpg"])
            except ValueError:
                jpg = None  # "-": not supported on this GPU / driver
        stamp = None
        if date is not None:
            try:
                stamp = time.mktime(time.strptime(date + " " + clock, "%Y%m%d %H:%M:%S"))
            except ValueError:
                continue
        samples.append((stamp, date, clock, jpg))
    return samples, has_jpg


def stamp_of(sample, span_start):
    """Unix seconds of a sample, borrowing the span's local date without a date column."""
    stamp, _, clock, _ = sample
    if stamp is not None:
        return stamp
    day = time.strftime("%Y%m%d", time.localtime(span_start))
    try:
        return time.mktime(time.strptime(day + " " + clock, "%Y%m%d %H:%M:%S"))
    except ValueError:
        return None


def parse_spans(lines):
    """(row, start, end) for every ROWSPAN line."""
    spans = []
    for raw in lines:
        fields = raw.rstrip("\n").split("\t")
        if len(fields) >= 4 and fields[0] == "ROWSPAN":
            try:
                spans.append((fields[1], float(fields[2]), float(fields[3])))
            except ValueError:
                pass
    return spans


def span_mean(samples, start, end):
    """(mean jpg %, samples used) over a span, or (None, 0)."""
    stamped = [(stamp_of(s, start), s[3]) for s in samples]
    stamped = [(t, v) for t, v in stamped if t is not None and v is not None]
    inside = [v for t, v in stamped if t - 1 >= start - 1e-3 and t <= end + 1e-3]
    if not inside:
        inside = [v for t, v in stamped if start - 1 <= t <= end + 1]
    if not inside:
        return None, 0
    return sum(inside) / len(inside), len(inside)


def rows(dmon_lines, throughput_lines):
    samples, has_jpg = parse_dmon(dmon_lines)
    out = []
    for name, start, end in parse_spans(throughput_lines):
        label = name + "_jpg_util_pct"
        if not has_jpg:
            out.append((label, "-", "%", "nvidia-smi dmon has no jpg column"))
            continue
        mean, count = span_mean(samples, start, end)
        if mean is None:
            out.append((label, "-", "%", "no dmon jpg samples in the row's span"))
        else:
            out.append(
                (label, "%.1f" % mean, "%", "mean of %d dmon samples (jpg column), %.1f s span" % (count, end - start))
            )
    return out


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], errors="replace") as f:
        dmon = f.readlines()
    with open(argv[2], errors="replace") as f:
        throughput = f.readlines()
    for r in rows(dmon, throughput):
        print("\t".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
