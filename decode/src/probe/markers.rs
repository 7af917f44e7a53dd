//! The header walk behind [`probe`]: marker segments in order, up to the
//! first scan of an interleaved sequential file, over every scan otherwise
//! (skipping entropy-coded data), then the checks on what was found.

use super::entropy::entropy_coded_end;
use super::exif;
use super::frame::{parse_sof, parse_sos, Frame};
use super::info::{ColorSpace, ImageInfo, Limits, MAX_SCANS};
use crate::DecodeError;

/// Reads the headers of a JPEG and reports its properties.
///
/// Walks the marker segments up to the first scan (or, for progressive and
/// non-interleaved files, over all scans, skipping entropy-coded bytes),
/// parsing SOFn, DHT/DAC, DRI, SOS, APP1 EXIF orientation and APP14 Adobe.
/// Never allocates in proportion to the declared size.
///
/// # Examples
/// ```
/// use stoker_decode::{probe, Limits, Subsampling};
/// let data = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
///     "/../testdata/conformance/core/go__video-001.q50.420.jpeg")).unwrap();
/// let info = probe(&data, &Limits::default()).unwrap();
/// assert_eq!((info.width, info.height), (150, 103));
/// assert_eq!(info.subsampling, Subsampling::S420);
/// assert!(info.hardware_decodable());
/// ```
///
/// # Errors
/// [`DecodeError::Empty`], [`DecodeError::NotJpeg`], [`DecodeError::Truncated`]
/// (no complete frame header and scan header), [`DecodeError::Malformed`],
/// [`DecodeError::TooLarge`] (checked against `limits.max_pixels` from the frame
/// header), [`DecodeError::Unsupported`] (height defined by DNL).
pub fn probe(data: &[u8], limits: &Limits) -> Result<ImageInfo, DecodeError> {
    Parser { data, limits }.run()
}

struct Parser<'a> {
    data: &'a [u8],
    limits: &'a Limits,
}

/// What the walk has found so far.
#[derive(Default)]
struct Headers {
    frame: Option<Frame>,
    exif_orientation: Option<u16>,
    adobe_transform: Option<u8>,
    adobe_malformed: bool,
    restart_interval: u16,
    scans: u16,
    multi_scan: bool,
    component_ids_rgb: bool,
    hit_eoi: bool,
    /// The walk stopped at the first scan of an interleaved sequential file.
    single_scan: bool,
    /// A DHT segment came before the first scan.
    tables_before_scan: bool,
    /// A JFIF APP0 segment came before the first scan.
    jfif: bool,
    /// Where the APP14 transform bytes before the first scan are, and their values.
    adobe_transforms: Vec<(usize, u8)>,
    /// Where the first scan header's marker is.
    first_scan_at: Option<usize>,
}

/// One marker segment: the marker, where it starts, and its bytes' range
/// (which may run past the end of the input).
struct Segment {
    marker: u8,
    /// Offset of the marker's `0xFF`.
    at: usize,
    /// The length field's value (the length bytes included).
    len: usize,
    /// First byte after the length field.
    start: usize,
    /// One past the segment's last byte.
    end: usize,
}

/// Where the walk goes after a segment.
enum Step {
    /// On from this offset.
    Next(usize),
    /// The walk is done.
    Stop,
}

impl Parser<'_> {
    fn truncated(&self, what: &'static str, offset: usize, need: usize) -> DecodeError {
        DecodeError::Truncated {
            what,
            offset,
            need,
            have: self.data.len().saturating_sub(offset),
        }
    }

    fn run(&self) -> Result<ImageInfo, DecodeError> {
        let d = self.data;
        if d.is_empty() {
            return Err(DecodeError::Empty);
        }
        if d.len() < 2 || d[0] != 0xFF || d[1] != 0xD8 {
            return Err(DecodeError::NotJpeg {
                first: d[..d.len().min(2)].to_vec(),
            });
        }
        let mut h = Headers::default();
        let pos = self.walk(&mut h)?;
        self.finish(h, pos)
    }

    /// Walks the marker segments from after SOI; returns the offset it stopped at.
    fn walk(&self, h: &mut Headers) -> Result<usize, DecodeError> {
        let d = self.data;
        let mut pos = 2usize;
        loop {
            // Find the next marker: skip garbage bytes before 0xFF (libjpeg
            // tolerates them with a warning) and fill bytes 0xFF 0xFF...
            while pos < d.len() && d[pos] != 0xFF {
                pos += 1;
            }
            while pos < d.len() && d[pos] == 0xFF {
                pos += 1;
            }
            if pos >= d.len() {
                break;
            }
            let marker = d[pos];
            let marker_at = pos - 1;
            pos += 1;
            match marker {
                // `FF 00` outside entropy-coded data is junk, not a marker:
                // libjpeg skips it (with a warning) and so do the decoders.
                // Read as a marker, its "length" could run past the end and
                // stop the walk before the scans that follow.
                0x00 | 0xD8 | 0x01 | 0xD0..=0xD7 => continue,
                0xD9 => {
                    h.hit_eoi = true;
                    break;
                }
                _ => {}
            }
            if pos + 2 > d.len() {
                return Err(self.truncated("segment length", pos, 2));
            }
            let len = usize::from(u16::from_be_bytes([d[pos], d[pos + 1]]));
            if len < 2 {
                return Err(DecodeError::Malformed {
                    offset: marker_at,
                    what: "segment length below 2",
                });
            }
            let s = Segment {
                marker,
                at: marker_at,
                len,
                start: pos + 2,
                end: pos + len,
            };
            match self.segment(h, &s)? {
                Step::Next(next) => pos = next,
                Step::Stop => break,
            }
        }
        Ok(pos)
    }

    /// Reads one segment into `h`.
    fn segment(&self, h: &mut Headers, s: &Segment) -> Result<Step, DecodeError> {
        let d = self.data;
        let complete = s.end <= d.len();
        let seg = &d[s.start..s.end.min(d.len())];
        match s.marker {
            0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                if !complete {
                    return Err(self.truncated("frame header (SOF)", s.at, s.len + 2));
                }
                if h.frame.is_some() {
                    return Err(DecodeError::Malformed {
                        offset: s.at,
                        what: "second frame header (SOF) before EOI",
                    });
                }
                let f = parse_sof(self.limits, s.marker, seg, s.at)?;
                h.component_ids_rgb = f.all_ids == [b'R', b'G', b'B'];
                h.frame = Some(f);
            }
            0xDA => return self.scan(h, s, seg, complete),
            0xC4 if h.scans == 0 => h.tables_before_scan = true,
            // libjpeg settles the colour space at the first scan header, and takes
            // an APP0 as JFIF only when it holds the whole JFIF header (14 bytes).
            0xE0 if h.scans == 0 && seg.len() >= 14 && seg.starts_with(b"JFIF\0") => h.jfif = true,
            0xDD if complete && seg.len() >= 2 => {
                h.restart_interval = u16::from_be_bytes([seg[0], seg[1]]);
            }
            0xE1 if h.exif_orientation.is_none() && seg.starts_with(b"Exif\0") => {
                h.exif_orientation = exif::orientation(seg.get(6..).unwrap_or(&[]));
            }
            0xEE if seg.starts_with(b"Adobe") => {
                if complete && seg.len() >= 12 {
                    if h.scans == 0 {
                        h.adobe_transform = Some(seg[11]);
                        h.adobe_transforms.push((s.start + 11, seg[11]));
                    }
                } else {
                    h.adobe_malformed = true;
                }
            }
            _ => {}
        }
        if !complete {
            // A truncated segment other than SOF/SOS: the image data cannot follow.
            if h.frame.is_some() && h.scans > 0 {
                return Ok(Step::Stop);
            }
            return Err(self.truncated("marker segment", s.at, s.len + 2));
        }
        Ok(Step::Next(s.end))
    }

    /// Reads a scan header and skips its entropy-coded data; stops at the
    /// first scan of an interleaved sequential file (it holds the whole image).
    fn scan(
        &self,
        h: &mut Headers,
        s: &Segment,
        seg: &[u8],
        complete: bool,
    ) -> Result<Step, DecodeError> {
        let Some(f) = h.frame.as_ref() else {
            return Err(DecodeError::Malformed {
                offset: s.at,
                what: "scan (SOS) before frame header (SOF)",
            });
        };
        if !complete {
            return Err(self.truncated("scan header (SOS)", s.at, s.len + 2));
        }
        let ns = parse_sos(seg, f, s.at)?;
        h.first_scan_at.get_or_insert(s.at);
        h.scans = h.scans.saturating_add(1);
        if h.scans > MAX_SCANS {
            // Real files use ~10; thousands of tiny scans only make a
            // decoder slow (zune-jpeg refuses > 100, jpeg-decoder has no cap).
            return Err(DecodeError::Malformed {
                offset: s.at,
                what: "more than 1000 scans",
            });
        }
        let sequential = !f.info.progressive;
        if sequential && h.scans == 1 {
            if usize::from(ns) == usize::from(f.info.components) {
                // Interleaved sequential: the first scan holds the whole image.
                h.single_scan = true;
                return Ok(Step::Stop);
            }
            h.multi_scan = true;
        }
        // Skip the entropy-coded segment up to the next real marker.
        Ok(Step::Next(entropy_coded_end(self.data, s.end)))
    }

    /// The checks once the walk is done (a frame, a scan, the work limit)
    /// and the image's properties from what it found; `pos` is where it stopped.
    fn finish(&self, h: Headers, pos: usize) -> Result<ImageInfo, DecodeError> {
        let d = self.data;
        let Some(f) = h.frame else {
            return Err(if h.hit_eoi {
                DecodeError::Malformed {
                    offset: pos - 2,
                    what: "end of image (EOI) before any frame header (SOF)",
                }
            } else {
                self.truncated("frame header (SOF)", d.len(), 1)
            });
        };
        if h.scans == 0 {
            return Err(if h.hit_eoi {
                DecodeError::Malformed {
                    offset: pos - 2,
                    what: "end of image (EOI) before any scan (SOS)",
                }
            } else {
                self.truncated("scan header (SOS)", d.len(), 1)
            });
        }
        let mut info = f.info;
        // The work limit is checked against every scan a decoder could find,
        // not only those the walk counted: a walk stopped by a segment whose
        // length runs past the end (junk read as a marker, say) would count
        // too few, while the decoders resynchronise and decode the rest. An
        // interleaved sequential file's decode ends with its first scan (the
        // fallback decoder counts again before it decodes in full).
        let scans = if h.single_scan {
            u64::from(h.scans)
        } else {
            let end = if h.hit_eoi { pos } else { d.len() };
            u64::from(h.scans).max(info.scans_upper_bound(&d[..end]))
        };
        info.check_scan_work(scans, self.limits)?;
        info.scans = h.scans;
        info.multi_scan_sequential = h.multi_scan;
        info.exif_orientation = h.exif_orientation;
        info.adobe_transform = h.adobe_transform;
        info.adobe_malformed = h.adobe_malformed;
        info.restart_interval = h.restart_interval;
        info.first_scan_offset = h.first_scan_at.unwrap_or(0);
        // Progressive files define their tables scan by scan (optimized): the standard
        // ones would only decode garbage there.
        info.standard_huffman_tables =
            !h.tables_before_scan && !info.progressive && !info.arithmetic && !info.lossless;
        // libjpeg's reading of APP14 (jdapimin.c), which Pillow and torchvision give:
        // with 3 components a JFIF marker means YCbCr whatever APP14 says, and an
        // unknown transform is taken as YCbCr; with 4, an unknown one as YCCK. zune-jpeg
        // and jpeg-decoder read APP14 alone and refuse unknown values, so the CPU
        // decoders get a copy with the transform libjpeg uses written in.
        let transform = match (info.components, h.adobe_transform) {
            (3, Some(_)) if h.jfif => Some(1),
            (3, Some(t)) if t > 1 => Some(1),
            (4, Some(t)) if t != 0 && t != 2 => Some(2),
            (_, t) => t,
        };
        if let Some(t) = transform.filter(|&t| h.adobe_transforms.iter().any(|&(_, v)| v != t)) {
            let offsets = h.adobe_transforms.iter().map(|&(at, _)| at).collect();
            info.adobe_rewrite = Some((offsets, t));
        }
        info.color_space = match (info.components, transform) {
            (1, _) => ColorSpace::Gray,
            (3, Some(0)) => ColorSpace::Rgb,
            (3, Some(_)) => ColorSpace::YCbCr,
            (3, None) if h.component_ids_rgb => ColorSpace::Rgb,
            (3, None) => ColorSpace::YCbCr,
            (4, Some(2)) => ColorSpace::Ycck,
            (4, _) => ColorSpace::Cmyk,
            _ => ColorSpace::Other,
        };
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hundreds_of_scans_over_a_large_image_are_refused_before_decoding() {
        // SOI, SOF2 8000x8000 one component, then 30 one-component scans of one byte:
        // 64 MP × 30 scans is over the default 1.5 G work bound.
        let mut d = vec![0xFF, 0xD8];
        d.extend_from_slice(&[0xFF, 0xC2, 0, 11, 8, 0x1F, 0x40, 0x1F, 0x40, 1, 1, 0x11, 0]);
        for _ in 0..30 {
            d.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0, 0x55]);
        }
        d.extend_from_slice(&[0xFF, 0xD9]);
        match probe(&d, &Limits::default()) {
            Err(e @ DecodeError::TooMuchWork { scans: 30, .. }) => {
                assert!(e.is_bad_input());
                assert!(e.to_string().contains("30 scans"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        let roomy = Limits {
            max_scan_work: u64::MAX,
            ..Limits::default()
        };
        assert_eq!(probe(&d, &roomy).unwrap().scans, 30);
    }

    /// SOI, SOF2 8000x8000 one component, then `scans` one-component scans of
    /// one byte each, with `between` inserted after the first scan, and EOI.
    fn many_scans(scans: usize, between: &[u8]) -> Vec<u8> {
        let mut d = vec![0xFF, 0xD8];
        d.extend_from_slice(&[0xFF, 0xC2, 0, 11, 8, 0x1F, 0x40, 0x1F, 0x40, 1, 1, 0x11, 0]);
        for i in 0..scans {
            d.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0, 0x55]);
            if i == 0 {
                d.extend_from_slice(between);
            }
        }
        d.extend_from_slice(&[0xFF, 0xD9]);
        d
    }

    /// Regression: a stray `FF 00` between segments was read as a marker whose
    /// "length" ran past the end, which stopped the walk after one scan, so the
    /// work limit saw 1 scan while the decoders skipped the junk and decoded them all.
    #[test]
    fn stray_ff00_between_segments_is_skipped() {
        let comment_then_ff00 = [0xFF, 0xFE, 0, 4, b'h', b'i', 0xFF, 0x00];
        let d = many_scans(30, &comment_then_ff00);
        match probe(&d, &Limits::default()) {
            Err(DecodeError::TooMuchWork { scans: 30, .. }) => {}
            other => panic!("want TooMuchWork over 30 scans, got {other:?}"),
        }
        let roomy = Limits {
            max_scan_work: u64::MAX,
            ..Limits::default()
        };
        assert_eq!(probe(&d, &roomy).unwrap().scans, 30);
        // Right after SOI too (Pillow decodes such a file).
        let mut d = many_scans(2, &[]);
        d.splice(2..2, [0xFF, 0x00]);
        assert_eq!(probe(&d, &roomy).unwrap().scans, 2);
    }

    /// A segment whose length runs past the end stops the walk where it is;
    /// the scans after it still count for the work limit.
    #[test]
    fn scans_behind_a_segment_running_past_the_end_still_count_as_work() {
        let app15_past_the_end = [0xFF, 0xEF, 0xFF, 0xFF];
        let d = many_scans(30, &app15_past_the_end);
        match probe(&d, &Limits::default()) {
            Err(DecodeError::TooMuchWork { scans: 30, .. }) => {}
            other => panic!("want TooMuchWork over 30 scans, got {other:?}"),
        }
    }

    #[test]
    fn thousands_of_scans_are_refused() {
        // SOI, SOF2 1x1 one component, then 1001 one-component scans of one byte.
        let mut d = vec![0xFF, 0xD8, 0xFF, 0xC2, 0, 11, 8, 0, 1, 0, 1, 1, 1, 0x11, 0];
        for _ in 0..1001 {
            d.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0, 0x55]);
        }
        match probe(&d, &Limits::default()) {
            Err(DecodeError::Malformed { what, .. }) => assert_eq!(what, "more than 1000 scans"),
            other => panic!("want Malformed, got {other:?}"),
        }
        d.truncate(15 + 11 * 10);
        assert_eq!(probe(&d, &Limits::default()).unwrap().scans, 10);
    }

    #[test]
    fn limits_checked_before_anything_else() {
        // SOI, SOF0 declaring 60000x60000, nothing else.
        let d = [
            0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0xEA, 0x60, 0xEA, 0x60, 1, 1, 0x11, 0,
        ];
        match probe(&d, &Limits::default()) {
            Err(DecodeError::TooLarge { pixels, .. }) => assert_eq!(pixels, 3_600_000_000),
            other => panic!("want TooLarge, got {other:?}"),
        }
    }
}
