//! Turning one input file into one record payload: store the original JPEG, or decode,
//! resize and re-encode / keep raw pixels. Pure function of the file bytes and the options,
//! so the output never depends on which thread ran it.

use std::io::Cursor;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jpeg_encoder::{ColorType, Encoder, SamplingFactor};
use stoker_decode::{
    could_ever_allocate, primary_image_end, probe, CpuDecoder, DecodeMemory, ImageInfo, Limits,
};

use super::audit::JpegClass;
use super::image_kinds;
use super::options::{ConvertOptions, ResizeMode};
use super::tiff_ifd;
use crate::record::Encoding;
use crate::writer::RecordMeta;
use crate::FormatError;

/// What became of one input.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Convert it into this record.
    Record {
        meta: RecordMeta,
        payload: Vec<u8>,
        /// CRC32C of the payload, computed on the worker thread.
        crc32c: u32,
        /// The original JPEG bytes were stored unchanged.
        stored: bool,
        /// Re-encoded only because the hardware decoder could not take it (`--gpu-friendly`).
        for_gpu: bool,
    },
    /// Skip it, for this reason.
    Skip(String),
    /// Stop the conversion: it could not be read, for no fault of its own
    /// ([`crate::OutsideFault`]), and every input after it would fail the same way.
    Stop(FormatError),
    /// Stop the conversion: its decode could not get memory this process could have had
    /// (why, in words). Not a skip: with more memory, or at another moment, it converts,
    /// so a skip would make the dataset depend on the moment. The writer names the input
    /// ([`super::pipeline::write_one`]).
    ShortOfMemory(String),
}

/// Why an image was not decoded: a skip, or a stop for memory ([`Outcome::ShortOfMemory`]).
enum Refused {
    Skip(String),
    ShortOfMemory(String),
}

impl From<String> for Refused {
    fn from(reason: String) -> Refused {
        Refused::Skip(reason)
    }
}

impl From<Refused> for Outcome {
    fn from(r: Refused) -> Outcome {
        match r {
            Refused::Skip(reason) => Outcome::Skip(reason),
            Refused::ShortOfMemory(reason) => Outcome::ShortOfMemory(reason),
        }
    }
}

/// How long a decode whose memory this process could have waits for it (the other
/// workers' encodes, the writer's buffers) before the conversion stops. Stopping costs a
/// `--resume`; waiting costs seconds only where memory is in fact short, and on a loaded
/// machine memory another thread frees can take more than a second to show.
const MEMORY_WAIT: Duration = Duration::from_secs(5);

/// The memory for a decode of `need` bytes of a `w`×`h` image, or why not: a need no run
/// here can meet (past the address-space limit, or the machine's memory and swap) is
/// skipped, saying so; another waits up to [`MEMORY_WAIT`] for memory held elsewhere in
/// the process, then stops the conversion.
fn decode_memory(need: u64, w: u32, h: u32) -> Result<DecodeMemory, Refused> {
    if let Some(held) = DecodeMemory::reserve(need) {
        return Ok(held);
    }
    let image = format!("its {w}x{h} pixels");
    if !could_ever_allocate(need) {
        return Err(Refused::Skip(format!(
            "{image} need about {need} bytes to decode, more than this process could \
             allocate (lower --max-pixels, or convert it with more memory)"
        )));
    }
    let t0 = Instant::now();
    while t0.elapsed() < MEMORY_WAIT {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(held) = DecodeMemory::reserve(need) {
            return Ok(held);
        }
    }
    Err(Refused::ShortOfMemory(format!(
        "{image} need about {need} bytes to decode, which this process did not have free for \
         {} seconds (lower --max-pixels to skip such images)",
        MEMORY_WAIT.as_secs()
    )))
}

/// The skip reason of a file whose bytes are no image format at all.
const NOT_AN_IMAGE: &str = "not an image (unrecognized file format)";

/// The skip reason of an empty file.
const EMPTY_FILE: &str = "empty file";

/// What the `image` crate may allocate for a non-JPEG file's header and metadata (a PNG's
/// ICC profile and text, a TIFF's directory values) beyond the file's own size and its
/// pixels. Reading the size with `image`'s default limit of 512 MiB, a 1 MB PNG whose ICC
/// profile inflates to gigabytes made a worker hold 512 MB; and a small image, decoded with
/// no room beside its pixels, was skipped for a few megabytes of sound metadata.
const METADATA_BYTES: u64 = 16 << 20;

/// Whether `reason` is that of a file that is no image ([`Processed::not_image`]): for a
/// resumed `--strict` conversion, whose journal keeps the reasons only.
pub(super) fn is_not_an_image(reason: &str) -> bool {
    reason.starts_with("not an image") || reason == EMPTY_FILE
}

/// The result for one input: outcome plus what the audit learned.
#[derive(Debug)]
pub(crate) struct Processed {
    pub outcome: Outcome,
    pub jpeg: Option<JpegClass>,
    pub other_image: bool,
    /// Skipped as no image: empty, of no image format stoker knows, or macOS metadata.
    pub not_image: bool,
    /// Skipped under `--strict` too, as without it (set by the caller, who knows where the
    /// input came from).
    pub strict_skips: bool,
    pub input_bytes: u64,
}

/// RGB pixels, HWC u8.
struct Rgb {
    width: u32,
    height: u32,
    data: Vec<u8>,
}

fn is_jpeg(data: &[u8]) -> bool {
    data.len() >= 2 && data[0] == 0xFF && data[1] == 0xD8
}

/// A record of `payload`, with its CRC32C.
fn record(meta: RecordMeta, payload: Vec<u8>, stored: bool, for_gpu: bool) -> Outcome {
    Outcome::Record {
        meta,
        crc32c: crc32c::crc32c(&payload[..]),
        payload,
        stored,
        for_gpu,
    }
}

/// What to do with a JPEG input.
enum JpegPlan {
    /// Store the file's bytes unchanged, as this record.
    Store(RecordMeta),
    /// Skip it, or a record of new bytes.
    Done(Outcome),
}

/// Processes one input file's bytes; a JPEG stored unchanged keeps `input` as its payload.
pub(crate) fn process(input: Vec<u8>, label: u32, opts: &ConvertOptions) -> Processed {
    let data = &input[..];
    let mut p = Processed {
        outcome: Outcome::Skip(String::new()),
        jpeg: None,
        other_image: false,
        not_image: false,
        strict_skips: false,
        input_bytes: data.len() as u64,
    };
    if data.is_empty() {
        // No image either (a `.gitkeep`), for `--strict`.
        p.not_image = true;
        p.outcome = Outcome::Skip(EMPTY_FILE.into());
        return p;
    }
    let limits = crate::manifest::conversion_limits(opts.max_pixels);
    p.outcome = if is_jpeg(data) {
        match process_jpeg(data, label, opts, &limits, &mut p.jpeg) {
            JpegPlan::Store(meta) => record(meta, input, true, false),
            JpegPlan::Done(outcome) => outcome,
        }
    } else if image_kinds::apple_double(data) {
        p.not_image = true;
        Outcome::Skip(
            "not an image: macOS metadata (an AppleDouble `._` file, written beside each file \
             macOS copies where it cannot keep its attributes)"
                .into(),
        )
    } else if let Some(name) = image_kinds::unread_format(data) {
        Outcome::Skip(format!(
            "unsupported image format ({name}; {}: convert such files to JPEG first)",
            image_kinds::READ
        ))
    } else if let Ok(format) = image::guess_format(data) {
        match decode_other(data, format, opts) {
            // The memory stays held until the pixels are encoded and dropped.
            Ok((rgb, _held)) => {
                p.other_image = true;
                finish_pixels(rgb, label, opts, false, None)
            }
            Err(refused) => refused.into(),
        }
    } else {
        // Told apart for `--strict`, which skips such a file of an image folder when its
        // name does not say image either (`.DS_Store`, `README.txt`) or it is hidden.
        p.not_image = true;
        Outcome::Skip(NOT_AN_IMAGE.into())
    };
    p
}

fn process_jpeg(
    data: &[u8],
    label: u32,
    opts: &ConvertOptions,
    limits: &Limits,
    class: &mut Option<JpegClass>,
) -> JpegPlan {
    let skip = |reason: String| JpegPlan::Done(Outcome::Skip(reason));
    let info = match probe(data, limits) {
        Ok(info) => info,
        Err(e) => return skip(format!("bad JPEG header: {e}")),
    };
    let c = JpegClass::of(&info);
    let hardware_ok = c.hardware_ok();
    *class = Some(c);
    if let Err(e) = info.supported() {
        return skip(format!("cannot be decoded by stoker: {e}"));
    }
    if primary_image_end(data).is_none() {
        // Checked with or without `check_decode` (the CPU decoder also refuses a cut-off
        // file): a cut-off file would train on gray rows, and this names why it is skipped.
        return skip(
            "truncated JPEG: the image's data ends before its end-of-image marker (FF D9)".into(),
        );
    }
    let too_big = opts
        .max_side
        .is_some_and(|m| info.width.max(info.height) > m);
    let for_gpu = opts.gpu_friendly && !hardware_ok;
    let decoder = CpuDecoder::new(*limits);
    if opts.encoding == Encoding::Jpeg && !too_big && !for_gpu {
        if opts.check_decode {
            if let Err(refused) = decode_jpeg(&decoder, data, &info, opts) {
                return JpegPlan::Done(refused.into());
            }
        }
        return JpegPlan::Store(RecordMeta {
            encoding: Encoding::Jpeg,
            height: info.height,
            width: info.width,
            channels: 3,
            label,
        });
    }
    JpegPlan::Done(match decode_jpeg(&decoder, data, &info, opts) {
        // The memory stays held until the pixels are encoded and dropped.
        Ok((rgb, _held)) => {
            let for_gpu = for_gpu && !too_big;
            finish_pixels(rgb, label, opts, for_gpu, info.exif_orientation)
        }
        Err(refused) => refused.into(),
    })
}

/// Decodes the JPEG `data`, whose header reads as `info`. The decoder allocates its pixels
/// (and a progressive file's coefficients, 16 bits a sample) infallibly: with `max_pixels`
/// raised, a file of a few bytes can claim more than the memory the process may have, and
/// the failed allocation aborted the whole conversion. Asked for first ([`decode_memory`]),
/// such an image is skipped instead, saying why, or the conversion stops where the memory
/// could be had. The memory is returned held with the pixels: the other workers' decodes
/// count it until the caller has resized and encoded them.
fn decode_jpeg(
    decoder: &CpuDecoder,
    data: &[u8],
    info: &ImageInfo,
    opts: &ConvertOptions,
) -> Result<(Rgb, DecodeMemory), Refused> {
    let held = decode_memory(info.decode_bytes(), info.width, info.height)?;
    rendezvous(opts.decode_rendezvous);
    let (info, data) = decoder.decode_to_vec(data).map_err(|e| match e {
        // Beyond the estimate reserved: memory, not the file, as above.
        stoker_decode::DecodeError::OutOfMemory { .. } => {
            Refused::ShortOfMemory(format!("{e}: this process could not allocate them"))
        }
        e => Refused::Skip(format!("corrupt JPEG: {e}")),
    })?;
    let rgb = Rgb {
        width: info.width,
        height: info.height,
        data,
    };
    Ok((rgb, held))
}

/// Decodes a non-JPEG image of `format` (as its bytes say) with the `image` crate,
/// refusing oversized ones before decoding; the memory held with the pixels, as
/// [`decode_jpeg`].
fn decode_other(
    data: &[u8],
    format: image::ImageFormat,
    opts: &ConvertOptions,
) -> Result<(Rgb, DecodeMemory), Refused> {
    let max_pixels = opts.max_pixels;
    if format == image::ImageFormat::Tiff {
        if let Some(why) = image_kinds::camera_raw(data) {
            return Err(image_kinds::camera_raw_reason(why).into());
        }
        if let Some(why) = tiff_ifd::overlong_entry(data) {
            return Err(format!("corrupt {format:?}: {why}").into());
        }
    }
    // Metadata read as stored takes at most the file's size; what inflates, 16 MiB more.
    let metadata = (data.len() as u64).saturating_add(METADATA_BYTES);
    let mut header = image::ImageReader::with_format(Cursor::new(data), format);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(metadata);
    header.limits(limits);
    let (w, h) = header.into_dimensions().map_err(|e| match e {
        image::ImageError::Unsupported(_) => unsupported(format, &e),
        image::ImageError::Limits(_) => format!(
            "bad {format:?} header: {e} (reading its header and metadata needs more than its \
             size and {} MiB)",
            METADATA_BYTES >> 20
        ),
        e => format!("bad {format:?} header: {e}"),
    })?;
    let pixels = u64::from(w) * u64::from(h);
    if pixels > max_pixels {
        return Err(
            format!("image too large: {w}x{h} = {pixels} pixels, limit {max_pixels}").into(),
        );
    }
    if pixels == 0 {
        return Err(format!("{format:?} image has zero size").into());
    }
    let mut reader = image::ImageReader::with_format(Cursor::new(data), format);
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(w);
    limits.max_image_height = Some(h);
    limits.max_alloc = Some(pixels.saturating_mul(16).saturating_add(metadata));
    reader.limits(limits);
    let failed = |e: image::ImageError| match e {
        image::ImageError::Unsupported(_) => unsupported(format, &e),
        e => format!("corrupt {format:?}: {e}"),
    };
    let decoder = reader.into_decoder().map_err(failed)?;
    // The decoder's buffer and its RGB copy. `image` allocates them infallibly: with
    // `max_pixels` raised, a file of a few bytes can claim more than the memory the process
    // may have, and the failed allocation aborted the whole conversion. Asked for first
    // ([`decode_memory`]).
    let need = image::ImageDecoder::total_bytes(&decoder).saturating_add(pixels.saturating_mul(3));
    let held = decode_memory(need, w, h)?;
    rendezvous(opts.decode_rendezvous);
    let img = image::DynamicImage::from_decoder(decoder).map_err(failed)?;
    let rgb = img.to_rgb8();
    let rgb = Rgb {
        width: rgb.width(),
        height: rgb.height(),
        data: rgb.into_raw(),
    };
    Ok((rgb, held))
}

/// Test hook ([`ConvertOptions::decode_rendezvous`]): a decode that has its memory waits,
/// at most two seconds, until `n` decodes have theirs.
fn rendezvous(n: Option<u32>) {
    static ARRIVED: Mutex<u32> = Mutex::new(0);
    static ALL: Condvar = Condvar::new();
    let Some(n) = n else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut arrived = ARRIVED.lock().unwrap_or_else(PoisonError::into_inner);
    *arrived += 1;
    ALL.notify_all();
    while *arrived < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        arrived = ALL
            .wait_timeout(arrived, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// The skip reason for an image the `image` crate recognizes but this build cannot read: a
/// format without its feature (AVIF, TGA, ...), or a variant of one it has (then `e` says
/// which).
fn unsupported(format: image::ImageFormat, e: &image::ImageError) -> String {
    match e {
        image::ImageError::Unsupported(u)
            if matches!(u.kind(), image::error::UnsupportedErrorKind::Format(_)) =>
        {
            format!(
                "unsupported image format ({format:?}; {})",
                image_kinds::READ
            )
        }
        e => format!("unsupported image format ({format:?}: {e})"),
    }
}

/// Resizes decoded pixels per the options and produces the record (raw or JPEG). A JPEG
/// made again keeps the source's EXIF `orientation` (2..=8), as the stored original
/// would have: the pixels are not turned (the loader, like torchvision's decoders by
/// default, does not turn them either), and the tag is not lost for whoever reads it.
fn finish_pixels(
    rgb: Rgb,
    label: u32,
    opts: &ConvertOptions,
    for_gpu: bool,
    orientation: Option<u16>,
) -> Outcome {
    let result = match opts.encoding {
        Encoding::Raw => {
            let (w, h) = opts.raw_size.expect("validated: raw needs a size");
            resize_to(rgb, w, h, opts.resize).map(|px| (px, Encoding::Raw))
        }
        Encoding::Jpeg => {
            let rgb = match opts.max_side {
                Some(m) if rgb.width.max(rgb.height) > m => {
                    let (w, h) = fit_long_side(rgb.width, rgb.height, m);
                    resize_to(rgb, w, h, ResizeMode::Stretch)
                }
                _ => Ok(rgb),
            };
            rgb.and_then(|px| {
                encode_jpeg(&px, opts.quality, orientation).map(|data| {
                    (
                        Rgb {
                            width: px.width,
                            height: px.height,
                            data,
                        },
                        Encoding::Jpeg,
                    )
                })
            })
        }
    };
    match result {
        Ok((px, encoding)) => record(
            RecordMeta {
                encoding,
                height: px.height,
                width: px.width,
                channels: 3,
                label,
            },
            px.data,
            false,
            for_gpu,
        ),
        Err(reason) => Outcome::Skip(reason),
    }
}

/// Output size with the long side `m` and the aspect ratio kept (each side at least 1).
pub(crate) fn fit_long_side(w: u32, h: u32, m: u32) -> (u32, u32) {
    let scale = |a: u32, b: u32| {
        ((u64::from(a) * u64::from(m) + u64::from(b) / 2) / u64::from(b)).max(1) as u32
    };
    if w >= h {
        (m, scale(h, w))
    } else {
        (scale(w, h), m)
    }
}

/// Resizes to exactly `w × h` ([`super::resize::resize_rgb`]).
fn resize_to(src: Rgb, w: u32, h: u32, mode: ResizeMode) -> Result<Rgb, String> {
    if src.width == w && src.height == h {
        return Ok(src);
    }
    let data = super::resize::resize_rgb(&src.data, (src.width, src.height), (w, h), mode)?;
    Ok(Rgb {
        width: w,
        height: h,
        data,
    })
}

/// Baseline, 4:2:0, Huffman-coded JPEG at `quality`: what every GPU decoder path takes;
/// with an EXIF `orientation` other than 1 (the default), an APP1 segment holding it.
fn encode_jpeg(px: &Rgb, quality: u8, orientation: Option<u16>) -> Result<Vec<u8>, String> {
    let (Ok(w), Ok(h)) = (u16::try_from(px.width), u16::try_from(px.height)) else {
        return Err(format!(
            "{}x{} is too large to encode as JPEG (65535 max per side); use --max-side (Python max_side=)",
            px.width, px.height
        ));
    };
    let mut out = Vec::with_capacity(px.data.len() / 8);
    let mut enc = Encoder::new(&mut out, quality);
    enc.set_sampling_factor(SamplingFactor::R_4_2_0);
    if let Some(o) = orientation.filter(|o| (2..=8).contains(o)) {
        enc.add_app_segment(1, exif_orientation(o))
            .map_err(|e| format!("JPEG encode: {e}"))?;
    }
    enc.encode(&px.data, w, h, ColorType::Rgb)
        .map_err(|e| format!("JPEG encode: {e}"))?;
    Ok(out)
}

/// An APP1 EXIF payload holding only IFD0's Orientation tag (0x0112, one SHORT):
/// `Exif\0\0`, a little-endian TIFF header, one IFD entry, no next IFD.
fn exif_orientation(o: u16) -> Vec<u8> {
    let mut v = b"Exif\0\0II*\0".to_vec();
    v.extend(8u32.to_le_bytes()); // IFD0 right after the TIFF header
    v.extend(1u16.to_le_bytes()); // one entry
    v.extend(0x0112u16.to_le_bytes());
    v.extend(3u16.to_le_bytes()); // SHORT
    v.extend(1u32.to_le_bytes());
    v.extend(o.to_le_bytes());
    v.extend([0, 0]); // the value field's other two bytes
    v.extend(0u32.to_le_bytes()); // no next IFD
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_side_fit_keeps_aspect() {
        assert_eq!(fit_long_side(500, 375, 256), (256, 192));
        assert_eq!(fit_long_side(375, 500, 256), (192, 256));
        assert_eq!(fit_long_side(5000, 1, 100), (100, 1));
    }

    #[test]
    fn reencoded_jpeg_is_baseline_420_and_decodes() {
        let px = Rgb {
            width: 33,
            height: 17,
            data: (0..33 * 17 * 3).map(|i| (i % 251) as u8).collect(),
        };
        let jpeg = encode_jpeg(&px, 90, None).unwrap();
        let info = probe(&jpeg, &Limits::default()).unwrap();
        assert_eq!((info.width, info.height), (33, 17));
        assert!(info.hardware_decodable());
        assert_eq!(info.subsampling, stoker_decode::Subsampling::S420);
        assert_eq!(info.sof, 0);
    }

    #[test]
    fn center_crop_resize_has_target_size() {
        let px = Rgb {
            width: 40,
            height: 20,
            data: vec![128; 40 * 20 * 3],
        };
        let out = resize_to(px, 8, 8, ResizeMode::ShorterSide).unwrap();
        assert_eq!((out.width, out.height, out.data.len()), (8, 8, 8 * 8 * 3));
        assert!(out.data.iter().all(|&v| v == 128));
    }
}
