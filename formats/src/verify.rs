//! `verify`: walk every record of a dataset and check it.

use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;
use stoker_decode::{CpuDecoder, Limits};

use std::path::Path;

use crate::digest::{digest_file, DigestKind};
use crate::record::{Encoding, RecordHeader, HEADER_LEN};
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

/// What [`verify`] found.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// Samples the manifest declares.
    pub samples: u64,
    /// Shards checked.
    pub shards: u64,
    /// Records whose header, length and CRC were checked.
    pub checked: u64,
    /// Records decoded (with `decode`).
    pub decoded: u64,
    /// Every problem, by shard and index.
    pub bad: Vec<BadRecord>,
    /// Remarks that are not problems (a format version 1 dataset's weaker digest).
    pub notes: Vec<String>,
    /// Wall time in seconds.
    pub seconds: f64,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn ok(&self) -> bool {
        self.bad.is_empty() && self.checked == self.samples
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
/// `verify`.
///
/// # Errors
///
/// Only failures to start at all (a shard changed since the dataset was opened); problems
/// with the data are collected in
/// [`VerifyReport::bad`].
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
    let t0 = Instant::now();
    let m = ds.manifest();
    let reader = ds.reader()?;
    let decoder = CpuDecoder::new(Limits::default());
    let mut bad = Vec::new();
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
    let mut checked = 0u64;
    let mut payload_bytes = 0u64;
    let mut decoded = 0u64;
    for (si, entry) in m.shards.iter().enumerate() {
        let shard_path = reader.shard_path(si).to_path_buf();
        let mut shard = ShardCheck::new(m, entry, &shard_path, decode);
        if let Some(problem) = whole_file_problem(&reader, si, entry, kind) {
            shard.problem(None, problem);
        }
        // Records are read by stoker's bounds-checked walk of the tree, never by LMDB, which
        // trusts the file's pages: a digest that matches the manifest proves nothing about
        // a dataset whose manifest was written together with a crafted shard.
        let walked = std::fs::File::open(&shard_path)
            .map_err(|e| e.to_string())
            .and_then(|f| {
                let len = f.metadata().map_err(|e| e.to_string())?.len();
                crate::lmdb_walk::walk_records(&f, len, &mut |item| match item {
                    Ok((key, value)) => {
                        shard.record(&key, value);
                        if shard.pending_bytes >= DECODE_CHUNK_BYTES {
                            decoded += shard.decode_pending(&decoder);
                        }
                    }
                    Err(e) => shard.problem(None, format!("damaged LMDB page: {e}")),
                })
            });
        if let Err(e) = walked {
            shard.problem(None, format!("records not read: {e}"));
        }
        decoded += shard.decode_pending(&decoder);
        let ((n, payload), problems) = shard.finish();
        checked += n;
        payload_bytes = payload_bytes.saturating_add(payload);
        bad.extend(problems.into_iter().map(|(index, problem)| BadRecord {
            shard: entry.file.clone(),
            index,
            problem,
        }));
    }
    // The manifest's total is what inspect and the loader's sizing trust; it can only be
    // compared when every record was read.
    if bad.is_empty() && checked == m.samples && payload_bytes != m.payload_bytes {
        bad.push(BadRecord {
            shard: crate::manifest::MANIFEST_FILE.into(),
            index: None,
            problem: format!(
                "payload_bytes is {} but the records hold {payload_bytes} bytes",
                m.payload_bytes
            ),
        });
    }
    Ok(VerifyReport {
        samples: m.samples,
        shards: m.shards.len() as u64,
        checked,
        decoded,
        bad,
        notes,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// A JPEG record to decode: index, header, payload.
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
    checked: u64,
    /// Payload bytes of the records whose header and CRC were good.
    payload_bytes: u64,
    to_decode: Vec<ToDecode>,
    /// Payload bytes in `to_decode`.
    pending_bytes: usize,
    problems: Vec<Problem>,
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
            payload_bytes: 0,
            to_decode: Vec::new(),
            pending_bytes: 0,
            problems: Vec::new(),
        }
    }

    fn problem(&mut self, index: Option<u64>, problem: String) {
        self.problems.push((index, problem));
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
            self.problem(
                Some(expect),
                format!("records {expect}..{index} are missing"),
            );
        }
        self.expect = index + 1;
        self.checked += 1;
        let parsed = RecordHeader::parse_value(&value, self.shard_path, index)
            .and_then(|rec| rec.check_crc().map(|()| rec.header));
        let h = match parsed {
            Ok(h) => h,
            Err(e) => return self.problem(Some(index), e.to_string()),
        };
        self.payload_bytes = self.payload_bytes.saturating_add(u64::from(h.payload_len));
        let m = self.m;
        if h.encoding != m.encoding {
            self.problem(
                Some(index),
                format!(
                    "encoding {} differs from the manifest's {}",
                    h.encoding, m.encoding
                ),
            );
        }
        if h.label as usize >= m.classes.len() {
            self.problem(
                Some(index),
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
                    self.problem(
                        Some(index),
                        format!(
                            "raw payload {} bytes, {}x{}x{} needs {want}",
                            h.payload_len, h.height, h.width, h.channels
                        ),
                    );
                }
                if let Some(rs) = m.raw_size {
                    if (rs.height, rs.width, rs.channels) != (h.height, h.width, h.channels) {
                        self.problem(Some(index), "raw size differs from the manifest".into());
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
    /// how many. Called every [`DECODE_CHUNK_BYTES`], so that a shard's payloads are never
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
        self.problems.extend(problems);
        chunk.len() as u64
    }

    /// Records checked and their payload bytes, and the problems (after
    /// [`ShardCheck::decode_pending`]).
    fn finish(mut self) -> ((u64, u64), Vec<Problem>) {
        debug_assert!(self.to_decode.is_empty());
        if self.expect < self.end {
            let (expect, end) = (self.expect, self.end);
            self.problem(Some(expect), format!("records {expect}..{end} are missing"));
        }
        let counted = (self.checked, self.payload_bytes);
        (counted, self.problems)
    }
}

/// Checks shard `si` as a whole: the file is the one opened, its size and digest are the
/// manifest's.
fn whole_file_problem(
    reader: &crate::DatasetReader,
    si: usize,
    entry: &crate::ShardEntry,
    kind: DigestKind,
) -> Option<String> {
    if let Err(e) = reader.check_unchanged(si) {
        return Some(format!("{e}"));
    }
    let path = reader.shard_path(si);
    let digest = std::fs::File::open(path)
        .map_err(|e| FormatError::io(path, e))
        .and_then(|mut f| digest_file(path, &mut f, kind));
    let (len, got) = match digest {
        Ok(d) => d,
        Err(e) => return Some(format!("cannot read: {e}")),
    };
    // Hashed by path: the file must still be the mapped one, unchanged while hashed.
    if let Err(e) = reader.check_unchanged(si) {
        return Some(format!("{e}"));
    }
    if len != entry.bytes {
        return Some(format!(
            "file is {len} bytes, manifest says {}",
            entry.bytes
        ));
    }
    let (name, want, width) = match kind {
        DigestKind::Xxh3 => ("xxh3-64", entry.xxh3, 16),
        DigestKind::Crc32c => ("CRC32C", entry.crc32c.map(u64::from), 8),
    };
    match want {
        Some(w) if w == got => None,
        Some(w) => Some(format!(
            "file {name} is {got:0width$x}, manifest says {w:0width$x}: the file was altered"
        )),
        None => Some(format!("the manifest has no {name} for this shard")),
    }
}
