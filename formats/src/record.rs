//! The value stored under each key: a fixed 32-byte header followed by the payload.
//!
//! Layout (all integers little-endian; see docs/FORMAT.md):
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 4 | magic `b"STKR"` |
//! | 4 | 2 | record version (1) |
//! | 6 | 1 | encoding: 0 = JPEG, 1 = raw HWC u8 |
//! | 7 | 1 | channels |
//! | 8 | 4 | height |
//! | 12 | 4 | width |
//! | 16 | 4 | label |
//! | 20 | 4 | payload length in bytes |
//! | 24 | 4 | CRC32C of the payload |
//! | 28 | 4 | CRC32C of bytes 0..28 of this header |

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::FormatError;

/// Magic bytes at the start of every record.
pub const RECORD_MAGIC: [u8; 4] = *b"STKR";
/// Record layout version written by this build.
pub const RECORD_VERSION: u16 = 1;
/// Size of the fixed record header in bytes.
pub const HEADER_LEN: usize = 32;
/// The channel counts a raw record may have: gray or RGB, as the loader reads them. The
/// writer refuses others and `verify` reports them.
pub const RAW_CHANNELS: [u8; 2] = [1, 3];

/// How a record's payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// A complete JPEG file (original bytes or re-encoded).
    Jpeg,
    /// Decoded pixels, row-major HWC, u8, `height * width * channels` bytes.
    Raw,
}

impl Encoding {
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            Encoding::Jpeg => 0,
            Encoding::Raw => 1,
        }
    }

    pub(crate) fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Encoding::Jpeg),
            1 => Some(Encoding::Raw),
            _ => None,
        }
    }

    /// The lowercase name used in the manifest and the CLI (`jpeg`, `raw`).
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Jpeg => "jpeg",
            Encoding::Raw => "raw",
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The decoded fixed header of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordHeader {
    /// Payload encoding.
    pub encoding: Encoding,
    /// Image height in pixels.
    pub height: u32,
    /// Image width in pixels.
    pub width: u32,
    /// Channels of the image (3 for RGB, 1 for grayscale; for JPEG the decoded output channels).
    pub channels: u8,
    /// Class label.
    pub label: u32,
    /// Payload length in bytes.
    pub payload_len: u32,
    /// CRC32C (Castagnoli) of the payload.
    pub crc32c: u32,
}

impl RecordHeader {
    /// Serializes the header into its 32-byte on-disk form (the header CRC is computed here).
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::{Encoding, RecordHeader};
    /// let h = RecordHeader { encoding: Encoding::Raw, height: 2, width: 3, channels: 3,
    ///                        label: 7, payload_len: 18, crc32c: 0 };
    /// let bytes = h.to_bytes();
    /// assert_eq!(&bytes[..4], b"STKR");
    /// assert_eq!(RecordHeader::parse(&bytes).unwrap(), h);
    /// ```
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&RECORD_MAGIC);
        b[4..6].copy_from_slice(&RECORD_VERSION.to_le_bytes());
        b[6] = self.encoding.to_byte();
        b[7] = self.channels;
        b[8..12].copy_from_slice(&self.height.to_le_bytes());
        b[12..16].copy_from_slice(&self.width.to_le_bytes());
        b[16..20].copy_from_slice(&self.label.to_le_bytes());
        b[20..24].copy_from_slice(&self.payload_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.crc32c.to_le_bytes());
        let hcrc = crc32c::crc32c(&b[0..28]);
        b[28..32].copy_from_slice(&hcrc.to_le_bytes());
        b
    }

    /// Parses a 32-byte header, checking magic, version, encoding and header CRC.
    ///
    /// # Errors
    ///
    /// Returns a static description of the first problem found.
    pub fn parse(b: &[u8]) -> Result<RecordHeader, &'static str> {
        if b.len() < HEADER_LEN {
            return Err("shorter than the 32-byte header");
        }
        if b[0..4] != RECORD_MAGIC {
            return Err("bad magic (not a stoker record)");
        }
        let le32 = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if le32(28) != crc32c::crc32c(&b[0..28]) {
            return Err("header CRC32C mismatch");
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != RECORD_VERSION {
            return Err("unsupported record version");
        }
        let encoding = Encoding::from_byte(b[6]).ok_or("unknown encoding byte")?;
        Ok(RecordHeader {
            encoding,
            channels: b[7],
            height: le32(8),
            width: le32(12),
            label: le32(16),
            payload_len: le32(20),
            crc32c: le32(24),
        })
    }

    /// Parses a whole stored value (header + payload) as read from a shard.
    pub(crate) fn parse_value<'a>(
        value: &'a [u8],
        shard: &Path,
        index: u64,
    ) -> Result<Record<'a>, FormatError> {
        let header = RecordHeader::parse(value).map_err(|reason| {
            if value.len() < HEADER_LEN {
                FormatError::TruncatedRecord {
                    shard: shard.to_path_buf(),
                    index,
                    got: value.len() as u64,
                    want: HEADER_LEN as u64,
                }
            } else {
                FormatError::BadHeader {
                    shard: shard.to_path_buf(),
                    index,
                    reason,
                }
            }
        })?;
        let want = HEADER_LEN as u64 + u64::from(header.payload_len);
        if value.len() as u64 != want {
            return Err(FormatError::TruncatedRecord {
                shard: shard.to_path_buf(),
                index,
                got: value.len() as u64,
                want,
            });
        }
        Ok(Record {
            index,
            header,
            payload: &value[HEADER_LEN..],
        })
    }
}

/// One sample as read from a shard: its header and a payload borrowed from the memory map.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The dataset index of this record.
    pub index: u64,
    /// The decoded header.
    pub header: RecordHeader,
    /// The payload bytes (JPEG file or raw pixels), borrowed from the shard's memory map.
    pub payload: &'a [u8],
}

impl Record<'_> {
    /// Checks the payload against the CRC32C stored in the header.
    ///
    /// # Errors
    ///
    /// [`FormatError::CrcMismatch`] when the payload was altered.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::{Encoding, Record, RecordHeader};
    /// let payload = [1u8, 2, 3];
    /// let header = RecordHeader { encoding: Encoding::Raw, height: 1, width: 1, channels: 3,
    ///     label: 0, payload_len: 3, crc32c: crc32c::crc32c(&payload) };
    /// let rec = Record { index: 0, header, payload: &payload };
    /// assert!(rec.check_crc().is_ok());
    /// ```
    pub fn check_crc(&self) -> Result<(), FormatError> {
        let got = crc32c::crc32c(self.payload);
        if got == self.header.crc32c {
            Ok(())
        } else {
            Err(FormatError::CrcMismatch {
                index: self.index,
                got,
                want: self.header.crc32c,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RecordHeader {
        RecordHeader {
            encoding: Encoding::Jpeg,
            height: 375,
            width: 500,
            channels: 3,
            label: 12,
            payload_len: 4,
            crc32c: crc32c::crc32c(b"abcd"),
        }
    }

    #[test]
    fn header_round_trips_and_layout_is_fixed() {
        let h = sample();
        let b = h.to_bytes();
        assert_eq!(&b[0..4], b"STKR");
        assert_eq!(u16::from_le_bytes([b[4], b[5]]), 1);
        assert_eq!(b[6], 0);
        assert_eq!(b[7], 3);
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 375);
        assert_eq!(u32::from_le_bytes(b[12..16].try_into().unwrap()), 500);
        assert_eq!(u32::from_le_bytes(b[16..20].try_into().unwrap()), 12);
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 4);
        assert_eq!(RecordHeader::parse(&b).unwrap(), h);
    }

    #[test]
    fn every_flipped_header_bit_is_rejected() {
        let b = sample().to_bytes();
        for byte in 0..HEADER_LEN {
            for bit in 0..8 {
                let mut c = b;
                c[byte] ^= 1 << bit;
                assert!(RecordHeader::parse(&c).is_err(), "byte {byte} bit {bit}");
            }
        }
    }

    #[test]
    fn value_length_must_match_header() {
        let h = sample();
        let mut v = h.to_bytes().to_vec();
        v.extend_from_slice(b"abc");
        let err = RecordHeader::parse_value(&v, Path::new("s"), 5).unwrap_err();
        assert!(matches!(
            err,
            FormatError::TruncatedRecord {
                index: 5,
                got: 35,
                want: 36,
                ..
            }
        ));
        v.push(b'd');
        let r = RecordHeader::parse_value(&v, Path::new("s"), 5).unwrap();
        assert_eq!(r.payload, b"abcd");
        r.check_crc().unwrap();
    }
}
