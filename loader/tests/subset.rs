//! A loader over part of a dataset (`LoaderBuilder::indices`): only those records, each
//! once an epoch, split over ranks, resumed, and replaced by one another when bad.

mod common;

use std::collections::{BTreeSet, HashSet};

use common::{bench_dataset, Broken};
use stoker_formats::Dataset;
use stoker_loader::{Loader, LoaderBuilder, LoaderError, Output, Shuffle, Transform};

fn small(ds: &Dataset) -> LoaderBuilder {
    Loader::builder(ds.clone())
        .batch_size(8)
        .shuffle(Shuffle::Global { seed: 11 })
        .transform(Transform::random_resized_crop(32).hflip(0.5))
        .output(Output::U8Nhwc)
        .workers(2)
        .prefetch(2)
}

/// Every third record of 60, listed backwards.
fn every_third() -> Vec<u64> {
    (0..60).rev().filter(|i| i % 3 == 0).collect()
}

fn indices_of(loader: &Loader, epoch: u64) -> Vec<Vec<u64>> {
    loader
        .epoch(epoch)
        .map(|b| {
            let b = b.expect("batch");
            for (i, l) in b.indices.iter().zip(&b.labels) {
                assert_eq!(u64::from(*l), i % 5, "record {i} came with another's label");
            }
            b.indices.clone()
        })
        .collect()
}

#[test]
fn an_epoch_yields_the_records_given_each_once_with_their_labels() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 60, 25, &[]);
    let loader = small(&ds).indices(every_third()).build().unwrap();
    assert_eq!(loader.sampler().num_batches(), 3); // 20 records: 8 + 8 + 4
    for epoch in [0, 1] {
        let batches = indices_of(&loader, epoch);
        assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [8, 8, 4]);
        let mut seen: Vec<u64> = batches.concat();
        seen.sort_unstable();
        let mut want = every_third();
        want.sort_unstable();
        assert_eq!(seen, want, "epoch {epoch}");
    }
    // A sequential loader yields them in the order given.
    let sequential = small(&ds)
        .shuffle(Shuffle::Sequential)
        .indices(every_third())
        .build()
        .unwrap();
    assert_eq!(indices_of(&sequential, 0).concat(), every_third());
}

#[test]
fn ranks_split_the_records_given() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 60, 25, &[]);
    let loaders: Vec<Loader> = (0..3)
        .map(|rank| {
            small(&ds)
                .batch_size(3)
                .distributed(rank, 3)
                .indices(every_third())
                .build()
                .unwrap()
        })
        .collect();
    let shares: Vec<Vec<u64>> = loaders.iter().map(|l| indices_of(l, 2).concat()).collect();
    // 20 records over 3 ranks: 7 each, one record twice (padding), in 3 batches each.
    for (l, share) in loaders.iter().zip(&shares) {
        assert_eq!((l.sampler().num_batches(), share.len()), (3, 7));
    }
    let union: BTreeSet<u64> = shares.concat().into_iter().collect();
    assert_eq!(union, every_third().into_iter().collect());
}

#[test]
fn a_state_resumes_only_into_a_loader_over_the_same_records() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 60, 25, &[]);
    let full = indices_of(&small(&ds).indices(every_third()).build().unwrap(), 4);
    let first = small(&ds).indices(every_third()).build().unwrap();
    let head: Vec<Vec<u64>> = first.epoch(4).take(1).map(|b| b.unwrap().indices).collect();
    assert_eq!(head, full[..1]);
    let state = first.state();
    let text = serde_json::to_string(&state).unwrap();
    assert!(text.contains("\"indices\":\""), "{text}");
    let state = serde_json::from_str(&text).unwrap();
    // The same records listed in another order are the same records.
    let mut listed = every_third();
    listed.sort_unstable();
    let resumed = small(&ds).indices(listed).resume(state).build().unwrap();
    assert_eq!(indices_of(&resumed, 4), full[1..]);

    let refused = |b: LoaderBuilder| match b.resume(state).build() {
        Err(LoaderError::ResumeMismatch { field, .. }) => field,
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(refused(small(&ds)), "indices");
    let mut other = every_third();
    other[0] = 1;
    assert_eq!(refused(small(&ds).indices(other)), "indices");
    // Another order of the same records is told as such (a sequential order keeps the
    // list as given, so its selection differs too).
    let sequential = small(&ds)
        .shuffle(Shuffle::Sequential)
        .seed(11)
        .indices(every_third());
    assert_eq!(refused(sequential), "order");
    // A state of the whole dataset does not resume a loader over part of it, nor does one
    // saved before states recorded `indices` (it has a dataset fingerprint, so it was
    // saved by a stoker without subsets) into one with as many records in another order.
    let whole = small(&ds).build().unwrap().state();
    let whole_refused = |b: LoaderBuilder, state| match b.resume(state).build() {
        Err(LoaderError::ResumeMismatch { field, .. }) => field,
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(
        whole_refused(small(&ds).indices(every_third()), whole),
        "indices"
    );
    let older = stoker_loader::LoaderState {
        indices: None,
        ..whole
    };
    let reordered: Vec<u64> = (0..60).rev().collect();
    let sequential = small(&ds).shuffle(Shuffle::Sequential).seed(11);
    let older = stoker_loader::LoaderState {
        order: Some(stoker_loader::Order::Sequential),
        ..older
    };
    assert_eq!(
        whole_refused(sequential.indices(reordered), older),
        "indices"
    );
}

#[test]
fn bad_records_are_replaced_by_records_of_the_subset() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(
        dir.path(),
        60,
        25,
        &[(3, Broken::Garbage), (9, Broken::BadCrc)],
    );
    let loader = small(&ds).indices(every_third()).build().unwrap();
    let batches = indices_of(&loader, 0);
    assert!(batches[..2].iter().all(|b| b.len() == 8));
    let given: HashSet<u64> = every_third().into_iter().collect();
    for i in batches.concat() {
        assert!(given.contains(&i), "record {i} is not one of the subset's");
        assert!(i != 3 && i != 9, "bad record {i} was yielded");
    }
    assert_eq!(loader.stats().bad_distinct, 2);
}

/// Indices may name a record more than once (oversampling), so a batch can hold more
/// images than the dataset has: the batch buffers were sized by the dataset's length,
/// and each such batch failed with a worker's panic (a slice out of range).
#[test]
fn records_given_more_often_than_the_dataset_is_long_make_full_batches() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 6, 25, &[]);
    let thrice: Vec<u64> = (0..6).chain(0..6).chain(0..6).collect();
    let loader = small(&ds)
        .batch_size(16)
        .workers(1)
        .indices(thrice.clone())
        .build()
        .unwrap();
    let batches = indices_of(&loader, 0);
    assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [16, 2]);
    let mut seen = batches.concat();
    seen.sort_unstable();
    let mut want = thrice;
    want.sort_unstable();
    assert_eq!(seen, want, "each record drawn as often as it is listed");
    assert_eq!(loader.stats().bad_records, 0);
}

#[test]
fn an_index_past_the_dataset_or_an_empty_list_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 12, 25, &[]);
    let e = small(&ds).indices(vec![0, 5, 12]).build().unwrap_err();
    assert!(
        e.to_string()
            .contains("indices[2] is 12, past the dataset's last record"),
        "{e}"
    );
    let e = small(&ds).indices(vec![]).build().unwrap_err();
    assert!(e.to_string().contains("`indices`"), "{e}");
}

#[test]
fn the_batch_ring_holds_no_more_batches_than_the_subsets_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 60, 25, &[]);
    // Three records: one batch an epoch, so one batch in flight and one per worker,
    // however many the prefetch asks for (it was sized from the 60 records: 8 + 1).
    let loader = small(&ds)
        .batch_size(256)
        .workers(1)
        .prefetch(8)
        .indices(vec![0, 1, 2])
        .build()
        .unwrap();
    let batch_bytes = 3 * 32 * 32 * 3;
    assert_eq!(loader.stats().host_bytes, 2 * batch_bytes);
}
