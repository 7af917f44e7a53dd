"""What a user without a Rust toolchain does after installing the built wheel.

    python tests/wheel/smoke.py SAMPLE_DIR SITE_PACKAGES

Run by scripts/wheel.sh in a fresh virtual environment (no torch, no cargo on PATH),
from a directory outside the repository: the package must come from the wheel, convert
the bundled sample, check it, and deliver an epoch whose pixels NumPy takes over DLPack;
the `stoker` command the wheel puts beside Python must inspect, verify and bench it.
Exits non-zero on the first thing that is wrong.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import stoker


def main(sample, site):
    # Imported from the installed wheel, not from the repository's python/ folder.
    where = os.path.realpath(stoker.__file__)
    assert where.startswith(os.path.realpath(site) + os.sep), where
    assert stoker.__version__, stoker.__version__

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sample")
        report = stoker.convert(sample, out)
        assert report["written"] == report["inputs"] == 15, report
        checked = stoker.verify(out, decode=True)
        assert checked["ok"], checked

        ds = stoker.Dataset(out)
        assert len(ds) == 15 and ds.classes == ["caer", "leptonica", "opencv"], ds.classes
        data, label = ds[0]
        assert data[:2] == b"\xff\xd8" and 0 <= label < 3, (data[:4], label)

        # No GPU here: "auto" must fall back to the CPU path, not fail.
        loader = stoker.Loader(out, batch_size=4, shuffle=True, seed=0, size=64, device="auto")
        seen = []
        for batch in loader:
            images, labels = batch
            x = np.from_dlpack(images)
            y = np.from_dlpack(labels)
            assert x.dtype == np.float32 and x.shape[1:] == (3, 64, 64), (x.dtype, x.shape)
            assert x.shape[0] == y.shape[0] and np.isfinite(x).all(), x.shape
            assert ((0 <= y) & (y < 3)).all(), y
            seen += batch.indices
        assert sorted(seen) == list(range(15)), seen
        stats = loader.stats()
        assert stats["images"] == 15 and stats["bad_records"] == 0, dict(stats)
        loader.close()

        command(out)
    print(f"wheel smoke: stoker {stoker.__version__} from {os.path.dirname(where)}: "
          f"15 images converted, verified and loaded; the stoker command inspected and benched them")


def command(dataset):
    """The console script: `stoker inspect`, `verify` and `bench`, which have no Python API."""
    script = os.path.join(os.path.dirname(sys.executable), "stoker")

    def run(*args):
        o = subprocess.run([script, *args], capture_output=True, timeout=300)
        assert o.returncode == 0, (args, o)
        return o.stdout

    assert run("--version").decode().split() == ["stoker", stoker.__version__]
    assert json.loads(run("inspect", dataset, "--json"))["samples"] == 15
    assert b"OK" in run("verify", dataset, "--decode")
    bench = json.loads(run("bench", dataset, "--device", "cpu", "--seconds", "0.5", "--json"))
    assert bench["verdict"]["path"] == "cpu" and bench["verdict"]["bound"], bench["verdict"]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
