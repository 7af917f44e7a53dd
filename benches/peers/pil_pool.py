#!/usr/bin/env python3
"""Peer without torch: PIL in a multiprocessing pool with workers = cores.

This is the work a PyTorch DataLoader with PIL workers does, for machines where torch is
not installed (the CPU CI machine): `--mode decode` decodes each JPEG to RGB (stoker's
`cpu_decode` stage); `--mode loader` also applies torchvision's RandomResizedCrop(size)
(bilinear), a random horizontal flip, ToTensor and Normalize, and stacks float32 NCHW
batches (stoker's `end_to_end` stage). Batches stay in the worker: the hand-off to the
main process, which a DataLoader pays through shared memory, is not counted, so this
peer's figure is an upper bound for it.

Usage: pil_pool.py IMAGES_DIR [--mode decode|loader] [--workers N] [--batch B] [--size S]
                   [--seconds T]
"""

import argparse
import math
import os
import random
import sys
import time
from io import BytesIO

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # pragma: no cover - reported as a skipped row
    np = None
    Image = None
    _IMPORT_ERROR = str(e)

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

_DATA = None
_ARGS = None


def _init(data, mode, size):
    global _DATA, _ARGS
    _DATA = data
    _ARGS = (mode, size)


def rrc_params(rng, w, h, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision RandomResizedCrop.get_params: 10 tries, then a center crop."""
    area = w * h
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        ar = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        cw = int(round(math.sqrt(target * ar)))
        ch = int(round(math.sqrt(target / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    in_ratio = w / h
    if in_ratio < ratio[0]:
        cw, ch = w, int(round(w / ratio[0]))
    elif in_ratio > ratio[1]:
        ch, cw = h, int(round(h * ratio[1]))
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def _work(task):
    t0 = time.process_time()
    n = _work_inner(task)
    return n, time.process_time() - t0


def _work_inner(task):
    indices, seed = task
    mode, size = _ARGS
    rng = random.Random(seed)
    if mode == "decode":
        for i in indices:
            im = Image.open(BytesIO(_DATA[i]))
            im = im.convert("RGB")
            im.load()
        return len(indices)
    mean = np.array(MEAN, dtype=np.float32).reshape(3, 1, 1)
    std = np.array(STD, dtype=np.float32).reshape(3, 1, 1)
    batch = np.empty((len(indices), 3, size, size), dtype=np.float32)
    for k, i in enumerate(indices):
        im = Image.open(BytesIO(_DATA[i])).convert("RGB")
        x, y, cw, ch = rrc_params(rng, im.width, im.height)
        im = im.resize((size, size), Image.BILINEAR, box=(x, y, x + cw, y + ch))
        if rng.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        a = np.asarray(im, dtype=np.float32).transpose(2, 0, 1) / 255.0
        batch[k] = (a - mean) / std
    return len(indices)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("images")
    ap.add_argument("--mode", choices=["decode", "loader"], default="decode")
    ap.add_argument("--workers", type=int, default=pc.cores())
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seconds", type=float, default=5.0)
    a = ap.parse_args()
    stage = "cpu_decode" if a.mode == "decode" else "end_to_end"
    name = f"pil_pool_{a.mode}"
    if np is None:
        pc.skip(name, stage, f"Pillow/numpy not importable: {_IMPORT_ERROR}")
    paths = pc.list_images(a.images)
    data = pc.read_all(paths)
    n = len(data)
    # Small tasks keep all workers busy in decode mode; loader mode hands out whole batches.
    chunk = a.batch if a.mode == "loader" else max(1, min(16, a.batch))
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    with ctx.Pool(a.workers, initializer=_init, initargs=(data, a.mode, a.size)) as pool:
        counter = [0]

        def tasks():
            while True:
                start = counter[0] % n
                idx = [(start + j) % n for j in range(chunk)]
                counter[0] += chunk
                yield idx, counter[0]

        it = pool.imap_unordered(_work, tasks(), chunksize=1)
        # Warm-up: one task per worker.
        for _ in range(a.workers):
            next(it)
        images = 0
        cpu = 0.0
        t0 = time.perf_counter()
        while True:
            n, c = next(it)
            images += n
            cpu += c
            el = time.perf_counter() - t0
            if el >= a.seconds:
                break
        pool.terminate()
    note = (
        f"PIL {Image.__version__} decode+convert RGB" if a.mode == "decode"
        else f"PIL {Image.__version__} decode + RandomResizedCrop({a.size}) bilinear + flip + normalize -> f32 NCHW, no hand-off"
    )
    row = pc.emit(name, stage, images / el, images, el, a.workers, a.batch if a.mode == "loader" else chunk,
                  note + f"; {images / cpu:.0f} img per worker CPU-second" if cpu > 0 else note)
    del row


if __name__ == "__main__":
    main()
