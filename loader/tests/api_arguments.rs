//! Hostile arguments through the Rust API, as a crate embedding stoker calls it (the CLI
//! and Python sweeps never reach these: their own parsing stops such values first). Each
//! test is named after what a caller hit before the fix. Photos from the repository's
//! `examples/data/sample` (15 images).

mod common;

use std::time::Duration;

use common::sample_dataset;
use stoker_loader::{Loader, Next, Transform};

fn small(ds: stoker_formats::Dataset) -> stoker_loader::LoaderBuilder {
    Loader::builder(ds)
        .workers(1)
        .batch_size(4)
        .transform(Transform::center_crop(8, 8))
}

#[test]
fn next_timeout_of_duration_max_waits_instead_of_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let loader = small(sample_dataset(dir.path())).build().unwrap();
    let mut epoch = loader.epoch(0);
    // "Wait as long as it takes": `Instant::now() + Duration::MAX` used to panic.
    let Next::Ready(first) = epoch.next_timeout(Duration::MAX) else {
        panic!("a 4-batch epoch gave no first batch");
    };
    assert_eq!(first.unwrap().index, 0);
    let mut rest = 0;
    while let Next::Ready(batch) = epoch.next_timeout(Duration::MAX) {
        batch.unwrap();
        rest += 1;
    }
    assert_eq!(rest, 3);
    assert!(matches!(epoch.next_timeout(Duration::MAX), Next::Done));
}
