"""What one rank's epoch order costs, stoker beside the peers' way in the same run.

stoker: `cargo bench --bench epoch_order -- N` (time and peak heap of `Sampler::order`).
Peers: FFCV draws `np.random.default_rng(seed).permutation(N)` per epoch and keeps its
rank's slice; torch's `DistributedSampler` draws `torch.randperm(N)` (then `.tolist()`,
left out here: it only adds to the peer's cost). Peak memory of the peers is numpy's
tracemalloc count, or the process's RSS growth for torch.

    python benches/peers/epoch_order.py 100000000    # needs numpy; torch is optional
"""

import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1e3
    return 0.0


def numpy_order(n, world):
    tracemalloc.start()
    t = time.perf_counter()
    perm = np.random.default_rng(1 + 3).permutation(n)
    share = -(-n // world)
    mine = perm[:share].copy()
    del perm
    seconds = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return {"case": "numpy permutation (FFCV)", "records": n, "world": world,
            "seconds": round(seconds, 3), "peak_mb": round(peak, 1),
            "kept_mb": round(mine.nbytes / 1e6, 1)}


def torch_order(n, world):
    try:
        import torch
    except ImportError:
        return None
    before = rss_mb()
    t = time.perf_counter()
    g = torch.Generator()
    g.manual_seed(4)
    perm = torch.randperm(n, generator=g)
    share = -(-n // world)
    mine = perm[:share].clone()
    peak = rss_mb() - before
    del perm
    seconds = time.perf_counter() - t
    return {"case": "torch.randperm (DistributedSampler)", "records": n, "world": world,
            "seconds": round(seconds, 3), "peak_mb": round(peak, 1),
            "kept_mb": round(mine.numel() * 8 / 1e6, 1)}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    out = subprocess.run(
        ["cargo", "bench", "--quiet", "--bench", "epoch_order", "--", str(n)],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for world in (1, 64):
        rows.append(numpy_order(n, world))
        row = torch_order(n, world)
        if row:
            rows.append(row)
    print(f"{'case':40} {'world':>5} {'seconds':>8} {'peak MB':>9} {'kept MB':>8}")
    for r in sorted(rows, key=lambda r: r["world"]):
        print(f"{r['case']:40} {r['world']:>5} {r['seconds']:>8.3f} {r['peak_mb']:>9.1f} {r['kept_mb']:>8.1f}")


if __name__ == "__main__":
    main()
