//! The snapshot types: [`Stats`] (what [`super::Metrics::snapshot`] returns), its per-stage
//! rows ([`StageStats`]), the [`Stage`] names and the [`Utilization`] means, with the
//! verdict rules that read them.

use std::collections::BTreeMap;

use stoker_decode::DecodeTimings;

use crate::launcher::Placement;

/// A pipeline stage.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Stage {
    /// Fetching the record from the shard (mmap page-in, CRC check).
    Read,
    /// JPEG → RGB pixels.
    Decode,
    /// Crop, resize, flip, normalize, layout, dtype.
    Transform,
    /// Host → device copy (GPU path).
    H2d,
    /// Handing a finished batch to the consumer.
    Handoff,
}

impl Stage {
    /// All stages, in pipeline order.
    pub const ALL: [Stage; 5] = [
        Stage::Read,
        Stage::Decode,
        Stage::Transform,
        Stage::H2d,
        Stage::Handoff,
    ];

    /// Lower-case name used in tables, JSON and Prometheus labels.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Read => "read",
            Stage::Decode => "decode",
            Stage::Transform => "transform",
            Stage::H2d => "h2d",
            Stage::Handoff => "handoff",
        }
    }

    pub(crate) fn slot(self) -> usize {
        self as usize
    }
}

/// Mean utilizations over an interval, in percent (`None`: not measured here).
///
/// The GPU path samples them every 100 ms while an epoch runs: GPU and JPEG
/// engines through NVML where the driver has it, CPUs from [`crate::metrics::cpu_busy_reading`]
/// (the machine's `/proc/stat`, or the container's CPU time over the CPUs it may use).
///
/// # Examples
///
/// ```
/// use stoker_loader::metrics::Utilization;
/// let u = Utilization { gpu: Some(40.0), jpeg: Some(90.0), cpu: Some(95.0), samples: 10 };
/// assert!(u.verdict().starts_with("input-bound"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Utilization {
    /// GPU (SM) busy time, NVML's `utilization.gpu`.
    pub gpu: Option<f64>,
    /// JPEG engines, NVML's JPG utilization.
    pub jpeg: Option<f64>,
    /// The CPUs this process may use: all the machine's (`/proc/stat`), or in a container
    /// or allocation with fewer, its cgroup's CPU time over theirs.
    pub cpu: Option<f64>,
    /// Samples taken.
    pub samples: u64,
}

impl Utilization {
    /// The input-bound rule as one line: GPU under 70 % while the CPUs are over 85 %
    /// means the loader's CPU side limits training.
    pub fn verdict(&self) -> String {
        let pct = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0}%"));
        let head = match (self.gpu, self.cpu) {
            (Some(g), Some(c)) if g < 70.0 && c > 85.0 => "input-bound (GPU < 70% while CPU > 85%)",
            (Some(_), Some(_)) => "not input-bound by the GPU/CPU rule",
            _ => "GPU utilization unavailable (no NVML)",
        };
        format!(
            "{head}: GPU {}, JPEG engines {}, CPU {} over {} samples",
            pct(self.gpu),
            pct(self.jpeg),
            pct(self.cpu),
            self.samples
        )
    }
}

/// One stage in a [`Stats`] snapshot.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StageStats {
    /// Which stage.
    pub stage: Stage,
    /// Threads working it concurrently.
    pub threads: u64,
    /// Items (images) it processed.
    pub items: u64,
    /// Bytes it processed (input bytes for read/decode, output bytes for transform/h2d).
    pub bytes: u64,
    /// Summed busy time over its threads, seconds.
    pub busy_s: f64,
    /// What it could sustain alone: `items · threads / busy` items per second; infinite
    /// while it has no busy time (written `null` in JSON, and read back so).
    #[serde(deserialize_with = "infinite_if_null")]
    pub capacity_per_s: f64,
}

/// An `f64` that JSON holds as `null` where it was not finite (serde_json writes every
/// non-finite number so): read back as infinite, the one such value a capacity takes.
/// Without it a snapshot of a loader before its first epoch, or after `reset_stats`,
/// could not be read back from its own JSON.
fn infinite_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v: Option<f64> = serde::Deserialize::deserialize(d)?;
    Ok(v.unwrap_or(f64::INFINITY))
}

/// A snapshot of a loader's counters since it was built (or last reset).
///
/// `Display` prints a compact table ending in a one-line verdict; `serde` gives JSON.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Stats {
    /// Epochs iterated to the end.
    pub epochs: u64,
    /// Epochs whose pipeline was started when the previous epoch's last batch was
    /// handed out, and used ([`crate::LoaderBuilder::prefetch_next_epoch`]).
    #[serde(default)]
    pub epochs_started_early: u64,
    /// Batches handed to the consumer.
    pub batches: u64,
    /// Images handed to the consumer.
    pub images: u64,
    /// Seconds the consumer spent iterating.
    pub elapsed_s: f64,
    /// Seconds the consumer was blocked waiting for a batch.
    pub consumer_wait_s: f64,
    /// `1 − wait / elapsed`: the share of time the consumer had a batch ready.
    pub fed_ratio: f64,
    /// `images / elapsed`.
    pub images_per_s: f64,
    /// Per-stage counters (stages that ran). They count the work done, which includes
    /// the first batches of a next epoch started early
    /// ([`crate::LoaderBuilder::prefetch_next_epoch`]), so after an epoch a stage's
    /// items can exceed `images`.
    pub stages: Vec<StageStats>,
    /// Images decoded per route (like `stages`, early starts included).
    pub decode_routes: BTreeMap<String, u64>,
    /// Records that failed and were replaced (or returned as errors), counted when the
    /// batch they were met in is handed out (so batches built ahead and never handed
    /// out count nothing).
    pub bad_records: u64,
    /// Distinct records among `bad_records` (a bad record is met again in every epoch,
    /// and as each failed replacement).
    pub bad_distinct: u64,
    /// The first distinct bad record indices.
    pub bad_indices: Vec<u64>,
    /// Mean number of finished batches waiting when the consumer asked for one.
    pub queue_mean: f64,
    /// Most finished batches ever waiting.
    pub queue_max: u64,
    /// Batch slots in flight at most.
    pub queue_capacity: u64,
    /// Threads that run read, decode and transform in turn (CPU path); 0 if separate.
    #[serde(default)]
    pub shared_workers: u64,
    /// Host batch buffer bytes alive now: the ring made at build, plus the buffers made for
    /// batches built while a script kept every ring buffer (a list of past batches), until
    /// they are freed; batches kept after the loader is closed still count.
    pub host_bytes: u64,
    /// Pinned staging bytes (GPU path).
    pub pinned_bytes: u64,
    /// Device bytes (GPU path).
    pub device_bytes: u64,
    /// What produced the batches: `"cpu, N workers"`, `"cuda:N, …"`, or the CPU with
    /// the reason [`crate::Device::Auto`] did not use the GPU.
    #[serde(default)]
    pub backend: String,
    /// GPU, JPEG-engine and CPU utilization while epochs ran (GPU path; `None` when
    /// nothing was sampled).
    #[serde(default)]
    pub utilization: Option<Utilization>,
    /// GPU path with JPEG records: where the nvJPEG decoder's host time went, per
    /// phase ([`stoker_decode::DecodeTimings`]); its `total_s` is the decode stage's
    /// busy time.
    #[serde(default)]
    pub gpu_decode: Option<DecodeTimings>,
    /// Where this process runs in its job as its launcher says (launcher, rank,
    /// world, local rank and world, and `note`: what the reading had to assume,
    /// `null` when nothing); `None` before a loader set it.
    #[serde(default)]
    pub placement: Option<Placement>,
    /// The slice of every epoch this loader loads, `[rank, world]` (the
    /// placement's with [`crate::LoaderBuilder::distributed_from_env`]).
    #[serde(default)]
    pub slice: Option<[u64; 2]>,
    /// The device the batches are produced on (`cpu`, `cuda:N`), and for
    /// [`crate::Device::Auto`] why.
    #[serde(default)]
    pub device: String,
}

/// Below this fed ratio the loader, not the consumer, sets the pace.
pub const FED_THRESHOLD: f64 = 0.95;

impl Stats {
    /// The counters of one stage, if it ran.
    pub fn stage(&self, stage: Stage) -> Option<&StageStats> {
        self.stages.iter().find(|s| s.stage == stage)
    }

    /// The stage with the lowest capacity (items/s it could sustain), excluding handoff.
    pub fn limiting_stage(&self) -> Option<&StageStats> {
        self.stages
            .iter()
            .filter(|s| s.stage != Stage::Handoff && s.items > 0)
            .min_by(|a, b| a.capacity_per_s.total_cmp(&b.capacity_per_s))
    }

    /// When the stages share worker threads (the CPU path's read, decode and transform,
    /// `shared_workers` of them), what those workers can sustain doing all three:
    /// `images · workers / (busy_read + busy_decode + busy_transform)`.
    pub fn worker_capacity_per_s(&self) -> Option<f64> {
        if self.shared_workers == 0 {
            return None;
        }
        let busy: f64 = self
            .stages
            .iter()
            .filter(|s| matches!(s.stage, Stage::Read | Stage::Decode | Stage::Transform))
            .map(|s| s.busy_s)
            .sum();
        let items = self.stage(Stage::Transform)?.items;
        (busy > 0.0).then(|| items as f64 * self.shared_workers as f64 / busy)
    }

    /// The one-line verdict that ends the table.
    pub fn verdict(&self) -> String {
        if self.batches == 0 {
            return "verdict: no batches yet".into();
        }
        let wait_pct = 100.0 * (1.0 - self.fed_ratio);
        if self.fed_ratio >= FED_THRESHOLD {
            return format!(
                "verdict: FED — the consumer waited {wait_pct:.1}% of the time; the training step sets the pace"
            );
        }
        let shared = match self.worker_capacity_per_s() {
            Some(c) => format!(
                "; read+decode+transform share {} worker thread{}: {c:.0} img/s together",
                self.shared_workers,
                if self.shared_workers == 1 { "" } else { "s" }
            ),
            None => String::new(),
        };
        match self.limiting_stage() {
            Some(s) => format!(
                "verdict: STARVED — the consumer waited {wait_pct:.1}% of the time; limiting stage: {} ({:.0} img/s on {} thread{}){shared}",
                s.stage.name(),
                s.capacity_per_s,
                s.threads,
                if s.threads == 1 { "" } else { "s" }
            ),
            None => format!("verdict: STARVED — the consumer waited {wait_pct:.1}% of the time"),
        }
    }

    /// JSON text of this snapshot.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
