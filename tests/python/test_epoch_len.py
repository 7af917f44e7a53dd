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
