//! `verify` of a shard cut short: the records still in it are checked, and only those it
//! lost are counted lost.
//!
//! An interrupted copy (`cp` killed, the disk full) leaves a shard shorter than the manifest
//! says. [`crate::Dataset::open`] refuses it, so that the loader never reads a shard that is
//! not the one written; but the records in the pages before the cut are intact, and a user
//! restoring such a copy needs to know which records are lost and which are not. The
//! records read from a shard cut short are vouched for by their own checks alone (key in
//! place, header and payload CRC, label, size): the shard's digest covers the whole file
//! and cannot be compared, which is said for the shard in the report.
//!
//! A file of the manifest's size whose bytes are zeros from some point to its end, the
//! last page of its tree included (a copy into a file allocated ahead, a crash before the
//! data reached the disk), is the same copy cut short, with its size kept: it is read up to
//! where the zeros begin ([`check_zero_tail`]). Any other file whose digest differs stays
//! wholly lost ([`LostCause::Altered`]): a shard of another dataset passes every record
//! check.

use std::fs::{File, Metadata};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use stoker_decode::CpuDecoder;

use super::shard_check::{reason_of, LostCause, Reading, ShardCheck, ShardOutcome};
use crate::lmdb_meta::RecordTree;
use crate::shard::OpenShard;
use crate::{FormatError, Manifest, ShardEntry};

/// Checks the shard `entry` at `path`, which [`crate::Dataset::open`] refused as `got`
/// bytes long where the manifest says more: its meta pages (which lie at its start) are
/// checked against the size it should have, then the records of the pages before the cut.
pub(super) fn check_cut_shard(
    m: &Manifest,
    entry: &ShardEntry,
    path: &Path,
    got: u64,
    (reading, decoder): (Reading<'_>, &CpuDecoder),
) -> Result<ShardOutcome, FormatError> {
    let (file, before) = match open_cut(path, got) {
        Ok(f) => f,
        Err(e) => {
            let reason = format!("not opened: {}", reason_of(&e));
            return Ok(ShardOutcome::unusable(entry, &e, reason));
        }
    };
    let at = format!("the file is cut short at byte {got} of {}", entry.bytes);
    let mut outcome = match crate::lmdb_meta::check(&file, entry.bytes, entry.count) {
        Ok(tree) => {
            let mut o = salvage(m, entry, path, (&file, got, tree), &at, (reading, decoder))?;
            o.read_in_part = true;
            o
        }
        Err(reason) => {
            let mut o = ShardOutcome::default();
            let reason = format!("{at}, and its meta pages cannot be used: {reason}");
            o.problems.push((None, reason.clone()));
            o.lose_all(entry, LostCause::CutShort, reason);
            o
        }
    };
    // A copy still running, or the shard restored meanwhile: what was read is not the file
    // there now.
    if let Err(what) = unchanged(path, &file, &before) {
        let reason = format!("the file changed while it was checked ({what})");
        outcome.problems.push((None, reason.clone()));
        outcome.lose_all(entry, LostCause::Altered, reason);
    }
    Ok(outcome)
}

/// For a shard opened as [`crate::Dataset::open`] opens it, read from `file`, whose digest
/// differs from the manifest's (`problem`): when its bytes are zeros from some point to its
/// end, the last page of its tree included, the records before that point are checked
/// as those of a shard cut short there. `None` for any other file.
///
/// # Errors
///
/// What stopped the check for no fault of the shard's ([`ShardCheck::finish`]).
pub(super) fn check_zero_tail(
    m: &Manifest,
    entry: &ShardEntry,
    shard: &OpenShard,
    file: &File,
    problem: &str,
    (reading, decoder): (Reading<'_>, &CpuDecoder),
) -> Result<Option<ShardOutcome>, FormatError> {
    let Some(zeros) = zeros_from(file, &shard.tree) else {
        return Ok(None);
    };
    let at = format!(
        "the file holds only zeros from byte {zeros} of {} (cut short, its size kept)",
        entry.bytes
    );
    let file_and_cut = (file, zeros, shard.tree);
    let mut outcome = salvage(m, entry, &shard.path, file_and_cut, &at, (reading, decoder))?;
    outcome.problems.insert(0, (None, problem.to_string()));
    if let Err(e) = shard.check_unchanged() {
        let reason = reason_of(&e);
        outcome.problems.push((None, reason.clone()));
        outcome.lose_all(entry, LostCause::Altered, reason);
    }
    Ok(Some(outcome))
}

/// Checks the records of `file` whose pages lie wholly before byte `cut` (with the record
/// tree of its meta pages), as [`super::check_shard`] checks those of a whole shard; the
/// others are lost for [`LostCause::CutShort`], `at` saying where the shard ends.
fn salvage(
    m: &Manifest,
    entry: &ShardEntry,
    path: &Path,
    (file, cut, tree): (&File, u64, RecordTree),
    at: &str,
    (reading, decoder): (Reading<'_>, &CpuDecoder),
) -> Result<ShardOutcome, FormatError> {
    let mut check = ShardCheck::new(m, entry, path, reading);
    check.problem(
        None,
        format!(
            "{at}; the records before the cut are vouched for by their own checks alone (the shard's digest covers the whole file)"
        ),
    );
    crate::lmdb_walk::salvage_records(file, cut, tree, &mut |item| check.take(item, decoder));
    let mut outcome = check.finish(decoder)?;
    // The records after the last one found are the cut's; a gap between records found lies
    // in pages before the cut, lost to damage there (a bad page, a broken overflow run).
    let end = entry.first_index.saturating_add(entry.count);
    for (start, count, cause, reason) in &mut outcome.lost {
        if start.saturating_add(*count) == end {
            *cause = LostCause::CutShort;
            *reason = format!("{at}: not in the intact pages before the cut");
        } else {
            *reason = format!("{reason}, before the cut");
        }
    }
    Ok(outcome)
}

/// Opens the shard at `path`, a regular file of `got` bytes (as it was when refused).
fn open_cut(path: &Path, got: u64) -> Result<(File, Metadata), FormatError> {
    let damaged = |reason: &str| FormatError::DamagedShard {
        shard: path.to_path_buf(),
        reason: reason.into(),
    };
    // Checked before opening: opening a FIFO for reading would block.
    let meta = std::fs::metadata(path).map_err(|e| FormatError::io(path, e))?;
    if !meta.is_file() {
        return Err(damaged("not a regular file"));
    }
    let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
    let meta = file.metadata().map_err(|e| FormatError::io(path, e))?;
    if !meta.is_file() {
        return Err(damaged("not a regular file"));
    }
    if meta.len() != got {
        return Err(FormatError::ShardChanged {
            shard: path.to_path_buf(),
            what: format!("size {} bytes, was {got}", meta.len()),
        });
    }
    Ok((file, meta))
}

/// Fails, saying what differs, when `file` or the file at `path` is no longer the one
/// described by `before` (same device, inode and size).
fn unchanged(path: &Path, file: &File, before: &Metadata) -> Result<(), String> {
    let id = |m: &Metadata| (m.dev(), m.ino(), m.len());
    let now = [file.metadata(), std::fs::metadata(path)];
    for m in now {
        match m {
            Ok(m) if id(&m) == id(before) => {}
            Ok(m) if m.len() != before.len() => {
                return Err(format!("size {} bytes, was {}", m.len(), before.len()))
            }
            Ok(_) => return Err("replaced by another file".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Bytes read at a time by [`zeros_from`].
const ZERO_SCAN_CHUNK: u64 = 1 << 20;

/// Where the zeros at the end of `file` begin, when they take in the whole last page of
/// `tree` (a page stoker's writer never leaves all zeros): so a file whose only damage is
/// elsewhere does not qualify. Read from the end, a chunk at a time, only as far as the
/// zeros go.
fn zeros_from(file: &File, tree: &RecordTree) -> Option<u64> {
    let last_page = tree.last_pg.checked_mul(tree.psize)?;
    let mut buf = vec![0u8; ZERO_SCAN_CHUNK as usize];
    let mut end = file.metadata().ok()?.len();
    while end > 0 {
        let start = end.saturating_sub(ZERO_SCAN_CHUNK);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start).ok()?;
        if let Some(i) = chunk.iter().rposition(|&b| b != 0) {
            let zeros = start + i as u64 + 1;
            return (zeros <= last_page).then_some(zeros);
        }
        end = start;
    }
    // All zeros: the meta pages too, which the shard's opening checked; not this file.
    None
}
