//! `verify`: walk every record of a dataset and check it.

use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;
use stoker_decode::{CpuDecoder, Limits};

use crate::digest::{digest_file, DigestKind};
use crate::record::{Encoding, RecordHeader};
use crate::{Dataset, FormatError};

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
/// whole-file digest against the manifest (xxh3-64; CRC32C for format version 1), and only
/// then, through LMDB, that the keys are exactly the shard's index range in order, and for
/// every record its header (magic, version, header CRC), length, payload CRC32C, label
/// (an index into the class list) and raw size. With `decode`, each JPEG is also decoded on
/// the CPU and its size compared with the header.
///
/// A shard whose digest differs is reported and its records are not read: LMDB trusts the
/// file's pages and could crash on a damaged one, so no byte of a shard can crash `verify`
/// (the meta pages LMDB reads on open are checked by [`Dataset::open`]).
///
/// # Errors
///
/// Only failures to start at all (LMDB refusing a read transaction, a shard changed since
/// the dataset was opened); problems with the data are collected in [`VerifyReport::bad`].
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
    let mut decoded = 0u64;
    for (si, entry) in m.shards.iter().enumerate() {
        let file = entry.file.clone();
        let mut report = |index: Option<u64>, problem: String| {
            bad.push(BadRecord {
                shard: file.clone(),
                index,
                problem,
            })
        };
        let shard_path = reader.shard_path(si).to_path_buf();
        if let Some(problem) = whole_file_problem(&reader, si, entry, kind) {
            report(None, problem);
            continue;
        }
        let mut expect = entry.first_index;
        let end = entry.first_index + entry.count;
        let mut to_decode: Vec<(u64, RecordHeader, &[u8])> = Vec::new();
        let iter = match reader.raw_iter(si) {
            Ok(it) => it,
            Err(e) => {
                report(None, format!("cannot read: {e}"));
                continue;
            }
        };
        for item in iter {
            let (key, value) = match item {
                Ok(kv) => kv,
                Err(e) => {
                    report(None, format!("LMDB error while walking records: {e}"));
                    break;
                }
            };
            let Ok(k) = <[u8; 8]>::try_from(key) else {
                report(None, format!("stray key of {} bytes", key.len()));
                continue;
            };
            let index = u64::from_be_bytes(k);
            if index < expect || index >= end {
                report(
                    Some(index),
                    format!(
                        "key out of place (expected {expect}, shard holds {}..{end})",
                        entry.first_index
                    ),
                );
                continue;
            }
            if index > expect {
                report(
                    Some(expect),
                    format!("records {expect}..{index} are missing"),
                );
            }
            expect = index + 1;
            checked += 1;
            let rec = match RecordHeader::parse_value(value, &shard_path, index) {
                Ok(r) => r,
                Err(e) => {
                    report(Some(index), e.to_string());
                    continue;
                }
            };
            if let Err(e) = rec.check_crc() {
                report(Some(index), e.to_string());
                continue;
            }
            let h = rec.header;
            if h.encoding != m.encoding {
                report(
                    Some(index),
                    format!(
                        "encoding {} differs from the manifest's {}",
                        h.encoding, m.encoding
                    ),
                );
            }
            if h.label as usize >= m.classes.len() {
                report(
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
                        report(
                            Some(index),
                            format!(
                                "raw payload {} bytes, {}x{}x{} needs {want}",
                                h.payload_len, h.height, h.width, h.channels
                            ),
                        );
                    }
                    if let Some(rs) = m.raw_size {
                        if (rs.height, rs.width, rs.channels) != (h.height, h.width, h.channels) {
                            report(Some(index), "raw size differs from the manifest".into());
                        }
                    }
                }
                Encoding::Jpeg if decode => to_decode.push((index, h, rec.payload)),
                Encoding::Jpeg => {}
            }
        }
        if expect < end {
            report(Some(expect), format!("records {expect}..{end} are missing"));
        }
        let problems: Vec<(u64, String)> = to_decode
            .par_iter()
            .filter_map(|(index, h, payload)| match decoder.decode_to_vec(payload) {
                Ok((info, _)) if (info.width, info.height) != (h.width, h.height) => Some((
                    *index,
                    format!(
                        "decodes to {}x{}, header says {}x{}",
                        info.width, info.height, h.width, h.height
                    ),
                )),
                Ok(_) => None,
                Err(e) => Some((*index, format!("does not decode: {e}"))),
            })
            .collect();
        decoded += to_decode.len() as u64;
        for (index, problem) in problems {
            report(Some(index), problem);
        }
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

/// Checks shard `si` as a whole before LMDB walks it: the file is the one opened, its size
/// and digest are the manifest's. `Some(problem)` means its records must not be read.
fn whole_file_problem(
    reader: &crate::DatasetReader,
    si: usize,
    entry: &crate::ShardEntry,
    kind: DigestKind,
) -> Option<String> {
    const SKIPPED: &str = "its records are not read (LMDB trusts the file)";
    if let Err(e) = reader.check_unchanged(si) {
        return Some(format!("{e}; {SKIPPED}"));
    }
    let path = reader.shard_path(si);
    let digest = std::fs::File::open(path)
        .map_err(|e| FormatError::io(path, e))
        .and_then(|mut f| digest_file(path, &mut f, kind));
    let (len, got) = match digest {
        Ok(d) => d,
        Err(e) => return Some(format!("cannot read: {e}; {SKIPPED}")),
    };
    // Hashed by path: the file must still be the mapped one, unchanged while hashed.
    if let Err(e) = reader.check_unchanged(si) {
        return Some(format!("{e}; {SKIPPED}"));
    }
    if len != entry.bytes {
        return Some(format!(
            "file is {len} bytes, manifest says {}; {SKIPPED}",
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
            "file {name} is {got:0width$x}, manifest says {w:0width$x}: the file was altered; {SKIPPED}"
        )),
        None => Some(format!("the manifest has no {name} for this shard; {SKIPPED}")),
    }
}
