"""A notebook's trainer object re-created six times, its loader caught in a reference cycle:
resident memory and threads after each re-run, without and with `loader.close()`.

    python benches/python_close.py DATASET [--close]

DATASET: a converted dataset, e.g. `stoker convert testdata/imagefolder /tmp/photos`.
"""

import gc
import os
import sys

import stoker


def snapshot():
    rss_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS"))
    return f"rss {rss_kb / 1024:.0f} MB, threads {len(os.listdir('/proc/self/task'))}"


class Trainer:
    def __init__(self, dataset):
        self.loader = stoker.Loader(dataset, batch_size=128, size=224, workers=2)
        self.callbacks = [self.on_step]  # a bound method: the object is in a cycle

    def on_step(self):
        pass

    def fit(self):
        for _ in self.loader:
            pass


def main():
    dataset, close = sys.argv[1], "--close" in sys.argv[2:]
    for run in range(6):
        trainer = Trainer(dataset)
        trainer.fit()
        if close:
            trainer.loader.close()
        print(f"re-run {run}: {snapshot()}", flush=True)
    gc.collect()
    print(f"after gc.collect(): {snapshot()}")


if __name__ == "__main__":
    main()
