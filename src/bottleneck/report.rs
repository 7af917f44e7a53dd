//! The bench report: one row per stage in img/s, the verdict, and the JSON
//! with stable keys (`stages.<name>.img_per_s`, `verdict.bound`,
//! `verdict.text`, `fed_ratio`).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::verdict::{fmt_rate, Verdict};

/// The stages in the order they are measured and printed; the names are the JSON keys.
pub const STAGE_NAMES: [&str; 6] = [
    "read",
    "cpu_decode",
    "h2d",
    "gpu_decode",
    "transform",
    "end_to_end",
];

/// One stage's figure.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StageReport {
    /// Capacity in images per second; `null` when the stage could not run.
    pub img_per_s: Option<f64>,
    /// Why `img_per_s` is null (no GPU, loader failed, …); `null` when it ran.
    pub reason: Option<String>,
    /// What exactly was measured (threads, cache state, route), for the table.
    pub note: String,
    /// Further figures in their own units (`mb_per_s`, `pinned_gb_per_s`, …).
    #[serde(flatten)]
    pub metrics: BTreeMap<String, f64>,
}

impl StageReport {
    /// A stage that ran.
    pub fn measured(img_per_s: f64, note: impl Into<String>) -> Self {
        StageReport {
            img_per_s: Some(img_per_s),
            reason: None,
            note: note.into(),
            metrics: BTreeMap::new(),
        }
    }

    /// A stage that could not run, and why.
    pub fn skipped(reason: impl Into<String>) -> Self {
        StageReport {
            img_per_s: None,
            reason: Some(reason.into()),
            note: String::new(),
            metrics: BTreeMap::new(),
        }
    }

    /// Adds a figure in its own unit.
    pub fn with(mut self, key: &str, value: f64) -> Self {
        if value.is_finite() {
            self.metrics.insert(key.to_string(), value);
        }
        self
    }
}

/// Every stage, keyed by its stable name.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stages {
    /// Storage read of the shard files (records/s).
    pub read: StageReport,
    /// CPU decode with all cores.
    pub cpu_decode: StageReport,
    /// Pinned host-to-device copy, in img/s of the bytes the path copies.
    pub h2d: StageReport,
    /// GPU decode.
    pub gpu_decode: StageReport,
    /// Transforms: on the GPU path the fused kernel, on the CPU path the loader's CPU transforms.
    pub transform: StageReport,
    /// The whole pipeline through the loader.
    pub end_to_end: StageReport,
}

impl Stages {
    /// The stages in print order with their names.
    pub fn iter(&self) -> [(&'static str, &StageReport); 6] {
        [
            (STAGE_NAMES[0], &self.read),
            (STAGE_NAMES[1], &self.cpu_decode),
            (STAGE_NAMES[2], &self.h2d),
            (STAGE_NAMES[3], &self.gpu_decode),
            (STAGE_NAMES[4], &self.transform),
            (STAGE_NAMES[5], &self.end_to_end),
        ]
    }
}

/// The machine the figures come from.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MachineInfo {
    /// Logical cores available to this process.
    pub cores: usize,
    /// The GPU used, or `null`.
    pub gpu: Option<String>,
    /// 1-minute load average when the run started (`/proc/loadavg`), `null` where unknown:
    /// other processes on the cores lower every CPU figure.
    pub load_avg_start: Option<f64>,
    /// The machine's online CPUs, which the load average counts: in a container limited
    /// to fewer (`cores`), the host's load says little about the CPUs this process gets.
    pub machine_cpus: usize,
}

/// What was benchmarked and with which settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunInfo {
    /// The dataset directory.
    pub dataset: String,
    /// Records in the dataset.
    pub records: u64,
    /// Mean stored record size (bytes).
    pub mean_record_bytes: f64,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Batch size.
    pub batch: usize,
    /// Output side length of the transforms.
    pub size: u32,
    /// Seconds per stage.
    pub seconds: f64,
    /// Simulated training step per batch (ms).
    pub consumer_ms: f64,
    /// Where this process runs in its job, as its launcher says (torchrun, MPI, Horovod, Slurm,
    /// or a single process).
    pub placement: stoker_loader::Placement,
    /// Why `device` was chosen (`--device`, or for `auto` the local rank's GPU or
    /// the reason for the CPU).
    pub device_choice: String,
}

/// Everything `stoker bench` measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    /// Settings and dataset.
    pub run: RunInfo,
    /// The machine.
    pub machine: MachineInfo,
    /// Per-stage figures.
    pub stages: Stages,
    /// Fraction of the end-to-end wall time the simulated step was busy; `null` without a step.
    pub fed_ratio: Option<f64>,
    /// The conclusion.
    pub verdict: Verdict,
    /// Records that failed during the run: the figures leave them out.
    pub record_errors: RecordErrors,
    /// End to end could not be measured for no fault of the dataset (memory or file
    /// descriptors ran out): the CLI exits 3 for it, as every command does.
    #[serde(skip)]
    pub outside_fault: bool,
}

/// Records that could not be used during a bench run, by where they failed. Any of them
/// means the dataset is damaged and the figures describe only the rest of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RecordErrors {
    /// Records the decode sample could not read (missing, bad header, wrong length).
    pub unreadable: u64,
    /// Records of the decode sample that did not decode on the CPU.
    pub undecodable: u64,
    /// Records the loader replaced during the end-to-end run, each once
    /// (`Stats::bad_distinct`: the run loops over small datasets, meeting a bad record in
    /// every epoch, and said "44 records failed" of a 2-record dataset).
    pub loader_bad: u64,
}

impl RecordErrors {
    /// Records known to have failed: the decode sample's or the loader's, whichever found
    /// more (both may have met the same records, so their sum could count one twice).
    pub fn total(&self) -> u64 {
        (self.unreadable + self.undecodable).max(self.loader_bad)
    }
}

impl BenchReport {
    /// The report as pretty JSON with the stable keys.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self)
            .expect("the report holds only finite numbers and strings")
    }
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.run;
        writeln!(
            f,
            "stoker bench: {} ({} records, mean {:.1} kB), device {}, batch {}, size {}, {} s/stage, step {} ms",
            stoker_formats::one_line(&r.dataset),
            r.records,
            r.mean_record_bytes / 1000.0,
            r.device,
            r.batch,
            r.size,
            r.seconds,
            r.consumer_ms
        )?;
        writeln!(
            f,
            "placement: {}; device {} ({})",
            r.placement.describe(),
            r.device,
            r.device_choice
        )?;
        write!(
            f,
            "machine: {} cores, GPU: {}",
            self.machine.cores,
            self.machine.gpu.as_deref().unwrap_or("none")
        )?;
        // The load counts the whole machine's runnable tasks: compared with its CPUs, not
        // with a container's share of them (a busy 128-CPU node is not a busy 16-CPU pod).
        let cpus = self.machine.cores.max(self.machine.machine_cpus);
        match self.machine.load_avg_start {
            Some(l) if l > 0.5 * cpus as f64 => writeln!(
                f,
                ", load average {l:.2} at start: other processes share the cores, CPU figures are below an idle machine's"
            )?,
            Some(l) => writeln!(f, ", load average {l:.2} at start")?,
            None => writeln!(f)?,
        }
        writeln!(f)?;
        writeln!(f, "{:<12} {:>12}  detail", "stage", "img/s")?;
        for (name, s) in self.stages.iter() {
            let value = s.img_per_s.map(fmt_rate).unwrap_or_else(|| "-".to_string());
            let detail = match (&s.reason, s.note.is_empty()) {
                (Some(reason), _) => format!("not measured: {reason}"),
                (None, false) => s.note.clone(),
                (None, true) => String::new(),
            };
            writeln!(f, "{name:<12} {value:>12}  {detail}")?;
        }
        if let Some(fed) = self.fed_ratio {
            writeln!(
                f,
                "{:<12} {:>11.0}%  consumer busy / wall",
                "fed ratio",
                fed * 100.0
            )?;
        }
        writeln!(f)?;
        let e = &self.record_errors;
        if e.total() > 0 {
            writeln!(
                f,
                "RECORD ERRORS: {} unreadable and {} undecodable of the decode sample, {} replaced by the loader; the figures leave them out (run `stoker verify --decode`)",
                e.unreadable, e.undecodable, e.loader_bad
            )?;
        }
        write!(f, "verdict: {}", self.verdict.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bottleneck::verdict::{judge, Capacities, PipelinePath};

    fn sample() -> BenchReport {
        let stages = Stages {
            read: StageReport::measured(90_000.0, "warm").with("mb_per_s", 4_000.0),
            cpu_decode: StageReport::measured(1_900.0, "2 threads"),
            h2d: StageReport::skipped("no CUDA driver"),
            gpu_decode: StageReport::skipped("no CUDA driver"),
            transform: StageReport::skipped("no CUDA driver"),
            end_to_end: StageReport::measured(1_800.0, "loader").with("nan", f64::NAN),
        };
        let verdict = judge(&Capacities {
            path: Some(PipelinePath::Cpu),
            read: Some(90_000.0),
            cpu_decode: Some(1_900.0),
            cores: 2,
            ..Default::default()
        });
        BenchReport {
            run: RunInfo::default(),
            machine: MachineInfo {
                cores: 2,
                gpu: None,
                load_avg_start: Some(3.5),
                machine_cpus: 2,
            },
            stages,
            fed_ratio: None,
            verdict,
            record_errors: RecordErrors::default(),
            outside_fault: false,
        }
    }

    #[test]
    fn json_has_stable_keys_and_nulls_with_reasons() {
        let v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        for name in STAGE_NAMES {
            assert!(v["stages"][name].get("img_per_s").is_some(), "{name}");
        }
        assert_eq!(v["stages"]["read"]["img_per_s"], 90_000.0);
        assert_eq!(v["stages"]["read"]["mb_per_s"], 4_000.0);
        assert!(v["stages"]["h2d"]["img_per_s"].is_null());
        assert_eq!(v["stages"]["h2d"]["reason"], "no CUDA driver");
        assert!(v["stages"]["end_to_end"].get("nan").is_none());
        assert_eq!(v["verdict"]["bound"], "decode");
        assert_eq!(v["run"]["placement"]["launcher"], "single");
        assert_eq!(v["run"]["placement"]["local_world"], 1);
        assert!(v["verdict"]["text"]
            .as_str()
            .unwrap()
            .starts_with("decode-bound"));
        assert!(v.get("fed_ratio").unwrap().is_null());
    }

    #[test]
    fn table_lists_every_stage_and_the_verdict() {
        let t = sample().to_string();
        for name in STAGE_NAMES {
            assert!(
                t.lines().any(|l| l.starts_with(name)),
                "{name} missing:\n{t}"
            );
        }
        assert!(t.contains("not measured: no CUDA driver"));
        assert!(t.contains("placement: rank 0 of 1, local rank 0 of 1 (single)"));
        assert!(t.contains("90,000"));
        assert!(t.contains("load average 3.50 at start: other processes share the cores"));
        assert!(t
            .lines()
            .last()
            .unwrap()
            .starts_with("verdict: decode-bound"));
    }

    #[test]
    fn a_busy_host_is_not_a_busy_container() {
        // 2 CPUs of a 64-CPU node at load 3.5: the host is mostly idle, so no warning
        // that other processes share this process's cores.
        let mut r = sample();
        r.machine.machine_cpus = 64;
        let t = r.to_string();
        assert!(t.contains("load average 3.50 at start\n"), "{t}");
        assert!(!t.contains("other processes share the cores"), "{t}");
    }
}
