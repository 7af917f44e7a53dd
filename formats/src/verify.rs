//! `verify`: check every record of a dataset, and name the records of the shards that
//! cannot be checked.
//!
//! A dataset copied or restored with damage (a shard cut short, missing, with damaged meta
//! pages, or swapped for another file) cannot be opened as a [`Dataset`]; [`verify_dir`]
//! opens each shard on its own, with the same checks, so that the report names what every
//! shard that could not be opened held (the manifest's `first_index` and `count`) beside the
//! records of the others. Of a shard cut short, only the records whose pages (leaf page,
//! value) do not lie wholly before the cut are lost: the others are read and checked
//! (`verify/cut.rs`). A leaf page is written after the values it points to, so for a
//! small shard, whose one leaf page lies near its end, that can be all of them.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use stoker_decode::CpuDecoder;

use crate::digest::{digest_file, DigestKind};
use crate::outside_fault::FaultStage;
use crate::shard::OpenShard;
use crate::{Dataset, FormatError, Manifest, ShardEntry};

mod cut;
mod shard_check;

pub use shard_check::LostCause;
use shard_check::{cause_of, reason_of, Reading, ShardCheck, ShardOutcome};

/// One problem found by [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadRecord {
    /// Shard file name.
    pub shard: String,
    /// The record's dataset index; `None` for a problem with the shard file as a whole.
    pub index: Option<u64>,
    /// What is wrong.
    pub problem: String,
    /// The input the record was made from, as the dataset's source map names it (bytes
    /// that are not UTF-8 written `\xNN`, as `inspect --record` writes them): what to
    /// fetch or convert again. `None` without an index, or without a
    /// sound source map.
    pub source: Option<String>,
}

impl BadRecord {
    /// True for a damaged page of the shard's tree (one of a stretch of such lines, which
    /// a report for people may shorten; the records lost with them are in `lost`).
    pub fn is_damaged_page(&self) -> bool {
        self.index.is_none() && self.problem.starts_with(shard_check::DAMAGED_PAGE)
    }
}

/// Records `first_index..first_index + count` of one shard, which the dataset no longer
/// holds as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostRecords {
    /// Shard file name.
    pub shard: String,
    /// Dataset index of the first record lost.
    pub first_index: u64,
    /// Records lost, from `first_index` on.
    pub count: u64,
    /// Why, for a program.
    pub cause: LostCause,
    /// Why, in words.
    pub reason: String,
    /// The inputs the first and the last record of the range were made from, as the
    /// dataset's source map names them (as [`BadRecord::source`]); `None` without a
    /// sound source map.
    pub sources: Option<(String, String)>,
}

/// What [`verify`] found. Every sample is counted once in `ok_records`, `bad_records` or
/// `lost_records`, and a record named in `bad` (with an index) is one of `bad_records`,
/// never in a `lost` range.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Samples the manifest declares.
    pub samples: u64,
    /// Shards the manifest declares.
    pub shards: u64,
    /// Shards that passed the checks of [`Dataset::open`] and were read.
    pub opened: u64,
    /// Shards cut short, which [`Dataset::open`] refuses, whose pages before the cut were
    /// read (not among `opened`): `shards - opened - read_in_part` were not read at all.
    pub read_in_part: u64,
    /// Records whose header, length and CRC were checked.
    pub checked: u64,
    /// JPEG records that decoded, to their header's size (with `decode`); those that did
    /// not are among the problems.
    pub decoded: u64,
    /// Records read that passed every check, in shards whose digest is the manifest's.
    pub ok_records: u64,
    /// Records read that failed a check: the distinct indices named in `bad`, also in a
    /// shard whose other records are lost.
    pub bad_records: u64,
    /// Records in the `lost` ranges.
    pub lost_records: u64,
    /// Every problem, by shard and index: with an index, a bad record; without, a problem
    /// of the shard (or of the manifest or source map) as a whole.
    pub bad: Vec<BadRecord>,
    /// The records the dataset no longer holds as written, by shard: every record of a
    /// shard that could not be opened or read, or whose digest differs (but for its bad
    /// records, which are counted bad), and records absent from a shard's tree. What to
    /// restore or convert again, with the bad records.
    pub lost: Vec<LostRecords>,
    /// Remarks that are not problems (a format version 1 dataset's weaker digest).
    pub notes: Vec<String>,
    /// Wall time in seconds.
    pub seconds: f64,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn ok(&self) -> bool {
        self.bad.is_empty() && self.lost.is_empty() && self.checked == self.samples
    }
}

/// Checks every shard of `ds`: that the file is still the one opened, its size and
/// whole-file digest against the manifest (xxh3-64; CRC32C for format version 1), that the
/// keys are exactly the shard's key range in order, and for every record its header (magic,
/// version, header CRC), length, payload CRC32C, label (an index into the class list) and
/// raw size. With `decode`, each JPEG is also decoded on the CPU and its size compared with
/// the header. The source map the manifest names (`sources.bin`) is checked too, its shape
/// and whole-file digest: a damaged one is a problem of its own (`shard` `sources.bin`, no
/// index), and no record is lost for it.
///
/// Records are read by stoker's own bounds-checked walk of the LMDB tree (every page read
/// with `pread`, every offset checked), never by LMDB, which trusts the file's pages and
/// could crash on a damaged one, even one whose digest the manifest agrees with (both can
/// be crafted together): damage is named by record, and no byte of a shard can crash
/// `verify`. A shard whose digest differs has its records counted lost
/// ([`LostCause::Altered`]); they are still read, so that those damaged themselves are
/// named, and counted bad instead (each record is counted where it is named). The exception is a shard whose bytes are zeros from some point to its
/// end, the last page of its tree included (a copy cut short into a file of its full
/// size): the records before the zeros are counted as those of a shard cut short there
/// ([`LostCause::CutShort`]).
///
/// A dataset too damaged for [`Dataset::open`] is checked with [`verify_dir`].
///
/// # Errors
///
/// Only failures to start at all (a shard changed since the dataset was opened); problems
/// with the data are collected in [`VerifyReport::bad`] and [`VerifyReport::lost`].
///
/// # Examples
///
/// ```
/// use stoker_formats::{verify, Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
/// let dir = tempfile::tempdir()?;
/// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
/// w.push(RecordMeta { encoding: Encoding::Raw, height: 1, width: 1, channels: 3, label: 0 }, &[1, 2, 3])?;
/// w.finish(vec!["c".into()], Provenance::stoker("doc"))?;
/// let report = verify(&Dataset::open(dir.path())?, true)?;
/// assert!(report.ok(), "{:?}", report.bad);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify(ds: &Dataset, decode: bool) -> Result<VerifyReport, FormatError> {
    ds.check_unchanged()?;
    let open = |i| Ok(Arc::clone(ds.open_shard(i)));
    let mut r = check_shards(ds.manifest(), decode, &open, &|| false)?;
    name_sources(ds.root(), ds.manifest(), &mut r)?;
    Ok(r)
}

/// [`verify`] of the dataset at `root`, which need not open as a [`Dataset`]: each shard is
/// opened on its own, with every check [`Dataset::open`] makes (a regular file of the
/// manifest's size, sound LMDB meta pages counting the manifest's records), just before it
/// is checked. A shard that fails them is reported with the records it held (from the
/// manifest) in [`VerifyReport::lost`], and the other shards are checked as [`verify`]
/// checks them.
///
/// A shard shorter than the manifest says (a copy cut short) is refused by
/// [`Dataset::open`], but not wholly lost here: its meta pages are checked against the size
/// it should have, and each record whose leaf page (and value, on an overflow run) lies
/// before the cut and passes its checks is checked and counted as usual; only the others
/// are lost, as exact ranges, for [`LostCause::CutShort`], the reason saying at which byte
/// the file ends. Those records are vouched for by their own checks alone (the digest
/// covers the whole file), and the shard itself is named among the problems, so the report
/// is not [`VerifyReport::ok`] even when no record was lost.
///
/// # Errors
///
/// Only when the manifest cannot be read (missing, invalid, an unfinished conversion's);
/// everything wrong with the shards is in the report.
///
/// # Examples
///
/// ```
/// use stoker_formats::{verify_dir, DatasetWriter, Encoding, LostCause, Provenance, RecordMeta, WriterOptions};
/// let dir = tempfile::tempdir()?;
/// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
/// w.push(RecordMeta { encoding: Encoding::Raw, height: 1, width: 1, channels: 3, label: 0 }, &[1, 2, 3])?;
/// w.finish(vec!["c".into()], Provenance::stoker("doc"))?;
/// assert!(verify_dir(dir.path(), false)?.ok());
///
/// std::fs::remove_file(dir.path().join("shard-00000.lmdb"))?;
/// let report = verify_dir(dir.path(), false)?;
/// assert_eq!((report.ok_records, report.lost_records), (0, 1));
/// assert_eq!(report.lost[0].cause, LostCause::Missing);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_dir(root: impl AsRef<Path>, decode: bool) -> Result<VerifyReport, FormatError> {
    verify_dir_until(root, decode, &|| false)
}

/// [`verify_dir`] that asks `stop` before each record and each shard, and ends with
/// [`FormatError::VerifyStopped`] soon after it says yes: the check of a large dataset
/// reads all of it and takes minutes, and a caller where Ctrl-C does not end the process
/// (Python's `stoker.verify`) must be able to give up on it.
///
/// # Errors
///
/// As [`verify_dir`], and [`FormatError::VerifyStopped`].
///
/// # Examples
///
/// ```
/// use stoker_formats::{verify_dir_until, DatasetWriter, Encoding, FormatError, Provenance, RecordMeta, WriterOptions};
/// let dir = tempfile::tempdir()?;
/// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
/// w.push(RecordMeta { encoding: Encoding::Raw, height: 1, width: 1, channels: 3, label: 0 }, &[1, 2, 3])?;
/// w.finish(vec!["c".into()], Provenance::stoker("doc"))?;
/// let e = verify_dir_until(dir.path(), false, &|| true).unwrap_err();
/// assert!(matches!(e, FormatError::VerifyStopped { checked: 0, shards: 1 }), "{e}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_dir_until(
    root: impl AsRef<Path>,
    decode: bool,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<VerifyReport, FormatError> {
    let root = root.as_ref();
    let m = crate::dataset::read_manifest(root).map_err(|e| e.escalate(FaultStage::Verifying))?;
    let open = |i| crate::dataset::open_shard_of(root, &m, i);
    let mut r = check_shards(&m, decode, &open, stop)?;
    name_sources(root, &m, &mut r)?;
    Ok(r)
}

/// Checks the source map the manifest names, if any: its shape (as every lookup checks
/// it) and its whole-file digest. A sound map names the input of every bad record and of
/// each lost range's ends in `r`. A damaged map loses no record, but the names it gives
/// could be wrong, so it names none and is reported as the manifest's problems are; one
/// that cannot be read for no fault of its own stops the check
/// ([`FormatError::OutsideFault`]).
fn name_sources(root: &Path, m: &Manifest, r: &mut VerifyReport) -> Result<(), FormatError> {
    let Some(entry) = m.sources.as_ref() else {
        return Ok(());
    };
    let map = crate::SourceMap::open(root, entry, m.samples)
        .and_then(|map| map.check_digest(entry.xxh3).map(|()| map));
    let map = match map {
        Ok(map) => map,
        Err(e) if e.is_outside_fault() => return Err(e.escalate(FaultStage::Verifying)),
        Err(e) => {
            r.bad.push(BadRecord {
                shard: crate::SOURCES_FILE.into(),
                index: None,
                problem: e.to_string(),
                source: None,
            });
            return Ok(());
        }
    };
    // Checked whole above, so a lookup fails only on an I/O error: then no name.
    let name = |i: u64| {
        map.get(i)
            .ok()
            .map(|p| crate::convert::lossless_text(p.as_os_str()))
    };
    for b in &mut r.bad {
        b.source = b.index.and_then(name);
    }
    for l in &mut r.lost {
        let last = l.first_index + l.count.saturating_sub(1);
        l.sources = name(l.first_index).zip(name(last));
    }
    Ok(())
}

/// Opens a shard by its position in the manifest.
type OpenFn<'a> = dyn Fn(usize) -> Result<Arc<OpenShard>, FormatError> + 'a;

/// Checks each shard of `m`, opened by `open` one at a time, into one report; stops
/// when `stop` says so (asked before each shard and, through the walk, each record).
fn check_shards(
    m: &Manifest,
    decode: bool,
    open: &OpenFn<'_>,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<VerifyReport, FormatError> {
    let t0 = Instant::now();
    let decoder = CpuDecoder::new(m.decode_limits());
    let mut notes = Vec::new();
    let kind = if m.format_version >= 2 {
        DigestKind::Xxh3
    } else {
        notes.push(format!(
            "format version {}: shard digests are CRC32C, which a consistent rewrite of a record header (a changed label) leaves unchanged; convert again for xxh3 digests",
            m.format_version
        ));
        DigestKind::Crc32c
    };
    let mut r = VerifyReport {
        samples: m.samples,
        shards: m.shards.len() as u64,
        opened: 0,
        read_in_part: 0,
        checked: 0,
        decoded: 0,
        ok_records: 0,
        bad_records: 0,
        lost_records: 0,
        bad: Vec::new(),
        lost: Vec::new(),
        notes,
        seconds: 0.0,
    };
    let reading = Reading { decode, stop };
    let stopped = |si: usize| FormatError::VerifyStopped {
        checked: si as u64,
        shards: m.shards.len() as u64,
    };
    let mut payload_bytes = 0u64;
    for (si, entry) in m.shards.iter().enumerate() {
        // Before the shard too: its whole-file digest does not look at `stop`.
        if stop() {
            return Err(stopped(si));
        }
        let outcome = match open(si) {
            Ok(shard) => {
                r.opened += 1;
                check_shard(m, entry, &shard, kind, (reading, &decoder))?
            }
            // Not the shard's fault: counted as damage, it would call a sound dataset bad.
            Err(e) if e.is_outside_fault() => return Err(e.escalate(FaultStage::Verifying)),
            // Refused for the loader, but what lies before the cut can still be checked.
            Err(FormatError::ShardSizeMismatch { shard, got, want }) if got < want => {
                cut::check_cut_shard(m, entry, &shard, got, (reading, &decoder))?
            }
            Err(e) => ShardOutcome::unusable(entry, &e, format!("not opened: {}", reason_of(&e))),
        };
        // The shard's check may have left records unchecked: not an outcome to report.
        if stop() {
            return Err(stopped(si));
        }
        payload_bytes = payload_bytes.saturating_add(outcome.payload_bytes);
        r.add(entry, outcome);
    }
    // The manifest's total is what inspect and the loader's sizing trust; it can only be
    // compared when every record was read.
    if r.bad.is_empty() && r.checked == m.samples && payload_bytes != m.payload_bytes {
        r.bad.push(BadRecord {
            shard: crate::manifest::MANIFEST_FILE.into(),
            index: None,
            problem: format!(
                "payload_bytes is {} but the records hold {payload_bytes} bytes",
                m.payload_bytes
            ),
            source: None,
        });
    }
    r.seconds = t0.elapsed().as_secs_f64();
    Ok(r)
}

impl VerifyReport {
    /// Adds what was found in the shard `entry`.
    fn add(&mut self, entry: &ShardEntry, o: ShardOutcome) {
        self.checked += o.checked;
        self.read_in_part += u64::from(o.read_in_part);
        self.decoded += o.decoded;
        self.ok_records += o.ok;
        self.bad_records += o.bad_indices.len() as u64;
        self.bad
            .extend(o.problems.into_iter().map(|(index, problem)| BadRecord {
                shard: entry.file.clone(),
                index,
                problem,
                source: None,
            }));
        for (first_index, count, cause, reason) in o.lost {
            self.lost_records += count;
            self.lost.push(LostRecords {
                shard: entry.file.clone(),
                first_index,
                count,
                cause,
                reason,
                sources: None,
            });
        }
    }
}

/// Opens, digests and walks one shard that passed the checks of [`Dataset::open`].
fn check_shard(
    m: &Manifest,
    entry: &ShardEntry,
    shard: &OpenShard,
    kind: DigestKind,
    (reading, decoder): (Reading<'_>, &CpuDecoder),
) -> Result<ShardOutcome, FormatError> {
    // One descriptor for the digest and the walk, so that both read the same file: the one
    // opened, as the checks before and after the digest say.
    let file = shard
        .check_unchanged()
        .and_then(|()| File::open(&shard.path).map_err(|e| FormatError::io(&shard.path, e)));
    let mut file = match file {
        Ok(f) => f,
        Err(e) if e.is_outside_fault() => return Err(e.escalate(FaultStage::Verifying)),
        Err(e) => return Ok(ShardOutcome::unusable(entry, &e, reason_of(&e))),
    };
    let whole = whole_file_problem(shard, &mut file, entry, kind)?;
    if let Some((LostCause::Altered, problem)) = &whole {
        let zero_tail = cut::check_zero_tail(m, entry, shard, &file, problem, (reading, decoder))?;
        if let Some(o) = zero_tail {
            return Ok(o);
        }
    }
    let mut check = ShardCheck::new(m, entry, &shard.path, reading);
    if let Some((_, problem)) = &whole {
        check.problem(None, problem.clone());
    }
    // Records are read by stoker's bounds-checked walk of the tree, never by LMDB, which
    // trusts the file's pages: a digest that matches the manifest proves nothing about
    // a dataset whose manifest was written together with a crafted shard. A shard whose
    // digest differs is walked too, to name the records damaged themselves.
    let walked = file.metadata().map_err(|e| e.to_string()).and_then(|meta| {
        crate::lmdb_walk::walk_records(&file, meta.len(), &mut |item| check.take(item, decoder))
    });
    if let Err(e) = walked {
        check.problem(None, format!("records not read: {e}"));
    }
    let mut outcome = check.finish(decoder)?;
    if let Some((cause, problem)) = whole {
        outcome.lose_all(entry, cause, problem);
    }
    Ok(outcome)
}

/// Checks `shard` as a whole, read from `file` (opened by its path, at its start): the
/// file is the one opened, its size and digest are the manifest's. What is wrong makes
/// every record of the shard lost, for the cause returned.
///
/// # Errors
///
/// [`FormatError::OutsideFault`] when the file cannot be read for no fault of its own.
fn whole_file_problem(
    shard: &OpenShard,
    file: &mut File,
    entry: &ShardEntry,
    kind: DigestKind,
) -> Result<Option<(LostCause, String)>, FormatError> {
    let (len, got) = match digest_file(&shard.path, file, kind) {
        Ok(d) => d,
        Err(e) if e.is_outside_fault() => return Err(e.escalate(FaultStage::Verifying)),
        Err(e) => return Ok(Some((LostCause::Unreadable, reason_of(&e)))),
    };
    // Hashed by path: the file must still be the one opened, unchanged while hashed.
    if let Err(e) = shard.check_unchanged() {
        return Ok(Some((cause_of(&e), reason_of(&e))));
    }
    if len != entry.bytes {
        return Ok(Some((
            LostCause::WrongSize,
            format!("file is {len} bytes, the manifest says {}", entry.bytes),
        )));
    }
    let (name, want, width) = match kind {
        DigestKind::Xxh3 => ("xxh3-64", entry.xxh3, 16),
        DigestKind::Crc32c => ("CRC32C", entry.crc32c.map(u64::from), 8),
    };
    Ok(match want {
        Some(w) if w == got => None,
        Some(w) => Some((
            LostCause::Altered,
            format!(
                "file {name} is {got:0width$x}, manifest says {w:0width$x}: the file was altered"
            ),
        )),
        None => Some((
            LostCause::Altered,
            format!("the manifest has no {name} for this shard"),
        )),
    })
}
