"""The Python package on the GPU machine (part 40-python.sh): DLPack sharing, a torch
training step at ResNet-50 pace fed through Python, Python vs Rust throughput, and
torchvision's DataLoader + decode_jpeg(device="cuda") as the peer, all in one run.

    python3 python_loader.py JPEG_DIR --tsv TABLE [--repeat 8] [--rust-consumer BIN/gpu_consumer]

Rows (`name<TAB>value<TAB>unit<TAB>note`) are appended to TABLE:
- python_dlpack_shares_memory: 1 when torch.from_dlpack(images).data_ptr() is the
  batch's device pointer (and a tensor kept alive past 8 more batches is unchanged);
- python_gpu_settings: 1 when pinned_memory=1 is refused naming it and a loader with
  gpu_waits="block" gives a batch (the GPU-only keyword arguments reach the GPU loader);
- python_loader_gpu_img_s: the loader alone through Python (each batch taken with
  torch.from_dlpack on the current stream), steady state (epochs 1..);
- rust_loader_gpu_img_s / python_vs_rust: examples/gpu_consumer's loader-alone row over
  the same JPEGs and settings, run just before, and the ratio (goal >= 0.97);
- python_fed_ratio / python_fed_vs_resident: a torch step sized to 4,700 img/s (ResNet-50
  bf16 training on an H200) fed by the loader; the loader's fed ratio (goal >= 0.99) and
  the fed loop's rate over the same loop on a resident batch;
- python_resnet50<tag>_fed_ratio / _img_s / _vs_resident (with --resnet50): a real
  torchvision ResNet-50 training step (bf16 autocast, channels-last, SGD) fed by a
  loader giving channels-last input (layout="nhwc", permuted without a copy), beside the same steps on a resident batch: the fed ratio at ResNet-50 pace
  with a real model's many short kernels (the matmul and gpu_consumer stand-ins hold
  the SMs longer per kernel than a real step does). With --resnet50-only (and --tag,
  e.g. _mixed over the mixed set) only these rows are made.
- torchvision_dataloader_gpu_img_s / python_vs_torchvision: torch DataLoader reading the
  files + decode_jpeg(device="cuda") + the same crop/flip/normalize on the GPU.

With `--device cpu` the same flow runs on the CPU (a dry run for machines without a GPU;
the Rust and torchvision rows are then skipped).
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import stoker

BATCH, SIZE, PACE = 256, 224, 4700.0


def row(tsv, name, value, unit, note):
    line = f"{name}\t{value}\t{unit}\t{note}"
    print(line)
    if tsv:
        with open(tsv, "a") as f:
            f.write(line + "\n")


def make_dataset(jpeg_dir: Path, repeat: int, tmp: Path) -> Path:
    files = sorted(p.name for p in jpeg_dir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    (tmp / "list.txt").write_text("".join(f"{f},{i % 10}\n" for _ in range(repeat) for i, f in enumerate(files)))
    out = tmp / "ds"
    stoker.convert(jpeg_dir, out, list=tmp / "list.txt", progress=False)
    return out


def make_loader(ds, device, layout="nchw"):
    return stoker.Loader(
        ds, BATCH, shuffle=True, seed=0, crop="random", size=SIZE, hflip=0.5,
        mean=stoker.IMAGENET_MEAN, std=stoker.IMAGENET_STD, dtype="float16", layout=layout,
        device=device, rank=0, world_size=1,
    )


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def check_sharing(loader, dev, tsv):
    it = iter(loader.epoch(0))
    images, labels = next(it)
    x = torch.from_dlpack(images)
    same_ptr = x.data_ptr() == images.data_ptr and x.device.type == dev.type
    kept = x.clone()
    for _ in range(8):  # the ring moves on while `x` is held
        try:
            next(it)
        except StopIteration:
            break
    sync(dev)
    unchanged = torch.equal(x, kept)
    y = torch.from_dlpack(labels)
    ok = same_ptr and unchanged and y.dtype == torch.int64
    row(tsv, "python_dlpack_shares_memory", int(ok), "bool",
        f"data_ptr equal: {same_ptr}; kept tensor unchanged after 8 batches: {unchanged}; {x.device} {x.dtype}")
    return ok


def check_gpu_settings(ds, device, tsv):
    """The GPU-only keyword arguments reach the GPU loader: a 1-byte pinned_memory is
    refused naming the setting, and blocking waits give a batch."""
    try:
        stoker.Loader(ds, BATCH, size=SIZE, device=device, rank=0, world_size=1, pinned_memory=1)
        refused = "no error"
    except (ValueError, stoker.StokerError) as e:
        refused = str(e)
    loader = stoker.Loader(ds, BATCH, size=SIZE, device=device, rank=0, world_size=1, gpu_waits="block")
    images, _ = next(iter(loader.epoch(0)))
    shape = tuple(torch.from_dlpack(images).shape)
    loader.cancel_prefetch()
    ok = "pinned_memory" in refused and shape == (BATCH, 3, SIZE, SIZE)
    row(tsv, "python_gpu_settings", int(ok), "bool",
        f"pinned_memory=1: {refused[:80]!r}; gpu_waits='block' batch {shape}")
    return ok


def check_bf16(ds, device, tsv):
    """dtype="bfloat16" on the GPU: a torch.bfloat16 tensor on the device, equal bit for
    bit to the float32 GPU batch rounded by torch (the kernel rounds to nearest even)."""
    def first(dtype):
        loader = stoker.Loader(ds, BATCH, size=SIZE, device=device, rank=0, world_size=1, seed=3,
                               hflip=0.5, mean=stoker.IMAGENET_MEAN, std=stoker.IMAGENET_STD,
                               dtype=dtype)
        b = next(iter(loader.epoch(1)))
        x = torch.from_dlpack(b[0]).clone()
        loader.close()
        return b.indices, x
    (i16, x), (i32, f) = first("bfloat16"), first("float32")
    same = i16 == i32 and x.dtype == torch.bfloat16 and x.is_cuda and torch.equal(x, f.to(torch.bfloat16))
    row(tsv, "python_bf16_gpu", int(same), "bool",
        f"{x.dtype} on {x.device}, shape {tuple(x.shape)}; equal to float32.to(bfloat16): {same}")
    return same


def loader_alone(loader, dev, epochs):
    """img/s of the loader alone through Python over epochs 1..epochs (epoch 0 warms up)."""
    for images, _ in loader.epoch(0):
        torch.from_dlpack(images)
    sync(dev)
    t0, n = time.perf_counter(), 0
    for e in range(1, epochs + 1):
        for images, _ in loader.epoch(e):
            x = torch.from_dlpack(images)
            n += x.shape[0]
    sync(dev)
    return n / (time.perf_counter() - t0)


def make_step(dev):
    """A stand-in training step reading the batch, sized to PACE img/s."""
    w = torch.randn(2048, 2048, device=dev, dtype=torch.float16 if dev.type == "cuda" else torch.float32)

    def step(x, k):
        acc = x.float().mean()
        h = w
        for _ in range(k):
            h = torch.mm(h, w) * 1e-3
        return acc + h[0, 0].float()

    x0 = torch.zeros(BATCH, 3, SIZE, SIZE, device=dev, dtype=torch.float16)
    k = 1
    while True:  # calibrate: grow k until one step takes BATCH / PACE seconds
        step(x0, k)
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(3):
            step(x0, k)
        sync(dev)
        per = (time.perf_counter() - t0) / 3
        if per >= BATCH / PACE or k > 1 << 16:
            break
        k = max(k + 1, int(k * (BATCH / PACE) / max(per, 1e-6)))
    return step, k, x0


def fed_loop(loader, dev, epochs, seed, step_resident, step_fed):
    """The same steps on a resident batch, then fed by the loader (`step_fed(images,
    labels)` returns the images it took): resident steps/s, fed images/s, fed steps/s and
    the loader's stats over the fed epochs."""
    sync(dev)
    n = len(loader) * epochs
    t0 = time.perf_counter()
    for _ in range(n):
        step_resident()
    sync(dev)
    resident_steps = n / (time.perf_counter() - t0)
    loader.reset_stats()
    t0, seen, steps = time.perf_counter(), 0, 0
    for e in range(epochs):
        for images, labels in loader.epoch(seed + e):
            seen += step_fed(images, labels)
            steps += 1
    sync(dev)
    dt = time.perf_counter() - t0
    return resident_steps, seen / dt, steps / dt, loader.stats()


def fed(loader, dev, epochs, tsv):
    step, k, x0 = make_step(dev)

    def fed_step(images, _labels):
        x = torch.from_dlpack(images)
        step(x, k)
        return x.shape[0]

    resident, img_s, steps_s, stats = fed_loop(loader, dev, epochs, 100, lambda: step(x0, k), fed_step)
    row(tsv, "python_fed_ratio", f"{stats['fed_ratio']:.4f}", "ratio",
        f"torch step sized to {PACE:.0f} img/s ({k} matmuls), {epochs} epochs; goal >= 0.99")
    row(tsv, "python_fed_img_s", f"{img_s:.0f}", "img/s", f"resident batch: {resident * BATCH:.0f} img/s")
    # Steps per second, fed vs resident: the same loop, so partial batches do not count.
    row(tsv, "python_fed_vs_resident", f"{steps_s / resident:.3f}", "ratio",
        stats["verdict"].replace("\t", " "))


def fed_resnet50(ds, device, epochs, tsv, tag):
    """A real ResNet-50 training step fed by a loader of `ds`, and on a resident batch.
    The model is channels-last, so the loader gives [n, h, w, 3] (layout="nhwc"), whose
    permute is the model's input without a copy, as a channels-last user would set it."""
    import torch.nn.functional as F
    import torchvision

    dev = torch.device(device)
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def fed_step(images, labels):
        x = torch.from_dlpack(images).permute(0, 3, 1, 2)
        assert x.is_contiguous(memory_format=torch.channels_last)
        step(x, torch.from_dlpack(labels).to(dev, dtype=torch.long, non_blocking=True) % 1000)
        return x.shape[0]

    loader = make_loader(ds, device, layout="nhwc")
    x0 = torch.randn(BATCH, 3, SIZE, SIZE, device=dev, dtype=torch.float16)
    x0 = x0.contiguous(memory_format=torch.channels_last)
    y0 = torch.zeros(BATCH, dtype=torch.long, device=dev)
    for _ in range(8):  # cuDNN's algorithm search and the allocator's warm-up
        step(x0, y0)
    resident, img_s, steps_s, stats = fed_loop(loader, dev, epochs, 200, lambda: step(x0, y0), fed_step)
    name = f"python_resnet50{tag}"
    row(tsv, f"{name}_fed_ratio", f"{stats['fed_ratio']:.4f}", "ratio",
        f"torchvision ResNet-50 training step (bf16 autocast, channels-last, SGD; loader layout nhwc), batch {BATCH}, "
        f"{epochs} epochs of {len(loader)} batches; goal >= 0.99")
    row(tsv, f"{name}_img_s", f"{img_s:.0f}", "img/s", f"same steps on a resident batch: {resident * BATCH:.0f} img/s")
    row(tsv, f"{name}_vs_resident", f"{steps_s / resident:.3f}", "ratio", stats["verdict"].replace("\t", " "))
    print(loader.stats(), flush=True)
    loader.cancel_prefetch()


def rust_peer(consumer, jpeg_dir, repeat, epochs):
    with tempfile.NamedTemporaryFile("r", suffix=".tsv") as t:
        subprocess.run(
            [consumer, "--jpeg-dir", str(jpeg_dir), "--repeat", str(repeat), "--epochs", str(epochs + 1),
             "--steady-epochs", str(epochs), "--batch-size", str(BATCH), "--size", str(SIZE),
             "--tag", "_pypeer", "--tsv", t.name],
            check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=150,
        )
        for line in open(t.name):
            name, value, *_ = line.split("\t")
            if name == "loader_gpu_jpeg_pypeer_img_s":
                return float(value)
    return None


def torchvision_peer(jpeg_dir, repeat, epochs, dev):
    """torch DataLoader (8 workers reading files) + decode_jpeg(device="cuda") + the same
    RandomResizedCrop/flip/normalize on the GPU, batch 256, fp16 NCHW."""
    import torchvision
    from torchvision.io import decode_jpeg, read_file
    from torchvision.transforms import v2

    files = sorted(str(p) for p in jpeg_dir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg")) * repeat

    class Files(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            return read_file(files[i]), i % 10

    dl = torch.utils.data.DataLoader(
        Files(), batch_size=BATCH, shuffle=True, num_workers=8, collate_fn=lambda b: b, persistent_workers=True
    )
    tf = v2.Compose([v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip()])
    mean = torch.tensor(stoker.IMAGENET_MEAN, device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor(stoker.IMAGENET_STD, device=dev).view(1, 3, 1, 1) * 255

    def run_epoch():
        n = 0
        for batch in dl:
            imgs = decode_jpeg([b[0] for b in batch], device=dev)
            x = torch.stack([tf(im) for im in imgs]).half()
            x = (x - mean) / std
            torch.tensor([b[1] for b in batch]).to(dev, non_blocking=True)
            n += x.shape[0]
        return n

    run_epoch()
    sync(dev)
    t0, n = time.perf_counter(), 0
    for _ in range(epochs):
        n += run_epoch()
    sync(dev)
    return n / (time.perf_counter() - t0), torchvision.__version__


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jpeg_dir", type=Path)
    p.add_argument("--tsv")
    p.add_argument("--repeat", type=int, default=8)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--rust-consumer")
    p.add_argument("--resnet50", action="store_true", help="also the real ResNet-50 fed rows")
    p.add_argument("--resnet50-only", action="store_true", help="only the ResNet-50 fed rows")
    p.add_argument("--tag", default="", help="appended to the ResNet-50 rows' names")
    a = p.parse_args()
    dev = torch.device(a.device)
    print(f"stoker {stoker.__version__}, torch {torch.__version__}, device {dev}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ds = make_dataset(a.jpeg_dir, a.repeat, Path(tmp))
        if a.resnet50_only:
            fed_resnet50(ds, a.device, a.epochs, a.tsv, a.tag)
            return 0
        loader = make_loader(ds, a.device)
        print(repr(loader), flush=True)
        ok = check_sharing(loader, dev, a.tsv)
        py = loader_alone(loader, dev, a.epochs)
        row(a.tsv, "python_loader_gpu_img_s", f"{py:.0f}", "img/s",
            f"F16 NCHW {SIZE} RRC+flip+norm, batch {BATCH}, {len(stoker.Dataset(ds))} records, epochs 1-{a.epochs}")
        if a.rust_consumer and dev.type == "cuda":
            rs = rust_peer(a.rust_consumer, a.jpeg_dir, a.repeat, a.epochs)
            if rs:
                row(a.tsv, "rust_loader_gpu_img_s", f"{rs:.0f}", "img/s", "examples/gpu_consumer loader alone, same run")
                row(a.tsv, "python_vs_rust", f"{py / rs:.3f}", "ratio", "goal >= 0.97")
            else:
                row(a.tsv, "rust_loader_gpu_img_s", "-", "img/s", "gpu_consumer gave no loader row")
        fed(loader, dev, a.epochs, a.tsv)
        print(loader.stats(), flush=True)
        loader.cancel_prefetch()
        del loader
        if a.resnet50:
            fed_resnet50(ds, a.device, a.epochs, a.tsv, a.tag)
        if dev.type == "cuda":
            try:
                ok = check_gpu_settings(ds, a.device, a.tsv) and ok
            except Exception as e:  # a row, and the peer below still runs
                row(a.tsv, "python_gpu_settings", 0, "bool", f"failed: {e!r}"[:200])
                ok = False
            try:
                ok = check_bf16(ds, a.device, a.tsv) and ok
            except Exception as e:
                row(a.tsv, "python_bf16_gpu", 0, "bool", f"failed: {e!r}"[:200])
                ok = False
        if dev.type == "cuda":
            try:
                tv, ver = torchvision_peer(a.jpeg_dir, a.repeat, a.epochs, dev)
                row(a.tsv, "torchvision_dataloader_gpu_img_s", f"{tv:.0f}", "img/s",
                    f"torchvision {ver}: DataLoader(8 workers) + decode_jpeg(cuda) + RRC/flip/normalize on GPU")
                row(a.tsv, "python_vs_torchvision", f"{py / tv:.2f}", "ratio", "stoker through Python / peer")
            except Exception as e:  # the peer's failure is a row, not the part's
                row(a.tsv, "torchvision_dataloader_gpu_img_s", "-", "img/s", f"peer failed: {e!r}"[:200])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
