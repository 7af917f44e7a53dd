"""Arguments that are text or flags (class names, a sample's name, the manifest's source,
the state dict's `order`, `dataset` and `drop_last`): another type is a `TypeError`, a str
that cannot be UTF-8 (a lone surrogate, as `os.fsdecode` makes of undecodable bytes) a
`ValueError`, each naming its argument; so is a path holding a NUL byte, as Python's own
file functions refuse it.

Regression: PyO3 alone said "'int' object is not an instance of 'str'" or a bare
`UnicodeEncodeError` without the argument's name, and for a class name with a surrogate
"classes[0]= takes a str, not str"; a path with a NUL was a `stoker.StokerError` from the
operating system's refusal, whose message showed the NUL as nothing."""

import inspect
from pathlib import Path

import numpy as np
import pytest

import stoker

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data" / "sample"

SURROGATE = "caf\udce9"  # os.fsdecode(b"caf\xe9") on a UTF-8 system


@pytest.mark.parametrize(
    "kw, error, says",
    [
        ({"classes": ["a", SURROGATE]}, ValueError, r"^classes\[1\]='caf\\udce9' is not UTF-8 text"),
        ({"classes": ["a", 5]}, TypeError, r"^classes\[1\]= takes a str, not int"),
        ({"source": SURROGATE}, ValueError, r"^source='caf\\udce9' is not UTF-8 text"),
        ({"source": b"hf:x"}, TypeError, r"^source= takes a str, not bytes"),
    ],
    ids=["class-surrogate", "class-int", "source-surrogate", "source-bytes"],
)
def test_writer_text_arguments_name_themselves(tmp_path, kw, error, says):
    kw.setdefault("classes", ["a"])
    with pytest.raises(error, match=says):
        stoker.Writer(tmp_path / "out", **kw)
    assert not (tmp_path / "out").exists()


def test_a_samples_name_is_a_str_named_by_its_keyword(tmp_path, sample_dataset):
    image, _ = stoker.Dataset(sample_dataset)[0]
    with stoker.Writer(tmp_path / "out", classes=["a"]) as w:
        with pytest.raises(TypeError, match=r"^name= takes a str, not int"):
            w.write(image, 0, 5)
        with pytest.raises(ValueError, match=r"^name='caf\\udce9' is not UTF-8 text"):
            w.write(image, 0, SURROGATE)
        # Refused before it was taken: the writer goes on.
        w.write(image, 0, "kept")
    assert w.report["written"] == 1


@pytest.mark.parametrize(
    "key, value, error, says",
    [
        ("drop_last", "no", TypeError, r'^state\["drop_last"\]= takes a bool, not str'),
        ("drop_last", 1, TypeError, r'^state\["drop_last"\]= takes a bool, not int'),
        ("drop_partial_batch", "no", TypeError, r'^state\["drop_partial_batch"\]= takes a bool, not str'),
        ("order", 5, TypeError, r'^state\["order"\]= takes a str, not int'),
        ("order", b"global", TypeError, r'^state\["order"\]= takes a str, not bytes'),
        ("dataset", [], TypeError, r'^state\["dataset"\]= takes a str, not list'),
        ("dataset", SURROGATE, ValueError, r'^state\["dataset"\]=.* is not UTF-8 text'),
    ],
)
def test_the_text_and_flags_of_a_state_dict_name_their_key(sample_dataset, key, value, error, says):
    loader = stoker.Loader(sample_dataset, 4, device="cpu")
    state = loader.state_dict()
    with pytest.raises(error, match=says):
        loader.load_state_dict({**state, key: value})
    assert loader.state_dict() == state
    loader.close()


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda t, bad: stoker.convert(bad, t / "out", progress=False), "src"),
        (lambda t, bad: stoker.convert(SAMPLE, bad, progress=False), "out"),
        (lambda t, bad: stoker.convert(SAMPLE, t / "out", list=bad, progress=False), "list"),
        (lambda t, bad: stoker.merge(bad), "out"),
        (lambda t, bad: stoker.merge(t / "out", parts=[t, bad]), r"parts\[1\]"),
        (lambda t, bad: stoker.Writer(bad), "out"),
        (lambda t, bad: stoker.Dataset(bad), "path"),
        (lambda t, bad: stoker.verify(bad), "path"),
        (lambda t, bad: stoker.Loader(bad, device="cpu"), "data"),
    ],
    ids=["convert-src", "convert-out", "convert-list", "merge-out", "merge-parts", "Writer",
         "Dataset", "verify", "Loader"],
)
def test_a_path_with_a_nul_byte_is_a_value_error_naming_it(tmp_path, call, name):
    bad = str(tmp_path / "a\x00b")
    with pytest.raises(ValueError, match=rf"^{name}=.*a path cannot hold a NUL byte"):
        call(tmp_path, bad)
    assert not (tmp_path / "out").exists()


def _convert(tmp_path, **kw):
    return stoker.convert(SAMPLE, tmp_path / "out", progress=kw.pop("progress", False), **kw)


def _writer(tmp_path, **kw):
    return stoker.Writer(tmp_path / "out", classes=["a"], **kw)


def _loader(tmp_path, **kw):
    # Never opened: the arguments are refused first.
    return stoker.Loader(tmp_path / "no-dataset", device="cpu", **kw)


MAKERS = {"convert": _convert, "Writer": _writer, "Loader": _loader}


@pytest.mark.parametrize(
    "maker, key, value, error, says",
    [
        ("convert", "encoding", 5, TypeError, r"^encoding= takes a str, not int"),
        ("convert", "encoding", "png", ValueError, r'^encoding="png": want "jpeg" or "raw"'),
        ("convert", "resize", b"stretch", TypeError, r"^resize= takes a str, not bytes"),
        ("convert", "layout", 3, TypeError, r"^layout= takes a str, not int"),
        ("convert", "layout", "grid", ValueError,
         r'^layout="grid": want "auto", "classes", "flat" or "webdataset"'),
        ("convert", "strict", "yes", TypeError, r"^strict= takes a bool, not str"),
        ("convert", "resume", 1, TypeError, r"^resume= takes a bool, not int"),
        ("convert", "gpu_friendly", None, TypeError, r"^gpu_friendly= takes a bool, not NoneType"),
        ("convert", "check", 0, TypeError, r"^check= takes a bool, not int"),
        ("convert", "shuffle", "no", TypeError, r"^shuffle= takes a bool, not str"),
        ("convert", "progress", 1, TypeError, r"^progress= takes a bool, not int"),
        ("Writer", "encoding", 5, TypeError, r"^encoding= takes a str, not int"),
        ("Writer", "resize", 3, TypeError, r"^resize= takes a str, not int"),
        ("Writer", "resize", SURROGATE, ValueError, r"^resize='caf\\udce9' is not UTF-8 text"),
        ("Writer", "strict", "yes", TypeError, r"^strict= takes a bool, not str"),
        ("Writer", "gpu_friendly", 1, TypeError, r"^gpu_friendly= takes a bool, not int"),
        ("Writer", "check", [], TypeError, r"^check= takes a bool, not list"),
        ("Loader", "crop", 5, TypeError, r"^crop= takes a str, not int"),
        ("Loader", "crop", "middle", ValueError, r'^crop="middle": want "random" or "center"'),
        ("Loader", "on_error", 1, TypeError, r"^on_error= takes a str, not int"),
        ("Loader", "gpu_waits", 2, TypeError, r"^gpu_waits= takes a str, not int"),
        ("Loader", "layout", 3, TypeError, r"^layout= takes a str, not int"),
        ("Loader", "drop_last", "no", TypeError, r"^drop_last= takes a bool, not str"),
        ("Loader", "prefetch_next_epoch", 1, TypeError,
         r"^prefetch_next_epoch= takes a bool, not int"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,
)
def test_str_and_bool_keywords_name_themselves_in_the_message(tmp_path, maker, key, value, error, says):
    """PyO3 alone said "'int' object is not an instance of 'str'", naming the keyword only
    in the exception's `__notes__`, which a log line or `str(e)` does not show."""
    with pytest.raises(error, match=says):
        MAKERS[maker](tmp_path, **{key: value})
    assert not (tmp_path / "out").exists()


def test_a_device_or_dtype_that_is_no_utf8_is_named(sample_dataset):
    # They raised a bare UnicodeEncodeError, naming no keyword.
    for key in ("device", "dtype"):
        with pytest.raises(ValueError, match=rf"^{key}='caf\\udce9' is not UTF-8 text"):
            stoker.Loader(sample_dataset, 2, **{key: SURROGATE})


def test_str_and_bool_keywords_keep_their_defaults_and_take_their_values(tmp_path, sample_dataset):
    convert = inspect.signature(stoker.convert).parameters
    assert [convert[k].default for k in ("encoding", "resize", "layout", "strict", "progress")] == [
        "jpeg", "shorter-side", "auto", False, None,
    ]
    loader = inspect.signature(stoker.Loader).parameters
    assert [loader[k].default for k in ("crop", "on_error", "gpu_waits", "drop_last", "layout")] == [
        "random", "replace", "auto", False, None,
    ]
    stoker.Loader(
        sample_dataset, 4, crop="center", on_error="raise", gpu_waits="spin", drop_last=True,
        prefetch_next_epoch=np.bool_(False), layout="nhwc", dtype="uint8", device="cpu",
    ).close()
    report = stoker.convert(
        SAMPLE, tmp_path / "out", encoding="raw", size=(8, 8), resize="stretch", layout="classes",
        strict=True, check=False, shuffle=True, progress=False,
    )
    assert report["written"] == 15


def test_progress_true_writes_lines_where_stderr_is_no_terminal(tmp_path, capfd):
    # Regression: progress=True drew an indicatif bar, which hides itself off a terminal,
    # so a job's log file got nothing although progress was asked for.
    stoker.convert(SAMPLE, tmp_path / "asked", progress=True)
    assert "progress: 0/15 images (0.0%)" in capfd.readouterr().err
    for progress in (None, False):
        stoker.convert(SAMPLE, tmp_path / f"{progress}", progress=progress)
        assert "progress:" not in capfd.readouterr().err
