//! A batch kept after its loader is gone holds its own buffer, not the loader's ring.
//!
//! Alone in its own test binary so no other test's allocations move this process's RSS.

mod common;

use common::{bench_dataset, rss_bytes};
use stoker_loader::{Loader, Output, Transform};

#[test]
fn a_batch_kept_past_its_loader_frees_the_rest_of_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 96, 32, &[]);
    // Buffers of 32 × 384² × 3 f32 = 56.6 MB (above glibc's largest mmap threshold, so
    // a freed one leaves RSS at once); the ring holds prefetch + workers = 3 of them.
    const BUFFER: u64 = 32 * 384 * 384 * 3 * 4;
    let loader = Loader::builder(ds)
        .batch_size(32)
        .transform(Transform::random_resized_crop(384))
        .output(Output::F32Nchw)
        .workers(1)
        .prefetch(2)
        .prefetch_next_epoch(false)
        .build()
        .unwrap();
    let kept = loader.epoch(0).last().unwrap().unwrap();
    let with_loader = rss_bytes();
    drop(loader);
    let without = rss_bytes();
    let freed = with_loader.saturating_sub(without);
    println!("RSS {with_loader} -> {without}: {freed} bytes freed");
    // The two buffers not kept go; the kept batch stays readable. Before, the ring's free
    // buffers waited in its channel for as long as the kept batch could send its own back.
    assert!(freed > BUFFER * 3 / 2, "only {freed} bytes freed");
    assert_eq!(kept.images.as_f32().unwrap().len() as u64 * 4, BUFFER);
}
