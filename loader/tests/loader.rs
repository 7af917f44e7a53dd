//! The loader end to end on real JPEGs from the bench set (`stoker_testdata`): order, coverage,
//! distribution, resume, bad records, shutdown, layouts and counters.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use common::{bench_dataset, bench_raw_dataset, fingerprint, sample_dataset, Broken};
use stoker_formats::Dataset;
use stoker_loader::half::bf16;
use stoker_loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
use stoker_loader::{
    Batch, DType, Device, Loader, LoaderBuilder, LoaderError, OnError, Output, Shuffle, Stage,
    Stats, Transform,
};

/// A small, fast configuration: 32×32 random resized crops with flips.
fn small(ds: &Dataset) -> LoaderBuilder {
    Loader::builder(ds.clone())
        .batch_size(8)
        .shuffle(Shuffle::Global { seed: 11 })
        .transform(Transform::random_resized_crop(32).hflip(0.5))
        .output(Output::U8Nhwc)
        .workers(2)
        .prefetch(3)
}

/// (batch index, dataset indices, labels, pixel fingerprint) of every batch of an epoch.
type Summary = Vec<(u64, Vec<u64>, Vec<u32>, u64)>;

fn summarize(batch: &Batch) -> (u64, Vec<u64>, Vec<u32>, u64) {
    let pixels = batch.images.as_u8().expect("u8 output");
    (
        batch.index,
        batch.indices.clone(),
        batch.labels.clone(),
        fingerprint(pixels),
    )
}

fn run_epoch(loader: &Loader, epoch: u64) -> Summary {
    loader
        .epoch(epoch)
        .map(|b| summarize(&b.expect("batch")))
        .collect()
}

#[test]
fn same_seed_and_epoch_give_the_same_batches_for_any_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 44, 16, &[]);
    // One builder, cloned per loader (as a user builds one loader per setting or rank).
    let base = small(&ds);
    let reference = run_epoch(&base.clone().workers(1).prefetch(1).build().unwrap(), 3);
    assert_eq!(reference.len(), 6); // 44 / 8 → 5 full + 1 partial
    for (workers, prefetch) in [(2, 2), (3, 5), (2, 8)] {
        let loader = base
            .clone()
            .workers(workers)
            .prefetch(prefetch)
            .build()
            .unwrap();
        assert_eq!(
            run_epoch(&loader, 3),
            reference,
            "workers={workers} prefetch={prefetch}"
        );
    }
    // Another epoch is a different order and different crops; the same epoch again is equal.
    let loader = small(&ds).build().unwrap();
    let other = run_epoch(&loader, 4);
    assert_ne!(
        other.iter().map(|b| &b.1).collect::<Vec<_>>(),
        reference.iter().map(|b| &b.1).collect::<Vec<_>>()
    );
    assert_eq!(run_epoch(&loader, 3), reference);
    // Labels come from the records (label = index % 5 in this dataset).
    for (_, indices, labels, _) in &reference {
        for (i, l) in indices.iter().zip(labels) {
            assert_eq!(u64::from(*l), i % 5);
        }
    }
}

#[test]
fn every_sample_appears_exactly_once_per_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 45, 20, &[]);
    for shuffle in [
        Shuffle::Global { seed: 11 },
        Shuffle::Quasi { seed: 11, block: 4 },
        Shuffle::Sequential,
    ] {
        let loader = small(&ds).shuffle(shuffle).build().unwrap();
        for epoch in 0..2 {
            let mut all: Vec<u64> = run_epoch(&loader, epoch)
                .into_iter()
                .flat_map(|b| b.1)
                .collect();
            if shuffle == Shuffle::Sequential {
                assert_eq!(all, (0..45).collect::<Vec<_>>(), "sequential epoch {epoch}");
            }
            all.sort_unstable();
            assert_eq!(
                all,
                (0..45).collect::<Vec<_>>(),
                "{shuffle:?} epoch {epoch}"
            );
        }
    }
    let loader = small(&ds).drop_last(true).build().unwrap();
    let batches = run_epoch(&loader, 0);
    assert_eq!(batches.len(), 5);
    assert!(batches.iter().all(|b| b.1.len() == 8));
    let distinct: HashSet<u64> = batches.iter().flat_map(|b| b.1.clone()).collect();
    assert_eq!(distinct.len(), 40);
}

#[test]
fn ranks_are_disjoint_with_equal_batch_counts() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 46, 23, &[]);
    for (world, drop_last) in [(2usize, false), (3, false), (3, true), (4, false)] {
        let per_rank: Vec<Summary> = (0..world)
            .map(|rank| {
                run_epoch(
                    &small(&ds)
                        .distributed(rank, world)
                        .drop_last(drop_last)
                        .build()
                        .unwrap(),
                    2,
                )
            })
            .collect();
        let counts: Vec<usize> = per_rank.iter().map(Vec::len).collect();
        assert!(
            counts.iter().all(|&c| c == counts[0]),
            "world {world}: batch counts {counts:?}"
        );
        let sizes: Vec<Vec<usize>> = per_rank
            .iter()
            .map(|r| r.iter().map(|b| b.1.len()).collect())
            .collect();
        assert!(
            sizes.iter().all(|s| *s == sizes[0]),
            "world {world}: batch sizes {sizes:?}"
        );
        let sets: Vec<BTreeSet<u64>> = per_rank
            .iter()
            .map(|r| r.iter().flat_map(|b| b.1.clone()).collect())
            .collect();
        let union: BTreeSet<u64> = sets.iter().flatten().copied().collect();
        let total: usize = sets.iter().map(BTreeSet::len).sum();
        if drop_last || 46 % world == 0 {
            assert_eq!(total, union.len(), "world {world}: ranks overlap");
        } else {
            // Wrap-around padding repeats at most world − 1 samples.
            assert!(
                total - union.len() < world,
                "world {world}: too much overlap"
            );
        }
        if !drop_last {
            assert_eq!(union, (0..46).collect(), "world {world}: samples missing");
        }
    }
}

#[test]
fn resume_mid_epoch_reproduces_the_rest_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 60, 25, &[]);
    let full = run_epoch(&small(&ds).build().unwrap(), 5);

    let first = small(&ds).build().unwrap();
    let mut it = first.epoch(5);
    let head: Summary = it
        .by_ref()
        .take(3)
        .map(|b| summarize(&b.unwrap()))
        .collect();
    drop(it);
    let state = first.state();
    assert_eq!((state.epoch, state.position), (5, 3));
    assert_eq!(head, full[..3]);
    drop(first);

    // A checkpoint round trip, as a training script would do it.
    let state = serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
    let resumed = small(&ds).workers(1).resume(state).build().unwrap();
    let tail = run_epoch(&resumed, 5);
    assert_eq!(tail, full[3..]);
    assert_eq!(resumed.state().epoch, 6);
    assert_eq!(resumed.state().position, 0);
    // The next epoch starts from the beginning.
    assert_eq!(run_epoch(&resumed, 6).len(), full.len());

    // A state from another seed is refused.
    let err = small(&ds)
        .shuffle(Shuffle::Global { seed: 12 })
        .resume(state)
        .build()
        .unwrap_err();
    assert!(
        matches!(err, LoaderError::ResumeMismatch { field: "seed", .. }),
        "{err}"
    );
}

#[test]
fn bad_records_are_replaced_counted_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let broken = [
        (3, Broken::Garbage),
        (17, Broken::BadCrc),
        (30, Broken::Garbage),
    ];
    let ds = bench_dataset(dir.path(), 40, 15, &broken);
    let loader = small(&ds).build().unwrap();
    let batches = run_epoch(&loader, 0);
    assert_eq!(batches.len(), 5);
    assert!(
        batches.iter().all(|b| b.1.len() == 8),
        "a batch is not full"
    );
    let used: HashSet<u64> = batches.iter().flat_map(|b| b.1.clone()).collect();
    for (bad, _) in broken {
        assert!(
            !used.contains(&(bad as u64)),
            "bad record {bad} was yielded"
        );
    }
    let stats = loader.stats();
    assert_eq!((stats.bad_records, stats.bad_distinct), (3, 3), "{stats}");
    let mut bad_indices = stats.bad_indices.clone();
    bad_indices.sort_unstable();
    assert_eq!(bad_indices, vec![3, 17, 30]);
    assert!(stats.to_string().contains("bad records: 3 met, 3 distinct"));
    // A second epoch meets the same three again (and a replacement, drawn at random from
    // the whole epoch, may meet one of them once more): more met, no more distinct.
    assert_eq!(run_epoch(&loader, 1).len(), 5);
    let stats = loader.stats();
    assert!(stats.bad_records >= 6, "{stats}");
    assert_eq!(stats.bad_distinct, 3, "{stats}");

    // With OnError::Error the batches holding them are errors naming the record; the others
    // come through and the epoch still ends.
    let strict = small(&ds).on_error(OnError::Error).build().unwrap();
    let (mut ok, mut errors) = (0, Vec::new());
    for item in strict.epoch(0) {
        match item {
            Ok(_) => ok += 1,
            Err(e) => errors.push(e.record_index().expect("names a record")),
        }
    }
    errors.sort_unstable();
    let order = strict.sampler().order(0);
    let bad_batches: BTreeSet<usize> = broken
        .iter()
        .map(|(b, _)| order.iter().position(|&i| i == *b as u64).unwrap() / 8)
        .collect();
    assert_eq!(ok + errors.len(), 5);
    assert_eq!(errors.len(), bad_batches.len());
    assert_eq!(
        strict.stats().bad_records,
        errors.len() as u64,
        "one bad record per failed batch (the early start of epoch 1 counts nothing yet)"
    );
    assert!(errors
        .iter()
        .all(|i| broken.iter().any(|(b, _)| *b as u64 == *i)));
}

#[test]
fn dropping_mid_epoch_returns_promptly_and_the_loader_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 120, 40, &[]);
    let loader = Loader::builder(ds.clone())
        .batch_size(16)
        .transform(
            Transform::random_resized_crop(224)
                .hflip(0.5)
                .normalize(IMAGENET_MEAN, IMAGENET_STD),
        )
        .output(Output::F32Nchw)
        .workers(2)
        .prefetch(4)
        .build()
        .unwrap();
    let mut it = loader.epoch(0);
    let first = it.next().unwrap().unwrap();
    assert_eq!(first.images.host().unwrap().shape(), [16, 3, 224, 224]);
    // Liveness bound, not a performance figure: workers stop between two images.
    let t = Instant::now();
    drop(it);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "epoch drop took {:?}",
        t.elapsed()
    );
    // While an epoch is alive, another one is refused.
    let it = loader.epoch(1);
    let mut second = loader.epoch(2);
    assert!(matches!(
        second.next(),
        Some(Err(LoaderError::EpochInProgress {
            running: 1,
            requested: 2
        }))
    ));
    assert!(second.next().is_none());
    drop(second);
    drop(it);
    // The loader still works after an abandoned epoch.
    let n: usize = loader.epoch(3).take(2).map(|b| b.unwrap().len()).sum();
    assert_eq!(n, 32);
    drop(first);
    let mut it = loader.epoch(4);
    let _ = it.next();
    let t = Instant::now();
    drop(it);
    drop(loader);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "loader drop took {:?}",
        t.elapsed()
    );
}

#[test]
fn layouts_and_dtypes_hold_the_same_pixels() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 12, 12, &[]);
    let (mean, std) = (IMAGENET_MEAN, IMAGENET_STD);
    let build = |output| {
        small(&ds)
            .batch_size(4)
            .transform(
                Transform::random_resized_crop(24)
                    .hflip(0.5)
                    .normalize(mean, std),
            )
            .output(output)
            .build()
            .unwrap()
    };
    let u8s: Vec<Batch> = build(Output::U8Nhwc).epoch(0).map(Result::unwrap).collect();
    let f32s: Vec<Batch> = build(Output::F32Nchw)
        .epoch(0)
        .map(Result::unwrap)
        .collect();
    let f16s: Vec<Batch> = build(Output::F16Nchw)
        .epoch(0)
        .map(Result::unwrap)
        .collect();
    // Channels last: the same values, interleaved.
    let f32_last: Vec<Batch> = build(Output::F32Nhwc)
        .epoch(0)
        .map(Result::unwrap)
        .collect();
    let f16_last: Vec<Batch> = build(Output::F16Nhwc)
        .epoch(0)
        .map(Result::unwrap)
        .collect();
    // bfloat16: each f32 value rounded to nearest even, in both layouts.
    for (output, f32_like) in [(Output::Bf16Nchw, &f32s), (Output::Bf16Nhwc, &f32_last)] {
        let bf16s: Vec<Batch> = build(output).epoch(0).map(Result::unwrap).collect();
        assert_eq!(bf16s.len(), f32_like.len());
        for (b, f) in bf16s.iter().zip(f32_like) {
            assert_eq!(b.indices, f.indices);
            let host = b.images.host().unwrap();
            assert_eq!(host.dtype(), DType::Bf16);
            assert_eq!(host.shape(), f.images.host().unwrap().shape(), "{output:?}");
            let want: Vec<bf16> = f
                .images
                .as_f32()
                .unwrap()
                .iter()
                .map(|&v| bf16::from_f32(v))
                .collect();
            assert_eq!(b.images.as_bf16().unwrap(), &want[..], "{output:?}");
        }
    }
    let s = 24;
    for (k, a) in u8s.iter().enumerate() {
        let (b, c, d, e) = (&f32s[k], &f16s[k], &f32_last[k], &f16_last[k]);
        for other in [b, c, d, e] {
            assert_eq!(a.indices, other.indices);
        }
        assert_eq!(a.images.host().unwrap().shape(), [4, s, s, 3]);
        assert_eq!(b.images.host().unwrap().shape(), [4, 3, s, s]);
        assert_eq!(d.images.host().unwrap().shape(), [4, s, s, 3]);
        assert_eq!(e.images.host().unwrap().shape(), [4, s, s, 3]);
        let (px, fx, hx) = (
            a.images.as_u8().unwrap(),
            b.images.as_f32().unwrap(),
            c.images.as_f16().unwrap(),
        );
        let (fl, hl) = (d.images.as_f32().unwrap(), e.images.as_f16().unwrap());
        for n in 0..4 {
            for ch in 0..3 {
                for y in 0..s {
                    for x in 0..s {
                        let last = ((n * s + y) * s + x) * 3 + ch;
                        let v = px[last];
                        let want = (f32::from(v) / 255.0 - mean[ch]) / std[ch];
                        let i = ((n * 3 + ch) * s + y) * s + x;
                        assert!((fx[i] - want).abs() < 1e-5, "f32 at {n},{ch},{y},{x}");
                        assert!(
                            (hx[i].to_f32() - want).abs() < 4e-3,
                            "f16 at {n},{ch},{y},{x}"
                        );
                        assert_eq!(fl[last], fx[i], "f32 channels last at {n},{ch},{y},{x}");
                        assert_eq!(hl[last], hx[i], "f16 channels last at {n},{ch},{y},{x}");
                    }
                }
            }
        }
    }
    // The images are real photographs, not a constant fill.
    let px = u8s[0].images.as_u8().unwrap();
    let distinct: HashSet<u8> = px.iter().copied().collect();
    assert!(distinct.len() > 64);
}

/// The JPEG path decodes each image only down to its crop's bottom edge: its batches
/// are exactly those of the same images stored fully decoded (raw records), for random
/// resized crops with flips and for eval center crops.
#[test]
fn jpeg_batches_equal_batches_of_the_fully_decoded_images() {
    let (jpeg_dir, raw_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let n = 40;
    let jpeg = bench_dataset(jpeg_dir.path(), n, 16, &[]);
    let raw = bench_raw_dataset(raw_dir.path(), n);
    for transform in [
        Transform::random_resized_crop(64).hflip(0.5),
        Transform::center_crop(64, 73),
    ] {
        let run = |ds: &Dataset| {
            let loader = small(ds).transform(transform).build().unwrap();
            run_epoch(&loader, 2)
        };
        let (from_jpeg, from_raw) = (run(&jpeg), run(&raw));
        assert_eq!(from_jpeg.len(), 5);
        assert_eq!(from_jpeg, from_raw, "{transform:?}");
    }
}

#[test]
fn eval_center_crop_of_a_raw_dataset_is_the_exact_pixels() {
    // Raw records skip decoding; a center crop the size of the image is the identity, and
    // grayscale records come out as R = G = B.
    let dir = tempfile::tempdir().unwrap();
    let mut w =
        stoker_formats::DatasetWriter::create(dir.path(), stoker_formats::WriterOptions::default())
            .unwrap();
    let (width, height) = (40u32, 40u32);
    let pattern = |i: u32| -> Vec<u8> {
        (0..width * height * 3)
            .map(|k| (k * 7 + i * 31) as u8)
            .collect()
    };
    for i in 0..6u32 {
        let meta = stoker_formats::RecordMeta {
            encoding: stoker_formats::Encoding::Raw,
            height,
            width,
            channels: 3,
            label: i,
        };
        w.push(meta, &pattern(i)).unwrap();
    }
    let classes = (0..6).map(|c| c.to_string()).collect();
    w.finish(classes, stoker_formats::Provenance::stoker("synthetic raw"))
        .unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    let loader = Loader::builder(ds)
        .batch_size(3)
        .shuffle(Shuffle::Sequential)
        .transform(Transform::center_crop(40, 40))
        .output(Output::U8Nhwc)
        .workers(2)
        // The route count below is exact only without epoch 1's early start, whose
        // first batches are decoded (and counted) once epoch 0's last one is handed out.
        .prefetch_next_epoch(false)
        .build()
        .unwrap();
    let batches: Vec<Batch> = loader.epoch(0).map(Result::unwrap).collect();
    assert_eq!(batches.len(), 2);
    for b in &batches {
        let px = b.images.as_u8().unwrap();
        for (slot, &index) in b.indices.iter().enumerate() {
            let n = (width * height * 3) as usize;
            assert_eq!(
                &px[slot * n..(slot + 1) * n],
                &pattern(index as u32)[..],
                "record {index}"
            );
            assert_eq!(b.labels[slot] as u64, index);
        }
    }
    assert_eq!(loader.stats().decode_routes.get("raw"), Some(&6));
}

#[test]
fn stats_count_every_stage_and_end_with_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 24, 24, &[]);
    // Exact stage counts: without epoch 1's early start, whose reads and decodes
    // would be counted too.
    let loader = small(&ds).prefetch_next_epoch(false).build().unwrap();
    for batch in loader.epoch(0) {
        let batch = batch.unwrap();
        // A consumer that is slower than nothing at all.
        std::hint::black_box(
            batch
                .images
                .as_u8()
                .unwrap()
                .iter()
                .map(|&v| u64::from(v))
                .sum::<u64>(),
        );
    }
    let stats = loader.stats();
    assert_eq!((stats.images, stats.batches, stats.epochs), (24, 3, 1));
    for stage in [Stage::Read, Stage::Decode, Stage::Transform, Stage::Handoff] {
        assert_eq!(
            stats
                .stage(stage)
                .unwrap_or_else(|| panic!("{stage:?} missing"))
                .items,
            24,
            "{stage:?}"
        );
    }
    assert!(stats.stage(Stage::Read).unwrap().bytes > 24 * 10_000);
    assert_eq!(stats.decode_routes.values().sum::<u64>(), 24);
    assert!(
        stats.decode_routes.contains_key("cpu-zune"),
        "{:?}",
        stats.decode_routes
    );
    assert!((0.0..=1.0).contains(&stats.fed_ratio));
    assert!(stats.elapsed_s > 0.0 && stats.consumer_wait_s <= stats.elapsed_s);
    assert!(stats.host_bytes >= (2 + 3) * 8 * 32 * 32 * 3);
    let text = stats.to_string();
    assert!(
        text.lines()
            .last()
            .unwrap()
            .trim_start()
            .starts_with("verdict:"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&stats.to_json()).unwrap();
    assert_eq!(json["images"], 24);
    assert!(stats
        .to_prometheus()
        .contains("stoker_loader_images_total 24"));
    loader.reset_stats();
    assert_eq!(loader.stats().images, 0);
}

#[test]
fn bad_settings_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 4, 4, &[]);
    let cases: Vec<(LoaderBuilder, &str)> = vec![
        (small(&ds).batch_size(0), "batch_size"),
        (small(&ds).prefetch(0), "prefetch"),
        (small(&ds).workers(0), "workers"),
        (small(&ds).distributed(2, 2), "distributed"),
        (
            small(&ds).transform(Transform::random_resized_crop(0)),
            "transform",
        ),
        (
            small(&ds).shuffle(Shuffle::Quasi { seed: 0, block: 0 }),
            "shuffle",
        ),
    ];
    for (builder, field) in cases {
        match builder.build() {
            Err(LoaderError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: expected InvalidConfig, got {other:?}"),
        }
    }
    // Without a GPU, asking for one is a clear error, never a panic.
    if !std::path::Path::new("/dev/nvidia0").exists() {
        let err = small(&ds).device(Device::Cuda(0)).build().unwrap_err();
        assert!(matches!(err, LoaderError::GpuUnavailable { .. }), "{err}");
        // Auto falls back to the CPU.
        let loader = small(&ds).device(Device::Auto).build().unwrap();
        assert_eq!(run_epoch(&loader, 0).len(), 1);
        // ... and says so in its stats, with the reason.
        let backend = loader.stats().backend;
        assert!(
            backend.starts_with("cpu") && backend.contains("device auto fell back"),
            "{backend}"
        );
        assert!(small(&ds)
            .build()
            .unwrap()
            .stats()
            .backend
            .starts_with("cpu, "));
    } else {
        println!("skipped the no-GPU checks: /dev/nvidia0 exists");
    }
}

#[test]
fn loader_is_send_and_sync_and_batches_are_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Loader>();
    send::<Batch>();
    send::<LoaderError>();
}

#[test]
fn a_consumer_that_keeps_every_batch_does_not_stall_the_ring() {
    // The ring has prefetch + workers = 2 buffers; keeping all 20 batches forces the
    // pipeline to allocate past it (and free the extras when they come back) instead of
    // waiting forever for a buffer the consumer never returns.
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 40, 40, &[]);
    let loader = small(&ds)
        .batch_size(2)
        .workers(1)
        .prefetch(1)
        .build()
        .unwrap();
    let kept: Vec<Batch> = loader.epoch(0).map(Result::unwrap).collect();
    assert_eq!(kept.len(), 20);
    let fingerprints: HashSet<u64> = kept
        .iter()
        .map(|b| fingerprint(b.images.as_u8().unwrap()))
        .collect();
    assert_eq!(fingerprints.len(), 20, "two kept batches share a buffer");
    drop(kept);
    assert_eq!(run_epoch(&loader, 1).len(), 20);
}

#[test]
fn distributed_from_env_reads_rank_and_world_size() {
    // The environment is per process: the checks run in child processes of this test binary.
    const CHILD: &str = "STOKER_LOADER_TEST_ENV_CHILD";
    const NAME: &str = "distributed_from_env_reads_rank_and_world_size";
    match std::env::var(CHILD).as_deref() {
        Ok("good") => {
            let dir = tempfile::tempdir().unwrap();
            let ds = bench_dataset(dir.path(), 12, 12, &[]);
            let loader = small(&ds).distributed_from_env().build().unwrap();
            let want =
                stoker_loader::Sampler::new(12, Shuffle::Global { seed: 11 }, 1, 3, 8, false)
                    .unwrap();
            assert_eq!(loader.sampler(), &want);
            let got: Vec<u64> = run_epoch(&loader, 0)
                .into_iter()
                .flat_map(|b| b.1)
                .collect();
            assert_eq!(got, want.order(0));
        }
        Ok("bad") => {
            let dir = tempfile::tempdir().unwrap();
            let ds = bench_dataset(dir.path(), 4, 4, &[]);
            let err = small(&ds).distributed_from_env().build().unwrap_err();
            assert!(
                matches!(
                    err,
                    LoaderError::LauncherEnv {
                        problem: stoker_loader::launcher::EnvProblem::NotAnInteger,
                        ..
                    }
                ),
                "{err}"
            );
            assert!(err.to_string().contains("RANK=\"one\""), "{err}");
        }
        _ => {
            let exe = std::env::current_exe().unwrap();
            for (mode, rank, world) in [("good", "1", "3"), ("bad", "one", "3")] {
                let out = std::process::Command::new(&exe)
                    .args(["--exact", NAME, "--test-threads=1"])
                    .env(CHILD, mode)
                    .env("RANK", rank)
                    .env("WORLD_SIZE", world)
                    .output()
                    .unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(out.status.success(), "{mode} child failed:\n{stdout}");
                assert!(
                    stdout.contains("1 passed"),
                    "{mode} child ran no test:\n{stdout}"
                );
            }
        }
    }
}

/// Regression: `reset_stats()` mid-epoch used to leave the time before the reset in the
/// epoch's elapsed time (counted from the iterator's creation) while the wait was zeroed,
/// so the fed ratio came out too high; and a snapshot mid-epoch had no elapsed time at all.
#[test]
fn reset_stats_mid_epoch_counts_only_time_after_the_reset() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 24, 24, &[]);
    let loader = small(&ds).build().unwrap();
    let mut epoch = loader.epoch(0);
    epoch.next().unwrap().unwrap();
    // Consumer work before the reset: must not be counted after it.
    std::thread::sleep(Duration::from_millis(300));
    loader.reset_stats();
    let since_reset = Instant::now();
    epoch.next().unwrap().unwrap();
    let mid = loader.stats();
    assert!(mid.elapsed_s > 0.0, "a snapshot mid-epoch has elapsed time");
    assert!(mid.consumer_wait_s <= mid.elapsed_s + 1e-9, "{mid:?}");
    for batch in epoch.by_ref() {
        batch.unwrap();
    }
    drop(epoch);
    let wall = since_reset.elapsed().as_secs_f64();
    let stats = loader.stats();
    assert!(
        stats.elapsed_s <= wall + 1e-3,
        "elapsed {:.3} s counts time before the reset (only {wall:.3} s since)",
        stats.elapsed_s
    );
    assert!(stats.consumer_wait_s <= stats.elapsed_s + 1e-9);
}

#[test]
fn the_next_epoch_starts_early_and_gives_the_same_batches() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 20, 20, &[]);
    let early = small(&ds).build().unwrap();
    let plain = small(&ds).prefetch_next_epoch(false).build().unwrap();
    for epoch in 0..3 {
        assert_eq!(
            run_epoch(&early, epoch),
            run_epoch(&plain, epoch),
            "epoch {epoch}: an early start must not change a batch"
        );
    }
    assert_eq!(early.stats().epochs_started_early, 2, "epochs 1 and 2");
    assert_eq!(plain.stats().epochs_started_early, 0);
    assert_eq!(early.stats().epochs, 3);

    // Asking for another epoch than the next one discards the early start.
    assert_eq!(run_epoch(&early, 7), run_epoch(&plain, 7));
    assert_eq!(early.stats().epochs_started_early, 2);
    // ... and the one after it is early again.
    assert_eq!(run_epoch(&early, 8), run_epoch(&plain, 8));
    assert_eq!(early.stats().epochs_started_early, 3);
    assert_eq!(early.state().epoch, 9);
}

/// Epochs of a few batches: the workers claim the last batches of an epoch before the
/// consumer takes them, and the next epoch starts then, beside them, sharing the prefetch
/// window. The batches are those of a loader that starts each epoch after the last, for
/// each setting tried (more workers than batches, a window of one batch, many small
/// batches), also with a bad record replaced and with batches kept across the epochs'
/// ends (the ring then runs dry).
#[test]
fn epochs_started_beside_the_last_batches_of_the_one_before_give_the_same_batches() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 21, 21, &[(4, Broken::Garbage)]);
    for (workers, prefetch, batch) in [(4, 3, 8), (3, 1, 8), (4, 8, 2), (2, 3, 16)] {
        let build = |early| {
            small(&ds)
                .workers(workers)
                .prefetch(prefetch)
                .batch_size(batch)
                .prefetch_next_epoch(early)
                .build()
                .unwrap()
        };
        let (overlapping, plain) = (build(true), build(false));
        let mut kept = Vec::new();
        for epoch in 0..12 {
            let mut got = Vec::new();
            for b in overlapping.epoch(epoch) {
                let b = b.expect("batch");
                got.push(summarize(&b));
                if epoch % 3 == 0 {
                    kept.push(b);
                }
            }
            assert_eq!(
                got,
                run_epoch(&plain, epoch),
                "epoch {epoch} with {workers} workers, prefetch {prefetch}, batches of {batch}"
            );
            if epoch % 3 == 1 {
                kept.clear();
            }
        }
        assert_eq!(overlapping.stats().epochs_started_early, 11);
        assert!(overlapping.cancel_prefetch(), "epoch 12 had started");
    }
}

/// A bad record counts when the batch it was met in is handed out: the batches of
/// an early start that is cancelled count nothing, and a record counts once per
/// epoch that hands it out.
#[test]
fn bad_records_count_when_their_batch_is_handed_out() {
    let dir = tempfile::tempdir().unwrap();
    // 3 batches of 8 with prefetch 3: the early start of epoch 1 builds all of it.
    let ds = bench_dataset(dir.path(), 24, 24, &[(5, Broken::Garbage)]);
    let loader = small(&ds).build().unwrap();
    let reads = || loader.stats().stage(Stage::Read).map_or(0, |s| s.items);
    assert_eq!(run_epoch(&loader, 0).len(), 3);
    // Each epoch reads its 24 records and one replacement.
    let epoch_reads = 25;
    assert!(reads() >= epoch_reads);
    // Epoch 1 has started early and may have met the bad record already.
    assert_eq!(loader.stats().bad_records, 1);
    // Wait until the early start has read all of epoch 1, bad record included.
    let deadline = Instant::now() + Duration::from_secs(20);
    while reads() < 2 * epoch_reads && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(reads(), 2 * epoch_reads, "the early start built epoch 1");
    assert!(loader.cancel_prefetch());
    let s = loader.stats();
    assert_eq!(
        (s.bad_records, s.bad_indices.clone()),
        (1, vec![5]),
        "batches never handed out count nothing: {s}"
    );
    assert_eq!(run_epoch(&loader, 1).len(), 3);
    let s = loader.stats();
    assert_eq!(
        (s.bad_records, s.bad_indices),
        (2, vec![5]),
        "once per epoch"
    );
}

/// After the last epoch the early start of the next one can be stopped; a
/// later call to that epoch still gives the same batches, from a cold start.
#[test]
fn cancel_prefetch_stops_the_early_start_and_changes_no_batch() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 20, 20, &[]);
    let early = small(&ds).build().unwrap();
    let plain = small(&ds).prefetch_next_epoch(false).build().unwrap();
    assert!(!early.cancel_prefetch(), "nothing started before any epoch");
    assert_eq!(run_epoch(&early, 0), run_epoch(&plain, 0));
    assert!(early.cancel_prefetch(), "epoch 1 had started early");
    assert!(!early.cancel_prefetch(), "and is gone");
    assert!(!plain.cancel_prefetch());
    assert_eq!(run_epoch(&early, 1), run_epoch(&plain, 1));
    assert_eq!(
        early.stats().epochs_started_early,
        0,
        "the cancelled start was not used"
    );
    assert_eq!(run_epoch(&early, 2), run_epoch(&plain, 2));
    assert_eq!(early.stats().epochs_started_early, 1, "epoch 2 was");
}

#[test]
fn an_early_started_epoch_has_batches_ready_when_the_consumer_asks() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 16, 16, &[]);
    let loader = small(&ds).build().unwrap();
    let _ = run_epoch(&loader, 0);
    // The consumer works on epoch 0's last batch meanwhile.
    std::thread::sleep(Duration::from_millis(1500));
    loader.reset_stats();
    let mut epoch = loader.epoch(1);
    let first = epoch.next().expect("a batch").expect("no error");
    assert_eq!(first.index, 0);
    let s = loader.stats();
    assert!(
        s.queue_max >= 1,
        "epoch 1's first batch should have been finished before it was asked for: {s}"
    );
    drop(epoch);
    // A resumed loader does not start early before its resume state is used.
    let resumed = small(&ds)
        .resume(stoker_loader::LoaderState {
            seed: 11,
            epoch: 1,
            position: 1,
            ..Default::default()
        })
        .build()
        .unwrap();
    let _ = run_epoch(&resumed, 1);
    assert_eq!(run_epoch(&resumed, 2), run_epoch(&loader, 2));
    assert_eq!(resumed.stats().epochs_started_early, 1, "epoch 2");
}

/// Cuts `shard` to its first two pages, as `cp` over it does while it is read.
fn cut_short(shard: &std::path::Path) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(shard)
        .unwrap()
        .set_len(8192)
        .unwrap();
}

/// Set in a child process that runs one test alone.
const SIGBUS_CHILD: &str = "STOKER_TEST_SIGBUS_CHILD";

/// Outside the child: runs test `name` in a child process of its own (a test that sets
/// the process's SIGBUS handler, and that a failure kills), checks that it passed, and
/// returns true. In the child: false, and the test runs.
fn ran_in_a_child(name: &str) -> bool {
    if std::env::var_os(SIGBUS_CHILD).is_some() {
        return false;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env(SIGBUS_CHILD, "1")
        .output()
        .unwrap();
    let text = format!(
        "{:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child died: {text}");
    assert!(text.contains("1 passed"), "the child ran no test: {text}");
    true
}

/// `cp` over a dataset while it is read (or the storage failing under a mapped page): the
/// records the loader could not read are replaced and counted, the process lives on, and
/// the next epoch is refused until the dataset is opened again.
#[test]
fn a_shard_cut_short_mid_epoch_loses_its_records_not_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 64, 16, &[]);
    let loader = small(&ds).workers(1).prefetch(1).build().unwrap();
    let mut epoch = loader.epoch(0);
    let first = epoch.next().unwrap().unwrap();
    assert_eq!(loader.stats().bad_records, 0);
    cut_short(&dir.path().join("shard-00002.lmdb"));
    let rest: Vec<Batch> = epoch.map(|b| b.expect("replaced, not failed")).collect();
    assert_eq!(1 + rest.len(), 8);
    assert!(rest.iter().all(|b| b.indices.len() == 8));
    drop(first);
    let stats = loader.stats();
    assert!(stats.bad_records > 0, "{stats}");
    assert!(
        stats.bad_indices.iter().all(|&i| ds.shard_of(i) == Some(2)),
        "{:?}",
        stats.bad_indices
    );
    let e = loader.epoch(1).next().unwrap().unwrap_err();
    assert!(e.to_string().contains("shard-00002.lmdb"), "{e}");
}

/// A SIGBUS handler installed mid-epoch (Python's `faulthandler.enable()`, a user's
/// `signal.signal`) took shard read faults away from the guard: a shard cut short later in
/// the epoch then killed the process. The loader's reads put the guard back in front. Run
/// in a child process: the handler is the whole process's, and a failure kills it.
#[test]
fn a_sigbus_handler_installed_mid_epoch_does_not_take_shard_faults_away() {
    const NAME: &str = "a_sigbus_handler_installed_mid_epoch_does_not_take_shard_faults_away";
    if ran_in_a_child(NAME) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 64, 16, &[]);
    let loader = small(&ds).workers(1).prefetch(1).build().unwrap();
    let mut epoch = loader.epoch(0);
    let mut held = vec![epoch.next().unwrap().unwrap()];
    // Another library's handler, which does not pass faults on: the default, death.
    // SAFETY: SIG_DFL is a valid disposition for SIGBUS; the child runs this test alone.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
    // The guard comes back before a record's read. The cut waits until more batches were
    // taken than can be in flight (1 ready, 1 being built, 1 handed over), so that records
    // were read since the handler was replaced whatever the threads' timing.
    for _ in 0..3 {
        held.push(epoch.next().unwrap().unwrap());
    }
    cut_short(&dir.path().join("shard-00002.lmdb"));
    let rest: Vec<Batch> = epoch.map(|b| b.expect("replaced, not failed")).collect();
    assert_eq!(held.len() + rest.len(), 8);
    drop(held);
    assert!(loader.stats().bad_records > 0);
}

/// Records the loader has read so far (its read stage's count, which grows as a batch is
/// read, record by record).
fn records_read(loader: &Loader) -> u64 {
    let stats = loader.stats();
    let read = stats.stages.iter().find(|s| s.stage == Stage::Read);
    read.map_or(0, |s| s.items)
}

/// Waits until the loader has read more than `n` records.
fn wait_until_read_past(loader: &Loader, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let read = records_read(loader);
        if read > n {
            return read;
        }
        assert!(Instant::now() < deadline, "stuck at {read} records read");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A SIGBUS handler installed while a batch is being read: the records that batch reads
/// afterwards are guarded too (the guard comes back before each record's read, not only
/// before each batch's, at most a refresh interval late). With the guard put back per batch, the shard cut short here, in
/// the batch's second half, killed the process. In a child process, as above.
#[test]
fn a_sigbus_handler_installed_mid_batch_does_not_take_the_rest_of_its_faults_away() {
    const NAME: &str =
        "a_sigbus_handler_installed_mid_batch_does_not_take_the_rest_of_its_faults_away";
    if ran_in_a_child(NAME) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // One batch of the whole dataset, read in order by one worker: shard 3 holds its last
    // 16 records.
    let ds = bench_dataset(dir.path(), 64, 16, &[]);
    let loader = small(&ds)
        .batch_size(64)
        .shuffle(Shuffle::Sequential)
        .workers(1)
        .prefetch(1)
        .build()
        .unwrap();
    let mut epoch = loader.epoch(0);
    wait_until_read_past(&loader, 1);
    // SAFETY: SIG_DFL is a valid disposition for SIGBUS; the child runs this test alone.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
    // The reader puts the guard back in front before a record's read, once a check is
    // older than the refresh interval: after a record read once that time has passed.
    std::thread::sleep(2 * stoker_formats::READ_FAULT_HANDLER_REFRESH);
    let replaced_at = records_read(&loader);
    wait_until_read_past(&loader, replaced_at);
    cut_short(&dir.path().join("shard-00003.lmdb"));
    // Shard 3 holds records 48 to 63: none read before the cut, or the test proves nothing.
    let cut_at = records_read(&loader);
    assert!(
        cut_at < 48,
        "the batch was read too fast to cut mid-batch ({cut_at} read)"
    );
    let batch = epoch.next().unwrap().expect("replaced, not failed");
    assert_eq!(batch.indices.len(), 64);
    assert!(epoch.next().is_none());
    assert!(loader.stats().bad_records > 0);
}

#[test]
fn the_uneven_tail_cut_with_the_partial_batch_kept() {
    // What a validation epoch wants, as `DistributedSampler(drop_last=True)` with a
    // `DataLoader` that keeps its partial batch: no sample on two ranks, nothing else lost.
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 15, 16, &[]);
    let epoch = |rank, drop_partial: Option<bool>| {
        let mut b = small(&ds)
            .batch_size(2)
            .shuffle(Shuffle::Sequential)
            .distributed(rank, 2)
            .drop_last(true);
        if let Some(d) = drop_partial {
            b = b.drop_partial_batch(d);
        }
        let loader = b.build().unwrap();
        let batches: Vec<Vec<u64>> = loader.epoch(0).map(|b| b.unwrap().indices).collect();
        (batches, loader.state().drop_partial_batch)
    };
    let (kept, state) = epoch(1, Some(false));
    assert_eq!(kept, [vec![7, 8], vec![9, 10], vec![11, 12], vec![13]]);
    assert_eq!(state, Some(false));
    let (rank0, _) = epoch(0, Some(false));
    assert_eq!(rank0.concat(), (0..7).collect::<Vec<u64>>());
    // drop_last alone drops both, as before.
    let (dropped, state) = epoch(1, None);
    assert_eq!(dropped, [vec![7, 8], vec![9, 10], vec![11, 12]]);
    assert_eq!(state, Some(true));
}

#[test]
fn an_empty_epoch_is_told_by_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 15, 16, &[]);
    // More ranks than samples: the cut tail is everything.
    let cut = small(&ds)
        .distributed(0, 16)
        .drop_last(true)
        .build()
        .unwrap();
    let note = cut.empty_epochs_note().expect("empty");
    assert!(note.contains("drop_last cuts all 15 samples"), "{note}");
    // Padded, then the one partial batch dropped: drop_last is off, and not blamed.
    let dropped = small(&ds)
        .batch_size(16)
        .drop_partial_batch(true)
        .build()
        .unwrap();
    let note = dropped.empty_epochs_note().expect("empty");
    assert!(
        note.contains("dropping the partial batch") && !note.contains("turn drop_last off"),
        "{note}"
    );
    assert!(small(&ds)
        .batch_size(16)
        .build()
        .unwrap()
        .empty_epochs_note()
        .is_none());
}

#[test]
fn stats_read_back_from_their_own_json_before_and_after_an_epoch() {
    // A stage without busy time has an infinite capacity, which JSON holds as null: a
    // fresh or reset loader's stats could not be read back ("expected f64").
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let loader = Loader::builder(ds)
        .batch_size(4)
        .transform(Transform::center_crop(16, 18))
        .output(Output::U8Nhwc)
        .workers(1)
        .build()
        .unwrap();
    let round_trip = |stats: Stats| {
        let back: Stats = serde_json::from_str(&stats.to_json()).unwrap();
        assert_eq!(back, stats);
    };
    round_trip(loader.stats());
    for batch in loader.epoch(0) {
        batch.unwrap();
    }
    round_trip(loader.stats());
    loader.reset_stats();
    round_trip(loader.stats());
}
