//! The one error type of this crate.

use crate::nvjpeg::LoadError;

/// Everything that can go wrong while probing or decoding one image.
///
/// Variants carry structured fields so a caller can match on them (count
/// unsupported files separately from corrupt ones, report the offset of a
/// broken header, ...). The enum is `#[non_exhaustive]`: new variants may be
/// added without a breaking change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input holds no bytes at all.
    #[error("empty input: 0 bytes")]
    Empty,
    /// The input does not start with the JPEG start-of-image marker `FF D8`.
    #[error("not a JPEG: starts with {first:02X?}, want [FF, D8]")]
    NotJpeg {
        /// The first bytes of the input (up to 2).
        first: Vec<u8>,
    },
    /// The header ends before a required segment is complete.
    #[error("truncated JPEG header: {what} at byte {offset} needs {need} bytes, {have} left")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it starts.
        offset: usize,
        /// Bytes it needs.
        need: usize,
        /// Bytes left in the input.
        have: usize,
    },
    /// A header segment holds values the JPEG standard does not allow.
    #[error("malformed JPEG header at byte {offset}: {what}")]
    Malformed {
        /// Byte offset of the segment.
        offset: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// A valid JPEG feature this decoder does not implement (arithmetic
    /// coding, 12/16-bit samples, lossless, hierarchical).
    #[error("unsupported JPEG feature: {what}")]
    Unsupported {
        /// The feature, e.g. `"arithmetic coding"`.
        what: &'static str,
    },
    /// The header declares more pixels than [`Limits::max_pixels`](crate::Limits) allows;
    /// nothing was allocated for it.
    #[error("image too large: {width}x{height} = {pixels} pixels, limit {max_pixels}")]
    TooLarge {
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
        /// `width * height`.
        pixels: u64,
        /// The configured limit.
        max_pixels: u64,
    },
    /// Decoding would take more than [`Limits::max_scan_work`](crate::Limits): too many
    /// progressive scans over too many pixels. Found from the headers, before decoding.
    #[error("too much decoding work: {scans} scans over {pixels} pixels = {work}, limit {max_scan_work} (pixels x scans)")]
    TooMuchWork {
        /// `width * height`.
        pixels: u64,
        /// Scans in the file.
        scans: u32,
        /// `pixels * scans`.
        work: u64,
        /// The configured limit.
        max_scan_work: u64,
    },
    /// The caller's output buffer is smaller than `ImageInfo::rgb_len()`.
    #[error("output buffer too small: need {need} bytes, got {got}")]
    OutputTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// The entropy-coded data (or a header the backend re-reads) is corrupt.
    #[error("corrupt JPEG data ({decoder}): {message}")]
    Corrupt {
        /// Which backend found it (`"zune-jpeg"`, `"jpeg-decoder"`, `"nvjpeg"`).
        decoder: &'static str,
        /// The backend's message.
        message: String,
    },
    /// Memory the decoder needed could not be allocated (this process is out of memory or
    /// at its limit): not the file's fault, and not a bad input.
    #[error("the {bytes} bytes of {what} cannot be allocated")]
    OutOfMemory {
        /// What the memory was for.
        what: &'static str,
        /// How much (an estimate where the decoder does not say).
        bytes: u64,
    },
    /// A third-party decoder panicked; the panic was caught and the image failed alone.
    #[error("decoder {decoder} panicked: {message}")]
    Panicked {
        /// Which backend panicked.
        decoder: &'static str,
        /// The panic payload, if it was a string.
        message: String,
    },
    /// The nvJPEG library could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// No usable CUDA device (no driver, no device, or the driver refused).
    #[error("no GPU: {reason}")]
    NoGpu {
        /// Why.
        reason: String,
    },
    /// An nvJPEG call returned an error status.
    #[error("nvJPEG {call} failed: {status}")]
    Nvjpeg {
        /// The nvJPEG function.
        call: &'static str,
        /// Its status.
        status: crate::nvjpeg::NvjpegStatus,
    },
    /// A CUDA driver call failed.
    #[error("CUDA: {0}")]
    Cuda(#[from] cudarc::driver::DriverError),
    /// `decode_batch` got a different number of outputs than inputs.
    #[error("batch shape: {inputs} inputs but {outputs} outputs")]
    BatchShape {
        /// Number of inputs.
        inputs: usize,
        /// Number of outputs.
        outputs: usize,
    },
    /// A [`crate::GpuDecoderOptions`] field (public, so set to anything) out of range;
    /// checked by [`crate::GpuDecoderOptions::validate`] before anything is created.
    #[error("invalid GPU decoder option `{field}`: {reason}")]
    InvalidOptions {
        /// The field.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// `decode_batch_for` got a different number of regions than inputs.
    #[error("batch shape: {inputs} inputs but {regions} regions")]
    RegionsShape {
        /// Number of inputs.
        inputs: usize,
        /// Number of regions.
        regions: usize,
    },
}

impl DecodeError {
    /// True for errors about the image itself (corrupt, truncated, unsupported,
    /// too large), false for errors of the machinery (GPU, library, caller buffers).
    ///
    /// A loader uses this to decide whether to skip a sample or abort.
    ///
    /// # Examples
    /// ```
    /// use stoker_decode::{probe, Limits};
    /// let err = probe(b"GIF89a", &Limits::default()).unwrap_err();
    /// assert!(err.is_bad_input());
    /// ```
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            DecodeError::Empty
                | DecodeError::NotJpeg { .. }
                | DecodeError::Truncated { .. }
                | DecodeError::Malformed { .. }
                | DecodeError::Unsupported { .. }
                | DecodeError::TooLarge { .. }
                | DecodeError::TooMuchWork { .. }
                | DecodeError::Corrupt { .. }
                | DecodeError::Panicked { .. }
        )
    }
}
