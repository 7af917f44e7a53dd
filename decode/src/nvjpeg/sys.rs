//! Raw nvJPEG types, constants and the function table, loaded at run time.
//!
//! Signatures and enum values follow `nvjpeg.h` (CUDA 12/13). Nothing here is
//! public outside the crate; `result.rs` wraps the calls and `safe.rs` owns the
//! handles.

#![allow(non_camel_case_types, non_snake_case, dead_code)]

use std::ffi::{c_int, c_uint, c_void};
use std::path::Path;

use super::error::LoadError;

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

/// `nvjpegBackend_t` values.
pub const NVJPEG_BACKEND_DEFAULT: c_int = 0;
pub const NVJPEG_BACKEND_HYBRID: c_int = 1;
pub const NVJPEG_BACKEND_GPU_HYBRID: c_int = 2;
pub const NVJPEG_BACKEND_HARDWARE: c_int = 3;

/// `nvjpegOutputFormat_t` values.
pub const NVJPEG_OUTPUT_UNCHANGED: c_int = 0;
pub const NVJPEG_OUTPUT_YUV: c_int = 1;
pub const NVJPEG_OUTPUT_Y: c_int = 2;
pub const NVJPEG_OUTPUT_RGB: c_int = 3;
pub const NVJPEG_OUTPUT_BGR: c_int = 4;
pub const NVJPEG_OUTPUT_RGBI: c_int = 5;
pub const NVJPEG_OUTPUT_BGRI: c_int = 6;

/// `nvjpegChromaSubsampling_t` values.
pub const NVJPEG_CSS_444: c_int = 0;
pub const NVJPEG_CSS_422: c_int = 1;
pub const NVJPEG_CSS_420: c_int = 2;
pub const NVJPEG_CSS_440: c_int = 3;
pub const NVJPEG_CSS_411: c_int = 4;
pub const NVJPEG_CSS_410: c_int = 5;
pub const NVJPEG_CSS_GRAY: c_int = 6;
pub const NVJPEG_CSS_410V: c_int = 7;
pub const NVJPEG_CSS_UNKNOWN: c_int = -1;

/// `libraryPropertyType` values (for `nvjpegGetProperty`).
pub const MAJOR_VERSION: c_int = 0;
pub const MINOR_VERSION: c_int = 1;
pub const PATCH_LEVEL: c_int = 2;

/// `NVJPEG_MAX_COMPONENT`.
pub const NVJPEG_MAX_COMPONENT: usize = 4;

/// Opaque handles: pointers to library-private structs.
pub type nvjpegHandle_t = *mut c_void;
pub type nvjpegJpegState_t = *mut c_void;
pub type nvjpegJpegStream_t = *mut c_void;
pub type nvjpegJpegDecoder_t = *mut c_void;
pub type nvjpegBufferPinned_t = *mut c_void;
pub type nvjpegBufferDevice_t = *mut c_void;
pub type nvjpegDecodeParams_t = *mut c_void;
/// `cudaStream_t`; the same object as the driver API's `CUstream`.
pub type cudaStream_t = *mut c_void;
/// `nvjpegStatus_t`.
pub type nvjpegStatus_t = c_int;

/// `tDevMallocV2` / `tPinnedMallocV2`: `(ctx, out pointer, size, stream)`, 0 on success.
pub type tMallocV2 =
    unsafe extern "C" fn(*mut c_void, *mut *mut c_void, usize, cudaStream_t) -> c_int;
/// `tDevFreeV2` / `tPinnedFreeV2`: `(ctx, pointer, size, stream)`, 0 on success.
pub type tFreeV2 = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, cudaStream_t) -> c_int;

/// `nvjpegDevAllocatorV2_t`: stream-ordered device allocator with a context
/// pointer passed back to both functions.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvjpegDevAllocatorV2_t {
    pub dev_malloc: Option<tMallocV2>,
    pub dev_free: Option<tFreeV2>,
    pub dev_ctx: *mut c_void,
}

/// `nvjpegPinnedAllocatorV2_t`: as [`nvjpegDevAllocatorV2_t`], for pinned host memory.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvjpegPinnedAllocatorV2_t {
    pub pinned_malloc: Option<tMallocV2>,
    pub pinned_free: Option<tFreeV2>,
    pub pinned_ctx: *mut c_void,
}

/// `nvjpegImage_t`: per-channel device pointers and pitches. For interleaved
/// output (RGBI) only `channel[0]`/`pitch[0]` are used.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvjpegImage_t {
    pub channel: [*mut u8; NVJPEG_MAX_COMPONENT],
    pub pitch: [usize; NVJPEG_MAX_COMPONENT],
}

impl Default for nvjpegImage_t {
    fn default() -> Self {
        nvjpegImage_t {
            channel: [std::ptr::null_mut(); NVJPEG_MAX_COMPONENT],
            pitch: [0; NVJPEG_MAX_COMPONENT],
        }
    }
}

macro_rules! table {
    ($($name:ident : fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// Every nvJPEG function this crate calls, resolved once at load.
        pub struct Table {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
            /// Keeps the library mapped while the pointers above are used.
            _lib: libloading::Library,
        }

        impl Table {
            /// Resolves every symbol in `lib` (opened from `path`).
            ///
            /// # Safety
            /// `lib` must be an nvJPEG library whose functions have the
            /// signatures declared in this table (those of `nvjpeg.h`).
            pub unsafe fn resolve(lib: libloading::Library, path: &Path) -> Result<Table, LoadError> {
                Ok(Table {
                    $($name: {
                        // SAFETY: the caller guarantees the library's symbol has this
                        // signature; the pointer stays valid because `_lib` is kept.
                        let sym: libloading::Symbol<unsafe extern "C" fn($($arg),*) -> $ret> =
                            unsafe { lib.get(concat!(stringify!($name), "\0").as_bytes()) }
                                .map_err(|e| LoadError::MissingSymbol {
                                    path: path.to_path_buf(),
                                    symbol: stringify!($name),
                                    message: e.to_string(),
                                })?;
                        *sym
                    },)*
                    _lib: lib,
                })
            }

            /// Names of every symbol in the table.
            pub const SYMBOLS: &'static [&'static str] = &[$(stringify!($name)),*];
        }
    };
}

table! {
    nvjpegGetProperty: fn(c_int, *mut c_int) -> nvjpegStatus_t;
    nvjpegCreateEx: fn(c_int, *mut c_void, *mut c_void, c_uint, *mut nvjpegHandle_t) -> nvjpegStatus_t;
    nvjpegDestroy: fn(nvjpegHandle_t) -> nvjpegStatus_t;
    nvjpegGetHardwareDecoderInfo: fn(nvjpegHandle_t, *mut c_uint, *mut c_uint) -> nvjpegStatus_t;
    nvjpegJpegStateCreate: fn(nvjpegHandle_t, *mut nvjpegJpegState_t) -> nvjpegStatus_t;
    nvjpegJpegStateDestroy: fn(nvjpegJpegState_t) -> nvjpegStatus_t;
    nvjpegDecodeBatchedInitialize: fn(nvjpegHandle_t, nvjpegJpegState_t, c_int, c_int, c_int) -> nvjpegStatus_t;
    nvjpegDecodeBatched: fn(nvjpegHandle_t, nvjpegJpegState_t, *const *const u8, *const usize, *mut nvjpegImage_t, cudaStream_t) -> nvjpegStatus_t;
    nvjpegJpegStreamCreate: fn(nvjpegHandle_t, *mut nvjpegJpegStream_t) -> nvjpegStatus_t;
    nvjpegJpegStreamDestroy: fn(nvjpegJpegStream_t) -> nvjpegStatus_t;
    nvjpegJpegStreamParse: fn(nvjpegHandle_t, *const u8, usize, c_int, c_int, nvjpegJpegStream_t) -> nvjpegStatus_t;
    nvjpegJpegStreamParseHeader: fn(nvjpegHandle_t, *const u8, usize, nvjpegJpegStream_t) -> nvjpegStatus_t;
    nvjpegDecodeBatchedSupported: fn(nvjpegHandle_t, nvjpegJpegStream_t, *mut c_int) -> nvjpegStatus_t;
    nvjpegDecoderCreate: fn(nvjpegHandle_t, c_int, *mut nvjpegJpegDecoder_t) -> nvjpegStatus_t;
    nvjpegDecoderDestroy: fn(nvjpegJpegDecoder_t) -> nvjpegStatus_t;
    nvjpegDecoderStateCreate: fn(nvjpegHandle_t, nvjpegJpegDecoder_t, *mut nvjpegJpegState_t) -> nvjpegStatus_t;
    nvjpegBufferPinnedCreate: fn(nvjpegHandle_t, *mut c_void, *mut nvjpegBufferPinned_t) -> nvjpegStatus_t;
    nvjpegBufferPinnedDestroy: fn(nvjpegBufferPinned_t) -> nvjpegStatus_t;
    nvjpegBufferDeviceCreate: fn(nvjpegHandle_t, *mut c_void, *mut nvjpegBufferDevice_t) -> nvjpegStatus_t;
    nvjpegBufferDeviceDestroy: fn(nvjpegBufferDevice_t) -> nvjpegStatus_t;
    nvjpegStateAttachPinnedBuffer: fn(nvjpegJpegState_t, nvjpegBufferPinned_t) -> nvjpegStatus_t;
    nvjpegStateAttachDeviceBuffer: fn(nvjpegJpegState_t, nvjpegBufferDevice_t) -> nvjpegStatus_t;
    nvjpegDecodeParamsCreate: fn(nvjpegHandle_t, *mut nvjpegDecodeParams_t) -> nvjpegStatus_t;
    nvjpegDecodeParamsDestroy: fn(nvjpegDecodeParams_t) -> nvjpegStatus_t;
    nvjpegDecodeParamsSetOutputFormat: fn(nvjpegDecodeParams_t, c_int) -> nvjpegStatus_t;
    nvjpegDecodeJpegHost: fn(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t, nvjpegDecodeParams_t, nvjpegJpegStream_t) -> nvjpegStatus_t;
    nvjpegDecodeJpegTransferToDevice: fn(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t, nvjpegJpegStream_t, cudaStream_t) -> nvjpegStatus_t;
    nvjpegDecodeJpegDevice: fn(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t, *mut nvjpegImage_t, cudaStream_t) -> nvjpegStatus_t;
}

macro_rules! optional_table {
    ($($name:ident : fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// nvJPEG functions this crate uses when present: each is `None` when
        /// the library lacks it (older releases), which never fails a load.
        ///
        /// Invariant: the pointers come from the library that the [`Table`]
        /// next to this one keeps mapped (`NvJpeg` owns both), so they stay
        /// valid as long as that table lives.
        pub struct OptionalTable {
            $(pub $name: Option<unsafe extern "C" fn($($arg),*) -> $ret>,)*
        }

        impl OptionalTable {
            /// Looks every optional symbol up in `lib`; a missing one is `None`.
            ///
            /// # Safety
            /// `lib` must be an nvJPEG library whose functions, where present,
            /// have the signatures declared here (those of `nvjpeg.h`), and it
            /// must stay loaded while the returned pointers are used.
            pub unsafe fn resolve(lib: &libloading::Library) -> OptionalTable {
                OptionalTable {
                    $($name: {
                        // SAFETY: the caller guarantees the signature and that the
                        // library outlives the pointer.
                        let sym: Result<libloading::Symbol<unsafe extern "C" fn($($arg),*) -> $ret>, _> =
                            unsafe { lib.get(concat!(stringify!($name), "\0").as_bytes()) };
                        sym.ok().map(|s| *s)
                    },)*
                }
            }

            /// Names of every optional symbol.
            pub const SYMBOLS: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Names of the optional symbols this library has.
            pub fn present(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $(if self.$name.is_some() {
                    out.push(stringify!($name));
                })*
                out
            }
        }
    };
}

optional_table! {
    // nvjpeg.h: (handle, jpeg_handle, int batch_size, int width, int height,
    // nvjpegChromaSubsampling_t chroma_subsampling, nvjpegOutputFormat_t output_format).
    nvjpegDecodeBatchedPreAllocate: fn(nvjpegHandle_t, nvjpegJpegState_t, c_int, c_int, c_int, c_int, c_int) -> nvjpegStatus_t;
    // The extended (V2) allocators: (backend, dev_allocator, pinned_allocator, flags, handle).
    nvjpegCreateExV2: fn(c_int, *mut nvjpegDevAllocatorV2_t, *mut nvjpegPinnedAllocatorV2_t, c_uint, *mut nvjpegHandle_t) -> nvjpegStatus_t;
    nvjpegBufferPinnedCreateV2: fn(nvjpegHandle_t, *mut nvjpegPinnedAllocatorV2_t, *mut nvjpegBufferPinned_t) -> nvjpegStatus_t;
    nvjpegBufferDeviceCreateV2: fn(nvjpegHandle_t, *mut nvjpegDevAllocatorV2_t, *mut nvjpegBufferDevice_t) -> nvjpegStatus_t;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library without nvJPEG's symbols (libc) resolves to an all-`None`
    /// optional table instead of an error.
    #[test]
    fn missing_optional_symbols_are_none_not_errors() {
        // SAFETY: opening libc runs no initializers beyond what the process already did.
        let Ok(lib) = (unsafe { libloading::Library::new("libc.so.6") }) else {
            println!("SKIP: libc.so.6 cannot be opened here");
            return;
        };
        // SAFETY: no symbol is found, so no pointer with a wrong signature is made.
        let t = unsafe { OptionalTable::resolve(&lib) };
        assert!(t.nvjpegDecodeBatchedPreAllocate.is_none());
        assert!(t.nvjpegCreateExV2.is_none() && t.nvjpegBufferDeviceCreateV2.is_none());
        assert!(t.present().is_empty());
        assert!(OptionalTable::SYMBOLS.contains(&"nvjpegDecodeBatchedPreAllocate"));
    }
}
