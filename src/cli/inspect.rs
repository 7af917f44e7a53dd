//! `stoker inspect DATASET`: one call to [`crate::formats::inspect()`], printed as text or JSON;
//! with `--record N`, one call to [`crate::formats::inspect_record()`].

use std::io::Write;
use std::path::PathBuf;

use super::output::Shown;
use crate::formats::{self, Dataset, Distribution};

/// Flags of `stoker inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A converted dataset (the directory with manifest.json and the shards).
    pub dataset: PathBuf,
    /// Print JSON (with at least format_version, samples, shards, classes, bytes, and per_class: one
    /// {label, name, count} per class in label order, classes without records included).
    #[arg(long)]
    pub json: bool,
    /// Show record N alone: the input it came from (from the dataset's source map), its
    /// label and class, size, and whether its payload matches its CRC; exit 1 when it is
    /// damaged.
    #[arg(long, value_name = "N")]
    pub record: Option<u64>,
}

fn dist(name: &str, d: &Distribution) -> String {
    format!(
        "{name}: min {} / median {} / p90 {} / max {} (mean {:.1})",
        d.min, d.p50, d.p90, d.max, d.mean
    )
}

/// Shards listed by name at each end of the text output; the rest are counted (a 10 TB
/// dataset has ten thousand shards; `--json` lists them all).
const SHARDS_AT_EACH_END: usize = 5;

/// A line per shard, or, for more than twice [`SHARDS_AT_EACH_END`] + 1, the first and
/// last few and a line counting those between.
fn shard_lines(shards: &[formats::ShardEntry]) -> Vec<String> {
    let line = |s: &formats::ShardEntry| {
        format!(
            "{}: records {}..{}, {} bytes",
            s.file,
            s.first_index,
            s.first_index + s.count,
            s.bytes
        )
    };
    let n = SHARDS_AT_EACH_END;
    if shards.len() <= 2 * n + 1 {
        return shards.iter().map(line).collect();
    }
    let mut lines: Vec<String> = shards[..n].iter().map(line).collect();
    lines.push(format!(
        "... ({} more shards; --json lists them all)",
        shards.len() - 2 * n
    ));
    lines.extend(shards[shards.len() - n..].iter().map(line));
    lines
}

/// Runs `stoker inspect`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let mut out = super::output::stdout();
    let ds = Dataset::open(&args.dataset)?;
    if let Some(index) = args.record {
        return record(&ds, index, args.json, &mut out);
    }
    let r = formats::inspect(&ds)?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
        return Ok(unreadable_status(&args, &r));
    }
    writeln!(out, "dataset: {}", args.dataset.shown())?;
    // Version 1 reads, but its whole-file digests are the weaker ones (docs/FORMAT.md,
    // "Version 1"): said here too, not only by `verify`.
    let older = match r.format_version {
        1 => " (shard digests are CRC32C, the weaker kind; convert again for version 2)",
        _ => "",
    };
    writeln!(out, "format version: {}{older}", r.format_version)?;
    writeln!(
        out,
        "samples: {}  shards: {}  classes: {}  encoding: {}{}",
        r.samples,
        r.shards,
        r.classes,
        r.encoding,
        r.raw_size
            .map(|s| format!(" {}x{}x{}", s.width, s.height, s.channels))
            .unwrap_or_default()
    )?;
    writeln!(
        out,
        "bytes: {} ({:.1} MB; payload {:.1} MB)",
        r.bytes,
        r.bytes as f64 / 1e6,
        r.payload_bytes as f64 / 1e6
    )?;
    let enc: Vec<String> = r
        .encodings
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    writeln!(out, "records by encoding: {}", enc.join(", "))?;
    writeln!(out, "{}", dist("width", &r.width))?;
    writeln!(out, "{}", dist("height", &r.height))?;
    writeln!(out, "{}", dist("payload bytes", &r.payload_size))?;
    let per: Vec<String> = r
        .per_class
        .iter()
        .map(|c| match &c.name {
            Some(name) => format!("{} {}: {}", c.label, super::output::shown(name), c.count),
            None => format!("{} (no class name): {}", c.label, c.count),
        })
        .collect();
    const SHOW: usize = 30;
    writeln!(
        out,
        "per class (label name: records): {}{}",
        per.iter()
            .take(SHOW)
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
        if per.len() > SHOW {
            format!(", ... ({} more)", per.len() - SHOW)
        } else {
            String::new()
        }
    )?;
    for line in shard_lines(&r.shard_files) {
        writeln!(out, "  {line}")?;
    }
    match &r.audit {
        Some(a) => {
            writeln!(out, "source audit:")?;
            for line in a.summary_lines() {
                writeln!(out, "  {line}")?;
            }
        }
        None => writeln!(
            out,
            "source audit: none (dataset not made by stoker convert)"
        )?,
    }
    writeln!(
        out,
        "made by: {} {} from {}",
        super::output::shown(&r.provenance.tool),
        super::output::shown(&r.provenance.tool_version),
        super::output::shown(&r.provenance.source)
    )?;
    match (&r.source_map, &r.source_map_problem) {
        // Named by the manifest but gone or damaged: not announced as there.
        (Some(_), Some(problem)) => writeln!(
            out,
            "source map: unusable: {} (`stoker verify` checks the dataset)",
            super::output::shown(problem)
        )?,
        (Some(file), None) => writeln!(
            out,
            "source map: {} (record N's input: stoker inspect DATASET --record N)",
            super::output::shown(file)
        )?,
        (None, _) => writeln!(
            out,
            "source map: none (made by a stoker before source maps, or written record by record with DatasetWriter)"
        )?,
    }
    Ok(unreadable_status(&args, &r))
}

/// Exit 1, saying why on stderr, when records could not be read: the figures above leave
/// them out, and a script reading them must not take the dataset for sound.
fn unreadable_status(args: &Args, r: &formats::InspectReport) -> u8 {
    if r.unreadable == 0 {
        return super::status::SUCCESS;
    }
    let first = r.first_unreadable.as_deref().unwrap_or("");
    super::output::note(format_args!(
        "stoker: error: {} record(s) could not be read and are left out of the figures (the first, {first}); `stoker verify {}` names every damaged record",
        r.unreadable,
        args.dataset.shown()
    ));
    super::status::FAILURE
}

/// `stoker inspect DATASET --record N`.
fn record(ds: &Dataset, index: u64, json: bool, out: &mut impl Write) -> anyhow::Result<u8> {
    if index >= ds.len() {
        // Asked for what the dataset does not have: a usage error, as a malformed index is
        // (it was 1, the status of a damaged record).
        let has = match ds.len() {
            0 => "no records".to_string(),
            n => format!("{n} records (--record 0 to {})", n - 1),
        };
        return Err(formats::FormatError::InvalidOptions(format!(
            "--record {index}: the dataset has {has}"
        ))
        .into());
    }
    let r = formats::inspect_record(ds, index)?;
    let code = match (&r.problem, &r.source_problem) {
        (None, None) => super::status::SUCCESS,
        _ => super::status::FAILURE,
    };
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
        return Ok(code);
    }
    writeln!(out, "record: {} (in {})", r.index, r.shard)?;
    match (&r.source, &r.source_problem) {
        (Some(source), _) => writeln!(out, "source: {}", super::output::shown(source))?,
        (None, Some(problem)) => writeln!(
            out,
            "source: unknown: {} (`stoker verify` checks the dataset)",
            super::output::shown(problem)
        )?,
        (None, None) => writeln!(
            out,
            "source: unknown (no source map: the dataset was made by a stoker before source maps, or written record by record with DatasetWriter)"
        )?,
    }
    if let Some(f) = &r.record {
        let class = f.class.as_deref().unwrap_or("(no class name)");
        writeln!(out, "label: {} {}", f.label, super::output::shown(class))?;
        writeln!(
            out,
            "size: {}x{}x{} {}, {} payload bytes",
            f.width, f.height, f.channels, f.encoding, f.payload_bytes
        )?;
        if f.crc_ok {
            writeln!(out, "payload: matches its CRC-32C")?;
        }
    }
    if let Some(problem) = &r.problem {
        writeln!(out, "damaged: {}", super::output::shown(problem))?;
    }
    Ok(code)
}
