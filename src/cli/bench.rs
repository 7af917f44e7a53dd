//! `stoker bench DATASET`: measure each stage alone, then the whole pipeline,
//! and name the bound. Flags → [`crate::bottleneck::BenchOptions`] → one call to
//! [`crate::bottleneck::run`]; the table goes to stdout (or JSON with `--json`),
//! the progress bar to stderr when it is a terminal.

use std::io::Write;
use std::path::PathBuf;

use super::output::Shown;
use crate::bottleneck::{self, BenchOptions, DeviceChoice, Progress};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use stoker_decode::WaitMode;

use super::output;

/// Flags of `stoker bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A converted dataset (the directory with manifest.json and the shards).
    pub dataset: PathBuf,
    /// Where the pipeline runs: auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto", value_parser = clap::value_parser!(DeviceChoice))]
    pub device: DeviceChoice,
    /// Images per batch.
    #[arg(long, default_value_t = 256, value_parser = parse_batch)]
    pub batch: usize,
    /// Output side of the transforms (RandomResizedCrop size).
    #[arg(long, default_value_t = 224, value_parser = parse_size)]
    pub size: u32,
    /// Seconds per stage (at least 0.1, at most a day).
    #[arg(long, default_value_t = 2.0, value_parser = parse_seconds)]
    pub seconds: f64,
    /// Simulated training step per batch in milliseconds (0 = none; at most a day, and
    /// at most a quarter of --seconds, as the fed ratio needs several steps per stage).
    #[arg(long, default_value_t = 0.0, value_parser = parse_consumer_ms)]
    pub consumer_ms: f64,
    /// Threads for the CPU stages (0 = every core; under torchrun or srun, this
    /// process's share of the node: the cores divided by the processes on it).
    #[arg(long, default_value_t = 0, value_parser = parse_threads)]
    pub threads: usize,
    /// How the GPU stages wait for the GPU: auto (spin: blocking was measured
    /// to save no CPU time), spin (poll on a core), block (sleep until the
    /// driver wakes the thread). The gpu_decode and end_to_end rows give the
    /// CPU seconds spent (cpu_s), to compare the two.
    #[arg(long, default_value = "auto", value_parser = clap::value_parser!(WaitMode))]
    pub gpu_waits: WaitMode,
    /// Print the figures as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `--batch`, `--size` and `--threads`: refused here, as the other options' ranges are, so
/// that a typo is a usage error (status 2) before the dataset is opened.
fn parse_batch(s: &str) -> Result<usize, String> {
    let v = parse_count(s)?;
    bottleneck::check_batch(v)?;
    Ok(v)
}

fn parse_size(s: &str) -> Result<u32, String> {
    let v = parse_count(s)?;
    bottleneck::check_size(v)?;
    Ok(v)
}

fn parse_threads(s: &str) -> Result<usize, String> {
    let v = parse_count(s)?;
    bottleneck::check_threads(v)?;
    Ok(v)
}

/// A whole number that fits the option's type. Clap's message names the value.
fn parse_count<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse::<T>()
        .map_err(|_| "want a whole number in range".to_string())
}

/// `--seconds`: a positive number of seconds up to [`bottleneck::MAX_SECONDS`]. Refused
/// here, before the dataset is opened, so that a typo costs nothing.
fn parse_seconds(s: &str) -> Result<f64, String> {
    let v = parse_number(s)?;
    bottleneck::check_seconds(v).map_err(|reason| format!("{s}: {reason}"))?;
    Ok(v)
}

/// `--consumer-ms`: zero or a positive number of milliseconds up to
/// [`bottleneck::MAX_CONSUMER_MS`].
fn parse_consumer_ms(s: &str) -> Result<f64, String> {
    let v = parse_number(s)?;
    bottleneck::check_consumer_ms(v).map_err(|reason| format!("{s}: {reason}"))?;
    Ok(v)
}

/// A finite number: Rust's float parser also takes `inf` and `NaN`.
fn parse_number(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("{s}: want a number")),
    }
}

/// A spinner per stage on stderr; indicatif hides it when stderr is not a terminal.
struct Bar(ProgressBar);

impl Progress for Bar {
    fn stage(&self, name: &str) {
        self.0.set_message(name.to_string());
        self.0.set_position(0);
    }
    fn advance(&self, fraction: f64) {
        self.0
            .set_position((fraction.clamp(0.0, 1.0) * 100.0) as u64);
    }
}

/// Runs the benchmark and prints the table (or JSON).
pub fn run(args: Args) -> anyhow::Result<u8> {
    // Each flag's own range is clap's; the two together are checked here, before the
    // dataset is opened, and said as clap says a usage error (status 2).
    if let Err(reason) = bottleneck::check_step_fits(args.seconds, args.consumer_ms) {
        return Ok(super::status::usage_error::<Args>("bench", reason));
    }
    let opts = BenchOptions {
        device: args.device,
        batch: args.batch,
        size: args.size,
        seconds: args.seconds,
        consumer_ms: args.consumer_ms,
        threads: args.threads,
        waits: args.gpu_waits,
    };
    let bar = ProgressBar::new(100);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg:<12} [{bar:30}] {pos:>3}%")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    let progress = Bar(bar);
    let report = bottleneck::run(&args.dataset, &opts, &progress)
        .with_context(|| format!("benchmarking {}", args.dataset.shown()));
    progress.0.finish_and_clear();
    let report = report?;
    let mut out = super::output::stdout();
    if args.json {
        writeln!(out, "{}", report.to_json())?;
    } else {
        writeln!(out, "{report}")?;
    }
    out.flush()?;
    // The whole pipeline always has a path (the CPU's when there is no GPU): a run that
    // could not measure it (a loader that cannot be built, an empty dataset) is a failure,
    // whatever the other rows say.
    if let Some(reason) = &report.stages.end_to_end.reason {
        output::note(format_args!(
            "stoker: error: end_to_end not measured: {reason}"
        ));
        return Ok(if report.outside_fault {
            super::status::OUTSIDE_FAULT
        } else {
            super::status::FAILURE
        });
    }
    let errors = report.record_errors.total();
    if errors > 0 {
        // The figures stand, but the dataset is damaged: a script must not take them as a
        // clean run.
        output::note(format_args!(
            "stoker: error: {errors} record(s) of {} failed during the bench; the figures leave them out (run `stoker verify --decode`)",
            args.dataset.shown()
        ));
        return Ok(super::status::FAILURE);
    }
    Ok(super::status::SUCCESS)
}
