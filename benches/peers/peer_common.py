"""What every stoker peer script shares: the image list, the result line, the timing loop.

A peer prints one JSON object as its last stdout line:
  {"peer": NAME, "stage": "cpu_decode"|"gpu_decode"|"end_to_end", "img_per_s": float|null,
   "images": int, "seconds": float, "workers": int, "batch": int, "note": str, "reason": str|null}
`img_per_s` is null (with a `reason`) when the peer cannot run here (no torch, no GPU...),
so a runner can print the row and say why instead of failing.
"""

import json
import os
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
