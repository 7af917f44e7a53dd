#!/usr/bin/env python3
"""NVIDIA DALI's CPU pipeline as a peer for stoker-loader's CPU path.

DALI's ImageNet training pipeline, with every operator on the CPU (`device_id=None`: no
GPU needed), over the same JPEG files and with the same work per image as the
`loader_throughput` example:

    fn.readers.file(files, labels, random_shuffle=True)          # reads the files
    fn.decoders.image_random_crop(device="cpu")   scale 0.08-1, ratio 3/4-4/3, 10 attempts:
                                                  decodes only the crop's region
    fn.resize(224 x 224, linear, antialias=True)
    fn.crop_mirror_normalize(mirror=coin_flip(0.5), ImageNet mean/std, float32, CHW)

`--workers` is DALI's `num_threads`; `prefetch_queue_depth` 2 (DALI's default). The
consumer touches one value of each batch, as the other peers' do. DALI comes from PyPI
(`nvidia-dali-cuda120`, about 420 MB); install it into its own venv, not the tests' one:

    python3 -m venv target/peer-dali
    target/peer-dali/bin/pip install nvidia-dali-cuda120 numpy

Prints img/s over `--epochs` timed epochs after one warm-up epoch, and a JSON line.

Same-run comparison with stoker-loader's CPU path (alternating rounds, so both see the same
machine load; the ratio is the median of the per-round ratios):

    cargo build --release -p stoker-loader --example loader_throughput
    target/peer-dali/bin/python benches/peers/dali_loader.py \\
        --compare target/release/examples/loader_throughput \\
        --batch 64 --size 224 --workers 2 --epochs 3 --rounds 5
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def run_peer(a):
    try:
        import nvidia.dali
        from nvidia.dali import fn, pipeline_def, types
    except ImportError as e:
        sys.exit(f"DALI is not installed here ({e}): see this file's docstring")
    files = pc.list_images(a.images)
    labels = [i % 5 for i in range(len(files))]

    @pipeline_def(
        batch_size=a.batch,
        num_threads=a.workers,
        device_id=None,  # CPU only
        seed=a.seed + 1,
        prefetch_queue_depth=2,
    )
    def pipeline():
        jpegs, label = fn.readers.file(files=files, labels=labels, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(
            jpegs,
            device="cpu",
            output_type=types.RGB,
            random_area=[0.08, 1.0],
            random_aspect_ratio=[3.0 / 4.0, 4.0 / 3.0],
            num_attempts=10,
        )
        images = fn.resize(
            images, resize_x=a.size, resize_y=a.size, interp_type=types.INTERP_LINEAR, antialias=True
        )
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            mean=MEAN,
            std=STD,
            mirror=fn.random.coin_flip(probability=0.5),
        )
        return images, label

    pipe = pipeline()
    pipe.build()
    per_epoch = -(-len(files) // a.batch)

    def run_epoch():
        images = 0
        for _ in range(per_epoch):
            out, _labels = pipe.run()
            batch = np.asarray(out.as_tensor())
            float(batch[0, 0, 0, 0])  # the "training step" touches the batch
            images += batch.shape[0]
        return images

    images, secs = pc.time_epochs(run_epoch, a.epochs)
    shape = np.asarray(pipe.run()[0].as_tensor()).shape
    del pipe
    return pc.loader_result("dali-cpu", images, secs,
                            f"DALI {nvidia.dali.__version__} CPU pipeline ({a.workers} threads)",
                            f"batch {a.batch}, {a.size}px, output {shape} float32")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pc.add_loader_arguments(p)
    a = p.parse_args()
    if not a.compare:
        run_peer(a)
        return

    def peer(r):
        return pc.run_peer_process(__file__, a, ["--images", a.images], r)

    pc.alternate(a.rounds, "DALI", peer, lambda: pc.run_loader_example(a))


if __name__ == "__main__":
    main()
