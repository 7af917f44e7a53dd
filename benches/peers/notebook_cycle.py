"""A notebook cell run 10 times: a trainer object in a reference cycle holds a loader,
iterates one epoch, and is dropped. Counts what stays alive afterwards in this process:
anonymous memory, threads, child processes (stoker beside PyTorch's DataLoader with
persistent workers, the peer's way of keeping workers between epochs).

    python benches/peers/notebook_cycle.py stoker DATASET    # a converted dataset
    python benches/peers/notebook_cycle.py dataloader        # needs torch
"""

import os
import sys
import time

import torch

import stoker

RUNS = 10


def rss_anon_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("RssAnon:")) >> 10


def threads():
    return len(os.listdir("/proc/self/task"))


def children():
    """Processes whose parent is this one."""
    me, n = str(os.getpid()), 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                n += f.read().rsplit(") ", 1)[1].split()[1] == me
        except OSError:
            pass
    return n


class Crops(torch.utils.data.Dataset):
    """15 samples of 224² float32, as the stoker loader's batches hold."""

    def __len__(self):
        return 15

    def __getitem__(self, i):
        return torch.zeros(3, 224, 224), i % 3


def main():
    kind = sys.argv[1]
    base_rss, base_threads = rss_anon_mib(), threads()
    build_ms = 0.0
    for _ in range(RUNS):

        class Trainer:
            pass

        t = Trainer()
        t.me = t  # the cycle: only a full collection frees it
        start = time.perf_counter()
        if kind == "stoker":
            t.loader = stoker.Loader(sys.argv[2], 32, size=224, device="cpu", workers=2)
        else:
            t.loader = torch.utils.data.DataLoader(
                Crops(), batch_size=32, num_workers=2, persistent_workers=True
            )
        build_ms = (time.perf_counter() - start) * 1000
        for _ in t.loader:
            pass
        time.sleep(0.3)
        del t
    print(
        f"{kind}: after {RUNS} runs: +{rss_anon_mib() - base_rss} MiB anonymous memory, "
        f"+{threads() - base_threads} threads, {children()} child processes; "
        f"last build {build_ms:.0f} ms"
    )


if __name__ == "__main__":
    main()
