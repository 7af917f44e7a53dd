"""stoker.convert and stoker.Dataset."""

import json
import subprocess

import pytest

import stoker
from conftest import SAMPLE


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
    report = stoker.convert(
        SAMPLE, tmp_path / "raw", encoding="raw", size=(16, 12), shards=2, progress=False
    )
    assert report["shards"] == 2
    manifest = stoker.Dataset(tmp_path / "raw").manifest
    assert manifest["encoding"] == "raw"
    assert manifest["raw_size"]["width"] == 16 and manifest["raw_size"]["height"] == 12
    with pytest.raises(ValueError, match="quality"):
        stoker.convert(SAMPLE, tmp_path / "q", quality=0, progress=False)


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
