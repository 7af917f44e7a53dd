#!/usr/bin/env python3
"""What `dtype="bfloat16"` saves a model trained in bfloat16, against its peer: the
`float32` batch cast by PyTorch (`torch.from_dlpack(images).to(torch.bfloat16)`), which is
what such a training loop did before the loader wrote bfloat16 itself.

Both run the same loader settings (random resized crops to `--size` with flips, ImageNet
normalization, seed 0) over the same dataset, epochs 1..`--epochs` after a warm-up epoch,
in alternation `--rounds` times, on the CPU path (`device="cpu"`; on the GPU the same
comparison is a kernel writing half the bytes against a kernel plus a cast). `float16`
runs beside them as a reference (same bytes as bfloat16, the F16C conversion). Each line
gives images per second through Python, the batch buffers' bytes, and the ratio.

    target/python-venv/bin/python benches/peers/bf16_output.py [--images DIR] [--repeat 4]

`--images` is an ImageFolder tree (default `testdata/imagefolder`, 164 photographs),
converted `--repeat` times over into one dataset under a temporary folder.
"""

import argparse
import os
import statistics
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def make_dataset(images, repeat, tmp):
    import stoker

    classes = sorted(d for d in os.listdir(images) if os.path.isdir(os.path.join(images, d)))
    files = [f"{cls}/{name}" for cls in classes for name in sorted(os.listdir(os.path.join(images, cls)))]
    listing = os.path.join(tmp, "list.txt")
    with open(listing, "w") as f:
        for _ in range(repeat):
            for p in files:
                f.write(f"{p},{classes.index(p.split('/')[0])}\n")
    out = os.path.join(tmp, "ds")
    with warnings.catch_warnings():
        # Each photo listed `repeat` times on purpose (one record per row): stoker says so.
        warnings.simplefilter("ignore", UserWarning)
        stoker.convert(images, out, list=listing, progress=False)
    return out


def run(ds, dtype, cast, size, batch, epochs):
    import torch

    import stoker

    loader = stoker.Loader(ds, batch, shuffle=True, seed=0, size=size, hflip=0.5,
                           mean=stoker.IMAGENET_MEAN, std=stoker.IMAGENET_STD,
                           dtype=dtype, device="cpu")
    for images, _ in loader.epoch(0):
        torch.from_dlpack(images)
    n, t0 = 0, time.perf_counter()
    for e in range(1, epochs + 1):
        for images, _ in loader.epoch(e):
            x = torch.from_dlpack(images)
            if cast:
                x = x.to(torch.bfloat16)
            n += x.shape[0]
    rate = n / (time.perf_counter() - t0)
    per_batch = batch * 3 * size * size * (4 if dtype == "float32" else 2)
    loader.close()
    return rate, per_batch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", default=os.path.join(REPO, "testdata", "imagefolder"))
    p.add_argument("--repeat", type=int, default=4)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        ds = make_dataset(a.images, a.repeat, tmp)
        runs = {"float32 + .to(bfloat16)": ("float32", True), "bfloat16": ("bfloat16", False),
                "float16": ("float16", False)}
        rates = {k: [] for k in runs}
        sizes = {}
        for _ in range(a.rounds):
            for name, (dtype, cast) in runs.items():
                r, b = run(ds, dtype, cast, a.size, a.batch, a.epochs)
                rates[name].append(r)
                sizes[name] = b
        print(f"torch {torch.__version__}, {os.cpu_count()} cores, {a.repeat}x {a.images}, "
              f"size {a.size}, batch {a.batch}, epochs 1-{a.epochs}, {a.rounds} rounds")
        peer = statistics.median(rates["float32 + .to(bfloat16)"])
        for name, rs in rates.items():
            med = statistics.median(rs)
            print(f"{name:26s} {min(rs):7.0f}-{max(rs):7.0f} img/s (median {med:6.0f}); "
                  f"batch buffer {sizes[name] / 2**20:5.1f} MiB; ratio to peer {med / peer:.2f}")


if __name__ == "__main__":
    main()
