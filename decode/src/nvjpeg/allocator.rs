//! nvJPEG's memory through stoker's caches: the extended (V2) allocator
//! callbacks, which nvJPEG calls with the stream each allocation is used on,
//! over a [`BlockCache`] of device memory and one of pinned host memory.
//!
//! Why, and how blocks are reused safely: `block_cache.rs`.
//! [`NvjpegMemory`](crate::NvjpegMemory) says when a decoder uses this.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{result, sys as cu, CudaContext};

use super::block_cache::{Backing, BlockCache, BlockStats};
use super::sys;

/// What a decoder's nvJPEG memory caches have done ([`GpuDecoder::nvjpeg_memory_stats`](crate::GpuDecoder::nvjpeg_memory_stats)).
///
/// # Examples
/// ```no_run
/// use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions, NvjpegMemory};
/// let options = GpuDecoderOptions { nvjpeg_memory: NvjpegMemory::Cached, ..Default::default() };
/// let dec = GpuDecoder::new(&cuda_context(0)?, options)?;
/// // ... decode_batch calls ...
/// if let Some(m) = dec.nvjpeg_memory_stats() {
///     println!("device blocks given back while decoding: {}", m.device.released);
/// }
/// # Ok::<(), stoker_decode::DecodeError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvjpegMemoryStats {
    /// Device memory (nvJPEG's states and buffers on the GPU).
    pub device: BlockStats,
    /// Pinned host memory (bitstreams and Huffman output on their way to the GPU).
    pub pinned: BlockStats,
}

impl std::fmt::Display for NvjpegMemoryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, s) in [("device", &self.device), ("pinned", &self.pinned)] {
            writeln!(
                f,
                "nvJPEG {name} memory: {} requests, {} reused, {} new, {} failed; \
                 {} kept, {} given back; {:.1} MiB in use (peak {:.1}), {:.1} MiB idle",
                s.requests,
                s.reused,
                s.fresh,
                s.failed,
                s.kept,
                s.released,
                s.live_bytes as f64 / 1048576.0,
                s.peak_live_bytes as f64 / 1048576.0,
                s.idle_bytes as f64 / 1048576.0,
            )?;
        }
        Ok(())
    }
}

/// A CUDA event, destroyed when dropped.
pub(crate) struct CuEvent(cu::CUevent);

// SAFETY: a CUDA event handle may be recorded, queried, waited on and
// destroyed from any thread (the driver API is thread safe); the cache uses
// each one under its mutex, from one thread at a time.
unsafe impl Send for CuEvent {}

impl Drop for CuEvent {
    fn drop(&mut self) {
        // SAFETY: the event was created by `record_event` and is destroyed only here.
        if let Err(e) = unsafe { result::event::destroy(self.0) } {
            tracing::debug!("destroying an allocator event failed: {e}");
        }
    }
}

/// An event recorded on `stream` now, on the context current on this thread.
fn record_event(stream: usize) -> Option<CuEvent> {
    let ev = result::event::create(cu::CUevent_flags::CU_EVENT_DISABLE_TIMING).ok()?;
    let ev = CuEvent(ev);
    // SAFETY: `stream` is the stream nvJPEG named for this free, live while
    // nvJPEG uses it; the event was just created on the current context.
    unsafe { result::event::record(ev.0, stream as cu::CUstream) }.ok()?;
    Some(ev)
}

fn event_done(e: &CuEvent) -> bool {
    // SAFETY: the event is live (owned by `e`). NOT_READY and errors alike read as pending.
    unsafe { result::event::query(e.0) }.is_ok()
}

fn event_wait(e: &CuEvent) -> bool {
    // SAFETY: as above.
    unsafe { result::event::synchronize(e.0) }.is_ok()
}

/// One kind of CUDA memory: how a block is allocated and given back, on the
/// current context (the callbacks bind it).
pub(crate) trait Memory {
    fn alloc(&self, bytes: usize) -> Option<usize>;
    fn release(&self, addr: usize);
}

/// Device memory: `cuMemAlloc` / `cuMemFree`.
pub(crate) struct DeviceMemory;

impl Memory for DeviceMemory {
    fn alloc(&self, bytes: usize) -> Option<usize> {
        // SAFETY: plain allocation on the current context.
        unsafe { result::malloc_sync(bytes) }
            .ok()
            .map(|p| p as usize)
    }
    fn release(&self, addr: usize) {
        // SAFETY: `addr` came from `alloc` and is released once (the cache's invariant).
        if let Err(e) = unsafe { result::free_sync(addr as cu::CUdeviceptr) } {
            tracing::warn!("cuMemFree of an nvJPEG block failed: {e}");
        }
    }
}

/// Pinned host memory: `cuMemHostAlloc` (no flags, as `cudaHostAlloc`'s
/// default) / `cuMemFreeHost`.
pub(crate) struct PinnedMemory;

impl Memory for PinnedMemory {
    fn alloc(&self, bytes: usize) -> Option<usize> {
        // SAFETY: plain allocation on the current context.
        unsafe { result::malloc_host(bytes, 0) }
            .ok()
            .map(|p| p as usize)
    }
    fn release(&self, addr: usize) {
        // SAFETY: `addr` came from `alloc` and is released once (the cache's invariant).
        if let Err(e) = unsafe { result::free_host(addr as *mut c_void) } {
            tracing::warn!("cuMemFreeHost of an nvJPEG block failed: {e}");
        }
    }
}

/// A cache's backing on CUDA: `M`'s blocks, ordered by CUDA events.
pub(crate) struct Cuda<M>(M);

impl<M: Memory> Backing for Cuda<M> {
    type Event = CuEvent;
    fn alloc(&self, bytes: usize) -> Option<usize> {
        self.0.alloc(bytes)
    }
    fn release(&self, addr: usize) {
        self.0.release(addr)
    }
    fn record(&self, stream: usize) -> Option<CuEvent> {
        record_event(stream)
    }
    fn done(&self, e: &CuEvent) -> bool {
        event_done(e)
    }
    fn wait(&self, e: &CuEvent) -> bool {
        event_wait(e)
    }
}

/// The two caches and the context their CUDA calls run on; what the
/// callbacks' `ctx` pointer points to.
struct Caches {
    device: BlockCache<Cuda<DeviceMemory>>,
    pinned: BlockCache<Cuda<PinnedMemory>>,
    /// Declared last: released after the caches have given their blocks back.
    ctx: Arc<CudaContext>,
}

impl Caches {
    /// A block from the pinned cache or the device one.
    fn alloc(&self, pinned: bool, size: usize) -> Option<usize> {
        if pinned {
            self.pinned.alloc(size)
        } else {
            self.device.alloc(size)
        }
    }

    /// A block back to the cache it came from; `false` for an address it did not hand out.
    fn free(&self, pinned: bool, addr: usize, stream: usize) -> bool {
        if pinned {
            self.pinned.free(addr, stream)
        } else {
            self.device.free(addr, stream)
        }
    }
}

impl Drop for Caches {
    fn drop(&mut self) {
        // The caches give their blocks back after this, on this context.
        if let Err(e) = crate::bind_context(&self.ctx) {
            tracing::warn!("nvJPEG memory: binding the context to give blocks back failed ({e})");
        }
    }
}

/// nvJPEG allocators over stoker's caches, for the handles and buffers of
/// one decoder. Every handle made with it holds an `Arc` of it, so the
/// callbacks' context outlives every nvJPEG object that may call them.
pub(crate) struct CachedMemory {
    /// Read by the callbacks through the structs' context pointers.
    caches: Arc<Caches>,
    /// The structs nvJPEG is given (by address: they stay where they are).
    device: sys::nvjpegDevAllocatorV2_t,
    pinned: sys::nvjpegPinnedAllocatorV2_t,
}

// SAFETY: the structs hold function pointers and a pointer to `caches`, whose
// state is behind mutexes (`BlockCache`); the callbacks may run on any thread.
unsafe impl Send for CachedMemory {}
// SAFETY: as above; nothing is mutated through `&CachedMemory`.
unsafe impl Sync for CachedMemory {}

impl CachedMemory {
    /// Caches whose CUDA calls run on `ctx`.
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Arc<CachedMemory> {
        let caches = Arc::new(Caches {
            device: BlockCache::new(Cuda(DeviceMemory)),
            pinned: BlockCache::new(Cuda(PinnedMemory)),
            ctx: Arc::clone(ctx),
        });
        let ctx_ptr = Arc::as_ptr(&caches) as *mut c_void;
        Arc::new(CachedMemory {
            device: sys::nvjpegDevAllocatorV2_t {
                dev_malloc: Some(cache_malloc::<false>),
                dev_free: Some(cache_free::<false>),
                dev_ctx: ctx_ptr,
            },
            pinned: sys::nvjpegPinnedAllocatorV2_t {
                pinned_malloc: Some(cache_malloc::<true>),
                pinned_free: Some(cache_free::<true>),
                pinned_ctx: ctx_ptr,
            },
            caches,
        })
    }

    /// What the caches have done.
    pub(crate) fn stats(&self) -> NvjpegMemoryStats {
        NvjpegMemoryStats {
            device: self.caches.device.stats(),
            pinned: self.caches.pinned.stats(),
        }
    }

    /// The device allocator struct, for `nvjpegCreateExV2` and
    /// `nvjpegBufferDeviceCreateV2`. nvJPEG does not write through it.
    pub(crate) fn device_allocator(&self) -> *mut sys::nvjpegDevAllocatorV2_t {
        &self.device as *const _ as *mut _
    }

    /// The pinned allocator struct, as [`device_allocator`](Self::device_allocator).
    pub(crate) fn pinned_allocator(&self) -> *mut sys::nvjpegPinnedAllocatorV2_t {
        &self.pinned as *const _ as *mut _
    }
}

/// `cudaErrorMemoryAllocation`: what a callback returns when it has no memory
/// (any non-zero value makes nvJPEG report `NVJPEG_STATUS_ALLOCATOR_FAILURE`).
const NO_MEMORY: c_int = 2;
/// `cudaErrorInvalidValue`: a free of an address the cache did not hand out.
const INVALID: c_int = 1;

/// Runs a callback's body on the caches: the context bound first (nvJPEG may
/// call from a thread of its own), and no unwinding across the C boundary.
fn with_caches(ctx: *mut c_void, body: impl FnOnce(&Caches) -> c_int) -> c_int {
    if ctx.is_null() {
        return INVALID;
    }
    // SAFETY: `ctx` is the `Caches` a `CachedMemory` put in the struct nvJPEG
    // was given; every handle made with it holds the `CachedMemory` (and so
    // the `Arc<Caches>`) until after it is destroyed, the last call nvJPEG
    // makes for it.
    let caches = unsafe { &*(ctx as *const Caches) };
    catch_unwind(AssertUnwindSafe(|| {
        // `bind_context`: a first bind also returns an error that an earlier call on
        // the context left behind, which would fail this allocation for nothing.
        if crate::bind_context(&caches.ctx).is_err() {
            return NO_MEMORY;
        }
        body(caches)
    }))
    .unwrap_or(NO_MEMORY)
}

/// Stores `addr` through nvJPEG's out pointer.
fn hand_over(ptr: *mut *mut c_void, addr: Option<usize>) -> c_int {
    match addr {
        Some(a) if !ptr.is_null() => {
            // SAFETY: nvJPEG passes a valid out pointer (checked non-null).
            unsafe { *ptr = a as *mut c_void };
            0
        }
        Some(_) => INVALID,
        None => NO_MEMORY,
    }
}

/// The stream a free names, as the cache takes it: 0 (no stream to wait for)
/// for the null stream and CUDA's special handles (`cudaStreamLegacy` 1,
/// `cudaStreamPerThread` 2), whose events do not follow stoker's streams,
/// which are created non-blocking.
fn ordering_stream(stream: sys::cudaStream_t) -> usize {
    match stream as usize {
        0..=2 => 0,
        s => s,
    }
}

/// nvJPEG's `dev_malloc` (`PINNED` false) and `pinned_malloc` (true).
unsafe extern "C" fn cache_malloc<const PINNED: bool>(
    ctx: *mut c_void,
    ptr: *mut *mut c_void,
    size: usize,
    _stream: sys::cudaStream_t,
) -> c_int {
    with_caches(ctx, |c| hand_over(ptr, c.alloc(PINNED, size)))
}

/// nvJPEG's `dev_free` (`PINNED` false) and `pinned_free` (true).
unsafe extern "C" fn cache_free<const PINNED: bool>(
    ctx: *mut c_void,
    ptr: *mut c_void,
    _size: usize,
    stream: sys::cudaStream_t,
) -> c_int {
    with_caches(ctx, |c| {
        if c.free(PINNED, ptr as usize, ordering_stream(stream)) {
            0
        } else {
            INVALID
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callbacks_refuse_a_null_context_without_touching_cuda() {
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: a null context returns before anything is dereferenced.
        let r = unsafe {
            cache_malloc::<false>(std::ptr::null_mut(), &mut out, 16, std::ptr::null_mut())
        };
        assert_eq!(r, INVALID);
        assert!(out.is_null());
        // SAFETY: as above.
        let r = unsafe { cache_free::<true>(std::ptr::null_mut(), out, 16, std::ptr::null_mut()) };
        assert_eq!(r, INVALID);
    }

    #[test]
    fn hand_over_writes_only_a_served_address_through_a_valid_pointer() {
        let mut out: *mut c_void = std::ptr::null_mut();
        assert_eq!(hand_over(&mut out, Some(0x1000)), 0);
        assert_eq!(out as usize, 0x1000);
        assert_eq!(hand_over(&mut out, None), NO_MEMORY);
        assert_eq!(hand_over(std::ptr::null_mut(), Some(1)), INVALID);
    }

    #[test]
    fn frees_on_the_null_or_a_special_stream_are_not_ordered_by_an_event() {
        for s in [0usize, 1, 2] {
            assert_eq!(ordering_stream(s as sys::cudaStream_t), 0);
        }
        assert_eq!(
            ordering_stream(0x7f00_1000 as sys::cudaStream_t),
            0x7f00_1000
        );
    }

    #[test]
    fn stats_print_both_kinds() {
        let s = NvjpegMemoryStats::default().to_string();
        assert!(s.contains("nvJPEG device memory: 0 requests"), "{s}");
        assert!(s.contains("nvJPEG pinned memory"), "{s}");
    }
}
