//! Raw nvJPEG types and constants (from `nvjpeg.h`).

#![allow(non_camel_case_types, dead_code)]

/// `nvjpegStatus_t` values.
pub const NVJPEG_STATUS_SUCCESS: i32 = 0;
pub const NVJPEG_STATUS_NOT_INITIALIZED: i32 = 1;
pub const NVJPEG_STATUS_INVALID_PARAMETER: i32 = 2;
pub const NVJPEG_STATUS_BAD_JPEG: i32 = 3;
pub const NVJPEG_STATUS_JPEG_NOT_SUPPORTED: i32 = 4;
pub const NVJPEG_STATUS_ALLOCATOR_FAILURE: i32 = 5;
pub const NVJPEG_STATUS_EXECUTION_FAILED: i32 = 6;
pub const NVJPEG_STATUS_ARCH_MISMATCH: i32 = 7;
pub const NVJPEG_STATUS_INTERNAL_ERROR: i32 = 8;
pub const NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: i32 = 9;
pub const NVJPEG_STATUS_INCOMPLETE_BITSTREAM: i32 = 10;
