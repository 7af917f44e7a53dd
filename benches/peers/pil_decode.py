#!/usr/bin/env python3
"""Peer of `cargo bench --bench decode -- stoker_1_thread`: PIL (libjpeg-turbo)
decoding the same JPEGs to RGB on ONE core, one image after another.

The process is pinned to one CPU (`--cpu`, default: the first allowed one) so
the figure is images/s per core. Bytes are read into memory first; each image
is opened from memory and fully decoded (`load()`, `convert("RGB")` only when
the file is not RGB already), as stoker's `decode_into` does.

Usage: pil_decode.py IMAGES_DIR [--seconds T] [--cpu N]
Prints a human line and, last, one JSON row (see peer_common.py).
"""

import argparse
import io
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("images")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--cpu", type=int, default=None)
    a = ap.parse_args()
    try:
        from PIL import Image, features
    except ImportError as e:
        pc.skip("pil_decode_1core", "cpu_decode", f"Pillow not importable: {e}")
    cpu = a.cpu if a.cpu is not None else sorted(os.sched_getaffinity(0))[0]
    os.sched_setaffinity(0, {cpu})
    data = pc.read_all(pc.list_images(a.images))

    def step():
        for b in data:
            im = Image.open(io.BytesIO(b))
            im.load()
            if im.mode != "RGB":
                im = im.convert("RGB")
        return len(data)

    cpu0 = time.thread_time()
    images, secs = pc.timed(step, a.seconds)
    # CPU time of this thread (includes the one warm-up pass): robust when the
    # core is shared; compare with stoker_1_thread_cputime.
    cpu_secs = time.thread_time() - cpu0
    cpu_rate = (images + len(data)) / cpu_secs
    rate = images / secs
    import PIL

    note = f"Pillow {PIL.__version__}, libjpeg-turbo {features.version('libjpeg_turbo')}, cpu {cpu}"
    print(f"pil_decode_1core: {rate:.1f} img/s wall, {cpu_rate:.1f} img/s per CPU-second ({images} images in {secs:.2f} s; {note})", flush=True)
    note += f"; cpu_time {cpu_rate:.1f} img/s"
    pc.emit("pil_decode_1core", "cpu_decode", rate, images, secs, workers=1, batch=1, note=note)


if __name__ == "__main__":
    main()
