//! `verify`: check every record of a dataset, and name the records of the shards that
//! cannot be checked.
//!
//! A dataset copied or restored with damage (a shard cut short, missing, with damaged meta
//! pages, or swapped for another file) cannot be opened as a [`Dataset`]; [`verify_dir`]
//! opens each shard on its own, with the same checks, so that the report names what every
//! shard that could not be opened held (the manifest's `first_index` and `count`) beside the
//! records of the others.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;
use stoker_decode::{CpuDecoder, Limits};

use crate::digest::{digest_file, DigestKind};
use crate::record::{Encoding, RecordHeader, HEADER_LEN};
use crate::shard::OpenShard;
use crate::{Dataset, FormatError, Manifest, ShardEntry};

/// One problem found by [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadRecord {
    /// Shard file name.
    pub shard: String,
    /// The record's dataset index; `None` for a problem with the shard file as a whole.
    pub index: Option<u64>,
    /// What is wrong.
    pub problem: String,
}

/// Why the records of a [`LostRecords`] range are counted lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LostCause {
    /// The shard file is not there.
    Missing,
    /// The shard file's size is not the manifest's (cut short, or another file).
    WrongSize,
    /// The shard file was not opened: its LMDB meta pages are damaged or disagree with the
    /// manifest's record count, or it is not a regular file.
    Damaged,
    /// The shard file could not be read (an I/O error).
    Unreadable,
    /// The shard file's digest is not the manifest's, or the file changed while it was
    /// checked: it is not the file written, so none of its records can be vouched for
    /// (those that also fail their own checks are named in [`VerifyReport::bad`]).
    Altered,
    /// The shard was read, but these records were not found in its record tree (absent,
    /// or under a damaged page).
    NotRead,
}

impl std::fmt::Display for LostCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostCause::Missing => "shard file missing",
            LostCause::WrongSize => "shard file has the wrong size",
            LostCause::Damaged => "shard file damaged, not opened",
            LostCause::Unreadable => "shard file unreadable",
            LostCause::Altered => "shard file altered (digest differs)",
            LostCause::NotRead => "not found in the shard",
        })
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
}

/// What [`verify`] found. Every sample is counted once in `ok_records`, `bad_records` or
/// `lost_records`.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// Samples the manifest declares.
    pub samples: u64,
    /// Shards the manifest declares.
    pub shards: u64,
    /// Shards that passed the checks of [`Dataset::open`] and were read.
    pub opened: u64,
    /// Records whose header, length and CRC were checked.
    pub checked: u64,
    /// JPEG records that decoded, to their header's size (with `decode`); those that did
    /// not are among the problems.
    pub decoded: u64,
    /// Records read that passed every check, in shards whose digest is the manifest's.
    pub ok_records: u64,
    /// Records read that failed a check, outside the `lost` ranges.
    pub bad_records: u64,
    /// Records in the `lost` ranges.
    pub lost_records: u64,
    /// Every problem, by shard and index.
    pub bad: Vec<BadRecord>,
    /// The records the dataset no longer holds as written, by shard: every record of a
    /// shard that could not be opened or read, or whose digest differs, and records absent
    /// from a shard's tree. What to restore or convert again.
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
/// the header.
///
/// Records are read by stoker's own bounds-checked walk of the LMDB tree (every page read
/// with `pread`, every offset checked), never by LMDB, which trusts the file's pages and
/// could crash on a damaged one, even one whose digest the manifest agrees with (both can
/// be crafted together): damage is named by record, and no byte of a shard can crash
/// `verify`. A shard whose digest differs has all its records counted lost
/// ([`LostCause::Altered`]); its records are still read, so that those damaged themselves
/// are named too.
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
    Ok(check_shards(ds.manifest(), decode, &|i| {
        Ok(Arc::clone(ds.open_shard(i)))
    }))
}

/// [`verify`] of the dataset at `root`, which need not open as a [`Dataset`]: each shard is
/// opened on its own, with every check [`Dataset::open`] makes (a regular file of the
/// manifest's size, sound LMDB meta pages counting the manifest's records), just before it
/// is checked. A shard that fails them is reported with the records it held (from the
/// manifest) in [`VerifyReport::lost`], and the other shards are checked as [`verify`]
/// checks them.
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
    let root = root.as_ref();
    let m = crate::dataset::read_manifest(root)?;
    Ok(check_shards(&m, decode, &|i| {
        crate::dataset::open_shard_of(root, &m, i)
    }))
}

/// Opens a shard by its position in the manifest.
type OpenFn<'a> = dyn Fn(usize) -> Result<Arc<OpenShard>, FormatError> + 'a;

/// Checks each shard of `m`, opened by `open` one at a time, into one report.
fn check_shards(m: &Manifest, decode: bool, open: &OpenFn<'_>) -> VerifyReport {
    let t0 = Instant::now();
    let decoder = CpuDecoder::new(Limits::default());
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
    let mut payload_bytes = 0u64;
    for (si, entry) in m.shards.iter().enumerate() {
        let outcome = match open(si) {
            Ok(shard) => {
                r.opened += 1;
                check_shard(m, entry, &shard, kind, decode, &decoder)
            }
            Err(e) => ShardOutcome::unusable(entry, &e, format!("not opened: {}", reason_of(&e))),
        };
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
        });
    }
    r.seconds = t0.elapsed().as_secs_f64();
    r
}

impl VerifyReport {
    /// Adds what was found in the shard `entry`.
    fn add(&mut self, entry: &ShardEntry, o: ShardOutcome) {
        self.checked += o.checked;
        self.decoded += o.decoded;
        self.ok_records += o.ok;
        self.bad_records += o.bad;
        self.bad
            .extend(o.problems.into_iter().map(|(index, problem)| BadRecord {
                shard: entry.file.clone(),
                index,
                problem,
            }));
        for (first_index, count, cause, reason) in o.lost {
            self.lost_records += count;
            self.lost.push(LostRecords {
                shard: entry.file.clone(),
                first_index,
                count,
                cause,
                reason,
            });
        }
    }
}

/// Records of a shard lost: first index, count, why.
type LostRange = (u64, u64, LostCause, String);

/// What one shard held, as found: `ok + bad` plus the counts in `lost` is the shard's count.
#[derive(Debug, Default)]
struct ShardOutcome {
    checked: u64,
    decoded: u64,
    /// Payload bytes of the records whose header and CRC were good.
    payload_bytes: u64,
    ok: u64,
    bad: u64,
    problems: Vec<Problem>,
    lost: Vec<LostRange>,
}

impl ShardOutcome {
    /// A shard none of whose records could be read, because of `e`: `problem` is reported
    /// for the shard, and every record of `entry` is lost.
    fn unusable(entry: &ShardEntry, e: &FormatError, problem: String) -> Self {
        let mut o = ShardOutcome::default();
        o.problems.push((None, problem));
        o.lose_all(entry, cause_of(e), reason_of(e));
        o
    }

    /// Counts every record of `entry` lost, for `cause`; the problems found stay.
    fn lose_all(&mut self, entry: &ShardEntry, cause: LostCause, reason: String) {
        self.ok = 0;
        self.bad = 0;
        self.lost = vec![(entry.first_index, entry.count, cause, reason)];
    }
}

/// Opens, digests and walks one shard that passed the checks of [`Dataset::open`].
fn check_shard(
    m: &Manifest,
    entry: &ShardEntry,
    shard: &OpenShard,
    kind: DigestKind,
    decode: bool,
    decoder: &CpuDecoder,
) -> ShardOutcome {
    // One descriptor for the digest and the walk, so that both read the same file: the one
    // opened, as the checks before and after the digest say.
    let file = shard
        .check_unchanged()
        .and_then(|()| File::open(&shard.path).map_err(|e| FormatError::io(&shard.path, e)));
    let mut file = match file {
        Ok(f) => f,
        Err(e) => return ShardOutcome::unusable(entry, &e, reason_of(&e)),
    };
    let whole = whole_file_problem(shard, &mut file, entry, kind);
    let mut check = ShardCheck::new(m, entry, &shard.path, decode);
    if let Some((_, problem)) = &whole {
        check.problem(None, problem.clone());
    }
    // Records are read by stoker's bounds-checked walk of the tree, never by LMDB, which
    // trusts the file's pages: a digest that matches the manifest proves nothing about
    // a dataset whose manifest was written together with a crafted shard. A shard whose
    // digest differs is walked too, to name the records damaged themselves.
    let walked = file.metadata().map_err(|e| e.to_string()).and_then(|meta| {
        crate::lmdb_walk::walk_records(&file, meta.len(), &mut |item| match item {
            Ok((key, value)) => {
                check.record(&key, value);
                if check.pending_bytes >= DECODE_CHUNK_BYTES {
                    check.decoded += check.decode_pending(decoder);
                }
            }
            Err(e) => check.problem(None, format!("damaged LMDB page: {e}")),
        })
    });
    if let Err(e) = walked {
        check.problem(None, format!("records not read: {e}"));
    }
    check.decoded += check.decode_pending(decoder);
    let mut outcome = check.finish();
    if let Some((cause, problem)) = whole {
        outcome.lose_all(entry, cause, problem);
    }
    outcome
}

/// Why `e` kept a shard from being opened or read, without the path (the report names the
/// shard).
fn reason_of(e: &FormatError) -> String {
    match e {
        FormatError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            "the file is missing".into()
        }
        FormatError::Io { source, .. } => format!("cannot read: {source}"),
        FormatError::ShardSizeMismatch { got, want, .. } => {
            format!("file is {got} bytes, the manifest says {want}")
        }
        FormatError::DamagedShard { reason, .. } => reason.clone(),
        FormatError::ShardChanged { what, .. } => {
            format!("the file changed while it was checked ({what})")
        }
        other => other.to_string(),
    }
}

/// The [`LostCause`] of the records of a shard that `e` kept from being opened or read.
fn cause_of(e: &FormatError) -> LostCause {
    match e {
        FormatError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            LostCause::Missing
        }
        FormatError::ShardSizeMismatch { .. } => LostCause::WrongSize,
        FormatError::DamagedShard { .. } => LostCause::Damaged,
        FormatError::ShardChanged { .. } | FormatError::ShardReplaced { .. } => LostCause::Altered,
        _ => LostCause::Unreadable,
    }
}

/// A JPEG to decode: its index, header and payload (the walk's own copy).
type ToDecode = (u64, RecordHeader, Vec<u8>);

/// JPEG bytes `verify --decode` holds before decoding them: the walk copies every record
/// out of the file, so a whole shard's (1 GiB by default) would otherwise be in memory.
const DECODE_CHUNK_BYTES: usize = 64 << 20;
/// A problem found: the record's index (none for the shard as a whole) and what is wrong.
type Problem = (Option<u64>, String);

/// The record checks of one shard, fed its keys and values in key order by the
/// bounds-checked walk of its tree.
struct ShardCheck<'m> {
    m: &'m Manifest,
    shard_path: &'m Path,
    first: u64,
    /// LMDB key of the record at `first` (the shard's `key_base`, else `first`).
    first_key: u64,
    expect: u64,
    end: u64,
    decode: bool,
    /// Records read in place (each index once).
    checked: u64,
    decoded: u64,
    /// Payload bytes of the records whose header and CRC were good.
    payload_bytes: u64,
    to_decode: Vec<ToDecode>,
    /// Payload bytes in `to_decode`.
    pending_bytes: usize,
    problems: Vec<Problem>,
    /// Indices of records read in place that failed a check (an index may repeat).
    bad_indices: Vec<u64>,
    /// Ranges `start..end` of the shard's indices the walk did not find.
    missing: Vec<(u64, u64)>,
}

impl<'m> ShardCheck<'m> {
    fn new(m: &'m Manifest, entry: &ShardEntry, shard_path: &'m Path, decode: bool) -> Self {
        ShardCheck {
            m,
            shard_path,
            first: entry.first_index,
            first_key: entry.first_key(),
            expect: entry.first_index,
            end: entry.first_index.saturating_add(entry.count),
            decode,
            checked: 0,
            decoded: 0,
            payload_bytes: 0,
            to_decode: Vec::new(),
            pending_bytes: 0,
            problems: Vec::new(),
            bad_indices: Vec::new(),
            missing: Vec::new(),
        }
    }

    fn problem(&mut self, index: Option<u64>, problem: String) {
        self.problems.push((index, problem));
    }

    /// A problem of record `index`, read in place.
    fn bad(&mut self, index: u64, problem: String) {
        self.bad_indices.push(index);
        self.problems.push((Some(index), problem));
    }

    /// Records `start..end` were not found.
    fn missing(&mut self, start: u64, end: u64) {
        self.missing.push((start, end));
        self.problem(Some(start), format!("records {start}..{end} are missing"));
    }

    fn record(&mut self, key: &[u8], mut value: Vec<u8>) {
        let Ok(k) = <[u8; 8]>::try_from(key) else {
            return self.problem(None, format!("stray key of {} bytes", key.len()));
        };
        let key = u64::from_be_bytes(k);
        // Keys below the shard's first key cannot be in place; map the rest to indices.
        let index = match key.checked_sub(self.first_key) {
            Some(off) => self.first.saturating_add(off),
            None => {
                return self.problem(
                    None,
                    format!(
                        "key {key} out of place (shard keys start at {})",
                        self.first_key
                    ),
                )
            }
        };
        let (expect, end) = (self.expect, self.end);
        if index < expect || index >= end {
            return self.problem(
                Some(index),
                format!(
                    "key out of place (expected {expect}, shard holds {}..{end})",
                    self.first
                ),
            );
        }
        if index > expect {
            self.missing(expect, index);
        }
        self.expect = index + 1;
        self.checked += 1;
        let parsed = RecordHeader::parse_value(&value, self.shard_path, index)
            .and_then(|rec| rec.check_crc().map(|()| rec.header));
        let h = match parsed {
            Ok(h) => h,
            Err(e) => return self.bad(index, e.to_string()),
        };
        self.payload_bytes = self.payload_bytes.saturating_add(u64::from(h.payload_len));
        let m = self.m;
        if h.encoding != m.encoding {
            self.bad(
                index,
                format!(
                    "encoding {} differs from the manifest's {}",
                    h.encoding, m.encoding
                ),
            );
        }
        if h.label as usize >= m.classes.len() {
            self.bad(
                index,
                format!(
                    "label {} is outside the class list ({} classes)",
                    h.label,
                    m.classes.len()
                ),
            );
        }
        match h.encoding {
            Encoding::Raw => {
                let want = u64::from(h.height) * u64::from(h.width) * u64::from(h.channels);
                if want != u64::from(h.payload_len) {
                    self.bad(
                        index,
                        format!(
                            "raw payload {} bytes, {}x{}x{} needs {want}",
                            h.payload_len, h.height, h.width, h.channels
                        ),
                    );
                }
                if let Some(rs) = m.raw_size {
                    if (rs.height, rs.width, rs.channels) != (h.height, h.width, h.channels) {
                        self.bad(index, "raw size differs from the manifest".into());
                    }
                }
            }
            Encoding::Jpeg if self.decode => {
                value.drain(..HEADER_LEN);
                self.pending_bytes += value.len();
                self.to_decode.push((index, h, value));
            }
            Encoding::Jpeg => {}
        }
    }

    /// Decodes the JPEGs read so far (on the rayon pool) and lets their bytes go; returns
    /// how many decoded to their header's size. Called every [`DECODE_CHUNK_BYTES`], so that a shard's payloads are never
    /// all held at once.
    fn decode_pending(&mut self, decoder: &CpuDecoder) -> u64 {
        let chunk = std::mem::take(&mut self.to_decode);
        self.pending_bytes = 0;
        let problems: Vec<Problem> = chunk
            .par_iter()
            .filter_map(|(index, h, payload)| match decoder.decode_to_vec(payload) {
                Ok((info, _)) if (info.width, info.height) != (h.width, h.height) => Some((
                    Some(*index),
                    format!(
                        "decodes to {}x{}, header says {}x{}",
                        info.width, info.height, h.width, h.height
                    ),
                )),
                Ok(_) => None,
                Err(e) => Some((Some(*index), format!("does not decode: {e}"))),
            })
            .collect();
        self.bad_indices
            .extend(problems.iter().filter_map(|(index, _)| *index));
        let decoded = chunk.len() - problems.len();
        self.problems.extend(problems);
        decoded as u64
    }

    /// What was found (after [`ShardCheck::decode_pending`]): the records not found are
    /// lost, the others good or bad.
    fn finish(mut self) -> ShardOutcome {
        debug_assert!(self.to_decode.is_empty());
        if self.expect < self.end {
            self.missing(self.expect, self.end);
        }
        let mut bad = self.bad_indices;
        bad.sort_unstable();
        bad.dedup();
        let bad = bad.len() as u64;
        let lost = self
            .missing
            .into_iter()
            .map(|(start, end)| {
                let reason = "not found by the walk of the shard's record tree (absent, or under a damaged page)";
                (start, end - start, LostCause::NotRead, reason.to_string())
            })
            .collect();
        ShardOutcome {
            checked: self.checked,
            decoded: self.decoded,
            payload_bytes: self.payload_bytes,
            ok: self.checked - bad,
            bad,
            problems: self.problems,
            lost,
        }
    }
}

/// Checks `shard` as a whole, read from `file` (opened by its path, at its start): the
/// file is the one opened, its size and digest are the manifest's. What is wrong makes
/// every record of the shard lost, for the cause returned.
fn whole_file_problem(
    shard: &OpenShard,
    file: &mut File,
    entry: &ShardEntry,
    kind: DigestKind,
) -> Option<(LostCause, String)> {
    let (len, got) = match digest_file(&shard.path, file, kind) {
        Ok(d) => d,
        Err(e) => return Some((LostCause::Unreadable, reason_of(&e))),
    };
    // Hashed by path: the file must still be the one opened, unchanged while hashed.
    if let Err(e) = shard.check_unchanged() {
        return Some((cause_of(&e), reason_of(&e)));
    }
    if len != entry.bytes {
        return Some((
            LostCause::WrongSize,
            format!("file is {len} bytes, the manifest says {}", entry.bytes),
        ));
    }
    let (name, want, width) = match kind {
        DigestKind::Xxh3 => ("xxh3-64", entry.xxh3, 16),
        DigestKind::Crc32c => ("CRC32C", entry.crc32c.map(u64::from), 8),
    };
    match want {
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
    }
}
