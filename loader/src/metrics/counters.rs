//! [`Metrics`]: the shared atomic counters every stage of both backends and the consumer
//! side record into, and the clocks they are read against.

use std::collections::BTreeMap;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed},
};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use stoker_decode::DecodeTimings;

use super::stats::{Stage, StageStats, Stats, Utilization};
use crate::fork::Owner;
use crate::launcher::Placement;

#[derive(Debug, Default)]
struct StageCounters {
    busy_ns: AtomicU64,
    items: AtomicU64,
    bytes: AtomicU64,
    /// Threads working this stage concurrently (0 = stage unused).
    threads: AtomicU64,
}

/// How many bad record indices are kept for the report (all are counted).
const KEPT_BAD_INDICES: usize = 64;

#[derive(Debug, Default)]
struct BadRecords {
    count: u64,
    /// Every distinct index met (at most the dataset's length): a record met again, in a
    /// later epoch or as a failed replacement, is counted once here.
    seen: std::collections::HashSet<u64>,
    /// The first [`KEPT_BAD_INDICES`] distinct indices.
    indices: Vec<u64>,
}

/// Shared, lock-free-on-the-hot-path counters of one loader (all stages, both paths).
/// Written by the loader's own threads only; read with [`Metrics::snapshot`] (what
/// [`crate::Loader::stats`] returns), e.g. by an exporter holding
/// [`crate::Loader::metrics`] on a thread of its own.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use stoker_loader::{Loader, Stage};
/// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?;
/// let metrics = Arc::clone(loader.metrics());
/// let exporter = std::thread::spawn(move || {
///     let s = metrics.snapshot();
///     s.stage(Stage::Decode).map_or(0, |d| d.items)
/// });
/// for batch in loader.epoch(0) { batch?; }
/// println!("decoded so far: {}", exporter.join().unwrap());
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct Metrics {
    stages: [StageCounters; 5],
    routes: Mutex<BTreeMap<String, u64>>,
    bad: Mutex<BadRecords>,
    images: AtomicU64,
    batches: AtomicU64,
    epochs: AtomicU64,
    /// Epochs whose pipeline started before the consumer asked for them.
    early_epochs: AtomicU64,
    /// Nanoseconds the consumer was blocked in `next()`.
    wait_ns: AtomicU64,
    /// Nanoseconds the consumer spent iterating epochs (iterator creation → end or drop),
    /// counted as it goes (at each `next()`), so a snapshot mid-epoch is consistent with
    /// `wait_ns`, and time before the last [`Metrics::reset`] is never counted.
    elapsed_ns: AtomicU64,
    /// When the counters were last reset, in [`clock_ns`] units (0: never).
    reset_at_ns: AtomicU64,
    queue_samples: AtomicU64,
    queue_sum: AtomicU64,
    queue_max: AtomicU64,
    queue_capacity: AtomicU64,
    /// Threads that each run read → decode → transform in turn (CPU path); 0 when every
    /// stage has its own threads.
    shared_workers: AtomicU64,
    host_bytes: AtomicU64,
    pinned_bytes: AtomicU64,
    device_bytes: AtomicU64,
    /// Utilization samples (GPU path: NVML and `/proc/stat`), summed since the last reset.
    utilization: Mutex<UtilizationSums>,
    /// The sampler whose samples go into `utilization` (0: none yet). Each epoch runs its
    /// own sampler, and an epoch started early runs beside the one ending: only one of
    /// them may count, or the overlap's samples would count twice.
    utilization_recorder: AtomicU64,
    /// What produces the batches (set once at build).
    backend: Mutex<String>,
    /// Where this process runs in its job, and the slice `(rank, world)` it loads
    /// (set once at build).
    placement: Mutex<Option<(Placement, [u64; 2])>>,
    /// The device the batches are produced on, and why (set once at build).
    device: Mutex<String>,
    /// GPU path, JPEG records: the nvJPEG decoder's host time per phase.
    gpu_decode: Mutex<Option<DecodeTimings>>,
    /// The process that made the counters: in a fork of it, [`Metrics::snapshot`] and
    /// [`Metrics::reset`] skip a lock that a thread of the parent held at the fork.
    owner: Owner,
}

/// Sums of utilization samples: `(sum of percents, samples)` per figure.
#[derive(Debug, Default)]
pub(crate) struct UtilizationSums {
    gpu: (f64, u64),
    jpeg: (f64, u64),
    cpu: (f64, u64),
    samples: u64,
}

impl UtilizationSums {
    /// Adds one sample, in percent; `None` for a figure not measured.
    pub(crate) fn add(&mut self, gpu: Option<f64>, jpeg: Option<f64>, cpu: Option<f64>) {
        self.samples += 1;
        for (acc, v) in [
            (&mut self.gpu, gpu),
            (&mut self.jpeg, jpeg),
            (&mut self.cpu, cpu),
        ] {
            if let Some(v) = v {
                acc.0 += v;
                acc.1 += 1;
            }
        }
    }

    /// The means, `None` before the first sample.
    pub(crate) fn mean(&self) -> Option<Utilization> {
        let mean = |(sum, n): (f64, u64)| (n > 0).then(|| sum / n as f64);
        (self.samples > 0).then(|| Utilization {
            gpu: mean(self.gpu),
            jpeg: mean(self.jpeg),
            cpu: mean(self.cpu),
            samples: self.samples,
        })
    }
}

impl Metrics {
    /// Adds `items` and `bytes` processed by `stage` in `busy` time.
    pub(crate) fn record(&self, stage: Stage, items: u64, bytes: u64, busy: Duration) {
        let c = &self.stages[stage.slot()];
        c.busy_ns.fetch_add(busy.as_nanos() as u64, Relaxed);
        c.items.fetch_add(items, Relaxed);
        c.bytes.fetch_add(bytes, Relaxed);
    }

    /// How many threads work `stage` concurrently (used to turn busy time into a capacity).
    pub(crate) fn set_threads(&self, stage: Stage, threads: u64) {
        self.stages[stage.slot()].threads.store(threads, Relaxed);
    }

    /// Counts one image decoded by `route` (`"cpu-zune"`, `"nvjpeg-hw"`, … as
    /// `stoker_decode::Route::name` spells them; `"raw"` for a raw record).
    pub(crate) fn count_route(&self, route: &str) {
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        match routes.get_mut(route) {
            Some(n) => *n += 1,
            None => {
                routes.insert(route.to_owned(), 1);
            }
        }
    }

    /// Counts a bad record; returns how many distinct bad records there are with this one
    /// when it is new (log it then), `None` when this index was seen before.
    pub(crate) fn bad_record_distinct(&self, index: u64) -> Option<u64> {
        let mut bad = self.bad.lock().unwrap_or_else(|p| p.into_inner());
        bad.count += 1;
        if !bad.seen.insert(index) {
            return None;
        }
        if bad.indices.len() < KEPT_BAD_INDICES {
            bad.indices.push(index);
        }
        Some(bad.seen.len() as u64)
    }

    /// A host batch buffer of `bytes` was made.
    pub(crate) fn add_host_bytes(&self, bytes: u64) {
        self.host_bytes.fetch_add(bytes, Relaxed);
    }

    /// A host batch buffer of `bytes` was freed.
    pub(crate) fn sub_host_bytes(&self, bytes: u64) {
        // Saturating: `reset` does not touch it, but a count must never wrap.
        let _ = self
            .host_bytes
            .fetch_update(Relaxed, Relaxed, |b| Some(b.saturating_sub(bytes)));
    }

    /// Bytes of pinned host staging memory (GPU path).
    pub(crate) fn set_pinned_bytes(&self, bytes: u64) {
        self.pinned_bytes.store(bytes, Relaxed);
    }

    /// Bytes of device memory held by the pipeline (GPU path).
    pub(crate) fn set_device_bytes(&self, bytes: u64) {
        self.device_bytes.store(bytes, Relaxed);
    }

    /// Declares that `threads` threads each run read, decode and transform in turn (the CPU
    /// path), so the stages' capacities add up instead of overlapping.
    pub(crate) fn set_shared_workers(&self, threads: u64) {
        self.shared_workers.store(threads, Relaxed);
    }

    /// Batch slots a pipeline can have in flight (the queue's capacity).
    pub(crate) fn set_queue_capacity(&self, slots: u64) {
        self.queue_capacity.store(slots, Relaxed);
    }

    /// Describes what produces the batches (`"cpu, 8 workers"`, `"cuda:0, nvJPEG …"`).
    pub(crate) fn set_backend(&self, backend: impl Into<String>) {
        *self.backend.lock().unwrap_or_else(|p| p.into_inner()) = backend.into();
    }

    /// Records where this process runs in its job (as the launcher says) and the
    /// slice of every epoch it loads (`rank` of `world`).
    pub(crate) fn set_placement(&self, placement: Placement, rank: u64, world: u64) {
        *self.placement.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((placement, [rank, world]));
    }

    /// Names the device the batches are produced on (`"cuda:3 (device auto: …)"`, `"cpu"`).
    pub(crate) fn set_device(&self, device: String) {
        *self.device.lock().unwrap_or_else(|p| p.into_inner()) = device;
    }

    /// Adds the nvJPEG decoder's phase times of some `decode_batch` calls (GPU path).
    pub(crate) fn add_gpu_decode_timings(&self, t: &DecodeTimings) {
        let mut g = self.gpu_decode.lock().unwrap_or_else(|p| p.into_inner());
        *g.get_or_insert_with(DecodeTimings::default) += *t;
    }

    /// Makes sampler `id` (non-zero) the one whose samples count, unless another one
    /// holds that place; returns whether `id` holds it now.
    pub(crate) fn claim_utilization(&self, id: u64) -> bool {
        match self
            .utilization_recorder
            .compare_exchange(0, id, AcqRel, Acquire)
        {
            Ok(_) => true,
            Err(holder) => holder == id,
        }
    }

    /// Sampler `id` stops: the next sampler to claim the place takes it over.
    pub(crate) fn release_utilization(&self, id: u64) {
        let _ = self
            .utilization_recorder
            .compare_exchange(id, 0, AcqRel, Relaxed);
    }

    /// Adds one utilization sample, in percent; `None` for a figure not measured.
    pub(crate) fn record_utilization(&self, gpu: Option<f64>, jpeg: Option<f64>, cpu: Option<f64>) {
        self.utilization
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(gpu, jpeg, cpu);
    }

    /// Consumer side: one batch of `images` handed over after blocking `wait`, with
    /// `ready` further batches already finished at that moment.
    pub(crate) fn handoff(&self, images: u64, wait: Duration, ready: u64) {
        self.images.fetch_add(images, Relaxed);
        self.batches.fetch_add(1, Relaxed);
        self.wait_ns.fetch_add(wait.as_nanos() as u64, Relaxed);
        self.queue_samples.fetch_add(1, Relaxed);
        self.queue_sum.fetch_add(ready, Relaxed);
        self.queue_max.fetch_max(ready, Relaxed);
    }

    /// Consumer side: time spent blocked without getting a batch (end of epoch, errors).
    pub(crate) fn wait_only(&self, wait: Duration) {
        self.wait_ns.fetch_add(wait.as_nanos() as u64, Relaxed);
    }

    /// Consumer side: an epoch iterator has been alive from `*mark` (a [`clock_ns`] reading)
    /// until now: count that time as elapsed, from the last reset if one came in between,
    /// and move the mark to now.
    pub(crate) fn account_elapsed(&self, mark: &mut u64) {
        let now = clock_ns();
        let from = (*mark).max(self.reset_at_ns.load(Relaxed));
        self.elapsed_ns.fetch_add(now.saturating_sub(from), Relaxed);
        *mark = now;
    }

    /// Consumer side: an epoch's pipeline had been started early (before the consumer
    /// asked for it) and was used.
    pub(crate) fn epoch_started_early(&self) {
        self.early_epochs.fetch_add(1, Relaxed);
    }

    /// Consumer side: an epoch iterator ended; `finished` if it reached the end.
    pub(crate) fn epoch_done(&self, finished: bool) {
        if finished {
            self.epochs.fetch_add(1, Relaxed);
        }
    }

    /// Zeroes the flow counters (not the configuration: threads, capacities, memory).
    pub(crate) fn reset(&self) {
        for c in &self.stages {
            c.busy_ns.store(0, Relaxed);
            c.items.store(0, Relaxed);
            c.bytes.store(0, Relaxed);
        }
        let owner = self.owner;
        if let Some(mut routes) = owner.lock(&self.routes) {
            routes.clear();
        }
        if let Some(mut bad) = owner.lock(&self.bad) {
            *bad = BadRecords::default();
        }
        if let Some(mut sums) = owner.lock(&self.utilization) {
            *sums = UtilizationSums::default();
        }
        if let Some(mut timings) = owner.lock(&self.gpu_decode) {
            *timings = None;
        }
        for a in [
            &self.images,
            &self.batches,
            &self.epochs,
            &self.early_epochs,
            &self.wait_ns,
            &self.elapsed_ns,
            &self.queue_samples,
            &self.queue_sum,
            &self.queue_max,
        ] {
            a.store(0, Relaxed);
        }
        self.reset_at_ns.store(clock_ns(), Relaxed);
    }

    /// A snapshot of all counters. In a fork of the process that made them, a part that
    /// a thread of the parent was writing at the fork (decode routes, bad records,
    /// utilization, decode timings) reads as empty: its lock is never released there.
    pub fn snapshot(&self) -> Stats {
        // Copied out one at a time, so that no lock is held while another is taken.
        let owner = self.owner;
        let (bad_records, bad_distinct, bad_indices) = owner
            .lock(&self.bad)
            .map(|b| (b.count, b.seen.len() as u64, b.indices.clone()))
            .unwrap_or_default();
        let placement = owner.lock(&self.placement).and_then(|p| p.clone());
        let decode_routes = owner
            .lock(&self.routes)
            .map(|r| r.clone())
            .unwrap_or_default();
        let backend = owner
            .lock(&self.backend)
            .map(|b| b.clone())
            .unwrap_or_default();
        let utilization = owner.lock(&self.utilization).and_then(|u| u.mean());
        let gpu_decode = owner.lock(&self.gpu_decode).and_then(|t| *t);
        let device = owner
            .lock(&self.device)
            .map(|d| d.clone())
            .unwrap_or_default();
        let secs = |ns: u64| ns as f64 / 1e9;
        let stages = Stage::ALL
            .iter()
            .filter_map(|&stage| {
                let c = &self.stages[stage.slot()];
                let items = c.items.load(Relaxed);
                let threads = c.threads.load(Relaxed);
                if items == 0 && threads == 0 {
                    return None;
                }
                let busy = secs(c.busy_ns.load(Relaxed));
                let capacity = if busy > 0.0 {
                    items as f64 * threads.max(1) as f64 / busy
                } else {
                    f64::INFINITY
                };
                Some(StageStats {
                    stage,
                    threads,
                    items,
                    bytes: c.bytes.load(Relaxed),
                    busy_s: busy,
                    capacity_per_s: capacity,
                })
            })
            .collect();
        let elapsed = secs(self.elapsed_ns.load(Relaxed));
        let wait = secs(self.wait_ns.load(Relaxed));
        let images = self.images.load(Relaxed);
        let samples = self.queue_samples.load(Relaxed);
        Stats {
            epochs: self.epochs.load(Relaxed),
            epochs_started_early: self.early_epochs.load(Relaxed),
            batches: self.batches.load(Relaxed),
            images,
            elapsed_s: elapsed,
            consumer_wait_s: wait,
            fed_ratio: if elapsed > 0.0 {
                (1.0 - wait / elapsed).clamp(0.0, 1.0)
            } else {
                0.0
            },
            images_per_s: if elapsed > 0.0 {
                images as f64 / elapsed
            } else {
                0.0
            },
            stages,
            decode_routes,
            bad_records,
            bad_distinct,
            bad_indices,
            queue_mean: if samples > 0 {
                self.queue_sum.load(Relaxed) as f64 / samples as f64
            } else {
                0.0
            },
            queue_max: self.queue_max.load(Relaxed),
            queue_capacity: self.queue_capacity.load(Relaxed),
            shared_workers: self.shared_workers.load(Relaxed),
            host_bytes: self.host_bytes.load(Relaxed),
            pinned_bytes: self.pinned_bytes.load(Relaxed),
            device_bytes: self.device_bytes.load(Relaxed),
            backend,
            utilization,
            gpu_decode,
            slice: placement.as_ref().map(|(_, s)| *s),
            placement: placement.map(|(p, _)| p),
            device,
        }
    }
}

/// `(busy, total)` jiffies of all CPUs from the `cpu` line of `/proc/stat`, where there is
/// one (Linux): the machine-wide CPU use between two readings is `Δbusy / Δtotal`. Busy is
/// user + nice + system + irq + softirq + steal (guest time is inside user); idle and
/// iowait are not busy.
///
/// # Examples
///
/// ```
/// if let Some((busy, total)) = stoker_loader::metrics::system_cpu_jiffies() {
///     assert!(busy <= total);
/// }
/// ```
pub fn system_cpu_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    stat_line_jiffies(text.lines().find(|l| l.starts_with("cpu "))?)
}

/// `(busy, total)` jiffies of one `cpu`/`cpuN` line of `/proc/stat` (idle and iowait
/// are not busy; guest time is already in user time).
pub(crate) fn stat_line_jiffies(line: &str) -> Option<(u64, u64)> {
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v[4];
    Some((total - idle, total))
}

/// Monotonic nanoseconds since the first call in this process (the time base of the
/// consumer-side elapsed accounting).
pub(crate) fn clock_ns() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    // +1 so that a reading is never 0, which `reset_at_ns` uses for "never reset".
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_names_the_slowest_stage_when_starved() {
        let m = Metrics::default();
        m.set_threads(Stage::Read, 2);
        m.set_threads(Stage::Decode, 2);
        m.set_threads(Stage::Transform, 2);
        m.record(Stage::Read, 100, 1000, Duration::from_millis(10));
        m.record(Stage::Decode, 100, 1000, Duration::from_millis(900));
        m.record(Stage::Transform, 100, 1000, Duration::from_millis(300));
        m.handoff(100, Duration::from_millis(800), 0);
        m.elapsed_ns
            .fetch_add(Duration::from_millis(1000).as_nanos() as u64, Relaxed);
        m.epoch_done(true);
        let s = m.snapshot();
        assert!((s.fed_ratio - 0.2).abs() < 1e-9);
        assert_eq!(s.limiting_stage().unwrap().stage, Stage::Decode);
        assert!(
            s.verdict().contains("STARVED") && s.verdict().contains("decode"),
            "{}",
            s.verdict()
        );
        assert_eq!(s.worker_capacity_per_s(), None);
        m.set_shared_workers(2);
        let s = m.snapshot();
        // 100 images, 2 workers, 1.21 s busy in all → 165 img/s.
        let together = s.worker_capacity_per_s().unwrap();
        assert!((together - 200.0 / 1.21).abs() < 1e-6, "{together}");
        assert!(
            s.verdict().contains("share 2 worker threads: 165 img/s"),
            "{}",
            s.verdict()
        );
        let table = s.to_string();
        assert!(table.lines().last().unwrap().contains("verdict"));
        let back: Stats = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(back, s);
        assert!(s
            .to_prometheus()
            .contains("stoker_loader_stage_busy_seconds_total{stage=\"decode\"} 0.9"));
    }

    #[test]
    fn fed_when_consumer_rarely_waits_and_bad_records_dedupe() {
        let m = Metrics::default();
        m.handoff(10, Duration::from_millis(10), 2);
        m.elapsed_ns
            .fetch_add(Duration::from_secs(1).as_nanos() as u64, Relaxed);
        m.epoch_done(true);
        assert!(m.snapshot().verdict().contains("FED"));
        assert!(m.bad_record_distinct(5).is_some());
        assert!(m.bad_record_distinct(5).is_none());
        assert!(m.bad_record_distinct(6).is_some());
        let s = m.snapshot();
        assert_eq!(
            (s.bad_records, s.bad_distinct, s.bad_indices.clone()),
            (3, 2, vec![5, 6])
        );
        m.reset();
        assert_eq!(m.snapshot().images, 0);
    }

    #[test]
    fn utilization_samples_reach_the_stats_and_their_verdict() {
        let m = Metrics::default();
        assert_eq!(m.snapshot().utilization, None, "nothing sampled yet");
        m.set_backend("cuda:0, test");
        m.record_utilization(Some(40.0), Some(90.0), Some(90.0));
        m.record_utilization(Some(60.0), None, Some(100.0));
        let s = m.snapshot();
        let u = s.utilization.expect("two samples");
        assert_eq!(u.samples, 2);
        assert_eq!((u.gpu, u.jpeg, u.cpu), (Some(50.0), Some(90.0), Some(95.0)));
        assert!(u.verdict().starts_with("input-bound"), "{}", u.verdict());
        let table = s.to_string();
        assert!(table.contains("backend: cuda:0, test"), "{table}");
        assert!(table.contains("utilization: input-bound"), "{table}");
        assert!(s
            .to_prometheus()
            .contains("stoker_loader_utilization_percent{unit=\"jpeg\"} 90"));
        let back: Stats = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(back, s);
        m.add_gpu_decode_timings(&DecodeTimings {
            calls: 1,
            images: 256,
            total_s: 0.01,
            ..DecodeTimings::default()
        });
        m.add_gpu_decode_timings(&DecodeTimings {
            calls: 1,
            images: 256,
            total_s: 0.02,
            ..DecodeTimings::default()
        });
        let t = m.snapshot().gpu_decode.expect("two calls added");
        assert_eq!((t.calls, t.images), (2, 512));
        assert!(m.snapshot().to_string().contains("nvJPEG host time"));
        // Reset clears the samples, not the backend.
        m.reset();
        let s = m.snapshot();
        assert_eq!((s.utilization, s.backend.as_str()), (None, "cuda:0, test"));
        assert_eq!(s.gpu_decode, None);
        // The GPU/CPU rule needs both figures.
        let fed = Utilization {
            gpu: Some(97.0),
            cpu: Some(95.0),
            ..u
        };
        assert!(fed.verdict().starts_with("not input-bound"));
        assert!(Utilization::default()
            .verdict()
            .starts_with("GPU utilization unavailable"));
    }

    #[test]
    fn stats_json_from_before_backend_and_utilization_still_parses() {
        let mut v: serde_json::Value =
            serde_json::from_str(&Metrics::default().snapshot().to_json()).unwrap();
        let obj = v.as_object_mut().unwrap();
        obj.remove("backend");
        obj.remove("utilization");
        obj.remove("gpu_decode");
        let s: Stats = serde_json::from_value(v).unwrap();
        assert_eq!((s.backend.as_str(), s.utilization), ("", None));
    }
}
