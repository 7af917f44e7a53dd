//! Telling, on the jpeg-decoder route, a scan whose data ran out.
//!
//! jpeg-decoder, like zune-jpeg, decodes the rest of a scan from zero bits once the scan's
//! data ends at a marker, and returns Ok: a file cut short and closed with an end-of-image
//! marker (a "repaired" download) decodes with made-up rows. Our zune-jpeg fork reports
//! this; jpeg-decoder is not ours to patch, and says nothing. So its files are decoded a
//! second time, from a copy with bytes inserted where each scan's data ends. A complete
//! scan never reads past its last block, and jpeg-decoder skips stray bytes before the next
//! marker, as libjpeg does, so its pixels stay the same; a scan that ran out reads the
//! inserted bytes instead of zero bits, and its pixels change (or its codes turn invalid).
//! That doubles the decode time of the files that take this route (sequential files in
//! several scans, unusual sampling factors), a small share of real datasets.

use crate::probe::scan_data_ends;

/// What is inserted: no `0xFF` (it would start a marker), and bits that decode otherwise
/// than zeros, for longer than any one block's codes.
const PAD: [u8; 64] = [0xA5; 64];

/// `data` with [`PAD`] before the marker that ends each scan of the primary image; `None`
/// when no scan ends at a marker (the decoders fail on such a file anyway).
pub(crate) fn padded_at_scan_ends(data: &[u8]) -> Option<Vec<u8>> {
    let ends = scan_data_ends(data);
    if ends.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(data.len() + ends.len() * PAD.len());
    let mut from = 0;
    for end in ends {
        out.extend_from_slice(&data[from..end]);
        out.extend_from_slice(&PAD);
        from = end;
    }
    out.extend_from_slice(&data[from..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_goes_before_the_fill_bytes_of_each_scan_end() {
        let mut jpeg = vec![0xFF, 0xD8];
        for data in [[1u8, 0xFF, 0x00, 2].as_slice(), &[3, 0xFF, 0xD0, 4, 0xFF]] {
            jpeg.extend_from_slice(&[0xFF, 0xDA, 0, 3, 1]);
            jpeg.extend_from_slice(data);
        }
        jpeg.extend_from_slice(&[0xFF, 0xD9]);
        let padded = padded_at_scan_ends(&jpeg).unwrap();
        let mut want = jpeg[..11].to_vec();
        want.extend_from_slice(&PAD);
        want.extend_from_slice(&jpeg[11..20]);
        want.extend_from_slice(&PAD);
        want.extend_from_slice(&jpeg[20..]);
        assert_eq!(padded, want);
        // No end-of-image marker: nothing to pad.
        assert_eq!(padded_at_scan_ends(&jpeg[..jpeg.len() - 2]), None);
    }
}
