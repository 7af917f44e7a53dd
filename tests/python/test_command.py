"""The `stoker` command of a pip install (the console script, `python -m stoker`): the
Rust CLI run inside Python, for users of the wheel, who have no toolchain to build the
binary. It must be the binary: the same output and exit statuses, log lines on stderr
(not Python's `logging`), and Ctrl-C ending it at once."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE

PYTHON_COMMAND = [sys.executable, "-m", "stoker"]


def _run(command, args, **kwargs):
    return subprocess.run([*command, *args], capture_output=True, timeout=120, **kwargs)


def _without_seconds(doc):
    return {k: v for k, v in json.loads(doc).items() if k != "seconds"}


def test_the_console_script_is_installed_beside_python():
    script = shutil.which("stoker", path=str(Path(sys.executable).parent))
    assert script, f"no stoker script in {Path(sys.executable).parent}"
    o = _run([script], ["--version"])
    assert o.returncode == 0 and o.stdout.decode().split() == ["stoker", "0.1.0"], o


def test_the_command_gives_the_binarys_output_and_statuses(stoker_cli, sample_dataset, tmp_path):
    photo = next(SAMPLE.glob("*/*.jpg"))
    damaged = tmp_path / "damaged"
    shutil.copytree(sample_dataset, damaged)
    shard = next(damaged.glob("shard-*.lmdb"))
    os.truncate(shard, shard.stat().st_size - 4096)
    cases = [
        (["--version"], 0),
        (["inspect", str(sample_dataset), "--json"], 0),
        (["decode", str(photo), "--json"], 0),
        (["verify", str(damaged)], 1),
        (["verify", str(tmp_path / "missing")], 1),
        (["verify"], 2),
        (["convert", str(SAMPLE)], 2),
    ]
    for args, status in cases:
        ours, binary = _run(PYTHON_COMMAND, args), _run([stoker_cli], args)
        assert (ours.returncode, binary.returncode) == (status, status), (args, ours, binary)
        # Usage lines name the program "stoker", not "__main__.py".
        assert ours.stderr == binary.stderr, (args, ours)
        if args[0] == "verify" and binary.stdout:
            # The text report ends with its time; the problems before it are the same.
            assert ours.stdout.splitlines()[:-1] == binary.stdout.splitlines()[:-1], args
        else:
            assert ours.stdout == binary.stdout, (args, ours)

    j = _run(PYTHON_COMMAND, ["verify", str(sample_dataset), "--json"])
    k = _run([stoker_cli], ["verify", str(sample_dataset), "--json"])
    assert j.returncode == k.returncode == 0, (j, k)
    assert _without_seconds(j.stdout) == _without_seconds(k.stdout)


def test_the_commands_log_lines_go_to_stderr_as_the_binarys(tmp_path):
    # STOKER_LOG as for the binary; a logging handler in the process would see nothing
    # (the command's events no longer reach Python's logging, which nothing delivers).
    env = dict(os.environ, STOKER_LOG="stoker_formats=debug", NO_COLOR="1")
    o = _run(PYTHON_COMMAND, ["convert", str(SAMPLE), str(tmp_path / "ds"), "-q"], env=env)
    assert o.returncode == 0, o
    err = o.stderr.decode()
    assert " DEBUG stoker_formats::writer: shard finished shard=shard-00000.lmdb" in err, err
    assert "\x1b[" not in err, err
    # Without STOKER_LOG, warnings and errors only, as the binary's default.
    env.pop("STOKER_LOG")
    o = _run(PYTHON_COMMAND, ["convert", str(SAMPLE), str(tmp_path / "quiet"), "-q"], env=env)
    assert o.returncode == 0 and o.stderr == b"", o


def _threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


@pytest.mark.parametrize("how", ["python", "binary"])
def test_ctrl_c_ends_the_command_at_once(how, stoker_cli, photos_dataset):
    """Python's own SIGINT handler only sets a flag that Python checks between bytecodes,
    never while the command runs in Rust: without the command's handlers, Ctrl-C did
    nothing until a 60 s benchmark was over. Sent once the command is running (its
    loader's threads have started), it must end the process by SIGINT, as the binary."""
    command = PYTHON_COMMAND if how == "python" else [str(stoker_cli)]
    args = ["bench", str(photos_dataset), "--device", "cpu", "--seconds", "60"]
    # SIGINT as the default action in the child: a background shell gives it ignored.
    p = subprocess.Popen([*command, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while _threads(p.pid) < 2:
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read()
            time.sleep(0.05)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        status = p.wait(timeout=30)
        assert status == -signal.SIGINT, (status, p.stderr.read())
        assert time.monotonic() - sent < 10
    finally:
        p.kill()
        p.wait()


_CLOSED_STANDARD_FDS = r'''
import os, sys
from stoker import _stoker

report = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.close(0); os.close(1); os.close(2)
status = _stoker._command(["stoker", "convert", "-q", sys.argv[2], sys.argv[3]])
targets = [os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)]
os.write(report, repr((status, targets)).encode())
'''


def test_closed_standard_descriptors_are_opened_on_dev_null(tmp_path):
    """`stoker convert ... >&-` from the console script: Python leaves descriptors 0-2
    closed where a Rust binary's start opens /dev/null on them, so the command's own files
    (a shard, the manifest) took those numbers, and a line printed to stdout or stderr
    could land in them. The command now fills them first, and the dataset is sound."""
    report, out = tmp_path / "report", tmp_path / "ds"
    o = _run([sys.executable, "-c", _CLOSED_STANDARD_FDS], [str(report), str(SAMPLE), str(out)])
    assert o.returncode == 0, o
    status, targets = eval(report.read_text())
    assert status == 0 and targets == ["/dev/null"] * 3, (status, targets)
    checked = _run(PYTHON_COMMAND, ["verify", str(out), "--json"])
    assert checked.returncode == 0 and json.loads(checked.stdout)["ok"], checked
