"""`stream=` of `Images.__dlpack__` and `Labels.__dlpack__`, as the Python array API
standard has it: `None`, or an int of at least -1 (-1: no synchronization; 1 and 2: CUDA's
default streams; above 2: a stream handle), 0 being disallowed as ambiguous. Another type
is a `TypeError` (as PyTorch's `__dlpack__` raises), any other int a `ValueError` naming
`stream=`, for host and device batches alike. Host batches have no stream: they take only
`None` ("on CPU ... only None is accepted", the standard) and -1 (as PyTorch's CPU tensors
do); another valid stream is a `BufferError`, as NumPy raises.

Regression: `stream=2**70` raised a bare `OverflowError` that did not name the argument,
a str or a float one of PyO3's `TypeError`s naming it only in `__notes__`, and host batches
took `stream=0` and `stream=-5` silently."""

import pytest

import stoker

BAD = [
    (2**70, ValueError, r"^stream=1180591620717411303424 is too large: a stream handle is at most 2\*\*63 - 1"),
    (2**63, ValueError, r"^stream=9223372036854775808 is too large"),
    (-2, ValueError, r"^stream=-2 is a negative int: want None, -1 \(no synchronization\)"),
    (-(2**70), ValueError, r"^stream=-1180591620717411303424 is a negative int"),
    (0, ValueError, r"^stream=0 is ambiguous in DLPack and disallowed"),
    ("1", TypeError, r"^stream= takes an int, not str"),
    (1.0, TypeError, r"^stream= takes an int, not float"),
    (True, TypeError, r"^stream=True is a bool"),
]
IDS = ["2**70", "2**63", "-2", "-2**70", "0", "str", "float", "bool"]


@pytest.fixture(scope="module")
def host_batch(sample_dataset):
    with stoker.Loader(sample_dataset, 4, size=32, device="cpu") as loader:
        yield next(iter(loader))


@pytest.mark.parametrize("part", ["images", "labels"])
@pytest.mark.parametrize("stream, error, says", BAD, ids=IDS)
def test_a_bad_stream_is_refused_naming_it_on_host_batches(host_batch, part, stream, error, says):
    with pytest.raises(error, match=says):
        getattr(host_batch, part).__dlpack__(stream=stream)


@pytest.mark.parametrize("part", ["images", "labels"])
@pytest.mark.parametrize("stream", [None, -1])
def test_no_stream_is_taken_by_host_batches(host_batch, part, stream):
    capsule = getattr(host_batch, part).__dlpack__(stream=stream)
    assert type(capsule).__name__ == "PyCapsule"


@pytest.mark.parametrize("part", ["images", "labels"])
@pytest.mark.parametrize("stream", [1, 2, 0x7F00_0000_1000, 2**63 - 1])
def test_a_cuda_stream_given_to_host_batches_is_a_buffer_error(host_batch, part, stream):
    with pytest.raises(BufferError, match=rf"^stream={stream}: these are host \(CPU\) memory"):
        getattr(host_batch, part).__dlpack__(stream=stream)


def test_copy_is_a_bool_named_in_the_error(host_batch):
    with pytest.raises(TypeError, match=r"^copy= takes a bool, not int"):
        host_batch.images.__dlpack__(copy=1)
    with pytest.raises(TypeError, match=r"^copy= takes a bool, not str"):
        host_batch.labels.__dlpack__(copy="yes")


@pytest.mark.parametrize("stream, error, says", BAD, ids=IDS)
def test_a_bad_stream_is_refused_naming_it_on_device_batches(sample_dataset, stream, error, says):
    try:
        loader = stoker.Loader(sample_dataset, 4, size=32, device="cuda")
    except stoker.StokerError as e:
        pytest.skip(f"no CUDA device: {e}")
    with loader:
        images, labels = next(iter(loader))
        assert images.device.startswith("cuda")
        with pytest.raises(error, match=says):
            images.__dlpack__(stream=stream)
        with pytest.raises(error, match=says):
            labels.__dlpack__(stream=stream)
        # Refused before anything waited: the batch still exports.
        images.__dlpack__(stream=-1)
