"""stoker.Loader(indices=...) and Dataset.labels(): a loader over part of a dataset (a
validation split, some classes), as torch's Subset or FFCV's indices."""

import json

import numpy as np
import pytest

import stoker


def loader(dataset, **kw):
    kw.setdefault("seed", 3)
    return stoker.Loader(dataset, 4, size=32, crop="center", device="cpu", **kw)


def epoch_indices(ld, epoch=0):
    out = []
    for batch in ld.epoch(epoch):
        _, labels = batch
        out.append((list(batch.indices), labels.tolist()))
    return out


def test_labels_are_every_records_label_in_index_order(sample_dataset):
    ds = stoker.Dataset(sample_dataset)
    labels = ds.labels()
    assert labels == [ds[i][1] for i in range(len(ds))]
    assert sorted(set(labels)) == list(range(len(ds.classes)))


def test_an_epoch_draws_each_record_given_once_with_its_own_label(sample_dataset):
    ds = stoker.Dataset(sample_dataset)
    labels = ds.labels()
    # One class kept out: a loader over the others.
    keep = [i for i, label in enumerate(labels) if label != 0]
    for given in (keep, np.array(keep, dtype=np.int64), np.array(keep[::-1], dtype=np.uint32)):
        ld = loader(ds, indices=given)
        assert len(ld) == -(-len(keep) // 4)
        batches = epoch_indices(ld)
        seen = sorted(i for indices, _ in batches for i in indices)
        assert seen == keep
        for indices, got in batches:
            assert got == [labels[i] for i in indices]
        ld.close()
    # Unshuffled, a range comes in its own order, repeats included.
    ld = loader(ds, indices=range(14, 2, -3), shuffle=False)
    assert [i for b, _ in epoch_indices(ld) for i in b] == [14, 11, 8, 5]
    ld = loader(ds, indices=[2, 2, 7], shuffle=False)
    assert [i for b, _ in epoch_indices(ld) for i in b] == [2, 2, 7]


def test_ranks_split_the_records_given(sample_dataset):
    given = list(range(1, 15, 2))  # 7 records
    shares = [
        [i for b, _ in epoch_indices(loader(sample_dataset, indices=given, rank=r, world_size=2)) for i in b]
        for r in range(2)
    ]
    assert [len(s) for s in shares] == [4, 4]  # 7 over 2 ranks: one repeated as padding
    assert set(shares[0]) | set(shares[1]) == set(given)


def test_a_state_resumes_only_over_the_same_records(sample_dataset):
    given = [0, 3, 4, 8, 9, 10, 12, 13, 14]
    full = epoch_indices(loader(sample_dataset, indices=given), 2)
    first = loader(sample_dataset, indices=given)
    it = first.epoch(2)
    next(it)
    del it
    state = json.loads(json.dumps(first.state_dict()))
    assert state["samples"] == 9 and len(state["indices"]) == 16, state
    resumed = loader(sample_dataset, indices=sorted(given, reverse=True))
    resumed.load_state_dict(state)
    assert epoch_indices(resumed, 2) == full[1:]
    with pytest.raises(ValueError, match="indices.* in the saved state but all in this loader"):
        loader(sample_dataset).load_state_dict(state)
    with pytest.raises(ValueError, match="indices"):
        loader(sample_dataset, indices=given[:-1] + [11]).load_state_dict(state)
    whole = loader(sample_dataset).state_dict()
    assert whole["indices"] == "all"
    with pytest.raises(ValueError, match="indices.* all in the saved state"):
        loader(sample_dataset, indices=given).load_state_dict(whole)
    with pytest.raises(ValueError, match='indices "some" is not "all" or 16 hex digits'):
        loader(sample_dataset).load_state_dict(dict(whole, indices="some"))


@pytest.mark.parametrize(
    "given, error, says",
    [
        ([0, 15], ValueError, r"indices\[1\] is 15, past the dataset's last record \(it holds 15 records, 0..=14\)"),
        ([], ValueError, r"`indices`: the list is empty"),
        ([1, -2], ValueError, r"^indices\[1\] is -2: record indices count from 0"),
        ([1, 2.0], TypeError, r"^indices\[1\] is a float, not a record index \(an int\)"),
        ([True], TypeError, r"^indices\[0\] is a bool"),
        (np.array([0.0, 1.0]), TypeError, r"^indices\[0\] is a float"),
        (np.array([True]), TypeError, r"^indices\[0\] is a bool"),
        ("0,1", TypeError, r"^indices= takes a sequence of record indices .*, not str"),
        (3, TypeError, r"^indices= takes a sequence of record indices .*, not int"),
        ([2**64], ValueError, r"^indices\[0\] is 18446744073709551616, past the dataset's last record"),
        # Read against the dataset: the first index past it stops the reading.
        (range(10**12), ValueError, r"^indices\[15\] is 15, past the dataset's last record"),
        (range(2**62), ValueError, r"^indices\[15\] is 15, past"),
    ],
    ids=[
        "past", "empty", "negative", "float", "bool", "float-array", "bool-array", "str", "int",
        "huge", "long-range", "longer-range",
    ],
)
def test_bad_indices_are_named_by_position(sample_dataset, given, error, says):
    with pytest.raises(error, match=says):
        loader(sample_dataset, indices=given)


def test_an_endless_iterator_of_indices_is_refused_not_read_to_the_end(sample_dataset):
    import itertools

    with pytest.raises(ValueError, match=r"more than 16777216 indices .*an endless iterator"):
        loader(sample_dataset, indices=itertools.cycle([0, 1]))


def test_a_boolean_mask_is_pointed_to_flatnonzero(sample_dataset):
    mask = np.zeros(15, dtype=bool)
    mask[::2] = True
    with pytest.raises(TypeError, match=r"np\.flatnonzero\(mask\)"):
        loader(sample_dataset, indices=mask)
    ld = loader(sample_dataset, indices=np.flatnonzero(mask), shuffle=False)
    assert [i for b, _ in epoch_indices(ld) for i in b] == list(range(0, 15, 2))

