#!/usr/bin/env python3
"""stoker against WebDataset and MosaicML streaming on the CPU side, same machine, same run.

Three stages, each peer measured in the same run, in an order rotated every repeat (so a
peer is not always the one that runs on a machine warmed or loaded by the one before),
the median of `--repeats` reported:

  write   the same samples, held in memory as (JPEG bytes, label), written into a dataset:
          stoker.Writer (default: every JPEG decoded once as a check; and check=False, the
          closest to "store the bytes as they are"), webdataset.ShardWriter (tar) and
          streaming.MDSWriter (columns jpg: bytes, cls: int, no compression). All three cut
          shards at the same size (`--shard-mb`). Timed from the writer's construction to
          its close; then `os.sync()` is timed on its own, because stoker fsyncs every shard
          before it counts it as written and the peers leave that to the kernel. Also, for
          reference, `stoker convert` (the CLI) of the same files laid out as a folder.
  read    every sample's bytes and label once, nothing decoded (the format's own cost):
          `stoker.Dataset[i]` for i in order, `webdataset.WebDataset(urls)` iteration,
          `streaming.StreamingDataset(local=...)` iteration. Page cache warm for all: one
          untimed pass in the same process first.
  cold    (only with --stages cold) the same, each pass after dropping the dataset's files
          from the page cache (fdatasync + posix_fadvise DONTNEED per file, as `stoker
          bench` does; checked with `fincore`), the dataset opened inside the clock.
  e2e     one epoch into batches of 64 float32 tensors 3x224x224, RandomResizedCrop(224) +
          horizontal flip (0.5) + ImageNet normalize: stoker.Loader(device="cpu") vs
          WebDataset + PIL + torchvision transforms in a torch DataLoader (2 workers) vs
          StreamingDataset + the same transforms in a DataLoader (2 workers). Timed from the
          loader's construction to its last batch, so the peers' worker start-up counts as
          it does for a user each epoch (persistent_workers is off, DataLoader's default).

Every measurement runs in a fresh Python process (`--one`), so no peer inherits another's
threads, shared memory or heap; the process loads the samples before its clock starts.

Data: the photographs of testdata/imagefolder (164 real JPEGs, 28 class folders, mixed sizes,
some progressive), each copied `--copies` times (distinct bytes objects, distinct keys
c00_NAME, c01_NAME, ... in its class), in ImageFolder order (class by class, names sorted),
so `stoker convert` of the copied tree and every writer see the same samples in the same order.

Needs (not in the repository's requirements; install into a venv of its own):
    python3 -m venv /tmp/peers-venv
    /tmp/peers-venv/bin/pip install webdataset==1.0.2 mosaicml-streaming==0.13.0 torchvision pillow 'maturin>=1.9.4,<2'
    cargo build --release --bin stoker                                # for the convert rows
    PATH=/tmp/peers-venv/bin:$PATH /tmp/peers-venv/bin/pip install --no-build-isolation --no-deps ./python
(mosaicml-streaming brings torch; the registry has only its CUDA build, several GB with
its nvidia-* wheels, which runs on the CPU here.)

Run (about 8 minutes on the 2-core CPU machine; tables on stdout, every measurement as a
JSON line on stderr and in WORK/rows.json):
    /tmp/peers-venv/bin/python benches/peers/format_peers.py --work /tmp/format-peers --copies 20 --repeats 5
"""

import argparse
import io
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peer_common import timed  # noqa: E402  (the timing loop every peer script shares)

REPO = os.path.dirname(os.path.dirname(HERE))
PHOTOS = os.path.join(REPO, "testdata", "imagefolder")

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]

WRITERS = ["stoker", "stoker-nocheck", "wds", "mds", "convert", "convert-nocheck"]
READERS = ["stoker", "wds", "mds"]
LOADERS = ["stoker", "wds", "mds"]


# ---------------------------------------------------------------------------------------
# The samples


def class_files():
    """[(class name, [file names sorted])], the classes sorted: ImageFolder's order."""
    classes = sorted(
        d for d in os.listdir(PHOTOS) if os.path.isdir(os.path.join(PHOTOS, d)) and not d.startswith(".")
    )
    return [(c, sorted(os.listdir(os.path.join(PHOTOS, c)))) for c in classes]


def samples(copies):
    """[(key, bytes, label)] in ImageFolder order of the copied tree, and the class names.

    Copies are distinct bytes objects, so the writers read as much memory as a real set of
    that size would make them read (one object referenced `copies` times would sit in cache).
    The key is the copied file's name without its extension, with the class folder."""
    out = []
    tree = class_files()
    for label, (cls, files) in enumerate(tree):
        originals = {}
        for f in files:
            with open(os.path.join(PHOTOS, cls, f), "rb") as fh:
                originals[f] = fh.read()
        # ImageFolder sorts the copied names: c00_a, c00_b, ..., c01_a, ...
        for k in range(copies):
            for f in files:
                name = f"c{k:02d}_{f}"
                stem = os.path.splitext(name)[0].replace(".", "_")
                out.append((f"{cls}/{stem}", bytes(bytearray(originals[f])), label))
    return out, [c for c, _ in tree]


def lay_out_tree(root, copies):
    """The copied tree on disk, for `stoker convert` (the same files, names and order)."""
    if os.path.isdir(root):
        return
    tmp = root + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for cls, files in class_files():
        os.makedirs(os.path.join(tmp, cls))
        for k in range(copies):
            for f in files:
                shutil.copyfile(os.path.join(PHOTOS, cls, f), os.path.join(tmp, cls, f"c{k:02d}_{f}"))
    os.rename(tmp, root)


def dir_bytes(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def shard_paths(path, suffix):
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(suffix))


# ---------------------------------------------------------------------------------------
# Stage 1: writing


def cpu_now(children=False):
    """CPU seconds (user + system) of this process's threads, and with `children` also of its
    finished, waited-for child processes (DataLoader workers, the `stoker convert` run).

    Read beside the wall time: the machine is shared, so wall time alone does not say
    whether a peer is slower or was only given less of the CPU."""
    who = [resource.RUSAGE_SELF] + ([resource.RUSAGE_CHILDREN] if children else [])
    return sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime for w in who)


def import_peer(peer):
    """Imports what `peer` needs, so that no clock counts an import."""
    if peer.startswith("stoker"):
        import stoker  # noqa: F401
    elif peer == "wds":
        import webdataset  # noqa: F401  (imports torch when it is installed)
    elif peer == "mds":
        import streaming  # noqa: F401


def write_one(peer, out, a):
    """Writes the samples with `peer` into `out`; returns the measurement."""
    shard_bytes = a.shard_mb << 20
    if peer.startswith("convert"):
        src = os.path.join(a.work, "src")
        cmd = [a.stoker_bin, "convert", src, out, "--shard-size", f"{a.shard_mb}M"]
        if peer == "convert-nocheck":
            cmd.append("--no-check")
        data_bytes = dir_bytes(src)
        n = sum(len(fs) for _, fs in class_files()) * a.copies
        os.sync()
        c0 = cpu_now(children=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        cpu = cpu_now(children=True) - c0
    else:
        import_peer(peer)  # torch comes with the peers' imports: seconds, not the writer's cost
        data, classes = samples(a.copies)
        n = len(data)
        data_bytes = sum(len(b) for _, b, _ in data)
        os.sync()  # the previous writer's dirty pages are not this one's cost
        c0 = cpu_now()
        t0 = time.perf_counter()
        if peer.startswith("stoker"):
            import stoker

            with stoker.Writer(out, classes=classes, shard_size=shard_bytes, check=(peer == "stoker")) as w:
                for key, jpeg, label in data:
                    w.write(jpeg, label, key)
            written = w.report["written"]
            assert written == n, (written, n, w.report["skipped"][:3])
        elif peer == "wds":
            import webdataset as wds

            os.makedirs(out)
            # maxcount high so that only the size cuts shards, as for the others.
            with wds.ShardWriter(os.path.join(out, "shard-%06d.tar"), maxsize=shard_bytes, maxcount=10**9, verbose=0) as w:
                for key, jpeg, label in data:
                    w.write({"__key__": key, "jpg": jpeg, "cls": label})
        elif peer == "mds":
            from streaming import MDSWriter

            with MDSWriter(out=out, columns={"jpg": "bytes", "cls": "int"}, compression=None, size_limit=shard_bytes) as w:
                for _key, jpeg, label in data:
                    w.write({"jpg": jpeg, "cls": label})
        else:
            raise SystemExit(f"unknown writer {peer}")
        seconds = time.perf_counter() - t0
        cpu = cpu_now() - c0
    t1 = time.perf_counter()
    os.sync()
    sync_s = time.perf_counter() - t1
    return {
        "stage": "write",
        "peer": peer,
        "samples": n,
        "data_bytes": data_bytes,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "sync_seconds": sync_s,
        "out_bytes": dir_bytes(out),
    }


# ---------------------------------------------------------------------------------------
# Stage 2: reading records, no decode


def open_reader(peer, path):
    """The peer's dataset object, opened once per process, outside the clock."""
    if peer == "stoker":
        import stoker

        return stoker.Dataset(path)
    if peer == "wds":
        import webdataset as wds

        return wds.WebDataset(shard_paths(path, ".tar"), shardshuffle=False)
    if peer == "mds":
        from streaming import StreamingDataset

        return StreamingDataset(local=path, shuffle=False, batch_size=1)
    raise SystemExit(f"unknown reader {peer}")


def read_pass(peer, ds):
    """One pass over every sample: (samples, payload bytes, label sum), nothing decoded."""
    n = nbytes = labels = 0
    if peer == "stoker":
        # The Python API's record access: (the JPEG's bytes, label), copied out of the map.
        for i in range(len(ds)):
            jpeg, label = ds[i]
            n += 1
            nbytes += len(jpeg)
            labels += label
    else:
        # WebDataset stores the label as decimal text (its encoder's way with ints);
        # streaming's MDS "int" column comes back as an int.
        for s in ds:
            n += 1
            nbytes += len(s["jpg"])
            labels += int(s["cls"])
    return n, nbytes, labels


def read_one(peer, path, a):
    import_peer(peer)
    ds = open_reader(peer, path)
    # A pass over stoker's records takes a tenth of a second: whole passes are repeated for
    # at least `--read-seconds` (peer_common.timed), after one untimed pass that warms the
    # page cache and the peer's own start-up.
    found = []

    def one_pass():
        found.append(read_pass(peer, ds))
        return found[-1][0]

    one_pass()
    c0 = cpu_now()
    n, seconds = timed(one_pass, a.read_seconds, warmup=0)
    cpu = cpu_now() - c0
    passes = len(found) - 1
    _, nbytes, labels = found[-1]
    return {"stage": "read", "peer": peer, "samples": n, "data_bytes": nbytes * passes, "label_sum": labels,
            "passes": passes, "seconds": seconds, "cpu_seconds": cpu}


def drop_from_page_cache(path):
    """Drops the dataset's files from the page cache as `stoker bench` does for its cold
    read: fdatasync + posix_fadvise(DONTNEED) per file (no root needed, and unlike
    drop_caches it leaves the rest of a shared machine's cache alone). Returns the fraction
    of the bytes still resident afterwards, per util-linux `fincore` (pages another process
    has mapped stay), so a failed drop is reported instead of passed off as cold."""
    files = [os.path.join(root, f) for root, _dirs, fs in os.walk(path) for f in fs]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES,SIZE", *files],
                         check=True, capture_output=True, text=True).stdout.split()
    res, size = sum(map(int, out[0::2])), sum(map(int, out[1::2]))
    return res / size if size else 0.0


def cold_one(peer, path, a):
    """`--cold-passes` passes, each after dropping the dataset's pages; the dataset object is
    opened inside the clock (after the drop: stoker's shard map must not exist while the
    pages are dropped, or they stay), so each pass is open + one read of every record."""
    import gc

    import_peer(peer)
    read_pass(peer, open_reader(peer, path))  # the peer's own first-use costs, untimed
    gc.collect()
    n = nbytes = 0
    seconds = cpu = 0.0
    resident = []
    for _ in range(a.cold_passes):
        resident.append(drop_from_page_cache(path))
        c0 = cpu_now()
        t0 = time.perf_counter()
        ds = open_reader(peer, path)
        k, b, _labels = read_pass(peer, ds)
        seconds += time.perf_counter() - t0
        cpu += cpu_now() - c0
        n += k
        nbytes += b
        del ds
        gc.collect()
    return {"stage": "cold", "peer": peer, "samples": n, "data_bytes": nbytes, "passes": a.cold_passes,
            "seconds": seconds, "cpu_seconds": cpu, "resident_after_drop": max(resident)}


# ---------------------------------------------------------------------------------------
# Stage 3: end to end, to batches of float tensors


def torchvision_transform():
    """What a torchvision ImageNet training script applies to a PIL image."""
    from torchvision import transforms as T

    return T.Compose(
        [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]
    )


def pil_rgb(jpeg):
    from PIL import Image

    return Image.open(io.BytesIO(jpeg)).convert("RGB")


def make_mds_dataset(path, seed, batch):
    """A StreamingDataset whose samples come out transformed, the way streaming's docs do it
    (subclass, decode in __getitem__), so the work runs in the DataLoader's workers."""
    from streaming import StreamingDataset

    class Images(StreamingDataset):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.transform = torchvision_transform()

        def __getitem__(self, idx):
            s = super().__getitem__(idx)
            return self.transform(pil_rgb(s["jpg"])), int(s["cls"])

    return Images(local=path, shuffle=True, shuffle_seed=seed, batch_size=batch)


def e2e_one(peer, path, a, seed):
    import torch
    import torchvision  # noqa: F401
    from PIL import Image  # noqa: F401

    import_peer(peer)
    images = 0
    c0 = cpu_now(children=True)
    t0 = time.perf_counter()
    if peer == "stoker":
        import stoker

        loader = stoker.Loader(
            path, batch_size=a.batch, shuffle=True, seed=seed, size=224, hflip=0.5,
            mean=stoker.IMAGENET_MEAN, std=stoker.IMAGENET_STD, dtype="float32", device="cpu",
        )
        for x, y in loader:
            x = torch.from_dlpack(x)  # what a training step gets: a torch tensor, no copy
            y = torch.from_dlpack(y)
            assert x.shape[1:] == (3, 224, 224) and x.dtype == torch.float32
            images += x.shape[0]
        workers = loader.stats()["backend"]  # says how many worker threads it chose
        loader.close()
    else:
        from torch.utils.data import DataLoader

        if peer == "wds":
            import webdataset as wds

            tf = torchvision_transform()
            # Shards shuffled and split between the workers (WebDataset's default splitter),
            # samples shuffled in a 1,000-sample buffer per worker, as its docs' ImageNet
            # example does; decode + transforms in the workers.
            ds = (
                wds.WebDataset(shard_paths(path, ".tar"), shardshuffle=True, seed=seed)
                .shuffle(1000)
                .map(lambda s: (tf(pil_rgb(s["jpg"])), int(s["cls"])))
            )
        elif peer == "mds":
            ds = make_mds_dataset(path, seed, a.batch)
        else:
            raise SystemExit(f"unknown loader {peer}")
        torch.manual_seed(seed)
        loader = DataLoader(ds, batch_size=a.batch, num_workers=a.workers)
        for x, y in loader:
            assert x.shape[1:] == (3, 224, 224) and x.dtype == torch.float32
            images += x.shape[0]
        workers = a.workers
        del loader  # its workers end and are waited for, so their CPU time is counted
    seconds = time.perf_counter() - t0
    cpu = cpu_now(children=True) - c0
    return {"stage": "e2e", "peer": peer, "samples": images, "seconds": seconds, "cpu_seconds": cpu, "workers": workers}


# ---------------------------------------------------------------------------------------
# The run: every measurement in its own process, peers rotated each repeat


def child(a, *args):
    cmd = [sys.executable, os.path.abspath(__file__), "--one", *map(str, args)] + common_args(a)
    load = os.getloadavg()[0]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["loadavg_1min_before"] = load
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def common_args(a):
    return [
        "--work", a.work, "--copies", str(a.copies), "--shard-mb", str(a.shard_mb),
        "--stoker-bin", a.stoker_bin, "--batch", str(a.batch), "--workers", str(a.workers),
        "--read-seconds", str(a.read_seconds), "--cold-passes", str(a.cold_passes),
    ]


def rotated(names, r):
    k = r % len(names)
    return names[k:] + names[:k]


def dataset_dir(a, peer):
    return os.path.join(a.work, "ds", peer)


def run(a):
    os.makedirs(a.work, exist_ok=True)
    lay_out_tree(os.path.join(a.work, "src"), a.copies)
    stages = a.stages.split(",")
    rows = []
    if "write" in stages:
        for r in range(a.repeats):
            for peer in rotated(WRITERS, r):
                out = os.path.join(a.work, "write", peer)
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(os.path.dirname(out), exist_ok=True)
                rows.append(dict(child(a, "write", peer, out), repeat=r))
        # The last repeat's outputs are the datasets the other stages read.
        os.makedirs(os.path.join(a.work, "ds"), exist_ok=True)
        for peer in READERS:
            shutil.rmtree(dataset_dir(a, peer), ignore_errors=True)
            os.rename(os.path.join(a.work, "write", peer), dataset_dir(a, peer))
        shutil.rmtree(os.path.join(a.work, "write"))
    if "read" in stages:
        for r in range(a.repeats):
            for peer in rotated(READERS, r):
                rows.append(dict(child(a, "read", peer, dataset_dir(a, peer)), repeat=r))
    if "cold" in stages:
        for r in range(a.repeats):
            for peer in rotated(READERS, r):
                rows.append(dict(child(a, "cold", peer, dataset_dir(a, peer)), repeat=r))
    if "e2e" in stages:
        for r in range(a.repeats):
            for peer in rotated(LOADERS, r):
                rows.append(dict(child(a, "e2e", peer, dataset_dir(a, peer), r), repeat=r))
    with open(os.path.join(a.work, "rows.json"), "w") as fh:
        json.dump({"machine": machine(), "versions": versions(), "rows": rows}, fh, indent=1)
    report(rows, a)


def machine():
    model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as fh:
        mem_kb = int(fh.readline().split()[1])
    return {"nproc": os.cpu_count(), "cpu": model, "mem_gib": round(mem_kb / 2**20, 1), "python": platform.python_version()}


def versions():
    out = {}
    for mod, dist in [("stoker", "stoker"), ("webdataset", "webdataset"), ("streaming", "mosaicml-streaming"),
                      ("torch", "torch"), ("torchvision", "torchvision"), ("PIL", "pillow")]:
        try:
            from importlib.metadata import version

            out[dist] = version(dist)
        except Exception as e:  # noqa: BLE001 - a missing peer is reported, not fatal
            out[dist] = f"missing ({e})"
    return out


def rows_of(rows, stage, peer):
    return [r for r in rows if r["stage"] == stage and r["peer"] == peer]


def per_repeat_ratios(rows, stage, mine, peer):
    """`mine`'s samples/s over `peer`'s, one ratio per repeat (both measured in that repeat)."""
    by_rep = {}
    for r in rows:
        if r["stage"] == stage:
            by_rep.setdefault(r["repeat"], {})[r["peer"]] = r
    return [
        (v[mine]["samples"] / v[mine]["seconds"]) / (v[peer]["samples"] / v[peer]["seconds"])
        for v in by_rep.values()
        if mine in v and peer in v
    ]


def report(rows, a):
    """Markdown tables: medians over the repeats; ratios are medians of per-repeat ratios."""
    print("machine:", json.dumps(machine()))
    print("versions:", json.dumps(versions()))
    med = statistics.median
    tables = [
        ("write", WRITERS, "stoker-nocheck"),
        ("read", READERS, "stoker"),
        ("cold", READERS, "stoker"),
        ("e2e", LOADERS, "stoker"),
    ]
    for stage, peers, mine in tables:
        rs = [r for r in rows if r["stage"] == stage]
        if not rs:
            continue
        extra = " | + os.sync() s | output MB" if stage == "write" else ""
        print(f"\n| {stage} | samples/s | MB/s | s | CPU s | samples per CPU-s{extra} | {mine} / this (median of per-repeat ratios) |")
        print("|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if stage == "write" else "") + "---:|")
        for peer in peers:
            m = rows_of(rs, stage, peer)
            if not m:
                continue
            # Per repeat, then the median: a read repeat times as many whole passes as fit
            # in --read-seconds, so its sample count differs from repeat to repeat (the
            # first repeat's count over the median time overstated or understated it).
            rate = med(x["samples"] / x["seconds"] for x in m)
            s = med(x["seconds"] for x in m)
            cpu = med(x["cpu_seconds"] for x in m)
            per_cpu = med(x["samples"] / x["cpu_seconds"] for x in m)
            mb = f"{med(x['data_bytes'] / x['seconds'] for x in m) / 1e6:,.0f}" if "data_bytes" in m[0] else "–"
            cells = [peer, f"{rate:,.0f}", mb, f"{s:.2f}", f"{cpu:.2f}", f"{per_cpu:,.0f}"]
            if stage == "write":
                cells += [f"{med(x['sync_seconds'] for x in m):.2f}", f"{m[0]['out_bytes'] / 1e6:,.1f}"]
            ratios = per_repeat_ratios(rows, stage, mine, peer)
            cells.append(f"{med(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})" if ratios else "–")
            print("| " + " | ".join(cells) + " |")
        if stage == "cold":
            worst = max(r["resident_after_drop"] for r in rs)
            print(f"\nstill resident after the drops: at most {worst:.1%} of a dataset's bytes")
    loads = [r["loadavg_1min_before"] for r in rows if "loadavg_1min_before" in r]
    if loads:
        print(f"\n1-minute load average before each measurement: {min(loads):.1f}–{max(loads):.1f} (2 = both cores busy)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/tmp/format-peers", help="scratch folder: copied tree, datasets")
    p.add_argument("--copies", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shard-mb", type=int, default=16, help="shard size for every writer, MiB")
    p.add_argument("--stoker-bin", default=os.path.join(REPO, "target", "release", "stoker"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers of the peers")
    p.add_argument("--read-seconds", type=float, default=2.0, help="time whole read passes for at least this long")
    p.add_argument("--cold-passes", type=int, default=3, help="cold read passes per measurement")
    p.add_argument("--stages", default="write,read,e2e", help="of write,read,cold,e2e")
    p.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args()
    a.work = os.path.abspath(a.work)
    a.stoker_bin = os.path.abspath(a.stoker_bin)
    if a.one:
        stage, peer, path, *rest = a.one
        if stage == "write":
            row = write_one(peer, path, a)
        elif stage == "read":
            row = read_one(peer, path, a)
        elif stage == "cold":
            row = cold_one(peer, path, a)
        else:
            row = e2e_one(peer, path, a, int(rest[0]))
        print(json.dumps(row), flush=True)
        return
    run(a)


if __name__ == "__main__":
    main()
