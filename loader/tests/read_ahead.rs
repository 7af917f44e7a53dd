//! The read-ahead thread over a shard cut short mid-epoch: it reads the shard's branch and
//! leaf pages before the workers do, and a fault there marks the shard's map faulted for
//! everyone. The records the loader reports bad must be the ones it reports without it.

use stoker_formats::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
use stoker_loader::{Loader, OnError, Output, Shuffle, Transform};

/// 1024 raw 8×8 records in one shard: values small enough to lie in the leaf pages, so
/// the shard has many leaves, laid out in key order.
fn small_records(dir: &std::path::Path) -> Dataset {
    let mut w = DatasetWriter::create(dir, WriterOptions::default()).unwrap();
    for i in 0..1024u32 {
        let meta = RecordMeta {
            encoding: Encoding::Raw,
            height: 8,
            width: 8,
            channels: 3,
            label: i % 5,
        };
        w.push(meta, &[(i % 251) as u8; 8 * 8 * 3]).unwrap();
    }
    w.finish(
        vec!["a".into(), "b".into(), "c".into(), "d".into(), "e".into()],
        Provenance::stoker("test"),
    )
    .unwrap();
    Dataset::open(dir).unwrap()
}

/// The batches that fail in an epoch in dataset order whose shard is cut to half its
/// length after the first batch.
fn bad_after_cut(read_ahead: bool, keep_pages: fn(u64) -> u64) -> Vec<usize> {
    // Read per epoch start; this test binary has no other test to disturb.
    std::env::set_var("STOKER_READ_AHEAD", if read_ahead { "1" } else { "0" });
    let dir = tempfile::tempdir().unwrap();
    let ds = small_records(dir.path());
    let loader = Loader::builder(ds.clone())
        .batch_size(8)
        .shuffle(Shuffle::Sequential)
        .transform(Transform::center_crop(8, 8))
        .output(Output::U8Nhwc)
        .on_error(OnError::Error)
        .workers(1)
        .prefetch(1)
        .build()
        .unwrap();
    let mut epoch = loader.epoch(0);
    let first = epoch.next().unwrap().unwrap();
    let shard = dir.path().join("shard-00000.lmdb");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(keep_pages(len / 4096) * 4096)
        .unwrap();
    let bad = epoch
        .enumerate()
        .filter(|(_, b)| b.is_err())
        .map(|(i, _)| i + 1)
        // Batches 1 and 2 may be built before or after the cut, either way.
        .filter(|&i| i > 2)
        .collect();
    drop(first);
    bad
}

#[test]
fn read_ahead_fails_no_record_that_reading_without_it_reads() {
    // Cut in the first quarter and in the middle. (A shard's root page is its last used
    // one, so either cut loses it: every lookup after the cut faults, on whichever thread.)
    let cuts: [fn(u64) -> u64; 2] = [|p| p / 4, |p| p / 2];
    for (i, cut) in cuts.into_iter().enumerate() {
        let without = bad_after_cut(false, cut);
        let with = bad_after_cut(true, cut);
        assert!(!without.is_empty(), "cut {i}: fails some batches");
        assert_eq!(
            with, without,
            "cut {i}: failed batches with read-ahead, and without"
        );
    }
}
