#!/usr/bin/env python3
"""Peer: torchvision.io.decode_jpeg, batched, on the GPU (nvJPEG) or the CPU.

`--device cuda` hands a list of `--batch` encoded tensors to decode_jpeg(device="cuda") per
call (torchvision's batched nvJPEG path) and synchronizes before stopping the clock;
`--device cpu` decodes the same list on the CPU (libjpeg-turbo, one thread per call) with
torch's intra-op threads = cores. Output: one JSON row (see peer_common.py); a row with
img_per_s null and the reason when torch/torchvision or CUDA is missing.

With `--cpu-fallback` (GPU only), files that decode_jpeg(device="cuda") rejects on their own
(CMYK, for one) are decoded on the CPU in every batch they fall in and copied to the GPU,
as a user of the GPU path has to; the note says how many.

Usage: torchvision_decode.py IMAGES_DIR [--device cuda|cpu] [--batch B] [--seconds T] [--cpu-fallback]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("images")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--cpu-fallback", action="store_true")
    a = ap.parse_args()
    gpu = a.device.startswith("cuda")
    name = "torchvision_decode_jpeg_" + ("cuda" if gpu else "cpu")
    stage = "gpu_decode" if gpu else "cpu_decode"
    try:
        import torch
        import torchvision
        from torchvision.io import decode_jpeg, ImageReadMode
    except ImportError as e:
        pc.skip(name, stage, f"torch/torchvision not importable: {e}", batch=a.batch)
    if gpu and not torch.cuda.is_available():
        pc.skip(name, stage, "torch.cuda.is_available() is False", batch=a.batch)
    if not gpu:
        torch.set_num_threads(pc.cores())

    paths = pc.list_images(a.images)
    encoded = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in pc.read_all(paths)]
    n = len(encoded)
    batches = []
    for start in range(0, max(n, a.batch), a.batch):
        batches.append([encoded[(start + j) % n] for j in range(a.batch)])
    rejected = set()
    if gpu and a.cpu_fallback:
        for i, t in enumerate(encoded):
            try:
                decode_jpeg(t, mode=ImageReadMode.RGB, device=a.device)
            except RuntimeError:
                rejected.add(i)
        torch.cuda.synchronize()
    # Per batch: the positions decoded on the GPU and those decoded on the CPU.
    split = []
    for start in range(0, max(n, a.batch), a.batch):
        idx = [(start + j) % n for j in range(a.batch)]
        split.append(([encoded[i] for i in idx if i not in rejected],
                      [encoded[i] for i in idx if i in rejected]))
    state = {"i": 0}

    def step():
        k = state["i"] % len(batches)
        state["i"] += 1
        if not rejected:
            out = decode_jpeg(batches[k], mode=ImageReadMode.RGB, device=a.device)
        else:
            on_gpu, on_cpu = split[k]
            out = decode_jpeg(on_gpu, mode=ImageReadMode.RGB, device=a.device) if on_gpu else []
            out += [decode_jpeg(t, mode=ImageReadMode.RGB).to(a.device, non_blocking=True) for t in on_cpu]
        if gpu:
            torch.cuda.synchronize()
        assert len(out) == a.batch
        return a.batch

    images, el = pc.timed(step, a.seconds, warmup=2)
    dev = torch.cuda.get_device_name(0) if gpu else f"{pc.cores()} CPU threads"
    fallback = f"; {len(rejected)} of {n} files rejected on the GPU, decoded on the CPU" if a.cpu_fallback else ""
    pc.emit(name, stage, images / el, images, el, 1, a.batch,
            f"torch {torch.__version__} torchvision {torchvision.__version__}, decode_jpeg(list of {a.batch}, device={a.device!r}) on {dev}{fallback}")


if __name__ == "__main__":
    main()
