//! The frame header (SOFn) and scan header (SOS) segments: dimensions,
//! components, sampling factors and the process, checked as they are read.

use super::info::{ColorSpace, ImageInfo, Limits, Subsampling};
use crate::DecodeError;

/// The frame header as parsed, plus every component id (for SOS checks).
pub(super) struct Frame {
    pub(super) info: ImageInfo,
    pub(super) all_ids: Vec<u8>,
}

/// Parses a frame header (SOFn segment `seg`, at byte `offset`), checking
/// the pixel limit before anything else is read from it.
pub(super) fn parse_sof(
    limits: &Limits,
    marker: u8,
    seg: &[u8],
    offset: usize,
) -> Result<Frame, DecodeError> {
    let malformed = |what| DecodeError::Malformed { offset, what };
    if seg.len() < 6 {
        return Err(malformed("frame header shorter than 6 bytes"));
    }
    let precision = seg[0];
    let height = u16::from_be_bytes([seg[1], seg[2]]);
    let width = u16::from_be_bytes([seg[3], seg[4]]);
    let nf = seg[5];
    if nf == 0 {
        return Err(malformed("frame header with 0 components"));
    }
    if seg.len() < 6 + 3 * usize::from(nf) {
        return Err(malformed("frame header shorter than its component list"));
    }
    if width == 0 {
        return Err(malformed("width 0"));
    }
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limits.max_pixels {
        return Err(DecodeError::TooLarge {
            width: width.into(),
            height: height.into(),
            pixels,
            max_pixels: limits.max_pixels,
        });
    }
    let n = marker & 0x0F;
    let lossless = matches!(n, 3 | 7 | 11 | 15);
    if !lossless && !matches!(precision, 8 | 12) {
        return Err(malformed("sample precision not 8 or 12"));
    }
    if lossless && !(2..=16).contains(&precision) {
        return Err(malformed("lossless precision outside 2..=16"));
    }
    if height == 0 {
        return Err(DecodeError::Unsupported {
            what: "height defined by a DNL marker",
        });
    }
    let mut sampling = [(0u8, 0u8); 4];
    let mut all_ids = Vec::with_capacity(usize::from(nf));
    for i in 0..usize::from(nf) {
        let c = &seg[6 + 3 * i..9 + 3 * i];
        let (h, v) = (c[1] >> 4, c[1] & 0x0F);
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) {
            return Err(malformed("sampling factor outside 1..=4"));
        }
        if all_ids.contains(&c[0]) {
            return Err(malformed("duplicate component id"));
        }
        all_ids.push(c[0]);
        if i < 4 {
            sampling[i] = (h, v);
        }
    }
    let subsampling = classify(&sampling[..usize::from(nf).min(4)], nf);
    let info = ImageInfo {
        width: width.into(),
        height: height.into(),
        components: nf,
        color_space: ColorSpace::Other,
        subsampling,
        progressive: matches!(n, 2 | 6 | 10 | 14),
        arithmetic: n >= 8,
        lossless,
        hierarchical: matches!(n, 5 | 6 | 7 | 13 | 14 | 15),
        bit_depth: precision,
        exif_orientation: None,
        sof: n,
        scans: 0,
        multi_scan_sequential: false,
        restart_interval: 0,
        adobe_transform: None,
        adobe_malformed: false,
        sampling,
        standard_huffman_tables: false,
        adobe_rewrite: None,
        frame_offset: offset,
        first_scan_offset: 0,
    };
    Ok(Frame { info, all_ids })
}

/// Checks a scan header (SOS segment `seg`, at byte `offset`) against the
/// frame and returns its component count.
pub(super) fn parse_sos(seg: &[u8], f: &Frame, offset: usize) -> Result<u8, DecodeError> {
    let malformed = |what| DecodeError::Malformed { offset, what };
    let ns = *seg.first().ok_or(malformed("empty scan header"))?;
    if ns == 0 || ns > 4 || seg.len() < 1 + 2 * usize::from(ns) + 3 {
        return Err(malformed("scan header component count"));
    }
    for i in 0..usize::from(ns) {
        let id = seg[1 + 2 * i];
        if !f.all_ids.contains(&id) {
            return Err(malformed("scan names a component not in the frame"));
        }
    }
    Ok(ns)
}

/// Names the subsampling from the per-component sampling factors.
fn classify(s: &[(u8, u8)], nf: u8) -> Subsampling {
    if nf == 1 {
        return Subsampling::Gray;
    }
    let (h0, v0) = s[0];
    // Every other component must share one factor pair that divides the first's.
    let (hc, vc) = s[1];
    if s[1..].iter().any(|&c| c != (hc, vc)) || h0 % hc != 0 || v0 % vc != 0 {
        return Subsampling::Other;
    }
    match (h0 / hc, v0 / vc) {
        (1, 1) => Subsampling::S444,
        (2, 1) => Subsampling::S422,
        (2, 2) => Subsampling::S420,
        (1, 2) => Subsampling::S440,
        (4, 1) => Subsampling::S411,
        (4, 2) => Subsampling::S410,
        _ => Subsampling::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_names_standard_sampling() {
        assert_eq!(classify(&[(2, 2), (1, 1), (1, 1)], 3), Subsampling::S420);
        assert_eq!(classify(&[(4, 1), (1, 1), (1, 1)], 3), Subsampling::S411);
        assert_eq!(classify(&[(3, 2), (1, 1), (1, 1)], 3), Subsampling::Other);
        assert_eq!(classify(&[(2, 2), (1, 1), (2, 1)], 3), Subsampling::Other);
        assert_eq!(classify(&[(1, 1)], 1), Subsampling::Gray);
    }
}
