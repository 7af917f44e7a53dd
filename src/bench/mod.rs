//! # Overview
//!
//! `stoker bench` as a library: measure each stage of the input pipeline alone —
//! storage read, CPU decode, host-to-device copies, GPU decode, GPU transforms —
//! then the whole pipeline through the loader with a simulated training step,
//! and name the stage that bounds it ([`verdict::judge`]). Every capacity is in
//! images per second so they compare directly.
//!
//! Stages that cannot run here (no GPU, no GPU path in this build) are reported
//! with `img_per_s: None` and the reason, never silently dropped.
//!
//! ```no_run
//! use stoker::bench::{run, BenchOptions, NoProgress};
//!
//! # fn main() -> Result<(), stoker::bench::BenchError> {
//! let report = run("data/imagenet-shards".as_ref(), &BenchOptions::default(), &NoProgress)?;
//! println!("{report}");                    // table + one-line verdict
//! let json = report.to_json();             // stable keys: stages.read.img_per_s, verdict.bound, ...
//! # let _ = json;
//! # Ok(()) }
//! ```
//!
//! # Modules
//!
//! - [`storage`]: cold (`posix_fadvise(DONTNEED)`, checked with `mincore`) and warm reads of the shard files.
//! - [`cpu_decode`]: the routed [`stoker_decode::CpuDecoder`] on every core.
//! - [`pcie`]: opening the GPU without panicking; pinned vs pageable H2D.
//! - [`gpu_decode`]: [`stoker_decode::GpuDecoder`] alone, hardware engines then the CUDA decoder.
//! - [`pipeline`]: end to end through [`stoker_loader::Loader`]; on its GPU path, the
//!   loader's own decode and transform counters give the GPU decode and transform rows.
//! - [`consumer`]: the simulated training step (a busy GPU kernel, or a host sleep).
//! - [`report`]: the table and the JSON.
//! - [`verdict`]: the bound, by how much, what would move it, and the seed's rule.

pub mod consumer;
pub mod cpu_decode;
pub mod gpu_decode;
pub mod pcie;
pub mod pipeline;
pub mod report;
pub mod storage;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::time::Duration;

use stoker_formats::{Dataset, Encoding, FormatError};
use stoker_loader::launcher::{choose_device, NodeShare};
use stoker_loader::{Device, Placement};

pub use report::{BenchReport, RecordErrors, StageReport, Stages};
pub use verdict::{Bound, Verdict};

use report::{MachineInfo, RunInfo};
use verdict::{Capacities, PipelinePath};

/// At most this many records are held in memory for the decode stages.
const SAMPLE_RECORDS: u64 = 4096;
/// At most this many payload bytes are held in memory for the decode stages.
const SAMPLE_BYTES: usize = 256 << 20;

/// Everything that stops a bench run. Stages that merely cannot run are not
/// errors: they are reported with a reason.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The dataset could not be opened or read.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A GPU was asked for explicitly and cannot be used.
    #[error("no usable GPU: {reason}")]
    NoGpu {
        /// Why (no driver, no such device, init failure).
        reason: String,
    },
    /// A CUDA call failed.
    #[error("CUDA {what} failed: {reason}")]
    Cuda {
        /// The operation.
        what: &'static str,
        /// The driver's error.
        reason: String,
    },
    /// The launcher's variables (torchrun's, Slurm's) are inconsistent.
    #[error(transparent)]
    Launcher(stoker_loader::LoaderError),
    /// An option is out of range.
    #[error("invalid bench option `{option}`: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl BenchError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Where the pipeline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// The local rank's GPU (GPU 0 for a single process; the loader's
    /// [`stoker_loader::launcher::choose_device`]) when one is usable, else the CPU.
    #[default]
    Auto,
    /// CPU only; GPU stages are reported as not measured.
    Cpu,
    /// This GPU; an error when it cannot be used.
    Cuda(usize),
}

impl std::str::FromStr for DeviceChoice {
    type Err = String;

    /// Parses `auto`, `cpu`, `cuda`, `cuda:N`.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker::bench::DeviceChoice;
    /// assert_eq!("cuda:1".parse::<DeviceChoice>(), Ok(DeviceChoice::Cuda(1)));
    /// assert!("gpu".parse::<DeviceChoice>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceChoice::Cuda)
                .ok_or_else(|| format!("`{s}`: expected auto, cpu, cuda or cuda:N")),
        }
    }
}

/// Settings of a bench run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOptions {
    /// Where the pipeline runs.
    pub device: DeviceChoice,
    /// Images per batch (loader, H2D copy size, GPU decode batch).
    pub batch: usize,
    /// Output side of the transforms.
    pub size: u32,
    /// Seconds per stage.
    pub seconds: f64,
    /// Simulated training step per batch, milliseconds (0 = no step).
    pub consumer_ms: f64,
    /// Threads for CPU stages; 0 = this process's share of the node (every core
    /// for a single process, [`stoker_loader::launcher::NodeShare`]).
    pub threads: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            device: DeviceChoice::Auto,
            batch: 256,
            size: 224,
            seconds: 2.0,
            consumer_ms: 0.0,
            threads: 0,
        }
    }
}

/// Told what is running, for a progress indicator.
pub trait Progress: Sync {
    /// A stage starts (`read`, `cpu_decode`, …).
    fn stage(&self, name: &str);
    /// Fraction of the current stage done, `0..=1`.
    fn advance(&self, fraction: f64);
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _name: &str) {}
    fn advance(&self, _fraction: f64) {}
}

/// Payloads held in memory for the decode stages, spread over the dataset.
pub(crate) struct Sample {
    pub payloads: Vec<Vec<u8>>,
    /// Records that failed to read (index, error), counted not fatal.
    pub bad: u64,
}

fn load_sample(ds: &Dataset) -> Result<Sample, BenchError> {
    let n = ds.len();
    let want = n.min(SAMPLE_RECORDS);
    let reader = ds.reader()?;
    let mut payloads = Vec::with_capacity(want as usize);
    let mut bytes = 0usize;
    let mut bad = 0u64;
    for k in 0..want {
        // Evenly spread indices, so every shard contributes.
        let index = k * n / want.max(1);
        match reader.get(index) {
            Ok(rec) if rec.header.encoding == Encoding::Jpeg => {
                bytes += rec.payload.len();
                payloads.push(rec.payload.to_vec());
            }
            Ok(_) => {}
            Err(_) => bad += 1,
        }
        if bytes >= SAMPLE_BYTES {
            break;
        }
    }
    Ok(Sample { payloads, bad })
}

/// User + system CPU time of this process.
pub(crate) fn process_cpu_time() -> Option<Duration> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` points to writable memory of the size of `rusage`; getrusage
    // fills it completely on success (return 0), which is checked before use.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it initialized the struct.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Some(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// The 1-minute load average from `/proc/loadavg`, where there is one.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Logical cores available to this process.
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Measures every stage on the dataset at `path` and draws the verdict.
///
/// Takes about `opts.seconds` per stage.
///
/// # Examples
///
/// ```no_run
/// use stoker::bench::{run, BenchOptions, DeviceChoice, NoProgress};
///
/// let opts = BenchOptions { device: DeviceChoice::Cpu, batch: 64, consumer_ms: 100.0, ..Default::default() };
/// let report = run("data/shards".as_ref(), &opts, &NoProgress)?;
/// println!("bound: {:?}, fed {:?}", report.verdict.bound, report.fed_ratio);
/// # Ok::<(), stoker::bench::BenchError>(())
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
    if opts.batch == 0 {
        return Err(BenchError::InvalidOption {
            option: "batch",
            reason: "must be at least 1".into(),
        });
    }
    if !(opts.seconds.is_finite() && opts.seconds > 0.0) {
        return Err(BenchError::InvalidOption {
            option: "seconds",
            reason: format!("{} is not a positive number of seconds", opts.seconds),
        });
    }
    if !(opts.consumer_ms.is_finite() && opts.consumer_ms >= 0.0) {
        return Err(BenchError::InvalidOption {
            option: "consumer-ms",
            reason: format!(
                "{} is not a non-negative number of milliseconds",
                opts.consumer_ms
            ),
        });
    }
    if opts.size == 0 {
        return Err(BenchError::InvalidOption {
            option: "size",
            reason: "must be at least 1".into(),
        });
    }
    let budget = Duration::from_secs_f64(opts.seconds);
    // Under torchrun or srun, each process measures on its share of the node.
    let placement = Placement::from_env().map_err(BenchError::Launcher)?;
    let cores = if opts.threads == 0 {
        NodeShare::of_this_machine(&placement).cores
    } else {
        opts.threads
    };

    let load_avg_start = load_average();
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

    // The GPU, if any: Auto takes the local rank's among those visible, and falls
    // back to the CPU with the reason kept for the table.
    let (auto_ordinal, auto_reason) = match opts.device {
        DeviceChoice::Auto => match stoker_loader::gpu::visible_devices() {
            Ok(n) => match choose_device(Device::Auto, placement.local_rank, || n) {
                Device::Cuda(k) => (
                    k,
                    format!(
                        "Device::Auto: local rank {} mod {n} visible device{}",
                        placement.local_rank,
                        if n == 1 { "" } else { "s" }
                    ),
                ),
                _ => (0, "the CUDA driver reports no device".to_string()),
            },
            Err(reason) => (0, reason),
        },
        _ => (0, String::new()),
    };
    let (gpu, no_gpu_reason) = match opts.device {
        DeviceChoice::Cpu => (None, "--device cpu".to_string()),
        DeviceChoice::Auto => match pcie::open_gpu(auto_ordinal) {
            Ok(g) => (Some(g), String::new()),
            Err(BenchError::NoGpu { reason }) => (None, reason),
            Err(e) => return Err(e),
        },
        DeviceChoice::Cuda(n) => (Some(pcie::open_gpu(n)?), String::new()),
    };
    let path_kind = if gpu.is_some() {
        PipelinePath::Gpu
    } else {
        PipelinePath::Cpu
    };
    let ordinal = match opts.device {
        DeviceChoice::Cuda(n) => n,
        _ => auto_ordinal,
    };
    let device_name = match (opts.device, &gpu) {
        (DeviceChoice::Cuda(n), _) => format!("cuda:{n}"),
        (_, Some(_)) => format!("cuda:{ordinal}"),
        _ => "cpu".to_string(),
    };
    let device_choice = match (opts.device, &gpu) {
        (DeviceChoice::Cuda(_), _) => "--device".to_string(),
        (DeviceChoice::Cpu, _) => "--device cpu".to_string(),
        (DeviceChoice::Auto, Some(_)) => auto_reason,
        (DeviceChoice::Auto, None) => format!("Device::Auto fell back to the CPU: {no_gpu_reason}"),
    };

    let mut stages = Stages::default();
    let mut caps = Capacities {
        path: Some(path_kind),
        cores,
        ..Default::default()
    };

    // 1. Storage.
    progress.stage("read");
    let files: Vec<PathBuf> = (0..manifest.shards.len())
        .map(|i| manifest.shard_path(ds.root(), i))
        .collect();
    let tick = |f: f64| progress.advance(f);
    let st = storage::measure(&files, records, cores, budget, &tick)?;
    let warm_rps = st.records_per_s(st.warm_mb_per_s);
    let (read_rps, read_mb, note) = match st.cold_mb_per_s {
        Some(cold) => (
            st.records_per_s(cold),
            cold,
            format!(
                "cold (posix_fadvise DONTNEED, {:.0}% resident after drop) {:.0} MB/s; warm {:.0} MB/s = {} rec/s; {} threads",
                st.resident_after_drop * 100.0,
                cold,
                st.warm_mb_per_s,
                verdict::fmt_rate(warm_rps),
                st.threads
            ),
        ),
        None => (
            warm_rps,
            st.warm_mb_per_s,
            format!(
                "warm {:.0} MB/s (page cache could not be dropped: {:.0}% resident after posix_fadvise DONTNEED); {} threads",
                st.warm_mb_per_s,
                st.resident_after_drop * 100.0,
                st.threads
            ),
        ),
    };
    let mut read = StageReport::measured(read_rps, note)
        .with("warm_mb_per_s", st.warm_mb_per_s)
        .with("warm_img_per_s", warm_rps)
        .with("resident_after_drop", st.resident_after_drop)
        .with("bytes_per_record", st.bytes_per_record);
    if let Some(cold) = st.cold_mb_per_s {
        read = read
            .with("cold_mb_per_s", cold)
            .with("cold_img_per_s", read_rps);
    }
    stages.read = read.with("mb_per_s", read_mb);
    caps.read = Some(read_rps);
    caps.read_mb_per_s = Some(read_mb);
    caps.read_cold = st.cold_mb_per_s.is_some();

    // 2. CPU decode, from payloads in memory.
    progress.stage("cpu_decode");
    let sample = load_sample(&ds)?;
    let mut cpu_failed = 0;
    stages.cpu_decode = if manifest.encoding == Encoding::Raw {
        StageReport::skipped("the dataset stores raw pixels: nothing to decode")
    } else {
        match cpu_decode::measure(&sample.payloads, cores, budget, &tick) {
            Some(f) => {
                cpu_failed = f.failed_records;
                caps.cpu_decode = Some(f.img_per_s);
                StageReport::measured(
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
                .with("failed", f.failed as f64)
            }
            None => {
                cpu_failed = sample.payloads.len() as u64;
                StageReport::skipped(format!(
                    "no record of the {} sampled decoded",
                    sample.payloads.len()
                ))
            }
        }
    };

    // 3. H2D.
    progress.stage("h2d");
    stages.h2d = match &gpu {
        None => StageReport::skipped(format!("no GPU: {no_gpu_reason}")),
        Some((ctx, _)) => {
            let batch_bytes = (mean_record_bytes * opts.batch as f64).ceil() as usize;
            let h = pcie::measure_h2d(ctx, batch_bytes, budget, &tick)?;
            let img = h.pinned_gb_per_s * 1e9 / mean_record_bytes.max(1.0);
            let decoded_bytes = f64::from(opts.size).powi(2) * 3.0;
            caps.h2d = Some(img);
            caps.h2d_gb_per_s = Some(h.pinned_gb_per_s);
            StageReport::measured(
                img,
                format!(
                    "pinned {:.1} GB/s vs pageable {:.1} GB/s ({:.1}×), {} MB copies; img/s of compressed JPEG ({} img/s as {}² RGB u8)",
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

    // 4. GPU decode alone.
    progress.stage("gpu_decode");
    let gpu_decode_alone = gpu
        .as_ref()
        .map(|(ctx, _)| gpu_decode::measure(ctx, &sample.payloads, opts.batch, budget, &tick));

    // 5. End to end through the loader; on the GPU path its counters also give
    // the GPU transform capacity (6).
    progress.stage("end_to_end");
    let (e2e, loader_caps) = pipeline::end_to_end(
        &ds,
        opts,
        gpu.as_ref().map(|(ctx, _)| (ctx, ordinal)),
        cores,
        budget,
        &tick,
    );
    let fed_ratio = e2e.fed_ratio;
    let loader_bad = e2e.bad_records;
    if opts.consumer_ms > 0.0 {
        caps.consumer = Some(opts.batch as f64 * 1000.0 / opts.consumer_ms);
    }
    caps.end_to_end = e2e.stage.img_per_s;
    caps.fed_ratio = e2e.fed_ratio;
    caps.cpu_util = e2e.cpu_util;
    caps.gpu_util = e2e.gpu_util;
    stages.end_to_end = e2e.stage;

    let (gpu_decode, transform) = match &gpu {
        None => (
            StageReport::skipped(format!("no GPU: {no_gpu_reason}")),
            StageReport::skipped(format!("no GPU: {no_gpu_reason}")),
        ),
        Some(_) => (
            match gpu_decode_alone {
                Some(row) if row.img_per_s.is_some() => row,
                // The decoder alone could not run: the loader's counters, if any.
                _ => pipeline::gpu_decode_from_loader(&loader_caps),
            },
            pipeline::gpu_transform_from_loader(&loader_caps),
        ),
    };
    caps.gpu_decode = gpu_decode.img_per_s;
    caps.transform = transform.img_per_s;
    stages.gpu_decode = gpu_decode;
    stages.transform = transform;
    if gpu.is_some() && !loader_caps.gpu_path {
        // A GPU is here but the loader ran on the CPU: judge the path that ran,
        // whose copies are the decoded f32 tensors, not the JPEG bytes.
        caps.path = Some(PipelinePath::Cpu);
        caps.h2d = caps
            .h2d_gb_per_s
            .map(|gb| gb * 1e9 / (f64::from(opts.size).powi(2) * 3.0 * 4.0));
    }

    let verdict = verdict::judge(&caps);
    Ok(BenchReport {
        run: RunInfo {
            dataset: path.display().to_string(),
            records,
            mean_record_bytes,
            device: device_name,
            batch: opts.batch,
            size: opts.size,
            seconds: opts.seconds,
            consumer_ms: opts.consumer_ms,
            placement,
            device_choice,
        },
        machine: MachineInfo {
            cores: available_cores(),
            gpu: gpu.as_ref().map(|(_, name)| name.clone()),
            load_avg_start,
        },
        stages,
        fed_ratio,
        verdict,
        record_errors: RecordErrors {
            unreadable: sample.bad,
            undecodable: cpu_failed,
            loader_bad,
        },
    })
}
