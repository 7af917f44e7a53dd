#!/usr/bin/env python3
"""Peer: NVIDIA nvImageCodec batched decode, per backend (hardware engines, CUDA), when installed.

Decodes lists of `--batch` encoded JPEGs with `nvimgcodec.Decoder(backends=[...])` for the
backend kinds `hw` (HW_GPU_ONLY: the A100/H100/H200 JPEG engines) and `cuda` (GPU_ONLY), and
synchronizes the device before stopping the clock. One JSON row per backend; rows with
img_per_s null and the reason when nvImageCodec (or a backend) is unavailable.

Usage: nvimagecodec_decode.py IMAGES_DIR [--backend hw|cuda|all] [--batch B] [--seconds T]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402


def sync():
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
            return True
    except ImportError:
        pass
    return False


def run(nvimgcodec, kind_name, data, batch, seconds):
    name = f"nvimagecodec_{kind_name}"
    kinds = {"hw": "HW_GPU_ONLY", "cuda": "GPU_ONLY"}
    kind = getattr(nvimgcodec.BackendKind, kinds[kind_name], None)
    if kind is None:
        return pc.emit(name, "gpu_decode", None, batch=batch, reason=f"BackendKind.{kinds[kind_name]} not in this nvImageCodec")
    try:
        dec = nvimgcodec.Decoder(backends=[nvimgcodec.Backend(kind)])
    except Exception as e:  # noqa: BLE001 - any failure is a reason for the row
        return pc.emit(name, "gpu_decode", None, batch=batch, reason=f"Decoder({kinds[kind_name]}) failed: {e}")
    n = len(data)
    batches = [[data[(s + j) % n] for j in range(batch)] for s in range(0, max(n, batch), batch)]
    state = {"i": 0, "bad": 0}
    synced = {"torch": False}

    def step():
        b = batches[state["i"] % len(batches)]
        state["i"] += 1
        out = dec.decode(b)
        synced["torch"] = sync()
        ok = sum(1 for im in out if im is not None)
        state["bad"] += len(b) - ok
        return ok

    try:
        images, el = pc.timed(step, seconds, warmup=2)
    except Exception as e:  # noqa: BLE001
        return pc.emit(name, "gpu_decode", None, batch=batch, reason=f"decode failed: {e}")
    if images == 0:
        return pc.emit(name, "gpu_decode", None, batch=batch, reason="the backend decoded none of the images")
    note = f"nvImageCodec {getattr(nvimgcodec, '__version__', '?')} {kinds[kind_name]}, lists of {batch}"
    if state["bad"]:
        note += f", {state['bad']} not decoded by this backend"
    if not synced["torch"]:
        note += ", no torch to synchronize (decode() returning is the clock)"
    return pc.emit(name, "gpu_decode", images / el, images, el, 1, batch, note)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("images")
    ap.add_argument("--backend", choices=["hw", "cuda", "all"], default="all")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=5.0)
    a = ap.parse_args()
    kinds = ["hw", "cuda"] if a.backend == "all" else [a.backend]
    try:
        from nvidia import nvimgcodec
    except ImportError as e:
        for k in kinds:
            pc.emit(f"nvimagecodec_{k}", "gpu_decode", None, batch=a.batch, reason=f"nvImageCodec not installed ({e})")
        return
    data = pc.read_all(pc.list_images(a.images))
    for k in kinds:
        run(nvimgcodec, k, data, a.batch, a.seconds)


if __name__ == "__main__":
    main()
