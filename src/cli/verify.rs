//! `stoker verify DATASET [--decode]`: one call to [`stoker::formats::verify()`]; exit 0 only
//! when every record is sound.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use stoker::formats::{self, Dataset};

/// Flags of `stoker verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A converted dataset (the directory with manifest.json and the shards).
    pub dataset: PathBuf,
    /// Also decode every JPEG on the CPU.
    #[arg(long)]
    pub decode: bool,
    /// Print a JSON report.
    #[arg(long)]
    pub json: bool,
}

/// Runs `stoker verify`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let ds = Dataset::open(&args.dataset)?;
    let r = formats::verify(&ds, args.decode)?;
    if args.json {
        let mut v = serde_json::to_value(&r)?;
        v["ok"] = serde_json::Value::Bool(r.ok());
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        for n in &r.notes {
            writeln!(out, "note: {n}")?;
        }
        for b in &r.bad {
            match b.index {
                Some(i) => writeln!(out, "BAD {} record {i}: {}", b.shard, b.problem)?,
                None => writeln!(out, "BAD {}: {}", b.shard, b.problem)?,
            }
        }
        writeln!(
            out,
            "{}: {} of {} records checked{} in {} shard(s), {:.2} s: {}",
            args.dataset.display(),
            r.checked,
            r.samples,
            if args.decode {
                format!(", {} decoded", r.decoded)
            } else {
                String::new()
            },
            r.shards,
            r.seconds,
            if r.ok() {
                "OK".to_string()
            } else {
                format!("{} problem(s)", r.bad.len())
            }
        )?;
    }
    Ok(if r.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
