//! Memory is allocated once at build: RSS stays flat across epochs.
//!
//! Alone in its own test binary so no other test's allocations move this process's RSS.

mod common;

use common::{bench_dataset, rss_bytes};
use stoker_loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
use stoker_loader::{Loader, Output, Shuffle, Transform};

#[test]
fn rss_is_flat_over_five_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 96, 32, &[]);
    let loader = Loader::builder(ds)
        .batch_size(16)
        .shuffle(Shuffle::Global { seed: 5 })
        .transform(
            Transform::random_resized_crop(160)
                .hflip(0.5)
                .normalize(IMAGENET_MEAN, IMAGENET_STD),
        )
        .output(Output::F32Nchw)
        .workers(2)
        .prefetch(3)
        .build()
        .unwrap();
    let mut checksum = 0f64;
    let mut after = Vec::new();
    for epoch in 0..5 {
        for batch in loader.epoch(epoch) {
            let batch = batch.unwrap();
            checksum += f64::from(batch.images.as_f32().unwrap()[0]);
        }
        after.push(rss_bytes());
    }
    let base = after[0] as f64;
    for (epoch, &rss) in after.iter().enumerate().skip(1) {
        let growth = (rss as f64 - base) / base;
        println!(
            "epoch {epoch}: rss {:.1} MiB ({:+.3}% vs epoch 0)",
            rss as f64 / 1048576.0,
            100.0 * growth
        );
        assert!(
            growth < 0.01,
            "RSS grew {:.2}% after epoch 0: {after:?}",
            100.0 * growth
        );
    }
    assert!(checksum.is_finite());
    assert_eq!(loader.stats().images, 5 * 96);
}
