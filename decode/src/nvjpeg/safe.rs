//! Owners of nvJPEG objects: one type per object, each holding one typed
//! handle, calling only `result`, and destroying its object in `Drop` (a
//! failed destroy is logged, never a panic).
//!
//! Parents outlive children through `Arc`s: every object made from a library
//! handle holds an `Arc<Handle>` (a decoder state an `Arc<Decoder>`), so a
//! handle is destroyed only after the last object made from it. A struct that
//! keeps the parent in a field declared after its children releases them in
//! the order nvJPEG wants anyway; the `Arc` makes it hold whatever the order.
//!
//! Threads (nvJPEG documentation, "Thread Safety"): library handles and
//! decoders may be used from several threads at once, so they are
//! `Send + Sync`; JPEG states, JPEG streams, pinned and device buffers and
//! decode parameters must be used by one thread at a time, so they are `Send`
//! only and every call that uses one takes it by `&mut` (or, for read-only
//! inputs of another object's call, by `&` from the one thread that holds it).
//!
//! What the types cannot carry stays `unsafe`: calls that write device memory
//! given by address, or queue work that reads an object after the call
//! returns, say in `# Safety` what the caller keeps valid and alive.

use std::ffi::c_int;
use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::CudaStream;

use super::allocator::CachedMemory;
use super::library::NvJpeg;
use super::status::NvjpegStatus;
use super::{result, sys};
use crate::DecodeError;

/// An nvJPEG backend (`nvjpegBackend_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `NVJPEG_BACKEND_DEFAULT`.
    Default,
    /// `NVJPEG_BACKEND_HYBRID`: Huffman decoding on the CPU (decoupled API).
    Hybrid,
    /// `NVJPEG_BACKEND_GPU_HYBRID`: Huffman decoding on the GPU (batched API).
    GpuHybrid,
    /// `NVJPEG_BACKEND_HARDWARE`: the JPEG engines (batched API).
    Hardware,
}

impl Backend {
    fn raw(self) -> c_int {
        match self {
            Backend::Default => sys::NVJPEG_BACKEND_DEFAULT,
            Backend::Hybrid => sys::NVJPEG_BACKEND_HYBRID,
            Backend::GpuHybrid => sys::NVJPEG_BACKEND_GPU_HYBRID,
            Backend::Hardware => sys::NVJPEG_BACKEND_HARDWARE,
        }
    }
}

/// Logs a failed destroy call: `Drop` never panics.
fn log_destroy(r: Result<(), DecodeError>) {
    if let Err(e) = r {
        tracing::warn!("destroying an nvJPEG object failed: {e}");
    }
}

/// `Err(INVALID_PARAMETER)` naming `call` unless `a` and `b` are one handle:
/// nvJPEG objects only work with objects made from the same handle.
fn same_handle(a: &Arc<Handle>, b: &Arc<Handle>, call: &'static str) -> Result<(), DecodeError> {
    if Arc::ptr_eq(a, b) {
        Ok(())
    } else {
        Err(DecodeError::Nvjpeg {
            call,
            status: NvjpegStatus(sys::NVJPEG_STATUS_INVALID_PARAMETER),
        })
    }
}

/// A library handle (`nvjpegHandle_t`) for one backend, with nvJPEG's
/// default allocators or stoker's caches ([`CachedMemory`]).
pub(crate) struct Handle {
    /// Non-null, made by `nvjpegCreateEx` (or `…V2`), destroyed once in
    /// `Drop`, after every object made from it (they hold an `Arc` of this handle).
    raw: sys::nvjpegHandle_t,
    backend: Backend,
    /// The library whose table made `raw`; every call on it goes through this table.
    lib: &'static NvJpeg,
    /// The allocators `raw` was made with, when not nvJPEG's own: kept until
    /// after `raw` is destroyed (a field drops after `Drop::drop`), the last
    /// call that may free through them.
    memory: Option<Arc<CachedMemory>>,
}

// SAFETY: nvJPEG documents library handles as thread safe: one may be moved
// to and used from any thread, including from several at once.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

impl Handle {
    /// `nvjpegCreateEx(backend)` on the CUDA context current on this thread;
    /// with `memory`, `nvjpegCreateExV2` with its allocators instead. When the
    /// library lacks that function or refuses the allocators, the handle uses
    /// nvJPEG's own (said once): an allocator choice never costs a backend.
    pub(crate) fn new(
        lib: &'static NvJpeg,
        backend: Backend,
        memory: Option<&Arc<CachedMemory>>,
    ) -> Result<Arc<Handle>, DecodeError> {
        if let Some(m) = memory {
            // SAFETY: the allocators' structs and context live in the
            // `CachedMemory`, which the handle holds until after it is destroyed.
            let raw = unsafe {
                result::create_ex_v2(
                    lib.optional(),
                    backend.raw(),
                    m.device_allocator(),
                    m.pinned_allocator(),
                )
            };
            let why = match raw {
                Ok(Some(raw)) => {
                    return Ok(Arc::new(Handle {
                        raw,
                        backend,
                        lib,
                        memory: Some(Arc::clone(m)),
                    }))
                }
                Ok(None) => format!("{} lacks nvjpegCreateExV2", lib.path().display()),
                Err(e) => format!("{e} for the {backend:?} backend"),
            };
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                tracing::warn!("{why}: nvJPEG allocates with its own allocators there")
            });
        }
        // SAFETY: the table is a loaded nvJPEG's.
        let raw = unsafe { result::create_ex(lib.table(), backend.raw()) }?;
        Ok(Arc::new(Handle {
            raw,
            backend,
            lib,
            memory: None,
        }))
    }

    /// `(engines, cores per engine)` behind a hardware handle
    /// (`nvjpegGetHardwareDecoderInfo`); `INVALID_PARAMETER` for other backends.
    pub(crate) fn hardware_info(&self) -> Result<(u32, u32), DecodeError> {
        self.require_hardware("nvjpegGetHardwareDecoderInfo")?;
        // SAFETY: `raw` is live (owned by `self`) and a hardware handle (checked).
        unsafe { result::hardware_info(self.lib.table(), self.raw) }
    }

    fn require_hardware(&self, call: &'static str) -> Result<(), DecodeError> {
        if self.backend == Backend::Hardware {
            Ok(())
        } else {
            Err(DecodeError::Nvjpeg {
                call,
                status: NvjpegStatus(sys::NVJPEG_STATUS_INVALID_PARAMETER),
            })
        }
    }

    fn table(&self) -> &'static sys::Table {
        self.lib.table()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed only here; every object made from
        // it holds an `Arc` of this handle, so none is left.
        log_destroy(unsafe { result::destroy(self.table(), self.raw) });
    }
}

/// Where nvJPEG writes one image: interleaved RGB (`NVJPEG_OUTPUT_RGBI`) at a
/// device address, `pitch` bytes per row. Only the address is held; the
/// decode calls that take it are `unsafe` and their callers vouch for it.
#[repr(transparent)]
pub(crate) struct OutputImage(sys::nvjpegImage_t);

impl OutputImage {
    /// Interleaved output at device address `ptr` with row pitch `pitch`.
    pub(crate) fn interleaved(ptr: CUdeviceptr, pitch: usize) -> OutputImage {
        let mut img = sys::nvjpegImage_t::default();
        img.channel[0] = ptr as *mut u8;
        img.pitch[0] = pitch;
        OutputImage(img)
    }
}

/// A JPEG state for the batched API (`nvjpegJpegStateCreate`), the working
/// memory of one `nvjpegDecodeBatched` call at a time.
pub(crate) struct BatchedState {
    /// Non-null, made from `handle`, destroyed once in `Drop`.
    raw: sys::nvjpegJpegState_t,
    handle: Arc<Handle>,
}

// SAFETY: a state may be used from any thread, one thread at a time (nvJPEG
// documentation: one state per thread); every call that uses it takes `&mut
// self`, and no `Sync` is claimed.
unsafe impl Send for BatchedState {}

impl BatchedState {
    /// A state made from `handle`.
    pub(crate) fn new(handle: &Arc<Handle>) -> Result<BatchedState, DecodeError> {
        // SAFETY: the handle is live (the `Arc` keeps it).
        let raw = unsafe { result::jpeg_state_create(handle.table(), handle.raw) }?;
        Ok(BatchedState {
            raw,
            handle: Arc::clone(handle),
        })
    }

    /// `nvjpegDecodeBatchedPreAllocate`: sizes this state's device memory up
    /// front for `batch` images of up to `width` × `height`, decoded to
    /// interleaved RGB and hinted as 4:4:4 (nvJPEG documentation: with mixed
    /// subsamplings, 4:4:4 sizes the buffers so that every image can reuse
    /// them). nvJPEG grows the buffers for larger images later. `Ok(false)`
    /// when the library lacks the function; `INVALID_PARAMETER` on a handle
    /// that is not a hardware one.
    pub(crate) fn preallocate(
        &mut self,
        batch: usize,
        (width, height): (u32, u32),
    ) -> Result<bool, DecodeError> {
        self.handle
            .require_hardware("nvjpegDecodeBatchedPreAllocate")?;
        let hint = result::BatchHint {
            batch,
            width,
            height,
            subsampling: sys::NVJPEG_CSS_444,
            format: sys::NVJPEG_OUTPUT_RGBI,
        };
        // SAFETY: the handle is a live hardware handle (checked), this state
        // was made from it, and `&mut self` keeps other threads off it.
        unsafe {
            result::batched_pre_allocate(
                self.handle.lib.optional(),
                self.handle.raw,
                self.raw,
                hint,
            )
        }
    }

    /// `nvjpegDecodeBatchedInitialize` for `batch` images, one CPU thread,
    /// interleaved RGB output.
    ///
    /// # Safety
    /// No batched decode on this state is still running on the device
    /// (nvjpeg.h: it must finish before the state is initialized again).
    pub(crate) unsafe fn initialize(&mut self, batch: usize) -> Result<(), DecodeError> {
        // SAFETY: the handle and state are live and belong together (owned);
        // `&mut self` keeps other threads off the state; the caller guarantees
        // nothing still runs on it.
        unsafe {
            result::decode_batched_initialize(
                self.handle.table(),
                self.handle.raw,
                self.raw,
                batch as i32,
                1,
                sys::NVJPEG_OUTPUT_RGBI,
            )
        }
    }

    /// `nvjpegDecodeBatched` of `data` (with lengths `lens`) into `outputs`,
    /// queued on `stream`.
    ///
    /// # Safety
    /// The state was last initialized for as many images as `data`, `lens` and
    /// `outputs` each hold; each bitstream stays readable until `stream` has
    /// passed this call; each output addresses `pitch * height` writable
    /// device bytes for its image's header, in the CUDA context current on
    /// this thread.
    pub(crate) unsafe fn decode(
        &mut self,
        data: &[*const u8],
        lens: &[usize],
        outputs: &mut [OutputImage],
        stream: &CudaStream,
    ) -> Result<(), DecodeError> {
        // The library reads as many entries of each array as the state's batch size:
        // lengths that differ are a bug here, not something to pass on.
        assert!(
            data.len() == lens.len() && lens.len() == outputs.len(),
            "nvjpegDecodeBatched: {} bitstreams, {} lengths, {} outputs",
            data.len(),
            lens.len(),
            outputs.len()
        );
        // SAFETY: the handle and state are live and belong together; the
        // caller's contract covers the inputs, the outputs and the batch size;
        // `OutputImage` is a transparent `nvjpegImage_t`.
        unsafe {
            result::decode_batched(
                self.handle.table(),
                self.handle.raw,
                self.raw,
                data.as_ptr(),
                lens.as_ptr(),
                outputs.as_mut_ptr().cast(),
                stream.cu_stream().cast(),
            )
        }
    }
}

impl Drop for BatchedState {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed only here; its owner waits for
        // the work queued on it before dropping it.
        log_destroy(unsafe { result::jpeg_state_destroy(self.handle.table(), self.raw) });
    }
}

/// A decoupled-API decoder (`nvjpegDecoderCreate`).
pub(crate) struct Decoder {
    /// Non-null, made from `handle`, destroyed once in `Drop`, after every
    /// state made for it (they hold an `Arc` of this decoder).
    raw: sys::nvjpegJpegDecoder_t,
    handle: Arc<Handle>,
}

// SAFETY: nvJPEG documents decoders, like library handles, as thread safe;
// what a decode writes lives in the per-thread state, stream and buffers.
unsafe impl Send for Decoder {}
// SAFETY: as above.
unsafe impl Sync for Decoder {}

impl Decoder {
    /// A decoder for `backend` made from `handle`.
    pub(crate) fn new(handle: &Arc<Handle>, backend: Backend) -> Result<Arc<Decoder>, DecodeError> {
        // SAFETY: the handle is live (the `Arc` keeps it).
        let raw = unsafe { result::decoder_create(handle.table(), handle.raw, backend.raw()) }?;
        Ok(Arc::new(Decoder {
            raw,
            handle: Arc::clone(handle),
        }))
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed only here; the states made for it
        // hold an `Arc` of this decoder, so none is left.
        log_destroy(unsafe { result::decoder_destroy(self.handle.table(), self.raw) });
    }
}

/// A JPEG state for one decoder of the decoupled API
/// (`nvjpegDecoderStateCreate`), owning the buffers attached to it.
pub(crate) struct DecoderState {
    /// Non-null, made for `decoder`, destroyed once in `Drop`, before the
    /// buffers below (field order).
    raw: sys::nvjpegJpegState_t,
    /// Attached to `raw` when set.
    pinned: Option<PinnedBuffer>,
    /// Attached to `raw` when set.
    device: Option<DeviceBuffer>,
    decoder: Arc<Decoder>,
}

// SAFETY: as for `BatchedState`: any thread, one at a time, every use through
// `&mut self`; the buffers it owns follow it.
unsafe impl Send for DecoderState {}

impl DecoderState {
    /// A state made for `decoder`.
    pub(crate) fn new(decoder: &Arc<Decoder>) -> Result<DecoderState, DecodeError> {
        let h = &decoder.handle;
        // SAFETY: the handle and decoder are live (the `Arc`s keep them) and
        // the decoder was made from the handle.
        let raw = unsafe { result::decoder_state_create(h.table(), h.raw, decoder.raw) }?;
        Ok(DecoderState {
            raw,
            pinned: None,
            device: None,
            decoder: Arc::clone(decoder),
        })
    }

    fn handle(&self) -> &Arc<Handle> {
        &self.decoder.handle
    }

    /// Attaches `buffer` (made from this state's handle), which the state
    /// then owns.
    pub(crate) fn attach_pinned(&mut self, buffer: PinnedBuffer) -> Result<(), DecodeError> {
        let call = "nvjpegStateAttachPinnedBuffer";
        same_handle(self.handle(), &buffer.handle, call)?;
        // SAFETY: both live and from one handle (checked); the state keeps the
        // buffer until after the state is destroyed.
        unsafe { result::state_attach_pinned_buffer(self.handle().table(), self.raw, buffer.raw) }?;
        self.pinned = Some(buffer);
        Ok(())
    }

    /// Attaches `buffer` (made from this state's handle), which the state
    /// then owns.
    pub(crate) fn attach_device(&mut self, buffer: DeviceBuffer) -> Result<(), DecodeError> {
        let call = "nvjpegStateAttachDeviceBuffer";
        same_handle(self.handle(), &buffer.handle, call)?;
        // SAFETY: both live and from one handle (checked); the state keeps the
        // buffer until after the state is destroyed.
        unsafe { result::state_attach_device_buffer(self.handle().table(), self.raw, buffer.raw) }?;
        self.device = Some(buffer);
        Ok(())
    }

    /// The host phase (`nvjpegDecodeJpegHost`) of the image parsed into
    /// `stream`, with `params`.
    ///
    /// # Safety
    /// No transfer queued from this state still reads its pinned buffer,
    /// which this call overwrites.
    pub(crate) unsafe fn decode_host(
        &mut self,
        params: &DecodeParams,
        stream: &JpegStream,
    ) -> Result<(), DecodeError> {
        let call = "nvjpegDecodeJpegHost";
        same_handle(self.handle(), &params.handle, call)?;
        same_handle(self.handle(), &stream.handle, call)?;
        stream.require_parsed(call)?;
        let (h, d) = (self.handle(), &self.decoder);
        // SAFETY: every object is live, made from one handle (checked), the
        // state for this decoder; the stream holds a parse (checked); `&mut
        // self` keeps other threads off the state, and `params` and `stream`
        // are not `Sync`, so this thread alone holds them; the caller
        // guarantees the pinned buffer is free.
        unsafe {
            result::decode_jpeg_host(h.table(), h.raw, d.raw, self.raw, params.raw, stream.raw)
        }
    }

    /// Queues the host-to-device transfer
    /// (`nvjpegDecodeJpegTransferToDevice`) of the last host phase on `cuda`.
    ///
    /// # Safety
    /// The last [`decode_host`](Self::decode_host) on this state succeeded,
    /// with `stream`; this state (and its buffers) is neither dropped nor
    /// given another host phase until `cuda` has passed this call.
    pub(crate) unsafe fn transfer_to_device(
        &mut self,
        stream: &JpegStream,
        cuda: &CudaStream,
    ) -> Result<(), DecodeError> {
        same_handle(
            self.handle(),
            &stream.handle,
            "nvjpegDecodeJpegTransferToDevice",
        )?;
        let (h, d) = (self.handle(), &self.decoder);
        // SAFETY: objects live and from one handle (checked); the caller
        // guarantees the host phase and that the buffers outlive the transfer.
        unsafe {
            result::decode_jpeg_transfer_to_device(
                h.table(),
                h.raw,
                d.raw,
                self.raw,
                stream.raw,
                cuda.cu_stream().cast(),
            )
        }
    }

    /// Queues the device phase (`nvjpegDecodeJpegDevice`) on `cuda`, writing
    /// `output`.
    ///
    /// # Safety
    /// The transfer of this image was queued on `cuda` before;
    /// `output` addresses `pitch * height` writable device bytes for the
    /// image's header, in the CUDA context current on this thread, until
    /// `cuda` has passed this call; the state (and its device buffer) is
    /// neither dropped nor given another transfer until then.
    pub(crate) unsafe fn decode_device(
        &mut self,
        output: &mut OutputImage,
        cuda: &CudaStream,
    ) -> Result<(), DecodeError> {
        let (h, d) = (self.handle(), &self.decoder);
        // SAFETY: objects live and belonging together (owned); the caller
        // guarantees the order on `cuda` and the output; `OutputImage` is a
        // transparent `nvjpegImage_t`.
        unsafe {
            result::decode_jpeg_device(
                h.table(),
                h.raw,
                d.raw,
                self.raw,
                std::ptr::from_mut(output).cast(),
                cuda.cu_stream().cast(),
            )
        }
    }
}

impl Drop for DecoderState {
    fn drop(&mut self) {
        let t = self.handle().table();
        // SAFETY: `raw` is live and destroyed only here, before the buffers
        // attached to it (fields, dropped after this) and the decoder it was
        // made for (held by `Arc`); its owner waits for the work queued on it
        // before dropping it.
        log_destroy(unsafe { result::jpeg_state_destroy(t, self.raw) });
    }
}

/// A JPEG stream (`nvjpegJpegStream_t`): one parsed bitstream.
pub(crate) struct JpegStream {
    /// Non-null, made from `handle`, destroyed once in `Drop`.
    raw: sys::nvjpegJpegStream_t,
    /// Whether the last parse into `raw` succeeded.
    parsed: bool,
    handle: Arc<Handle>,
}

// SAFETY: JPEG streams are not thread safe (nvJPEG documentation: one per
// thread) but may move between threads; parsing takes `&mut self` and no
// `Sync` is claimed, so one thread at a time holds a stream.
unsafe impl Send for JpegStream {}

impl JpegStream {
    /// A stream made from `handle`.
    pub(crate) fn new(handle: &Arc<Handle>) -> Result<JpegStream, DecodeError> {
        // SAFETY: the handle is live (the `Arc` keeps it).
        let raw = unsafe { result::jpeg_stream_create(handle.table(), handle.raw) }?;
        Ok(JpegStream {
            raw,
            parsed: false,
            handle: Arc::clone(handle),
        })
    }

    /// Parses the whole bitstream `data` (`nvjpegJpegStreamParse`).
    pub(crate) fn parse(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        self.parsed = false;
        // SAFETY: handle and stream live and belonging together (owned); `data`
        // is read during the call only; `&mut self` keeps other threads off.
        unsafe { result::stream_parse(self.handle.table(), self.handle.raw, data, self.raw) }?;
        self.parsed = true;
        Ok(())
    }

    /// Parses only the headers of `data` (`nvjpegJpegStreamParseHeader`):
    /// enough for [`batched_supported`](Self::batched_supported), much cheaper
    /// than a full parse.
    pub(crate) fn parse_header(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        self.parsed = false;
        // SAFETY: as in `parse`.
        unsafe {
            result::stream_parse_header(self.handle.table(), self.handle.raw, data, self.raw)
        }?;
        self.parsed = true;
        Ok(())
    }

    /// Whether the batched decoder of this stream's handle takes the parsed
    /// image (`nvjpegDecodeBatchedSupported`).
    pub(crate) fn batched_supported(&self) -> Result<bool, DecodeError> {
        let call = "nvjpegDecodeBatchedSupported";
        self.require_parsed(call)?;
        // SAFETY: handle and stream live and belonging together, the stream
        // holds a successful parse (checked); not `Sync`, so only this thread
        // holds it.
        unsafe { result::batched_supported(self.handle.table(), self.handle.raw, self.raw) }
    }

    fn require_parsed(&self, call: &'static str) -> Result<(), DecodeError> {
        if self.parsed {
            Ok(())
        } else {
            Err(DecodeError::Nvjpeg {
                call,
                status: NvjpegStatus(sys::NVJPEG_STATUS_INVALID_PARAMETER),
            })
        }
    }
}

impl Drop for JpegStream {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed only here.
        log_destroy(unsafe { result::jpeg_stream_destroy(self.handle.table(), self.raw) });
    }
}

/// A buffer made with stoker's allocators, or `None` (the caller makes it with
/// nvJPEG's own) when the library lacks the V2 function or refuses (said once).
fn or_library_allocator<T>(made: Result<Option<T>, DecodeError>) -> Option<T> {
    made.unwrap_or_else(|e| {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| tracing::warn!("{e}: this buffer uses nvJPEG's own allocator"));
        None
    })
}

/// A pinned host buffer (`nvjpegBufferPinned_t`) for a decoupled state.
pub(crate) struct PinnedBuffer {
    /// Non-null, made from `handle`, destroyed once in `Drop`.
    raw: sys::nvjpegBufferPinned_t,
    handle: Arc<Handle>,
}

// SAFETY: a buffer may move between threads; it is used only through the one
// state it is attached to (which owns it), and no `Sync` is claimed.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    /// A buffer made from `handle`, with the handle's allocators when they
    /// are stoker's and the library has `nvjpegBufferPinnedCreateV2`, else
    /// nvJPEG's default.
    pub(crate) fn new(handle: &Arc<Handle>) -> Result<PinnedBuffer, DecodeError> {
        let v2 = match &handle.memory {
            // SAFETY: the handle is live; the allocator lives in its
            // `CachedMemory`, which the handle (held by this buffer) keeps.
            Some(m) => or_library_allocator(unsafe {
                result::buffer_pinned_create_v2(
                    handle.lib.optional(),
                    handle.raw,
                    m.pinned_allocator(),
                )
            }),
            None => None,
        };
        let raw = match v2 {
            Some(raw) => raw,
            // SAFETY: the handle is live (the `Arc` keeps it).
            None => unsafe { result::buffer_pinned_create(handle.table(), handle.raw) }?,
        };
        Ok(PinnedBuffer {
            raw,
            handle: Arc::clone(handle),
        })
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed only here; a state it is attached
        // to owns it and is destroyed first.
        log_destroy(unsafe { result::buffer_pinned_destroy(self.handle.table(), self.raw) });
    }
}

/// A device buffer (`nvjpegBufferDevice_t`) for a decoupled state.
pub(crate) struct DeviceBuffer {
    /// Non-null, made from `handle`, destroyed once in `Drop`.
    raw: sys::nvjpegBufferDevice_t,
    handle: Arc<Handle>,
}

// SAFETY: as for `PinnedBuffer`.
unsafe impl Send for DeviceBuffer {}

impl DeviceBuffer {
    /// A buffer made from `handle`, with its allocators as [`PinnedBuffer::new`].
    pub(crate) fn new(handle: &Arc<Handle>) -> Result<DeviceBuffer, DecodeError> {
        let v2 = match &handle.memory {
            // SAFETY: as in `PinnedBuffer::new`.
            Some(m) => or_library_allocator(unsafe {
                result::buffer_device_create_v2(
                    handle.lib.optional(),
                    handle.raw,
                    m.device_allocator(),
                )
            }),
            None => None,
        };
        let raw = match v2 {
            Some(raw) => raw,
            // SAFETY: the handle is live (the `Arc` keeps it).
            None => unsafe { result::buffer_device_create(handle.table(), handle.raw) }?,
        };
        Ok(DeviceBuffer {
            raw,
            handle: Arc::clone(handle),
        })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed only here; a state it is attached
        // to owns it and is destroyed first.
        log_destroy(unsafe { result::buffer_device_destroy(self.handle.table(), self.raw) });
    }
}

/// Decode parameters (`nvjpegDecodeParams_t`) selecting interleaved RGB output.
pub(crate) struct DecodeParams {
    /// Non-null, made from `handle`, destroyed once in `Drop`.
    raw: sys::nvjpegDecodeParams_t,
    handle: Arc<Handle>,
}

// SAFETY: parameters may move between threads; no `Sync` is claimed, so the
// one thread holding them is the only one passing them to nvJPEG.
unsafe impl Send for DecodeParams {}

impl DecodeParams {
    /// Parameters made from `handle`, set to `NVJPEG_OUTPUT_RGBI`.
    pub(crate) fn rgbi(handle: &Arc<Handle>) -> Result<DecodeParams, DecodeError> {
        // SAFETY: the handle is live (the `Arc` keeps it).
        let raw = unsafe { result::decode_params_rgbi(handle.table(), handle.raw) }?;
        Ok(DecodeParams {
            raw,
            handle: Arc::clone(handle),
        })
    }
}

impl Drop for DecodeParams {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed only here.
        log_destroy(unsafe { result::decode_params_destroy(self.handle.table(), self.raw) });
    }
}
