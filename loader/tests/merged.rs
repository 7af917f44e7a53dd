//! A dataset merged from the parts of a partitioned conversion feeds the loader exactly like
//! one conversion of the same photos: same seed, same epochs, same indices, labels and pixels.

mod common;

use std::path::Path;

use common::fingerprint;
use stoker_formats::{convert, merge, ConvertOptions, Dataset, NoProgress, Part, Source};
use stoker_loader::{Loader, Output, Shuffle, Transform};

/// (dataset indices, labels, pixel fingerprint) of every batch of `epoch`.
fn epoch(ds: &Dataset, epoch: u64) -> Vec<(Vec<u64>, Vec<u32>, u64)> {
    let loader = Loader::builder(ds.clone())
        .batch_size(4)
        .shuffle(Shuffle::Global { seed: 5 })
        .transform(Transform::random_resized_crop(32).hflip(0.5))
        .output(Output::U8Nhwc)
        .workers(2)
        .build()
        .unwrap();
    loader
        .epoch(epoch)
        .map(|b| {
            let b = b.expect("batch");
            let pixels = fingerprint(b.images.as_u8().expect("u8 output"));
            (b.indices.clone(), b.labels.clone(), pixels)
        })
        .collect()
}

#[test]
fn merged_parts_give_the_same_epochs_as_one_conversion() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/sample");
    let tmp = tempfile::tempdir().unwrap();
    let options = |out: &Path| {
        let mut o = ConvertOptions::new(Source::ImageFolder(src.clone()), out);
        o.check_decode = false;
        o.shard_bytes = 200_000; // several shards per part
        o
    };
    let single = tmp.path().join("single");
    convert(&options(&single), &NoProgress).unwrap();
    let parts = tmp.path().join("parts");
    for index in 0..3 {
        let mut o = options(&parts);
        o.part = Some(Part::new(index, 3).unwrap());
        convert(&o, &NoProgress).unwrap();
    }
    merge(&parts, &[]).unwrap();
    let (a, b) = (
        Dataset::open(&single).unwrap(),
        Dataset::open(&parts).unwrap(),
    );
    assert!(b.manifest().shards.iter().any(|s| s.key_base.is_some()));
    for e in [0, 1] {
        let want = epoch(&a, e);
        assert_eq!(want.len(), 4); // 15 photos in batches of 4
        assert_eq!(epoch(&b, e), want, "epoch {e}");
    }
}
