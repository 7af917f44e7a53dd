//! `stoker merge OUT [PART...]`: the parts of a partitioned conversion, or of a writing
//! (`SampleWriter` with a part), → one dataset, by one call to [`crate::formats::merge`],
//! which removes the part directories once their shards are OUT's: each one removed is
//! named on stderr, since a part given outside OUT is deleted too.

use std::io::Write;
use std::path::PathBuf;

use super::output::Shown;
use crate::formats;

/// Flags of `stoker merge`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output root: the merged dataset's directory, where `convert --part` (or writers with
    /// a part) wrote its part-IIIII-of-NNNNN directories.
    pub out: PathBuf,
    /// Part directories to merge (default: every part-* directory under OUT). They must be
    /// on OUT's file system: shards are linked, not copied. Each is removed, with
    /// everything in it, once the merge is done, also one outside OUT (its shards are
    /// OUT's then).
    pub parts: Vec<PathBuf>,
    /// Print a machine-readable JSON report on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs `stoker merge`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let report = formats::merge(&args.out, &args.parts)?;
    // On stderr in every mode (the JSON report lists them too): a part given outside OUT
    // is deleted though the user may not have expected OUT's command to touch it.
    for dir in &report.removed {
        let why = if dir.starts_with(&args.out) {
            ""
        } else {
            " (outside OUT: removed because its shards were moved into OUT)"
        };
        super::output::note(format_args!("removed part directory {}{why}", dir.shown()));
    }
    let mut out = super::output::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        writeln!(
            out,
            "merged {} parts into {}: {} samples in {} shard(s), {:.1} MB",
            report.parts,
            report.out.shown(),
            report.samples,
            report.shards,
            report.bytes as f64 / 1e6
        )?;
    }
    Ok(super::status::SUCCESS)
}
