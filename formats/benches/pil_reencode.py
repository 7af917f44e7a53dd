#!/usr/bin/env python3
"""Peer for `stoker convert --max-side 256 --jobs 1`: Pillow on one core does the same work
(decode, resize long side to 256 keeping aspect, encode JPEG quality 90 4:2:0) over a folder
and writes the results into one file. Usage: pil_reencode.py SRC_DIR OUT_FILE"""
import io
import os
import sys

from PIL import Image

src, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as f:
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            with Image.open(os.path.join(root, name)) as im:
                im = im.convert("RGB")
                w, h = im.size
                if max(w, h) > 256:
                    s = 256 / max(w, h)
                    im = im.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BILINEAR)
                buf = io.BytesIO()
                im.save(buf, "JPEG", quality=90, subsampling=2)
                f.write(buf.getvalue())
