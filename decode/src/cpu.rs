//! CPU backend: zune-jpeg for ordinary files, jpeg-decoder for the rest,
//! chosen per image from what [`probe`] finds.

use std::panic::{catch_unwind, AssertUnwindSafe};

use rayon::prelude::*;

use crate::color;
use crate::{probe, ColorSpace, DecodeError, ImageInfo, Limits, Route, RouteCounters, RouteCounts};

/// Decodes JPEGs to RGB interleaved u8 (HWC) on the CPU.
///
/// Each image is probed first (pixel limit enforced from the header), then
/// decoded by zune-jpeg when [`ImageInfo::zune_decodable`], else by
/// jpeg-decoder; a zune-jpeg error is retried with jpeg-decoder. Third-party
/// panics are caught and become [`DecodeError::Panicked`]. Gray, CMYK and YCCK
/// inputs come out as RGB. EXIF orientation is reported, not applied.
///
/// `CpuDecoder` is `Send + Sync`; share one across threads.
///
/// # Examples
/// ```
/// use stoker_decode::{CpuDecoder, Limits};
/// let data = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
///     "/../../shared/data/conformance/core/pillow__Tests__images__hopper.jpg")).unwrap();
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
    ///     "/../../shared/data/conformance/core/go__video-001.jpeg")).unwrap();
    /// let info = probe(&data, &Limits::default()).unwrap();
    /// let mut out = vec![0u8; info.rgb_len()];
    /// CpuDecoder::new(Limits::default()).decode_into(&data, &mut out).unwrap();
    /// ```
    ///
    /// # Errors
    /// Every [`probe`] error; [`DecodeError::Unsupported`] (arithmetic,
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
        let result = probe(data, &self.limits).and_then(|info| {
            let route = self.decode_probed(data, &info, out)?;
            Ok((info, route))
        });
        match &result {
            Ok((_, route)) => self.counters.record(*route),
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
        let result = probe(data, &self.limits).and_then(|info| {
            let mut out = vec![0u8; info.rgb_len()];
            let route = self.decode_probed(data, &info, &mut out)?;
            Ok((info, route, out))
        });
        match &result {
            Ok((_, route, _)) => self.counters.record(*route),
            Err(_) => self.counters.record_failure(),
        }
        result
    }

    /// Decodes every input into the output of the same index, in parallel on
    /// the current rayon pool. One result per image; a bad image fails alone.
    ///
    /// # Examples
    /// ```
    /// use stoker_decode::{CpuDecoder, Limits};
    /// let good = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
    ///     "/../../shared/data/conformance/core/go__video-001.jpeg")).unwrap();
    /// let inputs: Vec<&[u8]> = vec![&good, b"not a jpeg"];
    /// let mut a = vec![0u8; 150 * 103 * 3];
    /// let mut b = vec![0u8; 16];
    /// let mut outputs: Vec<&mut [u8]> = vec![&mut a, &mut b];
    /// let results = CpuDecoder::new(Limits::default()).decode_batch(&inputs, &mut outputs);
    /// assert!(results[0].is_ok() && results[1].is_err());
    /// ```
    ///
    /// If `outputs.len() != inputs.len()`, every result is
    /// [`DecodeError::BatchShape`].
    pub fn decode_batch(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Vec<Result<ImageInfo, DecodeError>> {
        if inputs.len() != outputs.len() {
            return (0..inputs.len())
                .map(|_| {
                    Err(DecodeError::BatchShape {
                        inputs: inputs.len(),
                        outputs: outputs.len(),
                    })
                })
                .collect();
        }
        inputs
            .par_iter()
            .zip(outputs.par_iter_mut())
            .map(|(data, out)| self.decode_into(data, out))
            .collect()
    }

    /// Decodes an already probed image; shared with the GPU decoder's CPU fallback.
    pub(crate) fn decode_probed(
        &self,
        data: &[u8],
        info: &ImageInfo,
        out: &mut [u8],
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
        if info.zune_decodable() {
            match guarded("zune-jpeg", || zune_decode(data, info, out)) {
                Ok(()) => return Ok(Route::CpuZune),
                Err(e) => {
                    tracing::debug!("zune-jpeg failed ({e}); retrying with jpeg-decoder");
                }
            }
        }
        guarded("jpeg-decoder", || fallback_decode(data, info, out))?;
        Ok(Route::CpuFallback)
    }
}

/// Runs `f`, turning a panic into [`DecodeError::Panicked`].
fn guarded(
    decoder: &'static str,
    f: impl FnOnce() -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            Err(DecodeError::Panicked { decoder, message })
        }
    }
}

fn zune_decode(data: &[u8], info: &ImageInfo, out: &mut [u8]) -> Result<(), DecodeError> {
    use zune_core::bytestream::ZCursor;
    use zune_core::colorspace::ColorSpace as ZColor;
    use zune_core::options::DecoderOptions;

    let corrupt = |e: zune_jpeg::errors::DecodeErrors| DecodeError::Corrupt {
        decoder: "zune-jpeg",
        message: e.to_string(),
    };
    // Our own pixel limit was enforced by probe; let zune take any JPEG size.
    let opts = DecoderOptions::default()
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX))
        .set_strict_mode(false)
        .jpeg_set_out_colorspace(if info.color_space == ColorSpace::Gray {
            ZColor::Luma
        } else {
            ZColor::RGB
        });
    let mut dec = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(data), opts);
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
        });
    }
    if info.color_space == ColorSpace::Gray {
        let px = info.pixels() as usize;
        dec.decode_into(&mut out[..px]).map_err(corrupt)?;
        color::expand_gray_in_place(out, px);
    } else {
        dec.decode_into(out).map_err(corrupt)?;
    }
    Ok(())
}

fn fallback_decode(data: &[u8], info: &ImageInfo, out: &mut [u8]) -> Result<(), DecodeError> {
    use jpeg_decoder::PixelFormat;

    let corrupt = |e: jpeg_decoder::Error| match e {
        jpeg_decoder::Error::Unsupported(_) => DecodeError::Corrupt {
            decoder: "jpeg-decoder",
            message: format!("unsupported: {e}"),
        },
        e => DecodeError::Corrupt {
            decoder: "jpeg-decoder",
            message: e.to_string(),
        },
    };
    let mut dec = jpeg_decoder::Decoder::new(data);
    // Bound its allocation by our limit (4 bytes per pixel for CMYK, plus slack).
    dec.set_max_decoding_buffer_size(
        (info.pixels() as usize)
            .saturating_mul(4)
            .saturating_add(1 << 16),
    );
    let pixels = dec.decode().map_err(corrupt)?;
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
            color::inverted_cmyk_to_rgb(src, out, info.adobe_transform.is_some());
        }
        PixelFormat::L16 => {
            return Err(DecodeError::Unsupported {
                what: "sample precision other than 8 bits",
            })
        }
    }
    Ok(())
}
