#!/usr/bin/env python3
"""How far stoker's evaluation crop is from torchvision's, pixel for pixel.

stoker's `crop="center"` resizes the shorter side to `resize` (default `size * 8 // 7`) and
takes the centre, with its source window rounded to whole pixels; torchvision's evaluation
transform is `Resize(resize) + CenterCrop(size)`. Both are run here over the same photographs
(`testdata/imagefolder` by default, 164 of them: mixed sizes, some progressive, gray and
4:2:2), in uint8, and the absolute difference per pixel and channel is summarised per image.
Record `i` of the converted dataset is torchvision's `ImageFolder` sample `i` (same classes,
same order), which the script checks by label.

Needs torch and torchvision beside the stoker package (the peers' venv of
`format_peers.py`):

    /tmp/peers-venv/bin/python benches/peers/center_crop_parity.py [--images DIR] [--size 224]

Prints, per (size, resize), the mean absolute difference over all images (of 255), its
median, 95th percentile and largest per-image mean, the largest single difference, and the
five images that differ most.
"""

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def compare(dataset, images, size, resize):
    import numpy as np
    import torch
    import torchvision
    import torchvision.transforms as T

    import stoker

    reference = torchvision.datasets.ImageFolder(
        images, transform=T.Compose([T.Resize(resize), T.CenterCrop(size), T.PILToTensor()])
    )
    loader = stoker.Loader(dataset, batch_size=32, shuffle=False, crop="center", size=size,
                           resize=resize, dtype="uint8", layout="nhwc", device="cpu")
    per_image = []
    with loader:
        for batch in loader:
            ours = torch.from_dlpack(batch.images)
            labels = torch.from_dlpack(batch.labels)
            for j, i in enumerate(batch.indices):
                theirs, label = reference[int(i)]
                if label != int(labels[j]):
                    sys.exit(f"record {int(i)}: label {int(labels[j])}, torchvision's {label}: not the same sample")
                d = (ours[j].to(torch.int16) - theirs.permute(1, 2, 0).to(torch.int16)).abs()
                per_image.append((d.float().mean().item(), int(d.max()), reference.samples[int(i)][0]))
    means = np.array([m for m, _, _ in per_image])
    print(
        f"size {size} from {resize}: {len(per_image)} images, mean abs difference {means.mean():.3f} "
        f"(median {statistics.median(means):.3f}, p95 {np.percentile(means, 95):.3f}, largest "
        f"{means.max():.3f}); largest single difference {max(x for _, x, _ in per_image)}"
    )
    for m, x, path in sorted(per_image, reverse=True)[:5]:
        print(f"  {m:.3f} (max {x})  {os.path.relpath(path, images)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", default=os.path.join(REPO, "testdata", "imagefolder"))
    p.add_argument("--size", type=int, nargs="+", default=[224, 112])
    a = p.parse_args()
    import stoker

    with tempfile.TemporaryDirectory() as tmp:
        dataset = os.path.join(tmp, "ds")
        report = stoker.convert(a.images, dataset, progress=False)
        if report["skipped"]:
            print(f"{len(report['skipped'])} input(s) skipped: indices may not match torchvision's", file=sys.stderr)
        for size in a.size:
            compare(dataset, a.images, size, size * 8 // 7)


if __name__ == "__main__":
    main()
