//! # Overview
//!
//! The stage benchmark behind `stoker bench` (not the criterion benches in
//! `benches/`): measure each stage of the input pipeline alone —
//! storage read, CPU decode, host-to-device copies, GPU decode, transforms —
//! then the whole pipeline through the loader with a simulated training step,
//! and name the stage that bounds it ([`verdict::judge`]). Every capacity is in
//! images per second so they compare directly.
//!
//! Stages that cannot run here (no GPU, no GPU path in this build) are reported
//! with `img_per_s: None` and the reason, never silently dropped.
//!
//! ```no_run
//! use stoker::bottleneck::{run, BenchOptions, NoProgress};
//!
//! # fn main() -> Result<(), stoker::bottleneck::BenchError> {
//! let report = run("data/imagenet-shards".as_ref(), &BenchOptions::default(), &NoProgress)?;
//! println!("{report}");                    // table + one-line verdict
//! let json = report.to_json();             // stable keys: stages.read.img_per_s, verdict.bound, ...
//! # let _ = json;
//! # Ok(()) }
//! ```
//!
//! # Modules
//!
//! In flow order: [`BenchOptions`] are checked, the device is chosen (Auto:
//! the local rank's GPU, else the CPU with the reason), then each stage is
//! measured in turn and the capacities go to [`verdict::judge`].
//!
//! - [`storage`]: cold (`posix_fadvise(DONTNEED)`, checked with `mincore`) and warm reads of the shard files.
//! - [`cpu_decode`]: the routed [`stoker_decode::CpuDecoder`] on every core.
//! - [`pcie`]: opening the GPU without panicking; pinned vs pageable H2D.
//! - [`gpu_decode`]: [`stoker_decode::GpuDecoder`] alone, hardware engines then the CUDA decoder.
//! - [`pipeline`]: end to end through [`stoker_loader::Loader`]; on its GPU path, the
//!   loader's own decode and transform counters give the GPU decode and transform rows; on
//!   its CPU path, the transform counters give the CPU transform row (what bounds raw records).
//! - [`consumer`]: the simulated training step (a busy GPU kernel, or a host sleep).
//! - [`report`]: the table and the JSON.
//! - [`verdict`]: the bound, by how much, what would move it, and the closed-loop
//!   input-bound rule (consumer busy < 70 % while the CPU is > 85 % busy).
//!
//! The run's inputs and plumbing each have their own private module: options
//! ([`BenchOptions`], [`Progress`]), errors ([`BenchError`]), the device choice,
//! the decode sample and the host's counters ([`available_cores`]).

pub mod consumer;
pub mod cpu_decode;
pub mod gpu_decode;
pub mod pcie;
pub mod pipeline;
pub mod report;
pub mod storage;
pub mod verdict;

mod device;
mod error;
mod host;
mod options;
mod sample;

use std::path::{Path, PathBuf};
use std::time::Duration;

use stoker_formats::{Dataset, Encoding, Manifest};
use stoker_loader::launcher::NodeShare;
use stoker_loader::Placement;

pub use error::BenchError;
pub use host::available_cores;
pub use options::{
    check_batch, check_consumer_ms, check_seconds, check_size, check_step_fits, check_threads,
    BenchOptions, DeviceChoice, NoProgress, Progress, MAX_CONSUMER_MS, MAX_SECONDS, MIN_SECONDS,
    MIN_STEPS_PER_STAGE,
};
pub use report::{BenchReport, RecordErrors, StageReport, Stages};
pub use verdict::{Bound, Verdict};

use device::ChosenDevice;
use report::{MachineInfo, RunInfo};
use sample::Sample;
use verdict::{Capacities, PipelinePath};

/// Measures every stage on the dataset at `path` and draws the verdict.
///
/// Takes about `opts.seconds` per stage.
///
/// # Examples
///
/// ```no_run
/// use stoker::bottleneck::{run, BenchOptions, DeviceChoice, NoProgress};
///
/// let opts = BenchOptions { device: DeviceChoice::Cpu, batch: 64, consumer_ms: 100.0, ..Default::default() };
/// let report = run("data/shards".as_ref(), &opts, &NoProgress)?;
/// println!("bound: {:?}, fed {:?}", report.verdict.bound, report.fed_ratio);
/// # Ok::<(), stoker::bottleneck::BenchError>(())
/// ```
///
/// # Errors
///
/// [`BenchError::Format`] when the dataset cannot be opened, [`BenchError::Io`]
/// when a shard cannot be read, [`BenchError::NoGpu`] when `--device cuda:N`
/// names an unusable GPU, [`BenchError::InvalidOption`] for out-of-range options.
pub fn run(
    path: &Path,
    opts: &BenchOptions,
    progress: &dyn Progress,
) -> Result<BenchReport, BenchError> {
    opts.check()?;
    // Under torchrun or srun, each process measures on its share of the node.
    let placement = Placement::from_env().map_err(BenchError::Launcher)?;
    let cores = match opts.threads {
        0 => NodeShare::of_this_machine(&placement).cores,
        // More threads than cores take turns on them, and each stage's rate counted every
        // thread as a core: `--threads 1000` on 2 cores gave transforms at 68k img/s, a
        // verdict naming 1000 cores, and 9 GB of per-thread buffers for 15 images.
        asked => {
            let usable = host::available_cores();
            if asked > usable {
                tracing::warn!(
                    "--threads {asked}: this process may use {usable} cores, so the CPU stages run on {usable} threads"
                );
            }
            asked.min(usable)
        }
    };

    let load_avg_start = host::load_average();
    let ds = Dataset::open(path)?;
    let manifest = ds.manifest().clone();
    let records = ds.len();
    // No batch is larger than the dataset: the copy and decode stages size their buffers
    // by the batch, so a batch size far above the record count is cut to it here.
    let clamped;
    let opts = if opts.batch as u64 > records.max(1) {
        clamped = BenchOptions {
            batch: records.max(1) as usize,
            ..opts.clone()
        };
        &clamped
    } else {
        opts
    };
    let mean_record_bytes = if records > 0 {
        manifest.payload_bytes as f64 / records as f64
    } else {
        0.0
    };

    let dev = device::choose(opts.device, &placement)?;
    let mut m = Measurement::new(opts, opts.budget()?, &dev, cores, progress);
    m.read(&ds, &manifest)?;
    let (sample, cpu_failed) = m.cpu_decode(&ds, manifest.encoding)?;
    m.h2d(mean_record_bytes)?;
    let (fed_ratio, loader_bad, outside_fault) = m.gpu_and_end_to_end(&ds, &sample);
    let verdict = verdict::judge(&m.caps);
    let stages = m.stages;
    Ok(BenchReport {
        run: RunInfo {
            dataset: stoker_formats::lossless_text(path.as_os_str()),
            records,
            mean_record_bytes,
            device: dev.name,
            batch: opts.batch,
            size: opts.size,
            seconds: opts.seconds,
            consumer_ms: opts.consumer_ms,
            placement,
            device_choice: dev.choice,
        },
        machine: MachineInfo {
            cores: available_cores(),
            gpu: dev.gpu.as_ref().map(|(_, name)| name.clone()),
            load_avg_start,
            machine_cpus: host::machine_cpus(),
        },
        stages,
        fed_ratio,
        verdict,
        record_errors: RecordErrors {
            unreadable: sample.bad,
            undecodable: cpu_failed,
            loader_bad,
        },
        outside_fault,
    })
}

/// One run's stages in the order they are measured: each method measures one
/// stage, writes its row and the capacities the verdict reads.
struct Measurement<'a> {
    opts: &'a BenchOptions,
    dev: &'a ChosenDevice,
    /// Threads for the CPU stages.
    cores: usize,
    /// Time per stage.
    budget: Duration,
    progress: &'a dyn Progress,
    /// The table rows so far.
    stages: Stages,
    /// What the verdict is drawn from, so far.
    caps: Capacities,
}

impl<'a> Measurement<'a> {
    fn new(
        opts: &'a BenchOptions,
        budget: Duration,
        dev: &'a ChosenDevice,
        cores: usize,
        progress: &'a dyn Progress,
    ) -> Self {
        let path_kind = if dev.gpu.is_some() {
            PipelinePath::Gpu
        } else {
            PipelinePath::Cpu
        };
        Measurement {
            opts,
            dev,
            cores,
            budget,
            progress,
            stages: Stages::default(),
            caps: Capacities {
                path: Some(path_kind),
                cores,
                ..Default::default()
            },
        }
    }

    /// Stage 1, storage: cold then warm reads of the shard files.
    fn read(&mut self, ds: &Dataset, manifest: &Manifest) -> Result<(), BenchError> {
        self.progress.stage("read");
        let files: Vec<PathBuf> = (0..manifest.shards.len())
            .map(|i| manifest.shard_path(ds.root(), i))
            .collect();
        let tick = |f: f64| self.progress.advance(f);
        let st = storage::measure(&files, ds.len(), self.cores, self.budget, &tick)?;
        let warm_rps = st.records_per_s(st.warm_mb_per_s);
        let dataset_bytes = manifest.shard_bytes();
        let memory = stoker_loader::launcher::memory_total();
        let cached = storage::fits_page_cache(dataset_bytes, memory);
        let (read_mb, read_cold) = storage::steady_read(st.cold_mb_per_s, st.warm_mb_per_s, cached);
        let read_rps = st.records_per_s(read_mb);
        let mut note = match st.cold_mb_per_s {
            Some(cold) => format!(
                "cold (posix_fadvise DONTNEED, {:.0}% resident after drop) {:.0} MB/s = {} rec/s; warm {:.0} MB/s = {} rec/s; {} threads",
                st.resident_after_drop * 100.0,
                cold,
                verdict::fmt_rate(st.records_per_s(cold)),
                st.warm_mb_per_s,
                verdict::fmt_rate(warm_rps),
                st.threads
            ),
            None if st.resident_after_drop < 0.5 => format!(
                "warm {:.0} MB/s (the stage time left no time for a cold read); {} threads",
                st.warm_mb_per_s, st.threads
            ),
            None => format!(
                "warm {:.0} MB/s (page cache could not be dropped: {:.0}% resident after posix_fadvise DONTNEED); {} threads",
                st.warm_mb_per_s,
                st.resident_after_drop * 100.0,
                st.threads
            ),
        };
        if let (Some(_), Some(m)) = (st.cold_mb_per_s, memory.filter(|_| cached)) {
            note.push_str(&format!(
                "; warm counts: the dataset ({:.1} GB) fits in half the {:.1} GB this process may use, so only a first epoch reads cold",
                dataset_bytes as f64 / 1e9,
                m as f64 / 1e9
            ));
        }
        let mut read = StageReport::measured(read_rps, note)
            .with("warm_mb_per_s", st.warm_mb_per_s)
            .with("warm_img_per_s", warm_rps)
            .with("resident_after_drop", st.resident_after_drop)
            .with("bytes_per_record", st.bytes_per_record);
        if let Some(cold) = st.cold_mb_per_s {
            read = read
                .with("cold_mb_per_s", cold)
                .with("cold_img_per_s", st.records_per_s(cold));
        }
        self.stages.read = read.with("mb_per_s", read_mb);
        self.caps.read = Some(read_rps);
        self.caps.read_mb_per_s = Some(read_mb);
        self.caps.read_cold = read_cold;
        self.caps.read_cached = cached;
        Ok(())
    }

    /// Stage 2, CPU decode, from payloads in memory. Returns the sample (the
    /// GPU decode stage reuses it) and how many of its records failed to decode.
    fn cpu_decode(
        &mut self,
        ds: &Dataset,
        encoding: Encoding,
    ) -> Result<(Sample, u64), BenchError> {
        self.progress.stage("cpu_decode");
        let sample = sample::load_sample(ds)?;
        let failed = self.cpu_decode_sample(encoding, &sample);
        Ok((sample, failed))
    }

    fn cpu_decode_sample(&mut self, encoding: Encoding, sample: &Sample) -> u64 {
        if encoding == Encoding::Raw {
            self.stages.cpu_decode =
                StageReport::skipped("the dataset stores raw pixels: nothing to decode");
            return 0;
        }
        let tick = |f: f64| self.progress.advance(f);
        match cpu_decode::measure(
            &sample.payloads,
            sample.limits,
            self.cores,
            self.budget,
            &tick,
        ) {
            Some(f) => {
                self.caps.cpu_decode = Some(f.img_per_s);
                self.stages.cpu_decode = StageReport::measured(
                    f.img_per_s,
                    format!(
                        "{} threads, {:.0} Mpx/s, {} img per CPU-second, {} distinct images, routes {}{}",
                        f.threads,
                        f.mpix_per_s,
                        f.img_per_cpu_s.map(verdict::fmt_rate).unwrap_or_else(|| "?".into()),
                        sample.payloads.len(),
                        f.routes,
                        if sample.bad > 0 {
                            format!(", {} unreadable records skipped", sample.bad)
                        } else {
                            String::new()
                        }
                    ),
                )
                .with("threads", f.threads as f64)
                .with("img_per_cpu_s", f.img_per_cpu_s.unwrap_or(f64::NAN))
                .with("mpix_per_s", f.mpix_per_s)
                .with("failed", f.failed as f64);
                f.failed_records
            }
            None => {
                self.stages.cpu_decode = StageReport::skipped(format!(
                    "no record of the {} sampled decoded",
                    sample.payloads.len()
                ));
                sample.payloads.len() as u64
            }
        }
    }

    /// Stage 3, H2D: pinned vs pageable copies of one batch of compressed bytes.
    fn h2d(&mut self, mean_record_bytes: f64) -> Result<(), BenchError> {
        self.progress.stage("h2d");
        let opts = self.opts;
        self.stages.h2d = match &self.dev.gpu {
            None => StageReport::skipped(format!("no GPU: {}", self.dev.no_gpu_reason)),
            Some((ctx, _)) => {
                let tick = |f: f64| self.progress.advance(f);
                let batch_bytes = (mean_record_bytes * opts.batch as f64).ceil() as usize;
                // A failed copy is this stage's row, not the run's end.
                let h = match pcie::measure_h2d(ctx, batch_bytes, self.budget, &tick) {
                    Ok(h) => h,
                    Err(e) => {
                        self.stages.h2d =
                            StageReport::skipped(format!("the H2D copies failed: {e}"));
                        return Ok(());
                    }
                };
                let img = h.pinned_gb_per_s * 1e9 / mean_record_bytes.max(1.0);
                let decoded_bytes = f64::from(opts.size).powi(2) * 3.0;
                self.caps.h2d = Some(img);
                self.caps.h2d_gb_per_s = Some(h.pinned_gb_per_s);
                StageReport::measured(
                    img,
                    format!(
                        "pinned {:.1} GB/s vs pageable {:.1} GB/s ({:.1}×), {} MiB copies; img/s of compressed JPEG ({} img/s as {}² RGB u8)",
                        h.pinned_gb_per_s,
                        h.pageable_gb_per_s,
                        h.pinned_gb_per_s / h.pageable_gb_per_s.max(1e-9),
                        h.copy_bytes >> 20,
                        verdict::fmt_rate(h.pinned_gb_per_s * 1e9 / decoded_bytes),
                        opts.size
                    ),
                )
                .with("pinned_gb_per_s", h.pinned_gb_per_s)
                .with("pageable_gb_per_s", h.pageable_gb_per_s)
                .with("copy_bytes", h.copy_bytes as f64)
            }
        };
        Ok(())
    }

    /// Stage 4, GPU decode alone, then stage 5, end to end through the loader;
    /// on the GPU path the loader's counters also give the GPU transform
    /// capacity (stage 6), and the GPU decode row when the decoder alone could
    /// not run. Returns the fed ratio and the records the loader replaced.
    fn gpu_and_end_to_end(&mut self, ds: &Dataset, sample: &Sample) -> (Option<f64>, u64, bool) {
        let opts = self.opts;
        let gpu = &self.dev.gpu;
        let tick = |f: f64| self.progress.advance(f);
        self.progress.stage("gpu_decode");
        let gpu_decode_alone = gpu.as_ref().map(|(ctx, _)| {
            gpu_decode::measure(
                ctx,
                &sample.payloads,
                sample.limits,
                opts.batch,
                self.budget,
                opts.waits,
                &tick,
            )
        });

        self.progress.stage("end_to_end");
        let (e2e, loader_caps) = pipeline::end_to_end(
            ds,
            opts,
            gpu.as_ref().map(|(ctx, _)| (ctx, self.dev.ordinal)),
            self.cores,
            self.budget,
            &tick,
        );
        let caps = &mut self.caps;
        if opts.consumer_ms > 0.0 {
            caps.consumer = Some(opts.batch as f64 * 1000.0 / opts.consumer_ms);
        }
        caps.end_to_end = e2e.stage.img_per_s;
        caps.fed_ratio = e2e.fed_ratio;
        caps.cpu_util = e2e.cpu_util;
        caps.gpu_util = e2e.gpu_util;
        caps.img_per_cpu_s = e2e.img_per_cpu_s;
        caps.epoch_batches = e2e.epoch_batches;
        self.stages.end_to_end = e2e.stage;

        let no_gpu_reason = &self.dev.no_gpu_reason;
        let gpu_decode = match gpu {
            None => StageReport::skipped(format!("no GPU: {no_gpu_reason}")),
            Some(_) => match gpu_decode_alone {
                Some(row) if row.img_per_s.is_some() => row,
                // The decoder alone could not run: the loader's counters, if any.
                _ => pipeline::gpu_decode_from_loader(&loader_caps),
            },
        };
        // The transforms of the path that ran: on the CPU path they are a stage of their
        // own, the one that bounds raw records.
        let transform = if loader_caps.gpu_path {
            let row = pipeline::gpu_transform_from_loader(&loader_caps);
            caps.transform = row.img_per_s;
            row
        } else {
            let row = pipeline::cpu_transform_from_loader(&loader_caps);
            caps.cpu_transform = row.img_per_s;
            row
        };
        caps.gpu_decode = gpu_decode.img_per_s;
        self.stages.gpu_decode = gpu_decode;
        self.stages.transform = transform;
        if gpu.is_some() && !loader_caps.gpu_path {
            // A GPU is here but the loader ran on the CPU: judge the path that ran,
            // whose copies are the decoded f32 tensors, not the JPEG bytes.
            caps.path = Some(PipelinePath::Cpu);
            caps.h2d = caps
                .h2d_gb_per_s
                .map(|gb| gb * 1e9 / (f64::from(opts.size).powi(2) * 3.0 * 4.0));
        }
        (e2e.fed_ratio, e2e.bad_records, e2e.outside_fault)
    }
}
