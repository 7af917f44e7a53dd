"""Python overhead on the CPU path: the same epochs through `stoker.Loader` (Python,
batches taken with `numpy.from_dlpack`) and through the Rust loader (the `loader_dump`
example's `--time` mode), alternating in one run, same dataset and settings.

    pip install ./python numpy                 # the release build of the package
    cargo build --release --example loader_dump
    python benches/python_iteration.py [--rounds 5] [--epochs 4] [--copies 20]

The dataset is the bundled sample (15 photos) listed `--copies` times (a list file),
converted once into a temporary directory. Prints one line per run and the ratio of the
medians (Python / Rust) and the median of the per-round ratios; docs/BENCHMARKS.md records it.
"""

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import stoker

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "data" / "sample"


def make_dataset(tmp: Path, copies: int) -> Path:
    photos = sorted(p.relative_to(SAMPLE) for p in SAMPLE.rglob("*.jpg"))
    classes = sorted({p.parts[0] for p in photos})
    lines = [f"{p},{classes.index(p.parts[0])}" for _ in range(copies) for p in photos]
    (tmp / "list.txt").write_text("\n".join(lines) + "\n")
    out = tmp / "ds"
    stoker.convert(SAMPLE, out, list=tmp / "list.txt", progress=False)
    return out


def python_run(ds, a) -> float:
    loader = stoker.Loader(
        ds, a.batch_size, seed=0, crop="random", size=a.size, hflip=0.5, dtype=a.dtype,
        device="cpu", workers=a.workers, rank=0, world_size=1,
    )
    t0 = time.perf_counter()
    images, touched = 0, 0.0
    for epoch in range(a.epochs):
        for batch in loader.epoch(epoch):
            x = np.from_dlpack(batch.images)
            images += x.shape[0]
            touched += float(x.flat[0])  # read it, as a training step would
    return images / (time.perf_counter() - t0)


def rust_run(exe, ds, a) -> float:
    out = subprocess.run(
        [str(exe), str(ds), "--batch-size", str(a.batch_size), "--seed", "0", "--crop", "random",
         "--size", str(a.size), "--hflip", "0.5", "--dtype", a.dtype, "--workers", str(a.workers),
         "--time", str(a.epochs)],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)["images_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--copies", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    exe = REPO / "target" / "release" / "examples" / "loader_dump"
    if not exe.exists():
        subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "loader_dump"], cwd=REPO, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        ds = make_dataset(Path(tmp), a.copies)
        n = len(stoker.Dataset(ds))
        print(f"dataset: {n} records ({a.copies} × the sample), batch {a.batch_size}, {a.size}² {a.dtype}, "
              f"{a.workers} workers, {a.epochs} epochs per run")
        py, rs = [], []
        rust_run(exe, ds, a)  # warm the page cache and the binary
        for r in range(a.rounds):
            # Alternate which goes first, so a drift in the machine's load favours neither.
            if r % 2 == 0:
                rs.append(rust_run(exe, ds, a))
                py.append(python_run(ds, a))
            else:
                py.append(python_run(ds, a))
                rs.append(rust_run(exe, ds, a))
            print(f"round {r}: rust {rs[-1]:.0f} img/s, python {py[-1]:.0f} img/s")
        mp, mr = statistics.median(py), statistics.median(rs)
        # Each round's pair ran back to back, so its ratio is the least disturbed by load
        # from other processes; the median of those is the figure to read.
        pairs = statistics.median(p / r for p, r in zip(py, rs))
        print(f"median: rust {mr:.0f} img/s, python {mp:.0f} img/s, python/rust = {mp / mr:.3f}; "
              f"median of per-round ratios = {pairs:.3f}")


if __name__ == "__main__":
    main()
