//! `stoker merge OUT [PART...]`: the parts of a partitioned conversion, or of a writing
//! (`SampleWriter` with a part), → one dataset, by one call to [`stoker::formats::merge`].

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use stoker::formats;

/// Flags of `stoker merge`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output root: the merged dataset's directory, where `convert --part` (or writers with
    /// a part) wrote its part-IIIII-of-NNNNN directories.
    pub out: PathBuf,
    /// Part directories to merge (default: every part-* directory under OUT). They must be
    /// on OUT's file system: shards are linked, not copied.
    pub parts: Vec<PathBuf>,
    /// Print a machine-readable JSON report on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs `stoker merge`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let report = formats::merge(&args.out, &args.parts)?;
    let mut out = super::output::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        writeln!(
            out,
            "merged {} parts into {}: {} samples in {} shard(s), {:.1} MB",
            report.parts,
            report.out.display(),
            report.samples,
            report.shards,
            report.bytes as f64 / 1e6
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
