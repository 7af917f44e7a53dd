//! `manifest.json`: what a dataset holds and how it was made. Written last, so its presence
//! marks a finished dataset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Encoding, FormatError};

/// File name of the manifest at the dataset root.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Dataset format version written by this build. Version 2 replaced the shards' whole-file
/// CRC32C (which a consistent rewrite of a record header leaves unchanged, since each record
/// carries its own CRC) by an xxh3-64 digest; version 1 datasets are still read.
pub const FORMAT_VERSION: u32 = 2;
/// Largest `manifest.json` read: a dataset whose manifest is larger cannot be opened (so a
/// writer can refuse class lists that would make one).
pub const MAX_MANIFEST_BYTES: u64 = 256 << 20;
/// Oldest format version this build reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;
/// The least a record takes in a shard file: its 32-byte header and 8-byte key. Bounds the
/// record counts a manifest may claim for the bytes it declares.
const MIN_RECORD_BYTES: u64 = 40;
/// Value of the manifest's `format` field.
pub const FORMAT_NAME: &str = "stoker-lmdb";

/// The dataset description stored in `manifest.json`.
///
/// Unknown fields here (and in [`Provenance`], the audit and [`PartInfo`]) are read past:
/// they only inform. Those of [`ShardEntry`] and [`RawSize`] are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `"stoker-lmdb"`.
    pub format: String,
    /// Format version ([`FORMAT_VERSION`]).
    pub format_version: u32,
    /// Number of samples; indices are `0..samples`.
    pub samples: u64,
    /// Payload encoding of every record.
    pub encoding: Encoding,
    /// Fixed image size of a raw dataset (every record has it); `None` for JPEG datasets.
    pub raw_size: Option<RawSize>,
    /// Class names; label `i` is `classes[i]`. At most 2^20 (labels are below it).
    #[serde(deserialize_with = "crate::bounded::classes")]
    pub classes: Vec<String>,
    /// The shards in index order.
    pub shards: Vec<ShardEntry>,
    /// Total bytes of all shard files.
    pub bytes: u64,
    /// Sum of payload bytes (without headers and LMDB overhead).
    pub payload_bytes: u64,
    /// How the dataset was made.
    pub provenance: Provenance,
    /// JPEG compatibility audit of the source files, when made by the converter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<crate::convert::audit::Audit>,
    /// Set only in the manifest of one part of a partitioned conversion (`convert --part`):
    /// which slice of which listing it holds, so `merge` can refuse parts that do not belong
    /// together. A merged or single-process dataset has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<PartInfo>,
    /// The source map, which input each record came from ([`crate::SourceMap`]): written
    /// by `convert` and `merge`; absent in datasets made before it, and in datasets written
    /// from samples or by hand. Only informs: builds before it read past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<SourcesEntry>,
}

/// The manifest's `sources`: the source map file beside it (docs/FORMAT.md, "Source map").
///
/// Unknown fields are read past, as everywhere outside the shard entries: the map only
/// informs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcesEntry {
    /// File name relative to the dataset root (`sources.bin`).
    pub file: String,
    /// Records it names: the dataset's `samples`.
    pub records: u64,
    /// File size in bytes.
    pub bytes: u64,
    /// xxh3-64 of the whole file, written as 16 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_digest")]
    pub xxh3: Option<u64>,
}

/// Which slice of a conversion's input listing one part holds (see [`Manifest::part`]), or,
/// with `written`, which part of a writing from several processes ([`crate::SampleWriter`]
/// with a part) it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartInfo {
    /// This part's index, `0..count`.
    pub index: u32,
    /// How many parts the listing was cut into.
    pub count: u32,
    /// Inputs in the whole listing.
    pub inputs: u64,
    /// The part's inputs are `first_input..end_input` of the sorted listing.
    pub first_input: u64,
    /// End (exclusive) of the part's inputs.
    pub end_input: u64,
    /// CRC32C of the whole listing (paths, labels, classes) and the output flags, written
    /// as 8 hex digits: equal in every part of one conversion. For a written part, of what
    /// the writers of one writing must agree on: the classes and the output flags.
    pub listing: String,
    /// A part written by a [`crate::SampleWriter`], which has no listing: its samples
    /// follow the previous part's, so `merge` checks no slice. Such a part has `inputs` 0,
    /// `first_input` 0 and `end_input` the samples given to it, so that a `merge` built
    /// before this field (which reads past it) refuses every set of written parts: its
    /// slice check wants `0..0` of a 0-input listing, which only an empty part has, and it
    /// refuses parts that are all empty. Absent (false) in a converted part.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub written: bool,
    /// A written part's records as one number, 16 hex digits: the wrapping sum over its
    /// records of a hash of each one's header (which holds its payload's CRC32C), the same
    /// for the same records in any order and any shards, so that `merge` refuses parts
    /// whose writers were each given every sample even when they wrote them in another
    /// order. Only informs (read past by builds before 2026-12-04); absent in a converted
    /// part, and in written parts of those builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<String>,
}

/// Fixed `height × width × channels` of a raw dataset.
///
/// Unknown fields are refused, as in [`ShardEntry`]: these say how every record is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSize {
    /// Height in pixels.
    pub height: u32,
    /// Width in pixels.
    pub width: u32,
    /// Channels per pixel.
    pub channels: u8,
}

impl RawSize {
    /// The size a record header states (its sides and channels): a raw record's size,
    /// which [`raw_problems`](crate::raw_problems) holds its payload to.
    pub fn of(header: &crate::RecordHeader) -> RawSize {
        RawSize {
            height: header.height,
            width: header.width,
            channels: header.channels,
        }
    }

    /// The bytes of a record of this size, `height × width × channels`; `None` past u64
    /// (u32 sides and u8 channels reach 2⁷²), which no record can be.
    pub fn bytes(&self) -> Option<u64> {
        u64::from(self.height)
            .checked_mul(u64::from(self.width))
            .and_then(|px| px.checked_mul(u64::from(self.channels)))
    }
}

/// One shard file.
///
/// Unknown fields are refused: an entry's fields say where its records are, and a reader
/// that read past one it did not know would take other records for them (v2 readers built
/// before `key_base` do exactly that with a merged dataset). A new field that changes where
/// or how records are read also raises [`FORMAT_VERSION`], so that builds from before this
/// rule refuse it too (docs/FORMAT.md, "Fields a reader does not know").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardEntry {
    /// File name relative to the dataset root (`shard-00000.lmdb`).
    pub file: String,
    /// Dataset index of the shard's first record.
    pub first_index: u64,
    /// Number of records in the shard (keys `key_base..key_base + count`).
    pub count: u64,
    /// LMDB key of the shard's first record, when it is not `first_index`: a merged
    /// dataset references the shards of its parts unchanged, and each part numbered its
    /// records from 0. Absent (the usual case), keys are dataset indices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_base: Option<u64>,
    /// File size in bytes.
    pub bytes: u64,
    /// xxh3-64 of the whole file, written as 16 hex digits (format version 2).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_digest")]
    pub xxh3: Option<u64>,
    /// CRC32C of the whole file (format version 1 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<u32>,
}

impl ShardEntry {
    /// The LMDB key under which this shard stores dataset index `index` (which must be in
    /// `first_index..first_index + count`).
    ///
    /// # Examples
    ///
    /// ```
    /// let s = stoker_formats::ShardEntry {
    ///     file: "shard-00003.lmdb".into(), first_index: 100, count: 10, key_base: Some(40),
    ///     bytes: 4096, xxh3: Some(0), crc32c: None,
    /// };
    /// assert_eq!(s.key_of(105), 45);
    /// ```
    pub fn key_of(&self, index: u64) -> u64 {
        index - self.first_index + self.first_key()
    }

    /// The LMDB key of the shard's first record.
    pub fn first_key(&self) -> u64 {
        self.key_base.unwrap_or(self.first_index)
    }
}

/// `Option<u64>` as a 16-digit hex string: JSON numbers above 2^53 do not survive every
/// JSON reader.
mod hex_digest {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_str(&format!("{d:016x}")),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        if text.len() != 16 {
            return Err(serde::de::Error::custom(format!(
                "xxh3 digest {text:?} is not 16 hex digits"
            )));
        }
        u64::from_str_radix(&text, 16)
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("xxh3 digest {text:?} is not hex")))
    }
}

/// How a dataset was made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Tool name (`stoker` or whatever wrote through [`crate::DatasetWriter`]).
    pub tool: String,
    /// Tool version.
    pub tool_version: String,
    /// The source the samples came from (a directory or list file, as given).
    pub source: String,
    /// The options that shaped the output, by name (at most 4096 when read).
    #[serde(deserialize_with = "crate::bounded::map")]
    pub flags: BTreeMap<String, String>,
}

impl Provenance {
    /// Provenance naming this crate as the tool.
    ///
    /// # Examples
    ///
    /// ```
    /// let p = stoker_formats::Provenance::stoker("hand-made");
    /// assert_eq!(p.tool, "stoker");
    /// ```
    pub fn stoker(source: impl Into<String>) -> Self {
        Provenance {
            tool: "stoker".into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            source: source.into(),
            flags: BTreeMap::new(),
        }
    }
}

/// The two fields every version of the manifest has, read before the rest.
#[derive(Deserialize)]
struct Identity {
    format: String,
    format_version: u32,
}

impl Identity {
    /// Refuses another format, or a version this build does not read.
    fn check(&self, path: &Path) -> Result<(), FormatError> {
        if self.format != FORMAT_NAME {
            return Err(FormatError::InvalidManifest {
                path: path.to_path_buf(),
                reason: format!("format is {:?}, want {FORMAT_NAME:?}", self.format),
            });
        }
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&self.format_version) {
            return Err(FormatError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: self.format_version,
                oldest: OLDEST_FORMAT_VERSION,
                supported: FORMAT_VERSION,
            });
        }
        Ok(())
    }
}

/// The decoder's limits with `max_pixels` as the conversion was given it: what every JPEG
/// record of a dataset passed, so what its readers apply too ([`Manifest::decode_limits`]).
pub(crate) fn conversion_limits(max_pixels: u64) -> stoker_decode::Limits {
    stoker_decode::Limits {
        max_pixels,
        ..stoker_decode::Limits::default()
    }
}

impl Manifest {
    /// The limits the conversion checked every JPEG record against: the decoder's
    /// defaults, with the `max_pixels` it was given (`convert --max-pixels`) where it
    /// recorded one. Readers decode with them (verify, the loader), so that a record the
    /// conversion accepted as larger than the default limit is not then called bad. A
    /// dataset that recorded none (another tool's) gets the defaults.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Converted with the default `--max-pixels` (100 Mpx).
    /// let ds = stoker_formats::Dataset::open(stoker_testdata::dir().join("golden/v2/jpeg"))?;
    /// assert_eq!(ds.manifest().decode_limits(), stoker_decode::Limits::default());
    /// # Ok(()) }
    /// ```
    pub fn decode_limits(&self) -> stoker_decode::Limits {
        let recorded = self.provenance.flags.get("max_pixels");
        match recorded.and_then(|n| n.parse::<u64>().ok()) {
            Some(n) if n > 0 => conversion_limits(n),
            _ => stoker_decode::Limits::default(),
        }
    }

    /// Reads and validates `DIR/manifest.json`.
    ///
    /// # Errors
    ///
    /// I/O errors, [`FormatError::InvalidManifest`] for malformed or inconsistent content and
    /// [`FormatError::UnsupportedVersion`].
    pub fn read(dir: &Path) -> Result<Manifest, FormatError> {
        let path = dir.join(MANIFEST_FILE);
        // Bounded and regular-file-only like any input: a manifest of a million classes and
        // a thousand shards is a few tens of megabytes.
        let text = crate::read_input_file(&path, MAX_MANIFEST_BYTES).map_err(|e| match e {
            // The input limit's message names `--max-file-size`, a convert flag that does
            // not apply here (and that `inspect` or `verify` do not have).
            FormatError::FileTooLarge { bytes, limit, .. } => FormatError::InvalidManifest {
                path: path.clone(),
                reason: format!(
                    "{bytes} bytes, over the manifest size limit of {limit} bytes (a manifest of a million classes and a thousand shards is a few tens of MB): not a stoker manifest, or a damaged one"
                ),
            },
            e => e,
        })?;
        let invalid = |e: serde_json::Error| FormatError::InvalidManifest {
            path: path.clone(),
            reason: e.to_string(),
        };
        // The version first: a newer version may change any other field (a new encoding, a
        // field gone), and then "version 3 is not supported" says what to do where a
        // parse error ("unknown variant `webp`") would not.
        let id: Identity = serde_json::from_slice(&text).map_err(invalid)?;
        id.check(&path)?;
        let m: Manifest = serde_json::from_slice(&text).map_err(invalid)?;
        m.validate(&path)?;
        Ok(m)
    }

    /// Checks internal consistency: shards contiguous from 0, counts sum to `samples`.
    pub(crate) fn validate(&self, path: &Path) -> Result<(), FormatError> {
        let bad = |reason: String| FormatError::InvalidManifest {
            path: path.to_path_buf(),
            reason,
        };
        Identity {
            format: self.format.clone(),
            format_version: self.format_version,
        }
        .check(path)?;
        let mut next = 0u64;
        let mut bytes = 0u64;
        for s in &self.shards {
            match (self.format_version, s.xxh3, s.crc32c) {
                (1, _, Some(_)) | (2, Some(_), None) => {}
                (1, _, None) => return Err(bad(format!("shard {} has no crc32c", s.file))),
                _ => {
                    return Err(bad(format!(
                        "shard {} needs exactly an xxh3 digest in format version {}",
                        s.file, self.format_version
                    )))
                }
            }
            // Checked before anything is sized by these counts (readers allocate per
            // sample): a shard cannot hold more records than its bytes have room for.
            if s.count > s.bytes / MIN_RECORD_BYTES {
                return Err(bad(format!(
                    "shard {} claims {} records in {} bytes (each takes at least {MIN_RECORD_BYTES})",
                    s.file, s.count, s.bytes
                )));
            }
            if s.first_index != next {
                return Err(bad(format!(
                    "shard {} starts at index {}, want {next}",
                    s.file, s.first_index
                )));
            }
            if s.count == 0 {
                return Err(bad(format!("shard {} is empty", s.file)));
            }
            if s.first_key().checked_add(s.count).is_none() {
                return Err(bad(format!("shard {} key_base overflows", s.file)));
            }
            // Empty, it named the dataset directory itself, read as a shard.
            if s.file.is_empty()
                || s.file.contains('/')
                || s.file.contains('\\')
                || s.file.starts_with('.')
            {
                return Err(bad(format!(
                    "shard file name {:?} is not a plain name",
                    s.file
                )));
            }
            next = next
                .checked_add(s.count)
                .ok_or_else(|| bad("shard record counts overflow".into()))?;
            bytes = bytes
                .checked_add(s.bytes)
                .ok_or_else(|| bad("shard sizes overflow".into()))?;
        }
        if next != self.samples {
            return Err(bad(format!(
                "shards hold {next} records, samples says {}",
                self.samples
            )));
        }
        if bytes != self.bytes {
            return Err(bad(format!(
                "shard sizes add up to {bytes}, bytes says {}",
                self.bytes
            )));
        }
        if (self.encoding == Encoding::Raw) != self.raw_size.is_some() && self.samples > 0 {
            return Err(bad("raw_size must be given exactly for raw datasets".into()));
        }
        if let Some(r) = self.raw_size {
            // A record's payload length is a u32: a larger raw size names records that
            // cannot exist, and readers that size buffers by it (the GPU path's staging)
            // would overflow on it.
            if r.bytes().is_none_or(|b| b > u64::from(u32::MAX)) {
                return Err(bad(format!(
                    "raw_size {}x{}x{} is more than the 4 GiB a record holds",
                    r.height, r.width, r.channels
                )));
            }
        }
        Ok(())
    }

    /// Serializes to the canonical pretty JSON written to disk (stable field order, trailing newline).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("manifest serializes");
        s.push('\n');
        s
    }

    /// Bytes of every shard file the manifest lists.
    pub fn shard_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.bytes).sum()
    }

    /// Path of shard `i` under the dataset root `dir`.
    pub fn shard_path(&self, dir: &Path, i: usize) -> PathBuf {
        dir.join(&self.shards[i].file)
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    #[test]
    fn an_oversized_manifest_is_refused_without_naming_a_convert_flag() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(dir.path().join(MANIFEST_FILE)).unwrap();
        // Sparse: no disk space is used.
        f.set_len(MAX_MANIFEST_BYTES + 1).unwrap();
        let e = Manifest::read(dir.path()).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e, FormatError::InvalidManifest { .. })
                && text.contains("manifest size limit")
                && !text.contains("--max-file-size"),
            "{text}"
        );
    }
}
