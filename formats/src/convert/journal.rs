//! The conversion journal: after every finished shard, how far the conversion got, so that
//! `resume` continues a killed run and still produces the same bytes; and the check of what
//! an output directory holds before a conversion starts or resumes.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::audit::Audit;
use super::options::ConvertOptions;
use super::report::Skipped;
use crate::manifest::{RawSize, ShardEntry, MANIFEST_FILE};
use crate::writer::{write_atomically, DatasetWriter, WriterOptions};
use crate::FormatError;

/// File name of the conversion journal (present only while a conversion is unfinished).
pub const JOURNAL_FILE: &str = ".stoker-convert.json";
/// The journal's temporary name while it is replaced (see `write_atomically`).
const JOURNAL_TMP: &str = ".stoker-convert.json.tmp";

/// State saved after each finished shard, enough to resume byte-identically.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Journal {
    pub(super) fingerprint: u32,
    pub(super) next_input: u64,
    pub(super) done: Vec<ShardEntry>,
    pub(super) skipped: Vec<Skipped>,
    pub(super) audit: Audit,
    pub(super) payload_bytes: u64,
    pub(super) raw_size: Option<RawSize>,
    pub(super) stored: u64,
    pub(super) transcoded: u64,
    pub(super) input_bytes: u64,
}

/// Totals accumulated in input order.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) skipped: Vec<Skipped>,
    pub(super) audit: Audit,
    pub(super) stored: u64,
    pub(super) transcoded: u64,
    pub(super) input_bytes: u64,
}

/// The writer and totals to continue from `journal` (or to start afresh without one), and
/// the position in the listing to continue at.
pub(super) fn resume(
    out: &Path,
    writer_opts: WriterOptions,
    journal: Option<Journal>,
) -> Result<(DatasetWriter, Totals, usize), FormatError> {
    let out = out.to_path_buf();
    Ok(match journal {
        Some(j) => {
            let mut w = DatasetWriter::resume_from(out, writer_opts, j.done)?;
            w.restore_totals(j.payload_bytes, j.raw_size);
            let t = Totals {
                skipped: j.skipped,
                audit: j.audit,
                stored: j.stored,
                transcoded: j.transcoded,
                input_bytes: j.input_bytes,
            };
            (w, t, j.next_input as usize)
        }
        None => (
            DatasetWriter::resume_from(out, writer_opts, Vec::new())?,
            Totals::default(),
            0,
        ),
    })
}

pub(super) fn save_journal(
    out: &Path,
    fingerprint: u32,
    next_input: usize,
    writer: &DatasetWriter,
    totals: &Totals,
) -> Result<(), FormatError> {
    let j = Journal {
        fingerprint,
        next_input: next_input as u64,
        done: writer.finished_shards().to_vec(),
        skipped: totals.skipped.clone(),
        audit: totals.audit.clone(),
        payload_bytes: writer.payload_bytes(),
        raw_size: writer.raw_size(),
        stored: totals.stored,
        transcoded: totals.transcoded,
        input_bytes: totals.input_bytes,
    };
    let text = serde_json::to_vec_pretty(&j).expect("journal serializes");
    write_atomically(out, JOURNAL_FILE, &text).map_err(|e| writer.space_error(e))
}

/// Files a conversion leaves behind while unfinished: shards, LMDB's lock files, and the
/// temporary files of `write_atomically` (a crash while the journal or manifest is being
/// replaced leaves `NAME.tmp`).
fn is_ours(name: &str) -> bool {
    name == JOURNAL_FILE
        || name == JOURNAL_TMP
        || name == "manifest.json.tmp"
        || (name.starts_with("shard-")
            && (name.ends_with(".lmdb") || name.ends_with(".tmp") || name.ends_with("-lock")))
}

/// Checks what `out` holds; returns the journal to resume from, if any, after `check`
/// accepted it (against the listing being converted and the shards it names).
pub(super) fn prepare_output(
    out: &Path,
    options: &ConvertOptions,
    fingerprint: u32,
    check: impl FnOnce(&Journal) -> Result<(), FormatError>,
) -> Result<Option<Journal>, FormatError> {
    let exists = |reason: String| FormatError::OutputExists {
        path: out.to_path_buf(),
        reason,
    };
    if out.join(MANIFEST_FILE).exists() {
        // With --resume, `convert` has already taken a finished conversion of this very
        // listing as done: this one is of other inputs, paths or flags.
        let what = if options.resume {
            "already holds a finished conversion of other inputs or flags (manifest.json; --resume continues only the same source, spelled the same way, with the same flags); choose another output directory or delete it"
        } else {
            "already holds a finished dataset (manifest.json); choose another output directory or delete it"
        };
        return Err(exists(what.into()));
    }
    let entries = match std::fs::read_dir(out) {
        Ok(rd) => rd
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| FormatError::io(out, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FormatError::io(out, e)),
    };
    if let Some(other) = entries.iter().find(|n| !is_ours(n)) {
        return Err(exists(format!(
            "is not empty (found {other:?}); convert into a new or empty directory"
        )));
    }
    if entries.is_empty() {
        return Ok(None);
    }
    if !options.resume {
        return Err(exists(
            "holds a partial conversion (no manifest.json); rerun with --resume to continue it, or delete the directory"
                .into(),
        ));
    }
    let jpath = out.join(JOURNAL_FILE);
    let journal: Option<Journal> = match std::fs::read(&jpath) {
        Ok(b) => Some(
            serde_json::from_slice(&b).map_err(|e| FormatError::InvalidManifest {
                path: jpath.clone(),
                reason: format!("unreadable conversion journal: {e}"),
            })?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(FormatError::io(&jpath, e)),
    };
    if let Some(j) = &journal {
        if j.fingerprint != fingerprint {
            return Err(exists(
                "holds a partial conversion of different inputs or flags; --resume needs the same source and flags (or delete the directory)"
                    .into(),
            ));
        }
        // Before anything is deleted: a journal that is refused leaves the directory as it was.
        check(j)?;
    }
    // Shards finished after the last journal entry (or with no journal) are redone.
    let keep: Vec<String> = journal
        .as_ref()
        .map(|j| j.done.iter().map(|s| s.file.clone()).collect())
        .unwrap_or_default();
    for name in &entries {
        let leftover = name == JOURNAL_TMP || name == "manifest.json.tmp";
        if leftover || (name.starts_with("shard-") && !keep.contains(name)) {
            let p = out.join(name);
            std::fs::remove_file(&p).map_err(|e| FormatError::io(&p, e))?;
        }
    }
    Ok(journal)
}
