//! The verdict: which stage bounds the pipeline, by how much, and what would move it.
//!
//! A pure function over measured capacities, all in images per second, so it
//! can be tested with synthetic numbers. The capacity comparison decides the
//! bound; the end-to-end run (fed ratio, CPU and GPU busy fractions) is then
//! checked against the closed-loop input-bound rule — consumer busy < 70 % while
//! the CPU is > 85 % busy means the job is input-bound — and a contradiction between
//! the two (every stage faster than the step, yet the step starves) is named
//! as a loader bound rather than hidden.

use serde::Serialize;

/// The input-bound rule: below this consumer (GPU) busy fraction the job waits for input…
pub const INPUT_BOUND_GPU_UTIL: f64 = 0.70;
/// …when the CPU is busier than this fraction of all cores.
pub const INPUT_BOUND_CPU_UTIL: f64 = 0.85;
/// A consumer fed at least this fraction of the wall time is the bound itself.
pub const CONSUMER_FED: f64 = 0.95;
/// Capacities closer than this factor are "the same" for naming a loader bound.
pub const NEAR_MARGIN: f64 = 1.25;

/// Which data path the end-to-end pipeline takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PipelinePath {
    /// Read → CPU decode → transforms on CPU (→ H2D of decoded pixels when a GPU consumes).
    Cpu,
    /// Read → H2D of compressed bytes → GPU decode → GPU transforms.
    Gpu,
}

/// The stage that limits throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// Reading the shard files.
    Storage,
    /// JPEG decode (CPU cores, or the GPU's decode engines on the GPU path).
    Decode,
    /// Host-to-device copies.
    Pcie,
    /// GPU transforms.
    Gpu,
    /// CPU transforms (the CPU path's crop, resize, flip and normalize), which set the
    /// pace where nothing is decoded (raw records) or decode is cheap.
    Transform,
    /// The training step itself: the input keeps up.
    Consumer,
    /// Every stage alone is faster than the step, yet the pipeline starves it:
    /// the loader's overlap (threads, prefetch) is the limit.
    Loader,
}

impl Bound {
    /// The stable name used in the JSON (`verdict.bound`) and the verdict line.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Storage => "storage",
            Bound::Decode => "decode",
            Bound::Pcie => "pcie",
            Bound::Gpu => "gpu",
            Bound::Transform => "transform",
            Bound::Consumer => "consumer",
            Bound::Loader => "loader",
        }
    }
}

/// Measured capacities (img/s) and end-to-end figures the verdict is drawn from.
///
/// `None` means the stage was not measured (no GPU, no loader, zero consumer time).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capacities {
    /// The path end to end takes; decides which stages are in series.
    pub path: Option<PipelinePath>,
    /// Storage read, records/s: cold where the page cache could be dropped and the dataset
    /// does not fit in it (`read_cold`), warm otherwise.
    pub read: Option<f64>,
    /// Storage read in MB/s, for the text.
    pub read_mb_per_s: Option<f64>,
    /// Whether `read` is a cold-cache figure.
    pub read_cold: bool,
    /// Whether the dataset fits in the page cache (half the memory the process may use),
    /// so that epochs after the first read it warm. A warm `read` of a dataset that does
    /// not fit is only the figure the bench could measure (the cache could not be
    /// dropped): training reads it from the storage.
    pub read_cached: bool,
    /// CPU decode with all cores.
    pub cpu_decode: Option<f64>,
    /// Cores the CPU decode used.
    pub cores: usize,
    /// Pinned H2D in img/s of the bytes the path copies.
    pub h2d: Option<f64>,
    /// Pinned H2D in GB/s, for the text.
    pub h2d_gb_per_s: Option<f64>,
    /// GPU decode.
    pub gpu_decode: Option<f64>,
    /// GPU transforms.
    pub transform: Option<f64>,
    /// CPU transforms, from the loader's CPU path counters (its threads together).
    pub cpu_transform: Option<f64>,
    /// End to end's images per CPU-second of this whole process: times `cores`, what the
    /// CPU path's work comes to when it has those cores to itself, with no model of how
    /// its stages share them.
    pub img_per_cpu_s: Option<f64>,
    /// Batches in one epoch of the end-to-end run: on the CPU path a worker builds a whole
    /// batch, so an epoch of fewer batches than `cores` leaves cores idle.
    pub epoch_batches: Option<u64>,
    /// The simulated step's demand: batch / step time.
    pub consumer: Option<f64>,
    /// Measured end-to-end throughput.
    pub end_to_end: Option<f64>,
    /// Fraction of wall time the consumer was busy (fed).
    pub fed_ratio: Option<f64>,
    /// Process CPU time / (wall time × cores) during end to end.
    pub cpu_util: Option<f64>,
    /// GPU busy fraction during end to end (the consumer's kernel time / wall).
    pub gpu_util: Option<f64>,
}

/// The one-line conclusion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The path judged (the one end to end ran): which stages are in series, and whether
    /// the `transform` row is the GPU kernel's or the CPU's.
    pub path: PipelinePath,
    /// The bounding stage; `None` when nothing was measured.
    pub bound: Option<Bound>,
    /// The stage the bound is compared against (next slowest in series).
    pub next: Option<String>,
    /// Next-slowest capacity / bound capacity (≥ 1): the headroom moving the bound buys.
    pub margin: Option<f64>,
    /// The input-bound rule on the measured end-to-end figures, when they exist.
    pub input_bound_rule: Option<bool>,
    /// The human sentence.
    pub text: String,
}

/// One stage in series, as the verdict sees it.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    bound: Bound,
    label: &'static str,
    img_per_s: f64,
}

/// Formats an img/s figure with thousands separators ("9,800").
pub fn fmt_rate(v: f64) -> String {
    if v.is_nan() {
        return "-".to_string();
    }
    if !v.is_finite() {
        return "∞".to_string();
    }
    let r = v.round();
    if r.abs() < 10.0 && v != r {
        return format!("{v:.1}");
    }
    let digits = format!("{}", r.abs() as u64);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if r < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

fn pct(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

/// Draws the verdict from the measured capacities.
///
/// # Examples
///
/// ```
/// use stoker::bottleneck::verdict::{judge, Bound, Capacities, PipelinePath};
///
/// let caps = Capacities {
///     path: Some(PipelinePath::Cpu),
///     read: Some(90_000.0),
///     cpu_decode: Some(1_900.0),
///     cores: 2,
///     ..Default::default()
/// };
/// let v = judge(&caps);
/// assert_eq!(v.bound, Some(Bound::Decode));
/// assert!(v.text.starts_with("decode-bound"));
/// ```
pub fn judge(c: &Capacities) -> Verdict {
    let path = c.path.unwrap_or(if c.gpu_decode.is_some() {
        PipelinePath::Gpu
    } else {
        PipelinePath::Cpu
    });
    let mut stages = candidates(c, path);
    let input_bound_rule = match (c.gpu_util.or(c.fed_ratio), c.cpu_util) {
        (Some(g), Some(cpu)) => Some(g < INPUT_BOUND_GPU_UTIL && cpu > INPUT_BOUND_CPU_UTIL),
        _ => None,
    };

    // Nothing decoded: a read alone says nothing of where time goes (a dataset of one
    // bad record was called storage-bound).
    let decoded = c.cpu_decode.or(c.gpu_decode).or(c.end_to_end).is_some();
    if stages.is_empty() || !decoded {
        return Verdict {
            path,
            bound: None,
            next: None,
            margin: None,
            input_bound_rule,
            text: "no verdict: no stage could be measured, or no record decoded".to_string(),
        };
    }
    stages.sort_by(|a, b| a.img_per_s.total_cmp(&b.img_per_s));
    let mut first = stages[0];
    let mut second = stages.get(1).copied();
    // The step is nominally slowest, but an input stage is within
    // `NEAR_MARGIN` of it and the measured loop starves: that input stage,
    // with no headroom, is the bound (on a shared machine, stages measured
    // one after another also see different load).
    if let (Bound::Consumer, Some(s), Some(fed)) = (first.bound, second, c.fed_ratio) {
        if fed < INPUT_BOUND_GPU_UTIL && s.img_per_s < first.img_per_s * NEAR_MARGIN {
            second = Some(first);
            first = s;
        }
    }
    let margin = second.map(|s| s.img_per_s / first.img_per_s);

    if let Some(text) = loader_bound_text(c, first, second) {
        return Verdict {
            path,
            bound: Some(Bound::Loader),
            next: second.map(|s| s.label.to_string()),
            margin,
            input_bound_rule,
            text: with_rule(text, c, input_bound_rule),
        };
    }

    let (head, advice) = head_and_advice(c, path, first);
    let mut text = format!("{head}{} — {advice}", versus(first, second));
    if let Some(e2e) = positive(c.end_to_end) {
        text.push_str(&format!(
            "; end to end {} img/s = {} of the bound",
            fmt_rate(e2e),
            pct(e2e / first.img_per_s)
        ));
        text.push_str(&few_batches_note(c, path));
    }
    Verdict {
        path,
        bound: Some(first.bound),
        next: second.map(|s| s.label.to_string()),
        margin,
        input_bound_rule,
        text: with_rule(text, c, input_bound_rule),
    }
}

/// A measured capacity: finite and above zero.
fn positive(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite() && *x > 0.0)
}

/// The measured stages in series on `path`, then the step, in pipeline order.
fn candidates(c: &Capacities, path: PipelinePath) -> Vec<Candidate> {
    let read_label = if c.read_cold {
        "storage read (cold)"
    } else {
        "storage read (warm)"
    };
    let mut stages: Vec<Candidate> = Vec::new();
    let mut push = |bound, label, v: Option<f64>| {
        if let Some(img_per_s) = positive(v) {
            stages.push(Candidate {
                bound,
                label,
                img_per_s,
            });
        }
    };
    push(Bound::Storage, read_label, c.read);
    match path {
        PipelinePath::Cpu => {
            if let Some(work) = cpu_work(c) {
                push(work.bound, work.label, Some(work.img_per_s()));
            }
            push(Bound::Pcie, "H2D", c.h2d);
        }
        PipelinePath::Gpu => {
            push(Bound::Pcie, "H2D", c.h2d);
            push(Bound::Decode, "GPU decode", c.gpu_decode);
            push(Bound::Gpu, "GPU transforms", c.transform);
        }
    }
    push(Bound::Consumer, "the training step", c.consumer);
    stages
}

/// The CPU path's decode and transforms as one stage, from the stage counters
/// (`staged`) and from the whole process's CPU time (`whole`).
struct CpuWork {
    bound: Bound,
    label: &'static str,
    staged: f64,
    whole: Option<f64>,
}

impl CpuWork {
    /// Whether the process's CPU time gives the higher figure, which the stage then takes.
    fn by_cpu_time(&self) -> bool {
        self.whole.is_some_and(|w| w > self.staged)
    }

    /// The stage's figure: the larger of `staged` and `whole`.
    fn img_per_s(&self) -> f64 {
        self.whole.map_or(self.staged, |w| w.max(self.staged))
    }
}

/// The loader's workers decode and transform one image after the other on the same
/// cores, so together they manage `1 / (1/decode + 1/transforms)` images a second, not
/// the slower one's rate; named by the one that takes more of the workers' time.
///
/// Both figures are `items · threads / busy`, and a busy interval also counts the time
/// its thread stood preempted by the other stage's threads (or another process), so
/// the composition undercounts and end to end could exceed it. End to end's images per
/// CPU-second times the cores cannot be exceeded while the process stays on those
/// cores, and undercounts only by the process's other work (reading, batching), so the
/// stage takes the larger of the two.
fn cpu_work(c: &Capacities) -> Option<CpuWork> {
    let (d, t) = (positive(c.cpu_decode), positive(c.cpu_transform));
    let (bound, label, staged) = match (d, t) {
        (Some(d), Some(t)) => (
            if d <= t {
                Bound::Decode
            } else {
                Bound::Transform
            },
            "CPU decode and transforms",
            1.0 / (1.0 / d + 1.0 / t),
        ),
        (Some(d), None) => (Bound::Decode, "CPU decode", d),
        (None, Some(t)) => (Bound::Transform, "CPU transforms", t),
        (None, None) => return None,
    };
    let whole = positive(c.img_per_cpu_s).map(|v| v * c.cores.max(1) as f64);
    Some(CpuWork {
        bound,
        label,
        staged,
        whole,
    })
}

/// How the CPU path's bound reads, with the other half of the workers' time beside it
/// when both were measured.
fn cpu_head(c: &Capacities, first: Candidate) -> String {
    let ((name, label, own), (other_label, other)) = match first.bound {
        Bound::Transform => (
            ("transform", "CPU transforms", c.cpu_transform),
            ("CPU decode", c.cpu_decode),
        ),
        _ => (
            ("decode", "CPU decode", c.cpu_decode),
            ("CPU transforms", c.cpu_transform),
        ),
    };
    let own = positive(own).unwrap_or(first.img_per_s);
    let cores = match c.cores.max(1) {
        1 => "1 core".to_string(),
        n => format!("{n} cores"),
    };
    // The figure is the whole process's CPU time rather than the stage counters: it is
    // then given as the work's, with the counters (wall time, preemption included) beside
    // it, since decode alone by its counters can read slower than the two together.
    if let Some(w) = cpu_work(c).filter(CpuWork::by_cpu_time) {
        let counters = match positive(other) {
            Some(other) => format!(
                "{} {} img/s, {} {} img/s, {} img/s together",
                label.trim_start_matches("CPU "),
                fmt_rate(own),
                other_label.trim_start_matches("CPU "),
                fmt_rate(other),
                fmt_rate(w.staged)
            ),
            None => format!("{} img/s", fmt_rate(w.staged)),
        };
        return format!(
            "{name}-bound: {} {} img/s on {cores}, from the end-to-end run's {} images per CPU-second (by their own counters: {counters})",
            w.label,
            fmt_rate(first.img_per_s),
            fmt_rate(positive(c.img_per_cpu_s).unwrap_or(0.0)),
        );
    }
    let mut head = format!("{name}-bound: {label} {} img/s on {cores}", fmt_rate(own));
    if let Some(other) = positive(other) {
        head.push_str(&format!(
            ", {} img/s with the {other_label} ({} img/s) on the same cores",
            fmt_rate(first.img_per_s),
            fmt_rate(other)
        ));
    }
    head
}

/// The closed loop: capacities say the step is the limit, but the measured
/// pipeline starves it. Trust the measurement and name the loader: the
/// sentence, when that is so.
fn loader_bound_text(
    c: &Capacities,
    first: Candidate,
    second: Option<Candidate>,
) -> Option<String> {
    if first.bound != Bound::Consumer {
        return None;
    }
    let (fed, e2e) = (c.fed_ratio?, positive(c.end_to_end)?);
    if fed >= INPUT_BOUND_GPU_UTIL {
        return None;
    }
    let slowest_input = second.map(|s| s.label).unwrap_or("every stage");
    Some(format!(
        "loader-bound: the step needs {} img/s and {slowest_input} alone \
         manages {}, yet end to end delivers {} img/s (fed {}) — raise loader \
         threads or prefetch depth so the stages overlap",
        fmt_rate(first.img_per_s),
        second.map(|s| fmt_rate(s.img_per_s)).unwrap_or_default(),
        fmt_rate(e2e),
        pct(fed),
    ))
}

/// The bound against the next stage: its headroom, or none.
fn versus(first: Candidate, second: Option<Candidate>) -> String {
    match second {
        Some(s) if s.img_per_s < first.img_per_s => format!(
            " ≈ {} {} img/s (no headroom: {:.2}×)",
            s.label,
            fmt_rate(s.img_per_s),
            first.img_per_s / s.img_per_s
        ),
        Some(s) => format!(
            " < {} {} img/s ({:.1}× headroom)",
            s.label,
            fmt_rate(s.img_per_s),
            s.img_per_s / first.img_per_s
        ),
        None => String::new(),
    }
}

/// The verdict's opening (the bound and its figure) and what would move it.
fn head_and_advice(c: &Capacities, path: PipelinePath, first: Candidate) -> (String, &'static str) {
    match first.bound {
        Bound::Storage => (
            match c.read_mb_per_s {
                Some(mb) => format!(
                    "storage-bound: {} {:.0} MB/s = {} img/s",
                    first.label,
                    mb,
                    fmt_rate(first.img_per_s)
                ),
                None => format!(
                    "storage-bound: {} {} img/s",
                    first.label,
                    fmt_rate(first.img_per_s)
                ),
            },
            if c.read_cached && !c.read_cold {
                // Reads from the page cache: faster storage would not move it.
                "reads come from the page cache at this pace: store smaller images"
            } else {
                "move shards to local NVMe, keep them in page cache, or store smaller images"
            },
        ),
        Bound::Decode => match path {
            PipelinePath::Cpu => (
                cpu_head(c, first),
                if gpu_measured(c) {
                    "decode on the GPU (--device cuda), add cores, or store lower-resolution images"
                } else {
                    "add cores, store lower-resolution images, or decode on a GPU (none was measured here)"
                },
            ),
            PipelinePath::Gpu => (
                format!(
                    "decode-bound: GPU decode {} img/s",
                    fmt_rate(first.img_per_s)
                ),
                "store lower-resolution images or give part of the batch to CPU decode",
            ),
        },
        Bound::Pcie => (
            match c.h2d_gb_per_s {
                Some(gb) => format!(
                    "pcie-bound: H2D {:.1} GB/s = {} img/s",
                    gb,
                    fmt_rate(first.img_per_s)
                ),
                None => format!("pcie-bound: H2D {} img/s", fmt_rate(first.img_per_s)),
            },
            "copy compressed JPEG and decode on the GPU, copy uint8 not float, use pinned buffers",
        ),
        Bound::Gpu => (
            format!(
                "gpu-bound: GPU transforms {} img/s",
                fmt_rate(first.img_per_s)
            ),
            "lower the output size or fuse the transforms into one kernel",
        ),
        Bound::Transform => (
            cpu_head(c, first),
            if gpu_measured(c) {
                "run the transforms on the GPU (--device cuda), add cores, or lower the output size"
            } else {
                "add cores, lower the output size, or run the transforms on a GPU (none was measured here)"
            },
        ),
        Bound::Consumer => (
            format!(
                "consumer-bound: the training step takes {} img/s",
                fmt_rate(first.img_per_s)
            ),
            match c.fed_ratio {
                Some(f) if f < CONSUMER_FED => {
                    "the input nearly keeps up (fed below 95%); a faster step or a bigger batch is what moves it"
                }
                _ => "the input keeps up; a faster step or a bigger batch is what moves it",
            },
        ),
        Bound::Loader => unreachable!("Loader is only chosen above"),
    }
}

/// Where an epoch of the CPU path is fewer batches than the workers, each building whole
/// batches, end to end could not use every core (a dataset of one batch: one core), and
/// its share of the bound says so, not the stages.
fn few_batches_note(c: &Capacities, path: PipelinePath) -> String {
    match c.epoch_batches {
        Some(n) if path == PipelinePath::Cpu && n < c.cores as u64 => format!(
            " (an epoch here is {n} batch{}, and a worker builds whole batches: at most {n} of the {} cores worked; lower --batch to measure them all)",
            if n == 1 { "" } else { "es" },
            c.cores
        ),
        _ => String::new(),
    }
}

/// Whether a GPU stage was measured: where none was (no GPU, or none the bench could
/// use), `--device cuda` is no advice to give.
fn gpu_measured(c: &Capacities) -> bool {
    [c.h2d, c.gpu_decode, c.transform]
        .into_iter()
        .any(|v| positive(v).is_some())
}

/// Appends the input-bound rule's outcome with the measured busy fractions.
fn with_rule(mut text: String, c: &Capacities, rule: Option<bool>) -> String {
    let Some(rule) = rule else { return text };
    let consumer = c.gpu_util.or(c.fed_ratio).unwrap_or(0.0);
    let who = if c.gpu_util.is_some() {
        "GPU"
    } else {
        "consumer"
    };
    let cpu = c.cpu_util.unwrap_or(0.0);
    if rule {
        text.push_str(&format!(
            "; input-bound by the utilization rule ({who} busy {} < 70%, CPU {} > 85%)",
            pct(consumer),
            pct(cpu)
        ));
    } else {
        text.push_str(&format!(
            "; utilization rule: not input-bound ({who} busy {}, CPU {})",
            pct(consumer),
            pct(cpu)
        ));
    }
    text
}

#[cfg(test)]
mod tests;
