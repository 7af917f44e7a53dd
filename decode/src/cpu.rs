//! CPU backend: zune-jpeg for ordinary files, jpeg-decoder for the rest,
//! chosen per image from what [`probe()`] finds.

use std::panic::{catch_unwind, AssertUnwindSafe};

use rayon::prelude::*;

use crate::color;
use crate::progressive_scratch;
use crate::slice_reader::SliceReader;
use crate::threads::in_pool;
use crate::{probe, ColorSpace, DecodeError, ImageInfo, Limits, Route, RouteCounters, RouteCounts};

/// A rectangle of an image, in pixels: columns `x..x + width`, rows `y..y + height`.
///
/// # Examples
/// ```
/// use stoker_decode::Region;
/// let crop = Region { x: 10, y: 20, width: 100, height: 50 };
/// assert_eq!(crop.bottom(), 70);
/// assert_eq!(Region::top_rows(640, 120), Region { x: 0, y: 0, width: 640, height: 120 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// First column.
    pub x: u32,
    /// First row.
    pub y: u32,
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
}

impl Region {
    /// The first `rows` rows of an image `width` pixels wide.
    pub fn top_rows(width: u32, rows: u32) -> Region {
        Region {
            x: 0,
            y: 0,
            width,
            height: rows,
        }
    }

    /// The row below the region: `y + height` (saturating).
    pub fn bottom(&self) -> u32 {
        self.y.saturating_add(self.height)
    }

    /// The column right of the region: `x + width` (saturating).
    pub fn right(&self) -> u32 {
        self.x.saturating_add(self.width)
    }
}

/// Decodes JPEGs to RGB interleaved u8 (HWC) on the CPU.
///
/// Each image is probed first (pixel limit enforced from the header), then
/// decoded by zune-jpeg when [`ImageInfo::zune_decodable`], else by
/// jpeg-decoder; a zune-jpeg error is retried with jpeg-decoder, and so is a
/// decode where zune-jpeg recovered from bad data by filling the rest of the
/// image. A file whose entropy-coded data runs out before its last MCU (a
/// cut-off file, with or without an end-of-image marker appended) is
/// [`DecodeError::Corrupt`] without a retry: jpeg-decoder would fill it in.
/// A region decode judges the data it decodes, down to the region's last
/// rows. Third-party
/// panics are caught and become [`DecodeError::Panicked`]. Gray, CMYK and YCCK
/// inputs come out as RGB. EXIF orientation is reported, not applied.
///
/// `CpuDecoder` is `Send + Sync`; share one across threads.
///
/// # Examples
/// ```
/// use stoker_decode::{CpuDecoder, Limits};
/// let data = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
///     "/../testdata/conformance/core/pillow__Tests__images__hopper.jpg")).unwrap();
/// let dec = CpuDecoder::new(Limits::default());
/// let (info, rgb) = dec.decode_to_vec(&data).unwrap();
/// assert_eq!(rgb.len(), info.rgb_len());
/// assert_eq!((info.width, info.height), (128, 128));
/// ```
#[derive(Debug, Default)]
pub struct CpuDecoder {
    limits: Limits,
    counters: RouteCounters,
}

impl CpuDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        CpuDecoder {
            limits,
            counters: RouteCounters::default(),
        }
    }

    /// The limits this decoder enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Images decoded per route (and failures) since creation.
    pub fn route_counts(&self) -> RouteCounts {
        self.counters.snapshot()
    }

    /// Decodes `data` into the first `info.rgb_len()` bytes of `out` (RGB HWC u8).
    ///
    /// # Examples
    /// ```
    /// use stoker_decode::{probe, CpuDecoder, Limits};
    /// let data = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
    ///     "/../testdata/conformance/core/go__video-001.jpeg")).unwrap();
    /// let info = probe(&data, &Limits::default()).unwrap();
    /// let mut out = vec![0u8; info.rgb_len()];
    /// CpuDecoder::new(Limits::default()).decode_into(&data, &mut out).unwrap();
    /// ```
    ///
    /// # Errors
    /// Every [`probe()`] error; [`DecodeError::Unsupported`] (arithmetic,
    /// lossless, 12-bit, hierarchical); [`DecodeError::OutputTooSmall`];
    /// [`DecodeError::Corrupt`] / [`DecodeError::Panicked`] when both backends fail.
    /// On error the contents of `out` are unspecified.
    pub fn decode_into(&self, data: &[u8], out: &mut [u8]) -> Result<ImageInfo, DecodeError> {
        self.decode_into_routed(data, out).map(|(info, _)| info)
    }

    /// [`decode_into`](Self::decode_into), also saying which backend decoded it.
    ///
    /// # Errors
    /// As [`decode_into`](Self::decode_into).
    pub fn decode_into_routed(
        &self,
        data: &[u8],
        out: &mut [u8],
    ) -> Result<(ImageInfo, Route), DecodeError> {
        self.decode_region_routed(data, out, None)
    }

    /// [`decode_into_routed`](Self::decode_into_routed) for a caller that needs
    /// only the first `rows` rows of the image (the bottom edge of a crop, say).
    /// The decoder may stop as soon as those rows are final, skipping the
    /// compressed data below them: rows `0..rows` hold exactly what a full
    /// decode writes there (for a valid file: on corrupt data, where a full
    /// decode may stop at damage below the rows, the two can differ, each
    /// giving an image or a clean error); the bytes below are unspecified.
    /// Baseline JPEGs stop early; progressive ones decode each scan only down
    /// to those rows (and transform only those); what the fallback decoder
    /// takes decodes in full.
    ///
    /// # Examples
    /// ```
    /// use stoker_decode::{probe, CpuDecoder, Limits};
    /// let data = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
    ///     "/../testdata/conformance/core/go__video-001.jpeg")).unwrap();
    /// let dec = CpuDecoder::new(Limits::default());
    /// let (info, full) = dec.decode_to_vec(&data).unwrap();
    /// let mut top = vec![0u8; info.rgb_len()];
    /// dec.decode_top_into_routed(&data, &mut top, 40).unwrap();
    /// let row = info.width as usize * 3;
    /// assert_eq!(top[..40 * row], full[..40 * row]);
    /// ```
    ///
    /// # Errors
    /// As [`decode_into`](Self::decode_into).
    pub fn decode_top_into_routed(
        &self,
        data: &[u8],
        out: &mut [u8],
        rows: u32,
    ) -> Result<(ImageInfo, Route), DecodeError> {
        self.decode_region_routed(data, out, Some(Region::top_rows(u32::MAX, rows)))
    }

    /// [`decode_into_routed`](Self::decode_into_routed) for a caller that reads
    /// only `region` of the image (a crop, say): the pixels inside it are
    /// exactly what a full decode writes there (for a valid file, as with
    /// [`decode_top_into_routed`](Self::decode_top_into_routed)); the bytes
    /// outside it are unspecified. A baseline or progressive JPEG stops after
    /// the region's last row (as
    /// [`decode_top_into_routed`](Self::decode_top_into_routed)),
    /// and with standard sampling factors skips the inverse DCT of blocks well
    /// outside the region and the color conversion outside it; what the
    /// fallback decoder takes decodes in full. A region reaching past the
    /// image is cut to it.
    ///
    /// # Examples
    /// ```
    /// use stoker_decode::{CpuDecoder, Limits, Region};
    /// let data = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
    ///     "/../testdata/conformance/core/go__video-001.jpeg")).unwrap();
    /// let dec = CpuDecoder::new(Limits::default());
    /// let (info, full) = dec.decode_to_vec(&data).unwrap();
    /// let crop = Region { x: 30, y: 20, width: 64, height: 50 };
    /// let mut part = vec![0u8; info.rgb_len()];
    /// dec.decode_region_into_routed(&data, &mut part, crop).unwrap();
    /// let row = info.width as usize * 3;
    /// for y in 20..70 {
    ///     let span = y * row + 30 * 3..y * row + 94 * 3;
    ///     assert_eq!(part[span.clone()], full[span]);
    /// }
    /// ```
    ///
    /// # Errors
    /// As [`decode_into`](Self::decode_into).
    pub fn decode_region_into_routed(
        &self,
        data: &[u8],
        out: &mut [u8],
        region: Region,
    ) -> Result<(ImageInfo, Route), DecodeError> {
        self.decode_region_routed(data, out, Some(region))
    }

    /// Probes, decodes (`region`, or all) into `out` and counts the route; the
    /// GPU decoder's CPU routes call it with their optional region.
    pub(crate) fn decode_region_routed(
        &self,
        data: &[u8],
        out: &mut [u8],
        region: Option<Region>,
    ) -> Result<(ImageInfo, Route), DecodeError> {
        self.counted(data, |info| {
            Ok((self.decode_probed(data, info, out, region)?, ()))
        })
        .map(|(info, route, ())| (info, route))
    }

    /// [`decode_region_routed`](Self::decode_region_routed) into a new `Vec` of
    /// `rgb_len()` bytes.
    pub(crate) fn decode_region_to_vec_routed(
        &self,
        data: &[u8],
        region: Option<Region>,
    ) -> Result<(ImageInfo, Route, Vec<u8>), DecodeError> {
        self.counted(data, |info| {
            // Allocated fallibly: a process short of memory (a `verify --decode` or a
            // conversion under a limit) is told so, not aborted.
            let len = info.rgb_len();
            let mut out = Vec::new();
            if out.try_reserve_exact(len).is_err() {
                return Err(DecodeError::OutOfMemory {
                    what: "its decoded pixels",
                    bytes: len as u64,
                });
            }
            out.resize(len, 0);
            Ok((self.decode_probed(data, info, &mut out, region)?, out))
        })
    }

    /// Probes `data`, runs `decode` on its header and counts the route (or the
    /// failure): the one path of every routed entry point.
    fn counted<T>(
        &self,
        data: &[u8],
        decode: impl FnOnce(&ImageInfo) -> Result<(Route, T), DecodeError>,
    ) -> Result<(ImageInfo, Route, T), DecodeError> {
        let result = probe(data, &self.limits).and_then(|info| {
            let (route, t) = decode(&info)?;
            Ok((info, route, t))
        });
        match &result {
            Ok((_, route, _)) => self.counters.record(*route),
            Err(_) => self.counters.record_failure(),
        }
        result
    }

    /// Decodes into a new `Vec` of `info.rgb_len()` bytes.
    ///
    /// # Examples
    /// ```
    /// use stoker_decode::{CpuDecoder, Limits};
    /// let dec = CpuDecoder::new(Limits::default());
    /// assert!(dec.decode_to_vec(b"").is_err());
    /// ```
    ///
    /// # Errors
    /// As [`decode_into`](Self::decode_into).
    pub fn decode_to_vec(&self, data: &[u8]) -> Result<(ImageInfo, Vec<u8>), DecodeError> {
        let (info, _, v) = self.decode_to_vec_routed(data)?;
        Ok((info, v))
    }

    /// [`decode_to_vec`](Self::decode_to_vec), also saying which backend decoded it.
    ///
    /// # Errors
    /// As [`decode_into`](Self::decode_into).
    pub fn decode_to_vec_routed(
        &self,
        data: &[u8],
    ) -> Result<(ImageInfo, Route, Vec<u8>), DecodeError> {
        self.decode_region_to_vec_routed(data, None)
    }

    /// Decodes every input into the output of the same index, in parallel on
    /// the current rayon pool, or, called from outside one, on stoker's decode
    /// pool (one thread per available CPU, made on first use; where no thread
    /// can start, one image after another on this thread). One result per
    /// image; a bad image fails alone.
    ///
    /// # Examples
    /// ```
    /// use stoker_decode::{CpuDecoder, Limits};
    /// let good = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
    ///     "/../testdata/conformance/core/go__video-001.jpeg")).unwrap();
    /// let inputs: Vec<&[u8]> = vec![&good, b"not a jpeg"];
    /// let mut a = vec![0u8; 150 * 103 * 3];
    /// let mut b = vec![0u8; 16];
    /// let mut outputs: Vec<&mut [u8]> = vec![&mut a, &mut b];
    /// let results = CpuDecoder::new(Limits::default()).decode_batch(&inputs, &mut outputs);
    /// assert!(results[0].is_ok() && results[1].is_err());
    /// ```
    ///
    /// If `outputs.len() != inputs.len()`, every result is
    /// [`DecodeError::BatchShape`], one per input or per output, whichever are more (so
    /// that no inputs and some outputs is reported too, not an empty success).
    pub fn decode_batch(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Vec<Result<ImageInfo, DecodeError>> {
        if inputs.len() != outputs.len() {
            return (0..inputs.len().max(outputs.len()))
                .map(|_| {
                    Err(DecodeError::BatchShape {
                        inputs: inputs.len(),
                        outputs: outputs.len(),
                    })
                })
                .collect();
        }
        in_pool(|parallel| {
            if parallel {
                (inputs.par_iter().zip(outputs.par_iter_mut()))
                    .map(|(data, out)| self.decode_into(data, out))
                    .collect()
            } else {
                (inputs.iter().zip(outputs.iter_mut()))
                    .map(|(data, out)| self.decode_into(data, out))
                    .collect()
            }
        })
    }

    /// Decodes an already probed image (only `region` need be right when given).
    fn decode_probed(
        &self,
        data: &[u8],
        info: &ImageInfo,
        out: &mut [u8],
        region: Option<Region>,
    ) -> Result<Route, DecodeError> {
        info.supported()?;
        let need = info.rgb_len();
        if out.len() < need {
            return Err(DecodeError::OutputTooSmall {
                need,
                got: out.len(),
            });
        }
        let out = &mut out[..need];
        let data = &*prepared(data, info);
        if info.zune_decodable() {
            match guarded("zune-jpeg", || {
                zune_decode(data, info, &self.limits, out, region)
            }) {
                Ok(()) => return Ok(Route::CpuZune),
                Err(ZuneFailure::Final(e)) => return Err(e),
                Err(ZuneFailure::Retry(e)) => {
                    tracing::debug!("zune-jpeg failed ({e}); retrying with jpeg-decoder");
                }
            }
        }
        guarded("jpeg-decoder", || {
            fallback_decode(data, info, &self.limits, out)
        })?;
        Ok(Route::CpuFallback)
    }
}

/// The bytes the CPU decoders get: `data`, or a copy with what libjpeg assumes written
/// in, where zune-jpeg and jpeg-decoder would refuse the file or read it otherwise: the
/// Adobe transform libjpeg reads, the standard Huffman tables of a Motion-JPEG frame.
fn prepared<'a>(data: &'a [u8], info: &ImageInfo) -> std::borrow::Cow<'a, [u8]> {
    // One copy at most: the tables go in at the first scan, after every APP14 byte
    // rewritten, so those offsets hold in the copy too.
    let mut out = if info.standard_huffman_tables {
        crate::std_huffman::with_standard_tables(data, info.first_scan_offset).into()
    } else {
        std::borrow::Cow::Borrowed(data)
    };
    if let Some((offsets, transform)) = &info.adobe_rewrite {
        let bytes = out.to_mut();
        for &at in offsets {
            if let Some(byte) = bytes.get_mut(at) {
                *byte = *transform;
            }
        }
    }
    out
}

/// Runs `f`, turning a panic into [`DecodeError::Panicked`].
fn guarded<E: From<DecodeError>>(
    decoder: &'static str,
    f: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            Err(DecodeError::Panicked { decoder, message }.into())
        }
    }
}

/// Why zune-jpeg gave no image.
enum ZuneFailure {
    /// An error jpeg-decoder may not share: it gets the file.
    Retry(DecodeError),
    /// The answer, not retried: the entropy-coded data ran out before the last MCU (a
    /// cut-off file, with or without an end-of-image marker appended, or one cut short
    /// by a marker), which jpeg-decoder would fill with zero bits too, silently after a
    /// marker; or memory zune-jpeg could not have, where jpeg-decoder would abort.
    Final(DecodeError),
}

impl From<DecodeError> for ZuneFailure {
    fn from(e: DecodeError) -> Self {
        ZuneFailure::Retry(e)
    }
}

fn zune_decode(
    data: &[u8],
    info: &ImageInfo,
    limits: &Limits,
    out: &mut [u8],
    region: Option<Region>,
) -> Result<(), ZuneFailure> {
    use zune_core::colorspace::ColorSpace as ZColor;
    use zune_core::options::DecoderOptions;

    let corrupt = |e: stoker_zune_jpeg::errors::DecodeErrors| DecodeError::Corrupt {
        decoder: "zune-jpeg",
        message: e.to_string(),
    };
    // Our own pixel limit was enforced by probe; let zune take any JPEG size.
    // Its scan cap (100 by default) also bounds the work: no more scans than
    // `max_scan_work` allows over this image, should a file hold more than
    // the probe counted.
    let defaults = DecoderOptions::default();
    let max_scans = usize::try_from(info.scans_allowed(limits))
        .unwrap_or(usize::MAX)
        .min(defaults.jpeg_get_max_scans());
    let opts = defaults
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX))
        .jpeg_set_max_scans(max_scans)
        .set_strict_mode(false)
        .jpeg_set_out_colorspace(if info.color_space == ColorSpace::Gray {
            ZColor::Luma
        } else {
            ZColor::RGB
        });
    let mut dec = stoker_zune_jpeg::JpegDecoder::new_with_options(SliceReader::new(data), opts);
    // The last column and row of a subsampled image as libjpeg (and so Pillow and
    // torchvision) decodes them, not interpolated towards the blocks' padding.
    dec.stoker_repeat_edges();
    if let Some(r) = region {
        // Cut to the image; the bottom edge stops the decode.
        let (x1, y1) = (r.right().min(info.width), r.bottom().min(info.height));
        let (x0, y0) = (r.x.min(x1), r.y.min(y1));
        if (x0, y0) == (0, 0) && x1 == info.width {
            dec.stoker_limit_rows(y1 as usize);
        } else {
            dec.stoker_limit_window(x0 as usize, y0 as usize, x1 as usize, y1 as usize);
        }
    }
    dec.decode_headers().map_err(corrupt)?;
    let (w, h) = dec.dimensions().ok_or_else(|| DecodeError::Corrupt {
        decoder: "zune-jpeg",
        message: "no dimensions after headers".into(),
    })?;
    if (u32::try_from(w).ok(), u32::try_from(h).ok()) != (Some(info.width), Some(info.height)) {
        return Err(DecodeError::Corrupt {
            decoder: "zune-jpeg",
            message: format!(
                "decoder sees {w}x{h}, header says {}x{}",
                info.width, info.height
            ),
        }
        .into());
    }
    let px = info.pixels() as usize;
    let gray = info.color_space == ColorSpace::Gray;
    // The thread's coefficient buffers, lent for a progressive decode and taken back
    // whatever its result.
    dec.stoker_use_scratch(progressive_scratch::take());
    let decoded = dec.decode_into(if gray { &mut out[..px] } else { out });
    progressive_scratch::give(dec.stoker_take_scratch());
    use stoker_zune_jpeg::errors::{DecodeErrors::FormatStatic, STOKER_NO_MEMORY};
    if matches!(&decoded, Err(FormatStatic(m)) if *m == STOKER_NO_MEMORY) {
        // The whole image's coefficients (a progressive image, or a baseline one whose
        // components come in separate scans), or a row's upsampling scratch: the bound
        // is the first, an i16 a sample, 3 components (4:4:4 at most).
        let bytes = info.pixels() * 6;
        let what = if info.progressive {
            "its progressive coefficients (estimated)"
        } else {
            "its coefficients or a row's scratch (estimated)"
        };
        return Err(ZuneFailure::Final(DecodeError::OutOfMemory { what, bytes }));
    }
    decoded.map_err(corrupt)?;
    // zune-jpeg recovers from bad data by filling the rest of the image (gray
    // for baseline, zero coefficients for progressive, or zero bits decoded
    // as coefficients once a scan's data runs out) and returning Ok; the
    // fork records it. Data that ran out before the last MCU (a cut-off file,
    // an end-of-image marker appended to one or inserted into a scan) is
    // damage jpeg-decoder would fill in as well; other bad data (a bad code, a
    // missing table) it refuses, so it gets those files.
    if let Some(r) = dec.stoker_recovery() {
        let e = DecodeError::Corrupt {
            decoder: "zune-jpeg",
            message: format!("recovered from bad data by filling the rest: {}", r.error),
        };
        return Err(if r.data_ran_out {
            ZuneFailure::Final(e)
        } else {
            ZuneFailure::Retry(e)
        });
    }
    if gray {
        color::expand_gray_in_place(out, px);
    }
    Ok(())
}

/// A thread's stack as std gives it without `RUST_MIN_STACK`: what one of jpeg-decoder's
/// worker threads needs first.
const WORKER_STACK: u64 = 2 << 20;

/// jpeg-decoder's error as ours. It starts a worker thread per component for an image
/// wider than 128 pixels, and one that cannot start (its stack past a memory limit, or a
/// thread past the process's limit: `EAGAIN` either way) is an I/O error, the only one
/// reading from a slice can give besides running out of data: not the file's fault, so
/// it is told as memory, which callers neither blame the file for nor skip it over.
fn jpeg_decoder_error(e: jpeg_decoder::Error) -> DecodeError {
    match e {
        jpeg_decoder::Error::Io(io) if io.kind() != std::io::ErrorKind::UnexpectedEof => {
            DecodeError::OutOfMemory {
                what:
                    "a jpeg-decoder worker thread (its stack, or a thread past the process's limit)",
                bytes: WORKER_STACK,
            }
        }
        jpeg_decoder::Error::Unsupported(_) => DecodeError::Corrupt {
            decoder: "jpeg-decoder",
            message: format!("unsupported: {e}"),
        },
        e => DecodeError::Corrupt {
            decoder: "jpeg-decoder",
            message: e.to_string(),
        },
    }
}

fn fallback_decode(
    data: &[u8],
    info: &ImageInfo,
    limits: &Limits,
    out: &mut [u8],
) -> Result<(), DecodeError> {
    use jpeg_decoder::PixelFormat;

    // jpeg-decoder has no scan cap and decodes every scan it finds (also
    // after the first of an interleaved sequential file, where the probe
    // stops counting) up to its end-of-image marker: bound them before it
    // starts, not counting data appended after that marker, by the probe's
    // cap and by the work over this image. The cap also bounds the ran-out
    // check's copy (64 bytes a scan): millions of empty scans in a small
    // image held half a gigabyte.
    let end = crate::primary_image_end(data).unwrap_or(data.len());
    let scans = info.scans_upper_bound(&data[..end]);
    if scans > u64::from(crate::MAX_SCANS) {
        return Err(DecodeError::Malformed {
            offset: info.frame_offset,
            what: "more than 1000 scans",
        });
    }
    info.check_scan_work(scans, limits)?;

    let mut dec = jpeg_decoder::Decoder::new(data);
    // Bound its allocation by our limit (4 bytes per pixel for CMYK, plus slack).
    let buffer = (info.pixels() as usize)
        .saturating_mul(4)
        .saturating_add(1 << 16);
    dec.set_max_decoding_buffer_size(buffer);
    let pixels = dec.decode().map_err(jpeg_decoder_error)?;
    if let Some(padded) = crate::ran_out::padded_at_scan_ends(data) {
        let mut again = jpeg_decoder::Decoder::new(&padded[..]);
        again.set_max_decoding_buffer_size(buffer);
        match again.decode().map_err(jpeg_decoder_error) {
            Ok(same) if same == pixels => {}
            Err(e @ DecodeError::OutOfMemory { .. }) => return Err(e),
            _ => {
                return Err(DecodeError::Corrupt {
                    decoder: "jpeg-decoder",
                    message: "a scan's data ran out before its last block (a file cut short?)"
                        .into(),
                })
            }
        }
    }
    let meta = dec.info().ok_or_else(|| DecodeError::Corrupt {
        decoder: "jpeg-decoder",
        message: "no image info after decode".into(),
    })?;
    if (u32::from(meta.width), u32::from(meta.height)) != (info.width, info.height) {
        return Err(DecodeError::Corrupt {
            decoder: "jpeg-decoder",
            message: format!(
                "decoder sees {}x{}, header says {}x{}",
                meta.width, meta.height, info.width, info.height
            ),
        });
    }
    let px = info.pixels() as usize;
    let short = |bpp: usize| DecodeError::Corrupt {
        decoder: "jpeg-decoder",
        message: format!("output {} bytes, want {}", pixels.len(), px * bpp),
    };
    match meta.pixel_format {
        PixelFormat::L8 => {
            let src = pixels.get(..px).ok_or_else(|| short(1))?;
            color::gray_to_rgb(src, out);
        }
        PixelFormat::RGB24 => {
            let src = pixels.get(..px * 3).ok_or_else(|| short(3))?;
            out.copy_from_slice(src);
        }
        PixelFormat::CMYK32 => {
            let src = pixels.get(..px * 4).ok_or_else(|| short(4))?;
            color::inverted_cmyk_to_rgb(src, out);
        }
        PixelFormat::L16 => {
            return Err(DecodeError::Unsupported {
                what: "sample precision other than 8 bits",
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_jpeg_decoder_cannot_start_is_not_the_files_fault() {
        // What `std::thread::Builder::spawn` gives when the stack cannot be mapped or the
        // process is at its thread limit.
        let no_thread = std::io::Error::from_raw_os_error(11);
        assert!(matches!(
            jpeg_decoder_error(jpeg_decoder::Error::Io(no_thread)),
            DecodeError::OutOfMemory {
                bytes: WORKER_STACK,
                ..
            }
        ));
        // Data that runs out is the file's.
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert!(matches!(
            jpeg_decoder_error(jpeg_decoder::Error::Io(eof)),
            DecodeError::Corrupt { .. }
        ));
        let bad = jpeg_decoder::Error::Format("bad Huffman code".into());
        assert!(matches!(
            jpeg_decoder_error(bad),
            DecodeError::Corrupt { .. }
        ));
    }
}
