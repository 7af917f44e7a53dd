//! The check of a conversion journal before `--resume` continues from it.
//!
//! The journal is a file anyone (or a damaged disk) can change, and everything resume does
//! follows from it: where in the listing to continue, which shard files to keep, the totals
//! the manifest will record. A journal that is off by one input makes a dataset with a
//! record lost or doubled that `verify` cannot tell from a good one; so before anything in
//! the directory is deleted, the journal must agree with the listing and with the shard
//! files it names, or resume is refused.

use std::path::Path;

use super::journal::{Journal, JOURNAL_FILE};
use super::options::ConvertOptions;
use super::source::Input;
use crate::manifest::RawSize;
use crate::record::{Encoding, HEADER_LEN};
use crate::text::Lossless;
use crate::writer::shard_file_name;
use crate::FormatError;

/// Checks `j` against `inputs` (the listing this conversion resumes), `options` and the
/// shard files in `out`. Reads every finished shard once, for its digest.
///
/// # Errors
///
/// [`FormatError::OutputExists`] saying what does not add up, or which finished shard
/// changed since it was journaled, and to delete the directory; I/O errors.
pub(super) fn check_journal(
    out: &Path,
    j: &Journal,
    inputs: &[Input],
    options: &ConvertOptions,
) -> Result<(), FormatError> {
    let refuse = |what: String| FormatError::OutputExists {
        path: out.to_path_buf(),
        reason: format!(
            "its conversion journal ({JOURNAL_FILE}) does not add up: {what}; it cannot be \
             resumed: delete the directory and convert again"
        ),
    };
    let listed = inputs.len() as u64;
    if j.next_input > listed {
        return Err(refuse(format!(
            "it continues at input {}, but the listing has {listed} inputs",
            j.next_input
        )));
    }
    let changed = |what: String| FormatError::OutputExists {
        path: out.to_path_buf(),
        reason: format!("{what}; it cannot be resumed: delete the directory and convert again"),
    };
    let records = check_shards(out, j).map_err(|e| e.into_error(&refuse, &changed))?;
    let accounted = records.checked_add(j.skipped.len() as u64);
    if accounted != Some(j.next_input) {
        return Err(refuse(format!(
            "its {records} records in {} finished shards and {} skipped inputs are not the {} \
             inputs it says were done",
            j.done.len(),
            j.skipped.len(),
            j.next_input
        )));
    }
    check_skipped(j, &inputs[..j.next_input as usize], options).map_err(&refuse)?;
    if j.stored.checked_add(j.transcoded) != Some(records) {
        return Err(refuse(format!(
            "{} stored and {} transcoded inputs are not its {records} records",
            j.stored, j.transcoded
        )));
    }
    check_payload(j, records, options).map_err(&refuse)?;
    j.audit.adds_up(j.next_input).map_err(refuse)
}

/// Why the shards named by a journal cannot be resumed from.
enum ShardProblem {
    /// The journal does not add up (in words).
    Journal(String),
    /// The file is not what was journaled: its size or digest (in words). A
    /// [`FormatError::ShardDigestMismatch`] would say "the manifest says", of a
    /// conversion that has none yet.
    Changed(String),
    /// The file cannot be read.
    File(FormatError),
}

impl ShardProblem {
    fn into_error(
        self,
        refuse: &dyn Fn(String) -> FormatError,
        changed: &dyn Fn(String) -> FormatError,
    ) -> FormatError {
        match self {
            ShardProblem::Journal(what) => refuse(what),
            ShardProblem::Changed(what) => changed(what),
            ShardProblem::File(e) => e,
        }
    }
}

/// Checks that the journal's finished shards are the writer's shards 0, 1, 2, ... in this
/// directory, numbered contiguously from record 0, each file of the journaled size and
/// digest and holding the journaled number of records. Returns the records they hold.
fn check_shards(out: &Path, j: &Journal) -> Result<u64, ShardProblem> {
    let bad = |what: String| Err(ShardProblem::Journal(what));
    let mut records = 0u64;
    for (i, s) in j.done.iter().enumerate() {
        // Only the writer's own names: a journal must not make resume keep, or the manifest
        // name, a file outside this directory.
        let name = shard_file_name(i);
        if s.file != name {
            return bad(format!("finished shard {i} is {:?}, not {name}", s.file));
        }
        if s.key_base.is_some() || s.first_index != records || s.count == 0 {
            return bad(format!(
                "{name} starts at record {} with {} records (key base {:?}); it should \
                 follow on from record {records}",
                s.first_index, s.count, s.key_base
            ));
        }
        let Some(want) = s.xxh3 else {
            return bad(format!(
                "{name} has no xxh3 digest (journaled by an older stoker)"
            ));
        };
        let path = out.join(&name);
        if !path.is_file() {
            return bad(format!("{name} is missing"));
        }
        let (len, got) = crate::digest::xxh3_of(&path).map_err(ShardProblem::File)?;
        let changed = |what: String| {
            Err(ShardProblem::Changed(format!(
                "finished shard {name} is not the file its conversion journal \
                 ({JOURNAL_FILE}) recorded: {what} (damaged or replaced since)"
            )))
        };
        if len != s.bytes {
            return changed(format!("{len} bytes, journaled as {}", s.bytes));
        }
        if got != want {
            return changed(format!(
                "file digest (xxh3-64) {got:016x}, journaled as {want:016x}"
            ));
        }
        // The digest proves the file is the one journaled, not that the journal counted its
        // records right: LMDB's own count (meta page) must agree.
        let file = std::fs::File::open(&path)
            .map_err(|e| ShardProblem::File(FormatError::io(&path, e)))?;
        if let Err(reason) = crate::lmdb_meta::check(&file, len, s.count) {
            return bad(format!("{name}: {reason}"));
        }
        records = match records.checked_add(s.count) {
            Some(r) => r,
            None => return bad(format!("{name}: record count {} overflows", s.count)),
        };
    }
    Ok(records)
}

/// Checks that each skipped input is one of `done` (the inputs before the resume point), in
/// listing order, each at most once.
fn check_skipped(j: &Journal, done: &[Input], options: &ConvertOptions) -> Result<(), String> {
    // A strict run skips only files that are no image and not named as one.
    let strict_skip = |s: &super::Skipped| {
        super::transcode::is_not_an_image(&s.reason)
            && super::pipeline::strict_skips_unnamed(options, &s.path)
    };
    if options.strict && !j.skipped.iter().all(strict_skip) {
        return Err("it skipped inputs in a --strict conversion".into());
    }
    if let Some(at) = &j.skipped_at {
        // Positions recorded: each skip must be the input at its position, in order.
        let mut next = 0u64;
        for (s, &k) in j.skipped.iter().zip(at) {
            if k < next || done.get(k as usize).is_none_or(|i| i.path != s.path) {
                return Err(format!(
                    "skipped input {} is not input {k} of the inputs before the resume point, in order",
                    s.path.lossless()
                ));
            }
            next = k + 1;
        }
        return Ok(());
    }
    let mut rest = done.iter();
    for s in &j.skipped {
        if !rest.any(|i| i.path == s.path) {
            return Err(format!(
                "skipped input {} is not one of the inputs before the resume point, in order",
                s.path.lossless()
            ));
        }
    }
    Ok(())
}

/// Checks the journaled payload total and raw size against the records: exact for raw
/// pixels, bounded by the shard files for JPEG (every record has a header and a payload of
/// at least a byte).
fn check_payload(j: &Journal, records: u64, options: &ConvertOptions) -> Result<(), String> {
    let shard_bytes = j.done.iter().fold(0u64, |a, s| a.saturating_add(s.bytes));
    let headers = records.saturating_mul(HEADER_LEN as u64);
    match (options.encoding, options.raw_size) {
        (Encoding::Raw, Some((w, h))) if records > 0 => {
            let want = RawSize {
                height: h,
                width: w,
                channels: 3,
            };
            let per_record = u64::from(w) * u64::from(h) * 3;
            if j.raw_size != Some(want) || Some(j.payload_bytes) != records.checked_mul(per_record)
            {
                return Err(format!(
                    "raw size {:?} and {} payload bytes do not fit {records} records of {w}x{h}",
                    j.raw_size, j.payload_bytes
                ));
            }
        }
        _ if j.raw_size.is_some() => {
            return Err(format!(
                "it records a raw size {:?} without raw records",
                j.raw_size
            ));
        }
        _ if j.payload_bytes < records || j.payload_bytes.saturating_add(headers) > shard_bytes => {
            return Err(format!(
                "{} payload bytes do not fit {records} records in {shard_bytes} bytes of shards",
                j.payload_bytes
            ));
        }
        _ => {}
    }
    Ok(())
}
