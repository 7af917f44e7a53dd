//! Hostile arguments through the Rust API, as a crate embedding stoker calls it (the CLI
//! and Python sweeps never reach these: their own parsing stops such values first). Each
//! test is named after what a caller hit before the fix. Photos from the repository's
//! `examples/data/sample` (15 images).

mod common;

use std::time::Duration;

use common::sample_dataset;
use stoker_decode::GpuDecoderOptions;
use stoker_loader::{
    Device, Loader, LoaderError, LoaderState, Next, Output, Sampler, Shuffle, Transform,
};

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

#[test]
fn sampler_batch_len_past_u64_is_zero_not_an_overflow_panic() {
    let s = Sampler::new(10, Shuffle::Sequential, 1, 2, 4, false).unwrap();
    assert_eq!(s.batch_len(u64::MAX), 0);
    assert_eq!(s.batch_len(1), 1);
    let huge = Sampler::new(10, Shuffle::Sequential, 0, 1, u64::MAX, false).unwrap();
    assert_eq!((huge.batch_len(0), huge.batch_len(2)), (10, 0));
    // Past the share, saturated: still past the dataset, as a padding position is.
    assert_eq!(s.global_position(u64::MAX), u64::MAX);
}

#[test]
fn normalize_std_so_small_that_pixels_overflow_is_refused_not_infinite_batches() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    // std 1e-45 passed the "finite, nonzero" check and filled every batch with ±inf.
    for (mean, std) in [
        ([0.0; 3], [1e-45; 3]),
        ([f32::MAX; 3], [f32::MIN_POSITIVE; 3]),
    ] {
        let built = small(ds.clone())
            .transform(Transform::center_crop(8, 8).normalize(mean, std))
            .build();
        let Err(e) = built else {
            panic!("mean {mean:?} / std {std:?} was accepted");
        };
        assert!(
            matches!(&e, LoaderError::InvalidConfig { field: "transform", reason } if reason.contains("f32")),
            "{e}"
        );
    }
    // Fine in f32, infinite in f16: refused for F16Nchw only. bfloat16 holds f32's
    // exponent but a smaller largest value (about 3.39e38).
    let t = Transform::center_crop(8, 8).normalize([0.5; 3], [1e-6; 3]);
    let near_max = Transform::center_crop(8, 8).normalize([0.0; 3], [2.94e-39; 3]);
    for (output, transform) in [(Output::F16Nchw, t), (Output::Bf16Nchw, near_max)] {
        let built = small(ds.clone())
            .transform(transform)
            .output(output)
            .build();
        let named = format!("{output:?}");
        assert!(
            matches!(&built, Err(LoaderError::InvalidConfig { field: "transform", reason }) if reason.contains(&named)),
            "{:?}",
            built.err()
        );
    }
    let bf16 = small(ds.clone()).transform(t).output(Output::Bf16Nchw);
    let batch = bf16.build().unwrap().epoch(0).next().unwrap().unwrap();
    assert!(batch
        .images
        .as_bf16()
        .unwrap()
        .iter()
        .all(|v| v.is_finite()));
    let full = small(ds).transform(t).build().unwrap();
    let batch = full.epoch(0).next().unwrap().unwrap();
    assert!(batch.images.as_f32().unwrap().iter().all(|v| v.is_finite()));
}

#[test]
fn state_after_epoch_u64_max_does_not_replay_it_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let loader = small(ds.clone()).build().unwrap();
    assert_eq!(loader.epoch(u64::MAX).count(), 4);
    let state = loader.state();
    // Was (u64::MAX, 0): "epoch u64::MAX from its start", replayed in full on resume.
    assert_eq!((state.epoch, state.position), (u64::MAX, 4));
    let resumed = small(ds).resume(state).build().unwrap();
    assert_eq!(resumed.epoch(u64::MAX).count(), 0);
    let _: LoaderState = resumed.state();
}

#[test]
fn gpu_decoder_options_with_absurd_counts_are_refused_at_build() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    // Public fields set directly: a million CUDA states would be created one by one on
    // the GPU machine until its memory ran out; lanes past usize overflowed the thread
    // count. Refused for Auto too, so the same program fails alike on a CPU machine.
    for device in [Device::Cuda(0), Device::Auto] {
        let options = GpuDecoderOptions {
            cuda_states: 1_000_000,
            ..GpuDecoderOptions::default()
        };
        let built = small(ds.clone())
            .device(device)
            .gpu_decoder(options)
            .build();
        assert!(
            matches!(&built, Err(LoaderError::InvalidConfig { field: "gpu_decoder", reason }) if reason.contains("cuda_states")),
            "{device:?}: {:?}",
            built.err()
        );
    }
    // Ignored by the CPU path, as documented.
    let options = GpuDecoderOptions {
        hardware_lanes: usize::MAX,
        ..GpuDecoderOptions::default()
    };
    small(ds).gpu_decoder(options).build().unwrap();
}
