"""`stoker.verify`: `stoker verify --json` for Python users, who get no CLI with the
package, so that they can find the records a copied or restored dataset lost."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import stoker
from conftest import REPO


def cli_report(stoker_cli, path, *flags):
    run = subprocess.run(
        [str(stoker_cli), "verify", str(path), "--json", *flags],
        capture_output=True,
        text=True,
    )
    assert run.returncode in (0, 1), run.stderr
    return json.loads(run.stdout)


def without_time(report):
    return {k: v for k, v in report.items() if k != "seconds"}


def test_a_sound_dataset_gets_the_clis_report(sample_dataset, stoker_cli):
    report = stoker.verify(sample_dataset, decode=True)
    assert report["ok"] is True
    assert (report["checked"], report["decoded"], report["ok_records"]) == (15, 15, 15)
    assert without_time(report) == without_time(cli_report(stoker_cli, sample_dataset, "--decode"))
    # Named like every other keyword (it was "'int' object is not an instance of 'bool'").
    with pytest.raises(TypeError, match="decode= takes a bool, not int"):
        stoker.verify(sample_dataset, decode=1)


def test_damage_is_named_by_record_and_shard_as_the_cli_names_it(tmp_path, stoker_cli):
    ds = tmp_path / "ds"
    report = stoker.convert(
        REPO / "testdata" / "imagefolder",
        ds,
        check=False,
        shard_size=1 << 20,
        progress=False,
    )
    assert report["shards"] >= 3, report
    manifest = json.loads((ds / "manifest.json").read_text())
    # A shard lost, and another with bytes changed in the middle (its records' pages).
    missing = manifest["shards"][0]
    (ds / missing["file"]).unlink()
    altered = ds / manifest["shards"][1]["file"]
    data = bytearray(altered.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    altered.write_bytes(data)

    with pytest.raises(FileNotFoundError):
        stoker.Dataset(ds)
    py = stoker.verify(ds)
    assert py["ok"] is False
    assert py["ok_records"] + py["bad_records"] + py["lost_records"] == py["samples"]
    lost = {entry["shard"]: entry for entry in py["lost"]}
    assert lost[missing["file"]]["cause"] == "missing"
    assert lost[missing["file"]]["count"] == missing["count"]
    assert manifest["shards"][1]["file"] in lost
    # The input each lost range began with, from the dataset's source map.
    assert lost[missing["file"]]["sources"][0].endswith(".jpg"), lost
    assert without_time(py) == without_time(cli_report(stoker_cli, ds))


def test_what_is_not_a_dataset_is_an_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        stoker.verify(tmp_path)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(stoker.StokerError, match="manifest"):
        stoker.verify(tmp_path)
    with pytest.raises(TypeError, match="path"):
        stoker.verify(3)


def test_ctrl_c_stops_a_check(photos_dataset, tmp_path, ctrl_c_raises):
    # Python's handler only sets a flag: a check that never looked at it would read and
    # decode the whole dataset (minutes on a real one) before KeyboardInterrupt.
    start = time.monotonic()
    assert stoker.verify(photos_dataset, decode=True)["ok"]
    whole = time.monotonic() - start
    timer = threading.Timer(whole / 5, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        stoker.verify(photos_dataset, decode=True)
    stopped = time.monotonic() - start
    timer.join()
    assert stopped < whole * 0.6, (stopped, whole)
    assert stoker.verify(photos_dataset)["ok"]


_OUT_OF_DESCRIPTORS = r'''
import json, resource, sys
import stoker

what, limit, dataset, src = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
try:
    if what == "verify":
        r = stoker.verify(dataset)
        out = {"report": [r["ok"], len(r["bad"]), len(r["lost"])]}
    else:
        r = stoker.convert(src, dataset, shard_size=64 << 10, check=False, progress=False)
        out = {"report": [r["written"] == r["inputs"], len(r["skipped"]), 0]}
except OSError as e:
    out = {"os_error": [type(e).__name__, e.errno, str(e)]}
except Exception as e:
    out = {"other": [type(e).__name__, str(e)]}
print(json.dumps(out))
'''


@pytest.mark.parametrize("what", ["verify", "convert"])
def test_out_of_file_descriptors_is_an_os_error_not_the_datasets(what, tmp_path):
    """A process out of file descriptors stops verify and convert (`OutsideFault`): the
    files are not to blame. Python had it as stoker.StokerError; it is the OSError with
    errno EMFILE that Python's own I/O raises, so `except OSError` catches it. Each limit
    gives either a sound result or that error, never a damaged report or another error."""
    ds = tmp_path / "ds"
    stoker.convert(REPO / "testdata" / "imagefolder", ds, shard_size=64 << 10, check=False,
                   progress=False)
    seen = []
    for limit in range(3, 27, 2):
        target = ds if what == "verify" else tmp_path / f"out-{limit}"
        src = REPO / "testdata" / "imagefolder"
        o = subprocess.run([sys.executable, "-c", _OUT_OF_DESCRIPTORS, what, str(limit),
                            str(target), str(src)], capture_output=True, timeout=300)
        assert o.returncode == 0, (limit, o.stderr.decode()[-2000:])
        r = json.loads(o.stdout)
        if "report" in r:
            assert r["report"] == [True, 0, 0], (limit, r)
        else:
            assert "os_error" in r, (limit, r)
            kind, errno_, text = r["os_error"]
            assert (kind, errno_) == ("OSError", 24), (limit, r)
            assert "no file descriptor left" in text, (limit, r)
        seen.append(next(iter(r)))
    assert "os_error" in seen and "report" in seen, seen


_OPEN_WITHOUT_DESCRIPTORS = r'''
import json, os, resource, sys
import stoker
from stoker import _stoker

dataset = sys.argv[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
out = {}
for name, call in [("Dataset", lambda: stoker.Dataset(dataset)),
                   ("Loader", lambda: stoker.Loader(dataset, 4, device="cpu"))]:
    try:
        call()
        out[name] = "opened"
    except OSError as e:
        out[name] = [type(e).__name__, e.errno]
    except Exception as e:
        out[name] = [type(e).__name__, str(e)]
out["inspect"] = _stoker._command(["stoker", "inspect", dataset])
for fd in held:
    os.close(fd)
print(json.dumps(out))
'''


def test_opening_a_dataset_without_descriptors_is_an_os_error(sample_dataset):
    """No file descriptor left when a dataset is opened: stoker.Dataset and stoker.Loader
    raised stoker.StokerError with no errno (a plain I/O error of the manifest), and the
    CLI exited 1, as for a damaged dataset. Now OSError(EMFILE) and status 3, as verify
    and convert already had it: no fault of the dataset."""
    o = subprocess.run([sys.executable, "-c", _OPEN_WITHOUT_DESCRIPTORS, str(sample_dataset)],
                       capture_output=True, timeout=120)
    assert o.returncode == 0, o.stderr.decode()[-2000:]
    out = json.loads(o.stdout.decode().splitlines()[-1])
    assert out == {"Dataset": ["OSError", 24], "Loader": ["OSError", 24], "inspect": 3}, out
    assert "Too many open files" in o.stderr.decode()
