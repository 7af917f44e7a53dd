"""Machines where the NVIDIA driver library loads and no GPU can be used (a container
with the driver's libraries and no device, the CUDA toolkit's stub libcuda.so, a GPU held
by another process, a libcuda.so that lacks entry points stoker calls), played by the
stand-in driver of testdata/fake_driver in a child
Python: the default device loads on the CPU, the same batches as device="cpu", with a
UserWarning only where the driver reports a GPU; device="cuda" is a StokerError that
quotes the driver."""

import os
import subprocess
import sys

import numpy as np
import pytest

import stoker

from conftest import REPO

# Mode, the driver's words for the error it ends in, and whether it reports a device.
DRIVERS = [
    ("no-device", "no CUDA-capable device is detected", False),
    ("stub", "CUDA driver is a stub library", False),
    ("busy", "CUDA-capable device(s) is/are busy or unavailable", True),
    # stoker's words: a library without the entry points is refused before any call.
    ("incomplete", "lacks entry points stoker calls (cuDeviceGetAttribute,", False),
]

CHILD = """
import sys, warnings
import numpy as np
import stoker
path, out = sys.argv[1], sys.argv[2]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loader = stoker.Loader(path, 4, size=32, seed=5, hflip=0.5, shuffle=True, workers=2)
arrays = {}
for i, (images, labels) in enumerate(loader):
    arrays[f"images{i}"] = np.from_dlpack(images)
    arrays[f"labels{i}"] = np.from_dlpack(labels)
np.savez(out, **arrays)
print("device:", loader.stats()["device"])
for w in caught:
    print("warning:", w.category.__name__, w.message)
try:
    stoker.Loader(path, 4, size=32, device="cuda")
    print("cuda: loaded")
except stoker.StokerError as e:
    print("cuda: StokerError:", e)
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    """The stand-in libcuda.so, built with the C compiler Rust links with, and its
    incomplete build in the folder `incomplete` beside it."""
    out = tmp_path_factory.mktemp("fake_driver")
    cc = os.environ.get("CC", "cc")
    for folder, defines in [(out, []), (out / "incomplete", ["-DSTOKER_FAKE_INCOMPLETE"])]:
        folder.mkdir(exist_ok=True)
        subprocess.run(
            [cc, "-shared", "-fPIC", "-O1", *defines, "-o", str(folder / "libcuda.so"),
             str(REPO / "testdata" / "fake_driver" / "libcuda.c")],
            check=True,
        )
    return out


@pytest.mark.parametrize("mode,says,reports_gpu", DRIVERS)
def test_default_device_loads_on_the_cpu_and_cuda_says_why(
        fake_driver, sample_dataset, tmp_path, mode, says, reports_gpu):
    env = dict(os.environ, STOKER_FAKE_CUDA=mode)
    lib = fake_driver / "incomplete" if mode == "incomplete" else fake_driver
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in [str(lib), os.environ.get("LD_LIBRARY_PATH", "")] if p)
    out = tmp_path / "batches.npz"
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(sample_dataset), str(out)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, (run.stdout, run.stderr[-3000:])
    lines = run.stdout.splitlines()

    # The same batches as the CPU loader's, in this process (no stand-in here).
    cpu = stoker.Loader(sample_dataset, 4, size=32, seed=5, hflip=0.5, shuffle=True,
                        workers=2, device="cpu")
    got = np.load(out)
    n = 0
    for i, (images, labels) in enumerate(cpu):
        assert np.array_equal(got[f"images{i}"], np.from_dlpack(images)), i
        assert np.array_equal(got[f"labels{i}"], np.from_dlpack(labels)), i
        n += 1
    assert n > 0 and len(got.files) == 2 * n

    device = next(l for l in lines if l.startswith("device: "))
    assert device.startswith("device: cpu (device auto: ") and says in device, lines
    warnings = [l for l in lines if l.startswith("warning: ")]
    if reports_gpu:
        assert len(warnings) == 1, lines
        assert warnings[0].startswith(
            "warning: UserWarning stoker: device auto: cuda:0 is there but cannot be used")
        assert says in warnings[0], lines
    else:
        assert warnings == [], lines
    cuda = next(l for l in lines if l.startswith("cuda: "))
    assert cuda.startswith("cuda: StokerError:") and says in cuda, lines
    assert "panicked" not in run.stderr, run.stderr[-3000:]
