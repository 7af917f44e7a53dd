"""`stoker.Writer`: a dataset from samples in memory, as `stoker.convert` makes one from
files (same records for the same images and options), a context manager that leaves no
dataset when its block raises, and clear errors for what it refuses."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import stoker
from conftest import SAMPLE


def _photos():
    """The sample photos as (bytes, label, name) in `convert`'s order, and the classes."""
    classes = sorted(p.name for p in SAMPLE.iterdir() if p.is_dir())
    samples = []
    for label, c in enumerate(classes):
        for f in sorted((SAMPLE / c).iterdir()):
            samples.append((f.read_bytes(), label, f"{c}/{f.name}"))
    return classes, samples


def _records(path):
    ds = stoker.Dataset(path)
    return ds.classes, [ds[i] for i in range(len(ds))]


def test_written_samples_are_the_records_convert_writes(tmp_path, sample_dataset):
    classes, samples = _photos()
    with stoker.Writer(tmp_path / "w", classes=classes, source="sample photos") as w:
        for data, label, name in samples:
            w.write(data, label, name)
    report = w.report
    assert report["written"] == report["inputs"] == len(samples)
    assert report["stored"] == len(samples) and report["skipped"] == []
    assert w.closed
    # The keys of `stoker.convert`'s report.
    assert set(report) == set(stoker.convert(SAMPLE, tmp_path / "c", progress=False))
    assert _records(tmp_path / "w") == _records(sample_dataset)
    manifest = stoker.Dataset(tmp_path / "w").manifest
    assert manifest["provenance"]["source"] == "sample photos"
    assert manifest["provenance"]["flags"]["order"] == "written"


def test_reencoded_records_match_convert_too(tmp_path):
    classes, samples = _photos()
    stoker.convert(SAMPLE, tmp_path / "c", max_side=48, progress=False)
    with stoker.Writer(tmp_path / "w", classes, max_side=48, jobs=2) as w:
        for data, label, _ in samples:
            w.write(data, label)
    assert w.report["transcoded"] == len(samples)
    assert _records(tmp_path / "w") == _records(tmp_path / "c")


def test_bytearray_memoryview_and_numpy_buffers_are_the_same_bytes(tmp_path):
    _, samples = _photos()
    data = samples[0][0]
    out = tmp_path / "ds"
    with stoker.Writer(out) as w:
        w.write(data, 0)
        w.write(bytearray(data), 1)
        w.write(memoryview(data), 2)
        w.write(np.frombuffer(data, dtype=np.uint8), 3)
        # A slice of a larger buffer, not starting at its beginning.
        padded = np.frombuffer(b"xx" + data, dtype=np.uint8)
        w.write(padded[2:], 4)
        # A torch uint8 tensor of the file's bytes, as torchvision.io.read_file gives
        # it: no buffer protocol, read through DLPack.
        import torch

        w.write(torch.frombuffer(bytearray(data), dtype=torch.uint8), 5)
        with pytest.raises(TypeError, match="items of 4 bytes"):
            w.write(torch.zeros(8, dtype=torch.int32), 0)
    classes, records = _records(out)
    assert classes == ["0", "1", "2", "3", "4", "5"]
    assert records == [(data, label) for label in range(6)]


def test_what_is_not_encoded_bytes_is_a_type_error(tmp_path):
    with stoker.Writer(tmp_path / "ds") as w:
        with pytest.raises(TypeError, match="encoded image"):
            w.write("photo.jpg", 0)
        with pytest.raises(TypeError, match="encoded image"):
            w.write(7, 0)
        with pytest.raises(TypeError, match="items of 4 bytes"):
            w.write(np.zeros(8, dtype=np.float32), 0)
        w.write(_photos()[1][0][0], 0)
    assert w.report["written"] == 1


def test_an_exception_in_the_block_leaves_nothing(tmp_path):
    _, samples = _photos()
    out = tmp_path / "new" / "ds"
    with pytest.raises(RuntimeError, match="boom"):
        with stoker.Writer(out, shard_size=65536, check=False) as w:
            for data, label, _ in samples * 60:
                w.write(data, label)
            # Enough was written for shards to be on disk.
            assert any(n.endswith(".lmdb") for n in os.listdir(out)), os.listdir(out)
            raise RuntimeError("boom")
    assert not (tmp_path / "new").exists()
    assert w.closed and w.report is None


def test_bad_samples_are_skipped_or_with_strict_stop_the_writer(tmp_path):
    _, samples = _photos()
    with stoker.Writer(tmp_path / "ok") as w:
        w.write(samples[0][0], 0, "good")
        w.write(b"not a picture", 0, "text")
    assert w.report["written"] == 1
    assert [s["path"] for s in w.report["skipped"]] == ["text"]

    w = stoker.Writer(tmp_path / "strict", strict=True)
    w.write(samples[0][0], 0)
    w.write(b"not a picture", 0, "text")
    with pytest.raises(stoker.StokerError, match="text: not an image"):
        w.close()
    assert not (tmp_path / "strict").exists()
    with pytest.raises(ValueError, match="is closed .close.. failed.*text: not an image"):
        w.write(samples[0][0], 0)

    # Stopped by a `write`, the writer says so at every later call.
    w = stoker.Writer(tmp_path / "strict", strict=True, check=False)
    w.write(b"not a picture", 0, "text")
    with pytest.raises(stoker.StokerError, match="text: not an image"):
        for _ in range(3000):
            w.write(samples[0][0], 0)
    assert not (tmp_path / "strict").exists()
    with pytest.raises(stoker.StokerError, match="stopped on an earlier error"):
        w.write(samples[0][0], 0)
    w.abort()


def test_refusals_are_clear(tmp_path, sample_dataset):
    with pytest.raises(stoker.StokerError, match="already holds a finished dataset"):
        stoker.Writer(sample_dataset)
    with stoker.Writer(tmp_path / "ds", ["a", "b"]) as w:
        # It named only `stoker convert` and `stoker merge` as the lock's holder.
        with pytest.raises(stoker.StokerError, match="stoker.Writer.*its lock is held"):
            stoker.Writer(tmp_path / "ds")
        with pytest.raises(ValueError, match="label 2 is out of range"):
            w.write(_photos()[1][0][0], 2)
        # Labels are class indices: a negative or too large one is named, and True is not
        # taken as class 1.
        with pytest.raises(ValueError, match="^label=-1 is a negative int: labels are class indices, from 0$"):
            w.write(_photos()[1][0][0], -1)
        with pytest.raises(ValueError, match=f"^label={2**70} is too large: labels are class"):
            w.write(_photos()[1][0][0], 2**70)
        with pytest.raises(TypeError, match="^label=True is a bool: label= takes an int$"):
            w.write(_photos()[1][0][0], True)
        with pytest.raises(TypeError, match="^label= takes an int, not float$"):
            w.write(_photos()[1][0][0], 1.0)
        # Past 4300 digits `str` of an int raises: it printed "<unprintable int object>".
        with pytest.raises(ValueError, match="^label= is too large: labels are class"):
            w.write(_photos()[1][0][0], 10**5000)
        w.write(_photos()[1][0][0], np.int64(1))
        w.write(_photos()[1][0][0], 1)
    report = w.close()
    assert report == w.report and report["empty_classes"] == ["a"]
    with pytest.raises(ValueError, match="is closed"):
        w.write(b"", 0)
    with pytest.raises(ValueError, match="encoding"):
        stoker.Writer(tmp_path / "x", encoding="png")
    with pytest.raises(stoker.StokerError, match="no dataset was written"):
        stoker.Writer(tmp_path / "empty").close()
    assert not (tmp_path / "empty").exists()


def test_the_written_dataset_loads(tmp_path):
    classes, samples = _photos()
    with stoker.Writer(tmp_path / "ds", classes) as w:
        for data, label, _ in samples:
            w.write(data, label)
    loader = stoker.Loader(tmp_path / "ds", 5, device="cpu", size=16, seed=1)
    labels = []
    for images, y in loader:
        assert np.from_dlpack(images).shape == (5, 3, 16, 16)
        labels.extend(np.from_dlpack(y).tolist())
    assert sorted(labels) == sorted(label for _, label, _ in samples)


def test_a_forked_child_cannot_use_or_remove_the_parents_writer(tmp_path):
    _, samples = _photos()
    code = f"""
import os, sys, stoker
w = stoker.Writer({str(tmp_path / "ds")!r})
w.write(open({str(SAMPLE / "caer" / "tent.jpg")!r}, "rb").read(), 0)
pid = os.fork()
if pid == 0:
    try:
        w.write(b"x", 0)
        os._exit(3)
    except stoker.StokerError as e:
        ok = "another process" in str(e)
    try:
        w.closed
        ok = False
    except stoker.StokerError:
        pass
    ok = ok and "of another process" in repr(w)
    del w
    os._exit(0 if ok else 4)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
print(w.close()["written"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
    assert len(stoker.Dataset(tmp_path / "ds")) == 1


def test_a_forked_child_does_not_keep_the_output_locked_after_the_parent_aborts(tmp_path):
    # A DataLoader worker forked while a Writer is open shares its directory lock: the
    # next Writer into that directory was refused until every such child had exited.
    code = f"""
import os, sys, stoker
data = open({str(SAMPLE / "caer" / "tent.jpg")!r}, "rb").read()
for part in (None, 1):
    out = {str(tmp_path)!r} + "/ds-" + str(part)
    args = dict(part=part, parts=2, classes=["a"]) if part is not None else {{}}
    # Made beforehand, so that the abort leaves it (a writer takes away only the
    # directories it made): the next writer then locks the very directory the child's
    # copy of the lock is on.
    os.makedirs(out + ("/part-00001-of-00002" if part is not None else ""))
    w = stoker.Writer(out, **args)
    w.write(data, 0)
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(wfd)
        os.read(r, 1)  # alive, holding its copies, until the parent says
        os._exit(0)
    os.close(r)
    w.abort()
    try:
        again = stoker.Writer(out, **args)
        again.write(data, 0)
        print("free", again.close()["written"])
    except stoker.StokerError as e:
        print("locked:", e)
    os.close(wfd)
    os.waitpid(pid, 0)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["free 1", "free 1"], out.stdout


def test_writes_from_several_threads_take_turns(tmp_path):
    import threading

    _, samples = _photos()
    w = stoker.Writer(tmp_path / "ds", check=False)
    assert isinstance(w.out, os.PathLike) and not w.closed

    def write_all(label):
        for data, _, _ in samples:
            w.write(data, label)

    threads = [threading.Thread(target=write_all, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = w.close()
    assert report["written"] == 4 * len(samples)
    _, records = _records(tmp_path / "ds")
    for label in range(4):
        assert sorted(d for d, y in records if y == label) == sorted(d for d, _, _ in samples)


def test_abort_from_another_thread_gets_its_turn_while_threads_write(tmp_path):
    # abort() polled for the lock that writing threads took back at once: it waited until
    # they stopped (once, until the disk was full).
    import threading
    import time

    w = stoker.Writer(tmp_path / "ds", check=False)
    deadline = time.monotonic() + 20

    def write_junk():
        try:
            while time.monotonic() < deadline:
                w.write(b"not an image", 0)
        except ValueError:
            pass  # closed: the abort got its turn

    threads = [threading.Thread(target=write_junk) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    w.abort()
    took = time.monotonic() - t0
    for t in threads:
        t.join()
    assert took < 3, f"abort() waited {took:.1f} s for its turn"
    assert w.closed and not (tmp_path / "ds").exists()


def test_a_writer_out_of_space_says_what_is_left_and_no_resume(tmp_path):
    # It said "make room and rerun with --resume to continue from the last finished
    # shard", which a writer has no way to do: it had removed its output. A stop for no
    # fault of the samples: the OSError of its errno, as Python's own write would raise.
    code = f"""
import errno, resource, signal, stoker
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))
data = open({str(SAMPLE / "caer" / "tent.jpg")!r}, "rb").read()
try:
    with stoker.Writer({str(tmp_path / "ds")!r}, check=False) as w:
        for _ in range(200):
            w.write(data, 0)
except OSError as e:
    print(errno.errorcode[e.errno], e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("EFBIG "), out.stdout
    assert "file size limit reached" in out.stdout, out.stdout
    assert "--resume" not in out.stdout, out.stdout
    assert "removed what it had written" in out.stdout, out.stdout
    assert not (tmp_path / "ds").exists()


def test_convert_and_merge_out_of_space_are_os_errors_and_leave_what_goes_on(tmp_path):
    # Both raised stoker.StokerError, which the README keeps for the inputs' own faults:
    # a full disk (here the file size limit) is the OSError of its errno, as for the CLI's
    # status 3.
    parts = tmp_path / "parts"
    for i in range(2):
        stoker.convert(SAMPLE, parts, part=i, parts=2, progress=False)
    code = f"""
import errno, resource, signal, stoker
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
for call in (lambda: stoker.merge({str(parts)!r}),
             lambda: stoker.convert({str(SAMPLE)!r}, {str(tmp_path / "c")!r}, progress=False)):
    try:
        call()
        print("no error")
    except OSError as e:
        print(errno.errorcode[e.errno], e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    merged, converted = out.stdout.splitlines()
    assert merged.startswith("EFBIG ") and "no part was removed" in merged, merged
    assert converted.startswith("EFBIG ") and "resume" in converted, converted
    # The parts stayed whole: the merge goes on once there is room.
    assert stoker.merge(parts)["samples"] == len(stoker.Dataset(parts))
    report = stoker.convert(SAMPLE, tmp_path / "c", resume=True, progress=False)
    assert len(stoker.Dataset(tmp_path / "c")) == report["written"] > 0


def test_a_sample_that_would_fit_with_more_memory_is_a_memory_error_not_a_skip(tmp_path):
    # It was skipped as larger than memory when it only did not fit beside what the
    # process held at the moment, so the written dataset depended on that moment.
    code = f"""
import resource, stoker
data = bytearray(open({str(SAMPLE / "opencv" / "data_stuff.jpg")!r}, "rb").read())
at = data.index(b"\\xff\\xc0")
side = 11547  # claimed: 400 MB of pixels to decode
data[at + 5:at + 9] = side.to_bytes(2, "big") * 2
size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:"))
# Under the limit, so it could fit with the process's own memory freed; not beside it.
limit = size * 1024 + 3 * side * side - (16 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    w = stoker.Writer({str(tmp_path / "ds")!r}, max_pixels=10**9)
    w.write(bytes(data), 0)
    w.close()
except MemoryError as e:
    print("MemoryError:", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MemoryError:"), out.stdout + out.stderr
    assert "11547x11547 pixels need about" in out.stdout, out.stdout
    assert "removed what it had written" in out.stdout and "--resume" not in out.stdout, out.stdout
    assert not (tmp_path / "ds").exists()


def test_decoded_pixels_are_a_type_error_not_a_skip(tmp_path):
    # An HF dataset in numpy format hands over (H, W, 3) uint8 arrays: each was skipped as
    # "not an image", and the user learnt why only from the report after the whole run.
    with stoker.Writer(tmp_path / "ds") as w:
        with pytest.raises(TypeError, match=r"shape \(4, 5, 3\).*decoded pixels"):
            w.write(np.zeros((4, 5, 3), dtype=np.uint8), 0)
        w.write(_photos()[1][0][0], 0)
    assert w.report["written"] == 1 and w.report["skipped"] == []


def test_a_sample_over_max_file_size_is_skipped_without_a_copy(tmp_path):
    # It was copied whole (a NumPy array twice) before being skipped for its size: a 2 GB
    # sample took 4 GB more.
    code = f"""
import resource, numpy as np, stoker
def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
big = b"\\xff" * (256 << 20)
array = np.frombuffer(big, dtype=np.uint8)
before = peak_mb()
with stoker.Writer({str(tmp_path / "ds")!r}) as w:
    w.write(open({str(SAMPLE / "caer" / "tent.jpg")!r}, "rb").read(), 0)
    w.write(big, 0, "big")
    w.write(array, 0, "array")
print(peak_mb() - before)
print([s["path"] + ": " + s["reason"] for s in w.report["skipped"]])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    grew, skipped = out.stdout.splitlines()
    assert int(grew) < 100, f"peak memory grew by {grew} MB"
    assert skipped.count("268435456 bytes is over the input size limit of 67108864") == 2, skipped


def test_a_forked_childs_exception_in_the_block_is_not_replaced(tmp_path):
    # __exit__ aborted, which in a child raised StokerError in place of the block's own
    # exception (the child's traceback then named the writer, not what went wrong).
    code = f"""
import os, stoker
w = stoker.Writer({str(tmp_path / "ds")!r})
w.write(open({str(SAMPLE / "caer" / "tent.jpg")!r}, "rb").read(), 0)
pid = os.fork()
if pid == 0:
    try:
        with w:
            raise KeyError("the child's own")
    except KeyError:
        os._exit(0)
    except BaseException:
        os._exit(5)
    os._exit(6)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), w.close()["written"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1"]


def test_abort_stops_the_chunk_being_transcoded(tmp_path):
    # The chunk on the pool went on transcoding (seconds of every core) after abort()
    # had returned, for results nobody would take.
    import time

    def pool_threads():
        tasks = os.listdir("/proc/self/task")
        names = []
        for t in tasks:
            try:
                with open(f"/proc/self/task/{t}/comm") as f:
                    names.append(f.read().strip())
            except OSError:
                pass  # the thread ended meanwhile
        return [n for n in names if n.startswith("stoker-write")]

    data = (SAMPLE / "caer" / "tent.jpg").read_bytes()
    w = stoker.Writer(tmp_path / "ds", max_side=32, jobs=1)
    for _ in range(8 * 2**20 // len(data) + 2):  # 8 MiB, a chunk: on the pool now, seconds of work
        w.write(data, 0)
    # A thread takes its name once it runs, which on a busy machine can be a while.
    t0 = time.monotonic()
    while not pool_threads() and time.monotonic() - t0 < 10:
        time.sleep(0.01)
    assert pool_threads()
    w.abort()
    t0 = time.monotonic()
    while pool_threads() and time.monotonic() - t0 < 10:
        time.sleep(0.01)
    took = time.monotonic() - t0
    assert took < 0.5, f"the pool worked {took:.1f} s after abort()"


def test_python_code_run_by_close_may_use_the_writer(tmp_path):
    # close() parsed its report with json.loads while its thread held the writer's turn:
    # Python code run there (a signal handler calling w.abort() on SIGTERM, a finalizer,
    # here a profile hook) that used the writer waited for that turn forever.
    script = """
import sys, stoker
w = stoker.Writer(sys.argv[1], check=False)
w.write(open(sys.argv[2], "rb").read(), 0)
seen = []
def hook(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "loads" and not seen:
        seen.append(w.closed)
sys.setprofile(hook)
report = w.close()
sys.setprofile(None)
print(seen, report["written"])
"""
    _, samples = _photos()
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(samples[0][0])
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "ds"), str(photo)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[True]", "1"], done.stdout


def _write_part(out, index, parts, classes, samples):
    """One process's share of a writing: part `index` of `parts` (run in a spawned
    process, so at module level)."""
    with stoker.Writer(out, classes=classes, part=index, parts=parts) as w:
        for data, label, name in samples:
            w.write(data, label, name)
    return w.report["written"]


def test_parts_written_by_several_processes_merge_into_one_writers_dataset(tmp_path):
    import multiprocessing

    classes, samples = _photos()
    with stoker.Writer(tmp_path / "one", classes=classes) as w:
        for data, label, name in samples:
            w.write(data, label, name)
    # Contiguous halves, as `datasets`' `shard(num_shards=2, index=i, contiguous=True)`
    # cuts them; spawn, as `datasets.map(num_proc=)` and CUDA users must.
    half = len(samples) // 2
    out = tmp_path / "parts"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        written = pool.starmap(
            _write_part,
            [(out, 0, 2, classes, samples[:half]), (out, 1, 2, classes, samples[half:])],
        )
    assert written == [half, len(samples) - half]
    assert sorted(p.name for p in out.iterdir()) == [
        "part-00000-of-00002",
        "part-00001-of-00002",
    ]
    report = stoker.merge(out)
    assert (report["parts"], report["samples"]) == (2, len(samples))
    assert _records(out) == _records(tmp_path / "one")
    assert stoker.Dataset(out).manifest.get("part") is None


def test_a_writer_part_needs_both_keywords_and_classes(tmp_path):
    classes, _ = _photos()
    with pytest.raises(ValueError, match="go together"):
        stoker.Writer(tmp_path / "a", classes=classes, part=0)
    with pytest.raises(ValueError, match="part=2, parts=2"):
        stoker.Writer(tmp_path / "a", classes=classes, part=2, parts=2)
    with pytest.raises(ValueError, match="needs classes"):
        stoker.Writer(tmp_path / "a", part=0, parts=2)
    # An aborted part takes away its own directory, not its siblings'.
    done = stoker.Writer(tmp_path / "b", classes=classes, part=0, parts=2)
    w = stoker.Writer(tmp_path / "b", classes=classes, part=1, parts=2)
    assert w.out == tmp_path / "b" / "part-00001-of-00002"
    w.abort()
    assert not w.out.exists() and done.out.exists()
    done.abort()


@pytest.mark.parametrize("make", ["Writer", "convert"])
def test_part_and_parts_are_ints_in_range_named_by_their_keyword(tmp_path, make):
    """Regression: `part=True` was taken as part 1, `part=-1` raised a bare `OverflowError`,
    and a part out of range was told in the CLI's words ("--part 3 --parts 3"). `Writer`
    and `convert` check the two keywords alike, before anything is made."""
    classes, _ = _photos()
    out = tmp_path / "out"

    def start(**kw):
        if make == "Writer":
            return stoker.Writer(out, classes=classes, **kw)
        return stoker.convert(SAMPLE, out, progress=False, **kw)

    for kw, error, says in [
        (dict(part=True, parts=2), TypeError, "part=True is a bool"),
        (dict(part=0, parts=True), TypeError, "parts=True is a bool"),
        (dict(part=1.0, parts=2), TypeError, "part= takes an int, not float"),
        (dict(part=0, parts="2"), TypeError, "parts= takes an int, not str"),
        (dict(part=-1, parts=3), ValueError, r"part=-1, parts=3: part= must be 0 to parts - 1"),
        (dict(part=3, parts=3), ValueError, r"part=3, parts=3: .* \(here 0 to 2\)"),
        (dict(part=0, parts=0), ValueError, "part=0, parts=0: parts= must be at least 1"),
        (dict(part=0, parts=100_000), ValueError, "parts= is at most 99999"),
        (dict(part=2**70, parts=3), ValueError, f"part={2**70} is too large: it must be below parts="),
        (dict(part=-(2**70), parts=3), ValueError, f"part=-{2**70} is a negative int: it counts from 0"),
        (dict(part=0, parts=2**70), ValueError, f"parts={2**70} is too large: at most 99999 parts"),
        # Past 4300 digits `str` of an int raises: the message goes without the value.
        (dict(part=10**5000, parts=3), ValueError, "^part= is too large: it must be below parts=$"),
    ]:
        with pytest.raises(error, match=says) as e:
            start(**kw)
        assert "--part" not in str(e.value), e.value
    assert not out.exists()
    if make == "Writer":
        # A NumPy integer is an int (it has `__index__`).
        w = start(part=np.int64(1), parts=np.uint8(2))
        assert w.out == out / "part-00001-of-00002"
        w.abort()


def test_a_killed_writers_part_is_written_again_by_a_new_writer(tmp_path):
    """Regression: `merge` told a written part whose writer was killed to rerun `convert
    --part` with `--resume`, which a writer has not, and a new writer of the part refused
    its directory as "not empty" without saying what to do. What works, and what both now
    say: delete the part directory and write the part again."""
    classes, samples = _photos()
    half = len(samples) // 2
    out = tmp_path / "parts"
    _write_part(out, 0, 2, classes, samples[:half])
    # Killed after its first chunk of samples (8 MB) was written as shards.
    code = f"""
import os, pathlib, stoker
sample = pathlib.Path({str(SAMPLE)!r})
classes = {classes!r}
w = stoker.Writer({str(out)!r}, classes=classes, part=1, parts=2, shard_size=65536, check=False)
for _ in range(40):
    for label, c in enumerate(classes):
        for f in sorted((sample / c).iterdir()):
            w.write(f.read_bytes(), label)
os._exit(0)
"""
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert killed.returncode == 0, killed.stderr
    part = out / "part-00001-of-00002"
    assert any(p.name.startswith("shard-") for p in part.iterdir())
    with pytest.raises(stoker.StokerError, match="unfinished part") as e:
        stoker.merge(out)
    assert "delete this part directory and write the part again" in str(e.value)
    with pytest.raises(stoker.StokerError, match="killed") as e:
        stoker.Writer(out, classes=classes, part=1, parts=2)
    assert "delete this part directory and write the part again" in str(e.value)
    assert "resume" not in str(e.value)
    shutil.rmtree(part)
    _write_part(out, 1, 2, classes, samples[half:])
    assert stoker.merge(out)["samples"] == len(samples)


def test_parts_that_each_got_every_sample_are_refused_at_merge(tmp_path):
    # Every process looped over the whole dataset, not its share (`dataset.shard` was
    # forgotten): the merged dataset held each sample once per process.
    classes, samples = _photos()
    out = tmp_path / "parts"
    for index in range(2):
        _write_part(out, index, 2, classes, samples)
    with pytest.raises(stoker.StokerError, match="part 1 holds the same records as part 0"):
        stoker.merge(out)
    assert not (out / "manifest.json").exists()
    assert len(stoker.Dataset(out / "part-00001-of-00002")) == len(samples)
    # Each process shuffled every sample its own way: other shards, the same records.
    out = tmp_path / "shuffled"
    _write_part(out, 0, 2, classes, samples)
    _write_part(out, 1, 2, classes, samples[::-1])
    with pytest.raises(stoker.StokerError, match="in another order or other shards"):
        stoker.merge(out)
    assert not (out / "manifest.json").exists()


def _interrupt_after(seconds, sent):
    """SIGINT to this process in `seconds`, its time put in `sent`."""
    import signal
    import threading
    import time

    def send():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(seconds, send)
    timer.start()
    return timer


def test_ctrl_c_reaches_a_write_or_close_waiting_for_the_pool(tmp_path, ctrl_c_raises):
    # write() and close() waited for the chunk being transcoded (seconds) with the GIL
    # released and no look at signals: Ctrl-C (and any Python signal handler) came only
    # once the chunk was done, and a Ctrl-C in close() came after the dataset was written.
    import time

    data = (SAMPLE / "caer" / "tent.jpg").read_bytes()
    chunk = 8 * 2**20 // len(data) + 2  # samples of one chunk: seconds of work at jobs=1
    w = stoker.Writer(tmp_path / "ds", max_side=32, jobs=1)
    sent = []
    timer = _interrupt_after(1.0, sent)
    written = 0
    with pytest.raises(KeyboardInterrupt):
        for _ in range(20 * chunk):
            w.write(data, 0)
            written += 1
    seen = time.monotonic()
    timer.join()
    assert sent and seen - sent[0] < 0.5, f"Ctrl-C seen {seen - sent[0]:.2f} s late"
    assert written < 20 * chunk and not w.closed

    # The samples taken so far make more than a chunk: close() waits for the pool too.
    sent.clear()
    timer = _interrupt_after(0.2, sent)
    with pytest.raises(KeyboardInterrupt):
        w.close()
    seen = time.monotonic()
    timer.join()
    assert sent and seen - sent[0] < 0.5, f"Ctrl-C seen {seen - sent[0]:.2f} s late"
    assert not w.closed and not (tmp_path / "ds" / "manifest.json").exists()
    # Nothing was lost: the writer goes on, and closing again writes every sample taken.
    assert w.close()["written"] == written
    assert len(stoker.Dataset(tmp_path / "ds")) == written


def test_a_writer_freed_unclosed_says_what_it_discarded(tmp_path):
    # A script that forgot close() ended with its output removed and not a word said.
    script = """
import sys, stoker
w = stoker.Writer(sys.argv[1])
w.write(open(sys.argv[2], "rb").read(), 0)
"""
    out = tmp_path / "ds"
    run = subprocess.run(
        [sys.executable, "-c", script, str(out), str(SAMPLE / "caer" / "tent.jpg")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "was freed unclosed: its 1 sample(s) are discarded" in run.stderr, run.stderr
    assert not out.exists()
    # Closed, aborted or left by an exception in a `with` block: nothing to say.
    with _no_warning():
        with stoker.Writer(tmp_path / "closed") as w:
            w.write((SAMPLE / "caer" / "tent.jpg").read_bytes(), 0)
        w = stoker.Writer(tmp_path / "aborted")
        w.abort()
        del w


class _no_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings(record=True)
        self.seen = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        import gc

        gc.collect()
        self._catch.__exit__(*exc)
        assert not [w for w in self.seen if "unclosed" in str(w.message)], self.seen
        return False


def test_ctrl_c_in_the_close_at_a_with_blocks_end_aborts_the_writer(tmp_path, ctrl_c_raises):
    # The block's end waited in close() for the last chunk; Ctrl-C there left the writer
    # open with its lock, and the same block run again was refused as "another writer".
    data = (SAMPLE / "caer" / "tent.jpg").read_bytes()
    chunk = 8 * 2**20 // len(data) + 2
    out = tmp_path / "ds"
    sent = []
    with pytest.raises(KeyboardInterrupt):
        with stoker.Writer(out, max_side=32, jobs=1) as w:
            for _ in range(2 * chunk):
                w.write(data, 0)
            timer = _interrupt_after(0.2, sent)
    timer.join()
    assert sent and w.closed
    assert not out.exists() or not any(out.iterdir())
    with stoker.Writer(out, max_side=32) as again:
        again.write(data, 0)
    assert len(stoker.Dataset(out)) == 1


def test_a_relative_out_stays_where_the_writer_was_made(tmp_path, monkeypatch):
    # After a chdir the writer wrote into the same relative path under the new working
    # directory: a finished dataset there was replaced, and an abort left its shards there.
    data = (SAMPLE / "caer" / "tent.jpg").read_bytes()
    (tmp_path / "a").mkdir()
    other = tmp_path / "b"
    other.mkdir()
    with stoker.Writer(other / "val") as w:
        w.write(data, 0, "b's")
    before = sorted((p.name, p.stat().st_size) for p in (other / "val").iterdir())
    monkeypatch.chdir(tmp_path / "a")
    w = stoker.Writer("val")
    assert w.out == tmp_path / "a" / "val"
    monkeypatch.chdir(other)
    w.write(data, 0, "a's")
    w.write(data, 0, "a's too")
    assert w.close()["written"] == 2
    assert sorted((p.name, p.stat().st_size) for p in (other / "val").iterdir()) == before
    assert [stoker.Dataset(tmp_path / "a" / "val").source_of(i) for i in range(2)] == [
        "a's", "a's too"]
    # An empty out names no directory, as for convert, merge and Dataset; "." is this one.
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    with pytest.raises(ValueError, match="the output path is empty"):
        stoker.Writer("")
    with pytest.raises(ValueError, match="the output path is empty"):
        stoker.convert(SAMPLE, "")
    with pytest.raises(ValueError, match="the source path is empty"):
        stoker.convert("", tmp_path / "from-nothing")
    with pytest.raises(ValueError, match="the output path is empty"):
        stoker.merge("")
    assert list(here.iterdir()) == []
    with stoker.Writer(".") as w:
        w.write(data, 0)
    assert w.out in (here, here / ".") and len(stoker.Dataset(here)) == 1


def test_parts_name_their_unnamed_samples_apart_and_labels_refuse_torch_bools(tmp_path):
    import torch

    classes, samples = _photos()
    out = tmp_path / "parts"
    for index in range(2):
        with stoker.Writer(out, classes=classes, part=index, parts=2) as w:
            for data, label, _ in samples[index::2][:2]:
                w.write(data, label)
    stoker.merge(out)
    ds = stoker.Dataset(out)
    assert [ds.source_of(i) for i in range(len(ds))] == [
        "part 0 sample 0", "part 0 sample 1", "part 1 sample 0", "part 1 sample 1"]

    with stoker.Writer(tmp_path / "bools", classes=classes) as w:
        for label in (torch.tensor(True), torch.tensor([False])):
            with pytest.raises(TypeError, match="is a bool"):
                w.write(samples[0][0], label)
        w.write(samples[0][0], torch.tensor(1))


def test_an_error_raised_by_a_temporary_writer_reaches_the_caller(tmp_path):
    # `Writer(...).write(bad)` raised ValueError as its temporary writer was freed, and
    # the "freed unclosed" warning issued with that error set turned it into SystemError.
    data = (SAMPLE / "caer" / "tent.jpg").read_bytes()
    with pytest.warns(UserWarning, match="freed unclosed"):
        with pytest.raises(ValueError, match="label 5"):
            stoker.Writer(tmp_path / "w", classes=["a"]).write(data, 5)
    assert not (tmp_path / "w").exists()
