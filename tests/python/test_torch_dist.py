"""A loader placed from the launcher's environment is checked against an initialized
torch.distributed: processes started without a launcher (torch.multiprocessing.spawn)
that call init_process_group themselves left no variable saying so, and each loader read
the whole dataset in the same order."""

import sys
import types

import pytest

import stoker


def fake_distributed(monkeypatch, rank, world, initialized=True):
    """Stands in for an imported torch.distributed (stoker only asks it, never imports it)."""
    dist = types.ModuleType("torch.distributed")
    dist.is_available = lambda: True
    dist.is_initialized = lambda: initialized
    dist.get_rank = lambda: rank
    dist.get_world_size = lambda: world
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    return dist


def loader(dataset, **kw):
    return stoker.Loader(dataset, 4, size=32, device="cpu", workers=1, **kw)


def test_an_initialized_group_the_environment_does_not_know_is_refused(sample_dataset, monkeypatch):
    fake_distributed(monkeypatch, rank=1, world=2)
    with pytest.raises(ValueError) as e:
        loader(sample_dataset)
    text = str(e.value)
    assert "torch.distributed is initialized as rank 1 of 2" in text, text
    assert "rank 0 of 1" in text and "whole dataset" in text, text
    assert "rank=torch.distributed.get_rank()" in text, text


def test_explicit_rank_and_world_are_taken_as_given(sample_dataset, monkeypatch):
    fake_distributed(monkeypatch, rank=1, world=2)
    with loader(sample_dataset, rank=1, world_size=2) as l:
        assert l.stats()["slice"] == [1, 2]
        assert len(l) == 2  # 15 samples, 8 per rank (padded), batches of 4
    # Everything in each process, on purpose.
    with loader(sample_dataset, rank=0, world_size=1) as l:
        assert len(l) == 4


def test_a_launcher_that_agrees_with_torch_passes(sample_dataset, monkeypatch):
    fake_distributed(monkeypatch, rank=1, world=2)
    for var, value in (("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1"), ("LOCAL_WORLD_SIZE", "2")):
        monkeypatch.setenv(var, value)
    with loader(sample_dataset) as l:
        assert l.stats()["slice"] == [1, 2]


def test_one_that_disagrees_is_refused(sample_dataset, monkeypatch):
    fake_distributed(monkeypatch, rank=0, world=4)
    for var, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "2")):
        monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match="overlapping or missing shares"):
        loader(sample_dataset)


def test_an_uninitialized_or_broken_torch_distributed_is_not_asked_further(sample_dataset, monkeypatch):
    fake_distributed(monkeypatch, rank=1, world=2, initialized=False)
    with loader(sample_dataset) as l:
        assert l.stats()["placement"]["world"] == 1
    dist = fake_distributed(monkeypatch, rank=1, world=2)

    def broken():
        raise RuntimeError("no default group")

    dist.get_rank = broken
    with loader(sample_dataset) as l:
        assert l.stats()["placement"]["world"] == 1


def test_a_real_torch_process_group_is_seen(sample_dataset, monkeypatch):
    import torch.distributed as dist

    # torch's single-process stand-in for a group of 2 (no peers to wait for).
    from torch.testing._internal.distributed.fake_pg import FakeStore

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    dist.init_process_group("fake", rank=1, world_size=2, store=FakeStore())
    try:
        with pytest.raises(ValueError, match="initialized as rank 1 of 2"):
            loader(sample_dataset)
        with loader(sample_dataset, rank=dist.get_rank(), world_size=dist.get_world_size()) as l:
            assert l.stats()["slice"] == [1, 2]
    finally:
        dist.destroy_process_group()


def test_a_loader_built_before_init_process_group_is_checked_as_its_epoch_starts(
    sample_dataset, monkeypatch
):
    # torch.multiprocessing.spawn: each process built its loader, then called
    # init_process_group; the check at build saw nothing initialized, and every process
    # read the whole dataset in the same order without a word.
    dist = fake_distributed(monkeypatch, rank=1, world=2, initialized=False)
    with loader(sample_dataset) as l:
        it = iter(l)
        dist.is_initialized = lambda: True
        with pytest.raises(ValueError, match="built before init_process_group") as e:
            next(it)
        assert "torch.distributed is initialized as rank 1 of 2" in str(e.value)
        # Not started: asked again, it refuses again; nothing was handed out.
        with pytest.raises(ValueError):
            next(it)
        assert l.state_dict()["position"] == 0
        with pytest.raises(ValueError):
            list(l.epoch(3))
    # Built with rank and world given, it is not asked.
    with loader(sample_dataset, rank=0, world_size=1) as l:
        assert len(list(l)) == 4
