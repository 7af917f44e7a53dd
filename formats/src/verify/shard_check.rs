//! The checks of one shard's records, fed in key order by the bounds-checked walk of its
//! tree ([`crate::lmdb_walk`]), and what they found: records good, bad or lost, and why.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::OnceLock;

use rayon::prelude::*;
use serde::Serialize;
use stoker_decode::{CpuDecoder, DecodeError, PerProcess};

use crate::lmdb_walk::{Item, WalkError};
use crate::outside_fault::FaultStage;
use crate::record::{Encoding, RecordHeader, HEADER_LEN};
use crate::{FormatError, Manifest, ShardEntry};

/// How the problem of a damaged page of a shard's tree begins (`verify` names each page:
/// a stretch of damage is a line per 4 KiB page).
pub(crate) const DAMAGED_PAGE: &str = "damaged LMDB page: ";

/// The threads `verify --decode` decodes on, started at its first use; `None` (decode on
/// the calling thread, with a warning) where they cannot be started. rayon's global pool
/// panics instead ("The global thread pool has not been initialized"), which a container
/// or job with a process limit (pids.max, `ulimit -u`) below its CPUs hit at once: every
/// `stoker verify`, with or without `--decode`, ended in that panic.
///
/// One per process: a child of `fork` (a PyTorch `DataLoader` worker) has none of its
/// parent's pool threads, and its decodes installed on that pool waited for ever.
fn decode_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: PerProcess<OnceLock<Option<rayon::ThreadPool>>> = PerProcess::new();
    POOL.get_or_init(OnceLock::new)
        .get_or_init(|| {
            // One per available CPU, whatever RAYON_NUM_THREADS says (20,000 threads made a
            // 0.35 s check run past 100 s).
            rayon::ThreadPoolBuilder::new()
                .num_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
                .thread_name(|i| format!("stoker-verify-{i}"))
                .build()
                .map_err(|e| {
                    tracing::warn!(
                        "cannot start threads to decode on ({e}): decoding on one thread"
                    );
                })
                .ok()
        })
        .as_ref()
}

/// The problems of the records of `chunk` (read from the shard at `path`) whose JPEG does
/// not decode to its header's size, decoded on `pool`, or on this thread without one.
///
/// # Errors
///
/// [`FormatError::OutsideFault`] when a decode could not allocate its memory
/// ([`short_of_memory`]): the check stops.
fn decode_chunk(
    pool: Option<&rayon::ThreadPool>,
    decoder: &CpuDecoder,
    (path, chunk): (&Path, &[ToDecode]),
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Vec<Problem>, FormatError> {
    let check = |(index, h, payload): &ToDecode| {
        if stop() {
            return None;
        }
        let problem = match decoder.decode_to_vec(payload) {
            Ok((info, _)) if (info.width, info.height) != (h.width, h.height) => format!(
                "decodes to {}x{}, header says {}x{}",
                info.width, info.height, h.width, h.height
            ),
            Ok(_) => return None,
            Err(e @ DecodeError::OutOfMemory { .. }) => {
                let what = format!("record {index} could not be decoded: {e}");
                return Some(Err(short_of_memory(path, what)));
            }
            Err(e) => format!("does not decode: {e}"),
        };
        Some(Ok((Some(*index), problem)))
    };
    match pool {
        Some(pool) => pool.install(|| chunk.par_iter().filter_map(check).collect()),
        None => chunk.iter().filter_map(check).collect(),
    }
}

/// The error that stops a check of the shard at `path` when memory for `what` could not be
/// had: no fault of the shard's, which counted as damage would call a sound dataset bad.
fn short_of_memory(path: &Path, what: String) -> FormatError {
    let e = std::io::Error::new(std::io::ErrorKind::OutOfMemory, what);
    FormatError::io(path, e).escalate(FaultStage::Verifying)
}

/// Why the records of a [`crate::LostRecords`] range are counted lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LostCause {
    /// The shard file is not there.
    Missing,
    /// The shard file is larger than the manifest says, or its size changed while it was
    /// checked: another file.
    WrongSize,
    /// The shard file is shorter than the manifest says (a copy cut short), or holds only
    /// zeros from some byte to its end, its size kept: these records are not in the intact
    /// pages before the cut (the records that are were checked as usual, and the reason says
    /// where the file was cut).
    CutShort,
    /// The shard file was not opened: its LMDB meta pages are damaged or disagree with the
    /// manifest's record count, or it is not a regular file.
    Damaged,
    /// The shard file could not be read (an I/O error).
    Unreadable,
    /// The shard file's digest is not the manifest's, or the file changed while it was
    /// checked: it is not the file written, so none of its records can be vouched for
    /// (those that also fail their own checks are named in [`crate::VerifyReport::bad`]
    /// and counted bad, outside these ranges).
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
            LostCause::CutShort => "shard file cut short",
            LostCause::Damaged => "shard file damaged, not opened",
            LostCause::Unreadable => "shard file unreadable",
            LostCause::Altered => "shard file altered (digest differs)",
            LostCause::NotRead => "not found in the shard",
        })
    }
}

/// Records of a shard lost: first index, count, why.
pub(super) type LostRange = (u64, u64, LostCause, String);

/// What one shard held, as found: `ok`, the records in `bad_indices` and the counts in
/// `lost` add up to the shard's count.
#[derive(Debug, Default)]
pub(super) struct ShardOutcome {
    pub(super) checked: u64,
    pub(super) decoded: u64,
    /// Payload bytes of the records whose header and CRC were good.
    pub(super) payload_bytes: u64,
    pub(super) ok: u64,
    /// The indices of the bad records, sorted, each once: the only indices `problems`
    /// names, and never inside a `lost` range, so that a record named is counted where it
    /// is named.
    pub(super) bad_indices: Vec<u64>,
    pub(super) problems: Vec<Problem>,
    pub(super) lost: Vec<LostRange>,
    /// The shard was refused by [`crate::Dataset::open`] for being cut short, and the
    /// pages before the cut were read: not "not opened", though not opened as a dataset
    /// opens it either.
    pub(super) read_in_part: bool,
}

impl ShardOutcome {
    /// A shard none of whose records could be read, because of `e`: `problem` is reported
    /// for the shard, and every record of `entry` is lost.
    pub(super) fn unusable(entry: &ShardEntry, e: &FormatError, problem: String) -> Self {
        let mut o = ShardOutcome::default();
        o.problems.push((None, problem));
        o.lose_all(entry, cause_of(e), reason_of(e));
        o
    }

    /// Counts every record of `entry` lost, for `cause`, except the records that failed
    /// their own checks: those stay bad (and named among the problems), so that each
    /// record is counted once, where the report names it. The shard is to be restored
    /// either way; its lost ranges and bad records together cover it.
    pub(super) fn lose_all(&mut self, entry: &ShardEntry, cause: LostCause, reason: String) {
        self.ok = 0;
        self.lost.clear();
        let end = entry.first_index.saturating_add(entry.count);
        let mut start = entry.first_index;
        // `bad_indices` is sorted and within the shard (`ShardCheck` only takes records in
        // place), so the gaps between them are the lost ranges.
        for &i in self.bad_indices.iter().chain(std::iter::once(&end)) {
            if i > start {
                self.lost.push((start, i - start, cause, reason.clone()));
            }
            start = start.max(i.saturating_add(1));
        }
    }
}

/// Why `e` kept a shard from being opened or read, without the path (the report names the
/// shard).
pub(super) fn reason_of(e: &FormatError) -> String {
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
pub(super) fn cause_of(e: &FormatError) -> LostCause {
    match e {
        FormatError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            LostCause::Missing
        }
        FormatError::ShardSizeMismatch { .. } => LostCause::WrongSize,
        FormatError::DamagedShard { .. } => LostCause::Damaged,
        FormatError::ShardChanged { .. } => LostCause::Altered,
        _ => LostCause::Unreadable,
    }
}

/// A JPEG to decode: its index, header and payload (the walk's own copy).
type ToDecode = (u64, RecordHeader, Vec<u8>);

/// JPEG bytes `verify --decode` holds before decoding them: the walk copies every record
/// out of the file, so a whole shard's (1 GiB by default) would otherwise be in memory.
const DECODE_CHUNK_BYTES: usize = 64 << 20;

/// What a shard's check does, and when it gives up.
#[derive(Clone, Copy)]
pub(super) struct Reading<'a> {
    /// Also decode each JPEG on the CPU.
    pub(super) decode: bool,
    /// Asked before each record and each decode; once it says yes, the rest is left
    /// unchecked, and the caller throws the outcome away.
    pub(super) stop: &'a (dyn Fn() -> bool + Sync),
}
/// A problem found: the record's index (none for the shard as a whole) and what is wrong.
pub(super) type Problem = (Option<u64>, String);

/// The record checks of one shard, fed its keys and values in key order by the
/// bounds-checked walk of its tree.
pub(super) struct ShardCheck<'m> {
    m: &'m Manifest,
    shard_path: &'m Path,
    first: u64,
    /// LMDB key of the record at `first` (the shard's `key_base`, else `first`).
    first_key: u64,
    expect: u64,
    end: u64,
    reading: Reading<'m>,
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
    /// What stopped the check, no fault of the shard's (memory for a value or a decode).
    fault: Option<FormatError>,
}

impl<'m> ShardCheck<'m> {
    pub(super) fn new(
        m: &'m Manifest,
        entry: &ShardEntry,
        shard_path: &'m Path,
        reading: Reading<'m>,
    ) -> Self {
        ShardCheck {
            m,
            shard_path,
            first: entry.first_index,
            first_key: entry.first_key(),
            expect: entry.first_index,
            end: entry.first_index.saturating_add(entry.count),
            reading,
            checked: 0,
            decoded: 0,
            payload_bytes: 0,
            to_decode: Vec::new(),
            pending_bytes: 0,
            problems: Vec::new(),
            bad_indices: Vec::new(),
            missing: Vec::new(),
            fault: None,
        }
    }

    pub(super) fn problem(&mut self, index: Option<u64>, problem: String) {
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
        // Counted lost, not bad: named for the shard, so that only bad records carry an
        // index.
        self.problem(None, format!("records {start}..{end} are missing"));
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
            // Not this shard's record at `index` (which, if in the shard, is counted where
            // it was found): a problem of the shard, not of that record.
            return self.problem(
                None,
                format!(
                    "key {key} (record {index}) out of place (expected {expect}, shard holds {}..{end})",
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
        if let Some(problem) = crate::label_problem(h.label, m.classes.len()) {
            self.bad(index, problem);
        }
        match h.encoding {
            Encoding::Raw => {
                for problem in
                    crate::raw_problems(crate::RawSize::of(&h), h.payload_len.into(), m.raw_size)
                {
                    self.bad(index, problem);
                }
            }
            Encoding::Jpeg if self.reading.decode => {
                value.drain(..HEADER_LEN);
                self.pending_bytes += value.len();
                self.to_decode.push((index, h, value));
            }
            Encoding::Jpeg => {}
        }
    }

    /// Takes one item of the walk: a record to check, or what was wrong with a page; breaks
    /// the walk off once stopped or short of memory.
    pub(super) fn take(&mut self, item: Item, decoder: &CpuDecoder) -> ControlFlow<()> {
        if (self.reading.stop)() {
            return ControlFlow::Break(());
        }
        match item {
            Ok((key, value)) => {
                self.record(&key, value);
                if self.pending_bytes >= DECODE_CHUNK_BYTES {
                    self.decoded += self.decode_pending(decoder);
                }
            }
            Err(WalkError::Damaged(e)) => self.problem(None, format!("{DAMAGED_PAGE}{e}")),
            Err(WalkError::Memory { page, bytes }) => {
                let what =
                    format!("the {bytes} bytes of the value at page {page} cannot be allocated");
                self.fault = Some(short_of_memory(self.shard_path, what));
            }
        }
        // Not `stop` again: it is asked once a record, above, and a caller's own stop may
        // count its asks.
        if self.fault.is_some() {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// Decodes the JPEGs read so far (on [`decode_pool`], else on this thread) and lets
    /// their bytes go; returns how many decoded to their header's size. Called every
    /// [`DECODE_CHUNK_BYTES`], so that a shard's payloads are never all held at once.
    fn decode_pending(&mut self, decoder: &CpuDecoder) -> u64 {
        let chunk = std::mem::take(&mut self.to_decode);
        self.pending_bytes = 0;
        if chunk.is_empty() {
            // Nothing to decode (no --decode): no threads needed.
            return 0;
        }
        let at = (self.shard_path, chunk.as_slice());
        let problems = match decode_chunk(decode_pool(), decoder, at, self.reading.stop) {
            Ok(p) => p,
            Err(e) => {
                self.fault = Some(e);
                return 0;
            }
        };
        self.bad_indices
            .extend(problems.iter().filter_map(|(index, _)| *index));
        let decoded = chunk.len() - problems.len();
        self.problems.extend(problems);
        decoded as u64
    }

    /// What was found, once the JPEGs still held are decoded: the records not found are
    /// lost, the others good or bad.
    ///
    /// # Errors
    ///
    /// What stopped the check for no fault of the shard's ([`decode_chunk`]'s errors).
    pub(super) fn finish(mut self, decoder: &CpuDecoder) -> Result<ShardOutcome, FormatError> {
        self.decoded += self.decode_pending(decoder);
        if let Some(e) = self.fault {
            return Err(e);
        }
        if self.expect < self.end {
            self.missing(self.expect, self.end);
        }
        let mut bad_indices = self.bad_indices;
        bad_indices.sort_unstable();
        bad_indices.dedup();
        let lost = self
            .missing
            .into_iter()
            .map(|(start, end)| {
                let reason = "not found by the walk of the shard's record tree (absent, or under a damaged page)";
                (start, end - start, LostCause::NotRead, reason.to_string())
            })
            .collect();
        Ok(ShardOutcome {
            checked: self.checked,
            decoded: self.decoded,
            payload_bytes: self.payload_bytes,
            ok: self.checked - bad_indices.len() as u64,
            bad_indices,
            problems: self.problems,
            lost,
            read_in_part: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_without_threads_finds_what_the_pool_finds() {
        // Where no thread can be started (a pids limit below the cores), `verify --decode`
        // decodes on the calling thread instead of panicking in rayon's global pool.
        let photo = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/data/sample/caer/tent.jpg"
        ))
        .unwrap();
        let info = stoker_decode::probe(&photo, &stoker_decode::Limits::default()).unwrap();
        let header = |w, h| RecordHeader {
            encoding: Encoding::Jpeg,
            height: h,
            width: w,
            channels: 3,
            label: 0,
            payload_len: 0,
            crc32c: 0,
        };
        let chunk = vec![
            (0, header(info.width, info.height), photo.clone()),
            (1, header(info.width + 1, info.height), photo.clone()),
            (2, header(8, 8), photo[..photo.len() / 3].to_vec()),
        ];
        let decoder = CpuDecoder::new(stoker_decode::Limits::default());
        let at = (Path::new("shard"), chunk.as_slice());
        let alone = decode_chunk(None, &decoder, at, &|| false).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert_eq!(
            alone,
            decode_chunk(Some(&pool), &decoder, at, &|| false).unwrap()
        );
        let bad: Vec<_> = alone.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad, [Some(1), Some(2)], "{alone:?}");
    }
}
