//! What [`probe`](super::probe) reports ([`ImageInfo`]) and the limits it
//! enforces ([`Limits`]), with the rules that route an image from its header.

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

/// What [`probe`](crate::probe()) learned from the headers of one JPEG.
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
    /// A sequential Huffman file that defines no table (DHT) before its first scan, as a
    /// Motion-JPEG frame: decoded on the CPU with the standard tables of ITU T.81 Annex K.3,
    /// as libjpeg does.
    pub standard_huffman_tables: bool,
    /// Offset of the frame header's marker: where [`scans_upper_bound`](Self::scans_upper_bound)
    /// starts counting, past any thumbnail in an APP segment before it.
    #[serde(skip)]
    pub(crate) frame_offset: usize,
    /// Offset of the first scan header's marker: where the standard tables go.
    #[serde(skip)]
    pub(crate) first_scan_offset: usize,
    /// Where the APP14 transform bytes before the first scan are, and the value libjpeg
    /// reads (the last one) as, when that differs from what they say (JFIF with Adobe
    /// transform 0, an unknown transform): the decoders get every one rewritten.
    #[serde(skip)]
    pub(crate) adobe_rewrite: Option<(Vec<usize>, u8)>,
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

    /// Bytes a CPU decode of the file allocates at once, about: its RGB pixels, and for a
    /// progressive file the coefficients of every component too (16 bits a sample, kept
    /// until the last scan), which is three times the pixels in all. The decoders allocate
    /// these infallibly; a caller that took a raised pixel limit asks for them first.
    pub fn decode_bytes(&self) -> u64 {
        // In u64: `rgb_len` is a usize, which a 32-bit target overflows for the very sizes
        // this is asked about.
        let rgb = u64::from(self.width) * u64::from(self.height) * 3;
        rgb * if self.progressive { 3 } else { 1 }
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

    /// At most how many scans a decoder can find in `data` (the file this was
    /// probed from): every scan marker code (`FF DA`) from the frame header to
    /// the end of the data, also those inside a segment whose length a decoder
    /// may read differently from the header walk. Appended data (a second MPO
    /// image) counts too, so it errs high.
    pub(crate) fn scans_upper_bound(&self, data: &[u8]) -> u64 {
        data.get(self.frame_offset..)
            .map_or(0, super::entropy::scan_marker_codes)
    }

    /// [`DecodeError::TooMuchWork`] when `scans` passes over the image exceed
    /// `limits.max_scan_work`.
    pub(crate) fn check_scan_work(&self, scans: u64, limits: &Limits) -> Result<(), DecodeError> {
        let pixels = self.pixels();
        let work = pixels.saturating_mul(scans);
        if work > limits.max_scan_work {
            return Err(DecodeError::TooMuchWork {
                pixels,
                scans: u32::try_from(scans).unwrap_or(u32::MAX),
                work,
                max_scan_work: limits.max_scan_work,
            });
        }
        Ok(())
    }

    /// Most scans over this image that `limits.max_scan_work` allows (at least 1).
    pub(crate) fn scans_allowed(&self, limits: &Limits) -> u64 {
        (limits.max_scan_work / self.pixels().max(1)).max(1)
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
    /// is known right; on the machine where this was found the CPUs also
    /// decoded faster than the CUDA decoder. The class is rare in datasets:
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
            && !self.standard_huffman_tables
            && self.adobe_rewrite.is_none()
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

/// Whether `bytes` can be allocated now (the memory is freed at once). Asked before a
/// decode whose buffers the decoders allocate infallibly ([`ImageInfo::decode_bytes`]): a
/// failed allocation there aborts the process, here it is an answer. It holds for this
/// moment only: decodes that may run at once, on several threads, reserve their bytes
/// with [`DecodeMemory::reserve`](crate::DecodeMemory::reserve) instead.
pub fn can_allocate(bytes: u64) -> bool {
    usize::try_from(bytes).is_ok_and(|n| Vec::<u8>::new().try_reserve_exact(n).is_ok())
}

/// Whether `bytes` are within what this process could ever be given: its address-space
/// limit (`ulimit -v`, RLIMIT_AS) where it has one, and the machine's memory and swap.
/// For a refusal of [`can_allocate`] to tell a need that no run here can meet (a few
/// bytes of header claiming gigapixels) from one that does not fit beside what the
/// process holds now, whose skip would make a dataset depend on the moment. Memory the
/// process holds counts as free here, so a need just under the limit is one that could
/// fit: with more memory, it would.
///
/// # Examples
///
/// ```
/// assert!(stoker_decode::could_ever_allocate(1 << 20));
/// assert!(!stoker_decode::could_ever_allocate(u64::MAX));
/// ```
pub fn could_ever_allocate(bytes: u64) -> bool {
    let mut bound = u64::MAX;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the valid, writable struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } == 0
        && limit.rlim_cur != libc::RLIM_INFINITY
    {
        bound = bound.min(limit.rlim_cur);
    }
    // SAFETY: `sysinfo` is plain integers, for which zero is a valid value.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: sysinfo writes one `sysinfo` into the valid, writable struct given.
    if unsafe { libc::sysinfo(&mut info) } == 0 {
        let unit = u64::from(info.mem_unit.max(1));
        let total = (info.totalram as u64).saturating_add(info.totalswap as u64);
        bound = bound.min(total.saturating_mul(unit));
    }
    bytes <= bound
}
