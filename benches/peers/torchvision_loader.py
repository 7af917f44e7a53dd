#!/usr/bin/env python3
"""PyTorch's own DataLoader with torchvision, as a peer for stoker-loader's CPU path.

`torch_loader.py` re-implements a DataLoader with PIL and NumPy for machines without torch;
this one runs the real thing, as a torchvision training script does:

    DataLoader(dataset, batch_size, shuffle=True, num_workers=--workers,
               persistent_workers=True, prefetch_factor=2)       # worker processes
    dataset[i]: --decode pil          PIL.Image.open(path).convert("RGB")   (ImageFolder's loader)
                --decode torchvision  torchvision.io.decode_jpeg(read_file(path), mode=RGB)
    transforms.v2: RandomResizedCrop(224, antialias=True), RandomHorizontalFlip(),
                   ToImage(), ToDtype(float32, scale=True), Normalize(ImageNet mean/std)
                   (or, `--output u8`, uint8 CHW without the last two: normalized later)

Labels are `index % 5`. It needs torch and torchvision; PyPI's torchvision wheel (9 MB)
installs beside an existing torch without its dependencies:

    target/peer-ffcv/bin/pip install --no-deps torchvision pillow

Same-run comparison with stoker-loader's CPU path (alternating rounds, each side in its own
process; the ratio is the median of the per-round ratios); `--front python` runs stoker's
side through its Python package (`stoker.Loader`, `torch.from_dlpack` per batch) over a
dataset `stoker.convert` makes of the same files:

    cargo build --release -p stoker-loader --example loader_throughput
    target/peer-ffcv/bin/python benches/peers/torchvision_loader.py \\
        --compare target/release/examples/loader_throughput \\
        --batch 64 --size 224 --workers 2 --epochs 3 --rounds 5
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


class Files:
    """A map-style dataset over image files, as torchvision's `ImageFolder` (PIL) or with
    torchvision's own JPEG decoder."""

    def __init__(self, files, decode, transform):
        self.files, self.decode, self.transform = files, decode, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        if self.decode == "pil":
            from PIL import Image

            with Image.open(self.files[i]) as im:
                image = im.convert("RGB")
        else:
            from torchvision.io import ImageReadMode, decode_jpeg, read_file

            image = decode_jpeg(read_file(self.files[i]), mode=ImageReadMode.RGB)
        return self.transform(image), i % 5


def run_peer(a):
    try:
        import torch
        import torchvision
        from torchvision.transforms import v2
    except ImportError as e:
        sys.exit(f"torch and torchvision are not installed here ({e}): see this file's docstring")
    steps = [v2.RandomResizedCrop(a.size, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage()]
    if a.output == "f32":
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    dataset = Files(pc.list_images(a.images), a.decode, v2.Compose(steps))
    torch.manual_seed(a.seed)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=a.batch, shuffle=True, num_workers=a.workers,
        persistent_workers=a.workers > 0, prefetch_factor=2 if a.workers > 0 else None,
    )

    images, secs = pc.time_batches(loader, a.epochs)  # the warm-up epoch starts the workers
    batch, _ = next(iter(loader))
    return pc.loader_result(
        f"torchvision-{a.decode}", images, secs,
        f"torch {torch.__version__} DataLoader + torchvision {torchvision.__version__} "
        f"({a.workers} workers, {a.decode} decode)",
        f"batch {a.batch}, {a.size}px, output {tuple(batch.shape)} {batch.dtype}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pc.add_loader_arguments(p)
    pc.add_front_arguments(p, "torchvision-peer")
    p.add_argument("--decode", choices=["pil", "torchvision"], default="pil",
                   help="ImageFolder's PIL loader, or torchvision.io.decode_jpeg")
    a = p.parse_args()
    if a.stoker_dataset:
        pc.run_stoker_python(a)
        return
    if not a.compare and a.front == "rust":
        run_peer(a)
        return

    def peer(r):
        flags = ["--images", a.images, "--decode", a.decode, "--output", a.output]
        return pc.run_peer_process(__file__, a, flags, r)

    if a.front == "python":
        dataset = pc.stoker_dataset(a.images, a.work)

        def ours():
            return pc.run_peer_process(__file__, a, ["--stoker-dataset", dataset, "--output", a.output], 0)

        pc.alternate(a.rounds, f"torchvision ({a.decode})", peer, ours)
        return
    pc.alternate(a.rounds, f"torchvision ({a.decode})", peer,
                 lambda: pc.run_loader_example(a, ["--output", a.output]))


if __name__ == "__main__":
    main()
