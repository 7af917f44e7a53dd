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
            match cpu_work(c) {
                Some((bound, v)) => push(bound, "CPU decode and transforms", Some(v)),
                None => {
                    push(Bound::Decode, "CPU decode", c.cpu_decode);
                    push(Bound::Transform, "CPU transforms", c.cpu_transform);
                }
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

/// The CPU path's decode and transforms as one stage: the loader's workers do both, one
/// after the other on the same cores, so together they manage `1 / (1/decode +
/// 1/transforms)` images a second, not the slower one's rate. Named by the one that takes
/// more of the workers' time. `None` unless both were measured.
fn cpu_work(c: &Capacities) -> Option<(Bound, f64)> {
    let (d, t) = (positive(c.cpu_decode)?, positive(c.cpu_transform)?);
    let bound = if d <= t {
        Bound::Decode
    } else {
        Bound::Transform
    };
    Some((bound, 1.0 / (1.0 / d + 1.0 / t)))
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
                "decode on the GPU (--device cuda), add cores, or store lower-resolution images",
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
            "run the transforms on the GPU (--device cuda), add cores, or lower the output size",
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
mod tests {
    use super::*;

    fn cpu_caps() -> Capacities {
        Capacities {
            path: Some(PipelinePath::Cpu),
            read: Some(95_000.0),
            read_mb_per_s: Some(4_400.0),
            read_cold: true,
            cpu_decode: Some(1_950.0),
            cores: 2,
            ..Default::default()
        }
    }

    fn gpu_caps() -> Capacities {
        Capacities {
            path: Some(PipelinePath::Gpu),
            read: Some(200_000.0),
            read_mb_per_s: Some(9_300.0),
            cpu_decode: Some(12_000.0),
            cores: 16,
            h2d: Some(500_000.0),
            h2d_gb_per_s: Some(23.0),
            gpu_decode: Some(31_000.0),
            transform: Some(80_000.0),
            ..Default::default()
        }
    }

    #[test]
    fn cpu_decode_bound_on_two_cores() {
        let v = judge(&cpu_caps());
        assert_eq!(v.bound, Some(Bound::Decode));
        assert!(v
            .text
            .starts_with("decode-bound: CPU decode 1,950 img/s on 2 cores"));
        assert!(v.text.contains("storage read (cold) 95,000"), "{}", v.text);
        assert!(!v.text.contains("end to end"), "{}", v.text);
        let mut c = cpu_caps();
        c.end_to_end = Some(1_560.0);
        let v = judge(&c);
        assert!(
            v.text
                .ends_with("end to end 1,560 img/s = 80% of the bound"),
            "{}",
            v.text
        );
        let m = v.margin.unwrap();
        assert!((m - 95_000.0 / 1_950.0).abs() < 1e-9);
    }

    #[test]
    fn storage_bound_names_mb_per_s() {
        let mut c = gpu_caps();
        c.read = Some(9_800.0);
        c.read_mb_per_s = Some(1_200.0);
        c.read_cold = true;
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Storage));
        assert!(
            v.text.starts_with(
                "storage-bound: storage read (cold) 1200 MB/s = 9,800 img/s < GPU decode 31,000"
            ),
            "{}",
            v.text
        );
        assert!(v.text.contains("NVMe"));

        // Warm (a dataset the page cache holds): faster storage is not the advice.
        c.read_cold = false;
        c.read_cached = true;
        let v = judge(&c);
        assert!(
            v.text.starts_with("storage-bound: storage read (warm)"),
            "{}",
            v.text
        );
        assert!(!v.text.contains("NVMe"), "{}", v.text);
        assert!(v.text.contains("from the page cache"), "{}", v.text);

        // Warm only because the cache could not be dropped, of a dataset larger than it:
        // training reads the storage, and faster storage is still the advice.
        c.read_cached = false;
        let v = judge(&c);
        assert!(
            v.text.starts_with("storage-bound: storage read (warm)"),
            "{}",
            v.text
        );
        assert!(v.text.contains("NVMe"), "{}", v.text);
    }

    #[test]
    fn gpu_decode_bound() {
        let v = judge(&gpu_caps());
        assert_eq!(v.bound, Some(Bound::Decode));
        assert!(
            v.text.starts_with("decode-bound: GPU decode 31,000"),
            "{}",
            v.text
        );
        assert_eq!(v.next.as_deref(), Some("GPU transforms"));
    }

    #[test]
    fn pcie_bound() {
        let mut c = gpu_caps();
        c.h2d = Some(5_000.0);
        c.h2d_gb_per_s = Some(0.25);
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Pcie));
        assert!(
            v.text.starts_with("pcie-bound: H2D 0.2 GB/s = 5,000 img/s"),
            "{}",
            v.text
        );
    }

    #[test]
    fn gpu_transform_bound() {
        let mut c = gpu_caps();
        c.transform = Some(7_000.0);
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Gpu));
        assert!(v.text.starts_with("gpu-bound"), "{}", v.text);
    }

    #[test]
    fn consumer_bound_when_the_step_is_slowest_and_fed() {
        let mut c = gpu_caps();
        c.consumer = Some(2_560.0); // batch 256 at 100 ms
        c.end_to_end = Some(2_540.0);
        c.fed_ratio = Some(0.99);
        c.cpu_util = Some(0.2);
        c.gpu_util = Some(0.99);
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Consumer));
        assert_eq!(v.input_bound_rule, Some(false));
        assert!(v.text.starts_with("consumer-bound"), "{}", v.text);
        assert!(v.text.contains("not input-bound"), "{}", v.text);
    }

    #[test]
    fn input_bound_rule_holds_on_cpu_path() {
        // The step could take 5,120 img/s, the 2 CPU cores decode 1,950: the
        // consumer idles (fed 38 %) while the CPU is pegged.
        let mut c = cpu_caps();
        c.consumer = Some(5_120.0);
        c.end_to_end = Some(1_900.0);
        c.fed_ratio = Some(0.38);
        c.cpu_util = Some(0.97);
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Decode));
        assert_eq!(v.input_bound_rule, Some(true));
        assert!(
            v.text.contains(
                "input-bound by the utilization rule (consumer busy 38% < 70%, CPU 97% > 85%)"
            ),
            "{}",
            v.text
        );
    }

    #[test]
    fn input_bound_rule_boundaries_are_strict() {
        let mut c = cpu_caps();
        c.fed_ratio = Some(0.70);
        c.cpu_util = Some(0.99);
        assert_eq!(judge(&c).input_bound_rule, Some(false));
        c.fed_ratio = Some(0.69);
        c.cpu_util = Some(0.85);
        assert_eq!(judge(&c).input_bound_rule, Some(false));
        c.cpu_util = Some(0.86);
        assert_eq!(judge(&c).input_bound_rule, Some(true));
        // A measured GPU busy fraction takes precedence over the fed ratio.
        c.gpu_util = Some(0.9);
        assert_eq!(judge(&c).input_bound_rule, Some(false));
    }

    #[test]
    fn loader_bound_when_stages_outrun_the_step_but_it_starves() {
        let mut c = cpu_caps();
        c.consumer = Some(1_000.0);
        c.end_to_end = Some(400.0);
        c.fed_ratio = Some(0.4);
        c.cpu_util = Some(0.5);
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Loader));
        assert!(v.text.starts_with("loader-bound"), "{}", v.text);
    }

    #[test]
    fn input_stage_just_above_the_step_is_the_bound_when_it_starves() {
        // Step 640 img/s, CPU decode 674: nominally the step is slowest, but the
        // margin is 5 % and the loop is fed half the time: decode has no headroom.
        let mut c = cpu_caps();
        c.cpu_decode = Some(674.0);
        c.consumer = Some(640.0);
        c.end_to_end = Some(318.0);
        c.fed_ratio = Some(0.5);
        c.cpu_util = Some(0.3);
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Decode), "{}", v.text);
        assert!(
            v.text.starts_with(
                "decode-bound: CPU decode 674 img/s on 2 cores ≈ the training step 640 img/s"
            ),
            "{}",
            v.text
        );
        // Fed enough: the step is the bound after all.
        c.fed_ratio = Some(0.97);
        assert_eq!(judge(&c).bound, Some(Bound::Consumer));
    }

    #[test]
    fn unmeasured_and_degenerate_stages_are_ignored() {
        let mut c = cpu_caps();
        c.h2d = Some(0.0);
        c.gpu_decode = Some(f64::NAN);
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Decode));
        let none = judge(&Capacities::default());
        assert_eq!(none.bound, None);
        assert!(none.text.starts_with("no verdict"));
    }

    #[test]
    fn cpu_transforms_bound_raw_records_on_the_cpu_path() {
        // Raw records: nothing to decode, a warm read far above what the CPU
        // transforms manage. Storage was named before, at 4 % of the end-to-end rate.
        let c = Capacities {
            path: Some(PipelinePath::Cpu),
            read: Some(67_663.0),
            read_mb_per_s: Some(10_319.0),
            read_cached: true,
            cpu_transform: Some(2_900.0),
            end_to_end: Some(2_605.0),
            cores: 2,
            ..Default::default()
        };
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Transform), "{}", v.text);
        assert!(
            v.text.starts_with(
                "transform-bound: CPU transforms 2,900 img/s on 2 cores < storage read (warm) 67,663 img/s"
            ),
            "{}",
            v.text
        );
        assert!(v.text.contains("--device cuda"), "{}", v.text);
        assert!(v.text.ends_with("= 90% of the bound"), "{}", v.text);
        assert_eq!(Bound::Transform.name(), "transform");

        // With JPEG records decode and transforms share the workers: together they manage
        // 1 / (1/1,950 + 1/5,850) = 1,463 img/s, the bound the end to end is held to, named
        // by the one that takes more of the time.
        let mut c = cpu_caps();
        c.cpu_transform = Some(5_850.0);
        c.end_to_end = Some(1_390.0);
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Decode));
        assert!(
            v.text.starts_with(
                "decode-bound: CPU decode 1,950 img/s on 2 cores, 1,463 img/s with the CPU transforms (5,850 img/s) on the same cores < storage read (cold) 95,000"
            ),
            "{}",
            v.text
        );
        assert!(v.text.ends_with("= 95% of the bound"), "{}", v.text);
        c.cpu_transform = Some(900.0);
        let v = judge(&c);
        assert_eq!(v.bound, Some(Bound::Transform));
        assert!(
            v.text.starts_with(
                "transform-bound: CPU transforms 900 img/s on 2 cores, 616 img/s with the CPU decode (1,950 img/s) on the same cores"
            ),
            "{}",
            v.text
        );
    }

    #[test]
    fn cpu_transforms_do_not_count_on_the_gpu_path() {
        let mut c = gpu_caps();
        c.cpu_transform = Some(10.0);
        assert_eq!(judge(&c).bound, Some(Bound::Decode));
    }

    #[test]
    fn gpu_stages_do_not_count_on_the_cpu_path() {
        let mut c = cpu_caps();
        c.gpu_decode = Some(10.0);
        c.transform = Some(10.0);
        assert_eq!(judge(&c).bound, Some(Bound::Decode));
    }

    #[test]
    fn rates_are_grouped() {
        assert_eq!(fmt_rate(9_800.0), "9,800");
        assert_eq!(fmt_rate(1_234_567.4), "1,234,567");
        assert_eq!(fmt_rate(512.0), "512");
        assert_eq!(fmt_rate(2.5), "2.5");
    }
}
