"""What every stoker peer script shares: the image list, the result line, the timing loop.

A peer prints one JSON object as its last stdout line:
  {"peer": NAME, "stage": "cpu_decode"|"gpu_decode"|"end_to_end", "img_per_s": float|null,
   "images": int, "seconds": float, "workers": int, "batch": int, "note": str, "reason": str|null}
`img_per_s` is null (with a `reason`) when the peer cannot run here (no torch, no GPU...),
so a runner can print the row and say why instead of failing.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def list_images(folder):
    """Sorted JPEG paths under `folder` (recursively), the same files stoker converted."""
    out = []
    for root, _dirs, files in os.walk(folder):
        for f in files:
            if f.lower().endswith((".jpg", ".jpeg")):
                out.append(os.path.join(root, f))
    out.sort()
    if not out:
        raise SystemExit(f"no JPEG files under {folder}")
    return out


def read_all(paths):
    data = []
    for p in paths:
        with open(p, "rb") as fh:
            data.append(fh.read())
    return data


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def emit(peer, stage, img_per_s=None, images=0, seconds=0.0, workers=1, batch=1, note="", reason=None):
    row = {
        "peer": peer,
        "stage": stage,
        "img_per_s": img_per_s,
        "images": images,
        "seconds": round(seconds, 4),
        "workers": workers,
        "batch": batch,
        "note": note,
        "reason": reason,
    }
    print(json.dumps(row), flush=True)
    return row


def skip(peer, stage, reason, **kw):
    """The peer cannot run here: say why (exit status stays 0)."""
    emit(peer, stage, None, reason=reason, **kw)
    sys.exit(0)


def timed(step, seconds, warmup=1):
    """Calls `step()` (which returns images done) until `seconds` pass, after `warmup` calls.

    Returns (images, elapsed seconds)."""
    for _ in range(warmup):
        step()
    images = 0
    start = time.perf_counter()
    while True:
        images += step()
        el = time.perf_counter() - start
        if el >= seconds:
            return images, el


def last_json_line(text):
    """The last line of `text` that is a JSON object, parsed."""
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def loader_result(peer, images, secs, label=None, detail=""):
    """Prints and returns a loader peer's JSON line, in the form of the
    `loader_throughput` example's (`peer`, `images`, `seconds`, `img_per_s`); with a
    `label`, first the line people read: `label: N images in S s = R img/s (detail)`."""
    if label:
        print(f"{label}: {images} images in {secs:.2f} s = {images / secs:.1f} img/s ({detail})", flush=True)
    result = {"peer": peer, "images": images, "seconds": round(secs, 3), "img_per_s": round(images / secs, 1)}
    print(json.dumps(result), flush=True)
    return result


def time_epochs(run_epoch, epochs):
    """A loader peer's timing: one warm-up epoch (page cache, thread start, compilation),
    then `epochs` timed ones. `run_epoch()` returns the images it loaded; returns the timed
    epochs' images and seconds."""
    run_epoch()
    t0 = time.perf_counter()
    images = sum(run_epoch() for _ in range(epochs))
    return images, time.perf_counter() - t0


def time_batches(loader, epochs):
    """`time_epochs` over a loader that yields `(images, labels)` tensors per batch (FFCV's,
    PyTorch's DataLoader); the "training step" touches each batch."""

    def run_epoch():
        images = 0
        for batch, _labels in loader:
            float(batch[0, 0, 0, 0])
            images += batch.shape[0]
        return images

    return time_epochs(run_epoch, epochs)


def run_peer_process(script, a, flags, r):
    """Runs a loader peer's `script` in its own process, as the stoker side is (neither
    inherits the other's threads), with the loader flags of `a` (seed moved on by the round
    `r`) and `flags`; prints its output and returns its JSON line."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(script), "--batch", str(a.batch), "--size", str(a.size),
         "--workers", str(a.workers), "--epochs", str(a.epochs), "--seed", str(a.seed + r), *flags],
        check=True, capture_output=True, text=True,
    ).stdout
    print(out, end="", flush=True)
    return last_json_line(out)


def add_front_arguments(parser, work):
    """The flags of the peers whose stoker side may be the Python package: `--output`,
    `--front`, `--work` (default `target/tmp/WORK`) and the hidden `--stoker-dataset` of a
    `--front python` round."""
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--output", choices=["f32", "u8"], default="f32",
                        help="normalized float32 batches, or uint8 pixels (normalized later on the GPU)")
    parser.add_argument("--front", choices=["rust", "python"], default="rust",
                        help="stoker's side: the Rust example (--compare BIN) or the Python package")
    parser.add_argument("--work", default=os.path.join(here, "..", "..", "target", "tmp", work),
                        help="where the peer's and stoker's datasets are written (kept between runs)")
    parser.add_argument("--stoker-dataset", help=argparse.SUPPRESS)  # a --front python round


def stoker_dataset(folder, work, raw=None):
    """Converts `folder` with stoker's Python package under `work` (once), as the Rust
    example converts it: JPEG records, or raw ones at `raw` (`WxH`); returns its path."""
    import stoker

    name = os.path.basename(os.path.normpath(folder))
    out = os.path.join(work, f"{name}-stoker-{raw or 'jpeg'}")
    if not os.path.exists(out):
        size = tuple(int(v) for v in raw.split("x")) if raw else None
        os.makedirs(work, exist_ok=True)
        stoker.convert(folder, out + ".partial", encoding="raw" if raw else "jpeg", size=size, progress=False)
        os.replace(out + ".partial", out)
    return out


def run_stoker_python(a):
    """stoker's Python package over the dataset `a.stoker_dataset` with the work of the
    Rust example (RandomResizedCrop + flip, float32 normalized or uint8 by `a.output`),
    each batch taken as a tensor with `torch.from_dlpack`; prints and returns its JSON line."""
    import stoker
    import torch

    float32 = a.output == "f32"
    loader = stoker.Loader(
        a.stoker_dataset, a.batch, seed=a.seed, crop="random", size=a.size, hflip=0.5,
        mean=stoker.IMAGENET_MEAN if float32 else None, std=stoker.IMAGENET_STD if float32 else None,
        dtype="float32" if float32 else "uint8", device="cpu", workers=a.workers,
    )
    epochs = iter(range(a.epochs + 1))

    def run_epoch():
        loader.set_epoch(next(epochs))
        images = 0
        for pixels, _labels in loader:
            x = torch.from_dlpack(pixels)
            float(x.flatten()[0])  # the "training step" touches the batch
            images += x.shape[0]
        return images

    images, secs = time_epochs(run_epoch, a.epochs)
    return loader_result("stoker-python", images, secs,
                         f"stoker {stoker.__version__} Python package ({a.workers} workers)",
                         f"batch {a.batch}, {a.size}px, {a.output}")


def run_loader_example(a, extra=()):
    """Runs stoker-loader's `loader_throughput` example (`a.compare`) with the loader flags
    of `a` and the flags in `extra`; prints its output and returns its JSON line."""
    cmd = [
        a.compare, "--images", a.images, "--batch", str(a.batch), "--size", str(a.size),
        "--workers", str(a.workers), "--epochs", str(a.epochs), *extra,
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    print(out, end="", flush=True)
    return last_json_line(out)


def alternate(rounds, peer_name, run_peer, run_stoker):
    """Runs the peer and stoker in turn for `rounds` rounds, so that both see the same
    machine load; prints each round and a JSON summary whose ratio is the median of the
    per-round ratios (stoker / peer)."""
    import platform
    import statistics

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    results = []
    for r in range(rounds):
        peer = run_peer(r)
        ours = run_stoker()
        results.append((ours["img_per_s"], peer["img_per_s"], ours["img_per_s"] / peer["img_per_s"]))
        print(
            f"round {r}: stoker {ours['img_per_s']:.1f} img/s, {peer_name} {peer['img_per_s']:.1f} img/s, "
            f"ratio {results[-1][2]:.2f}x",
            flush=True,
        )
    print(f"load after: {os.getloadavg()}")
    print(json.dumps({
        "stoker_img_per_s": [x[0] for x in results],
        "peer_img_per_s": [x[1] for x in results],
        "median_ratio": round(statistics.median(x[2] for x in results), 2),
    }))


def add_loader_arguments(parser):
    """The flags every loader peer shares with the `loader_throughput` example, and the
    ones that run it beside the peer (`--compare BIN`, `--rounds`)."""
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--images", default=os.path.join(here, "..", "..", "target", "stoker-testdata", "bench-v1"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", metavar="BIN", help="stoker-loader's loader_throughput example: run both, alternating")
    parser.add_argument("--rounds", type=int, default=3)
