//! The GPU path (`Device::Cuda`) against the CPU path.
//!
//! Without a GPU (CI, the 2-core build machine) the GPU comparisons print why
//! they skipped, and what runs is the part that must hold there: a typed
//! `GpuUnavailable` error for `Device::Cuda`, and `Device::Auto` falling back to
//! the CPU. On the GPU machine `scripts/device-check.d/20-loader-gpu.sh` runs this
//! binary (`stoker-loader-gpu`) for real.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{bench_dataset, rss_bytes, Broken};
use cudarc::driver::{CudaContext, CudaView};
use stoker_loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
use stoker_loader::{
    Batch, CudaImages, DType, Device, Images, Loader, LoaderBuilder, LoaderError, Output, Shuffle,
    Transform,
};

/// A usable CUDA device 0, or why not (printed by the skipping tests).
fn gpu() -> Result<Arc<CudaContext>, String> {
    // Before any cudarc call, which panics on a missing library or entry point.
    if let Some(reason) = stoker_decode::driver_library_problem() {
        return Err(reason);
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => CudaContext::new(0).map_err(|e| format!("cannot open device 0: {e}")),
        Ok(_) => Err("the driver reports no CUDA device".into()),
        Err(e) => Err(format!("the CUDA driver does not initialize: {e}")),
    }
}

/// [`gpu`], or `None` after printing why the test is skipped.
fn gpu_or_skip() -> Option<Arc<CudaContext>> {
    gpu().map_err(stoker_testdata::gpu_skip).ok()
}

/// Held by each test that page-locks a raw dataset's map: the page-lock limit
/// holds for the whole process, so a test with a small limit would see what a
/// test running beside it holds locked, and route otherwise.
fn page_locking_alone() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn train_transform(size: u32) -> Transform {
    Transform::random_resized_crop(size)
        .hflip(0.5)
        .normalize(IMAGENET_MEAN, IMAGENET_STD)
}

fn loader_builder(
    ds: stoker_formats::Dataset,
    device: Device,
    output: Output,
    batch: usize,
) -> LoaderBuilder {
    Loader::builder(ds)
        .batch_size(batch)
        .shuffle(Shuffle::Global { seed: 11 })
        .transform(train_transform(96))
        .output(output)
        .device(device)
        .workers(2)
        .prefetch(2)
}

fn loader(
    ds: stoker_formats::Dataset,
    device: Device,
    output: Output,
    batch: usize,
) -> Result<Loader, LoaderError> {
    loader_builder(ds, device, output, batch).build()
}

#[test]
fn cuda_without_a_gpu_is_a_typed_error_and_auto_falls_back_to_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 24, 12, &[]);
    if gpu().is_ok() {
        // With a GPU: Cuda(0) builds and Auto takes it; both give device batches.
        for device in [Device::Cuda(0), Device::Auto] {
            let l = loader(ds.clone(), device, Output::F16Nchw, 8).expect("a GPU loader");
            assert_eq!(l.gpu_fallback_note(), None, "{device:?}");
            let mut seen = 0;
            for batch in l.epoch(0) {
                let batch = batch.unwrap();
                assert!(matches!(batch.images, Images::Cuda(_)), "{device:?}");
                seen += batch.len();
            }
            assert_eq!(seen, 24, "{device:?}");
        }
        return;
    }
    match loader(ds.clone(), Device::Cuda(0), Output::F16Nchw, 8) {
        Err(LoaderError::GpuUnavailable { reason }) => {
            assert!(!reason.is_empty());
            eprintln!("Device::Cuda(0) without a GPU: {reason}");
        }
        Err(other) => panic!("expected GpuUnavailable, got {other}"),
        Ok(_) => panic!("Device::Cuda(0) built without a GPU"),
    }
    let auto = loader(ds, Device::Auto, Output::F16Nchw, 8).expect("Auto falls back to the CPU");
    // No GPU at all is the expected CPU run, logged but not warned of (a warning is for a
    // GPU the driver reports that could not be used).
    assert_eq!(auto.gpu_fallback_note(), None);
    let mut seen = 0;
    for batch in auto.epoch(0) {
        let batch = batch.unwrap();
        assert!(
            matches!(batch.images, Images::Host(_)),
            "Auto without a GPU must give host batches"
        );
        seen += batch.len();
    }
    assert_eq!(seen, 24);
}

/// The batch's pixels on the host, as f32 (u8 levels, f16 or f32 values).
fn host_values(batch: &Batch, ctx: &Arc<CudaContext>) -> Vec<f32> {
    match &batch.images {
        Images::Host(h) => {
            if let Some(v) = h.as_u8() {
                v.iter().map(|&x| f32::from(x)).collect()
            } else if let Some(v) = h.as_f16() {
                v.iter().map(|x| x.to_f32()).collect()
            } else if let Some(v) = h.as_bf16() {
                v.iter().map(|x| x.to_f32()).collect()
            } else {
                h.as_f32().unwrap().to_vec()
            }
        }
        Images::Cuda(d) => {
            let stream = ctx.new_stream().unwrap();
            d.wait(&stream).unwrap();
            let values = if let Some(v) = d.as_u8() {
                stream
                    .clone_dtoh(&v)
                    .unwrap()
                    .into_iter()
                    .map(f32::from)
                    .collect()
            } else if let Some((v, to_f32)) = two_byte_values(d) {
                let bits = stream.clone_dtoh(&v).unwrap();
                bits.into_iter().map(to_f32).collect()
            } else {
                stream.clone_dtoh(&d.as_f32().unwrap()).unwrap()
            };
            stream.synchronize().unwrap();
            values
        }
        _ => panic!("unknown images variant"),
    }
}

/// How a 2-byte value's bits read as f32.
type Reading = fn(u16) -> f32;

/// A GPU batch of 2-byte values (f16 or bfloat16) as bit patterns, and their reading.
fn two_byte_values(d: &CudaImages) -> Option<(CudaView<'_, u16>, Reading)> {
    match (d.as_f16_bits(), d.as_bf16_bits()) {
        (Some(v), _) => Some((v, |b| half::f16::from_bits(b).to_f32())),
        (_, Some(v)) => Some((v, |b| half::bf16::from_bits(b).to_f32())),
        _ => None,
    }
}

/// How closely two batches agree, in u8-level units (float outputs are scaled
/// back by 255 · std; the largest ImageNet std is used, which overstates slightly).
#[derive(Debug)]
struct Agreement {
    psnr: f64,
    mean_abs: f64,
    worst: f64,
}

fn agreement(cpu: &[f32], gpu: &[f32], output: Output) -> Agreement {
    assert_eq!(cpu.len(), gpu.len());
    let scale = match output {
        Output::U8Nhwc => 1.0,
        _ => 255.0 * 0.229,
    };
    let (mut sq, mut abs, mut worst) = (0f64, 0f64, 0f64);
    for (a, b) in cpu.iter().zip(gpu) {
        let d = f64::from(a - b).abs() * scale;
        sq += d * d;
        abs += d;
        worst = worst.max(d);
    }
    let n = cpu.len() as f64;
    let mse = sq / n;
    Agreement {
        psnr: if mse == 0.0 {
            f64::INFINITY
        } else {
            10.0 * (255.0 * 255.0 / mse).log10()
        },
        mean_abs: abs / n,
        worst,
    }
}

/// Same seed and epoch on both paths: identical labels, indices and order, every
/// sample once per epoch, pixels within `max_worst` levels (or, when the decoders
/// differ, within a PSNR / mean-difference bound).
fn compare_paths(
    ds: &stoker_formats::Dataset,
    n: usize,
    ctx: &Arc<CudaContext>,
    same_decoder: bool,
    decoder: Option<stoker_decode::GpuDecoderOptions>,
) {
    for output in [
        Output::U8Nhwc,
        Output::F16Nchw,
        Output::F32Nchw,
        Output::F16Nhwc,
        Output::F32Nhwc,
        Output::Bf16Nchw,
        Output::Bf16Nhwc,
    ] {
        let cpu = loader(ds.clone(), Device::Cpu, output, 16).unwrap();
        let mut gpu_builder = loader_builder(ds.clone(), Device::Cuda(0), output, 16);
        if let Some(options) = decoder.clone() {
            gpu_builder = gpu_builder.gpu_decoder(options);
        }
        let gpu_loader = gpu_builder.build().unwrap();
        for epoch in 0..2 {
            let mut seen = BTreeSet::new();
            for (c, g) in cpu.epoch(epoch).zip(gpu_loader.epoch(epoch)) {
                let (c, g) = (c.unwrap(), g.unwrap());
                assert!(
                    matches!(g.images, Images::Cuda(_)),
                    "Device::Cuda must give device batches"
                );
                assert_eq!(
                    c.labels, g.labels,
                    "{output:?} epoch {epoch} batch {}",
                    c.index
                );
                assert_eq!(
                    c.indices, g.indices,
                    "{output:?} epoch {epoch} batch {}",
                    c.index
                );
                assert_eq!(c.index, g.index);
                let a = agreement(&host_values(&c, ctx), &host_values(&g, ctx), output);
                println!("{output:?} epoch {epoch} batch {}: {a:?}", c.index);
                if same_decoder {
                    // Same source pixels: only the resampling arithmetic differs
                    // (fixed-point on the CPU), plus f16 rounding; bfloat16's step
                    // near ±2.6 is 2^-6, 0.9 of a level.
                    let worst = if output.dtype() == DType::Bf16 {
                        3.0
                    } else {
                        2.6
                    };
                    assert!(
                        a.worst <= worst,
                        "{output:?} epoch {epoch} batch {}: {a:?}",
                        c.index
                    );
                } else {
                    // nvJPEG vs zune-jpeg: IDCT and chroma upsampling differ too.
                    assert!(
                        a.psnr >= 30.0 && a.mean_abs <= 2.0,
                        "{output:?} epoch {epoch} batch {}: {a:?}",
                        c.index
                    );
                }
                for &i in &g.indices {
                    assert!(seen.insert(i), "sample {i} twice in epoch {epoch}");
                }
            }
            assert_eq!(seen.len(), n, "every sample exactly once per epoch");
        }
    }
}

/// Datasets that earlier stoker builds wrote (`testdata/golden`: format version 1, and
/// version 2 through LMDB's own write path and through stoker's) load on the GPU as on
/// the CPU: JPEG records through nvJPEG, raw records from the page-locked map at offsets
/// read from files laid out by another writer.
#[test]
fn golden_datasets_of_earlier_builds_load_on_the_gpu_as_on_the_cpu() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let _alone = page_locking_alone();
    let golden = stoker_testdata::dir().join("golden");
    for folder in ["v1", "v2-6fc02d7", "v2"] {
        for kind in ["jpeg", "raw"] {
            let at = format!("{folder}/{kind}");
            let ds = stoker_formats::Dataset::open(golden.join(folder).join(kind)).unwrap();
            let cpu = loader(ds.clone(), Device::Cpu, Output::U8Nhwc, 4).unwrap();
            let gpu = loader(ds, Device::Cuda(0), Output::U8Nhwc, 4).unwrap();
            let mut seen = 0;
            for (c, g) in cpu.epoch(0).zip(gpu.epoch(0)) {
                let (c, g) = (c.unwrap(), g.unwrap());
                assert!(matches!(g.images, Images::Cuda(_)), "{at}");
                assert_eq!((&c.indices, &c.labels), (&g.indices, &g.labels), "{at}");
                let a = agreement(
                    &host_values(&c, &ctx),
                    &host_values(&g, &ctx),
                    Output::U8Nhwc,
                );
                println!("{at} batch {}: {a:?}", c.index);
                // Raw records: the same pixels, resampled; JPEG: nvJPEG against zune-jpeg.
                let close = if kind == "raw" {
                    a.worst <= 2.6
                } else {
                    a.psnr >= 30.0 && a.mean_abs <= 2.0
                };
                assert!(close, "{at} batch {}: {a:?}", c.index);
                seen += g.len();
            }
            assert_eq!(seen, 8, "{at}");
        }
    }
}

#[test]
fn gpu_batches_equal_cpu_batches_for_the_same_seed_and_epoch() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n = 100;
    compare_paths(&bench_dataset(dir.path(), n, 40, &[]), n, &ctx, false, None);
}

/// The same on nvJPEG's CUDA decoder alone (no engines): its slots (a state
/// with its device buffer) are reused batch after batch while consecutive
/// batches decode on the two decode streams, so this catches a batch's
/// transfer overtaking the previous batch's device phase.
#[test]
fn gpu_batches_on_the_cuda_decoder_equal_cpu_batches() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n = 100;
    let options = stoker_decode::GpuDecoderOptions {
        hardware: false,
        ..Default::default()
    };
    compare_paths(
        &bench_dataset(dir.path(), n, 40, &[]),
        n,
        &ctx,
        false,
        Some(options),
    );
}

/// With every hardware image on the decoder's CPU share, the GPU loader's
/// pixels come from the CPU decoder, each decoded only within its crop
/// (`BatchUse::regions`; the rest of the arena is left stale): batches equal
/// the CPU loader's within the resampling tolerance, so no crop reads a pixel
/// the decode left out.
#[test]
fn gpu_batches_with_the_whole_cpu_share_equal_cpu_batches() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let options = stoker_decode::GpuDecoderOptions {
        cpu_share: 1.0,
        ..Default::default()
    };
    // Without engines there is no share: nvJPEG's CUDA decoder takes the images.
    let same_decoder =
        stoker_decode::GpuDecoder::new(&ctx, options.clone()).is_ok_and(|d| d.has_hardware());
    let dir = tempfile::tempdir().unwrap();
    let n = 100;
    compare_paths(
        &bench_dataset(dir.path(), n, 40, &[]),
        n,
        &ctx,
        same_decoder,
        Some(options),
    );
}

/// With blocking waits (the loader's staging and batch-ready events and the
/// decoder's, all made with `CU_EVENT_BLOCKING_SYNC`), batches are the same as
/// with spinning ones: only how the host thread waits changes.
#[test]
fn gpu_batches_with_blocking_waits_equal_cpu_batches() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let options = stoker_decode::GpuDecoderOptions {
        waits: stoker_decode::WaitMode::Block,
        ..stoker_loader::gpu::decoder_defaults()
    };
    let dir = tempfile::tempdir().unwrap();
    let n = 100;
    compare_paths(
        &bench_dataset(dir.path(), n, 40, &[]),
        n,
        &ctx,
        false,
        Some(options),
    );
}

#[test]
fn gpu_transform_equals_cpu_transform_on_raw_records() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let _alone = page_locking_alone();
    let dir = tempfile::tempdir().unwrap();
    let n = 48;
    compare_paths(
        &common::bench_raw_dataset(dir.path(), n),
        n,
        &ctx,
        true,
        None,
    );
}

#[test]
fn gpu_bad_records_follow_the_cpu_policy() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(
        dir.path(),
        40,
        20,
        &[(3, Broken::Garbage), (17, Broken::BadCrc)],
    );
    let cpu = loader(ds.clone(), Device::Cpu, Output::U8Nhwc, 8).unwrap();
    let gpu_loader = loader(ds, Device::Cuda(0), Output::U8Nhwc, 8).unwrap();
    for (c, g) in cpu.epoch(0).zip(gpu_loader.epoch(0)) {
        let (c, g) = (c.unwrap(), g.unwrap());
        assert_eq!(c.indices, g.indices, "same replacements");
        assert!(!g.indices.contains(&3) && !g.indices.contains(&17));
        let a = agreement(
            &host_values(&c, &ctx),
            &host_values(&g, &ctx),
            Output::U8Nhwc,
        );
        assert!(a.psnr >= 30.0 && a.mean_abs <= 2.0, "{a:?}");
    }
    let (cs, gs) = (cpu.stats(), gpu_loader.stats());
    assert_eq!(cs.bad_records, gs.bad_records);
    assert_eq!(gs.bad_records, 2);
}

/// The corpus photographs as they are (65 px to 1.3 kpx, a quarter progressive, some
/// grayscale): the batches of the CPU path, and the images above the arena's budget per
/// image (640×480) decoded on the device beside smaller ones, not resized on the CPU
/// (`arena_pack`).
#[test]
fn photos_of_every_size_load_on_the_gpu_as_on_the_cpu() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = common::data_dir().join("imagefolder");
    let mut o = stoker_formats::ConvertOptions::new(
        stoker_formats::Source::ImageFolder(src),
        dir.path().join("ds"),
    );
    o.check_decode = false;
    let n = stoker_formats::convert(&o, &stoker_formats::NoProgress)
        .unwrap()
        .written as usize;
    let ds = stoker_formats::Dataset::open(dir.path().join("ds")).unwrap();
    compare_paths(&ds, n, &ctx, false, None);
    let reader = ds.reader().unwrap();
    let above = (0..n as u64)
        .filter(|&i| {
            let payload = reader.get(i).unwrap().payload;
            let info = stoker_decode::probe(payload, &stoker_decode::Limits::default()).unwrap();
            info.rgb_len() > stoker_loader::gpu::JPEG_STAGING_PIXELS * 3
        })
        .count() as u64;
    let l = loader(ds, Device::Cuda(0), Output::U8Nhwc, 16).unwrap();
    assert_eq!(l.epoch(0).map(|b| b.unwrap().len()).sum::<usize>(), n);
    let routes = l.stats().decode_routes;
    let resized = routes.get("cpu_resize_oversize").copied().unwrap_or(0);
    println!("{above} of {n} photos above 640x480; routes {routes:?}");
    assert!(above > 0, "the corpus has large photos");
    assert!(
        resized < above,
        "{resized} of {above} large photos resized on the CPU"
    );
}

/// A subset (`LoaderBuilder::indices`, a held-out split) on the GPU path: the CPU path's
/// batches of the same records, each record of the subset once per epoch, none outside it.
/// The GPU path sizes its rings and page-locking from the epoch's batch count, which a
/// subset changes.
#[test]
fn a_subset_loads_on_the_gpu_as_on_the_cpu() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 60, 30, &[]);
    let subset: Vec<u64> = (0..60).filter(|i| i % 3 != 1).rev().collect();
    let build = |device| {
        loader_builder(ds.clone(), device, Output::U8Nhwc, 8)
            .indices(subset.clone())
            .build()
            .unwrap()
    };
    let (cpu, gpu_loader) = (build(Device::Cpu), build(Device::Cuda(0)));
    for epoch in 0..2 {
        let mut seen = BTreeSet::new();
        for (c, g) in cpu.epoch(epoch).zip(gpu_loader.epoch(epoch)) {
            let (c, g) = (c.unwrap(), g.unwrap());
            assert!(matches!(g.images, Images::Cuda(_)));
            assert_eq!((&c.indices, &c.labels), (&g.indices, &g.labels));
            let a = agreement(
                &host_values(&c, &ctx),
                &host_values(&g, &ctx),
                Output::U8Nhwc,
            );
            assert!(a.psnr >= 30.0 && a.mean_abs <= 2.0, "{a:?}");
            for &i in &g.indices {
                assert!(subset.contains(&i), "record {i} is not in the subset");
                assert!(seen.insert(i), "record {i} twice in epoch {epoch}");
            }
        }
        assert_eq!(seen.len(), subset.len(), "epoch {epoch}");
    }
}

#[test]
fn gpu_memory_is_flat_over_five_epochs() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 128, 64, &[]);
    let l = loader(ds, Device::Cuda(0), Output::F16Nchw, 32).unwrap();
    let stats = l.stats();
    assert!(
        stats.pinned_bytes > 0 && stats.device_bytes > 0,
        "{stats:?}"
    );
    let consumer = ctx.new_stream().unwrap();
    let mut samples = Vec::new();
    for epoch in 0..5 {
        for batch in l.epoch(epoch) {
            let batch = batch.unwrap();
            if let Images::Cuda(d) = &batch.images {
                d.wait(&consumer).unwrap();
            }
        }
        consumer.synchronize().unwrap();
        // The next epoch started early (epochs 1-4 take those starts over):
        // measure each epoch's end in the same state, once the early start
        // has filled every slot (prefetch 2 + 2 slots of 32 images: the
        // whole 128-record dataset, so its readers have touched every
        // mapped page) and waits for the consumer.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (free, _total) = ctx.mem_get_info().unwrap();
        samples.push((free, rss_bytes()));
    }
    let (free1, rss1) = samples[0];
    for (epoch, &(free, rss)) in samples.iter().enumerate().skip(1) {
        let used_growth = free1.saturating_sub(free) as f64;
        let rss_growth = (rss as f64 - rss1 as f64) / rss1 as f64;
        println!(
            "epoch {epoch}: device free {free} (−{used_growth} B vs epoch 0), rss {rss} ({:+.3}%)",
            100.0 * rss_growth
        );
        assert!(
            used_growth < 0.01 * stats.device_bytes as f64,
            "device memory grew by {used_growth} B"
        );
        assert!(
            rss_growth < 0.01,
            "host RSS grew {:.2}%",
            100.0 * rss_growth
        );
    }
    let after = l.stats();
    assert_eq!(after.pinned_bytes, stats.pinned_bytes);
    assert_eq!(after.device_bytes, stats.device_bytes);
    assert_eq!(after.images, 5 * 128);
}

#[test]
fn batches_come_waited_on_the_users_stream_and_staging_options_change_nothing() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let _alone = page_locking_alone();
    let dir = tempfile::tempdir().unwrap();
    let n = 48;
    let ds = common::bench_raw_dataset(dir.path(), n);
    let stream = ctx.new_stream().unwrap();
    // A stream is a GPU-path setting: rejected with the CPU device.
    match Loader::builder(ds.clone())
        .device(Device::Cpu)
        .cuda_stream(stream.clone())
        .build()
    {
        Err(LoaderError::InvalidConfig { field, .. }) => assert_eq!(field, "cuda_stream"),
        other => panic!("expected InvalidConfig(cuda_stream), got {other:?}"),
    }
    let plain = loader(ds.clone(), Device::Cuda(0), Output::F16Nchw, 16).unwrap();
    let build = |write_combined: bool, streaming: bool, zero_copy: bool| {
        Loader::builder(ds.clone())
            .batch_size(16)
            .shuffle(Shuffle::Global { seed: 11 })
            .transform(train_transform(96))
            .output(Output::F16Nchw)
            .device(Device::Cuda(0))
            .workers(2)
            .prefetch(2)
            .cuda_stream(stream.clone())
            .write_combined_staging(write_combined)
            .streaming_staging_stores(streaming)
            .zero_copy_h2d(zero_copy)
            .build()
            .unwrap()
    };
    // The default: records copied to the device straight from the page-locked
    // dataset map (the shards are a few MiB, the driver allows it on our machines).
    let backend = plain.stats().backend;
    assert!(
        backend.starts_with("cuda:0, raw records: zero-copy H2D"),
        "{backend}"
    );
    assert!(backend.contains("one batched copy per batch"), "{backend}");
    for (write_combined, streaming, zero_copy, per_record) in [
        (false, false, false, false),
        (true, true, false, false),
        (false, true, false, false),
        (false, true, true, false),
        (false, true, true, true),
    ] {
        // The diagnostic switch to one copy per record is read at build only.
        if per_record {
            std::env::set_var("STOKER_H2D_PER_RECORD", "1");
        }
        let on_stream = build(write_combined, streaming, zero_copy);
        std::env::remove_var("STOKER_H2D_PER_RECORD");
        let backend = on_stream.stats().backend;
        if per_record {
            assert!(backend.contains("one copy per record"), "{backend}");
        }
        assert_eq!(
            backend.contains("zero-copy"),
            zero_copy,
            "zero_copy_h2d({zero_copy}): {backend}"
        );
        for (p, s) in plain.epoch(1).zip(on_stream.epoch(1)) {
            let (p, s) = (p.unwrap(), s.unwrap());
            assert_eq!((&p.indices, &p.labels), (&s.indices, &s.labels));
            let Images::Cuda(images) = &s.images else {
                panic!("Device::Cuda must give device batches");
            };
            // Already waited on `stream`: readable without a `wait` call.
            let view = images
                .as_f16_bits()
                .expect("a batch handed out on the user's stream is readable at once");
            let got = stream.clone_dtoh(&view).unwrap();
            stream.synchronize().unwrap();
            let want: Vec<u16> = host_values(&p, &ctx)
                .into_iter()
                .map(|v| half::f16::from_f32(v).to_bits())
                .collect();
            assert_eq!(
                got, want,
                "batch {} (write-combined {write_combined}, streaming stores {streaming}, zero-copy {zero_copy}): same kernel, same pixels",
                p.index
            );
        }
    }
}

/// Orders with locality move a window; a whole-dataset shuffle, which no window can
/// serve, locks a part of the shards for good and stages the others' records, the
/// records of both kinds in every batch.
#[test]
fn a_raw_dataset_over_the_page_lock_limit_moves_a_window_or_locks_a_part_with_the_same_batches() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let _alone = page_locking_alone();
    let dir = tempfile::tempdir().unwrap();
    // 96 raw 500×375 images (54 MB), two per shard (1.3 MB): over a 40 MiB limit,
    // so windows of 20 MiB (15 shards) move over it. A quasi-random order with
    // blocks of one shard reads 8 shards per batch of 16; a whole-dataset
    // shuffle about 13, more than a 10 MiB limit's windows hold: the shards that
    // fit in 10 MiB are locked for good instead.
    let ds = common::bench_raw_dataset_in_shards(dir.path(), 96, 1_300_000);
    assert_eq!(ds.manifest().shards.len(), 48);
    let build = |shuffle: Shuffle, zero_copy: bool| {
        let limit = match shuffle {
            Shuffle::Global { .. } => 10 << 20,
            _ => 40 << 20,
        };
        Loader::builder(ds.clone())
            .batch_size(16)
            .shuffle(shuffle)
            .transform(train_transform(96))
            .output(Output::F16Nchw)
            .device(Device::Cuda(0))
            .workers(2)
            .prefetch(2)
            .zero_copy_h2d(zero_copy)
            .page_lock_limit(limit)
            .build()
            .unwrap()
    };
    let pixel_staging_of_one_slot = 16 * 500 * 375 * 3;
    for shuffle in [
        Shuffle::Sequential,
        Shuffle::Quasi { seed: 3, block: 2 },
        Shuffle::Global { seed: 3 },
    ] {
        let windowed = build(shuffle, true);
        let staged = build(shuffle, false);
        let backend = windowed.stats().backend;
        let at_build = windowed.stats().pinned_bytes;
        if let Shuffle::Global { .. } = shuffle {
            // The shards that fit in the limit, in order (first fit).
            let mut left = 10u64 << 20;
            let mut locked = 0;
            for shard in &ds.manifest().shards {
                if shard.bytes <= left {
                    left -= shard.bytes;
                    locked += 1;
                }
            }
            assert!(locked > 0 && locked < 48, "{locked}");
            assert!(
                backend.contains(&format!("page-locked map of {locked} of 48 shards"))
                    && backend.contains("the others' records through pinned staging"),
                "{backend}"
            );
            // Most records of every batch are staged: in place, allocated at build.
            assert!(
                at_build >= pixel_staging_of_one_slot,
                "{at_build} pinned bytes at build"
            );
        } else {
            assert!(backend.contains("moving page-locked window"), "{backend}");
            // Built without pixel staging: every record is to come from the map.
            assert!(
                at_build < pixel_staging_of_one_slot,
                "{at_build} pinned bytes at build"
            );
        }
        for epoch in 0..2 {
            // An epoch left after two batches ends its windows; the next one runs.
            for (i, (w, s)) in windowed.epoch(epoch).zip(staged.epoch(epoch)).enumerate() {
                let (w, s) = (w.unwrap(), s.unwrap());
                assert_eq!((&w.indices, &w.labels), (&s.indices, &s.labels));
                assert_eq!(
                    host_values(&w, &ctx),
                    host_values(&s, &ctx),
                    "{shuffle:?} epoch {epoch} batch {i}: same records, same kernel, same pixels"
                );
                if epoch == 0 && i == 1 {
                    break;
                }
            }
        }
        let pinned = windowed.stats().pinned_bytes;
        if !matches!(shuffle, Shuffle::Global { .. }) {
            // Every record came from a window: still no pixel staging.
            assert!(pinned < pixel_staging_of_one_slot, "{shuffle:?}: {pinned}");
        }
    }
}

#[test]
fn loaders_of_one_process_share_its_page_lock_limit() {
    if gpu_or_skip().is_none() {
        return;
    }
    let _alone = page_locking_alone();
    // Two datasets of 24 raw 500×375 images (13.5 MB, 12 shards of two): either
    // fits a 24 MiB limit alone, not both.
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = common::bench_raw_dataset_in_shards(a_dir.path(), 24, 1_300_000);
    let b = common::bench_raw_dataset_in_shards(b_dir.path(), 24, 1_300_000);
    let build = |ds: &stoker_formats::Dataset| {
        Loader::builder(ds.clone())
            .batch_size(4)
            .shuffle(Shuffle::Sequential)
            .transform(train_transform(96))
            .output(Output::F16Nchw)
            .device(Device::Cuda(0))
            .workers(2)
            .prefetch(2)
            .page_lock_limit(24 << 20)
            .build()
            .unwrap()
    };
    let whole = |l: &Loader| {
        l.stats()
            .backend
            .contains("from the page-locked dataset map")
    };
    let train = build(&a);
    assert!(whole(&train), "{}", train.stats().backend);
    // A second loader over the same open dataset joins its registrations, which
    // count once: locked whole too.
    let again = build(&a);
    assert!(whole(&again), "{}", again.stats().backend);
    // The other dataset gets what is left: a moving window, not a whole lock
    // that would take the process past its limit.
    let val = build(&b);
    let backend = val.stats().backend;
    assert!(backend.contains("moving page-locked window"), "{backend}");
    let mut batches = 0;
    for batch in val.epoch(0) {
        batch.unwrap();
        batches += 1;
    }
    assert_eq!(batches, 6);
    // Every window fitted beside the training set's lock: no record staged.
    let pixel_staging_of_one_slot = 4 * 500 * 375 * 3;
    let pinned = val.stats().pinned_bytes;
    assert!(pinned < pixel_staging_of_one_slot, "{pinned} pinned bytes");
    // Once the training loaders are gone, the whole limit is free again.
    drop((train, again, val));
    let val = build(&b);
    assert!(whole(&val), "{}", val.stats().backend);
}

#[test]
fn gpu_stats_name_the_backend_and_sample_utilization() {
    let Some(ctx) = gpu_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ds = bench_dataset(dir.path(), 64, 32, &[]);
    let l = loader(ds, Device::Cuda(0), Output::F16Nchw, 16).unwrap();
    let backend = l.stats().backend;
    assert!(backend.starts_with("cuda:0, nvJPEG"), "{backend}");
    let consumer = ctx.new_stream().unwrap();
    // Each epoch has its own sampler, which samples every 100 ms: a consumer
    // that takes 30 ms per batch makes each 4-batch epoch last long enough
    // for a sample (the loader alone runs such an epoch in a few ms), and
    // 600 ms of them for a few.
    let start = std::time::Instant::now();
    let mut epoch = 0;
    while start.elapsed() < std::time::Duration::from_millis(600) {
        for batch in l.epoch(epoch) {
            if let Images::Cuda(d) = &batch.unwrap().images {
                d.wait(&consumer).unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        epoch += 1;
    }
    consumer.synchronize().unwrap();
    let stats = l.stats();
    let u = stats.utilization.expect("the GPU path samples utilization");
    assert!(u.samples >= 2, "{u:?}");
    assert!(u.cpu.is_some(), "{u:?}");
    let t = stats
        .gpu_decode
        .expect("nvJPEG phase times reach the stats");
    assert!(t.calls > 0 && t.images >= 64 && t.total_s > 0.0, "{t:?}");
    println!("{stats}");
    assert!(stats.to_string().contains("utilization: "), "{stats}");
}
