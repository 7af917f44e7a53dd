//! The conversion journal: after every finished shard, how far the conversion got, so that
//! `resume` continues a killed run and still produces the same bytes; and the check of what
//! an output directory holds before a conversion starts or resumes.
//!
//! The journal is append-only, one JSON line per finished shard: a header line (format
//! version and the listing's fingerprint), then for each shard the shard's entry, the
//! inputs skipped since the previous line, and the running totals after it. Each line is
//! fsynced before the conversion goes on. A shard therefore costs the journal what that
//! shard added, not everything so far (rewriting the whole journal after every shard made
//! its writes grow as shards × skipped inputs: gigabytes for a dataset of a few hundred
//! megabytes with many undecodable inputs).
//!
//! A crash during an append leaves a last line that is cut short (or, after a power loss,
//! filled with zeros): such a last line is dropped on resume, and its shard, not yet
//! journaled, is converted again. Any other line that does not parse is damage, and resume
//! is refused.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::audit::Audit;
use super::options::other_flag;
use super::options::ConvertOptions;
use super::report::Skipped;
use crate::held_dir::HeldDir;
use crate::manifest::{RawSize, ShardEntry};
use crate::source_map::SOURCES_FILE;
use crate::writer::{write_atomically, DatasetWriter, WriterOptions};
use crate::FormatError;

/// File name of the conversion journal (present only while a conversion is unfinished).
pub const JOURNAL_FILE: &str = ".stoker-convert.journal";
/// The journal's temporary name while its first lines are written (see `write_atomically`).
const JOURNAL_TMP: &str = ".stoker-convert.journal.tmp";
/// The journal of earlier releases: one JSON object rewritten after every shard. Still
/// read, so that a conversion killed under an earlier release resumes; the first shard
/// finished after such a resume replaces it with an append-only journal.
pub(crate) const LEGACY_FILE: &str = ".stoker-convert.json";
const LEGACY_TMP: &str = ".stoker-convert.json.tmp";
/// The source map's temporary name while it is written (a crash leaves it).
const SOURCES_TMP: &str = "sources.bin.tmp";
/// The header's `stoker_convert_journal` value this build writes; raised when the lines
/// change or the fingerprint is computed differently, so that each build says that another
/// one wrote the journal instead of blaming the inputs. Version 3 added each skip's
/// position in the listing (`input`), for the source map; version 4 the output flags in the
/// header (`flags`), so that a resume with other flags is told which.
const JOURNAL_VERSION: u32 = 4;
/// The oldest header version this build reads: version 2 lines are version 3's without
/// the skips' positions, which the source map then finds by name.
const OLDEST_JOURNAL_VERSION: u32 = 2;

/// Size limit of a journal read on resume, per input listed (plus [`JOURNAL_BASE_BYTES`]).
/// A journal holds at most one skip and one line (a shard entry and the totals, under
/// 2 KiB) per input. A skip is a path of at most 4 KiB (PATH_MAX), written as up to 16 KiB
/// when it is not UTF-8 (a list of byte values), and a reason, which may name the path
/// again (up to 20 KiB: each such byte is `\xNN` text, its backslash escaped in JSON). A
/// larger file is not a journal stoker wrote, and is refused before it is read.
const JOURNAL_BYTES_PER_INPUT: u64 = 48 << 10;
/// Room for the header and the totals in every line.
const JOURNAL_BASE_BYTES: u64 = 1 << 20;

/// State saved after each finished shard, enough to resume byte-identically (as read
/// back: the lines of the journal folded together).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Journal {
    pub(super) fingerprint: u32,
    /// The output flags of the run that began it (header version 4 on).
    #[serde(skip)]
    pub(super) flags: Option<BTreeMap<String, String>>,
    pub(super) next_input: u64,
    pub(super) done: Vec<ShardEntry>,
    pub(super) skipped: Vec<Skipped>,
    /// The listing positions of `skipped`, when every line recorded them (not in a legacy
    /// journal or a version 2 one).
    #[serde(skip)]
    pub(super) skipped_at: Option<Vec<u64>>,
    pub(super) audit: Audit,
    pub(super) payload_bytes: u64,
    pub(super) raw_size: Option<RawSize>,
    pub(super) stored: u64,
    pub(super) transcoded: u64,
    pub(super) input_bytes: u64,
}

/// The first line of a journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    stoker_convert_journal: u32,
    fingerprint: u32,
    /// The output flags the fingerprint covers (version 4 on; `None` before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flags: Option<BTreeMap<String, String>>,
}

/// Every later line: what was finished since the line before, and the totals after it.
/// (The totals are a few numbers and the audit's small maps, so repeating them keeps a
/// line's size independent of how far the conversion got.)
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry<'a> {
    shards: Cow<'a, [ShardEntry]>,
    skipped: Vec<Skip>,
    next_input: u64,
    audit: Cow<'a, Audit>,
    payload_bytes: u64,
    raw_size: Option<RawSize>,
    stored: u64,
    transcoded: u64,
    input_bytes: u64,
}

/// A skipped input as journaled: its path exactly, whatever its bytes, since a resume
/// checks it against the listing (a report spells it as text, see [`Skipped`]).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Skip {
    path: ExactPath,
    reason: String,
    /// Its position in the listing (version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input: Option<u64>,
}

/// A path as JSON without loss: a string when it is UTF-8, else its bytes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum ExactPath {
    Text(String),
    Bytes { bytes: Vec<u8> },
}

impl From<&Skipped> for Skip {
    fn from(s: &Skipped) -> Self {
        let path = match s.path.to_str() {
            Some(text) => ExactPath::Text(text.to_owned()),
            None => ExactPath::Bytes {
                bytes: std::os::unix::ffi::OsStrExt::as_bytes(s.path.as_os_str()).to_vec(),
            },
        };
        Skip {
            path,
            reason: s.reason.clone(),
            input: None,
        }
    }
}

impl From<Skip> for Skipped {
    fn from(s: Skip) -> Self {
        let path = match s.path {
            ExactPath::Text(text) => PathBuf::from(text),
            ExactPath::Bytes { bytes } => PathBuf::from(
                <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes),
            ),
        };
        Skipped {
            path,
            reason: s.reason,
        }
    }
}

/// A journal read back, and where it came from.
pub(super) struct Found {
    pub(super) journal: Journal,
    /// Bytes of the append-only journal up to its last whole line (what follows is a
    /// torn append, cut off before the next one); `None` for a legacy journal.
    whole_len: Option<u64>,
    /// Its header is this build's version, so lines are appended to it; an older one is
    /// written anew, as this version, by the first save.
    current: bool,
}

/// Totals accumulated in input order.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) skipped: Vec<Skipped>,
    /// A conversion's: the listing position of each of `skipped` (record `i` is the `i`-th
    /// input not skipped, the source map's one fact); `None` for samples, and once a
    /// resumed journal did not record them.
    pub(super) skipped_at: Option<Vec<u64>>,
    pub(super) audit: Audit,
    pub(super) stored: u64,
    pub(super) transcoded: u64,
    pub(super) input_bytes: u64,
}

/// Appends a line to the journal after each finished shard.
pub(super) struct JournalLog {
    /// The output directory, open: the journal is written, appended to and deleted there.
    dir: HeldDir,
    fingerprint: u32,
    /// The output flags, for the header.
    flags: BTreeMap<String, String>,
    /// The journal, open for appending, once it holds a header. `None` until the first
    /// save of this run when there was no journal or a legacy one: that save writes the
    /// header and everything so far as a new file, atomically.
    file: Option<File>,
    /// Bytes of whole lines in `file`; a failed append is cut back to this.
    len: u64,
    /// Finished shards and skipped inputs already journaled.
    shards: usize,
    skips: usize,
}

impl JournalLog {
    /// Saves how far the conversion got: one line with the shards finished and the inputs
    /// skipped since the last save, fsynced.
    pub(super) fn save(
        &mut self,
        next_input: usize,
        writer: &DatasetWriter,
        totals: &Totals,
    ) -> Result<(), FormatError> {
        let space = |e| writer.space_error(e);
        let (shards, skips) = match self.file {
            Some(_) => (self.shards, self.skips),
            None => (0, 0),
        };
        let entry = Entry {
            shards: Cow::Borrowed(&writer.finished_shards()[shards..]),
            skipped: (skips..totals.skipped.len())
                .map(|k| Skip {
                    input: totals.skipped_at.as_ref().and_then(|at| at.get(k).copied()),
                    ..Skip::from(&totals.skipped[k])
                })
                .collect(),
            next_input: next_input as u64,
            audit: Cow::Borrowed(&totals.audit),
            payload_bytes: writer.payload_bytes(),
            raw_size: writer.raw_size(),
            stored: totals.stored,
            transcoded: totals.transcoded,
            input_bytes: totals.input_bytes,
        };
        let line = json_line(&entry, self.dir.path())?;
        match &mut self.file {
            Some(f) => {
                if let Err(e) = append(f, &line) {
                    // Best effort: no half line stays for the next append to follow (the
                    // next save, if any, writes the journal anew).
                    let _ = f.set_len(self.len);
                    self.file = None;
                    return Err(space(FormatError::io(self.dir.join(JOURNAL_FILE), e)));
                }
                self.len += line.len() as u64;
            }
            None => {
                let header = Header {
                    stoker_convert_journal: JOURNAL_VERSION,
                    fingerprint: self.fingerprint,
                    flags: Some(self.flags.clone()),
                };
                let mut text = json_line(&header, self.dir.path())?;
                text.extend_from_slice(&line);
                write_atomically(&self.dir, JOURNAL_FILE, &text).map_err(space)?;
                // Now superseded (a resume that finds both takes the new one).
                let _ = self.dir.remove(LEGACY_FILE);
                self.file = Some(open_append(&self.dir, None)?);
                self.len = text.len() as u64;
            }
        }
        self.shards = writer.finished_shards().len();
        self.skips = totals.skipped.len();
        Ok(())
    }
}

/// `value` as one line of compact JSON (which escapes every newline inside strings).
fn json_line(value: &impl Serialize, out: &Path) -> Result<Vec<u8>, FormatError> {
    let mut line = serde_json::to_vec(value).map_err(|e| FormatError::InvalidManifest {
        path: out.join(JOURNAL_FILE),
        reason: format!("cannot write the conversion journal: {e}"),
    })?;
    line.push(b'\n');
    Ok(line)
}

fn append(f: &mut File, line: &[u8]) -> std::io::Result<()> {
    f.write_all(line)?;
    // The shard this line names is kept by a resume only once the line is on disk.
    f.sync_data()
}

/// Opens the journal in `dir` for appending, first cutting it to `whole_len` when given
/// (dropping a torn last line). Non-blocking and checked to be a regular file, like the read.
fn open_append(dir: &HeldDir, whole_len: Option<u64>) -> Result<File, FormatError> {
    let path = dir.join(JOURNAL_FILE);
    let io = |e| FormatError::io(&path, e);
    let f = dir.open_append(JOURNAL_FILE)?;
    if !f.metadata().map_err(io)?.is_file() {
        return Err(FormatError::NotRegularFile {
            path: path.clone(),
            kind: "not a plain file",
        });
    }
    if let Some(len) = whole_len {
        f.set_len(len).map_err(io)?;
    }
    Ok(f)
}

/// The writer, totals and journal log to continue from `found` (or to start afresh
/// without one), and the position in the listing to continue at.
pub(super) fn resume(
    options: &ConvertOptions,
    fingerprint: u32,
    (writer_opts, dir): (WriterOptions, &HeldDir),
    found: Option<Found>,
) -> Result<(DatasetWriter, Totals, usize, JournalLog), FormatError> {
    let mut log = JournalLog {
        dir: dir.clone(),
        fingerprint,
        flags: options.output_flags(),
        file: None,
        len: 0,
        shards: 0,
        skips: 0,
    };
    let Some(Found {
        journal: j,
        whole_len,
        current,
    }) = found
    else {
        let w = DatasetWriter::resume_from(writer_opts, Vec::new(), dir.clone())?;
        let totals = Totals {
            skipped_at: Some(Vec::new()),
            ..Totals::default()
        };
        return Ok((w, totals, 0, log));
    };
    if let (Some(len), true) = (whole_len, current) {
        log.file = Some(open_append(dir, Some(len))?);
        log.len = len;
        log.shards = j.done.len();
        log.skips = j.skipped.len();
    }
    let mut w = DatasetWriter::resume_from(writer_opts, j.done, dir.clone())?;
    w.restore_totals(j.payload_bytes, j.raw_size);
    let t = Totals {
        skipped: j.skipped,
        skipped_at: j.skipped_at,
        audit: j.audit,
        stored: j.stored,
        transcoded: j.transcoded,
        input_bytes: j.input_bytes,
    };
    Ok((w, t, j.next_input as usize, log))
}

/// Removes the journal (either format) of a conversion whose manifest is in place in `dir`.
pub(super) fn remove(dir: &HeldDir) {
    let _ = dir.remove(JOURNAL_FILE);
    let _ = dir.remove(LEGACY_FILE);
}

/// Files a conversion leaves behind while unfinished: shards, LMDB's lock files, the
/// journal, and the temporary files of `write_atomically` (a crash while the journal or
/// manifest is being written leaves `NAME.tmp`).
fn is_ours(name: &str) -> bool {
    [
        JOURNAL_FILE,
        JOURNAL_TMP,
        LEGACY_FILE,
        LEGACY_TMP,
        "manifest.json.tmp",
        SOURCES_FILE,
        SOURCES_TMP,
    ]
    .contains(&name)
        || (name.starts_with("shard-")
            && (name.ends_with(".lmdb") || name.ends_with(".tmp") || name.ends_with("-lock")))
}

/// Reads the journal in `out`, if there is one: the append-only one, else a legacy one.
/// The listing (`inputs` inputs, their paths `path_bytes` long in all) bounds its size:
/// each path may be written twice (a skip and its reason), up to 4 bytes for each of its
/// own when it is not UTF-8, and a list file's paths can be longer than PATH_MAX.
fn read(dir: &HeldDir, inputs: usize, path_bytes: u64) -> Result<Option<Found>, FormatError> {
    let limit = JOURNAL_BASE_BYTES
        .saturating_add((inputs as u64).saturating_mul(JOURNAL_BYTES_PER_INPUT))
        .saturating_add(path_bytes.saturating_mul(8));
    if let Some(bytes) = read_bounded(dir, JOURNAL_FILE, limit)? {
        return parse_lines(&bytes, &dir.join(JOURNAL_FILE)).map(Some);
    }
    let path = dir.join(LEGACY_FILE);
    let Some(bytes) = read_bounded(dir, LEGACY_FILE, limit)? else {
        return Ok(None);
    };
    let journal = serde_json::from_slice(&bytes).map_err(|e| unreadable(&path, e.to_string()))?;
    Ok(Some(Found {
        journal,
        whole_len: None,
        current: false,
    }))
}

/// The bytes of the journal `name` in `dir`, `None` if there is none. Read like `manifest.json`
/// (regular files only, a non-blocking open, at most `limit` bytes): anything in its place
/// that is not a journal stoker wrote (a FIFO would hang the read, a link to `/dev/zero` or a
/// huge sparse file would fill memory) is refused with what to do.
fn read_bounded(dir: &HeldDir, name: &str, limit: u64) -> Result<Option<Vec<u8>>, FormatError> {
    let refuse = |what: String| FormatError::OutputExists {
        path: dir.path().to_path_buf(),
        reason: format!(
            "its conversion journal ({name}) {what}, so it cannot be resumed: delete the \
             directory and convert again"
        ),
    };
    match dir.read(name, limit) {
        Ok(b) => Ok(b),
        Err(FormatError::NotRegularFile { kind, .. }) => {
            Err(refuse(format!("is not a regular file ({kind})")))
        }
        Err(FormatError::FileTooLarge { bytes, limit, .. }) => Err(refuse(format!(
            "is {bytes} bytes, more than a journal of these inputs can be ({limit} bytes)"
        ))),
        Err(e) => Err(e),
    }
}

fn unreadable(path: &Path, reason: String) -> FormatError {
    FormatError::UnreadableJournal {
        path: path.to_path_buf(),
        reason,
    }
}

/// Folds the lines of an append-only journal into one [`Journal`]. A last line that is cut
/// short or does not parse is a torn append and is left out; any other is refused.
fn parse_lines(bytes: &[u8], path: &Path) -> Result<Found, FormatError> {
    let mut lines = bytes.split_inclusive(|&b| b == b'\n').peekable();
    let first = lines.next().unwrap_or_default();
    let header = Some(first)
        .filter(|l| l.ends_with(b"\n"))
        .and_then(|l| serde_json::from_slice::<Header>(l).ok())
        .ok_or_else(|| unreadable(path, "its first line is not a journal header".into()))?;
    if !(OLDEST_JOURNAL_VERSION..=JOURNAL_VERSION).contains(&header.stoker_convert_journal) {
        return Err(FormatError::JournalVersion {
            path: path.to_path_buf(),
            found: header.stoker_convert_journal,
            oldest: OLDEST_JOURNAL_VERSION,
            supported: JOURNAL_VERSION,
        });
    }
    let mut j = Journal {
        fingerprint: header.fingerprint,
        flags: header.flags,
        next_input: 0,
        done: Vec::new(),
        skipped: Vec::new(),
        skipped_at: Some(Vec::new()),
        audit: Audit::default(),
        payload_bytes: 0,
        raw_size: None,
        stored: 0,
        transcoded: 0,
        input_bytes: 0,
    };
    let mut whole_len = bytes.len() as u64;
    let mut offset = first.len() as u64;
    for n in 1.. {
        let Some(line) = lines.next() else { break };
        offset += line.len() as u64;
        let parsed = match line.ends_with(b"\n") {
            true => serde_json::from_slice::<Entry>(line).map_err(|e| e.to_string()),
            false => Err("cut short".into()),
        };
        match parsed {
            Ok(e) => {
                j.done.extend(e.shards.into_owned());
                for skip in e.skipped {
                    match (&mut j.skipped_at, skip.input) {
                        (Some(at), Some(k)) => at.push(k),
                        // One skip without its position: none can be relied on.
                        _ => j.skipped_at = None,
                    }
                    j.skipped.push(Skipped::from(skip));
                }
                j.next_input = e.next_input;
                j.audit = e.audit.into_owned();
                j.payload_bytes = e.payload_bytes;
                j.raw_size = e.raw_size;
                j.stored = e.stored;
                j.transcoded = e.transcoded;
                j.input_bytes = e.input_bytes;
            }
            // Torn by a crash while it was appended: its shard was not yet journaled.
            Err(_) if lines.peek().is_none() => whole_len = offset - line.len() as u64,
            Err(e) => return Err(unreadable(path, format!("line {}: {e}", n + 1))),
        }
    }
    Ok(Found {
        journal: j,
        whole_len: Some(whole_len),
        current: header.stoker_convert_journal == JOURNAL_VERSION,
    })
}

/// Checks what the locked output directory `dir` holds; returns the journal to resume
/// from, if any, after `check` accepted it (against the listing of `inputs` inputs being
/// converted and the shards it names).
pub(super) fn prepare_output(
    dir: &HeldDir,
    options: &ConvertOptions,
    fingerprint: u32,
    (inputs, path_bytes): (usize, u64),
    check: impl FnOnce(&Journal) -> Result<(), FormatError>,
) -> Result<Option<Found>, FormatError> {
    let out = dir.path();
    let exists = |reason: String| FormatError::OutputExists {
        path: out.to_path_buf(),
        reason,
    };
    // Moved since it was locked, what the path names is another's: said as that, not
    // as whatever that one holds.
    dir.check()?;
    // With --resume, `convert` has already answered for a finished dataset (done, or
    // refused saying why): this one was finished since.
    crate::out_dir::refuse_finished(out)?;
    // Listed, read and deleted in the directory held: what the path names now may be
    // another run's.
    let entries: Vec<String> = (dir.names()?.iter())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
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
            "holds a partial conversion (no manifest.json); rerun with --resume (Python resume=True) to continue it, or delete the directory"
                .into(),
        ));
    }
    let found = read(dir, inputs, path_bytes)?;
    if let Some(f) = &found {
        // Before anything is deleted: a journal that is refused leaves the directory as it was.
        same_conversion(f, fingerprint, &options.output_flags()).map_err(exists)?;
        check(&f.journal)?;
    }
    // Shards finished after the last journal entry (or with no journal) are redone.
    let keep: Vec<&str> = found
        .as_ref()
        .map(|f| f.journal.done.iter().map(|s| s.file.as_str()).collect())
        .unwrap_or_default();
    // A legacy journal beside an append-only one was superseded by it (a crash came
    // between writing the one and removing the other).
    let superseded = found.as_ref().is_some_and(|f| f.whole_len.is_some());
    // Nothing deleted in a directory made under the name since it was locked.
    dir.check()?;
    for name in &entries {
        // The source map is written again with the manifest.
        let leftover = [
            JOURNAL_TMP,
            LEGACY_TMP,
            "manifest.json.tmp",
            SOURCES_FILE,
            SOURCES_TMP,
        ]
        .contains(&name.as_str())
            || (superseded && name == LEGACY_FILE);
        if leftover || (name.starts_with("shard-") && !keep.contains(&name.as_str())) {
            dir.remove(name)?;
        }
    }
    Ok(found)
}

/// Refuses a journal of another conversion, saying why where the build that wrote it can
/// be the reason: the fingerprint covers the listing, so a build that lists a source
/// differently gives it another fingerprint too.
fn same_conversion(
    f: &Found,
    fingerprint: u32,
    flags: &BTreeMap<String, String>,
) -> Result<(), String> {
    let legacy = f.whole_len.is_none();
    if legacy && f.journal.done.iter().any(|s| s.xxh3.is_none()) {
        // Format version 1 (CRC-32C shard digests): its shards cannot go into a version 2
        // dataset, whatever its fingerprint (which builds before 8aa1570, such as 405544c,
        // computed without the `max_file_size` flag, so it differs anyway).
        return Err("holds a partial conversion by a stoker of format version 1 (its journal, .stoker-convert.json, lists shards with CRC-32C digests, not xxh3); this build writes version 2 and cannot continue it: convert into a new directory (or delete this one and convert again)".into());
    }
    if f.journal.fingerprint == fingerprint {
        return Ok(());
    }
    // A journal that records its flags (version 4 on) names the one that differs.
    // (The header's flags are the output flags alone: none is derived.)
    if let Some((name, there, here)) = f
        .journal
        .flags
        .as_ref()
        .and_then(|t| other_flag(t, flags, &[]))
    {
        return Err(format!(
            "holds a partial conversion begun with other flags: its journal has `{name}` \
             {there}, this run {here}; --resume continues only the same conversion: rerun \
             with its flags, or convert into a new directory (or delete this one)"
        ));
    }
    Err(match legacy {
        true => "holds a partial conversion of different inputs or flags, journaled by an older stoker (.stoker-convert.json): its fingerprint of the listing and flags differs from this one's, because the source, its files or the flags differ, or because that build listed them differently; --resume continues only the same conversion: rerun with the same source, spelled the same way, and the same flags, or convert into a new directory (or delete this one)",
        false => "holds a partial conversion of different inputs or flags: its journal's fingerprint of the listing and flags differs from this one's, because the source, its files or the flags differ, or because the stoker that wrote it listed them differently; --resume continues only the same conversion: rerun with the same source, spelled the same way, and the same flags, or convert into a new directory (or delete this one)",
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::Lossless;

    /// The largest skip a journal can hold, a 4 KiB path that is not UTF-8 with a reason
    /// naming it, fits the per-input allowance with room for a shard's line: a journal
    /// stoker wrote for such names was refused on resume as too large.
    #[test]
    fn the_largest_skip_fits_the_size_limit_per_input() {
        // A path of 4 KiB that is not UTF-8, and the longest reason of control
        // characters (6 bytes each in JSON).
        use std::os::unix::ffi::OsStringExt;
        let skipped = Skipped {
            path: PathBuf::from(std::ffi::OsString::from_vec(vec![0xff; 4096])),
            reason: crate::convert::report::capped_reason("\u{1}".repeat(1 << 20)),
        };
        let line = serde_json::to_vec(&Skip::from(&skipped)).unwrap();
        assert!(
            line.len() as u64 + (2 << 10) <= JOURNAL_BYTES_PER_INPUT,
            "{} bytes",
            line.len()
        );
    }

    #[test]
    fn a_skip_naming_its_path_fits_the_size_limit_per_input() {
        use std::os::unix::ffi::OsStringExt;
        let path = PathBuf::from(std::ffi::OsString::from_vec(vec![0xff; 4096]));
        let skipped = Skipped {
            reason: format!("cannot read {}: Permission denied", path.lossless()),
            path,
        };
        let line = serde_json::to_vec(&Skip::from(&skipped)).unwrap();
        assert!(
            line.len() as u64 + (2 << 10) <= JOURNAL_BYTES_PER_INPUT,
            "{} bytes",
            line.len()
        );
        let back = Skipped::from(serde_json::from_slice::<Skip>(&line).unwrap());
        assert_eq!(back, skipped);
    }
}
