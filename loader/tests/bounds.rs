//! Sizes from arguments are checked before anything is allocated: a batch
//! size far above the dataset's length used to size every ring buffer by the batch size and
//! abort allocating tens of gigabytes. Photos from the repository's `examples/data/sample`.
//!
//! Alone in its own test binary so the RSS it reads is its own.

mod common;

use common::{rss_bytes, sample_dataset};
use stoker_loader::launcher::NodeShare;
use stoker_loader::{Device, Loader, LoaderError, Output, Placement, Shuffle, Transform};

#[test]
fn batch_size_100000_on_15_images_no_longer_allocates_100000_image_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let before = rss_bytes();
    let loader = Loader::builder(ds)
        .batch_size(100_000)
        .shuffle(Shuffle::Global { seed: 1 })
        .transform(Transform::random_resized_crop(224))
        .output(Output::F32Nchw)
        .workers(2)
        .prefetch(2)
        .build()
        .unwrap();
    let batches: Vec<_> = loader.epoch(0).map(|b| b.unwrap()).collect();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].labels.len(), 15);
    let grown = rss_bytes().saturating_sub(before);
    // 4 buffers of 15 × 224² × 3 f32 are 36 MB; 100000-image buffers would be 60 GB each.
    assert!(grown < 1 << 30, "RSS grew by {grown} bytes");
}

/// Shuffled batches of `batch` 32-pixel center crops as u8.
fn small_crops(ds: stoker_formats::Dataset, batch: usize) -> stoker_loader::LoaderBuilder {
    Loader::builder(ds)
        .batch_size(batch)
        .shuffle(Shuffle::Global { seed: 3 })
        .transform(Transform::center_crop(32, 40))
        .output(Output::U8Nhwc)
}

/// `prefetch(usize::MAX)` asks for as many batches ahead as there are: each worker's
/// window check (`handed + prefetch`) overflowed, in a debug build a panic outside the
/// batch's unwind guard that ended the worker and left the epoch waiting for it forever.
#[test]
fn prefetch_usize_max_runs_the_epoch_like_any_prefetch() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let epoch = |ds: stoker_formats::Dataset, prefetch: usize| -> Vec<Vec<u64>> {
        // One image a batch: the consumer has taken some before a worker claims the
        // next, the case that overflowed.
        let loader = small_crops(ds, 1)
            .workers(2)
            .prefetch(prefetch)
            .build()
            .unwrap();
        loader
            .epoch(0)
            .map(|b| b.unwrap().indices.clone())
            .collect()
    };
    // In a thread of its own, so that a hang fails the test instead of stalling it.
    let (tx, rx) = std::sync::mpsc::channel();
    let all = ds.clone();
    std::thread::spawn(move || tx.send(epoch(all, usize::MAX)).unwrap());
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the epoch ends");
    assert_eq!(got, epoch(ds, 2));
    assert_eq!(got.len(), 15);
}

#[test]
fn batch_that_cannot_fit_in_memory_is_refused_naming_batch_size() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let built = Loader::builder(ds)
        .batch_size(100_000)
        .transform(Transform::random_resized_crop(16384))
        .output(Output::F32Nchw)
        .workers(4)
        .prefetch(8)
        .build();
    let Err(e) = built else {
        panic!("a ring of 12 batches of 15 × 16384² × 3 f32 (580 GB) was accepted");
    };
    assert!(
        matches!(&e, LoaderError::InvalidConfig { field: "batch_size", reason } if reason.contains("memory")),
        "{e}"
    );
}

#[test]
fn shard_truncated_between_epochs_is_an_epoch_error_not_sigbus() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let loader = Loader::builder(ds)
        .batch_size(4)
        .transform(Transform::random_resized_crop(32))
        .output(Output::U8Nhwc)
        .workers(1)
        .prefetch(1)
        .prefetch_next_epoch(false)
        .build()
        .unwrap();
    assert_eq!(loader.epoch(0).filter(|b| b.is_ok()).count(), 4);
    let shard = dir.path().join("ds/shard-00000.lmdb");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let first = loader.epoch(1).next().expect("the epoch reports its error");
    let Err(e) = first else {
        panic!("a batch from a truncated shard, not an error");
    };
    assert!(e.to_string().contains("changed on disk"), "{e}");
}

/// README: "to replace a dataset in use, write the new one elsewhere and `mv` it into
/// place; opening the path again opens the new one while the old loader, until closed,
/// reads the old". The old loader's next epoch failed instead ("replaced by another
/// file"), ending the training job.
#[test]
fn a_dataset_swapped_by_mv_between_epochs_goes_on_feeding_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let loader = (small_crops(ds, 4).workers(1).prefetch(1))
        .prefetch_next_epoch(false)
        .build()
        .unwrap();
    let pixels = |e: u64| -> Vec<(Vec<u64>, Vec<u8>)> {
        (loader.epoch(e))
            .map(|b| {
                let b = b.expect("a batch");
                (b.indices.clone(), b.images.as_u8().unwrap().to_vec())
            })
            .collect()
    };
    let before = pixels(1);
    // The new dataset: the same photos in other shards, swapped in; the old one deleted.
    let new = tempfile::tempdir().unwrap();
    let other = sample_dataset(new.path());
    drop(other);
    let live = dir.path().join("ds");
    std::fs::rename(&live, dir.path().join("away")).unwrap();
    std::fs::rename(new.path().join("ds"), &live).unwrap();
    std::fs::remove_dir_all(dir.path().join("away")).unwrap();
    assert_eq!(
        pixels(1),
        before,
        "the same epoch, read from the old dataset's maps"
    );
    assert_eq!(loader.stats().bad_records, 0);
}

#[test]
fn more_workers_than_cores_build_with_a_note_as_pytorch_warns() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let over = Loader::builder(ds.clone())
        .workers(cores + 1)
        .build()
        .unwrap();
    let note = over
        .workers_note()
        .expect("a note for more threads than cores");
    assert!(note.contains(&format!("workers={}", cores + 1)), "{note}");
    // The batches are the same as ever: a note, not a refusal.
    assert_eq!(over.epoch(0).filter(|b| b.is_ok()).count(), 1);
    // The default is the process's share, and one thread fits any share.
    assert!(Loader::builder(ds.clone())
        .build()
        .unwrap()
        .workers_note()
        .is_none());
    assert!(Loader::builder(ds)
        .workers(1)
        .build()
        .unwrap()
        .workers_note()
        .is_none());
}

#[test]
fn drop_last_with_a_batch_above_the_share_is_a_note_not_a_silent_empty_loop() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    // The README's batch_size(256).drop_last(true) on the 15 sample photos.
    let empty = Loader::builder(ds.clone())
        .batch_size(256)
        .drop_last(true)
        .build()
        .unwrap();
    assert_eq!(empty.num_batches(), 0);
    let note = empty.empty_epochs_note().expect("a note");
    assert!(
        note.contains("batch_size 256 is above the 15 samples"),
        "{note}"
    );
    // An epoch run through with nothing handed out fed nothing: no fed ratio is shown.
    assert_eq!(empty.epoch(0).count(), 0);
    let shown = empty.stats().to_string();
    assert!(
        shown.contains("0 batches") && shown.contains("fed ratio -"),
        "{shown}"
    );
    let two_ranks = Loader::builder(ds.clone())
        .batch_size(8)
        .drop_last(true)
        .distributed(1, 2)
        .build()
        .unwrap();
    assert_eq!(two_ranks.num_batches(), 0);
    assert!(two_ranks.empty_epochs_note().unwrap().contains("7 samples"));
    // One batch, partial, without drop_last; full batches with it: no note.
    for (batch, drop_last) in [(256, false), (4, true)] {
        let loader = Loader::builder(ds.clone())
            .batch_size(batch)
            .drop_last(drop_last)
            .build()
            .unwrap();
        assert!(loader.empty_epochs_note().is_none(), "{batch} {drop_last}");
    }
}

/// What the process already holds (`RssAnon`) counts only beside the CPU ring: a GPU
/// loader allocates no such ring, and a training process holding most of the memory must
/// still build one. The CPU path, which allocates it, still refuses.
#[test]
fn a_gpu_loader_is_not_refused_for_a_cpu_ring_beside_the_memory_held() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    // The memory this process may use: the pinned share of one process is half of it.
    let total = 2 * NodeShare::of_this_machine(&Placement::single()).pinned_bytes;
    if !(1 << 30..u64::MAX / 4).contains(&total) {
        eprintln!("skipped: the memory this process may use is unknown, or under 1 GiB");
        return;
    }
    // What the training process holds: 256 MiB, written so that they are resident.
    let held = vec![1u8; 256 << 20];
    // A ring just under the memory (within 64 MiB and a step of the output size): it fits
    // alone, not beside `held`. 15 images × side² × 3 f32 per batch, 1 + workers batches.
    let target = total - (64 << 20);
    let per_side2 = 15 * 3 * 4;
    let batches = target.div_ceil(per_side2 * 16000 * 16000).max(2);
    let side = ((target / (per_side2 * batches)) as f64).sqrt() as u32;
    let build = |device| {
        Loader::builder(ds.clone())
            .batch_size(15)
            .transform(Transform::center_crop(side, side))
            .output(Output::F32Nchw)
            .workers(batches as usize - 1)
            .prefetch(1)
            .device(device)
            .build()
    };
    let refused = |built: &Result<Loader, LoaderError>| {
        matches!(
            built,
            Err(LoaderError::InvalidConfig {
                field: "batch_size",
                ..
            })
        )
    };
    // No GPU has ordinal 999: the GPU path's own error, not the CPU ring's.
    let gpu = build(Device::Cuda(999));
    assert!(!refused(&gpu), "{:?}", gpu.err());
    // The CPU path allocates that ring: refused before allocating it.
    let cpu = build(Device::Cpu);
    assert!(refused(&cpu), "{:?}", cpu.as_ref().err());
    drop(held);
}
