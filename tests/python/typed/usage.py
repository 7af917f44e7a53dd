"""What a training script writes, type-checked by mypy against the stubs (test_stubs.py):
a stub annotation that breaks ordinary use (a wrong return type, a missing overload, a
parameter typed too narrowly) fails here. Never run: only read by mypy."""

import pathlib
from typing import Any, Dict, List, Optional, Tuple, Union

from typing_extensions import assert_type

import numpy as np
import torch

import stoker


def convert_and_merge(src: str, out: pathlib.Path) -> None:
    report = stoker.convert(src, out, jobs=2, strict=True, shuffle=True, seed=1, part=0, parts=2)
    assert_type(report, Dict[str, Any])
    stoker.convert(src, out, list="files.txt", classes=["cat", "dog"], size=(224, 224))
    assert_type(stoker.merge(out, [out / "part-0", out / "part-1"]), Dict[str, Any])
    assert_type(stoker.verify(out, decode=True), Dict[str, Any])


def write(out: str, pixels: np.ndarray) -> None:
    with stoker.Writer(out, ["cat", "dog"], encoding="raw", size=(64, 64)) as writer:
        assert_type(writer, stoker.Writer)
        writer.write(pixels, 0, name="a.jpg")
        writer.write(b"\xff\xd8...", 1)
    assert_type(writer.report, Optional[Dict[str, Any]])
    assert_type(writer.out, pathlib.Path)


def read(path: pathlib.Path) -> None:
    dataset = stoker.Dataset(path)
    assert_type(dataset, stoker.Dataset)
    data, label = dataset[0]
    assert_type(data, bytes)
    assert_type(label, int)
    assert_type(dataset.classes, List[str])
    assert_type(dataset.source_of(0), Optional[str])
    assert_type(len(dataset), int)


def train(path: str, rank: int, world_size: int) -> None:
    loader = stoker.Loader(
        path,
        batch_size=256,
        shuffle=True,
        seed=0,
        crop="random",
        size=224,
        hflip=0.5,
        mean=stoker.IMAGENET_MEAN,
        std=stoker.IMAGENET_STD,
        dtype=torch.bfloat16,
        device=torch.device("cuda", rank),
        rank=rank,
        world_size=world_size,
        indices=range(0, 1000, 2),
    )
    with loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            loader.sampler.set_epoch(epoch)
            for images, labels in loader:
                x = torch.from_dlpack(images)
                y = torch.from_dlpack(labels)
                assert_type(x, torch.Tensor)
                assert_type(y, torch.Tensor)
                # Unpacked items are Any (as a DataLoader's): neither is an error here.
                shape: Tuple[int, int, int, int] = images.shape
                first: int = labels[0]
            epoch_it = loader.epoch(epoch)
            assert_type(epoch_it, stoker.Epoch)
            batch = next(epoch_it)
            assert_type(batch.images, stoker.Images)
            assert_type(batch.labels, stoker.Labels)
            assert_type(batch[0], stoker.Images)
            assert_type(batch[-1], stoker.Labels)
            assert_type(batch[len(batch) - 1], Union[stoker.Images, stoker.Labels])
            assert_type(batch.images.shape, Tuple[int, int, int, int])
            assert_type(batch.labels[0], int)
            assert_type(batch.labels[1:], List[int])
            assert_type(batch.indices, List[int])
            host: np.ndarray = np.asarray(batch.images)
            print(host.shape, len(epoch_it))
            epoch_it.close()
        stats = loader.stats()
        assert_type(stats, stoker.Stats)
        print(stats["fed_ratio"], stats.get("host_bytes", 0), dict(stats), stats.to_json())
        state = loader.state_dict()
        loader.load_state_dict(state)
        assert_type(state, Dict[str, Union[int, bool, str, None]])


def torch_loader_slot(path: str) -> None:
    # Lightning and others read these from whatever they were given as a loader.
    loader = stoker.Loader(path, 32, device="cpu", dtype="uint8", layout="NHWC")
    assert_type(loader.batch_size, int)
    assert_type(loader.drop_last, bool)
    assert_type(loader.batch_sampler, None)
    assert_type(len(loader), int)
    loader.close()
