//! How batches leave the loader for other frameworks and bindings: DLPack export,
//! epoch iterators that own their loader, waits with a deadline, and resuming a
//! running loader. Data: the in-repo sample photos (`examples/data/sample`), converted
//! in the test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::sample_dataset;
use stoker_formats::Dataset;
use stoker_loader::dlpack::{sys, ManagedTensor};
use stoker_loader::{
    Images, Loader, LoaderBuilder, LoaderError, LoaderState, Next, Order, Output, Shuffle,
    Transform,
};

fn small(ds: &Dataset) -> LoaderBuilder {
    Loader::builder(ds.clone())
        .batch_size(4)
        .shuffle(Shuffle::Global { seed: 5 })
        .transform(Transform::random_resized_crop(24).hflip(0.5))
        .output(Output::F32Nchw)
        .workers(2)
        .prefetch(2)
}

/// (batch index, indices, labels, pixels) of every batch of `epoch`.
type Summary = Vec<(u64, Vec<u64>, Vec<u32>, Vec<f32>)>;

fn summary(epoch: impl Iterator<Item = Result<stoker_loader::Batch, LoaderError>>) -> Summary {
    epoch
        .map(|b| {
            let b = b.expect("batch");
            let px = b.images.as_f32().expect("f32").to_vec();
            (b.index, b.indices, b.labels, px)
        })
        .collect()
}

#[test]
fn a_dlpack_tensor_kept_alive_is_not_overwritten_by_later_batches() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let reference = summary(small(&ds).build().unwrap().epoch(0));

    // prefetch 2: the ring has few buffers, so a buffer recycled too early would be
    // rewritten by one of the later batches.
    let loader = small(&ds).build().unwrap();
    let mut kept: Vec<ManagedTensor> = Vec::new();
    for batch in loader.epoch(0) {
        let batch = batch.unwrap();
        let Images::Host(images) = batch.images else {
            panic!("CPU path gives host images")
        };
        let shape = images.shape();
        let t = images.into_dlpack();
        assert_eq!(t.shape(), shape.map(|d| d as i64));
        assert_eq!(t.device().device_type, sys::K_DL_CPU);
        assert_eq!(
            (t.dtype().code, t.dtype().bits),
            (sys::K_DL_FLOAT, 32),
            "F32Nchw"
        );
        kept.push(t);
    }
    assert_eq!(kept.len(), reference.len());
    for (t, (_, _, _, px)) in kept.iter().zip(&reference) {
        let n: i64 = t.shape().iter().product();
        // SAFETY: an f32 host tensor of `n` elements, alive while `t` is.
        let got = unsafe { std::slice::from_raw_parts(t.data_ptr().cast::<f32>(), n as usize) };
        assert_eq!(got, &px[..], "a kept batch changed");
    }
}

#[test]
fn a_dlpack_tensor_handed_out_returns_its_buffer_when_the_consumer_deletes_it() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let loader = small(&ds).build().unwrap();
    let mut raws = Vec::new();
    for batch in loader.epoch(0) {
        let Images::Host(images) = batch.unwrap().images else {
            panic!("host images")
        };
        raws.push(images.into_dlpack().into_raw());
    }
    for raw in raws {
        // SAFETY: each came from `into_raw`; one deleter call each, as a consumer does.
        unsafe { ((*raw).deleter.expect("deleter"))(raw) };
    }
    // The buffers went back: another epoch runs as usual.
    assert_eq!(loader.epoch(1).count() as u64, loader.num_batches());
}

#[test]
fn a_shared_epoch_outlives_its_loader_handle_and_gives_the_same_batches() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let reference = summary(small(&ds).build().unwrap().epoch(2));
    let loader = Arc::new(small(&ds).build().unwrap());
    let epoch = loader.epoch_shared(2);
    drop(loader);
    assert_eq!(summary(epoch), reference);
}

#[test]
fn waits_with_a_deadline_give_the_same_batches_and_count_them_once() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let reference = summary(small(&ds).build().unwrap().epoch(1));
    let loader = small(&ds).build().unwrap();
    let mut epoch = loader.epoch(1);
    let mut got = Vec::new();
    let mut pending = 0;
    loop {
        // A deadline that passes at once: most calls find nothing ready.
        match epoch.next_timeout(Duration::ZERO) {
            Next::Ready(b) => got.push(b),
            Next::Pending => pending += 1,
            Next::Done => break,
            other => panic!("unexpected {other:?}"),
        }
        assert!(pending < 10_000_000, "no progress");
    }
    drop(epoch);
    assert_eq!(summary(got.into_iter()), reference);
    let stats = loader.stats();
    assert_eq!(stats.batches, reference.len() as u64);
    assert_eq!(stats.images, 15);
    assert_eq!(stats.epochs, 1);
}

#[test]
fn a_resume_survives_an_epoch_that_failed_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let full = summary(small(&ds).build().unwrap().epoch(0));
    let loader = small(&ds).build().unwrap();
    loader
        .load_state(LoaderState {
            position: 2,
            ..loader.state()
        })
        .unwrap();
    // The shard is away while the epoch starts, so that start fails...
    let shard = dir.path().join("ds/shard-00000.lmdb");
    let away = dir.path().join("shard.away");
    std::fs::rename(&shard, &away).unwrap();
    let first = loader.epoch(0).next().expect("the start's error");
    assert!(first.is_err());
    std::fs::rename(&away, &shard).unwrap();
    // ...and the next try still begins at the saved batch.
    assert_eq!(summary(loader.epoch(0)), full[2..]);
}

#[test]
fn a_loop_that_starts_at_another_epoch_than_the_resumed_one_is_told_so() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let full = summary(small(&ds).build().unwrap().epoch(2));
    let state = LoaderState {
        epoch: 2,
        position: 2,
        ..small(&ds).build().unwrap().state()
    };
    // `for epoch in 0..4` after a resume used to drop the state at epoch 0 and train
    // epochs 0 and 1 again, then all of epoch 2.
    let loader = small(&ds).resume(state).build().unwrap();
    let first = loader
        .epoch(0)
        .next()
        .expect("an error, not an empty epoch");
    let err = first.unwrap_err();
    assert!(
        matches!(
            err,
            LoaderError::ResumeEpoch {
                saved: 2,
                position: 2,
                requested: 0
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("start the loop at epoch 2"),
        "{err}"
    );
    // The state stays pending, for the epoch it continues.
    assert_eq!(loader.state(), state);
    assert_eq!(summary(loader.epoch(2)), full[2..]);
    // A state saved after its epoch's last batch continues with the next epoch.
    let done = LoaderState {
        position: 4,
        ..state
    };
    loader.load_state(done).unwrap();
    assert_eq!(loader.epoch(3).count(), 4);
    loader.load_state(done).unwrap();
    assert!(loader.epoch(4).next().unwrap().is_err());
}

/// A loop that leaves each epoch early (a fixed number of steps per epoch, Lightning's
/// `limit_train_batches`) saves a state inside the epoch at its end. The loader that saved
/// it goes on with the next epoch from its first batch when asked; a loader resumed from
/// that state does the same, batch for batch (it refused before), and asking for the
/// saved epoch still continues it.
#[test]
fn a_state_saved_after_an_epoch_left_early_resumes_into_the_next_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let steps = 2;
    let run = small(&ds).build().unwrap();
    let mut states = Vec::new();
    let mut seen = Vec::new();
    for epoch in 0..3 {
        seen.push(summary(run.epoch(epoch).take(steps)));
        states.push(run.state());
    }
    assert_eq!((states[1].epoch, states[1].position), (1, steps as u64));
    let resumed = small(&ds).resume(states[1]).build().unwrap();
    assert_eq!(summary(resumed.epoch(2).take(steps)), seen[2]);
    assert_eq!(resumed.state(), states[2]);
    // A state at its epoch's first batch (a loop that finished the epoch before) trained
    // nothing of it: asking for the next one is more likely off by one, and refused.
    let start = LoaderState {
        position: 0,
        ..states[1]
    };
    let resumed = small(&ds).resume(start).build().unwrap();
    let first = resumed.epoch(2).next().expect("an error");
    assert!(
        matches!(first, Err(LoaderError::ResumeEpoch { saved: 1, .. })),
        "{first:?}"
    );
    // The saved epoch itself continues where it stopped.
    let full = summary(small(&ds).build().unwrap().epoch(1));
    let resumed = small(&ds).resume(states[1]).build().unwrap();
    assert_eq!(summary(resumed.epoch(1)), full[steps..]);
}

#[test]
fn load_state_on_a_running_loader_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let full = summary(small(&ds).build().unwrap().epoch(3));
    assert_eq!(full.len(), 4);

    // A loader that already ran another epoch, then is told to resume epoch 3 at 2.
    let loader = small(&ds).build().unwrap();
    assert_eq!(loader.epoch(0).count(), 4);
    let state = LoaderState {
        epoch: 3,
        position: 2,
        ..loader.state()
    };
    assert_eq!(
        (
            state.seed,
            state.batch_size,
            state.world_size,
            state.samples
        ),
        (5, Some(4), Some(1), Some(15))
    );
    assert_eq!(
        (state.drop_last, state.order),
        (Some(false), Some(Order::Global))
    );
    loader.load_state(state).unwrap();
    assert_eq!(loader.state(), state);
    assert_eq!(summary(loader.epoch(3)), full[2..]);
    assert_eq!(loader.state().epoch, 4);

    // Refused: another seed, a position past the end, an epoch being iterated.
    let err = loader
        .load_state(LoaderState { seed: 6, ..state })
        .unwrap_err();
    assert!(
        matches!(err, LoaderError::ResumeMismatch { field: "seed", .. }),
        "{err}"
    );
    let err = loader
        .load_state(LoaderState {
            position: 5,
            ..state
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LoaderError::ResumeMismatch {
                field: "position",
                ..
            }
        ),
        "{err}"
    );
    // What `position` counts must not change: another batch size, number of ranks or
    // dataset would repeat or skip samples. A state without them (written by hand, or
    // by a stoker that did not record them) is taken as is.
    for (field, changed) in [
        (
            "batch_size",
            LoaderState {
                batch_size: Some(2),
                ..state
            },
        ),
        (
            "world_size",
            LoaderState {
                world_size: Some(2),
                ..state
            },
        ),
        (
            "samples",
            LoaderState {
                samples: Some(16),
                ..state
            },
        ),
        // Another share per rank, and another order with the same seed.
        (
            "drop_last",
            LoaderState {
                drop_last: Some(true),
                ..state
            },
        ),
        (
            "order",
            LoaderState {
                order: Some(Order::Quasi { block: 2 }),
                ..state
            },
        ),
    ] {
        let err = loader.load_state(changed).unwrap_err();
        assert!(
            matches!(err, LoaderError::ResumeMismatch { field: f, .. } if f == field),
            "{err}"
        );
        assert!(err.to_string().contains(field), "{err}");
    }
    let bare = LoaderState {
        seed: 5,
        epoch: 3,
        position: 2,
        ..LoaderState::default()
    };
    loader.load_state(bare).unwrap();
    assert_eq!(loader.state(), state);
    let running = loader.epoch(4);
    let err = loader.load_state(state).unwrap_err();
    assert!(
        matches!(
            err,
            LoaderError::StateWhileIterating {
                running: 4,
                resumes: 3
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("load_state (to continue epoch 3) called while epoch 4"),
        "{err}"
    );
    drop(running);
}

#[test]
fn labels_export_as_a_host_int64_tensor() {
    let t = ManagedTensor::from_vec(vec![0i64, 2, 1]);
    assert_eq!(t.shape(), &[3]);
    assert_eq!(t.strides(), &[1]);
    assert_eq!((t.dtype().code, t.dtype().bits), (sys::K_DL_INT, 64));
}

#[test]
fn an_oversized_batch_size_or_prefetch_allocates_no_more_than_an_epoch_uses() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    // A Python caller's 2**31 once sized every ring buffer for that many images (and aborted).
    let loader = small(&ds)
        .batch_size(1 << 31)
        .prefetch(1 << 30)
        .workers(1)
        .build()
        .unwrap();
    let per_image = 3 * 24 * 24 * 4;
    // One batch per epoch: one buffer in flight plus the worker's, 15 images each.
    assert_eq!(loader.stats().host_bytes, 2 * 15 * per_image);
    let batches: Vec<_> = loader.epoch(0).map(Result::unwrap).collect();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].len(), 15);
}

#[test]
fn host_bytes_counts_the_buffers_of_kept_batches_until_they_are_freed() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let loader = small(&ds)
        .batch_size(2)
        .prefetch_next_epoch(false)
        .build()
        .unwrap();
    let buffer = 2 * 3 * 24 * 24 * 4;
    // The ring: prefetch 2 + workers 2.
    let ring = 4 * buffer;
    assert_eq!(loader.stats().host_bytes, ring);
    // A script keeping every batch (15 photos, 8 batches): the ring's 4 buffers are all
    // held, and the workers made one for each further batch. The figure stayed at the
    // ring's before, whatever the script held.
    let kept: Vec<_> = loader.epoch(0).map(Result::unwrap).collect();
    assert_eq!(kept.len(), 8);
    let held = loader.stats().host_bytes;
    assert!(held >= 8 * buffer, "{held}");
    // Exported to a tensor, a buffer still counts until the consumer releases it.
    let mut kept = kept.into_iter();
    let Images::Host(images) = kept.next().unwrap().images else {
        panic!("host images")
    };
    let tensor = images.into_dlpack();
    drop(kept);
    // The ring takes back what it has room for (all 4 places); the rest is freed and no
    // longer counted, but for the tensor's buffer, which is freed when released.
    assert_eq!(loader.stats().host_bytes, ring + buffer);
    drop(tensor);
    assert_eq!(loader.stats().host_bytes, ring);
}

#[test]
fn a_state_from_another_dataset_of_the_same_length_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    // The same 15 photos with one label changed: as long, not the same samples.
    let other_dir = tempfile::tempdir().unwrap();
    let other = relabelled_copy(&ds, other_dir.path());
    assert_eq!(other.len(), ds.len());

    let state = LoaderState {
        position: 2,
        ..small(&ds).build().unwrap().state()
    };
    let fingerprint = state.dataset.expect("the state names its dataset");
    // Text and JSON: 16 hex digits.
    let json = serde_json::to_string(&state).unwrap();
    assert!(
        json.contains(&format!(r#""dataset":"{fingerprint}""#)),
        "{json}"
    );
    assert_eq!(serde_json::from_str::<LoaderState>(&json).unwrap(), state);

    let err = small(&other).resume(state).build().unwrap_err();
    assert!(
        matches!(&err, LoaderError::ResumeMismatch { field: "dataset", got, .. } if *got == fingerprint.to_string()),
        "{err}"
    );
    let running = small(&other).build().unwrap();
    let err = running.load_state(state).unwrap_err();
    assert!(
        matches!(
            err,
            LoaderError::ResumeMismatch {
                field: "dataset",
                ..
            }
        ),
        "{err}"
    );
    // The same dataset, opened again (or moved), resumes; a state without a fingerprint
    // (an older stoker's) is taken as is.
    assert!(small(&Dataset::open(ds.root()).unwrap())
        .resume(state)
        .build()
        .is_ok());
    let older = LoaderState {
        dataset: None,
        ..state
    };
    running.load_state(older).unwrap();
}

/// `ds`'s records written again into `dir`, with record 0's label changed.
fn relabelled_copy(ds: &Dataset, dir: &std::path::Path) -> Dataset {
    use stoker_formats::{DatasetWriter, Provenance, RecordMeta, WriterOptions};
    let reader = ds.reader().unwrap();
    let mut w = DatasetWriter::create(dir, WriterOptions::default()).unwrap();
    for i in 0..ds.len() {
        let r = reader.get(i).unwrap();
        let h = r.header;
        let label = if i == 0 { (h.label + 1) % 3 } else { h.label };
        let meta = RecordMeta {
            encoding: h.encoding,
            height: h.height,
            width: h.width,
            channels: h.channels,
            label,
        };
        w.push(meta, r.payload).unwrap();
    }
    w.finish(
        ds.manifest().classes.clone(),
        Provenance::stoker("relabelled"),
    )
    .unwrap();
    Dataset::open(dir).unwrap()
}

#[test]
fn an_epoch_resumed_mid_way_counts_only_the_batches_left() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let loader = small(&ds).build().unwrap();
    assert_eq!(loader.num_batches(), 4);
    let mut fresh = loader.epoch(0);
    assert_eq!((fresh.len(), fresh.size_hint()), (4, (4, Some(4))));
    fresh.next().unwrap().unwrap();
    assert_eq!(fresh.len(), 3);
    drop(fresh);

    loader
        .load_state(LoaderState {
            epoch: 1,
            position: 3,
            ..loader.state()
        })
        .unwrap();
    let mut resumed = loader.epoch(1);
    assert_eq!(resumed.remaining(), 1);
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed.next().unwrap().unwrap().index, 3);
    assert_eq!(resumed.len(), 0);
    assert!(resumed.next().is_none());
    assert_eq!(resumed.len(), 0);
    drop(resumed);

    // An epoch that cannot start yields its one error.
    let _running = loader.epoch(2);
    let refused = loader.epoch(3);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused.count(), 1);
}
