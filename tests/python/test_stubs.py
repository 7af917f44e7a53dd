"""The type stubs (`python/stoker/_stoker.pyi`, what editors and type checkers read) against
the extension module, with mypy's stubtest: every name, each parameter's name, kind and
default, classes that cannot be subclassed marked `@final`. A new function had been added
without its stub once already. Then ordinary use (typed/usage.py) is type-checked against
them with `mypy --strict`, so an annotation that breaks a training script fails here.
mypy comes from scripts/python-test.sh."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import stoker
from stoker import _stoker

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    """One mypy cache for the file's checks: most of a check's time is mypy reading torch's
    stubs, which a cache keeps (mypy re-checks what depends on a stub it finds changed, as
    the wrong stub below is)."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(tool, *args, cwd=HERE, mypypath=None):
    env = dict(os.environ)
    if mypypath is not None:
        env["MYPYPATH"] = str(mypypath)  # searched before the installed package
    run = subprocess.run(
        [sys.executable, "-m", tool, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
    )
    return run.returncode, run.stdout + run.stderr


def _check_usage(cache, mypypath=None):
    # --implicit-reexport: torch's own stubs do not re-export `torch.from_dlpack`.
    usage = str(HERE / "typed" / "usage.py")
    args = ("--cache-dir", str(cache), "--strict", "--implicit-reexport", usage)
    return _mypy("mypy", *args, mypypath=mypypath)


def test_the_stubs_match_the_module(tmp_path):
    # From tmp_path: stubtest leaves its cache in the folder it runs in.
    allowlist = str(HERE / "typed" / "stubtest-allowlist.txt")
    code, out = _mypy("mypy.stubtest", "--allowlist", allowlist, "stoker", cwd=tmp_path)
    assert code == 0, out


def test_ordinary_use_type_checks_against_the_stubs(mypy_cache):
    code, out = _check_usage(mypy_cache)
    assert code == 0, out


def test_the_package_type_checks_strictly(mypy_cache):
    # Its Python files (the `stoker` command's) and the stubs themselves: every generic
    # given its parameters, which pyright's strict mode asks of what a script calls.
    code, out = _mypy("mypy", "--cache-dir", str(mypy_cache), "--strict", "-p", "stoker")
    assert code == 0, out


def test_a_wrong_stub_fails_the_use_check(tmp_path, mypy_cache):
    # The check above can fail: the same script against a stub whose `Loader.epoch`
    # returns a Batch.
    package = tmp_path / "stubs" / "stoker"
    package.mkdir(parents=True)
    stub = Path(stoker.__file__).with_name("_stoker.pyi").read_text()
    wrong = stub.replace("def epoch(self, epoch: int) -> Epoch:", "def epoch(self, epoch: int) -> Batch:")
    assert wrong != stub
    (package / "__init__.pyi").write_text("from ._stoker import *\n")
    (package / "_stoker.pyi").write_text(wrong)
    code, out = _check_usage(mypy_cache, mypypath=tmp_path / "stubs")
    assert code == 1, out
    assert '"Batch" has no attribute "close"' in out


def test_the_package_exports_only_what_the_module_has():
    assert set(stoker.__all__) <= set(_stoker.__all__)
