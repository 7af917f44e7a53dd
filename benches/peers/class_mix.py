"""How many classes a batch holds: stoker's quasi-random order on a dataset stored class by
class and on one converted with `--shuffle`, beside a global shuffle and PyTorch's
DataLoader(shuffle=True) over the same ImageFolder's targets (the same run).

The tree is 100 classes of 20 images (links to one test photo): only labels matter here.
Prints the mean number of distinct labels per batch of 64 over 3 epochs.

    python benches/peers/class_mix.py      # needs stoker, numpy; torch/torchvision for the peer
"""

import tempfile
import warnings
from pathlib import Path

import numpy as np

import stoker

REPO = Path(__file__).resolve().parents[2]
PHOTO = REPO / "testdata" / "imagefolder" / "caer" / "tent.jpg"
CLASSES, PER_CLASS, BATCH, EPOCHS = 100, 20, 64, 3


def stoker_mix(path, **settings):
    loader = stoker.Loader(path, BATCH, size=8, device="cpu", **settings)
    sizes = []
    for epoch in range(EPOCHS):
        sizes += [len(set(labels.tolist())) for _, labels in loader.epoch(epoch)]
    return float(np.mean(sizes))


def torch_mix(tree):
    import torch
    from torchvision.datasets import ImageFolder

    targets = ImageFolder(str(tree)).targets
    generator = torch.Generator().manual_seed(0)
    sizes = []
    for _ in range(EPOCHS):
        loader = torch.utils.data.DataLoader(
            targets, batch_size=BATCH, shuffle=True, generator=generator
        )
        sizes += [len(set(b.tolist())) for b in loader]
    return float(np.mean(sizes))


def main():
    root = Path(tempfile.mkdtemp())
    tree = root / "tree"
    for c in range(CLASSES):
        (tree / f"c{c:03}").mkdir(parents=True)
        for i in range(PER_CLASS):
            (tree / f"c{c:03}" / f"{i}.jpg").symlink_to(PHOTO)
    stoker.convert(tree, root / "plain", check=False, progress=False)
    stoker.convert(tree, root / "mixed", check=False, shuffle=True, seed=1, progress=False)
    warnings.simplefilter("ignore")  # the quasi-on-class-order warning is the point here
    rows = [
        ("stoker quasi:10, stored class by class", stoker_mix(root / "plain", shuffle="quasi", quasi_block=10)),
        ("stoker quasi:10, converted with --shuffle", stoker_mix(root / "mixed", shuffle="quasi", quasi_block=10)),
        ("stoker global shuffle, stored class by class", stoker_mix(root / "plain", shuffle=True)),
        ("stoker sequential, converted with --shuffle", stoker_mix(root / "mixed", shuffle=False)),
    ]
    try:
        rows.append(("torch DataLoader(shuffle=True), ImageFolder targets", torch_mix(tree)))
    except ImportError:
        pass
    for name, value in rows:
        print(f"{name}: {value:.1f} classes per batch of {BATCH}")


if __name__ == "__main__":
    main()
