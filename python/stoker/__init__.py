"""stoker: keeps training GPUs fed.

Convert an image folder (or WebDataset tar shards) once into LMDB shards, then iterate
batches that any DLPack consumer (PyTorch, NumPy, CuPy, JAX) takes without a copy::

    import stoker, torch

    stoker.convert("photos/train", "data/train")
    loader = stoker.Loader("data/train", batch_size=256, shuffle=True, seed=0,
                           crop="random", size=224, hflip=0.5,
                           mean=stoker.IMAGENET_MEAN, std=stoker.IMAGENET_STD,
                           dtype="float16", device="auto")
    for epoch in range(90):
        loader.set_epoch(epoch)
        for images, labels in loader:
            x = torch.from_dlpack(images)   # shares the loader's memory
            y = torch.from_dlpack(labels)   # int64, on the host
            ...
        print(loader.stats())

What the Rust crates log goes to Python's ``logging``, under the logger ``stoker``
(``stoker.formats``, ``stoker.loader``, ``stoker.decode``).

Everything here is implemented in Rust (the ``stoker._stoker`` extension module);
this file only re-exports it.
"""

from ._stoker import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Batch,
    Dataset,
    Epoch,
    Images,
    Labels,
    Loader,
    LoaderSampler,
    Stats,
    StokerError,
    Writer,
    __version__,
    convert,
    merge,
    verify,
)

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Batch",
    "Dataset",
    "Epoch",
    "Images",
    "Labels",
    "Loader",
    "LoaderSampler",
    "Stats",
    "StokerError",
    "Writer",
    "__version__",
    "convert",
    "merge",
    "verify",
]
