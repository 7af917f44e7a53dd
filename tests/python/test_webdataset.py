"""`stoker.convert(src, out, layout="webdataset")`: WebDataset tar shards written by
Python's own `tarfile` (PAX and GNU headers, names over 100 bytes) convert to the records
of the same photos converted from their folder; a shard cut short is skipped by name and
the samples before the cut are kept."""

import io
import tarfile

import pytest

import stoker
from conftest import SAMPLE


def _write_shard(path, samples, fmt, prefix=""):
    with tarfile.open(path, "w", format=fmt) as tar:
        for key, members in samples:
            for ext, data in members:
                info = tarfile.TarInfo(f"{prefix}{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def _sample_shards(shards):
    """The 15 sample photos as two shards, each photo `{class}/{stem}.jpg` with its
    folder's label in `.cls`; returns the shards' paths."""
    classes = sorted(p.name for p in SAMPLE.iterdir() if p.is_dir())
    samples = []
    for label, c in enumerate(classes):
        for f in sorted((SAMPLE / c).iterdir()):
            samples.append((f"{c}/{f.stem}", [("jpg", f.read_bytes()), ("cls", b"%d\n" % label)]))
    shards.mkdir()
    first, second = shards / "train-000.tar", shards / "train-001.tar"
    # Names over 100 bytes: a PAX `path` record in one, a GNU long-name member in the other.
    _write_shard(first, samples[:7], tarfile.PAX_FORMAT, prefix="p" * 110 + "/")
    _write_shard(second, samples[7:], tarfile.GNU_FORMAT, prefix="g" * 110 + "/")
    return first, second


def test_webdataset_shards_convert_to_the_records_of_the_sample_folder(tmp_path, sample_dataset):
    shards = tmp_path / "shards"
    _, second = _sample_shards(shards)
    report = stoker.convert(shards, tmp_path / "ds", layout="webdataset", progress=False)
    assert report["webdataset"] and report["written"] == 15, report["skipped"]
    ds, folder = stoker.Dataset(tmp_path / "ds"), stoker.Dataset(sample_dataset)
    assert [ds[i] for i in range(15)] == [folder[i] for i in range(15)]
    assert ds.classes == ["0", "1", "2"]
    assert ds.manifest["provenance"]["flags"]["order"] == "webdataset"

    # Cut inside the third member of the second shard: its first sample stays.
    with tarfile.open(second) as tar:
        cut = tar.getmembers()[2].offset_data + 10
    second.write_bytes(second.read_bytes()[:cut])
    report = stoker.convert(shards, tmp_path / "cut", layout="webdataset", progress=False)
    assert report["written"] == 8
    [skipped] = report["skipped"]
    assert skipped["path"] == str(second)
    assert skipped["reason"].startswith("damaged tar at byte") and "cut short" in skipped["reason"]


def test_webdataset_layout_is_spelled_out_when_wrong(tmp_path):
    with pytest.raises(ValueError, match="webdataset"):
        stoker.convert(SAMPLE, tmp_path / "bad", layout="wds", progress=False)
