"""Fixtures of the Python package's tests: the in-repo sample photos converted once, and
the Rust front ends the package is checked against (`stoker` CLI, the `loader_dump`
example), built with cargo if `scripts/python-test.sh` has not built them."""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

import stoker

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "data" / "sample"


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


def _rust_binary(relative: str, cargo_args: list) -> Path:
    path = _target_dir() / "debug" / relative
    if not path.exists():
        subprocess.run(["cargo", "build", "--quiet", *cargo_args], cwd=REPO, check=True)
    assert path.exists(), f"{path} was not built"
    return path


@pytest.fixture
def ctrl_c_raises():
    """Python's own Ctrl-C handler while the test runs: a process a non-interactive shell
    starts in the background (`nohup ... &`, some CI runners) inherits SIGINT ignored, and
    Python then keeps ignoring it, so a test of what Ctrl-C does could never see it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def sample_dataset(tmp_path_factory) -> Path:
    """The 15 sample photos (3 classes) converted into a dataset."""
    out = tmp_path_factory.mktemp("sample") / "ds"
    report = stoker.convert(SAMPLE, out, progress=False)
    assert report["written"] == 15, report["skipped"]
    return out


@pytest.fixture(scope="session")
def photos_dataset(tmp_path_factory) -> Path:
    """The test photos (testdata/imagefolder, up to 1.3 kpx) stored as they are: batches
    slow enough to decode that a test can act while `next` waits."""
    out = tmp_path_factory.mktemp("photos") / "ds"
    stoker.convert(REPO / "testdata" / "imagefolder", out, check=False, progress=False)
    return out


@pytest.fixture(scope="session")
def stoker_cli() -> Path:
    return _rust_binary("stoker", ["--bin", "stoker"])


@pytest.fixture(scope="session")
def rust_batches(tmp_path_factory):
    """`rust_batches(dataset, **settings)`: the Rust loader's batches of one epoch (the
    `loader_dump` example), each a dict with `indices`, `labels`, `shape` and `pixels`
    (bytes)."""
    exe = _rust_binary("examples/loader_dump", ["--example", "loader_dump"])
    runs = iter(range(1_000_000))

    def run(dataset, **settings):
        pixels = tmp_path_factory.mktemp(f"rust-pixels-{next(runs)}")
        args = [str(exe), str(dataset), "--pixels", str(pixels)]
        for key, value in settings.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is not False:
                args += [flag, str(value)]
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        batches = [json.loads(line) for line in out.splitlines() if line.strip()]
        for b in batches:
            b["pixels"] = (pixels / f"batch-{b['index']}.bin").read_bytes()
        return batches

    return run
