//! Where a loader's random choices come from: bad-record replacements drawn from the rank's
//! whole share (a run of bad records no longer piles onto one neighbour or fails the
//! batch), crops and flips keyed by the sample's place in the epoch (a record used twice
//! gets two draws), and one loader seed for every order mode. Data: the bench photos
//! (`testdata/bench`), some of them corrupted.

mod common;

use std::collections::HashMap;

use common::{bench_dataset, bench_raw_dataset, Broken};
use stoker_formats::Dataset;
use stoker_loader::pixels::sample_pixels;
use stoker_loader::{
    DrawKey, Loader, LoaderBuilder, LoaderError, LoaderState, OnError, Output, Shuffle, Transform,
};

const SIZE: u32 = 32;

fn identity_crop() -> Transform {
    common::identity_crop(SIZE)
}

fn builder(ds: &Dataset, workers: usize) -> LoaderBuilder {
    Loader::builder(ds.clone())
        .batch_size(8)
        .shuffle(Shuffle::Sequential)
        .transform(identity_crop())
        .output(Output::U8Nhwc)
        .workers(workers)
        .prefetch(3)
        .prefetch_next_epoch(false)
}

/// (batch index, indices, pixels) of each batch (`Err` as its message).
type Items = Vec<Result<(u64, Vec<u64>, Vec<u8>), String>>;

fn items(epoch: impl Iterator<Item = Result<stoker_loader::Batch, LoaderError>>) -> Items {
    epoch
        .map(|b| {
            b.map(|b| {
                let px = b.images.as_u8().expect("u8").to_vec();
                (b.index, b.indices, px)
            })
            .map_err(|e| e.to_string())
        })
        .collect()
}

/// 64 bench photos with records 10..30 (a run of 20, longer than the 16 neighbours the
/// loader used to try) corrupted, alternately undecodable and with a wrong CRC.
fn damaged_region(dir: &std::path::Path) -> (Dataset, Vec<u64>) {
    let bad: Vec<usize> = (10..30).collect();
    let broken: Vec<(usize, Broken)> = bad
        .iter()
        .map(|&i| {
            let kind = if i % 2 == 0 {
                Broken::Garbage
            } else {
                Broken::BadCrc
            };
            (i, kind)
        })
        .collect();
    let ds = bench_dataset(dir, 64, 16, &broken);
    (ds, bad.iter().map(|&i| i as u64).collect())
}

#[test]
fn a_run_of_bad_records_is_replaced_from_the_whole_share_not_one_neighbour() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, bad) = damaged_region(dir.path());
    let reference = {
        let loader = builder(&ds, 1).build().unwrap();
        let got = items(loader.epoch(0));
        let stats = loader.stats();
        assert_eq!(stats.bad_distinct, 20, "{stats}");
        // Each bad record is met at its own position; a random replacement may meet
        // another bad one (counted too).
        assert!(stats.bad_records >= 20, "{stats}");
        (got, stats.bad_records)
    };
    let (got, met) = &reference;
    assert_eq!(got.len(), 8);
    let mut uses: HashMap<u64, usize> = HashMap::new();
    for item in got {
        let (_, indices, _) = item.as_ref().expect("every batch is replaced, none fails");
        assert_eq!(indices.len(), 8, "a batch is not full");
        let distinct: std::collections::HashSet<&u64> = indices.iter().collect();
        assert_eq!(
            distinct.len(),
            8,
            "a batch holds a record twice: {indices:?}"
        );
        for i in indices {
            assert!(!bad.contains(i), "bad record {i} was yielded");
            *uses.entry(*i).or_default() += 1;
        }
    }
    // The 20 replacements are spread over the share: the old rule put them all on record
    // 30, the first good one after the run (or failed the batch at 16).
    let most = uses.values().max().copied().unwrap();
    assert!(most <= 4, "one record stands in {most} times: {uses:?}");
    let replacements: usize = uses.values().map(|n| n - 1).sum();
    assert_eq!(replacements, 20);

    // The same batches, pixels and counts for any number of workers...
    for workers in [2, 4] {
        let loader = builder(&ds, workers).build().unwrap();
        assert_eq!(&items(loader.epoch(0)), got, "{workers} workers");
        assert_eq!(loader.stats().bad_records, *met, "{workers} workers");
    }
    // ...and after a resume in the middle of the damaged region.
    let loader = builder(&ds, 3)
        .resume(LoaderState {
            epoch: 0,
            position: 2,
            ..LoaderState::default()
        })
        .build()
        .unwrap();
    assert_eq!(items(loader.epoch(0)), got[2..]);
}

#[test]
fn a_rank_whose_share_is_mostly_bad_yields_as_many_batches_as_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, bad) = damaged_region(dir.path());
    // Rank 0's share is records 0..32, 20 of them bad; rank 1's is all good.
    let per_rank: Vec<Items> = (0..2)
        .map(|rank| {
            items(
                builder(&ds, 2)
                    .distributed(rank, 2)
                    .build()
                    .unwrap()
                    .epoch(1),
            )
        })
        .collect();
    for (rank, got) in per_rank.iter().enumerate() {
        assert_eq!(got.len(), 4, "rank {rank}");
        for item in got {
            let (_, indices, _) = item.as_ref().expect("no batch fails on either rank");
            assert_eq!(indices.len(), 8);
            assert!(indices.iter().all(|i| !bad.contains(i) && *i < 64));
        }
    }
}

#[test]
fn a_share_that_is_all_bad_fails_each_batch_and_the_epoch_ends() {
    let dir = tempfile::tempdir().unwrap();
    let broken: Vec<(usize, Broken)> = (0..12).map(|i| (i, Broken::BadCrc)).collect();
    let ds = bench_dataset(dir.path(), 12, 16, &broken);
    let loader = builder(&ds, 2).batch_size(4).build().unwrap();
    let mut errors = 0;
    for item in loader.epoch(0) {
        match item {
            Err(LoaderError::TooManyBadRecords { .. }) => errors += 1,
            other => panic!("expected TooManyBadRecords, got {other:?}"),
        }
    }
    assert_eq!(errors, 3);
    assert_eq!(loader.stats().bad_distinct, 12);
}

#[test]
fn a_record_used_twice_in_an_epoch_gets_two_crops() {
    let dir = tempfile::tempdir().unwrap();
    // Raw records of 500×375 bench photos: 5 over 2 ranks gives shares of 3, and rank 1's
    // last sample is a padding copy of record 0 (rank 0's first).
    let ds = bench_raw_dataset(dir.path(), 5);
    let reader = ds.reader().unwrap();
    let (seed, epoch) = (11, 2);
    let image = |rank: u64, pos: u64| {
        let loader = builder(&ds, 1)
            .batch_size(3)
            .seed(seed)
            .distributed(rank as usize, 2)
            .build()
            .unwrap();
        let batch = loader.epoch(epoch).next().unwrap().unwrap();
        assert_eq!(batch.indices[pos as usize], 0);
        let per_image = (SIZE * SIZE * 3) as usize;
        let px = batch.images.as_u8().unwrap()[pos as usize * per_image..][..per_image].to_vec();
        (px, loader.sampler().global_position(pos))
    };
    let (original, at0) = image(0, 0);
    let (padding, at5) = image(1, 2);
    assert_eq!((at0, at5), (0, 5));
    assert!(
        original != padding,
        "the padding copy repeats the original's crop"
    );
    // Each is the crop drawn at its own position of the epoch's global order.
    for (px, at) in [(&original, at0), (&padding, at5)] {
        let s = sample_pixels(&reader, 0, &identity_crop(), seed, epoch, DrawKey::at(at)).unwrap();
        let mut want = s.crop_rgb();
        if s.params.flip {
            want = want
                .chunks_exact(SIZE as usize * 3)
                .flat_map(|row| row.chunks_exact(3).rev().flatten().copied())
                .collect();
        }
        assert!(*px == want, "position {at}: not the crop drawn there");
    }
}

#[test]
fn a_replacement_is_not_a_pixel_copy_of_the_record_it_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, bad) = damaged_region(dir.path());
    let loader = builder(&ds, 2).build().unwrap();
    let per_image = (SIZE * SIZE * 3) as usize;
    let mut images: HashMap<u64, Vec<Vec<u8>>> = HashMap::new();
    let order = loader.sampler().order(0);
    let mut replaced = 0;
    for batch in loader.epoch(0) {
        let batch = batch.unwrap();
        let px = batch.images.as_u8().unwrap();
        for (slot, &index) in batch.indices.iter().enumerate() {
            let pos = batch.index as usize * 8 + slot;
            replaced += usize::from(bad.contains(&order[pos]));
            let image = px[slot * per_image..][..per_image].to_vec();
            images.entry(index).or_default().push(image);
        }
    }
    assert_eq!(replacements(&images), 20);
    assert_eq!(replaced, 20);
    for (index, copies) in &images {
        for (i, a) in copies.iter().enumerate() {
            for b in &copies[i + 1..] {
                assert!(a != b, "record {index}: two uses, the same pixels");
            }
        }
    }
}

fn replacements(images: &HashMap<u64, Vec<Vec<u8>>>) -> usize {
    images.values().map(|v| v.len() - 1).sum()
}

#[test]
fn the_seed_drives_the_crops_of_a_sequential_loader() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_raw_dataset(dir.path(), 8);
    let run = |seed: Option<u64>| {
        let mut b = builder(&ds, 2);
        if let Some(seed) = seed {
            b = b.seed(seed);
        }
        let loader = b.build().unwrap();
        (items(loader.epoch(0)), loader.seed(), loader.state().seed)
    };
    let (default, seed0, state0) = run(None);
    let (one, seed1, state1) = run(Some(1));
    let (two, ..) = run(Some(2));
    assert_eq!((seed0, state0, seed1, state1), (0, 0, 1, 1));
    let indices = |it: &Items| -> Vec<Vec<u64>> {
        it.iter().map(|b| b.as_ref().unwrap().1.clone()).collect()
    };
    // The order is the dataset's whatever the seed; the crops follow it.
    assert_eq!(indices(&one), indices(&two));
    assert_eq!(indices(&one), indices(&default));
    assert_ne!(one, two, "two seeds, the same crops");
    assert_eq!(default, run(Some(0)).0, "no seed is seed 0");

    // A state saved under one seed does not resume under another.
    let saved = builder(&ds, 1).seed(1).build().unwrap().state();
    let err = builder(&ds, 1).seed(2).resume(saved).build().unwrap_err();
    assert!(
        matches!(err, LoaderError::ResumeMismatch { field: "seed", .. }),
        "{err}"
    );
    // An older state of a sequential loader (seed 0) still resumes one built without a seed.
    let old: LoaderState = serde_json::from_str(r#"{"seed":0,"epoch":0,"position":1}"#).unwrap();
    assert!(builder(&ds, 1).resume(old).build().is_ok());
}

#[test]
fn the_loader_seed_replaces_the_shuffles_seed() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_raw_dataset(dir.path(), 8);
    for (given, seed, want) in [
        (Shuffle::Global { seed: 3 }, 9, Shuffle::Global { seed: 9 }),
        (
            Shuffle::Quasi { seed: 3, block: 2 },
            9,
            Shuffle::Quasi { seed: 9, block: 2 },
        ),
    ] {
        // Whichever is called first.
        let a = builder(&ds, 1).shuffle(given).seed(seed).build().unwrap();
        let b = builder(&ds, 1).seed(seed).shuffle(given).build().unwrap();
        let c = builder(&ds, 1).shuffle(want).build().unwrap();
        assert_eq!(a.sampler().shuffle(), want);
        assert_eq!(b.sampler().shuffle(), want);
        assert_eq!((a.seed(), c.seed()), (9, 9));
        assert_eq!(items(a.epoch(0)), items(c.epoch(0)));
    }
}

#[test]
fn on_error_raise_still_fails_only_the_batches_holding_bad_records() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, _) = damaged_region(dir.path());
    let loader = builder(&ds, 2).on_error(OnError::Error).build().unwrap();
    let got = items(loader.epoch(0));
    // Records 10..30 lie in batches 1, 2 and 3 (8 records each).
    let failed: Vec<usize> = (0..got.len()).filter(|&k| got[k].is_err()).collect();
    assert_eq!(failed, vec![1, 2, 3]);
    assert_eq!(loader.stats().bad_records, 3, "one per failed batch");
}
