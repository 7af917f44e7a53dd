//! `stoker verify DATASET [--decode]`: one call to [`crate::formats::verify_dir()`]; exit 0
//! only when every record is sound. A dataset too damaged to open still gets a report (with
//! `--json`, one JSON document on stdout) that names the records of each shard it lost. An
//! error (on stderr, as for every command) is a manifest that cannot be read (exit 1, as for
//! damage), or a check that cannot go on for no fault of the dataset's: memory, file
//! descriptors, storage (exit 3, [`super::status::OUTSIDE_FAULT`]).

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use super::output::Shown;
use crate::formats::{self, VerifyReport};

/// Flags of `stoker verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A converted dataset (the directory with manifest.json and the shards).
    pub dataset: PathBuf,
    /// Also decode every JPEG on the CPU.
    #[arg(long)]
    pub decode: bool,
    /// Print a JSON report: the counts, every problem ("bad", each record's input as
    /// "source") and the records lost by shard ("lost", the inputs of each range's ends as
    /// "sources"), also for a dataset whose shards cannot all be opened.
    #[arg(long)]
    pub json: bool,
}

/// Runs `stoker verify`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let mut out = super::output::stdout();
    let r = formats::verify_dir(&args.dataset, args.decode)?;
    if args.json {
        let mut v = serde_json::to_value(&r)?;
        v["ok"] = serde_json::Value::Bool(r.ok());
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        write_text(&mut out, &args, &r)?;
    }
    out.flush()?;
    Ok(if r.ok() {
        super::status::SUCCESS
    } else {
        super::status::FAILURE
    })
}

/// Damaged pages named per shard in the text report: a shard damaged over a stretch has a
/// problem per 4 KiB page (a 30 MB overwrite, some 7,000 lines) that would bury the
/// `LOST` lines saying which records to restore.
const PAGE_LINES: usize = 20;

/// The text report: notes, a `BAD` line per problem (damaged pages: the first
/// [`PAGE_LINES`] of each shard, then their count), a `LOST` line per range of records
/// lost, and the summary line.
fn write_text(out: &mut impl Write, args: &Args, r: &VerifyReport) -> std::io::Result<()> {
    use super::output::shown;
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    // Damaged pages by shard, and where each shard's last one is: its count of those not
    // named goes there, beside the shard's other lines.
    let mut pages: HashMap<&str, (usize, usize)> = HashMap::new();
    for (i, b) in r.bad.iter().enumerate() {
        if b.is_damaged_page() {
            let (n, last) = pages.entry(&b.shard).or_default();
            *n += 1;
            *last = i;
        }
    }
    let mut named: HashMap<&str, usize> = HashMap::new();
    for (i, b) in r.bad.iter().enumerate() {
        if b.is_damaged_page() {
            let (n, last) = pages[b.shard.as_str()];
            let seen = named.entry(&b.shard).or_default();
            *seen += 1;
            if i == last && n > PAGE_LINES {
                let more = n - PAGE_LINES;
                let pages = if more == 1 { "page" } else { "pages" };
                writeln!(
                    out,
                    "BAD {}: {more} more damaged LMDB {pages} (--json lists them all)",
                    b.shard
                )?;
            }
            if *seen > PAGE_LINES {
                continue;
            }
        }
        let from = b
            .source
            .as_ref()
            .map_or(String::new(), |s| format!(" ({})", shown(s)));
        match b.index {
            Some(i) => writeln!(out, "BAD {} record {i}{from}: {}", b.shard, b.problem)?,
            None => writeln!(out, "BAD {}: {}", b.shard, b.problem)?,
        }
    }
    for l in &r.lost {
        let from = match &l.sources {
            Some((first, _)) if l.count == 1 => format!(", {}", shown(first)),
            Some((first, last)) => format!(", {} to {}", shown(first), shown(last)),
            None => String::new(),
        };
        writeln!(
            out,
            "LOST {} records {}..{} ({} records{from}): {}",
            l.shard,
            l.first_index,
            l.first_index + l.count,
            l.count,
            l.cause
        )?;
    }
    let decoded = if args.decode {
        format!(", {} decoded", r.decoded)
    } else {
        String::new()
    };
    // A shard cut short is refused by `Dataset::open` but its records before the cut are
    // read: "not opened" beside "164 of 164 records checked" read as if it had been skipped.
    let not_read = r.shards.saturating_sub(r.opened + r.read_in_part);
    let mut unopened = String::new();
    if r.read_in_part > 0 {
        let n = r.read_in_part;
        unopened += &format!(" ({n} cut short, read up to the cut)");
    }
    if not_read > 0 {
        unopened += &format!(" ({not_read} not opened)");
    }
    let outcome = if r.ok() {
        "OK".to_string()
    } else {
        format!(
            "{} problem(s); records: {} OK, {} bad, {} lost",
            r.bad.len(),
            r.ok_records,
            r.bad_records,
            r.lost_records
        )
    };
    writeln!(
        out,
        "{}: {} of {} records checked{decoded} in {} shard(s){unopened}, {:.2} s: {outcome}",
        args.dataset.shown(),
        r.checked,
        r.samples,
        r.shards,
        r.seconds,
    )
}
