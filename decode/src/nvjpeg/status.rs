//! The status codes nvJPEG functions return, with their names and which of
//! them blame the image rather than the machinery.

use super::sys;

/// A status code returned by an nvJPEG function (`nvjpegStatus_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NvjpegStatus(pub i32);

impl NvjpegStatus {
    /// `NVJPEG_STATUS_BAD_JPEG`.
    pub const BAD_JPEG: NvjpegStatus = NvjpegStatus(sys::NVJPEG_STATUS_BAD_JPEG);
    /// `NVJPEG_STATUS_JPEG_NOT_SUPPORTED`.
    pub const JPEG_NOT_SUPPORTED: NvjpegStatus =
        NvjpegStatus(sys::NVJPEG_STATUS_JPEG_NOT_SUPPORTED);
    /// `NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED`.
    pub const IMPLEMENTATION_NOT_SUPPORTED: NvjpegStatus =
        NvjpegStatus(sys::NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED);
    /// `NVJPEG_STATUS_ARCH_MISMATCH`: also what this crate reports for a
    /// hardware backend with no engines.
    pub(crate) const ARCH_MISMATCH: NvjpegStatus = NvjpegStatus(sys::NVJPEG_STATUS_ARCH_MISMATCH);
    /// `NVJPEG_STATUS_INCOMPLETE_BITSTREAM`.
    pub const INCOMPLETE_BITSTREAM: NvjpegStatus =
        NvjpegStatus(sys::NVJPEG_STATUS_INCOMPLETE_BITSTREAM);

    /// The `NVJPEG_STATUS_*` name.
    pub fn name(self) -> &'static str {
        match self.0 {
            sys::NVJPEG_STATUS_SUCCESS => "NVJPEG_STATUS_SUCCESS",
            sys::NVJPEG_STATUS_NOT_INITIALIZED => "NVJPEG_STATUS_NOT_INITIALIZED",
            sys::NVJPEG_STATUS_INVALID_PARAMETER => "NVJPEG_STATUS_INVALID_PARAMETER",
            sys::NVJPEG_STATUS_BAD_JPEG => "NVJPEG_STATUS_BAD_JPEG",
            sys::NVJPEG_STATUS_JPEG_NOT_SUPPORTED => "NVJPEG_STATUS_JPEG_NOT_SUPPORTED",
            sys::NVJPEG_STATUS_ALLOCATOR_FAILURE => "NVJPEG_STATUS_ALLOCATOR_FAILURE",
            sys::NVJPEG_STATUS_EXECUTION_FAILED => "NVJPEG_STATUS_EXECUTION_FAILED",
            sys::NVJPEG_STATUS_ARCH_MISMATCH => "NVJPEG_STATUS_ARCH_MISMATCH",
            sys::NVJPEG_STATUS_INTERNAL_ERROR => "NVJPEG_STATUS_INTERNAL_ERROR",
            sys::NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED => {
                "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED"
            }
            sys::NVJPEG_STATUS_INCOMPLETE_BITSTREAM => "NVJPEG_STATUS_INCOMPLETE_BITSTREAM",
            _ => "unknown nvjpegStatus_t",
        }
    }

    /// True when the status says the image (not the machinery) is at fault:
    /// the image should be retried on the CPU.
    pub fn is_image_fault(self) -> bool {
        matches!(
            self,
            NvjpegStatus::BAD_JPEG
                | NvjpegStatus::JPEG_NOT_SUPPORTED
                | NvjpegStatus::IMPLEMENTATION_NOT_SUPPORTED
                | NvjpegStatus::INCOMPLETE_BITSTREAM
        )
    }
}

impl std::fmt::Display for NvjpegStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}
