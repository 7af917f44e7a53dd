"""Train a small CNN with PyTorch on batches from stoker (no torchvision needed).

    pip install ./python torch        # from the repository root
    python examples/python/train.py                       # the bundled sample photos
    python examples/python/train.py data/train --epochs 10 --device cuda

DATA is a converted dataset (a directory with manifest.json) or an image folder (one
subdirectory per class), which is converted into a temporary directory first; the
default is the 15 bundled sample photos. Batches come on the loader's device
(``--device auto``: the GPU when stoker can use one, else the CPU) and reach torch
through DLPack without a copy; the model follows them. Prints the loss and images/s per
epoch, then the loader's stage table and verdict ("is the GPU fed?").
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import stoker

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"


class SmallCNN(nn.Module):
    """Three strided convolutions, global pooling, a linear classifier."""

    def __init__(self, classes: int):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.b1 = nn.BatchNorm2d(32)
        self.c2 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.b2 = nn.BatchNorm2d(64)
        self.c3 = nn.Conv2d(64, 128, 3, stride=2, padding=1)
        self.b3 = nn.BatchNorm2d(128)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(self.b2(self.c2(x)))
        x = F.relu(self.b3(self.c3(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def dataset_path(data, tmp: Path) -> Path:
    src = Path(data) if data else SAMPLE
    if (src / "manifest.json").exists():
        return src
    out = tmp / "train"
    report = stoker.convert(src, out)
    print(f"converted {src}: {report['written']} images, {len(report['skipped'])} skipped")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", help="dataset or image folder (default: the bundled sample)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--size", type=int, default=64, help="crop size in pixels")
    p.add_argument("--device", default="auto", help='"auto", "cpu", "cuda" or "cuda:N"')
    p.add_argument("--workers", type=int, help="CPU decode threads (default: all cores)")
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        ds = stoker.Dataset(dataset_path(args.data, Path(tmp)))
        loader = stoker.Loader(
            ds,
            args.batch_size,
            shuffle=True,
            seed=0,
            crop="random",
            size=args.size,
            hflip=0.5,
            mean=stoker.IMAGENET_MEAN,
            std=stoker.IMAGENET_STD,
            dtype="float32",
            device=args.device,
            workers=args.workers,
        )
        print(f"{len(ds)} images, {len(ds.classes)} classes, {len(loader)} batches per epoch")
        model = SmallCNN(len(ds.classes))
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        on = None  # the device the batches arrive on; the model follows them
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            t0 = time.perf_counter()
            seen, loss_sum = 0, 0.0
            for images, labels in loader:
                x = torch.from_dlpack(images)  # no copy, on the loader's device
                if on != x.device:
                    on = x.device
                    model.to(on)
                y = torch.from_dlpack(labels).to(on, non_blocking=True)
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                seen += x.shape[0]
                loss_sum += loss.item() * x.shape[0]
            if on is not None and on.type == "cuda":
                torch.cuda.synchronize(on)
            dt = time.perf_counter() - t0
            print(f"epoch {epoch}: loss {loss_sum / max(seen, 1):.3f}, {seen / dt:.0f} images/s on {on}")
        loader.cancel_prefetch()
        # The stage table, ending with the verdict ("is the GPU fed?"); the same figures are
        # keys of the dict (stats["verdict"], stats["fed_ratio"], ...).
        print(loader.stats())


if __name__ == "__main__":
    main()
