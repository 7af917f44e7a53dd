"""stoker.convert and stoker.Dataset."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

import stoker
from conftest import REPO, SAMPLE


def test_each_record_names_the_input_it_came_from(sample_dataset, tmp_path):
    ds = stoker.Dataset(sample_dataset)
    names = [ds.source_of(i) for i in range(len(ds))]
    assert len(set(names)) == len(ds)
    for i, name in enumerate(names):
        # Stored as they are: record i's bytes are its named file's.
        assert ds[i][0] == (SAMPLE / name).read_bytes(), name
        assert ds.classes[ds[i][1]] == Path(name).parts[0]
    assert ds.source_of(-1) == names[-1]
    with pytest.raises(IndexError):
        ds.source_of(len(ds))
    # Written sample by sample (stoker.Writer): named as the samples were, by position
    # when no name was given; a skipped sample takes no record, so no name.
    out = tmp_path / "written"
    with stoker.Writer(out, classes=["a"]) as w:
        w.write(ds[0][0], 0, name="hf:beans/train/0")
        w.write(b"not an image", 0, name="broken")
        w.write(ds[1][0], 0)
        w.write(ds[2][0], 0, name="dir/ü.jpg")
    written = stoker.Dataset(out)
    assert [written.source_of(i) for i in range(len(written))] == [
        "hf:beans/train/0", "sample 2", "dir/ü.jpg"]
    assert [written[i][0] for i in range(3)] == [ds[i][0] for i in range(3)]
    # Exactly as named, as text: a pathlib.Path rewrote URLs and "./" names, which then
    # matched no metadata.
    odd = ["https://example.org/img//a.jpg", "s3://bucket/k.jpg", "./rel/x.jpg", "dir/"]
    with stoker.Writer(tmp_path / "odd", classes=["a"]) as w:
        for name in odd:
            w.write(ds[0][0], 0, name=name)
    named = stoker.Dataset(tmp_path / "odd")
    assert [named.source_of(i) for i in range(len(odd))] == odd


def test_a_source_name_that_is_not_utf8_comes_back_as_os_fsdecode_gives_it(tmp_path):
    src = os.fsencode(tmp_path / "src")
    os.makedirs(src + b"/a")
    photo = sorted(SAMPLE.rglob("*.jpg"))[0]
    with open(src + b"/a/caf\xe9.jpg", "wb") as f:
        f.write(photo.read_bytes())
    stoker.convert(src, tmp_path / "ds", progress=False)
    name = stoker.Dataset(tmp_path / "ds").source_of(0)
    assert isinstance(name, str) and os.fsencode(name) == b"a/caf\xe9.jpg"
    assert (Path(os.fsdecode(src)) / name).read_bytes() == photo.read_bytes()


def test_inspect_record_is_the_clis_report_and_sizes_a_raw_record(
        sample_dataset, tmp_path, stoker_cli):
    ds = stoker.Dataset(sample_dataset)
    for i in (0, 6, -1):
        cli = subprocess.run(
            [str(stoker_cli), "inspect", str(sample_dataset), "--record", str(i % len(ds)),
             "--json"],
            check=True, capture_output=True, text=True,
        ).stdout
        report = ds.inspect_record(i)
        assert report == json.loads(cli)
        assert report["source"] == str(ds.source_of(i)) and report["problem"] is None
    with pytest.raises(IndexError):
        ds.inspect_record(len(ds))

    # A raw record's bytes are its pixels, of the size reported.
    stoker.convert(SAMPLE, tmp_path / "raw", encoding="raw", size=(64, 48), progress=False)
    raw = stoker.Dataset(tmp_path / "raw")
    for i in range(len(raw)):
        r = raw.inspect_record(i)["record"]
        assert (r["encoding"], r["height"], r["width"], r["channels"]) == ("raw", 48, 64, 3)
        assert len(raw[i][0]) == r["payload_bytes"] == 48 * 64 * 3

    # A damaged record is reported, not raised: its source is what one wants of it.
    copy = tmp_path / "damaged"
    shutil.copytree(sample_dataset, copy)
    shard = copy / ds.inspect_record(1)["shard"]
    data = bytearray(shard.read_bytes())
    at = data.find(ds[1][0][1000:1032])
    assert at > 0
    data[at] ^= 1
    shard.write_bytes(bytes(data))
    report = stoker.Dataset(copy).inspect_record(1)
    assert report["record"]["crc_ok"] is False and "CRC" in report["problem"], report
    assert report["source"] == str(ds.source_of(1))

    # A label past a cut class list, which the loader refuses, is a problem too (it was
    # reported as sound).
    cut = tmp_path / "cut"
    shutil.copytree(sample_dataset, cut)
    manifest = json.loads((cut / "manifest.json").read_text())
    manifest["classes"] = manifest["classes"][:1]
    (cut / "manifest.json").write_text(json.dumps(manifest))
    last = stoker.Dataset(cut).inspect_record(len(ds) - 1)
    assert last["record"]["class"] is None and last["record"]["crc_ok"] is True, last
    assert last["problem"] == "label 2 is outside the class list (1 classes)", last
    assert stoker.Dataset(cut).inspect_record(0)["problem"] is None
    # Read, such a record's label was handed over as it stood, to reach a loss as a class
    # the model does not have; it is refused as the loader refuses it.
    said = f"record {len(ds) - 1}: label 2 is outside the class list (1 classes)"
    with pytest.raises(stoker.StokerError, match=re.escape(said)):
        stoker.Dataset(cut)[len(ds) - 1]
    with pytest.raises(stoker.StokerError, match=r"record \d+: label [12] is outside"):
        stoker.Dataset(cut).labels()
    assert stoker.Dataset(cut)[0][1] == 0


def test_convert_report_has_the_cli_json_keys(tmp_path, stoker_cli):
    report = stoker.convert(SAMPLE, tmp_path / "py", progress=False)
    cli = json.loads(
        subprocess.run(
            [str(stoker_cli), "convert", str(SAMPLE), str(tmp_path / "cli"), "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert set(report) == set(cli)
    for key in ("inputs", "written", "shards", "bytes", "stored", "transcoded"):
        assert report[key] == cli[key], key
    assert report["written"] == 15 and report["skipped"] == []


def test_convert_options_reach_the_converter(tmp_path):
    # Records large enough for two shards over the 64 KiB shard floor.
    report = stoker.convert(
        SAMPLE, tmp_path / "raw", encoding="raw", size=(128, 96), shards=2, progress=False
    )
    assert report["shards"] == 2
    manifest = stoker.Dataset(tmp_path / "raw").manifest
    assert manifest["encoding"] == "raw"
    assert manifest["raw_size"]["width"] == 128 and manifest["raw_size"]["height"] == 96
    with pytest.raises(ValueError, match="quality"):
        stoker.convert(SAMPLE, tmp_path / "q", quality=0, progress=False)


def test_convert_has_the_cli_options_for_layout_file_size_and_parts(tmp_path, sample_dataset):
    # layout="flat": every file of the tree in one unlabelled class.
    flat = stoker.convert(SAMPLE, tmp_path / "flat", layout="flat", progress=False)
    assert flat["written"] == 15
    assert {stoker.Dataset(tmp_path / "flat")[i][1] for i in range(15)} == {0}
    with pytest.raises(ValueError, match="layout"):
        stoker.convert(SAMPLE, tmp_path / "bad", layout="folders", progress=False)
    # max_file_size: the inputs larger than it are skipped.
    sizes = sorted(p.stat().st_size for p in SAMPLE.rglob("*.jp*g"))
    limit = sizes[len(sizes) // 2]
    small = stoker.convert(SAMPLE, tmp_path / "small", max_file_size=limit, progress=False)
    assert small["written"] == sum(s <= limit for s in sizes) < 15
    assert len(small["skipped"]) == 15 - small["written"]
    # Three parts, then merge: the records of one conversion.
    root = tmp_path / "parts"
    for i in range(3):
        stoker.convert(SAMPLE, root, part=i, parts=3, progress=False)
    with pytest.raises(ValueError, match="names no part"):
        stoker.merge(root, parts=[])
    report = stoker.merge(root)
    assert report["parts"] == 3 and report["samples"] == 15
    merged, whole = stoker.Dataset(root), stoker.Dataset(sample_dataset)
    assert [merged[i] for i in range(15)] == [whole[i] for i in range(15)]
    assert isinstance(merged.path, Path)
    with pytest.raises(ValueError, match="part"):
        stoker.convert(SAMPLE, tmp_path / "p", part=1, progress=False)
    with pytest.raises(ValueError):
        stoker.convert(SAMPLE, tmp_path / "p", part=3, parts=3, progress=False)


def test_dataset_len_classes_manifest_and_records(sample_dataset):
    ds = stoker.Dataset(sample_dataset)
    assert len(ds) == 15
    assert ds.classes == ["caer", "leptonica", "opencv"]
    assert ds.manifest["samples"] == 15
    payload, label = ds[0]
    assert isinstance(payload, bytes) and payload[:2] == b"\xff\xd8"  # a JPEG
    assert label in range(3)
    assert ds[-1] == ds[14]
    labels = [ds[i][1] for i in range(len(ds))]
    assert [labels.count(c) for c in range(3)] == [6, 3, 6]
    with pytest.raises(IndexError):
        ds[15]
    # A Dataset object and its path make the same loader.
    a = [b.indices for b in stoker.Loader(ds, 4, device="cpu", size=16)]
    b = [b.indices for b in stoker.Loader(str(sample_dataset), 4, device="cpu", size=16)]
    assert a == b


def test_ctrl_c_stops_a_conversion_and_resume_finishes_it(tmp_path, ctrl_c_raises):
    # Python's handler only sets a flag: a conversion that never looked at it ran to
    # the end before KeyboardInterrupt, however long that took.
    photos = REPO / "testdata" / "imagefolder"
    src = tmp_path / "src"
    for copy in range(2):
        shutil.copytree(photos, src / f"copy{copy}", ignore=shutil.ignore_patterns("*.tsv"))
    out = tmp_path / "ds"
    # Re-encoded to 64 px: slow enough that the conversion is far from done at 0.3 s.
    options = dict(max_side=64, jobs=2, shard_size=1 << 16, progress=False)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        stoker.convert(src, out, **options)
    timer.join()
    assert not (out / "manifest.json").exists(), "the conversion ran to its end first"
    report = stoker.convert(src, out, resume=True, **options)
    assert report["written"] + len(report["skipped"]) == report["inputs"] == 2 * 164
    assert report["resumed"] < report["written"]


def test_ctrl_c_stops_a_conversion_stuck_opening_a_list_pipe_nobody_writes(tmp_path):
    # Ctrl-C cancelled the conversion and then waited for its thread, which was blocked
    # in open() on the FIFO for good: the call never returned. Run apart: a regression
    # would hang pytest itself.
    fifo = tmp_path / "list"
    os.mkfifo(fifo)
    script = f"""
import os, signal, threading, time
import stoker
signal.signal(signal.SIGINT, signal.default_int_handler)
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
start = time.monotonic()
try:
    stoker.convert({str(SAMPLE)!r}, {str(tmp_path / "out")!r}, list={str(fifo)!r}, progress=False)
except KeyboardInterrupt:
    print("interrupted after", round(time.monotonic() - start))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "interrupted after" in run.stdout, (run.stdout, run.stderr[-2000:])
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_convert_warns_of_what_it_noted_and_refuses_to_write_nothing(tmp_path):
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "b").mkdir()
    shutil.copy(SAMPLE / "caer" / "tent.jpg", tree / "a" / "tent.jpg")
    with pytest.warns(UserWarning, match="empty folder"):
        report = stoker.convert(tree, tmp_path / "ds", progress=False)
    assert report["written"] == 1 and any("empty" in w for w in report["warnings"])
    assert stoker.Dataset(tmp_path / "ds").classes == ["a", "b"]

    # Warnings made errors (-W error) stop the conversion before anything is written.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="empty folder"):
            stoker.convert(tree, tmp_path / "strict", progress=False)
    assert not (tmp_path / "strict").exists()

    # A list whose paths are relative to another folder: nothing to write, no dataset.
    listing = tmp_path / "list.csv"
    listing.write_text("a/tent.jpg,0\n")
    with pytest.raises(stoker.StokerError, match="none of the 1 inputs"):
        stoker.convert(tmp_path, tmp_path / "none", list=listing, progress=False)
    assert not (tmp_path / "none" / "manifest.json").exists()


def test_a_class_of_non_images_and_a_missing_shard_are_said_plainly(tmp_path):
    # An earlier dataset inside the tree is a class of no images: the README promised a
    # warning, and only the skip list said it.
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    shutil.copy(SAMPLE / "caer" / "tent.jpg", tree / "a" / "tent.jpg")
    stoker.convert(tree, tree / "old", progress=False)
    with pytest.warns(UserWarning, match=r'class "old" \(label 1, 3 input\(s\)\) has no samples'):
        report = stoker.convert(tree, tmp_path / "ds", progress=False)
    assert report["empty_classes"] == ["old"] and len(report["skipped"]) == 3

    # A shard the manifest lists and the folder lacks: still a FileNotFoundError (now with
    # its errno), saying what is missing and what to run, not a bare "No such file".
    (tmp_path / "ds" / "shard-00000.lmdb").unlink()
    with pytest.raises(FileNotFoundError, match="is missing: the manifest lists it") as e:
        stoker.Dataset(tmp_path / "ds")
    assert e.value.errno == 2 and "stoker verify" in str(e.value)


def test_a_shard_cut_short_while_read_fails_its_records_not_the_process(tmp_path):
    # `cp` over a dataset in use cuts its shards short under the map: reads past the cut
    # used to kill the process with SIGBUS.
    shutil.copytree(REPO / "testdata" / "imagefolder", tmp_path / "in")
    out = tmp_path / "ds"
    stoker.convert(tmp_path / "in", out, shards=2, check=False, progress=False)
    ds = stoker.Dataset(out)
    loader = stoker.Loader(ds, 8, device="cpu", size=16, workers=1, prefetch=1, seed=3)
    batches = iter(loader)
    next(batches)
    shard = sorted(out.glob("shard-*.lmdb"))[1]
    os.truncate(shard, 8192)
    errors = []
    for i in range(len(ds)):
        try:
            ds[i]
        except stoker.StokerError as e:
            errors.append(str(e))
    # Each item checks its own shard first: its size, and whether a read of its map (here,
    # by the loader's worker) has failed. The other shard's records still read.
    cut = ds.manifest["shards"][1]["count"]
    assert len(errors) == cut and all(shard.name in e for e in errors), errors[:3]
    assert "could not be read while it was mapped" in errors[0] or "changed on disk" in errors[0]
    # The loader's readers were made before the cut: their reads past it fail instead.
    rest = list(batches)
    assert len(rest) == len(loader) - 1
    assert loader.stats()["bad_records"] > 0
    with pytest.raises(stoker.StokerError, match=shard.name):
        next(iter(loader))


def test_a_cut_shard_read_after_faulthandler_enable_is_still_an_error(tmp_path):
    # faulthandler.enable() after the dataset was opened replaced stoker's SIGBUS handler,
    # so a loader reading past the cut killed the process again ("Fatal Python error: Bus
    # error"). Run apart: a regression would kill pytest itself.
    out = tmp_path / "ds"
    stoker.convert(REPO / "testdata" / "imagefolder", out, shards=2, check=False, progress=False)
    script = f"""
import faulthandler, os
import stoker
ds = stoker.Dataset({str(out)!r})
faulthandler.enable()
loader = stoker.Loader(ds, 4, size=16, device="cpu", workers=1, prefetch=1,
                       prefetch_next_epoch=False)
for n, _ in enumerate(loader.epoch(0)):
    if n == 1:
        shard = sorted(p for p in os.listdir({str(out)!r}) if p.startswith("shard-"))[1]
        os.truncate(os.path.join({str(out)!r}, shard), 8192)
print("bad", loader.stats()["bad_records"])
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout.split()[-1]) > 0, run.stdout


@pytest.mark.parametrize(
    "replace_handler",
    [
        # Its handler ended the process: "Fatal Python error: Bus error".
        "faulthandler.enable()",
        # Its C handler returned to the faulting read, which faulted again forever.
        "signal.signal(signal.SIGBUS, lambda *a: None)",
    ],
)
def test_a_sigbus_handler_set_mid_epoch_does_not_take_shard_faults(tmp_path, replace_handler):
    # A handler installed after the epoch began (the shards opened, their readers made)
    # replaced stoker's until the next open: the loader's reads past a cut then crashed or
    # hung the process. Each `next` puts stoker's back in front before the loader's threads
    # read on; the pause lets them finish the batch they read ahead, which a handler set
    # meanwhile would still take (nothing in Python can close that window). Run apart: a
    # regression would kill or hang pytest itself.
    out = tmp_path / "ds"
    stoker.convert(REPO / "testdata" / "imagefolder", out, shards=2, check=False, progress=False)
    script = f"""
import faulthandler, os, signal, time
import stoker
out = {str(out)!r}
loader = stoker.Loader(out, 4, size=16, device="cpu", workers=1, prefetch=1,
                       prefetch_next_epoch=False, shuffle=False, crop="center")
batches = iter(loader)
next(batches)
time.sleep(2)
{replace_handler}
for shard in os.listdir(out):
    if shard.startswith("shard-"):
        os.truncate(os.path.join(out, shard), 4096)
try:
    for _ in batches:
        pass
except stoker.StokerError as e:
    print("error:", e)
print("bad", loader.stats()["bad_records"])
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert int(run.stdout.split()[-1]) > 0, run.stdout


def test_a_list_labelled_by_class_name_takes_the_classes_given(sample_dataset, tmp_path):
    train = stoker.Dataset(sample_dataset)
    lst = tmp_path / "val.csv"
    lst.write_text("path,label\ncaer/camera.jpg,caer\nopencv/data_butterfly.jpg,opencv\n")
    for i, classes in enumerate([train, str(sample_dataset), list(train.classes)]):
        out = tmp_path / f"val{i}"
        stoker.convert(SAMPLE, out, list=lst, classes=classes, check=False, progress=False)
        val = stoker.Dataset(out)
        assert val.classes == train.classes
        assert val.labels() == [train.classes.index("caer"), train.classes.index("opencv")]
    with pytest.raises(TypeError, match=r"classes\[1\] is of type int, not a class name"):
        stoker.convert(SAMPLE, tmp_path / "bad", list=lst, classes=["caer", 1])
    with pytest.raises(TypeError, match=r"classes= takes a list of class names"):
        stoker.convert(SAMPLE, tmp_path / "bad", list=lst, classes=3)
    # A tree of class folders is labelled by the names too: a validation tree that lacks
    # a class takes the train set's labels, not its own folders' numbering.
    (tmp_path / "valtree" / "opencv").mkdir(parents=True)
    shutil.copy(SAMPLE / "opencv" / "data_butterfly.jpg", tmp_path / "valtree" / "opencv")
    stoker.convert(tmp_path / "valtree", tmp_path / "vt", classes=train, check=False, progress=False)
    assert stoker.Dataset(tmp_path / "vt").labels() == [train.classes.index("opencv")]
    with pytest.raises(stoker.StokerError, match="not one of the 1 classes given"):
        stoker.convert(SAMPLE, tmp_path / "bad", classes=["a"])
    with pytest.raises(stoker.StokerError, match='class "opencv" is not one of the 2 classes'):
        stoker.convert(SAMPLE, tmp_path / "bad", list=lst, classes=["caer", "leptonica"])


def test_an_endless_iterator_of_class_names_is_refused(tmp_path):
    import itertools

    lst = tmp_path / "val.csv"
    lst.write_text("caer/camera.jpg,caer\n")
    with pytest.raises(ValueError, match="more than 1048576 names"):
        stoker.convert(SAMPLE, tmp_path / "out", list=lst, classes=itertools.repeat("a"))
