"""What `len()` of an epoch iterator means: the batches of the epoch it runs (after a
resume, those left in that epoch), as `len()` of a PyTorch `DataLoader` iterator is its
sampler's length: the total, not the batches still to come. It is fixed at the first
`next` and kept through iteration and after `close()` or a stop from outside (progress
bars and frameworks read it as the epoch's length, whenever they ask); before the first
`next` it is what the iterator would yield if it started now, so 0 once it cannot start.

Regression guard for the review note that `len(it)` after `close()` still gave the count
it started with: that is the documented meaning, pinned here so that the two states that
can differ (started then closed, closed before starting) stay as documented."""

import stoker


def _loader(dataset):
    # 15 samples, batches of 4: 4 batches, the last of 3.
    return stoker.Loader(dataset, 4, size=16, device="cpu", prefetch_next_epoch=False)


def test_len_is_the_epochs_total_while_iterating_and_after_close(sample_dataset):
    with _loader(sample_dataset) as loader:
        it = loader.epoch(0)
        assert len(it) == 4
        next(it)
        assert len(it) == 4
        it.close()
        assert len(it) == 4
        assert next(it, None) is None
        # A finished iterator keeps it too.
        done = loader.epoch(1)
        assert len(list(done)) == 4 and len(done) == 4


def test_len_after_a_stop_from_outside_is_kept_once_started(sample_dataset):
    with _loader(sample_dataset) as loader:
        started = iter(loader)
        next(started)
        unstarted = loader.epoch(5)
        newer = iter(loader)
        assert len(newer) == 4
        next(newer)
        # `started` ran its epoch: still 4; `unstarted` never can: 0.
        assert (len(started), len(unstarted)) == (4, 0)
        loader.close()
        assert (len(started), len(newer)) == (4, 4)


def test_len_of_an_iterator_closed_before_its_first_next_is_0(sample_dataset):
    with _loader(sample_dataset) as loader:
        it = loader.epoch(0)
        assert len(it) == 4
        it.close()
        assert len(it) == 0
        assert next(it, None) is None


def test_len_after_a_resume_is_what_is_left_of_the_epoch(sample_dataset):
    with _loader(sample_dataset) as loader:
        it = iter(loader)
        next(it)
        state = loader.state_dict()
    with _loader(sample_dataset) as loader:
        loader.load_state_dict(state)
        it = iter(loader)
        assert len(it) == 3
        assert len(list(it)) == 3 and len(it) == 3


def test_len_after_a_resume_of_a_finished_epoch_or_of_a_refused_one_is_what_it_yields(
    sample_dataset,
):
    import pytest

    with _loader(sample_dataset) as saver:
        for _ in saver.epoch(2):
            state = saver.state_dict()
    assert (state["epoch"], state["position"]) == (2, 4)
    # Resumed into the epoch the state finished (set_epoch, or epoch(e)): it yields
    # nothing, and len() said the whole epoch (4).
    for start in ("set_epoch", "epoch"):
        with _loader(sample_dataset) as loader:
            loader.load_state_dict(state)
            if start == "set_epoch":
                loader.set_epoch(2)
                it = iter(loader)
            else:
                it = loader.epoch(2)
            assert len(it) == 0, start
            assert list(it) == [] and len(it) == 0, start
    # A plain `for` runs the epoch after it, whole.
    with _loader(sample_dataset) as loader:
        loader.load_state_dict(state)
        it = iter(loader)
        assert len(it) == 4 and len(list(it)) == 4
    # An epoch the pending state refuses yields no batch: its len() was 4 before the
    # first `next` and 1 (its error) after.
    with _loader(sample_dataset) as loader:
        loader.load_state_dict(dict(state, position=1))
        it = loader.epoch(7)
        assert len(it) == 0
        with pytest.raises(ValueError):
            next(it)
        assert len(it) == 0
        assert next(it, None) is None
