#!/usr/bin/env python3
"""Is a map's page-fault path what holds a cold read of stoker's shards below the disk's pace?

Reads the `.lmdb` shards of a dataset cold (each pass after format_peers.py's page-cache
drop: fdatasync + fadvise DONTNEED, checked with fincore) four ways, in rounds: a plain
read-only map touched one byte per 4 KiB page, the same map after madvise(SEQUENTIAL) or
madvise(WILLNEED), and read(2) in 1 MiB pieces. stoker.Dataset reads through such a map,
so the map rows are its ceiling on this machine and the read(2) row is what the same
bytes cost through the other path.

    /tmp/peers-venv/bin/python benches/peers/cold_map_read.py /tmp/format-peers/ds/stoker
"""

import mmap
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from format_peers import drop_from_page_cache  # noqa: E402


def via_map(files, advice):
    s = 0
    for f in files:
        with open(f, "rb") as fh:
            m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
            if advice is not None:
                m.madvise(advice)
            for off in range(0, len(m), 4096):  # one byte of each page faults the page in
                s += m[off]
            m.close()
    return s


def via_read(files):
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.read(1 << 20):
                pass


def main():
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".lmdb"))
    size = sum(os.path.getsize(f) for f in files)
    modes = {
        "map": lambda: via_map(files, None),
        "map+SEQUENTIAL": lambda: via_map(files, mmap.MADV_SEQUENTIAL),
        "map+WILLNEED": lambda: via_map(files, mmap.MADV_WILLNEED),
        "read(1 MiB)": lambda: via_read(files),
    }
    for rnd in range(rounds):
        for name, fn in modes.items():
            resident = drop_from_page_cache(path)
            t0 = time.perf_counter()
            fn()
            s = time.perf_counter() - t0
            print(f"round {rnd} {name:16s} {size / s / 1e6:6.0f} MB/s (resident after drop {resident:.1%})")


if __name__ == "__main__":
    main()
