"""Paths as `open()` takes them on Linux: a str, `bytes` or an `os.PathLike` whose
`__fspath__` gives either, wherever a path is taken (`convert`'s `src`, `out` and `list`,
`merge`'s `out` and `parts`, `Writer`, `Dataset`, `Loader`), including bytes that are not
UTF-8, the name of a directory that `os.listdir(b".")` lists as it is.

Regression: PyO3's path extraction refused bytes ("'bytes' object is not an instance of
'str'", naming the argument only in `__notes__`), so a dataset in a directory whose name
is not UTF-8 could be opened only through `os.fsdecode`."""

import os
import pickle
import sys
from pathlib import Path

import pytest

import stoker

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data" / "sample"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix file names are bytes")


class BytesPath:
    """An `os.PathLike` whose path is bytes (as `os.DirEntry` of a bytes scan is)."""

    def __init__(self, path: bytes):
        self.path = path

    def __fspath__(self) -> bytes:
        return self.path


@pytest.fixture
def root(tmp_path) -> bytes:
    """The test's directory, as bytes, with a non-UTF-8 directory in it."""
    root = os.fsencode(tmp_path) + b"/in-\xff"
    os.mkdir(root)
    return root


def test_a_dataset_in_a_non_utf8_directory_is_converted_opened_loaded_and_pickled(root):
    out = root + b"/ds-\xff"
    report = stoker.convert(os.fsencode(SAMPLE), out, progress=False)
    assert report["written"] == 15
    assert os.path.isfile(out + b"/manifest.json")
    ds = stoker.Dataset(out)
    assert len(ds) == 15
    assert os.fsencode(ds.path) == out
    assert os.fsencode(stoker.Dataset(BytesPath(out)).path) == out
    # The same directory through `os.fsdecode`'s str, and through a pickle.
    assert len(stoker.Dataset(os.fsdecode(out))) == 15
    assert os.fsencode(pickle.loads(pickle.dumps(ds)).path) == out
    with stoker.Loader(BytesPath(out), 5, size=16, device="cpu") as loader:
        assert sorted(i for b in loader for i in b.indices) == list(range(15))
    with stoker.Loader(out, 5, size=16, device="cpu") as loader:
        assert len(loader) == 3


def test_convert_takes_bytes_for_its_source_and_list(root):
    src = root + b"/photos-\xfe"
    os.mkdir(src)
    os.mkdir(src + b"/a")
    photo = sorted(SAMPLE.rglob("*.jpg"))[0]
    # A list file is UTF-8 text: the file it names is, the folders above it need not be.
    with open(src + "/a/été.jpg".encode(), "wb") as f:
        f.write(photo.read_bytes())
    listing = root + b"/list-\xfd.csv"
    with open(listing, "wb") as f:
        f.write("a/été.jpg,0\n".encode())
    report = stoker.convert(BytesPath(src), root + b"/ds", list=BytesPath(listing), progress=False)
    assert report["written"] == 1
    assert stoker.Dataset(root + b"/ds")[0][1] == 0


def test_writer_and_merge_take_bytes(root):
    # A photo per part: parts with the same records are refused as a writing not split.
    photos = sorted(SAMPLE.rglob("*.jpg"))[:2]
    out = root + b"/parts-\xff"
    for part in range(2):
        with stoker.Writer(BytesPath(out), classes=["a"], part=part, parts=2) as w:
            w.write(photos[part].read_bytes(), 0, "one")
        assert os.path.dirname(os.fsencode(w.out)) == out
    parts = sorted(out + b"/" + name for name in os.listdir(out))
    report = stoker.merge(out, parts=[parts[0], BytesPath(parts[1])])
    assert (report["parts"], report["samples"]) == (2, 2)
    assert len(stoker.Dataset(out)) == 2


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda bad: stoker.convert(bad, b"/nonexistent-out", progress=False), "src"),
        (lambda bad: stoker.merge(bad), "out"),
        (lambda bad: stoker.merge(b"/nonexistent-out", parts=[bad]), r"parts\[0\]"),
        (lambda bad: stoker.Writer(bad), "out"),
        (lambda bad: stoker.Dataset(bad), "path"),
        (lambda bad: stoker.verify(bad), "path"),
        (lambda bad: stoker.Loader(bad, device="cpu"), "data"),
    ],
    ids=["convert", "merge-out", "merge-parts", "Writer", "Dataset", "verify", "Loader"],
)
def test_bytes_with_a_nul_byte_are_a_value_error_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name}=.*a path cannot hold a NUL byte"):
        call(b"/tmp/a\x00b")
    with pytest.raises(ValueError, match=rf"^{name}=.*a path cannot hold a NUL byte"):
        call(BytesPath(b"/tmp/a\x00b"))


def test_other_types_are_still_a_type_error_naming_the_argument(tmp_path):
    with pytest.raises(TypeError, match=r"^path= takes a path, not int"):
        stoker.Dataset(5)
    with pytest.raises(TypeError, match=r"^out= takes a path, not bytearray"):
        stoker.Writer(bytearray(b"/tmp/x"))
    with pytest.raises(TypeError, match=r"data: want a dataset path or a stoker.Dataset"):
        stoker.Loader(5, device="cpu")


def test_an_error_inside_a_users_fspath_is_kept():
    # Rewritten as "takes a path, not Bad", the user's own message was lost.
    class Bad:
        def __fspath__(self):
            raise TypeError("inner bug")

    class Returns5:
        def __fspath__(self):
            return 5

    with pytest.raises(TypeError, match=r"inner bug"):
        stoker.Dataset(Bad())
    # os.fspath looks on the type: an instance's own attribute makes no path.
    class Plain:
        pass

    not_a_path = Plain()
    not_a_path.__fspath__ = lambda: "/tmp"
    with pytest.raises(TypeError, match=r"^path= takes a path, not Plain"):
        stoker.Dataset(not_a_path)
    with pytest.raises(TypeError, match=r"Returns5\.__fspath__\(\) to return str or bytes, not int"):
        stoker.Dataset(Returns5())
    # The Loader, which also takes a Dataset, rewrote every TypeError as "want a dataset
    # path or a stoker.Dataset".
    with pytest.raises(TypeError, match=r"inner bug"):
        stoker.Loader(Bad(), 4)
    with pytest.raises(TypeError, match=r"Returns5\.__fspath__\(\) to return str or bytes, not int"):
        stoker.Loader(Returns5(), 4)
    with pytest.raises(TypeError, match=r"^data: want a dataset path or a stoker\.Dataset, not .*Plain"):
        stoker.Loader(not_a_path, 4)
