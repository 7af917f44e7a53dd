#!/usr/bin/env python3
"""FFCV's loader as a peer for stoker-loader's CPU path.

FFCV converts a dataset once into a `.beton` file and decodes it with libjpeg-turbo and
OpenCV in Numba-compiled threads: the peer closest to stoker's design. This runs FFCV's
ImageNet training pipeline on the CPU over the same images, with the same work per image
as the `loader_throughput` example:

    DatasetWriter: RGBImageField(write_mode="jpg", jpeg_quality=--quality), IntField
    Loader(order=RANDOM, os_cache=True, drop_last=False, num_workers=--workers)
    RandomResizedCropRGBImageDecoder((224, 224))    scale 0.08-1, ratio 3/4-4/3, 10 attempts:
                                                    full decode, then crop + area resize
    RandomHorizontalFlip()
    NormalizeImage(ImageNet mean/std, float32)      on the CPU, a lookup table
    ToTensor(), ToTorchImage()                      NCHW, channels-last memory (FFCV's default)

`--output u8` leaves out NormalizeImage (and gives stoker's example `--output u8`): FFCV's
own ImageNet example normalizes on the GPU, so its CPU side ends at uint8 pixels.

FFCV's writer re-encodes every image (OpenCV, `--quality`), so the files differ from the
originals. To decode the same bytes on both sides, `--compare` writes the `.beton` once
(under `--work`), copies each stored JPEG out of it into a folder, and gives that folder to
stoker's example, which converts it into its own dataset.

`--write-mode raw` stores decoded pixels instead (FFCV's `write_mode="raw"`: no decode when
loading), against stoker's raw records (`loader_throughput --raw WxH`); both sides convert
the original files, which must all have one size (stoker's raw records have a fixed size).

FFCV 1.0.2 is on PyPI as source only. It builds against OpenCV and libturbojpeg
(`apt-get install libopencv-dev libturbojpeg0-dev`) and imports PyTorch; install it into its
own venv, not the tests' one:

    python3 -m venv target/peer-ffcv
    target/peer-ffcv/bin/pip install numpy numba opencv-python-headless pillow torch \\
        terminaltables pytorch_pfn_extras fastargs assertpy tqdm psutil setuptools
    target/peer-ffcv/bin/pip install --no-build-isolation ffcv==1.0.2

`--front python` runs stoker's side through its Python package instead of the Rust example
(`stoker.Loader`, each batch taken as a tensor with `torch.from_dlpack`): what a PyTorch
user of either library runs. The package must be installed in the same venv
(`target/peer-ffcv/bin/pip install ./python`, a release build).

`--convert` times the conversion instead: FFCV's `DatasetWriter` (its default for JPEGs,
re-encoding each at `--quality`; or pixels with `--write-mode raw`) against
`stoker.convert` with its defaults (the original JPEG bytes, each decoded once to check it;
or raw records at the images' one size), both with `--workers` processes or threads, from
the same folder into a fresh output each round. Needs the Python package, as `--front
python` does.

Same-run comparison with stoker-loader's CPU path (alternating rounds, each side in its own
process; the ratio is the median of the per-round ratios):

    cargo build --release -p stoker-loader --example loader_throughput
    target/peer-ffcv/bin/python benches/peers/ffcv_loader.py \\
        --compare target/release/examples/loader_throughput \\
        --batch 64 --size 224 --workers 2 --epochs 3 --rounds 5
"""

import argparse
import importlib.metadata
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

MEAN = np.array([0.485, 0.456, 0.406]) * 255
STD = np.array([0.229, 0.224, 0.225]) * 255


def ffcv_modules():
    try:
        import ffcv  # noqa: F401
    except ImportError as e:
        sys.exit(f"FFCV is not installed here ({e}): see this file's docstring")
    import ffcv.fields
    import ffcv.fields.decoders
    import ffcv.loader
    import ffcv.reader
    import ffcv.transforms
    import ffcv.writer

    return ffcv


class Folder:
    """The images as FFCV's writer takes them: (RGB PIL image, label), label = index % 5 as
    in the other loader peers."""

    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.files[i]) as im:
            return im.convert("RGB"), i % 5


def write_beton(a, files, beton):
    ffcv = ffcv_modules()
    fields = {
        "image": ffcv.fields.RGBImageField(write_mode=a.write_mode, jpeg_quality=a.quality),
        "label": ffcv.fields.IntField(),
    }
    partial = beton + ".partial"
    ffcv.writer.DatasetWriter(partial, fields, num_workers=a.workers).from_indexed_dataset(Folder(files))
    os.replace(partial, beton)


def extract_jpegs(beton, folder):
    """Copies each image FFCV stored out of `beton` into `folder`, byte for byte, so stoker
    decodes the files FFCV decodes."""
    ffcv = ffcv_modules()
    reader = ffcv.reader.Reader(beton)
    image = reader.metadata["f0"]
    sizes = dict(zip(reader.alloc_table["ptr"].tolist(), reader.alloc_table["size"].tolist()))
    partial = folder + ".partial"
    os.makedirs(partial, exist_ok=True)
    with open(beton, "rb") as f:
        for i in range(reader.num_samples):
            if image["mode"][i] != 0:
                sys.exit(f"{beton}: sample {i} is not stored as a JPEG")
            ptr = int(image["data_ptr"][i])
            f.seek(ptr)
            data = f.read(sizes[ptr])
            with open(os.path.join(partial, f"{i:08d}.jpg"), "wb") as out:
                out.write(data)
    os.replace(partial, folder)


def raw_size(beton):
    """The one size of every image in `beton`, as stoker's `--raw` takes it."""
    image = ffcv_modules().reader.Reader(beton).metadata["f0"]
    sizes = set(zip(image["width"].tolist(), image["height"].tolist()))
    if len(sizes) != 1:
        sys.exit(f"--write-mode raw needs images of one size (stoker's raw records have one); found {len(sizes)} sizes")
    (w, h), = sizes
    return f"{w}x{h}"


def prepare(a):
    """Writes the `.beton` under `--work` unless it is there. Returns its path, the folder
    stoker converts and the flags that make stoker's example store what FFCV stored."""
    files = pc.list_images(a.images)
    os.makedirs(a.work, exist_ok=True)
    quality = f"q{a.quality}" if a.write_mode == "jpg" else a.write_mode
    name = f"{os.path.basename(os.path.normpath(a.images))}-{quality}"
    beton = os.path.join(a.work, name + ".beton")
    if not os.path.exists(beton):
        t0 = time.perf_counter()
        write_beton(a, files, beton)
        print(f"wrote {beton}: {len(files)} images in {time.perf_counter() - t0:.1f} s", flush=True)
    if a.write_mode == "raw":
        return beton, a.images, ["--raw", raw_size(beton)]
    folder = os.path.join(a.work, name + "-jpeg")
    if not os.path.exists(folder):
        extract_jpegs(beton, folder)
    return beton, folder, []


def run_peer(a):
    ffcv_modules()
    import torch

    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, ToTensor, ToTorchImage

    loader = Loader(
        a.beton,
        batch_size=a.batch,
        num_workers=a.workers,
        order=OrderOption.RANDOM,
        os_cache=True,
        drop_last=False,
        seed=a.seed + 1,
        pipelines={
            "image": [
                RandomResizedCropRGBImageDecoder((a.size, a.size)),
                RandomHorizontalFlip(),
                *([NormalizeImage(MEAN, STD, np.float32)] if a.output == "f32" else []),
                ToTensor(),
                ToTorchImage(),
            ],
            "label": [IntDecoder(), ToTensor()],
        },
    )

    images, secs = pc.time_batches(loader, a.epochs)  # the warm-up epoch compiles Numba's code
    batch, _ = next(iter(loader))
    channels_last = batch.is_contiguous(memory_format=torch.channels_last)
    return pc.loader_result(
        "ffcv", images, secs, f"FFCV {importlib.metadata.version('ffcv')} ({a.workers} workers)",
        f"batch {a.batch}, {a.size}px, output {tuple(batch.shape)} "
        f"{str(batch.dtype).removeprefix('torch.')}, channels-last {channels_last}")


def one_size(files):
    """The one size of `files` as `WxH`, for stoker's raw records."""
    from PIL import Image

    sizes = set()
    for f in files:
        with Image.open(f) as im:
            sizes.add(im.size)
    if len(sizes) != 1:
        sys.exit(f"--write-mode raw needs images of one size (stoker's raw records have one); found {len(sizes)} sizes")
    (w, h), = sizes
    return w, h


def time_conversion(a):
    """One conversion of `--images` into `a.convert_into` by FFCV's writer or stoker's
    converter (`a.converter`), timed; prints its JSON line."""
    files = pc.list_images(a.images)
    t0 = time.perf_counter()
    if a.converter == "ffcv":
        write_beton(a, files, a.convert_into)
    else:
        import stoker

        raw = a.write_mode == "raw"
        stoker.convert(a.images, a.convert_into, encoding="raw" if raw else "jpeg",
                       size=one_size(files) if raw else None, jobs=a.workers, progress=False)
    secs = time.perf_counter() - t0
    print(f"{a.converter}: {len(files)} images converted in {secs:.2f} s ({a.workers} workers, {a.write_mode})", flush=True)
    return pc.loader_result(f"{a.converter}-convert", len(files), secs)


def compare_conversions(a):
    os.makedirs(a.work, exist_ok=True)
    out = os.path.join(a.work, "convert-round")

    def once(converter):
        def run(_r=0):
            subprocess.run(["rm", "-rf", out, out + ".partial"], check=True)
            flags = ["--images", a.images, "--write-mode", a.write_mode, "--quality", str(a.quality),
                     "--converter", converter, "--convert-into", out]
            try:
                return pc.run_peer_process(__file__, a, flags, 0)
            finally:
                subprocess.run(["rm", "-rf", out, out + ".partial"], check=True)
        return run

    pc.alternate(a.rounds, "FFCV writer", once("ffcv"), once("stoker"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pc.add_loader_arguments(p)
    pc.add_front_arguments(p, "ffcv-peer")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality of FFCV's writer (its default: 90)")
    p.add_argument("--write-mode", choices=["jpg", "raw"], default="jpg",
                   help="what FFCV stores: JPEG bytes (decoded when loading) or pixels")
    p.add_argument("--convert", action="store_true", help="time the conversions instead of the loaders")
    p.add_argument("--converter", choices=["ffcv", "stoker"], help=argparse.SUPPRESS)  # a --convert round
    p.add_argument("--convert-into", help=argparse.SUPPRESS)
    p.add_argument("--beton", help="run FFCV's loader over this .beton (what --compare's rounds do)")
    a = p.parse_args()
    if a.converter:
        time_conversion(a)
        return
    if a.convert:
        compare_conversions(a)
        return
    if a.stoker_dataset:
        pc.run_stoker_python(a)
        return
    if a.beton:
        run_peer(a)
        return
    beton, folder, extra = prepare(a)
    extra += ["--output", a.output]
    if not a.compare and a.front == "rust":
        a.beton = beton
        run_peer(a)
        return

    def peer(r):
        return pc.run_peer_process(__file__, a, ["--beton", beton, "--output", a.output], r)

    print(f"FFCV reads {beton}, stoker converts {folder} {' '.join(extra)}", flush=True)
    a.images = folder
    if a.front == "python":
        raw = extra[1] if extra[:1] == ["--raw"] else None
        dataset = pc.stoker_dataset(folder, a.work, raw)

        def ours():
            return pc.run_peer_process(__file__, a, ["--stoker-dataset", dataset, "--output", a.output], 0)

        pc.alternate(a.rounds, "FFCV", peer, ours)
        return
    pc.alternate(a.rounds, "FFCV", peer, lambda: pc.run_loader_example(a, extra))


if __name__ == "__main__":
    main()
