//! What is wrong with a raw record's geometry, as `verify` and `inspect --record` tell it
//! (the loader refuses the same records with errors of its own).

use crate::record::RecordHeader;
use crate::RawSize;

/// The problems of raw record header `h` in a dataset whose manifest says `expected`:
/// a payload that is not its sides' product, a channel count a raw record cannot have,
/// a size other than the manifest's. Empty for a sound one.
pub(crate) fn raw_problems(h: &RecordHeader, expected: Option<RawSize>) -> Vec<String> {
    let size = RawSize {
        height: h.height,
        width: h.width,
        channels: h.channels,
    };
    let mut problems = Vec::new();
    // Checked: a damaged header's sides can multiply past u64.
    let want = size.bytes();
    if want != Some(u64::from(h.payload_len)) {
        let want = want.map_or("more than 2^64".into(), |w| w.to_string());
        problems.push(format!(
            "raw payload {} bytes, {}x{}x{} needs {want}",
            h.payload_len, h.height, h.width, h.channels
        ));
    }
    if !crate::RAW_CHANNELS.contains(&h.channels) {
        problems.push(format!(
            "raw record with {} channels (a raw record holds 1 or 3)",
            h.channels
        ));
    }
    if expected.is_some_and(|e| e != size) {
        problems.push("raw size differs from the manifest".into());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Encoding;

    fn header(height: u32, width: u32, channels: u8, payload_len: u32) -> RecordHeader {
        RecordHeader {
            encoding: Encoding::Raw,
            height,
            width,
            channels,
            label: 0,
            payload_len,
            crc32c: 0,
        }
    }

    #[test]
    fn a_raw_header_is_held_to_its_payload_and_the_manifests_size() {
        let size = RawSize {
            height: 6,
            width: 8,
            channels: 3,
        };
        assert!(raw_problems(&header(6, 8, 3, 144), Some(size)).is_empty());
        // The same bytes as another shape: sound in itself, not the dataset's size.
        assert_eq!(
            raw_problems(&header(1, 48, 3, 144), Some(size)),
            ["raw size differs from the manifest"]
        );
        assert!(raw_problems(&header(1, 48, 3, 144), None).is_empty());
        let overflow = raw_problems(&header(0x8000_0180, 2, 1, 768), Some(size));
        assert_eq!(overflow.len(), 2, "{overflow:?}");
        assert!(overflow[0].contains("needs 4294968064"), "{overflow:?}");
        assert!(raw_problems(&header(6, 8, 2, 96), None)[0].contains("2 channels"));
    }
}
