//! Thin wrappers over the function table: each turns an `nvjpegStatus_t`
//! into a `Result` naming the call. Only the owners in `safe.rs` call them;
//! every `# Safety` here is discharged there, once per owner.
//!
//! Objects are made on the CUDA context current on the calling thread
//! (nvJPEG's allocations go through the CUDA runtime, which falls back to the
//! device's primary context): which device that is matters for correctness,
//! not for memory safety, so it is not part of the contracts below.

use std::ffi::c_int;

use super::status::NvjpegStatus;
use super::sys::{self, OptionalTable, Table};
use crate::DecodeError;

/// `Ok` for `NVJPEG_STATUS_SUCCESS`, else [`DecodeError::Nvjpeg`] naming `call`.
pub(crate) fn check(call: &'static str, status: c_int) -> Result<(), DecodeError> {
    if status == sys::NVJPEG_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(DecodeError::Nvjpeg {
            call,
            status: NvjpegStatus(status),
        })
    }
}

/// Creates a library handle for `backend` with the default allocators.
///
/// # Safety
/// `t` is the table of a loaded nvJPEG (no other condition).
pub(crate) unsafe fn create_ex(
    t: &Table,
    backend: c_int,
) -> Result<sys::nvjpegHandle_t, DecodeError> {
    let mut h = std::ptr::null_mut();
    // SAFETY: null allocators select nvJPEG's defaults; `h` is a valid out pointer.
    check("nvjpegCreateEx", unsafe {
        (t.nvjpegCreateEx)(
            backend,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            &mut h,
        )
    })?;
    Ok(h)
}

/// Creates a library handle for `backend` with the extended allocators
/// `dev` and `pinned`; `Ok(None)` when the library lacks `nvjpegCreateExV2`.
///
/// # Safety
/// `dev` and `pinned` point to allocator structs whose functions, with their
/// context pointers, stay callable from any thread until the handle and every
/// object made from it are destroyed.
pub(crate) unsafe fn create_ex_v2(
    opt: &OptionalTable,
    backend: c_int,
    dev: *mut sys::nvjpegDevAllocatorV2_t,
    pinned: *mut sys::nvjpegPinnedAllocatorV2_t,
) -> Result<Option<sys::nvjpegHandle_t>, DecodeError> {
    let Some(f) = opt.nvjpegCreateExV2 else {
        return Ok(None);
    };
    let mut h = std::ptr::null_mut();
    // SAFETY: the caller guarantees the allocators; the pointer comes from the
    // loaded library (OptionalTable invariant); `h` is a valid out pointer.
    check("nvjpegCreateExV2", unsafe {
        f(backend, dev, pinned, 0, &mut h)
    })?;
    Ok(Some(h))
}

/// Number of hardware engines (and cores per engine) behind a hardware handle.
///
/// # Safety
/// `h` must be a live handle created with `NVJPEG_BACKEND_HARDWARE`.
pub(crate) unsafe fn hardware_info(
    t: &Table,
    h: sys::nvjpegHandle_t,
) -> Result<(u32, u32), DecodeError> {
    let (mut engines, mut cores) = (0u32, 0u32);
    // SAFETY: caller guarantees `h`; out pointers are valid.
    check("nvjpegGetHardwareDecoderInfo", unsafe {
        (t.nvjpegGetHardwareDecoderInfo)(h, &mut engines, &mut cores)
    })?;
    Ok((engines, cores))
}

/// Creates a JPEG state for the batched API.
///
/// # Safety
/// `h` must be a live handle.
pub(crate) unsafe fn jpeg_state_create(
    t: &Table,
    h: sys::nvjpegHandle_t,
) -> Result<sys::nvjpegJpegState_t, DecodeError> {
    let mut s = std::ptr::null_mut();
    // SAFETY: caller guarantees `h`; `s` is a valid out pointer.
    check("nvjpegJpegStateCreate", unsafe {
        (t.nvjpegJpegStateCreate)(h, &mut s)
    })?;
    Ok(s)
}

/// What `nvjpegDecodeBatchedPreAllocate` sizes a hardware state for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchHint {
    /// Images per `nvjpegDecodeBatched` call.
    pub batch: usize,
    /// Largest width expected.
    pub width: u32,
    /// Largest height expected.
    pub height: u32,
    /// `NVJPEG_CSS_*` of the images expected.
    pub subsampling: c_int,
    /// `NVJPEG_OUTPUT_*` they are decoded to.
    pub format: c_int,
}

/// `nvjpegDecodeBatchedPreAllocate`: sizes a hardware state's device memory
/// up front for `hint`. nvJPEG takes it as a starting size: larger images
/// later make it grow the buffers. `Ok(false)` when the library lacks the function.
///
/// # Safety
/// `h` must be a live handle created with `NVJPEG_BACKEND_HARDWARE` and
/// `state` a live state created from it, used by no other thread meanwhile.
pub(crate) unsafe fn batched_pre_allocate(
    opt: &OptionalTable,
    h: sys::nvjpegHandle_t,
    state: sys::nvjpegJpegState_t,
    hint: BatchHint,
) -> Result<bool, DecodeError> {
    let Some(f) = opt.nvjpegDecodeBatchedPreAllocate else {
        return Ok(false);
    };
    let clamp = |v: u64| c_int::try_from(v.max(1)).unwrap_or(c_int::MAX);
    // SAFETY: the caller guarantees the handle and state; the pointer comes
    // from the loaded library (OptionalTable invariant); plain integers otherwise.
    check("nvjpegDecodeBatchedPreAllocate", unsafe {
        f(
            h,
            state,
            clamp(hint.batch as u64),
            clamp(u64::from(hint.width)),
            clamp(u64::from(hint.height)),
            hint.subsampling,
            hint.format,
        )
    })?;
    Ok(true)
}

/// Creates a JPEG stream (parsed-bitstream holder).
///
/// # Safety
/// `h` must be a live handle.
pub(crate) unsafe fn jpeg_stream_create(
    t: &Table,
    h: sys::nvjpegHandle_t,
) -> Result<sys::nvjpegJpegStream_t, DecodeError> {
    let mut s = std::ptr::null_mut();
    // SAFETY: caller guarantees `h`; `s` is a valid out pointer.
    check("nvjpegJpegStreamCreate", unsafe {
        (t.nvjpegJpegStreamCreate)(h, &mut s)
    })?;
    Ok(s)
}

/// Parses a whole bitstream into `stream`.
///
/// # Safety
/// `h` and `stream` live and created from the same handle; `data` valid for the call.
pub(crate) unsafe fn stream_parse(
    t: &Table,
    h: sys::nvjpegHandle_t,
    data: &[u8],
    stream: sys::nvjpegJpegStream_t,
) -> Result<(), DecodeError> {
    // SAFETY: `data` is a live slice; caller guarantees the handles.
    check("nvjpegJpegStreamParse", unsafe {
        (t.nvjpegJpegStreamParse)(h, data.as_ptr(), data.len(), 0, 0, stream)
    })
}

/// Parses only the headers of a bitstream into `stream` (enough for
/// `nvjpegDecodeBatchedSupported`, much cheaper than a full parse).
///
/// # Safety
/// `h` and `stream` live and created from the same handle; `data` valid for the call.
pub(crate) unsafe fn stream_parse_header(
    t: &Table,
    h: sys::nvjpegHandle_t,
    data: &[u8],
    stream: sys::nvjpegJpegStream_t,
) -> Result<(), DecodeError> {
    // SAFETY: `data` is a live slice; caller guarantees the handles.
    check("nvjpegJpegStreamParseHeader", unsafe {
        (t.nvjpegJpegStreamParseHeader)(h, data.as_ptr(), data.len(), stream)
    })
}

/// Whether the batched (hardware) decoder takes the parsed `stream`.
///
/// # Safety
/// `h` and `stream` live; `stream` holds a successful parse.
pub(crate) unsafe fn batched_supported(
    t: &Table,
    h: sys::nvjpegHandle_t,
    stream: sys::nvjpegJpegStream_t,
) -> Result<bool, DecodeError> {
    let mut is_supported: c_int = -1;
    // SAFETY: caller guarantees the handles; out pointer valid.
    check("nvjpegDecodeBatchedSupported", unsafe {
        (t.nvjpegDecodeBatchedSupported)(h, stream, &mut is_supported)
    })?;
    // nvjpeg.h: 0 means supported.
    Ok(is_supported == 0)
}

/// Creates a decoupled-API decoder for `backend`.
///
/// # Safety
/// `h` must be a live handle.
pub(crate) unsafe fn decoder_create(
    t: &Table,
    h: sys::nvjpegHandle_t,
    backend: c_int,
) -> Result<sys::nvjpegJpegDecoder_t, DecodeError> {
    let mut d = std::ptr::null_mut();
    // SAFETY: caller guarantees `h`; out pointer valid.
    check("nvjpegDecoderCreate", unsafe {
        (t.nvjpegDecoderCreate)(h, backend, &mut d)
    })?;
    Ok(d)
}

/// Creates a state for a decoupled-API decoder.
///
/// # Safety
/// `h` and `dec` live, `dec` created from `h`.
pub(crate) unsafe fn decoder_state_create(
    t: &Table,
    h: sys::nvjpegHandle_t,
    dec: sys::nvjpegJpegDecoder_t,
) -> Result<sys::nvjpegJpegState_t, DecodeError> {
    let mut s = std::ptr::null_mut();
    // SAFETY: caller guarantees the handles; out pointer valid.
    check("nvjpegDecoderStateCreate", unsafe {
        (t.nvjpegDecoderStateCreate)(h, dec, &mut s)
    })?;
    Ok(s)
}

/// Creates a pinned host buffer with the default allocator.
///
/// # Safety
/// `h` must be a live handle.
pub(crate) unsafe fn buffer_pinned_create(
    t: &Table,
    h: sys::nvjpegHandle_t,
) -> Result<sys::nvjpegBufferPinned_t, DecodeError> {
    let mut b = std::ptr::null_mut();
    // SAFETY: null allocator selects the default; out pointer valid.
    check("nvjpegBufferPinnedCreate", unsafe {
        (t.nvjpegBufferPinnedCreate)(h, std::ptr::null_mut(), &mut b)
    })?;
    Ok(b)
}

/// Creates a device buffer with the default allocator.
///
/// # Safety
/// `h` must be a live handle.
pub(crate) unsafe fn buffer_device_create(
    t: &Table,
    h: sys::nvjpegHandle_t,
) -> Result<sys::nvjpegBufferDevice_t, DecodeError> {
    let mut b = std::ptr::null_mut();
    // SAFETY: null allocator selects the default; out pointer valid.
    check("nvjpegBufferDeviceCreate", unsafe {
        (t.nvjpegBufferDeviceCreate)(h, std::ptr::null_mut(), &mut b)
    })?;
    Ok(b)
}

/// Creates a pinned buffer with the extended allocator `pinned`; `Ok(None)`
/// when the library lacks `nvjpegBufferPinnedCreateV2`.
///
/// # Safety
/// `h` must be a live handle; `pinned` as in [`create_ex_v2`], until the buffer is destroyed.
pub(crate) unsafe fn buffer_pinned_create_v2(
    opt: &OptionalTable,
    h: sys::nvjpegHandle_t,
    pinned: *mut sys::nvjpegPinnedAllocatorV2_t,
) -> Result<Option<sys::nvjpegBufferPinned_t>, DecodeError> {
    let Some(f) = opt.nvjpegBufferPinnedCreateV2 else {
        return Ok(None);
    };
    let mut b = std::ptr::null_mut();
    // SAFETY: the caller guarantees `h` and the allocator; out pointer valid.
    check("nvjpegBufferPinnedCreateV2", unsafe {
        f(h, pinned, &mut b)
    })?;
    Ok(Some(b))
}

/// Creates a device buffer with the extended allocator `dev`; `Ok(None)`
/// when the library lacks `nvjpegBufferDeviceCreateV2`.
///
/// # Safety
/// As [`buffer_pinned_create_v2`].
pub(crate) unsafe fn buffer_device_create_v2(
    opt: &OptionalTable,
    h: sys::nvjpegHandle_t,
    dev: *mut sys::nvjpegDevAllocatorV2_t,
) -> Result<Option<sys::nvjpegBufferDevice_t>, DecodeError> {
    let Some(f) = opt.nvjpegBufferDeviceCreateV2 else {
        return Ok(None);
    };
    let mut b = std::ptr::null_mut();
    // SAFETY: the caller guarantees `h` and the allocator; out pointer valid.
    check("nvjpegBufferDeviceCreateV2", unsafe { f(h, dev, &mut b) })?;
    Ok(Some(b))
}

/// Creates decode parameters with interleaved RGB output.
///
/// # Safety
/// `h` must be a live handle.
pub(crate) unsafe fn decode_params_rgbi(
    t: &Table,
    h: sys::nvjpegHandle_t,
) -> Result<sys::nvjpegDecodeParams_t, DecodeError> {
    let mut p = std::ptr::null_mut();
    // SAFETY: caller guarantees `h`; out pointer valid.
    check("nvjpegDecodeParamsCreate", unsafe {
        (t.nvjpegDecodeParamsCreate)(h, &mut p)
    })?;
    // SAFETY: `p` was just created.
    let set = check("nvjpegDecodeParamsSetOutputFormat", unsafe {
        (t.nvjpegDecodeParamsSetOutputFormat)(p, sys::NVJPEG_OUTPUT_RGBI)
    });
    if let Err(e) = set {
        // SAFETY: `p` is live and not used after this.
        unsafe { (t.nvjpegDecodeParamsDestroy)(p) };
        return Err(e);
    }
    Ok(p)
}

/// `nvjpegDestroy`.
///
/// # Safety
/// `h` is live, every object made from it is already destroyed, and it is
/// not used again.
pub(crate) unsafe fn destroy(t: &Table, h: sys::nvjpegHandle_t) -> Result<(), DecodeError> {
    // SAFETY: the caller guarantees `h` and that nothing uses it afterwards.
    check("nvjpegDestroy", unsafe { (t.nvjpegDestroy)(h) })
}

/// `nvjpegJpegStateDestroy`.
///
/// # Safety
/// `s` is live, no queued work uses it, and it is not used again.
pub(crate) unsafe fn jpeg_state_destroy(
    t: &Table,
    s: sys::nvjpegJpegState_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegJpegStateDestroy", unsafe {
        (t.nvjpegJpegStateDestroy)(s)
    })
}

/// `nvjpegJpegStreamDestroy`.
///
/// # Safety
/// `s` is live and not used again.
pub(crate) unsafe fn jpeg_stream_destroy(
    t: &Table,
    s: sys::nvjpegJpegStream_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegJpegStreamDestroy", unsafe {
        (t.nvjpegJpegStreamDestroy)(s)
    })
}

/// `nvjpegDecoderDestroy`.
///
/// # Safety
/// `d` is live, every state made for it is already destroyed, and it is not
/// used again.
pub(crate) unsafe fn decoder_destroy(
    t: &Table,
    d: sys::nvjpegJpegDecoder_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegDecoderDestroy", unsafe {
        (t.nvjpegDecoderDestroy)(d)
    })
}

/// `nvjpegBufferPinnedDestroy`.
///
/// # Safety
/// `b` is live, attached to no live state, read by no queued work, and not
/// used again.
pub(crate) unsafe fn buffer_pinned_destroy(
    t: &Table,
    b: sys::nvjpegBufferPinned_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegBufferPinnedDestroy", unsafe {
        (t.nvjpegBufferPinnedDestroy)(b)
    })
}

/// `nvjpegBufferDeviceDestroy`.
///
/// # Safety
/// `b` is live, attached to no live state, used by no queued work, and not
/// used again.
pub(crate) unsafe fn buffer_device_destroy(
    t: &Table,
    b: sys::nvjpegBufferDevice_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegBufferDeviceDestroy", unsafe {
        (t.nvjpegBufferDeviceDestroy)(b)
    })
}

/// `nvjpegDecodeParamsDestroy`.
///
/// # Safety
/// `p` is live and not used again.
pub(crate) unsafe fn decode_params_destroy(
    t: &Table,
    p: sys::nvjpegDecodeParams_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegDecodeParamsDestroy", unsafe {
        (t.nvjpegDecodeParamsDestroy)(p)
    })
}

/// Attaches a pinned buffer to a decoupled-API state.
///
/// # Safety
/// `state` and `buffer` live, created from the same handle; `buffer` outlives
/// the state's use of it.
pub(crate) unsafe fn state_attach_pinned_buffer(
    t: &Table,
    state: sys::nvjpegJpegState_t,
    buffer: sys::nvjpegBufferPinned_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegStateAttachPinnedBuffer", unsafe {
        (t.nvjpegStateAttachPinnedBuffer)(state, buffer)
    })
}

/// Attaches a device buffer to a decoupled-API state.
///
/// # Safety
/// `state` and `buffer` live, created from the same handle; `buffer` outlives
/// the state's use of it.
pub(crate) unsafe fn state_attach_device_buffer(
    t: &Table,
    state: sys::nvjpegJpegState_t,
    buffer: sys::nvjpegBufferDevice_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegStateAttachDeviceBuffer", unsafe {
        (t.nvjpegStateAttachDeviceBuffer)(state, buffer)
    })
}

/// `nvjpegDecodeBatchedInitialize` for `batch` images decoded to `format`.
///
/// # Safety
/// `h` and `state` live, `state` created from `h` for the batched API, used
/// by no other thread meanwhile, and no batched decode on it still running.
pub(crate) unsafe fn decode_batched_initialize(
    t: &Table,
    h: sys::nvjpegHandle_t,
    state: sys::nvjpegJpegState_t,
    batch: c_int,
    max_cpu_threads: c_int,
    format: c_int,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees; plain integers otherwise.
    check("nvjpegDecodeBatchedInitialize", unsafe {
        (t.nvjpegDecodeBatchedInitialize)(h, state, batch, max_cpu_threads, format)
    })
}

/// `nvjpegDecodeBatched`.
///
/// # Safety
/// `h` and `state` live, `state` created from `h` and initialized for as many
/// images as `data`, `lens` and `images` each point to; every bitstream stays
/// readable, and every output image writable for its header's size, until
/// `stream` has passed this call; no other thread uses `state` meanwhile.
pub(crate) unsafe fn decode_batched(
    t: &Table,
    h: sys::nvjpegHandle_t,
    state: sys::nvjpegJpegState_t,
    data: *const *const u8,
    lens: *const usize,
    images: *mut sys::nvjpegImage_t,
    stream: sys::cudaStream_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegDecodeBatched", unsafe {
        (t.nvjpegDecodeBatched)(h, state, data, lens, images, stream)
    })
}

/// The decoupled API's host phase (`nvjpegDecodeJpegHost`).
///
/// # Safety
/// Every object live; `state` made for `dec`, `dec`, `params` and `jstream`
/// from `h`; `jstream` holds a successful parse; no other thread uses
/// `state`, `params` or `jstream` meanwhile; no queued transfer still reads
/// the pinned buffer attached to `state`.
pub(crate) unsafe fn decode_jpeg_host(
    t: &Table,
    h: sys::nvjpegHandle_t,
    dec: sys::nvjpegJpegDecoder_t,
    state: sys::nvjpegJpegState_t,
    params: sys::nvjpegDecodeParams_t,
    jstream: sys::nvjpegJpegStream_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegDecodeJpegHost", unsafe {
        (t.nvjpegDecodeJpegHost)(h, dec, state, params, jstream)
    })
}

/// The decoupled API's host-to-device transfer (`nvjpegDecodeJpegTransferToDevice`).
///
/// # Safety
/// As [`decode_jpeg_host`], which must have succeeded on `state` last; the
/// state's buffers stay alive until `stream` has passed this call.
pub(crate) unsafe fn decode_jpeg_transfer_to_device(
    t: &Table,
    h: sys::nvjpegHandle_t,
    dec: sys::nvjpegJpegDecoder_t,
    state: sys::nvjpegJpegState_t,
    jstream: sys::nvjpegJpegStream_t,
    stream: sys::cudaStream_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegDecodeJpegTransferToDevice", unsafe {
        (t.nvjpegDecodeJpegTransferToDevice)(h, dec, state, jstream, stream)
    })
}

/// The decoupled API's device phase (`nvjpegDecodeJpegDevice`).
///
/// # Safety
/// `h`, `dec` and `state` live as for [`decode_jpeg_host`], the transfer
/// queued on `stream` before; `image` describes device memory writable for
/// the image's size until `stream` has passed this call; the state's buffers
/// stay alive until then.
pub(crate) unsafe fn decode_jpeg_device(
    t: &Table,
    h: sys::nvjpegHandle_t,
    dec: sys::nvjpegJpegDecoder_t,
    state: sys::nvjpegJpegState_t,
    image: *mut sys::nvjpegImage_t,
    stream: sys::cudaStream_t,
) -> Result<(), DecodeError> {
    // SAFETY: as the caller guarantees.
    check("nvjpegDecodeJpegDevice", unsafe {
        (t.nvjpegDecodeJpegDevice)(h, dec, state, image, stream)
    })
}
