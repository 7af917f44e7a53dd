"""Numeric arguments of every entry point: a bool or another type is a `TypeError`, a
value out of range or a float that is not finite a `ValueError`, each naming its keyword.

Regression: PyO3 took `True` as the int 1 (`Loader(batch_size=True)` made batches of
one, `hflip=True` flipped every image, `rank=True` was rank 1), and a negative or huge
value raised a bare `OverflowError` ("can't convert negative int to unsigned") that did not
say which keyword it was. Every case fails while the arguments are read, before anything
is opened or written."""

import inspect
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import stoker

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data" / "sample"


def _convert(tmp_path, **kw):
    return stoker.convert(SAMPLE, tmp_path / "out", progress=False, **kw)


def _writer(tmp_path, **kw):
    return stoker.Writer(tmp_path / "out", classes=["a"], **kw)


def _loader(tmp_path, **kw):
    # Never opened: the arguments are refused first.
    return stoker.Loader(tmp_path / "no-dataset", device="cpu", **kw)


MAKERS = {"convert": _convert, "Writer": _writer, "Loader": _loader}

# The int keywords: counts (0 refused) and seeds, ranks and limits that start at 0.
COUNTS = {
    "convert": ["max_side", "quality", "jobs", "shard_size", "shards", "max_pixels", "max_file_size"],
    "Writer": ["max_side", "quality", "jobs", "shard_size", "max_pixels", "max_file_size"],
    "Loader": [
        "batch_size", "quasi_block", "size", "resize", "world_size", "prefetch", "workers",
        "pinned_memory",
    ],
}
FROM_0 = {"convert": ["seed"], "Loader": ["seed", "rank", "page_lock_limit"]}
INTS = [
    *[(maker, kw, True) for maker, kws in COUNTS.items() for kw in kws],
    *[(maker, kw, False) for maker, kws in FROM_0.items() for kw in kws],
]


def _int_cases():
    for maker, kw, counts in INTS:
        cases = [
            (True, TypeError, rf"^{kw}=True is a bool: {kw}= takes an int"),
            (1.5, TypeError, rf"^{kw}= takes an int, not float"),
            (math.nan, TypeError, rf"^{kw}= takes an int, not float"),
            ("3", TypeError, rf"^{kw}= takes an int, not str"),
            (-1, ValueError, rf"^{kw}=-1 is a negative int: want "),
            (2**64, ValueError, rf"^{kw}={2**64} is too large: want "),
            # Past 4300 digits `str` of an int raises: the message goes without the value.
            (10**5000, ValueError, rf"^{kw}= is too large: want "),
        ]
        if counts:
            cases.append((0, ValueError, rf"^{kw}=0 is too small: want (at least )?1"))
        for value, error, says in cases:
            label = "10**5000" if value == 10**5000 else repr(value)
            yield pytest.param(maker, kw, value, error, says, id=f"{maker}-{kw}={label}")


@pytest.mark.parametrize("maker, kw, value, error, says", list(_int_cases()))
def test_int_arguments_refuse_bools_other_types_and_values_out_of_range(
    tmp_path, maker, kw, value, error, says
):
    with pytest.raises(error, match=says):
        MAKERS[maker](tmp_path, **{kw: value})
    assert not (tmp_path / "out").exists()


def _float_cases():
    for kw in ("hflip", "gpu_cpu_share"):
        for value, error, says in [
            (True, TypeError, rf"^{kw}=True is a bool: {kw}= takes a float"),
            ("0.5", TypeError, rf"^{kw}= takes a float, not str"),
            (math.nan, ValueError, rf"^{kw}=nan: want "),
            (math.inf, ValueError, rf"^{kw}=inf: want "),
            (-0.5, ValueError, rf"^{kw}=-0.5: want "),
            (1.5, ValueError, rf"^{kw}=1.5: want "),
            (10**5000, ValueError, rf"^{kw}= is too large: want "),
        ]:
            label = "10**5000" if value == 10**5000 else repr(value)
            yield pytest.param(kw, value, error, says, id=f"{kw}={label}")
    # Tuples: each item is named by its place.
    for kw, size in (("scale", 2), ("ratio", 2), ("mean", 3), ("std", 3)):
        ok = (0.5,) * size
        for value, error, says in [
            ((True,) + ok[1:], TypeError, rf"^{kw}\[0\]=True is a bool"),
            (ok[:-1] + (math.nan,), ValueError, rf"^{kw}\[{size - 1}\]=nan: want "),
            (ok[:-1] + (math.inf,), ValueError, rf"^{kw}\[{size - 1}\]=inf: want "),
            (ok[:-1] + ("x",), TypeError, rf"^{kw}\[{size - 1}\]= takes a float, not str"),
            ("ab", TypeError, rf"^{kw}= takes a tuple of {size} numbers, not str"),
            (ok[1:], ValueError, rf"^{kw}= takes {size} numbers, not {size - 1}"),
        ]:
            yield pytest.param(kw, value, error, says, id=f"{kw}={value!r}")
    for kw, bad in (("scale", 0.0), ("scale", 1.5), ("ratio", 0.0), ("ratio", -1.0), ("std", 0.0)):
        value = (bad, 0.5, 0.5) if kw == "std" else (bad, 0.5)
        yield pytest.param(kw, value, ValueError, rf"^{kw}\[0\]={bad}: want ", id=f"{kw}={value!r}")


@pytest.mark.parametrize("kw, value, error, says", list(_float_cases()))
def test_float_arguments_refuse_bools_and_values_that_are_not_finite_or_in_range(
    tmp_path, kw, value, error, says
):
    kws = {kw: value}
    if kw in ("mean", "std"):
        # Given together, or the pair is refused first.
        kws = {"mean": (0.5,) * 3, "std": (0.5,) * 3, kw: value}
    with pytest.raises(error, match=says):
        _loader(tmp_path, **kws)


@pytest.mark.parametrize("maker", ["convert", "Writer"])
@pytest.mark.parametrize(
    "value, error, says",
    [
        ((True, 8), TypeError, r"^size\[0\]=True is a bool"),
        ((8, -1), ValueError, r"^size\[1\]=-1 is a negative int: want 1 to 65535"),
        ((8, 2**64), ValueError, rf"^size\[1\]={2**64} is too large: want 1 to 65535"),
        ((8, 0), ValueError, r"^size\[1\]=0 is too small: want 1 to 65535"),
        ((8, 8.0), TypeError, r"^size\[1\]= takes an int, not float"),
        ((8,), ValueError, r"^size= takes 2 numbers, not 1"),
    ],    ids=["bool", "negative", "2**64", "0", "float", "one number"],
)
def test_the_raw_size_pair_is_two_ints_in_range(tmp_path, maker, value, error, says):
    with pytest.raises(error, match=says):
        MAKERS[maker](tmp_path, size=value, encoding="raw")


@pytest.mark.parametrize("call", ["set_epoch", "epoch", "sampler.set_epoch"])
@pytest.mark.parametrize(
    "value, error, says",
    [
        (True, TypeError, r"^epoch=True is a bool: epoch= takes an int"),
        (1.0, TypeError, r"^epoch= takes an int, not float"),
        (-1, ValueError, r"^epoch=-1 is a negative int: want at least 0"),
        (2**64, ValueError, rf"^epoch={2**64} is too large: want at most {2**64 - 1}"),
    ],    ids=["bool", "float", "negative", "2**64"],
)
def test_epoch_numbers_are_ints_from_0(sample_dataset, call, value, error, says):
    loader = stoker.Loader(sample_dataset, 4, device="cpu")
    target = loader.sampler if call.startswith("sampler.") else loader
    with pytest.raises(error, match=says):
        getattr(target, call.split(".")[-1])(value)
    loader.close()


def test_numpy_numbers_ints_for_floats_and_none_for_optionals_are_taken(sample_dataset, tmp_path):
    loader = stoker.Loader(
        sample_dataset, np.int64(4), seed=np.uint64(2**64 - 1), size=np.int32(16),
        hflip=1, scale=[np.float32(0.5), 1], ratio=None, workers=None,
        mean=np.array(stoker.IMAGENET_MEAN), std=stoker.IMAGENET_STD, device="cpu",
    )
    assert np.from_dlpack(next(iter(loader)).images).shape == (4, 3, 16, 16)
    loader.set_epoch(np.int64(3))
    loader.close()
    w = _writer(tmp_path, quality=np.uint8(80), jobs=np.int16(1), max_side=None)
    w.abort()


def test_torch_tensors_for_mean_and_std_and_an_int_device_as_torch_reads_them(sample_dataset):
    # mean=torch.tensor(...) was a TypeError (a tensor is no sequence to the C API), while
    # indices= took one; device=0 was refused, where torch.device(0) is cuda:0.
    import torch

    def first(**kw):
        with stoker.Loader(sample_dataset, 4, size=16, seed=1, device="cpu", **kw) as loader:
            return np.from_dlpack(next(iter(loader)).images).copy()

    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    want = first(mean=mean, std=std)
    assert np.array_equal(first(mean=torch.tensor(mean), std=torch.tensor(std)), want)
    assert np.array_equal(first(mean=torch.tensor(mean, dtype=torch.float64), std=std), want)
    with pytest.raises(ValueError, match="mean= takes 3 numbers, not 2"):
        first(mean=torch.tensor((0.4, 0.5)))
    with pytest.raises(TypeError, match="mean= takes a tuple of 3 numbers, not dict"):
        first(mean={0: 0.4, 1: 0.5, 2: 0.6})

    # Here, without a GPU, as "cuda:0" fails; a bool and a negative number are refused.
    with pytest.raises(stoker.StokerError) as named:
        stoker.Loader(sample_dataset, 4, device="cuda:0")
    with pytest.raises(stoker.StokerError) as numbered:
        stoker.Loader(sample_dataset, 4, device=0)
    assert str(numbered.value) == str(named.value)
    with pytest.raises(TypeError, match="device=True is a bool"):
        stoker.Loader(sample_dataset, 4, device=True)
    with pytest.raises(ValueError, match="device=-1"):
        stoker.Loader(sample_dataset, 4, device=-1)


def test_signatures_keep_their_defaults():
    """The checks are `from_py_with` extractors: the defaults `help()` shows stay."""
    loader = inspect.signature(stoker.Loader).parameters
    defaults = (loader["batch_size"].default, loader["seed"].default, loader["size"].default)
    assert defaults == (256, 0, 224)
    assert loader["hflip"].default == 0.0 and loader["rank"].default is None
    convert = inspect.signature(stoker.convert).parameters
    assert (convert["quality"].default, convert["max_pixels"].default) == (90, 100_000_000)


@pytest.mark.parametrize(
    "key", ["seed", "epoch", "position", "batch_size", "world_size", "samples", "draws"]
)
@pytest.mark.parametrize(
    "value, error, says",
    [
        (True, TypeError, r'^state\["KEY"\]=True is a bool: state\["KEY"\]= takes an int'),
        (1.5, TypeError, r'^state\["KEY"\]= takes an int, not float'),
        (-1, ValueError, r'^state\["KEY"\]=-1 is a negative int: want at least 0'),
    ],    ids=["bool", "float", "negative"],
)
def test_the_numbers_of_a_state_dict_are_ints_from_0(sample_dataset, key, value, error, says):
    """`True` was epoch 1 (or position 1) to `load_state_dict`, -1 a bare `OverflowError`."""
    loader = stoker.Loader(sample_dataset, 4, device="cpu")
    state = loader.state_dict()
    with pytest.raises(error, match=says.replace("KEY", key)):
        loader.load_state_dict({**state, key: value})
    assert loader.state_dict() == state
    loader.close()


def test_indices_are_taken_as_a_list_takes_them(sample_dataset):
    """`Dataset[i]`, `labels[i]` and `batch[i]`: a bool is an int as for a list, an int past
    the index range an `IndexError` (PyO3 alone raised a bare `OverflowError`), another
    type a `TypeError`."""
    ds = stoker.Dataset(sample_dataset)
    batch = next(iter(stoker.Loader(sample_dataset, 4, device="cpu", size=32)))
    for seq, n in [(ds, 15), (batch.labels, 4), (batch, 2)]:
        assert len(seq) == n
        assert seq[True] == seq[1] and seq[np.int64(-1)] == seq[n - 1]
        for huge in (2**63, -(2**63) - 1, 2**64, 10**5000):
            with pytest.raises(IndexError):
                seq[huge]
        with pytest.raises(IndexError):
            seq[n]
        for wrong in (1.0, "1", None):
            with pytest.raises(TypeError, match="^indices must be integers, not "):
                seq[wrong]


# Run in a child: before the fix these aborted the process (an allocation of as many
# slots as the sequence claims) or read for ever (an object without an end).
_SEQUENCES = r'''
import sys, stoker
kind, arg, where = sys.argv[1:]

class Endless:
    """Items for ever and no length: `__getitem__` never raises IndexError."""
    def __getitem__(self, i):
        return 0.5

value = range(10**12) if kind == "long" else Endless()
try:
    if arg == "classes":
        stoker.Writer(where, classes=value)
    elif arg == "parts":
        stoker.merge(where, parts=value)
    elif arg == "size":  # the raw size pair, the Writer's
        stoker.Writer(where, encoding="raw", size=value)
    else:
        stoker.Loader(where, device="cpu", **{arg: value})
except (TypeError, ValueError) as e:
    print(type(e).__name__, e)
'''


@pytest.mark.parametrize("kind", ["long", "endless"])
@pytest.mark.parametrize("arg", ["scale", "ratio", "mean", "std", "size", "classes", "parts"])
def test_long_or_endless_sequences_are_refused_without_reading_them(tmp_path, kind, arg):
    run = subprocess.run(
        [sys.executable, "-c", _SEQUENCES, kind, arg, str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr
    if kind == "endless":
        assert run.stdout.startswith(f"TypeError {arg}= takes "), run.stdout
    elif arg in ("classes", "parts"):
        assert run.stdout.startswith(f"ValueError {arg}= has 1000000000000 items: at most"), run.stdout
    else:
        assert run.stdout.startswith(f"ValueError {arg}= takes "), run.stdout
        assert "not 1000000000000" in run.stdout, run.stdout


def test_short_lazy_sequences_of_the_wrong_items_stop_at_the_first(tmp_path):
    with pytest.raises(TypeError, match=r"^classes\[0\]= takes a str, not int"):
        stoker.Writer(tmp_path / "out", classes=range(8 * 10**6))
    with pytest.raises(TypeError, match=r"^parts\[0\]= takes a path, not int"):
        stoker.merge(tmp_path / "out", parts=range(99_999))
    with pytest.raises(TypeError, match=r"^classes= takes a list of str, not str"):
        stoker.Writer(tmp_path / "out", classes="abc")


class _OnlyIndex:
    """An int by `__index__` alone, as `operator.index` takes one."""

    def __init__(self, n):
        self.n = n

    def __index__(self):
        return self.n


def test_index_only_ints_are_taken_and_numpy_bools_are_bools(sample_dataset):
    loader = stoker.Loader(sample_dataset, _OnlyIndex(4), size=_OnlyIndex(16), device="cpu")
    assert np.from_dlpack(next(iter(loader)).images).shape == (4, 3, 16, 16)
    loader.close()
    with pytest.raises(ValueError, match=r"^batch_size=.* is a negative int"):
        stoker.Loader(sample_dataset, _OnlyIndex(-4), device="cpu")
    with pytest.raises(TypeError, match=r"^hflip=True is a bool: hflip= takes a float"):
        stoker.Loader(sample_dataset, 4, hflip=np.True_, device="cpu")
    with pytest.raises(TypeError, match=r"^mean\[0\]=True is a bool"):
        stoker.Loader(sample_dataset, 4, mean=(np.True_, 0.5, 0.5), device="cpu")
    with pytest.raises(TypeError, match=r"^batch_size=True is a bool"):
        stoker.Loader(sample_dataset, np.True_, device="cpu")


def test_option_errors_name_the_python_keyword_not_only_the_cli_flag(tmp_path):
    # They named only `--size WxH` and "512M": a Python caller who wrote that got a
    # TypeError next.
    with pytest.raises(ValueError, match=r"Python size=\(W, H\)"):
        _convert(tmp_path, encoding="raw")
    with pytest.raises(ValueError, match=r"Python size=\(W, H\)"):
        _writer(tmp_path, encoding="raw")
    with pytest.raises(ValueError, match=r"Python shard_size= takes an int, e.g. 512 << 20"):
        _convert(tmp_path, shard_size=1000)
    with pytest.raises(ValueError, match=r"Python size=\) applies to raw encoding only"):
        _convert(tmp_path, size=(8, 8))
    with pytest.warns(UserWarning, match=r"--max-side \(Python max_side=\) applies to jpeg"):
        _convert(tmp_path, encoding="raw", size=(8, 8), max_side=100)
    # Raw records are pixels: a quality is of no use there, as a decode check is not.
    with pytest.warns(UserWarning, match=r"--quality \(Python quality=\) applies to jpeg"):
        stoker.convert(SAMPLE, tmp_path / "q", encoding="raw", size=(8, 8), quality=50, progress=False)
    # The CLI refuses the pair; Python dropped shard_size without a word.
    with pytest.raises(ValueError, match=r"shard_size= and shards= both say how to cut"):
        stoker.convert(SAMPLE, tmp_path / "s", shard_size=1 << 20, shards=2, progress=False)
    assert not (tmp_path / "s").exists()


def test_a_manifest_file_given_as_a_dataset_names_its_directory(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="it is the manifest file itself: give the dataset's directory"):
        stoker.Dataset(tmp_path / "manifest.json")
