#!/usr/bin/env python3
"""PyTorch-style loader peer for stoker-loader's CPU path.

What a torchvision training script does per image, re-implemented with PIL + numpy because
the torch wheels on plain PyPI (CUDA builds, several GB with their nvidia-* dependencies) are
not practical on the 2-core CI machine:

    PIL.Image.open(path).convert("RGB")                 # decode (Pillow / libjpeg-turbo)
    RandomResizedCrop(size)   scale=(0.08, 1), ratio=(3/4, 4/3), 10 attempts, center fallback,
                              img.crop(box).resize((size, size), BILINEAR)   (= F.resized_crop)
    RandomHorizontalFlip(0.5) img.transpose(FLIP_LEFT_RIGHT)
    ToTensor                  HWC uint8 -> CHW float32 / 255
    Normalize(mean, std)

Batches are built by `--workers` worker *processes* (torch DataLoader with num_workers):
the main process sends each worker whole batches of indices (round robin, like DataLoader's
per-worker index queues) with at most `prefetch_factor` (2) batches per worker in flight; a
worker writes the batch straight into a shared-memory slot and returns only the slot number
(torch also hands batches over in shared memory; writing into the slot skips torch's collate
copy, which favours this peer). The main process consumes batches in order.

    python3 benches/peers/torch_loader.py --images target/stoker-testdata/bench-v1 \
        --batch 64 --size 224 --workers 2 --epochs 3

Prints img/s over `--epochs` timed epochs after one warm-up epoch, and a JSON line.

Crop parity (stoker's CPU crops vs this file's PIL crop/resize/flip on the same decoded pixels):

    cargo run --release -p stoker-loader --example crop_parity -- /tmp/parity
    python3 benches/peers/torch_loader.py --parity /tmp/parity

Same-run comparison with stoker-loader's CPU path (alternating rounds, so both see the same
machine load; the ratio is the median of the per-round ratios):

    cargo build --release -p stoker-loader --example loader_throughput
    python3 benches/peers/torch_loader.py --compare target/release/examples/loader_throughput \
        --images target/stoker-testdata/bench-v1 --batch 64 --size 224 --workers 2 --epochs 3 --rounds 3
"""

import argparse
import math
import multiprocessing as mp
import os
import random
import sys
import time
from multiprocessing import shared_memory

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


def rrc_params(rng, width, height, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
    """torchvision.transforms.RandomResizedCrop.get_params, with `random` for the draws."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            i = rng.randint(0, height - h)
            j = rng.randint(0, width - w)
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w = width
        h = height
    return (height - h) // 2, (width - w) // 2, h, w


def load(path, size, rng, out):
    """One sample into `out` (a (3, size, size) float32 view of the batch slot)."""
    img = Image.open(path).convert("RGB")
    i, j, h, w = rrc_params(rng, img.width, img.height)
    img = img.crop((j, i, j + w, i + h)).resize((size, size), Image.BILINEAR)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    # ToTensor + Normalize, in place (as torchvision's div / sub_ / div_ on one tensor).
    np.copyto(out, np.asarray(img, dtype=np.uint8).transpose(2, 0, 1), casting="unsafe")
    out *= np.float32(1.0 / 255.0)
    out -= MEAN
    out /= STD


def worker(wid, files, size, batch, shm_name, n_slots, tasks, results, seed):
    shm = shared_memory.SharedMemory(name=shm_name)
    ring = np.ndarray((n_slots, batch, 3, size, size), dtype=np.float32, buffer=shm.buf)
    rng = random.Random(seed * 1000 + wid)
    try:
        while True:
            task = tasks.get()
            if task is None:
                break
            number, slot, indices = task
            for k, idx in enumerate(indices):
                load(files[idx], size, rng, ring[slot, k])
            results.put((number, slot, len(indices)))
    finally:
        del ring
        shm.close()


def run_peer(a):
    files = sorted(
        os.path.join(a.images, f) for f in os.listdir(a.images) if f.lower().endswith((".jpg", ".jpeg"))
    )
    if not files:
        sys.exit(f"no JPEG files in {a.images}")
    n_slots = a.workers * a.prefetch_factor
    slot_bytes = a.batch * 3 * a.size * a.size * 4
    shm = shared_memory.SharedMemory(create=True, size=n_slots * slot_bytes)
    ring = np.ndarray((n_slots, a.batch, 3, a.size, a.size), dtype=np.float32, buffer=shm.buf)
    ctx = mp.get_context("fork")
    task_queues = [ctx.Queue() for _ in range(a.workers)]
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=worker,
            args=(w, files, a.size, a.batch, shm.name, n_slots, task_queues[w], results, a.seed),
            daemon=True,
        )
        for w in range(a.workers)
    ]
    for pr in procs:
        pr.start()

    def run_epoch(epoch):
        order = np.random.default_rng(a.seed + epoch).permutation(len(files))
        batches = [order[i : i + a.batch].tolist() for i in range(0, len(order), a.batch)]
        free = list(range(n_slots))
        sent, done, ready, images, checksum = 0, 0, {}, 0, 0.0
        while done < len(batches):
            while free and sent < len(batches):
                task_queues[sent % a.workers].put((sent, free.pop(), batches[sent]))
                sent += 1
            while done not in ready:
                number, slot, n = results.get()
                ready[number] = (slot, n)
            slot, n = ready.pop(done)
            view = ring[slot, :n]  # the "training step" touches the batch
            checksum += float(view[0, 0, 0, 0])
            images += n
            free.append(slot)
            done += 1
        return images, checksum

    try:
        run_epoch(0)  # warm-up: page cache, worker start, imports
        t0 = time.perf_counter()
        images = 0
        for epoch in range(1, a.epochs + 1):
            n, _ = run_epoch(epoch)
            images += n
        secs = time.perf_counter() - t0
    finally:
        for q in task_queues:
            q.put(None)
        for pr in procs:
            pr.join(timeout=5)
        del ring
        shm.close()
        shm.unlink()
    return pc.loader_result(
        "pil-numpy-mp", images, secs,
        f"torch-style loader (PIL {Image.__version__}, numpy {np.__version__}, {a.workers} worker processes)",
        f"batch {a.batch}, {a.size}px")


def parity(directory, size=224):
    """Compares stoker's U8 crops with PIL's on the pixels stoker decoded (see crop_parity.rs)."""
    same, worst, psnrs = [], 0, []
    with open(os.path.join(directory, "params.txt")) as f:
        rows = [list(map(int, line.split())) for line in f if line.strip()]
    for i, w, h, x, y, cw, ch, flip in rows:
        with open(os.path.join(directory, f"{i}.rgb"), "rb") as f:
            src = Image.frombytes("RGB", (w, h), f.read())
        img = src.crop((x, y, x + cw, y + ch)).resize((size, size), Image.BILINEAR)
        if flip:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        ref = np.asarray(img).astype(np.int32)
        with open(os.path.join(directory, f"{i}.out"), "rb") as f:
            out = np.frombuffer(f.read(), np.uint8).reshape(size, size, 3).astype(np.int32)
        d = np.abs(ref - out)
        worst = max(worst, int(d.max()))
        same.append(float((d == 0).mean()))
        mse = float((d.astype(np.float64) ** 2).mean())
        psnrs.append(10 * math.log10(255**2 / mse) if mse > 0 else 99.0)
    print(
        f"crop parity over {len(rows)} images: {100 * sum(same) / len(same):.2f}% of u8 levels identical, "
        f"max difference {worst}, PSNR min {min(psnrs):.1f} dB / mean {sum(psnrs) / len(psnrs):.1f} dB"
    )
    return worst


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pc.add_loader_arguments(p)
    p.add_argument("--prefetch-factor", type=int, default=2)
    p.add_argument("--parity", metavar="DIR", help="check crop_parity.rs output against PIL and exit")
    a = p.parse_args()
    if a.parity:
        sys.exit(0 if parity(a.parity, a.size) <= 1 else 1)
    if not a.compare:
        run_peer(a)
        return
    pc.alternate(a.rounds, "peer", lambda r: run_peer(a), lambda: pc.run_loader_example(a))


if __name__ == "__main__":
    main()
