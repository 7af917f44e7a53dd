//! Header parser: reads the marker segments of a JPEG (never the pixels) and
//! reports what a decoder needs to know to pick a route.
//!
//! The walk is bounded: every read is checked against the input length, the
//! pixel limit is enforced as soon as the frame header is read, and the scan
//! walk stops at the first scan for ordinary interleaved sequential files.

use crate::DecodeError;

/// Most scans accepted in one image (real progressive files have about 10).
pub const MAX_SCANS: u16 = 1000;

/// Resource limits applied before and during decoding.
///
/// # Examples
/// ```
/// use stoker_decode::Limits;
/// let l = Limits { max_pixels: 4096 * 4096, ..Limits::default() };
/// assert_eq!(Limits::default().max_pixels, 100_000_000);
/// assert!(l.max_pixels < Limits::default().max_pixels);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest `width * height` accepted; checked from the frame header before
    /// any pixel buffer is allocated. Default 100 MP.
    pub max_pixels: u64,
    /// Largest `width * height * scans` accepted: a progressive decoder passes over
    /// the image once per scan, so hundreds of scans over a large image cost tens of
    /// seconds however few pixels it has. Checked once the header walk has counted
    /// the scans, before any decoding. Default 1.5 G (a 100 MP image of 15 scans;
    /// real progressive files have about 10).
    pub max_scan_work: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pixels: 100_000_000,
            max_scan_work: 1_500_000_000,
        }
    }
}

/// Color model of the coded components.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum ColorSpace {
    /// One component.
    Gray,
    /// Three components, YCbCr (JFIF, or Adobe transform 1, or no marker).
    YCbCr,
    /// Three components stored as RGB (Adobe transform 0, or component ids `R`,`G`,`B`).
    Rgb,
    /// Four components, CMYK (Adobe transform 0 or no Adobe marker).
    Cmyk,
    /// Four components, YCCK (Adobe transform 2).
    Ycck,
    /// Two or more than four components.
    Other,
}

/// Chroma subsampling, named by the J:a:b convention relative to the first component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum Subsampling {
    /// One component: no chroma.
    Gray,
    /// No subsampling.
    S444,
    /// Chroma halved horizontally.
    S422,
    /// Chroma halved both ways.
    S420,
    /// Chroma halved vertically.
    S440,
    /// Chroma quartered horizontally.
    S411,
    /// Chroma quartered horizontally and halved vertically.
    S410,
    /// Anything else (3x2, chroma components with different factors, ...).
    Other,
}

impl std::fmt::Display for Subsampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Subsampling::Gray => "gray",
            Subsampling::S444 => "4:4:4",
            Subsampling::S422 => "4:2:2",
            Subsampling::S420 => "4:2:0",
            Subsampling::S440 => "4:4:0",
            Subsampling::S411 => "4:1:1",
            Subsampling::S410 => "4:1:0",
            Subsampling::Other => "nonstandard",
        })
    }
}

/// What [`probe`] learned from the headers of one JPEG.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ImageInfo {
    /// Width in pixels (from the frame header).
    pub width: u32,
    /// Height in pixels (from the frame header).
    pub height: u32,
    /// Number of coded components (1, 3 or 4 in practice).
    pub components: u8,
    /// Color model of the coded components.
    pub color_space: ColorSpace,
    /// Chroma subsampling.
    pub subsampling: Subsampling,
    /// Progressive (SOF2/6/10/14).
    pub progressive: bool,
    /// Arithmetic entropy coding (SOF9..SOF15).
    pub arithmetic: bool,
    /// Lossless process (SOF3/7/11/15).
    pub lossless: bool,
    /// Hierarchical process (SOF5..7, SOF13..15).
    pub hierarchical: bool,
    /// Sample precision in bits (8, 12, 16).
    pub bit_depth: u8,
    /// EXIF orientation tag (1..=8) when an APP1 EXIF segment carries a valid one.
    /// Not applied by the decoders.
    pub exif_orientation: Option<u16>,
    /// The SOF marker's low nibble: 0 baseline, 1 extended, 2 progressive, 3 lossless, ...
    pub sof: u8,
    /// Number of scans seen. For an interleaved sequential file the walk stops
    /// at the first scan (which then holds every component) and this is 1.
    pub scans: u16,
    /// Sequential file whose first scan does not hold every component
    /// (non-interleaved or partially interleaved).
    pub multi_scan_sequential: bool,
    /// Restart interval in MCUs (0 = none).
    pub restart_interval: u16,
    /// Adobe APP14 color transform (0 none/RGB/CMYK, 1 YCbCr, 2 YCCK) when present and well formed.
    pub adobe_transform: Option<u8>,
    /// An APP14 "Adobe" segment exists but is too short to hold the transform byte.
    pub adobe_malformed: bool,
    /// Horizontal and vertical sampling factor of each component (first `components` entries valid).
    pub sampling: [(u8, u8); 4],
}

impl ImageInfo {
    /// Bytes of the RGB interleaved u8 output: `width * height * 3`.
    ///
    /// # Examples
    /// ```
    /// let data = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
    ///     "/../testdata/conformance/core/pillow__Tests__images__hopper.jpg")).unwrap();
    /// let info = stoker_decode::probe(&data, &Default::default()).unwrap();
    /// assert_eq!(info.rgb_len(), 128 * 128 * 3);
    /// ```
    pub fn rgb_len(&self) -> usize {
        self.width as usize * self.height as usize * 3
    }

    /// True for 3-component files whose chroma is sampled at a lower rate
    /// than luma (anything but 4:4:4).
    pub fn chroma_subsampled(&self) -> bool {
        self.components == 3 && self.sampling[0] != self.sampling[1]
    }

    /// One component declaring sampling factors other than 1x1 (not for nvJPEG).
    fn single_component_not_1x1(&self) -> bool {
        self.components == 1 && self.sampling[0] != (1, 1)
    }

    /// Chroma subsampling with a restart interval or an Adobe APP14 marker
    /// (not for nvJPEG).
    fn subsampled_with_restart_or_app14(&self) -> bool {
        self.chroma_subsampled() && (self.restart_interval != 0 || self.adobe_transform.is_some())
    }

    /// `width * height`.
    pub fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }

    /// What nvJPEG's hardware JPEG engines take: single-scan baseline Huffman,
    /// 8-bit, gray or YCbCr, subsampling 4:4:4, 4:2:2, 4:2:0, 4:4:0 or gray.
    /// The GPU decoder still asks `nvjpegDecodeBatchedSupported` per image.
    pub fn hardware_decodable(&self) -> bool {
        self.nvjpeg_decodable()
            && !self.progressive
            && !self.multi_scan_sequential
            && matches!(self.sof, 0 | 1)
            && matches!(
                self.subsampling,
                Subsampling::Gray
                    | Subsampling::S444
                    | Subsampling::S422
                    | Subsampling::S420
                    | Subsampling::S440
            )
    }

    /// What nvJPEG's CUDA (hybrid) decoders take: Huffman, 8-bit, sequential
    /// or progressive, 1 or 3 components in gray or YCbCr with standard
    /// subsampling (4:1:1 and 4:1:0 included). CMYK/YCCK, RGB without
    /// transform, arithmetic, lossless, 12/16-bit go to the CPU.
    ///
    /// Also to the CPU: single-component files whose component declares
    /// sampling factors other than 1x1 (e.g. `go__video-005.gray.q50.2x2.jpeg`,
    /// H=V=2). In a non-interleaved scan the MCU is one 8x8 block whatever the
    /// factors (ITU T.81 A.2.2); nvJPEG's hardware engines laid the blocks out
    /// as 16x16 MCUs (9 dB PSNR against the CPU on an H200, nvJPEG 13.0.1), and
    /// the CUDA decoder is unverified on this class, so neither gets it.
    ///
    /// Likewise to the CPU: files with chroma subsampling *and* a restart
    /// interval or an Adobe APP14 marker. On the H200 the engines decoded
    /// `pillow__Tests__images__app13.jpg` (4:2:0, DRI 1, APP14 transform 1;
    /// its chroma is flat, so not an upsampling difference) to 19 dB PSNR,
    /// while 4:4:4 files with both (`pil_sample_rgb.jpg`, `flower2.jpg`)
    /// matched. Which of the two triggers it is unknown and no other file of
    /// the corpus exercises the CUDA decoder on the class, so it goes where it
    /// is known right; the CPUs (9.8k img/s on 16 cores there) are faster than
    /// the CUDA decoder (4.0k img/s) anyway. The class is rare in datasets:
    /// none of the 512 bench files has a DRI or APP14 marker.
    pub fn nvjpeg_decodable(&self) -> bool {
        !self.single_component_not_1x1()
            && !self.subsampled_with_restart_or_app14()
            && !self.arithmetic
            && !self.lossless
            && !self.hierarchical
            && self.bit_depth == 8
            && matches!(self.color_space, ColorSpace::Gray | ColorSpace::YCbCr)
            && !matches!(self.subsampling, Subsampling::Other)
            && !self.multi_scan_sequential
            && !self.adobe_malformed
    }

    /// What the fast CPU path (zune-jpeg) decodes correctly; the rest goes to
    /// jpeg-decoder. zune-jpeg gives wrong pixels on multi-scan sequential
    /// files and refuses nonstandard sampling and a short APP14 segment.
    pub fn zune_decodable(&self) -> bool {
        self.supported().is_ok()
            && !self.multi_scan_sequential
            && !self.adobe_malformed
            && !matches!(self.subsampling, Subsampling::Other)
            && !matches!(self.color_space, ColorSpace::Other)
    }

    /// `Err(Unsupported)` for what no backend of this crate decodes.
    ///
    /// # Errors
    /// [`DecodeError::Unsupported`] naming the feature.
    pub fn supported(&self) -> Result<(), DecodeError> {
        let what = if self.arithmetic {
            "arithmetic coding"
        } else if self.lossless {
            "lossless JPEG (SOF3)"
        } else if self.hierarchical {
            "hierarchical JPEG"
        } else if self.bit_depth == 12 {
            "12-bit samples"
        } else if self.bit_depth != 8 {
            "sample precision other than 8 bits"
        } else if !matches!(self.components, 1 | 3 | 4) {
            "component count other than 1, 3 or 4"
        } else {
            return Ok(());
        };
        Err(DecodeError::Unsupported { what })
    }
}

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

/// The frame header as parsed, plus every component id (for SOS checks).
struct Frame {
    info: ImageInfo,
    all_ids: Vec<u8>,
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
        let mut pos = 2usize;
        let mut frame: Option<Frame> = None;
        let mut exif_orientation = None;
        let mut adobe_transform = None;
        let mut adobe_malformed = false;
        let mut restart_interval = 0u16;
        let mut scans = 0u16;
        let mut multi_scan = false;
        let mut component_ids_rgb = false;
        let mut hit_eoi = false;
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
                0xD8 | 0x01 | 0xD0..=0xD7 => continue,
                0xD9 => {
                    hit_eoi = true;
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
            let seg_start = pos + 2;
            let seg_end = pos + len;
            let complete = seg_end <= d.len();
            let seg = &d[seg_start..seg_end.min(d.len())];
            match marker {
                0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                    if !complete {
                        return Err(self.truncated("frame header (SOF)", marker_at, len + 2));
                    }
                    if frame.is_some() {
                        return Err(DecodeError::Malformed {
                            offset: marker_at,
                            what: "second frame header (SOF) before EOI",
                        });
                    }
                    let f = self.parse_sof(marker, seg, marker_at)?;
                    component_ids_rgb = f.all_ids == [b'R', b'G', b'B'];
                    frame = Some(f);
                }
                0xDA => {
                    let Some(f) = frame.as_ref() else {
                        return Err(DecodeError::Malformed {
                            offset: marker_at,
                            what: "scan (SOS) before frame header (SOF)",
                        });
                    };
                    if !complete {
                        return Err(self.truncated("scan header (SOS)", marker_at, len + 2));
                    }
                    let ns = self.parse_sos(seg, f, marker_at)?;
                    scans = scans.saturating_add(1);
                    if scans > MAX_SCANS {
                        // Real files use ~10; thousands of tiny scans only make a
                        // decoder slow (zune-jpeg refuses > 100, jpeg-decoder has no cap).
                        return Err(DecodeError::Malformed {
                            offset: marker_at,
                            what: "more than 1000 scans",
                        });
                    }
                    let sequential = !f.info.progressive;
                    if sequential && scans == 1 {
                        if usize::from(ns) == usize::from(f.info.components) {
                            // Interleaved sequential: the first scan holds the whole image.
                            break;
                        }
                        multi_scan = true;
                    }
                    // Skip the entropy-coded segment up to the next real marker.
                    pos = entropy_coded_end(d, seg_end);
                    continue;
                }
                0xDD if complete && seg.len() >= 2 => {
                    restart_interval = u16::from_be_bytes([seg[0], seg[1]]);
                }
                0xE1 if exif_orientation.is_none() && seg.starts_with(b"Exif\0") => {
                    exif_orientation = exif::orientation(seg.get(6..).unwrap_or(&[]));
                }
                0xEE if seg.starts_with(b"Adobe") => {
                    if complete && seg.len() >= 12 {
                        adobe_transform = Some(seg[11]);
                    } else {
                        adobe_malformed = true;
                    }
                }
                _ => {}
            }
            if !complete {
                // A truncated segment other than SOF/SOS: the image data cannot follow.
                if frame.is_some() && scans > 0 {
                    break;
                }
                return Err(self.truncated("marker segment", marker_at, len + 2));
            }
            pos = seg_end;
        }
        let Some(f) = frame else {
            return Err(if hit_eoi {
                DecodeError::Malformed {
                    offset: pos - 2,
                    what: "end of image (EOI) before any frame header (SOF)",
                }
            } else {
                self.truncated("frame header (SOF)", d.len(), 1)
            });
        };
        if scans == 0 {
            return Err(if hit_eoi {
                DecodeError::Malformed {
                    offset: pos - 2,
                    what: "end of image (EOI) before any scan (SOS)",
                }
            } else {
                self.truncated("scan header (SOS)", d.len(), 1)
            });
        }
        let mut info = f.info;
        let pixels = u64::from(info.width) * u64::from(info.height);
        let work = pixels.saturating_mul(u64::from(scans));
        if work > self.limits.max_scan_work {
            return Err(DecodeError::TooMuchWork {
                pixels,
                scans: scans.into(),
                work,
                max_scan_work: self.limits.max_scan_work,
            });
        }
        info.scans = scans;
        info.multi_scan_sequential = multi_scan;
        info.exif_orientation = exif_orientation;
        info.adobe_transform = adobe_transform;
        info.adobe_malformed = adobe_malformed;
        info.restart_interval = restart_interval;
        info.color_space = match (info.components, adobe_transform) {
            (1, _) => ColorSpace::Gray,
            (3, Some(0)) => ColorSpace::Rgb,
            (3, Some(_)) => ColorSpace::YCbCr,
            (3, None) if component_ids_rgb => ColorSpace::Rgb,
            (3, None) => ColorSpace::YCbCr,
            (4, Some(2)) => ColorSpace::Ycck,
            (4, _) => ColorSpace::Cmyk,
            _ => ColorSpace::Other,
        };
        Ok(info)
    }

    fn parse_sof(&self, marker: u8, seg: &[u8], offset: usize) -> Result<Frame, DecodeError> {
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
        if pixels > self.limits.max_pixels {
            return Err(DecodeError::TooLarge {
                width: width.into(),
                height: height.into(),
                pixels,
                max_pixels: self.limits.max_pixels,
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
        };
        Ok(Frame { info, all_ids })
    }

    fn parse_sos(&self, seg: &[u8], f: &Frame, offset: usize) -> Result<u8, DecodeError> {
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
}

/// The offset of the `0xFF` that starts the first marker at or after `start`
/// which is not part of entropy-coded data, or `data.len()` when there is
/// none. In entropy-coded data a coded `0xFF` is followed by a stuffed `00`,
/// and restart markers (`FF D0`–`FF D7`) belong to the scan; any other
/// `FF xx` (after fill bytes, the last of which is returned) ends it. Used by
/// [`probe`] to count scans and by the converter to find where an image ends.
///
/// # Examples
/// ```
/// use stoker_decode::entropy_coded_end;
/// // Scan data with a stuffed byte and a restart marker, then fill bytes and EOI.
/// let data = [1, 0xFF, 0x00, 2, 0xFF, 0xD3, 3, 0xFF, 0xFF, 0xD9];
/// assert_eq!(entropy_coded_end(&data, 0), 8);
/// assert_eq!(entropy_coded_end(&data[..7], 0), 7);
/// ```
pub fn entropy_coded_end(data: &[u8], start: usize) -> usize {
    let mut i = start;
    while let Some(off) = data.get(i..).and_then(next_ff) {
        let ff = i + off;
        // Skip fill bytes to find the code.
        let Some(code_off) = data[ff..].iter().position(|&b| b != 0xFF) else {
            return data.len();
        };
        let code = data[ff + code_off];
        if code == 0x00 || (0xD0..=0xD7).contains(&code) {
            i = ff + code_off + 1;
        } else {
            return ff + code_off - 1;
        }
    }
    data.len()
}

/// The position of the first `0xFF` byte, eight bytes at a time: a word holds
/// an `0xFF` byte exactly when its complement holds a zero byte. Compressed
/// data has few `0xFF` bytes, so most words are skipped whole (byte by byte,
/// the scan was ~4 % of a progressive file's decode instructions: [`probe`]
/// reads such files to their end).
fn next_ff(data: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut words = data.chunks_exact(8);
    let mut base = 0;
    for w in &mut words {
        let x = !u64::from_le_bytes(w.try_into().expect("8 bytes"));
        if x.wrapping_sub(LO) & !x & HI != 0 {
            return w.iter().position(|&b| b == 0xFF).map(|j| base + j);
        }
        base += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == 0xFF)
        .map(|j| base + j)
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

/// Minimal, bounded EXIF reader: only the orientation tag of IFD0.
mod exif {
    /// Orientation (1..=8) from a TIFF structure, or `None` if absent or malformed.
    pub(super) fn orientation(tiff: &[u8]) -> Option<u16> {
        let le = match tiff.get(0..2)? {
            b"II" => true,
            b"MM" => false,
            _ => return None,
        };
        let u16_at = |o: usize| -> Option<u16> {
            let b = tiff.get(o..o.checked_add(2)?)?;
            Some(if le {
                u16::from_le_bytes([b[0], b[1]])
            } else {
                u16::from_be_bytes([b[0], b[1]])
            })
        };
        let u32_at = |o: usize| -> Option<u32> {
            let b = tiff.get(o..o.checked_add(4)?)?;
            let a = [b[0], b[1], b[2], b[3]];
            Some(if le {
                u32::from_le_bytes(a)
            } else {
                u32::from_be_bytes(a)
            })
        };
        if u16_at(2)? != 42 {
            return None;
        }
        let ifd = usize::try_from(u32_at(4)?).ok()?;
        let count = usize::from(u16_at(ifd)?);
        for i in 0..count {
            let e = ifd.checked_add(2 + 12 * i)?;
            if u16_at(e)? == 0x0112 {
                // Type SHORT (3), count 1: value in the first 2 bytes of the value field.
                if u16_at(e + 2)? != 3 {
                    return None;
                }
                let v = u16_at(e + 8)?;
                return (1..=8).contains(&v).then_some(v);
            }
        }
        None
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

    #[test]
    fn entropy_coded_end_ignores_stuffing_and_restarts() {
        let d = [1, 0xFF, 0x00, 2, 0xFF, 0xD3, 3, 0xFF, 0xFF, 0xD9];
        assert_eq!(entropy_coded_end(&d, 0), 8);
    }

    /// The word-at-a-time scan finds what a byte-by-byte scan finds, from
    /// every start, on buffers with few and many 0xFF bytes, stuffing,
    /// restart markers and real markers at every alignment.
    #[test]
    fn entropy_coded_end_equals_a_byte_by_byte_scan() {
        fn bytewise(d: &[u8], mut pos: usize) -> usize {
            while pos + 1 < d.len() {
                if d[pos] == 0xFF {
                    let next = d[pos + 1];
                    if next != 0x00 && next != 0xFF && !(0xD0..=0xD7).contains(&next) {
                        return pos;
                    }
                    pos += if next == 0xFF { 1 } else { 2 };
                } else {
                    pos += 1;
                }
            }
            d.len()
        }
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..3000 {
            let len = (next() % 80) as usize;
            let ff_every = [2, 5, 17, 64][case % 4];
            let d: Vec<u8> = (0..len)
                .map(|_| {
                    let r = next();
                    if r % ff_every == 0 {
                        0xFF
                    } else {
                        [0x00, 0xD3, 0xD9, 0xC4, 0x12, 0xFE][(r >> 8) as usize % 6]
                    }
                })
                .collect();
            for start in 0..=len {
                assert_eq!(
                    entropy_coded_end(&d, start),
                    bytewise(&d, start),
                    "{d:02X?} from {start}"
                );
            }
        }
    }

    #[test]
    fn exif_orientation_both_byte_orders() {
        // II*\0, IFD at 8, 1 entry: tag 0x0112 SHORT count 1 value 6.
        let mut le = b"II*\0\x08\0\0\0\x01\0".to_vec();
        le.extend_from_slice(&[0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0]);
        assert_eq!(exif::orientation(&le), Some(6));
        let mut be = b"MM\0*\0\0\0\x08\0\x01".to_vec();
        be.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 3, 0, 0]);
        assert_eq!(exif::orientation(&be), Some(3));
        // IFD offset past the end: None, no panic.
        assert_eq!(exif::orientation(b"II*\0\xff\xff\xff\x7f"), None);
    }

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
