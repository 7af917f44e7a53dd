"""`classes=` of `Writer` holds at most 256 MiB of class names, each counted as its UTF-8
bytes and 32 more (its `String` here): what a dataset's manifest (read up to 256 MiB) can
hold, and a bound on the memory the names take; so at most 8,388,608 names.

Regression: the bound was the label range (2**32 - 1 names), so a lazy sequence claiming
4e9 cheap names was read in full, its memory growing until the OOM killer (or, under a
memory limit, an allocation failure that aborted the process); 60 million one-letter names
took 3.4 GB. Each case runs in a child
process under a memory limit (`RLIMIT_AS`, 1 GiB above what it has mapped once stoker is
imported), so that a regression fails the test instead of the machine."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc are Linux's")

_CHILD = r'''
import resource, sys, stoker

def mapped():
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    return kib * 1024

limit = mapped() + (1 << 30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

class Lazy:
    """`n` names, made on demand: `__len__` huge, `__getitem__` cheap."""
    def __init__(self, n, width):
        self.n, self.width = n, width
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        return format(i, f"0>{self.width}")

n, width = int(sys.argv[1]), int(sys.argv[2])
try:
    stoker.Writer(sys.argv[3], classes=Lazy(n, width), jobs=1)
    print("taken")
except (ValueError, MemoryError) as e:
    print(type(e).__name__, e)
'''


def _child(tmp_path, n, width):
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(n), str(width), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("n", [4_000_000_000, 60_000_000])
def test_a_lazy_sequence_claiming_too_many_names_is_refused_before_reading(tmp_path, n):
    run = _child(tmp_path, n, 1)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.startswith(f"ValueError classes= has {n} items: at most 8388608"), run.stdout
    assert not (tmp_path / "out").exists()


def test_names_past_the_manifests_bytes_stop_where_they_cross_it(tmp_path):
    # 1e6 names of 1000 characters: a GB of names; 256 MiB of them are read.
    run = _child(tmp_path, 1_000_000, 1000)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.startswith(
        "ValueError classes= is over the limit of 256 MiB of class names (each counted as "
        "its UTF-8 bytes and 32 more) at classes[260111]"
    ), run.stdout
    assert not (tmp_path / "out").exists()


def test_a_list_within_the_bound_is_taken(tmp_path):
    run = _child(tmp_path, 200_000, 16)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.strip() == "taken", run.stdout
