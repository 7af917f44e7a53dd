//! The one error type of this crate.

use std::path::PathBuf;

use crate::outside_fault::{FaultStage, OutsideFault};
use crate::text::Lossless;

/// Everything that can go wrong while writing, opening, reading, converting or verifying a
/// dataset. Variants carry the shard and index they concern so a caller can match on them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// A file or directory operation failed.
    #[error("{path}: {source}", path = .path.lossless())]
    Io {
        /// The path the operation was applied to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `manifest.json` is missing fields, malformed, or inconsistent with itself.
    #[error("{path}: invalid manifest: {reason}", path = .path.lossless())]
    InvalidManifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The manifest declares a format version this build cannot read.
    #[error(
        "{path}: format version {found} is not supported (this build reads versions {oldest} to {supported})", path = .path.lossless()
    )]
    UnsupportedVersion {
        /// The manifest file.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The oldest version this build reads.
        oldest: u32,
        /// The newest version this build reads (the one it writes).
        supported: u32,
    },
    /// A shard's file size differs from what the manifest recorded.
    #[error("shard {shard}: file is {got} bytes, the manifest says {want}", shard = .shard.lossless())]
    ShardSizeMismatch {
        /// The shard file.
        shard: PathBuf,
        /// Actual size in bytes.
        got: u64,
        /// Size recorded in the manifest.
        want: u64,
    },
    /// A finished shard's whole-file xxh3 digest differs from the one recorded for it
    /// (`convert --resume` checking the shards its journal lists).
    #[error("shard {shard}: file digest (xxh3-64) is {got:016x}, the manifest says {want:016x}", shard = .shard.lossless())]
    ShardDigestMismatch {
        /// The shard file.
        shard: PathBuf,
        /// Digest computed over the file.
        got: u64,
        /// Digest recorded in the manifest.
        want: u64,
    },
    /// A shard's LMDB pages are not what stoker writes: its meta pages, found when the
    /// shard is opened (then it is not opened: LMDB would trust them and read outside the
    /// file), or a page on the way to a record, found when the record is read.
    #[error("shard {shard}: damaged LMDB file: {reason}", shard = .shard.lossless())]
    DamagedShard {
        /// The shard file.
        shard: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A shard the manifest lists is not there: deleted, or left out of a copy. (The bare
    /// "No such file or directory" read like a mistyped path.)
    #[error(
        "shard {shard} is missing: the manifest lists it, so the dataset is incomplete (a shard deleted or left out of a copy); `stoker verify {dataset}` (Python `stoker.verify`) names the records it held",
        shard = .shard.lossless(),
        dataset = .dataset.lossless()
    )]
    MissingShard {
        /// The shard file.
        shard: PathBuf,
        /// The dataset's directory.
        dataset: PathBuf,
    },
    /// A shard file changed on disk after it was opened (replaced, truncated or grown).
    #[error(
        "shard {shard}: the file changed on disk after it was opened ({what}); reopen the dataset", shard = .shard.lossless()
    )]
    ShardChanged {
        /// The shard file.
        shard: PathBuf,
        /// What differs (inode, size).
        what: String,
    },
    /// A page of a shard's memory map could not be read: the file was cut short or
    /// rewritten in place while it was in use, or the storage returned an I/O error. Its
    /// lost pages read as zeros from then on, so every record of the shard is refused.
    #[error("shard {shard}: a page of the file could not be read while it was mapped (the file was cut short or rewritten in place while in use, or the disk or network file system returned an I/O error); its records are refused until the dataset is reopened", shard = .shard.lossless())]
    ShardUnreadable {
        /// The shard file.
        shard: PathBuf,
    },
    /// Another process (or writer) holds the lock of a conversion's, merge's or sample
    /// writer's output directory (which of them cannot be told: all take the same lock).
    #[error("{path}: another `stoker convert`, `stoker merge` or `stoker.Writer` (SampleWriter, DatasetWriter) is writing to this directory (its lock is held, perhaps by a process forked from a writer that is gone: the lock lasts until such a child exits too); wait for it to finish or stop it", path = .path.lossless())]
    OutputLocked {
        /// The output directory.
        path: PathBuf,
    },
    /// A path opened as a dataset is a file, or a directory without `manifest.json` (and
    /// no conversion journal): images not yet converted, or the root of a partitioned
    /// conversion not yet merged.
    #[error("{dir}: not a stoker dataset; {hint}", dir = .dir.lossless())]
    NotADataset {
        /// The directory given.
        dir: PathBuf,
        /// What to do, from what the directory holds.
        hint: String,
    },
    /// A directory opened as a dataset holds a conversion's journal and no manifest: the
    /// conversion was stopped (killed, a full disk, `--strict`) before it finished.
    #[error("{dir}: unfinished conversion (its journal {journal} is there, manifest.json is not); rerun `stoker convert --resume` with the same arguments (Python: `stoker.convert(..., resume=True)`) to finish it", dir = .dir.lossless(), journal = .journal.lossless())]
    UnfinishedConversion {
        /// The directory given.
        dir: PathBuf,
        /// Its conversion journal.
        journal: PathBuf,
    },
    /// A directory opened as a dataset holds a conversion's journal and no manifest, and a
    /// running process holds its output lock: the conversion is still writing it, and
    /// `--resume` would be refused until it ends.
    #[error("{dir}: a conversion is writing it now (its journal {journal} is there, manifest.json not yet, and a running process holds its lock); wait for it to finish (or, to finish it later, stop it and rerun `stoker convert --resume` with the same arguments)", dir = .dir.lossless(), journal = .journal.lossless())]
    ConversionInProgress {
        /// The directory given.
        dir: PathBuf,
        /// Its conversion journal.
        journal: PathBuf,
    },
    /// A conversion journal that `--resume` cannot read back: a damaged line, or not a
    /// journal stoker wrote.
    #[error("{path}: unreadable conversion journal: {reason}", path = .path.lossless())]
    UnreadableJournal {
        /// The journal file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A conversion journal of another journal version, so of another stoker build: this
    /// one cannot continue it.
    #[error("{path}: conversion journal version {found}, written by {} stoker (this build reads versions {oldest} to {supported}); continue the conversion with that build, or convert into a new directory", newer_or_older(*.found, *.supported), path = .path.lossless())]
    JournalVersion {
        /// The journal file.
        path: PathBuf,
        /// The version in its header.
        found: u32,
        /// The oldest version this build continues.
        oldest: u32,
        /// The version this build writes and reads.
        supported: u32,
    },
    /// The disk (or a quota, or the process's file-size limit) ran out while a shard was
    /// written.
    #[error("{}: {cause} after {records} records ({bytes} bytes of shards) were written; make room, then run again; a conversion rerun with --resume (Python resume=True) continues from the last finished shard", written_file(.shard))]
    OutOfSpace {
        /// The file being written: a shard, or the conversion journal or manifest (their
        /// `.tmp` names) once a shard is finished.
        shard: PathBuf,
        /// "disk full", "disk quota exceeded" or "file size limit reached", with the free
        /// space where known.
        cause: String,
        /// Records written so far (finished shards and the current one).
        records: u64,
        /// Bytes of the finished shards.
        bytes: u64,
        /// The error number the stop stands for: `ENOSPC`, `EDQUOT` or `EFBIG` (also
        /// where the write failed with `EIO` on a nearly full disk or at the size limit),
        /// which Python's `OSError` carries.
        errno: i32,
    },
    /// An input is not a regular file (a FIFO, socket or device): never opened for reading.
    #[error("{path}: not a regular file ({kind})", path = .path.lossless())]
    NotRegularFile {
        /// The input.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// A tar shard is not the file that was listed (another file now, or another size), so
    /// its members' byte ranges are not trusted.
    #[error(
        "{path}: the tar changed since it was listed ({}): its member at byte {offset} is not read",
        if *.replaced { "another file at that path now".to_owned() } else { format!("{listed_len} bytes then, {len_now} now") }, path = .path.lossless()
    )]
    TarChanged {
        /// The tar.
        path: PathBuf,
        /// Where the member's data starts.
        offset: u64,
        /// Its length when listed.
        listed_len: u64,
        /// Its length now (or the bytes a read got before the file ended).
        len_now: u64,
        /// Whether the path now names another file (device and inode differ).
        replaced: bool,
    },
    /// An input is larger than the size limit, so it is not read.
    #[error(
        "{path}: {bytes} bytes is over the input size limit of {limit} bytes (--max-file-size, Python max_file_size=)", path = .path.lossless()
    )]
    FileTooLarge {
        /// The input.
        path: PathBuf,
        /// Its size (at least; a file that grows while read reports what was read).
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The index is not in `0..len`.
    #[error("index {index} is out of range (dataset has {len} samples)")]
    IndexOutOfRange {
        /// The requested index.
        index: u64,
        /// Number of samples.
        len: u64,
    },
    /// The dataset's source map (which input each record came from) is missing, cut
    /// short, or not what its manifest says. Only that lookup fails: the records read.
    #[error("{path}: damaged source map: {reason}", path = .path.lossless())]
    DamagedSourceMap {
        /// The source map file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The shard that should hold an index has no record for it.
    #[error("shard {shard}: record {index} is missing", shard = .shard.lossless())]
    MissingRecord {
        /// The shard file.
        shard: PathBuf,
        /// The dataset index.
        index: u64,
    },
    /// A record is shorter than its header says.
    #[error("shard {shard}: record {index} is truncated: {got} bytes, want {want}", shard = .shard.lossless())]
    TruncatedRecord {
        /// The shard file.
        shard: PathBuf,
        /// The dataset index.
        index: u64,
        /// Bytes present.
        got: u64,
        /// Bytes the header requires.
        want: u64,
    },
    /// A record's header is malformed (bad magic, version, encoding, or header CRC).
    #[error("shard {shard}: record {index} has a bad header: {reason}", shard = .shard.lossless())]
    BadHeader {
        /// The shard file.
        shard: PathBuf,
        /// The dataset index.
        index: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A record's payload does not match the CRC32C in its header.
    #[error("record {index}: payload CRC32C is {got:#010x}, header says {want:#010x}")]
    CrcMismatch {
        /// The dataset index.
        index: u64,
        /// CRC32C computed over the payload.
        got: u32,
        /// CRC32C stored in the header.
        want: u32,
    },
    /// A record handed to [`crate::DatasetWriter`] is not valid.
    #[error("record {index}: {reason}")]
    InvalidRecord {
        /// The index the record would have had.
        index: u64,
        /// What is wrong.
        reason: String,
    },
    /// The output directory already holds a finished dataset or a partial conversion.
    #[error("{path}: {reason}", path = .path.lossless())]
    OutputExists {
        /// The output directory.
        path: PathBuf,
        /// What was found and what to do about it.
        reason: String,
    },
    /// The output directory was removed or moved away while it was written: its path names
    /// another directory now (made there since, perhaps by another run), or none. Nothing
    /// more is written under that name.
    #[error("{path}: the output directory was removed or moved away while it was written (its path names another directory now, or none): nothing more is written under that name; if it was moved, finish it where it went (a conversion with `stoker convert --resume`, a merge with `stoker merge`)", path = .path.lossless())]
    OutputMoved {
        /// The output directory's path.
        path: PathBuf,
    },
    /// The conversion source is unusable as a whole (not a directory, empty list file, bad
    /// line). A source that does not exist, or cannot be read, is [`FormatError::Io`] with
    /// the `io::Error` that says so (`NotFound`, `PermissionDenied`).
    #[error("{path}: {reason}", path = .path.lossless())]
    BadSource {
        /// The source directory or list file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `--strict`: an input could not be converted. No manifest is written.
    #[error("{path}: {reason} (--strict: stopping; {})", strict_left(*.resumable), path = .path.lossless())]
    StrictInput {
        /// The input file.
        path: PathBuf,
        /// Why it could not be converted.
        reason: String,
        /// Whether what was converted before it stays for `resume` (the run continued a
        /// partial conversion); false when the run began in a new or empty directory and
        /// took away everything it made there, so that a plain rerun converts.
        resumable: bool,
    },
    /// A [`crate::SampleWriter`] with `strict` met a sample it could not convert: it
    /// stopped and took away what it had written (`removed`; false when some of it could
    /// not be removed). Its own words: a writer has no `--resume` and no input file.
    #[error("{}: {reason} (strict: the writer stopped; {})", .sample.lossless(), strict_sample_left(*.removed))]
    StrictSample {
        /// The sample's name (as given to `write`, or "sample N").
        sample: PathBuf,
        /// Why it could not be converted.
        reason: String,
        /// Whether everything the writer had written was removed.
        removed: bool,
    },
    /// A sample handed to [`crate::SampleWriter`] has a label with no class: the writer
    /// was given `classes` names and the label is not below their count (or, without
    /// names, the label is over the limit of class labels).
    #[error("{sample}: label {label} is out of range: labels must be below {classes} (the number of class names given; without names, the limit of class labels)", sample = .sample.lossless())]
    LabelOutOfRange {
        /// The sample's name.
        sample: PathBuf,
        /// Its label.
        label: u32,
        /// How many classes there are (labels `0..classes`).
        classes: u32,
    },
    /// A [`crate::SampleWriter`] stopped on an earlier error (which was returned then) and
    /// took its output away; it takes no more samples.
    #[error("{out}: this sample writer stopped on an earlier error ({reason}) and removed what it had written; start a new one", out = .out.lossless())]
    WriterStopped {
        /// Its output directory.
        out: PathBuf,
        /// The earlier error.
        reason: String,
    },
    /// [`FormatError::OutOfSpace`] in a [`crate::SampleWriter`], which has no `--resume` to
    /// continue from its last shard: it took its output away.
    #[error("{}: {cause} after {records} records ({bytes} bytes of shards) were written; the writer stopped and removed what it had written: make room and write the samples again with a new writer", written_file(.shard))]
    WriterOutOfSpace {
        /// The file being written: a shard, or the manifest's `.tmp`.
        shard: PathBuf,
        /// As [`FormatError::OutOfSpace`]'s.
        cause: String,
        /// Records written before.
        records: u64,
        /// Bytes of shards finished before.
        bytes: u64,
        /// As [`FormatError::OutOfSpace`]'s.
        errno: i32,
    },
    /// A [`crate::SampleWriter`] was finished with no record: no sample was written, or
    /// every one was skipped. Nothing is left in the output directory.
    #[error("{out}: no dataset was written: {reason}", out = .out.lossless())]
    NoSamples {
        /// The output directory.
        out: PathBuf,
        /// How many samples were given and why the first few were skipped.
        reason: String,
    },
    /// Conflicting or out-of-range options.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// The threads the work runs on could not start: most often a container's or job's
    /// process limit below the threads asked for, or a memory limit too low for their
    /// stacks.
    #[error("cannot start {what}: {reason}; raise the process limit (a container's or job's pids.max, or ulimit -u) or the memory limit (ulimit -v: each thread's stack counts), which may be below what the threads stoker starts need, or, converting, lower --jobs (Python: jobs=)")]
    Threads {
        /// Which threads, and how many.
        what: String,
        /// The system's reason.
        reason: String,
    },
    /// The part of a partitioned conversion could not be told from the flags and the
    /// launcher's variables (missing, unparsable or inconsistent), or a part given to
    /// [`crate::Part::new`] or a writer is out of range.
    #[error("which part: {reason} ({given})")]
    PartSelection {
        /// The flags and variables that were read, as `NAME=value` (or "nothing set"), or
        /// for a part given as values, `part I of N`.
        given: String,
        /// What is wrong and what to set.
        reason: String,
    },
    /// `merge` refused a part: unfinished, from another conversion, duplicated or missing.
    #[error("{path}: cannot merge: {reason}", path = .path.lossless())]
    MergeRefused {
        /// The part directory (or the output root when parts are missing).
        path: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
    /// `merge` could not write the merged dataset's own files (its source map, its
    /// manifest): the disk, a quota or the file size limit ran out. No part was removed;
    /// merge runs again once there is room.
    #[error("{}: cannot merge: {cause}: the merged dataset's files could not be written; no part was removed: make room, then run merge again", .path.lossless())]
    MergeOutOfSpace {
        /// The file being written.
        path: PathBuf,
        /// As [`FormatError::OutOfSpace`]'s.
        cause: String,
        /// As [`FormatError::OutOfSpace`]'s.
        errno: i32,
    },
    /// The caller's [`crate::Progress::cancelled`] asked the conversion to stop. The output
    /// directory is left as a kill would leave it: `--resume` continues from the last
    /// finished shard. A run that began afresh and had converted nothing yet leaves no
    /// output directory instead (`resumable` false), as a strict stop does.
    #[error("conversion cancelled; {}", cancelled_left(*.resumable))]
    Cancelled {
        /// Whether what was converted stays for `resume`; false when nothing was, and the
        /// run took away the output directory it made (or had not made it yet).
        resumable: bool,
    },
    /// The caller of [`crate::verify_dir_until`] asked it to stop before it had checked
    /// every shard; nothing it found is reported.
    #[error(
        "verify stopped by its caller after {checked} of {shards} shard(s); nothing is reported"
    )]
    VerifyStopped {
        /// Shards checked whole before the stop was seen.
        checked: u64,
        /// Shards the manifest declares.
        shards: u64,
    },
    /// A file could not be read for a reason that is not the file's ([`OutsideFault`]: no
    /// file descriptor left, no kernel memory, storage that stopped answering). Skipped as
    /// a bad input it would be followed by every input after it, and the conversion would
    /// look complete; counted as damage it would call a sound dataset bad. So the run stops.
    #[error("{path}: {source}: {}; {}", .fault.cause(), .stage.left(), path = .path.lossless())]
    OutsideFault {
        /// The file that could not be read.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
        /// What failed.
        fault: OutsideFault,
        /// What stopped, which says what is left.
        stage: FaultStage,
    },
    /// A failure injected by a test (see `ConvertOptions::fail_after`).
    #[doc(hidden)]
    #[error("injected failure after {written} records")]
    Injected {
        /// Records written before the failure.
        written: u64,
    },
}

impl FormatError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }

    /// `e` reading `path`, as a [`FormatError::OutsideFault`] in `stage` when it is one
    /// ([`OutsideFault::of`]); otherwise handed back.
    pub(crate) fn outside_fault(
        path: impl Into<PathBuf>,
        e: std::io::Error,
        stage: FaultStage,
    ) -> Result<FormatError, std::io::Error> {
        match OutsideFault::of(&e) {
            Some(fault) => Ok(FormatError::OutsideFault {
                path: path.into(),
                source: e,
                fault,
                stage,
            }),
            None => Err(e),
        }
    }

    /// What stopped this, when it was no fault of the files: a
    /// [`FormatError::OutsideFault`]'s, or that of a plain I/O error whose errno says so
    /// (no file descriptor left while opening a dataset, say). For callers that tell
    /// "run again" apart from "the data is bad": the CLI's exit status 3, Python's
    /// `OSError` and `MemoryError`.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::{FormatError, OutsideFault};
    /// let e = stoker_formats::Dataset::open("/nonexistent").unwrap_err();
    /// assert_eq!(e.outside(), None);
    /// ```
    pub fn outside(&self) -> Option<OutsideFault> {
        match self {
            FormatError::OutsideFault { fault, .. } => Some(*fault),
            FormatError::Io { source, .. } => OutsideFault::of(source),
            _ => None,
        }
    }

    /// Whether this is an I/O error of an [`OutsideFault`] (see [`FormatError::escalate`]).
    pub(crate) fn is_outside_fault(&self) -> bool {
        matches!(self, FormatError::Io { source, .. } if OutsideFault::of(source).is_some())
    }

    /// This error as a [`FormatError::OutsideFault`] in `stage` when
    /// [`FormatError::is_outside_fault`] says so; otherwise as it is.
    pub(crate) fn escalate(self, stage: FaultStage) -> FormatError {
        match self {
            FormatError::Io { path, source } => match OutsideFault::of(&source) {
                Some(fault) => FormatError::OutsideFault {
                    path,
                    source,
                    fault,
                    stage,
                },
                None => FormatError::Io { path, source },
            },
            e => e,
        }
    }
}

/// Who wrote a journal of version `found`, seen from a build that reads `supported`.
fn newer_or_older(found: u32, supported: u32) -> &'static str {
    if found > supported {
        "a newer"
    } else {
        "an older"
    }
}

/// What a [`FormatError::StrictInput`] stop left, and how to go on from it.
fn strict_left(resumable: bool) -> &'static str {
    if resumable {
        "no manifest written; what was converted before it stays: once the input is repaired \
         in place, --resume (resume=True) continues, or delete the output directory and \
         convert again"
    } else {
        "nothing of this conversion is left in the output directory: fix or remove the input \
         and convert again (removing an input moves every part's slice of a partitioned \
         conversion: then convert every part again)"
    }
}

/// What a [`FormatError::Cancelled`] conversion left, and how to go on from it.
fn cancelled_left(resumable: bool) -> &'static str {
    if resumable {
        "what was finished stays in the output directory: convert again with --resume \
         (resume=True) to continue"
    } else {
        "nothing had been converted, and nothing of this conversion is left in the output \
         directory: convert again to begin"
    }
}

/// What a [`FormatError::StrictSample`] stop left, and how to go on from it.
fn strict_sample_left(removed: bool) -> &'static str {
    if removed {
        "it removed what it had written: fix or leave out this sample and write the samples \
         again with a new writer"
    } else {
        "some of what it had written could not be removed: delete the output directory, then \
         write the samples again with a new writer"
    }
}

/// The file an [`FormatError::OutOfSpace`] was writing: "shard PATH" for a shard, the path
/// alone for the conversion journal and the manifest, which are written through the same
/// error path ("shard ds/manifest.json.tmp" sent users looking for a broken shard; their
/// names say what they are).
fn written_file(path: &std::path::Path) -> String {
    let shard = path
        .file_name()
        .is_some_and(|n| n.as_encoded_bytes().starts_with(b"shard-"));
    format!("{}{}", if shard { "shard " } else { "" }, path.lossless())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_space_names_the_journal_and_manifest_as_what_they_are() {
        let e = |file: &str| {
            FormatError::OutOfSpace {
                shard: PathBuf::from("ds").join(file),
                cause: "disk full".into(),
                records: 3,
                bytes: 9,
                errno: libc::ENOSPC,
            }
            .to_string()
        };
        assert!(e("shard-00001.lmdb.tmp").starts_with("shard ds/shard-00001.lmdb.tmp: disk full"));
        assert!(e(".stoker-convert.json.tmp").starts_with("ds/.stoker-convert.json.tmp: disk full"));
        assert!(e("manifest.json.tmp").starts_with("ds/manifest.json.tmp: disk full"));
    }

    #[test]
    fn an_unsupported_version_names_every_version_this_build_reads() {
        // It said "this build reads version 2", though version 1 datasets are read too.
        let dir = tempfile::tempdir().unwrap();
        let mut w = crate::DatasetWriter::create(dir.path(), Default::default()).unwrap();
        let meta = crate::RecordMeta {
            encoding: crate::Encoding::Raw,
            height: 1,
            width: 1,
            channels: 1,
            label: 0,
        };
        w.push(meta, &[7]).unwrap();
        w.finish(vec!["c".into()], crate::Provenance::stoker("t"))
            .unwrap();
        let path = dir.path().join(crate::MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text.replace("\"format_version\": 2", "\"format_version\": 3");
        std::fs::write(&path, text).unwrap();
        let e = crate::Manifest::read(dir.path()).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::UnsupportedVersion {
                    found: 3,
                    oldest: 1,
                    supported: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .ends_with("format version 3 is not supported (this build reads versions 1 to 2)"),
            "{e}"
        );
    }

    #[test]
    fn a_read_error_that_is_not_the_files_stops_the_run_saying_what_is_left() {
        let os = |errno: rustix::io::Errno| std::io::Error::from_raw_os_error(errno.raw_os_error());
        let emfile = FormatError::io("a.jpg", os(rustix::io::Errno::MFILE));
        assert!(emfile.is_outside_fault());
        let e = emfile.escalate(FaultStage::Converting);
        assert!(
            matches!(
                e,
                FormatError::OutsideFault {
                    fault: OutsideFault::Descriptors,
                    stage: FaultStage::Converting,
                    ..
                }
            ),
            "{e}"
        );
        let text = e.to_string();
        assert!(text.starts_with("a.jpg: "), "{text}");
        assert!(
            text.contains("ulimit -n") && text.contains("--resume"),
            "{text}"
        );
        let own = FormatError::io("a.jpg", os(rustix::io::Errno::ACCESS));
        assert!(!own.is_outside_fault());
        assert!(matches!(
            own.escalate(FaultStage::Verifying),
            FormatError::Io { .. }
        ));
    }
}
