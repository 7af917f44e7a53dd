"""Train a small CNN with PyTorch on batches from stoker (no torchvision needed).

    pip install ./python torch        # from the repository root
    python examples/python/train.py                       # the bundled sample photos
    python examples/python/train.py data/train --epochs 10 --device cuda

DATA is a converted dataset (a directory with manifest.json) or an image folder (one
subdirectory per class), which is converted into a temporary directory first; the
default is the 15 bundled sample photos. ``--val-fraction`` holds records out of the
same dataset for validation (``indices=``: two loaders over one conversion, a shuffled
training loader with random crops and an unshuffled validation loader with centre
crops). Batches come on the loader's device (``--device auto``: the GPU when stoker can
use one, else the CPU) and reach torch through DLPack without a copy; the model follows
them. Prints the loss, validation accuracy and images/s per epoch, then the training
loader's stage table and verdict ("is the GPU fed?").
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


def split(n: int, fraction: float):
    """Record indices to train on and to hold out: a fixed random `fraction` of the `n`
    records (at least one when `fraction` > 0, and never all of them)."""
    if not 0 <= fraction < 1:
        raise SystemExit(f"--val-fraction {fraction}: want 0 <= f < 1")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
    held = min(max(round(n * fraction), 1 if fraction > 0 else 0), n - 1)
    return sorted(order[held:]), sorted(order[:held])


@torch.no_grad()
def accuracy(model, val, epoch: int) -> float:
    """Top-1 accuracy over one validation epoch."""
    model.eval()
    right = total = 0
    for images, labels in val.epoch(epoch):
        x = torch.from_dlpack(images)
        y = torch.from_dlpack(labels).to(x.device)
        right += (model.to(x.device)(x).argmax(1) == y).sum().item()
        total += y.numel()
    model.train()
    return right / max(total, 1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", help="dataset or image folder (default: the bundled sample)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--size", type=int, default=64, help="crop size in pixels")
    p.add_argument("--device", default="auto", help='"auto", "cpu", "cuda" or "cuda:N"')
    p.add_argument("--workers", type=int, help="CPU decode threads (default: all cores)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument(
        "--val-fraction", type=float, default=0.2, help="records held out for validation (0: none)"
    )
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        ds = stoker.Dataset(dataset_path(args.data, Path(tmp)))
        train_idx, val_idx = split(len(ds), args.val_fraction)
        common = dict(
            size=args.size,
            mean=stoker.IMAGENET_MEAN,
            std=stoker.IMAGENET_STD,
            dtype="float32",
            device=args.device,
            workers=args.workers,
        )
        loader = stoker.Loader(
            ds,
            args.batch_size,
            indices=train_idx,
            shuffle=True,
            seed=0,
            crop="random",
            hflip=0.5,
            **common,
        )
        val = None
        if val_idx:
            val = stoker.Loader(ds, args.batch_size, indices=val_idx, shuffle=False, crop="center", **common)
        print(
            f"{len(ds)} images ({len(train_idx)} to train, {len(val_idx)} to validate), "
            f"{len(ds.classes)} classes, {len(loader)} batches per epoch"
        )
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
            acc = "" if val is None else f", validation accuracy {accuracy(model, val, epoch):.2f}"
            print(f"epoch {epoch}: loss {loss_sum / max(seen, 1):.3f}{acc}, {seen / dt:.0f} images/s on {on}")
        loader.cancel_prefetch()
        if val is not None:
            val.cancel_prefetch()
        # The stage table, ending with the verdict ("is the GPU fed?"); the same figures are
        # keys of the dict (stats["verdict"], stats["fed_ratio"], ...).
        print(loader.stats())


if __name__ == "__main__":
    main()
