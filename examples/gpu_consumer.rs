//! A GPU consumer standing in for a training step: each batch from a
//! `Device::Cuda` loader is waited on (GPU-side) and read by a small kernel that
//! does a fixed amount of work per batch, sized to a target rate (default 4,700
//! img/s, what ResNet-50 bf16 training consumes on an H200).
//!
//! In one run it measures, for the device check (`scripts/device-check.d/20-loader-gpu.sh`):
//! - `loader`: the loader alone (the consumer only waits on each batch), img/s: epoch 0
//!   (warm-up included) and the steady state over the next `--steady-epochs` epochs;
//! - `fed`: the consumer loop fed by the loader vs the same loop on a batch already in
//!   GPU memory (the ratio of the two throughputs) and the loader's fed ratio;
//! - `h2d`: the loader's H2D copy rate (GB/s) in the steady state and in the fed epochs,
//!   and what it delivered (images per second × bytes per image), next to a pinned-copy
//!   ceiling measured in the same process (`examples/h2d_probe` breaks the gap down);
//! - device memory and RSS after each epoch.
//!
//! Results are printed and, with `--tsv FILE`, appended as `name<TAB>value<TAB>unit<TAB>note`.
//! Without a GPU it prints why and exits with status 2.
//! `cargo run --release --example gpu_consumer -- --jpeg-dir target/stoker-testdata/bench-v1`
//! A measurement tool of this repository (the device check runs it), not a template to copy:
//! beside `stoker` it uses clap, tracing-subscriber and `examples/common/results.rs`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use stoker::decode::cudarc::driver::{sys::CUevent_flags, CudaContext, CudaStream};
use stoker::decode::{CpuDecoder, Limits};
use stoker::formats::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
use stoker::loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
use stoker::loader::{Device, Images, Loader, Output, Shuffle, Stage, Stats, Transform};

use stoker::exit;
#[path = "common/consumer.rs"]
mod consumer;
#[path = "common/results.rs"]
mod results;

use consumer::Consumer;

#[derive(Parser, Debug)]
struct Args {
    /// Appended to every row name (`fed_jpeg<TAG>_…`), to tell two runs of one kind apart.
    #[arg(long, default_value = "")]
    tag: String,
    /// An existing stoker dataset (LMDB shards + manifest.json).
    #[arg(long, conflicts_with = "jpeg_dir")]
    dataset: Option<PathBuf>,
    /// A folder of JPEGs to convert into a temporary dataset first (e.g. the bench set, `target/stoker-testdata/bench-v1`).
    #[arg(long)]
    jpeg_dir: Option<PathBuf>,
    /// With --jpeg-dir: store decoded RGB (raw, pre-decoded records) instead of JPEG.
    #[arg(long)]
    raw: bool,
    /// Repeat the folder's images this many times in the temporary dataset.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Shards of the temporary dataset of about this many MiB (default: the
    /// writer's, 1 GiB).
    #[arg(long)]
    shard_mib: Option<u64>,
    /// Raw records: page-lock at most this many MiB of the dataset map at once
    /// (`LoaderBuilder::page_lock_limit`); a larger dataset moves a window of half
    /// of it. Rows get `_window`.
    #[arg(long)]
    page_lock_limit_mib: Option<u64>,
    /// Visit the records in dataset order (`Shuffle::Sequential`) instead of a
    /// whole-dataset shuffle; rows get `_seq`.
    #[arg(long)]
    sequential: bool,
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
    #[arg(long, default_value_t = 224)]
    size: u32,
    #[arg(long, default_value_t = 5)]
    epochs: u64,
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// Reader threads (default: all cores).
    #[arg(long)]
    workers: Option<usize>,
    /// JPEG records: share of each batch decoded on the CPUs beside the JPEG
    /// engines (`LoaderBuilder::gpu_cpu_share`); rows are then named `jpeg_cpu<percent>`.
    #[arg(long)]
    cpu_share: Option<f32>,
    /// JPEG records: share of each batch's hardware images decoded by nvJPEG's
    /// GPU-hybrid backend beside the engines (`GpuDecoderOptions::gpu_huffman_share`);
    /// rows are then named `jpeg_gpuhuff<percent>`.
    #[arg(long)]
    gpu_huffman_share: Option<f32>,
    /// JPEG records: nvJPEG decoder states per hardware lane
    /// (`GpuDecoderOptions::hardware_states_per_lane`; the loader's default is 2);
    /// rows are then named `jpeg_states<n>` (after `_gpuhuff<percent>` when both are given).
    #[arg(long)]
    states_per_lane: Option<usize>,
    /// JPEG records: the decoder's own streams at the default priority instead of the
    /// device's highest (`GpuDecoderOptions::high_priority_streams`); give a `--tag`.
    #[arg(long)]
    decoder_default_priority: bool,
    /// Pinned staging write-combined (`LoaderBuilder::write_combined_staging`, and
    /// records staged rather than copied from the dataset map); rows get `_wc`.
    #[arg(long)]
    write_combined: bool,
    /// Raw records staged in pinned memory (non-temporal stores) instead of copied
    /// from the page-locked dataset map (`LoaderBuilder::zero_copy_h2d(false)`);
    /// rows get `_staged`.
    #[arg(long)]
    staged: bool,
    /// Raw records staged with plain `memcpy` (`zero_copy_h2d(false)` and
    /// `streaming_staging_stores(false)`); rows get `_memcpy`.
    #[arg(long)]
    memcpy_staging: bool,
    /// Hand batches out already waited on the consumer's stream
    /// (`LoaderBuilder::cuda_stream`) instead of calling `wait` on each.
    #[arg(long)]
    on_stream: bool,
    /// Epochs after epoch 0 over which the loader alone is timed (the steady state).
    #[arg(long, default_value_t = 3)]
    steady_epochs: u64,
    /// Images per second the stand-in training step consumes.
    #[arg(long, default_value_t = 4700.0)]
    target_rate: f64,
    /// The step as this many launches sharing its iterations. 1 holds every SM for
    /// the whole step; a real one is hundreds of short kernels, between which the
    /// loader's higher-priority streams get the SMs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    step_kernels: u32,
    /// Append result rows to this TSV file.
    #[arg(long)]
    tsv: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    device: usize,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    // The loader logs its per-epoch utilization verdict (NVML) at info level.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("stoker_loader=info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => exit::failure("gpu_consumer", e.as_ref(), 2),
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn run(args: &Args) -> Res<()> {
    let mut table = results::Table::open(args.tsv.as_deref())?;
    // First, so that a machine without a GPU gets a clear error (cudarc panics on a
    // CUDA call without the driver library) before any conversion work.
    let ctx = stoker::decode::cuda_context(args.device)?;
    let stream = ctx.new_stream()?;
    let mut tmp = TempDir(None);
    let dataset = open_dataset(args, &mut tmp)?;
    let kind = row_kind(args, &dataset);
    let loader = build_loader(args, &dataset, &stream)?;
    writeln!(std::io::stdout(), "{}", loader.stats().backend)?;
    let mut consumer = Consumer::new(
        &ctx,
        &stream,
        args.batch_size * 3 * (args.size as usize).pow(2) * 2,
        args.step_kernels,
    )?;
    let iters = consumer.calibrate(args.batch_size, args.target_rate)?;

    let alone = loader_alone(&mut table, args, &kind, &loader, &stream)?;
    let fed = fed_epochs(args, &loader, &ctx, &mut consumer, iters, alone.epochs + 1)?;
    fed_rows(&mut table, &kind, &alone, &fed)?;

    // 3. Pinned H2D ceiling, same process (the peer of the loader's H2D figure).
    let ceiling = pinned_ceiling(&ctx, &stream)?;
    table.row(
        "h2d_pinned_ceiling_gb_s",
        ceiling,
        "GB/s",
        "256 MiB pinned -> device, 20 copies, same process",
    )?;

    // Pinned host memory the loader holds after every epoch ran: raw records copied
    // from the page-locked map allocate no pixel staging.
    table.row(
        &format!("pinned_{kind}_mib"),
        loader.stats().pinned_bytes as f64 / f64::from(1 << 20),
        "MiB",
        "Stats::pinned_bytes after the run (staging ring; the page-locked map not counted)",
    )?;

    // 4. Memory flat after the first fed epoch.
    if let (Some(&(dev1, rss1)), Some(&(devn, rssn))) = (fed.mem.first(), fed.mem.last()) {
        let dg = (devn as f64 - dev1 as f64) / dev1.max(1) as f64;
        let rg = (rssn as f64 - rss1 as f64) / rss1.max(1) as f64;
        table.row(
            &format!("mem_{kind}_device_growth_pct"),
            100.0 * dg,
            "%",
            &format!(
                "device used after epoch 1 vs last ({} epochs), acceptance < 1",
                fed.mem.len()
            ),
        )?;
        table.row(
            &format!("mem_{kind}_rss_growth_pct"),
            100.0 * rg,
            "%",
            "host RSS, same epochs, acceptance < 1",
        )?;
    }
    Ok(())
}

/// The dataset given, or the JPEG folder converted into a temporary one (removed
/// when `tmp` drops).
fn open_dataset(args: &Args, tmp: &mut TempDir) -> Res<Dataset> {
    Ok(match (&args.dataset, &args.jpeg_dir) {
        (Some(d), _) => Dataset::open(d)?,
        (None, Some(dir)) => {
            let path =
                std::env::temp_dir().join(format!("stoker-gpu-consumer-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            tmp.0 = Some(path.clone());
            let ds = convert(dir, &path, args.raw, args.repeat, args.shard_mib)?;
            writeln!(
                std::io::stdout(),
                "dataset: {} records ({}, {} MiB in {} shards) in {}",
                ds.len(),
                if args.raw { "raw" } else { "jpeg" },
                ds.manifest().bytes >> 20,
                ds.manifest().shards.len(),
                path.display()
            )?;
            ds
        }
        (None, None) => return Err("give --dataset or --jpeg-dir".into()),
    })
}

/// The part of every row name that says what ran: the record kind and the
/// options that change the loader's path, then `--tag`.
fn row_kind(args: &Args, dataset: &Dataset) -> String {
    let base = match (dataset.manifest().encoding, args.cpu_share) {
        (Encoding::Raw, _) => "raw".to_string(),
        (_, Some(share)) => format!("jpeg_cpu{}", (share * 100.0).round()),
        _ => {
            let mut kind = "jpeg".to_string();
            if let Some(share) = args.gpu_huffman_share {
                kind += &format!("_gpuhuff{}", (share * 100.0).round());
            }
            if let Some(n) = args.states_per_lane {
                kind += &format!("_states{n}");
            }
            kind
        }
    };
    base + if args.sequential { "_seq" } else { "" }
        + if args.page_lock_limit_mib.is_some() {
            "_window"
        } else {
            ""
        }
        + if args.write_combined { "_wc" } else { "" }
        + if args.memcpy_staging {
            "_memcpy"
        } else if args.staged {
            "_staged"
        } else {
            ""
        }
        + &args.tag
}

/// The `Device::Cuda` loader under test: RandomResizedCrop + flip + normalize to
/// F16 NCHW, with the decoder and staging options the flags ask for.
fn build_loader(args: &Args, dataset: &Dataset, stream: &Arc<CudaStream>) -> Res<Loader> {
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()));
    let mut builder = Loader::builder(dataset.clone());
    if let Some(share) = args.cpu_share {
        builder = builder.gpu_cpu_share(share);
    }
    if args.gpu_huffman_share.is_some()
        || args.states_per_lane.is_some()
        || args.decoder_default_priority
    {
        let defaults = stoker::loader::gpu::decoder_defaults();
        builder = builder.gpu_decoder(stoker::decode::GpuDecoderOptions {
            gpu_huffman_share: args.gpu_huffman_share.unwrap_or(defaults.gpu_huffman_share),
            hardware_states_per_lane: args
                .states_per_lane
                .unwrap_or(defaults.hardware_states_per_lane),
            high_priority_streams: !args.decoder_default_priority,
            ..defaults
        });
    }
    if args.on_stream {
        builder = builder.cuda_stream(stream.clone());
    }
    if let Some(mib) = args.page_lock_limit_mib {
        builder = builder.page_lock_limit(mib << 20);
    }
    Ok(builder
        .batch_size(args.batch_size)
        .drop_last(true)
        .shuffle(if args.sequential {
            Shuffle::Sequential
        } else {
            Shuffle::Global { seed: 0 }
        })
        .transform(
            Transform::random_resized_crop(args.size)
                .hflip(0.5)
                .normalize(IMAGENET_MEAN, IMAGENET_STD),
        )
        .output(Output::F16Nchw)
        .device(Device::Cuda(args.device))
        .prefetch(args.prefetch)
        .workers(workers)
        .write_combined_staging(args.write_combined)
        .streaming_staging_stores(!args.memcpy_staging)
        .zero_copy_h2d(!(args.staged || args.memcpy_staging || args.write_combined))
        .build()?)
}

/// The loader alone, in its steady state.
struct Alone {
    /// img/s over epochs 1..=`epochs`.
    steady: f64,
    /// The loader's counters over those epochs.
    stats: Stats,
    /// Epochs timed after epoch 0.
    epochs: u64,
}

/// 1. Loader alone (the consumer only waits on each batch): epoch 0 includes
///    the warm-up (page cache, nvJPEG's first allocations, the first fill of the
///    ring); the acceptance row is the steady state, epochs 1..=steady_epochs.
fn loader_alone(
    table: &mut results::Table,
    args: &Args,
    kind: &str,
    loader: &Loader,
    stream: &Arc<CudaStream>,
) -> Res<Alone> {
    let alone_rate = |epochs: std::ops::RangeInclusive<u64>| -> Res<f64> {
        let t = Instant::now();
        let mut images = 0usize;
        for epoch in epochs {
            for batch in loader.epoch(epoch) {
                let batch = batch?;
                if let Images::Cuda(d) = &batch.images {
                    d.wait(stream)?;
                }
                images += batch.len();
            }
        }
        stream.synchronize()?;
        Ok(images as f64 / t.elapsed().as_secs_f64())
    };
    let warm = alone_rate(0..=0)?;
    table.row(
        &format!("loader_gpu_{kind}_epoch0_img_s"),
        warm,
        "img/s",
        &format!(
            "F16 NCHW {} RRC+flip+norm, batch {}, epoch 0 (warm-up included)",
            args.size, args.batch_size
        ),
    )?;
    let steady_epochs = args.steady_epochs.max(1);
    // The loader's counters over the steady state alone (H2D rows below).
    loader.reset_stats();
    let steady = alone_rate(1..=steady_epochs)?;
    let alone_stats = loader.stats();
    table.row(
        &format!("loader_gpu_{kind}_img_s"),
        steady,
        "img/s",
        &format!(
            "F16 NCHW {} RRC+flip+norm, batch {}, epochs 1-{steady_epochs} (steady state; acceptance row)",
            args.size, args.batch_size
        ),
    )?;
    Ok(Alone {
        steady,
        stats: alone_stats,
        epochs: steady_epochs,
    })
}

/// The consumer loop fed by the loader, and the same loop on a resident batch.
struct Fed {
    /// img/s of the loop fed by the loader.
    rate: f64,
    /// img/s of the same loop on the resident batch.
    resident_rate: f64,
    /// (device memory used, host RSS) after each fed epoch.
    mem: Vec<(usize, u64)>,
    /// The loader's counters over the fed epochs.
    stats: Stats,
}

/// 2. Fed: the consumer loop fed by the loader, `epochs - 1` epochs from
///    `first`, then the same loop on a resident batch; memory sampled after
///    every epoch. `first` is the epoch after the last one the loader ran, so
///    that its early start is used, as in training, rather than dropped and
///    the pipeline filled again from cold inside the timed loop.
fn fed_epochs(
    args: &Args,
    loader: &Loader,
    ctx: &Arc<CudaContext>,
    consumer: &mut Consumer,
    iters: u32,
    first: u64,
) -> Res<Fed> {
    let stream = consumer.stream.clone();
    loader.reset_stats();
    let mut mem = Vec::new();
    let t = Instant::now();
    let mut fed_images = 0usize;
    for epoch in first..first + args.epochs.max(2) - 1 {
        for batch in loader.epoch(epoch) {
            let batch = batch?;
            let Images::Cuda(d) = &batch.images else {
                return Err("the loader did not produce device batches".into());
            };
            d.wait(&stream)?;
            let ptr = d.device_ptr().ok_or("no device pointer after wait")?;
            consumer.step(iters, ptr)?;
            // Like a loop that reads its loss every step.
            stream.synchronize()?;
            fed_images += batch.len();
        }
        let (free, total) = ctx.mem_get_info()?;
        mem.push((total - free, rss_bytes()));
    }
    let fed_rate = fed_images as f64 / t.elapsed().as_secs_f64();
    // The next epoch has started early: stop it, or its decodes would share the
    // GPU with the resident-batch loop below and flatter the fed/resident ratio.
    loader.cancel_prefetch();
    let stats = loader.stats();
    let t = Instant::now();
    let steps = fed_images / args.batch_size;
    for _ in 0..steps {
        consumer.step(iters, consumer.resident_ptr)?;
        stream.synchronize()?;
    }
    let resident_rate = (steps * args.batch_size) as f64 / t.elapsed().as_secs_f64();
    Ok(Fed {
        rate: fed_rate,
        resident_rate,
        mem,
        stats,
    })
}

/// The rows of the fed epochs, then the H2D rows of both phases and the fed
/// epochs' transform, route, utilization and nvJPEG host-time rows.
fn fed_rows(table: &mut results::Table, kind: &str, alone: &Alone, fed: &Fed) -> Res<()> {
    let (fed_rate, resident_rate, stats) = (fed.rate, fed.resident_rate, &fed.stats);
    let (steady, alone_stats, steady_epochs) = (alone.steady, &alone.stats, alone.epochs);
    table.row(
        &format!("fed_{kind}_consumer_img_s"),
        fed_rate,
        "img/s",
        "consumer loop fed by the loader",
    )?;
    table.row(
        &format!("fed_{kind}_resident_img_s"),
        resident_rate,
        "img/s",
        "same loop, batch already in GPU memory",
    )?;
    table.row(
        &format!("fed_{kind}_throughput_ratio"),
        fed_rate / resident_rate,
        "ratio",
        "acceptance >= 0.98",
    )?;
    table.row(
        &format!("fed_{kind}_fed_ratio"),
        stats.fed_ratio,
        "ratio",
        "loader.stats().fed_ratio, acceptance >= 0.99",
    )?;
    // H2D: the copy rate (bytes / copy-stream time between the events around each
    // batch's copy) in the steady state of the loader alone (the throughput phase,
    // acceptance row) and in the fed epochs (a kernel fills the GPU, the loader is
    // throttled to the consumer); and what the steady state delivered.
    let copy_rate = |s: &Stats| {
        s.stage(Stage::H2d)
            .filter(|h| h.busy_s > 0.0 && h.items > 0)
            .map(|h| {
                (
                    h.bytes as f64 / h.busy_s / 1e9,
                    h.bytes as f64 / h.items as f64,
                )
            })
    };
    if let Some((gbs, per_image)) = copy_rate(alone_stats) {
        table.row(
            &format!("h2d_{kind}_gb_s"),
            gbs,
            "GB/s",
            &format!(
                "loader alone, epochs 1-{steady_epochs}: H2D copy rate (bytes / copy-stream time from events)"
            ),
        )?;
        table.row(
            &format!("h2d_{kind}_wall_gb_s"),
            // Images delivered, not bytes counted: the counters also hold the first
            // copies of the next epoch, which starts early.
            steady * per_image / 1e9,
            "GB/s",
            "same epochs: images delivered per second x H2D bytes per image",
        )?;
    }
    if let Some((gbs, _)) = copy_rate(stats) {
        table.row(
            &format!("h2d_{kind}_fed_gb_s"),
            gbs,
            "GB/s",
            "fed epochs (consumer kernel on the GPU, loader throttled): H2D copy rate",
        )?;
    }
    fed_stage_rows(table, kind, stats)
}

/// The fed epochs' transform capacity, decode routes, utilization, nvJPEG host
/// time and the loader's verdict.
fn fed_stage_rows(table: &mut results::Table, kind: &str, stats: &Stats) -> Res<()> {
    if let Some(tr) = stats.stage(Stage::Transform) {
        table.row(
            &format!("transform_{kind}_img_s"),
            tr.capacity_per_s,
            "img/s",
            "fused kernel capacity from CUDA events",
        )?;
    }
    for (route, n) in &stats.decode_routes {
        table.row(
            &format!("route_{kind}_{route}"),
            *n as f64,
            "images",
            "decode route counts",
        )?;
    }
    if let Some(u) = &stats.utilization {
        for (unit, v) in [("gpu", u.gpu), ("jpeg", u.jpeg), ("cpu", u.cpu)] {
            if let Some(v) = v {
                table.row(
                    &format!("util_{kind}_{unit}_pct"),
                    v,
                    "%",
                    "mean over the fed epochs (loader.stats().utilization)",
                )?;
            }
        }
        writeln!(std::io::stdout(), "utilization: {}", u.verdict())?;
    }
    if let Some(t) = &stats.gpu_decode {
        table.row(
            &format!("loader_{kind}_decode_host_us_per_img"),
            t.host_us_per_image(),
            "us",
            "nvJPEG decode_batch wall time per image, fed epochs (stats.gpu_decode)",
        )?;
        writeln!(std::io::stdout(), "nvJPEG host time: {t}")?;
    }
    writeln!(std::io::stdout(), "{}", stats.verdict())?;
    Ok(())
}

/// Copies 256 MiB from pinned host memory to the device 20 times, timed with events.
fn pinned_ceiling(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Res<f64> {
    let n = 256 << 20;
    // SAFETY: the host buffer is only read by the copies below; uninitialized
    // bytes are fine for a bandwidth measurement.
    let host = unsafe { ctx.alloc_pinned_with_flags::<u8>(n, 0) }?;
    let mut dev = stream.alloc_zeros::<u8>(n)?;
    stream.memcpy_htod(&host, &mut dev)?;
    let a = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    for _ in 0..20 {
        stream.memcpy_htod(&host, &mut dev)?;
    }
    let b = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let ms = f64::from(stoker_loader::gpu::event_elapsed_ms(&a, &b)?);
    Ok(20.0 * n as f64 / (ms / 1e3) / 1e9)
}

/// Writes the JPEGs of `dir` (sorted, `repeat` times) into a dataset at `out`,
/// as JPEG records or as decoded RGB (raw).
fn convert(
    dir: &Path,
    out: &Path,
    raw: bool,
    repeat: usize,
    shard_mib: Option<u64>,
) -> Res<Dataset> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no JPEG in {}", dir.display()).into());
    }
    let mut w = DatasetWriter::create(
        out,
        WriterOptions {
            encoding: Some(if raw { Encoding::Raw } else { Encoding::Jpeg }),
            shard_bytes: shard_mib.map_or(stoker::formats::DEFAULT_SHARD_BYTES, |m| m << 20),
            ..WriterOptions::default()
        },
    )?;
    let decoder = CpuDecoder::new(Limits::default());
    for r in 0..repeat.max(1) {
        for (i, f) in files.iter().enumerate() {
            let data = std::fs::read(f)?;
            let label = ((r * files.len() + i) % 10) as u32;
            if raw {
                let (info, rgb) = decoder.decode_to_vec(&data)?;
                let meta = RecordMeta {
                    encoding: Encoding::Raw,
                    height: info.height,
                    width: info.width,
                    channels: 3,
                    label,
                };
                w.push(meta, &rgb)?;
            } else {
                let info = stoker::decode::probe(&data, &Limits::default())?;
                let meta = RecordMeta {
                    encoding: Encoding::Jpeg,
                    height: info.height,
                    width: info.width,
                    channels: 3,
                    label,
                };
                w.push(meta, &data)?;
            }
        }
    }
    let classes = (0..10).map(|c| format!("class{c}")).collect();
    w.finish(classes, Provenance::stoker(dir.display().to_string()))?;
    Ok(Dataset::open(out)?)
}

/// Removes the temporary dataset on exit.
struct TempDir(Option<PathBuf>);

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}
