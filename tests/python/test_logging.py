"""What the Rust crates log (`tracing`) reaches Python's `logging`, under "stoker"."""

import logging
import os
import shutil
import subprocess
import sys
import time
import warnings

import pytest

import stoker
from conftest import REPO, SAMPLE


def _stoker_records(caplog):
    return [r for r in caplog.records if r.name == "stoker" or r.name.startswith("stoker.")]


@pytest.fixture
def torchrun_of_4(monkeypatch):
    """The variables torchrun sets for rank 0 of 4 processes on one node."""
    for name, value in dict(RANK="0", WORLD_SIZE="4", LOCAL_RANK="0", LOCAL_WORLD_SIZE="4").items():
        monkeypatch.setenv(name, value)


# A JPEG of 317 bytes: quick to decode.
_SMALL_JPEG = REPO / "testdata" / "conformance" / "core" / "pydicom__SC_rgb_small_odd_jpeg.jpg"


def _fallback_jpeg() -> bytes:
    """`_SMALL_JPEG` with a scan of all one bits, a Huffman code no table has: zune-jpeg
    refuses it, and the CPU decoder retries it with jpeg-decoder (which refuses it too).
    A DEBUG event on "stoker.decode" from the loader's worker threads for each decode,
    and a bad record the loader replaces."""
    data = bytearray(_SMALL_JPEG.read_bytes())
    at = 2
    while data[at + 1] != 0xDA:  # segments up to the start of scan
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    scan = at + 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    end = data.rindex(b"\xff\xd9")
    data[scan:end] = (b"\xff\x00" * (end - scan))[: end - scan]
    return bytes(data)


def _mixed_folder(root, n):
    """`n` images in one class: 3 in 4 are `_fallback_jpeg()`, the rest `_SMALL_JPEG`."""
    (root / "a").mkdir(parents=True)
    bad = _fallback_jpeg()
    for i in range(n):
        path = root / "a" / f"{i:04}.jpg"
        if i % 4:
            path.write_bytes(bad)
        else:
            shutil.copy(_SMALL_JPEG, path)


def test_rank_0_of_1_asked_for_under_a_launcher_of_4_is_not_warned_of(
    caplog, sample_dataset, torchrun_of_4
):
    # The whole dataset in each process, on purpose (the torch.distributed error offers
    # it): the builder logged "started 4 processes ... call .distributed_from_env()".
    caplog.set_level(logging.WARNING, logger="stoker")
    with stoker.Loader(sample_dataset, 4, device="cpu", rank=0, world_size=1, workers=1) as l:
        assert l.stats()["slice"] == [0, 1]
    assert not [r for r in _stoker_records(caplog) if "started 4 processes" in r.getMessage()]


def test_a_note_raised_as_userwarning_is_not_logged_again(caplog, sample_dataset):
    caplog.set_level(logging.DEBUG, logger="stoker")
    workers = 4 * (os.cpu_count() or 1) + 8
    with pytest.warns(UserWarning, match=f"workers={workers}: more threads") as raised:
        stoker.Loader(sample_dataset, 4, device="cpu", workers=workers).close()
    assert len([w for w in raised if "more threads" in str(w.message)]) == 1
    # The builder logs the same note; the binding hands it over once, as the warning.
    logged = [r.getMessage() for r in _stoker_records(caplog)]
    assert not [m for m in logged if "more threads" in m], logged


def test_bad_records_replaced_by_the_loader_are_logged_as_warnings(caplog, tmp_path):
    # A shard cut short under a running loader: its records are bad, replaced, and each of
    # the first ones is a WARNING on "stoker.loader" with its index.
    shutil.copytree(REPO / "testdata" / "imagefolder", tmp_path / "in")
    out = tmp_path / "ds"
    stoker.convert(tmp_path / "in", out, shards=2, check=False, progress=False)
    caplog.set_level(logging.WARNING, logger="stoker")
    loader = stoker.Loader(out, 8, device="cpu", size=16, workers=1, prefetch=1, seed=3)
    batches = iter(loader)
    next(batches)
    os.truncate(sorted(out.glob("shard-*.lmdb"))[1], 8192)
    list(batches)
    bad = loader.stats()["bad_records"]
    loader.close()
    assert bad > 0
    replaced = [r for r in _stoker_records(caplog) if "bad record replaced" in r.getMessage()]
    assert replaced and all(r.levelno == logging.WARNING for r in replaced)
    assert all(r.name == "stoker.loader" and " index=" in r.getMessage() for r in replaced)
    # Where the event is, not where Python delivered it.
    assert all(r.pathname.endswith("pipeline.rs") and r.lineno > 0 for r in replaced)


def test_events_of_the_conversion_threads_arrive_in_order_with_their_time(caplog, tmp_path):
    # `stoker.convert` runs the conversion on threads of its own (the caller's thread
    # only waits and looks for Ctrl-C): each shard it finishes is a DEBUG event there.
    caplog.set_level(logging.DEBUG, logger="stoker")
    before = time.time()
    report = stoker.convert(SAMPLE, tmp_path / "ds", shard_size=65536, progress=False)
    after = time.time()
    finished = [r for r in _stoker_records(caplog) if r.getMessage().startswith("shard finished")]
    assert len(finished) == report["shards"] > 1
    assert all(r.name == "stoker.formats" and r.levelno == logging.DEBUG for r in finished)
    names = [r.getMessage().split("shard=")[1].split()[0] for r in finished]
    assert names == sorted(names), names
    # The time each shard was finished, not the time of delivery.
    times = [r.created for r in finished]
    assert before <= times[0] <= times[-1] <= after
    assert times == sorted(times)


def test_nothing_is_queued_or_delivered_for_a_disabled_or_quiet_logger(caplog, tmp_path):
    caplog.set_level(logging.DEBUG, logger="stoker")
    logger = logging.getLogger("stoker")
    logger.disabled = True
    try:
        stoker.convert(SAMPLE, tmp_path / "off", shard_size=65536, progress=False)
    finally:
        logger.disabled = False
    assert _stoker_records(caplog) == []
    # Filtered where they happen, not kept for later: a later call delivers none of them.
    stoker.Dataset(tmp_path / "off")
    assert _stoker_records(caplog) == []

    # A level above DEBUG on the crate's own logger stops them too.
    logging.getLogger("stoker.formats").setLevel(logging.INFO)
    try:
        stoker.convert(SAMPLE, tmp_path / "quiet", shard_size=65536, progress=False)
    finally:
        logging.getLogger("stoker.formats").setLevel(logging.NOTSET)
    assert _stoker_records(caplog) == []

    # The same call with the logger on: the events were there to be stopped.
    stoker.convert(SAMPLE, tmp_path / "on", shard_size=65536, progress=False)
    assert any(r.getMessage().startswith("shard finished") for r in _stoker_records(caplog))


_FORKS = """
import logging, os, sys, threading, time
import stoker

src, base = sys.argv[1], sys.argv[2]

class Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)

keep = Keep()
log = logging.getLogger("stoker")
log.addHandler(keep)
log.setLevel(logging.DEBUG)

# The parent converts on another thread while it forks: its conversion threads emit
# (taking the queue's lock) at any moment, and leave events queued at the fork.
stop = threading.Event()

def convert_again_and_again():
    n = 0
    while not stop.is_set():
        stoker.convert(src, f"{base}/parent-{n}", shard_size=65536, progress=False)
        n += 1

worker = threading.Thread(target=convert_again_and_again)
worker.start()
failed = []
for i in range(8):
    time.sleep(0.03 * (i + 1))
    pid = os.fork()
    if pid == 0:
        keep.records.clear()
        report = stoker.convert(src, f"{base}/child-{i}", shard_size=65536, progress=False)
        finished = [r for r in keep.records if r.getMessage().startswith("shard finished")]
        # Its own events, each once: none of the parent's queued ones.
        os._exit(0 if len(finished) == report["shards"] else 3)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            status = "hung"
            break
        time.sleep(0.01)
    if status != 0:
        failed.append((i, status))
stop.set()
worker.join()
parent = [r for r in keep.records if r.getMessage().startswith("shard finished")]
print("failed", failed, "parent events", len(parent))
sys.exit(1 if failed or not parent else 0)
"""


def test_a_forked_child_logs_its_own_events_while_the_parent_logs_on(tmp_path):
    # Forks taken while a conversion thread emits: a child must neither wait for the
    # parent's queue lock nor deliver the parent's events. Run apart: a hang would stop
    # pytest itself, and forking pytest's process copies its own threads.
    run = subprocess.run(
        [sys.executable, "-c", _FORKS, str(SAMPLE), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, (run.stdout, run.stderr[-2000:])


_SHUTDOWN = """
import logging, sys
import stoker

logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s")
loader = stoker.Loader(sys.argv[1], 4, device="cpu", size=16, workers=2, prefetch=64)
epoch = iter(loader)
next(epoch)
if sys.argv[2] == "cycle":
    # Freed by the last collection of finalization, or never.
    keep = [loader, epoch]
    keep.append(keep)
    del loader, epoch
print("exiting", flush=True)
"""


@pytest.mark.parametrize("held", ["global", "cycle"])
def test_events_through_interpreter_shutdown_end_with_the_process(tmp_path, held):
    # The interpreter exits while the loader's workers decode ahead, logging each image:
    # their events after the last delivery (atexit's) are never delivered, and nothing
    # touches Python to say them.
    _mixed_folder(tmp_path / "in", 512)
    stoker.convert(tmp_path / "in", tmp_path / "ds", check=False, progress=False)
    run = subprocess.run(
        [sys.executable, "-c", _SHUTDOWN, str(tmp_path / "ds"), held],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "exiting" in run.stdout
    for bad in ("panicked", "Fatal Python error", "Traceback"):
        assert bad not in run.stderr, run.stderr[-2000:]
    assert "stoker.decode DEBUG zune-jpeg failed" in run.stderr


_SUBINTERPRETER = """
import sys
import _xxsubinterpreters as interpreters
import stoker

interp = interpreters.create()
interpreters.run_string(interp, '''
import logging, sys, stoker
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record)
logging.getLogger("stoker").addHandler(Keep())
logging.getLogger("stoker").setLevel(logging.DEBUG)
report = stoker.convert(%r, %r, shard_size=65536, progress=False)
finished = [r for r in records if r.getMessage().startswith("shard finished")]
assert len(finished) == report["shards"], (len(finished), report["shards"])
''')
interpreters.destroy(interp)
print("ok")
"""


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="uses 3.11's _xxsubinterpreters")
def test_a_sub_interpreter_gets_its_events_in_its_own_logging(tmp_path):
    script = _SUBINTERPRETER % (str(SAMPLE), str(tmp_path / "ds"))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-2000:]


def test_no_warning_filter_turns_a_log_event_into_an_exception(caplog, tmp_path):
    # `-W error` makes UserWarnings raise; a log record is not a warning, so a warning
    # logged by the loader (a bad record replaced) does not stop it.
    _mixed_folder(tmp_path / "in", 8)
    stoker.convert(tmp_path / "in", tmp_path / "ds", check=False, progress=False)
    caplog.set_level(logging.WARNING, logger="stoker")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with stoker.Loader(tmp_path / "ds", 4, device="cpu", size=16, workers=1) as loader:
            assert sum(len(b.indices) for b in loader) == 8
    assert [r for r in _stoker_records(caplog) if "bad record replaced" in r.getMessage()]


_DROPPED_WHILE_WORKERS_LOG = """
import logging, sys
import stoker

logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s")
for _ in range(20):
    loader = stoker.Loader(sys.argv[1], 4, device="cpu", size=32, workers=2, prefetch=64)
    epoch = iter(loader)
    next(epoch)
    # Freed with the GIL held, while its workers decode ahead and log each image: the
    # last reference to the loader joins them there. A worker that took the GIL to log
    # would wait for it forever.
    del epoch, loader
print("done", flush=True)
"""


def test_a_loader_freed_with_the_gil_while_its_workers_log_does_not_deadlock(tmp_path):
    _mixed_folder(tmp_path / "in", 512)
    stoker.convert(tmp_path / "in", tmp_path / "ds", check=False, progress=False)
    run = subprocess.run(
        [sys.executable, "-c", _DROPPED_WHILE_WORKERS_LOG, str(tmp_path / "ds")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "done" in run.stdout, run.stderr[-2000:]
    # The workers' events arrived, at their crate's logger and level.
    assert "stoker.decode DEBUG zune-jpeg failed" in run.stderr, run.stderr[-2000:]


def test_past_the_queue_bound_events_are_dropped_and_counted(caplog, tmp_path):
    # The workers decode the epoch ahead, a DEBUG event per fallback (about 3600: bad
    # records, each replaced by another sample, 3 in 4 of them bad again), while the
    # caller makes two stoker calls: one of them finds more than the 1024 the queue keeps,
    # and says how many it dropped.
    _mixed_folder(tmp_path / "in", 1200)
    stoker.convert(tmp_path / "in", tmp_path / "ds", check=False, progress=False)
    caplog.set_level(logging.DEBUG, logger="stoker")

    def read():
        return next(s["items"] for s in loader.stats()["stages"] if s["stage"] == "read")

    deliveries = []
    with stoker.Loader(tmp_path / "ds", 100, device="cpu", size=16, workers=2, prefetch=16,
                       shuffle=False) as loader:
        epoch = iter(loader)
        for _ in range(2):
            before = len(_stoker_records(caplog))
            next(epoch)
            deliveries.append(_stoker_records(caplog)[before:])
            # `stats()` delivers nothing: wait until the workers have read (and logged)
            # all they can hold, the whole epoch.
            last, still = read(), 0
            while still < 10:
                time.sleep(0.03)
                now = read()
                still = still + 1 if now == last else 0
                last = now
    dropped = [r for d in deliveries for r in d if "were dropped" in r.getMessage()]
    assert dropped, [len(d) for d in deliveries]
    assert all(r.name == "stoker" and r.levelno == logging.WARNING for r in dropped)
    for d in deliveries:
        # The queue's bound at most, then the count of those dropped.
        assert len(d) <= 1024 + 1, len(d)
        assert all("were dropped" not in r.getMessage() for r in d[:-1])
    assert sum(int(r.getMessage().split()[0]) for r in dropped) > 0


def test_ctrl_c_in_a_log_handler_reaches_the_caller(tmp_path, ctrl_c_raises):
    # A KeyboardInterrupt raised while a handler runs (Ctrl-C landing there) is not
    # swallowed by the delivery: it reaches the caller, here stopping the conversion (the
    # events it cut off are counted at the next delivery), and delivery goes on after.
    class InterruptedOnce(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []
            self.interrupted = False

        def emit(self, record):
            if not self.interrupted:
                self.interrupted = True
                raise KeyboardInterrupt
            self.records.append(record)

    logger = logging.getLogger("stoker")
    handler = InterruptedOnce()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with pytest.raises(KeyboardInterrupt):
            stoker.convert(SAMPLE, tmp_path / "ds", shard_size=65536, progress=False)
            for _ in range(1000):  # where the interrupt is seen, if not in the call
                pass
        handler.records.clear()
        report = stoker.convert(SAMPLE, tmp_path / "ds2", shard_size=65536, progress=False)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    finished = [r for r in handler.records if r.getMessage().startswith("shard finished")]
    assert len(finished) == report["shards"]


def test_ctrl_c_in_a_log_handler_during_an_epoch_loses_no_batch(tmp_path, ctrl_c_raises):
    # The events were delivered as `next` returned, after it had counted its batch: a
    # KeyboardInterrupt from a handler (Ctrl-C landing in a slow one) then reached the
    # caller instead of the batch, and a resume from `state_dict()` skipped that batch.
    _mixed_folder(tmp_path / "in", 32)
    stoker.convert(tmp_path / "in", tmp_path / "ds", check=False, progress=False)
    settings = dict(device="cpu", size=16, workers=1, prefetch=1, seed=5)
    with stoker.Loader(tmp_path / "ds", 4, **settings) as reference:
        want = [list(b.indices) for b in reference]

    class InterruptOnce(logging.Handler):
        armed, fired = False, False

        def emit(self, record):
            if self.armed and not self.fired:
                self.fired = True
                raise KeyboardInterrupt

    logger = logging.getLogger("stoker")
    handler = InterruptOnce()
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    got = []
    try:
        loader = stoker.Loader(tmp_path / "ds", 4, **settings)
        epoch = iter(loader)
        got.append(list(next(epoch).indices))
        handler.armed = True
        with pytest.raises(KeyboardInterrupt):
            while True:
                got.append(list(next(epoch).indices))
                for _ in range(1000):  # where the interrupt is seen, if not in the call
                    pass
        state = loader.state_dict()
        loader.close()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert handler.fired and 1 <= len(got) < len(want), (len(got), len(want))
    with stoker.Loader(tmp_path / "ds", 4, **settings) as resumed:
        resumed.load_state_dict(state)
        rest = [list(b.indices) for b in resumed]
    assert got + rest == want


def test_a_resumed_note_is_not_logged_again_when_an_epoch_was_running(caplog, sample_dataset):
    # `load_state_dict` during an epoch: the loader refuses the state first (the epoch is in
    # progress), the binding stops the epoch and loads again. Both loads log the note of a
    # state without draw rules; neither event may reach logging beside the UserWarning.
    caplog.set_level(logging.DEBUG, logger="stoker")
    loader = stoker.Loader(sample_dataset, 4, device="cpu", workers=1, size=16)
    state = loader.state_dict()
    del state["draws"]
    running = iter(loader)
    next(running)
    with pytest.warns(UserWarning, match="records no draw rules") as raised:
        loader.load_state_dict(state)
    loader.close()
    assert len([w for w in raised if "records no draw rules" in str(w.message)]) == 1
    logged = [r.getMessage() for r in _stoker_records(caplog)]
    assert not [m for m in logged if "records no draw rules" in m], logged


_HANDLER_THAT_LOGS = """
import logging, sys, stoker
depth, deepest, handled = [0], [0], [0]
class Again(logging.Handler):
    def emit(self, record):
        handled[0] += 1
        depth[0] += 1
        deepest[0] = max(deepest[0], depth[0])
        try:
            if handled[0] < 1000:
                stoker.Loader(sys.argv[1], 4, size=32, workers=1).close()
        finally:
            depth[0] -= 1
logger = logging.getLogger("stoker")
logger.setLevel(logging.DEBUG)
logger.addHandler(Again())
stoker.Loader(sys.argv[1], 4, size=32, workers=1).close()
print("deepest", deepest[0], "handled", handled[0])
"""


def test_a_handler_that_makes_stoker_log_again_does_not_nest_deliveries(sample_dataset):
    # Each event's handler built a loader, whose events were delivered from inside the
    # handler, and so on: some 200 levels of nested deliveries ran out of stack (SIGSEGV).
    run = subprocess.run(
        [sys.executable, "-c", _HANDLER_THAT_LOGS, str(sample_dataset)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    deepest, handled = run.stdout.split()[1::2]
    assert deepest == "1" and int(handled) > 1, run.stdout
