//! The staging ring: `K` slots allocated once at build. Each slot owns a pinned
//! host staging buffer (record pixels are written there by the reader threads;
//! allocated on first use when raw records are copied from the page-locked map),
//! the device arena it is copied into, the per-image kernel parameters (pinned
//! and device), the batch tensor the kernel writes, and the events that order
//! host writes, the copy stream, the compute stream and the consumer.
//!
//! # Reuse rules (the invariants every field below relies on)
//!
//! - The host rewrites `pinned` / `pinned_params` only after `h2d_end` of the
//!   previous use has completed ([`Slot::begin_host_writes`] waits for it on the
//!   producer thread, never on the consumer's).
//! - The copy stream overwrites `arena` / `params` only after `ready` of the
//!   previous use (the kernel that read them) — a GPU-side wait.
//! - The compute stream overwrites `out` only after every consumer stream that
//!   used the previous batch passed the point where that batch was dropped
//!   (`release` events, recorded by [`super::CudaImages`]'s `Drop`) — GPU-side.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DriverError, PinnedHostSlice,
    ValidAsZeroBits,
};

use stoker_decode::WaitMode;

use super::kernel::ImageParams;
use crate::error::driver_err;
use crate::LoaderError;

// SAFETY: every field of `ImageParams` is an integer or a float, for which the
// all-zero bit pattern is a valid value.
unsafe impl ValidAsZeroBits for ImageParams {}

/// Sizes of one slot, fixed at build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotSizes {
    /// Images per batch.
    pub(crate) batch: usize,
    /// Device arena bytes reserved per image (the largest image decoded or staged as is).
    pub(crate) stride: usize,
    /// Pinned staging bytes per image: `stride` when the host stages every image
    /// (raw records), `size² · 3` on the nvJPEG route, where the host only stages
    /// the CPU-resized output of oversize images.
    pub(crate) pinned_stride: usize,
    /// Bytes of the batch tensor (`batch * 3 * size * size * dtype`).
    pub(crate) out_bytes: usize,
    /// The pixel staging is allocated on first use ([`Slot::pinned_pixels`]), not
    /// with the slot: raw records copied from the page-locked dataset map need
    /// none.
    pub(crate) lazy_pixels: bool,
}

impl SlotSizes {
    /// Pinned host bytes of one slot, pixel staging included (what the ring is
    /// sized by, so that slots allocating theirs later stay in the budget).
    pub(crate) fn pinned_bytes(&self) -> usize {
        self.pixel_bytes() + self.batch * std::mem::size_of::<ImageParams>()
    }

    /// Pinned bytes of one slot's pixel staging.
    pub(crate) fn pixel_bytes(&self) -> usize {
        self.batch * self.pinned_stride
    }

    /// Slots of a new ring of `slots` that hold their pixel staging from the
    /// start: all of them, or none when it is allocated on first use.
    pub(crate) fn with_pixels_at_build(&self, slots: usize) -> usize {
        if self.lazy_pixels {
            0
        } else {
            slots
        }
    }

    /// Pinned bytes of `slots` slots, `with_pixels` of which hold their pixel
    /// staging.
    pub(crate) fn pinned_bytes_of(&self, slots: usize, with_pixels: usize) -> usize {
        slots * (self.pinned_bytes() - self.pixel_bytes()) + with_pixels * self.pixel_bytes()
    }

    /// Device bytes of one slot.
    pub(crate) fn device_bytes(&self) -> usize {
        self.batch * self.stride + self.batch * std::mem::size_of::<ImageParams>() + self.out_bytes
    }
}

/// What the last use of a slot enqueued, for the counters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InFlight {
    pub(crate) images: u64,
    pub(crate) h2d_bytes: u64,
    pub(crate) out_bytes: u64,
}

/// One slot of the ring (see the module docs for the reuse rules).
pub(crate) struct Slot {
    /// Staging for image pixels: image `i` at `i * pinned_stride`; `None` until
    /// first used when `sizes.lazy_pixels` ([`Slot::pinned_pixels`]).
    pinned: Option<PinnedHostSlice<u8>>,
    /// `pinned` is allocated write-combined.
    write_combined: bool,
    /// Staging for the per-image kernel parameters.
    pub(crate) pinned_params: PinnedHostSlice<ImageParams>,
    /// Device copy of `pinned`.
    pub(crate) arena: CudaSlice<u8>,
    /// Device copy of `pinned_params`.
    pub(crate) params: CudaSlice<ImageParams>,
    /// The batch tensor handed to the consumer.
    pub(crate) out: CudaSlice<u8>,
    /// Raw addresses of `arena`, `params`, `out` (stable for the slot's life).
    pub(crate) arena_ptr: u64,
    pub(crate) params_ptr: u64,
    pub(crate) out_ptr: u64,
    /// Bracket the H2D copies on the copy stream (timing enabled).
    pub(crate) h2d_start: CudaEvent,
    pub(crate) h2d_end: CudaEvent,
    /// Bracket the transform kernel on the compute stream (timing enabled);
    /// `ready` is what the consumer's stream waits on.
    pub(crate) kernel_start: CudaEvent,
    pub(crate) ready: CudaEvent,
    /// Recorded on each consumer stream when the batch was dropped.
    pub(crate) release: Vec<CudaEvent>,
    /// What the last use enqueued, `None` before the first use or once accounted.
    pub(crate) in_flight: Option<InFlight>,
    /// The stream the device buffers were allocated on (and are freed on).
    pub(crate) compute: Arc<CudaStream>,
    pub(crate) sizes: SlotSizes,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("sizes", &self.sizes)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl Slot {
    /// Allocates one slot on `ctx`; device buffers live on `compute`. The
    /// host's waits on the slot's events (staging reuse, batch ready) are done
    /// as `wait` says: [`WaitMode::Block`] makes them blocking-sync events.
    ///
    /// # Errors
    /// [`LoaderError::GpuOutOfMemory`] naming the allocation and its size when
    /// pinned or device memory runs out; [`LoaderError::Gpu`] when a CUDA call
    /// fails otherwise.
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        compute: &Arc<CudaStream>,
        sizes: SlotSizes,
        write_combined: bool,
        wait: WaitMode,
    ) -> Result<Slot, LoaderError> {
        let arena_bytes = sizes.batch * sizes.stride;
        let pinned = if sizes.lazy_pixels {
            None
        } else {
            Some(alloc_pixels(ctx, sizes, write_combined)?)
        };
        // SAFETY: the contents are zero-valid scalars, each written before it is
        // copied; always cached page-locked memory (small, written field by field).
        let pinned_params = unsafe { ctx.alloc_pinned_with_flags::<ImageParams>(sizes.batch, 0) }
            .map_err(|e| {
            oom(
                "pinned kernel parameters (cuMemHostAlloc)",
                sizes.batch * std::mem::size_of::<ImageParams>(),
                e,
            )
        })?;
        // SAFETY: device memory is written (H2D, kernel) before it is read.
        let arena = unsafe { compute.alloc::<u8>(arena_bytes) }
            .map_err(|e| oom("device arena (cuMemAlloc)", arena_bytes, e))?;
        // SAFETY: as above.
        let params = unsafe { compute.alloc::<ImageParams>(sizes.batch) }.map_err(|e| {
            oom(
                "device kernel parameters (cuMemAlloc)",
                sizes.batch * std::mem::size_of::<ImageParams>(),
                e,
            )
        })?;
        let out = compute
            .alloc_zeros::<u8>(sizes.out_bytes)
            .map_err(|e| oom("device batch tensor (cuMemAlloc)", sizes.out_bytes, e))?;
        let arena_ptr = device_address(&arena, compute);
        let params_ptr = device_address(&params, compute);
        let out_ptr = device_address(&out, compute);
        // Timed events (the counters read their elapsed times); a blocking one
        // keeps timing, the flags being exclusive only with DISABLE_TIMING.
        let flags = match wait {
            WaitMode::Block => CUevent_flags::CU_EVENT_BLOCKING_SYNC,
            _ => CUevent_flags::CU_EVENT_DEFAULT,
        };
        let timed = |what| ctx.new_event(Some(flags)).map_err(|e| driver_err(what, e));
        let slot = Slot {
            h2d_start: timed("cuEventCreate")?,
            h2d_end: timed("cuEventCreate")?,
            kernel_start: timed("cuEventCreate")?,
            ready: timed("cuEventCreate")?,
            release: Vec::new(),
            in_flight: None,
            compute: Arc::clone(compute),
            pinned,
            write_combined,
            pinned_params,
            arena,
            params,
            out,
            arena_ptr,
            params_ptr,
            out_ptr,
            sizes,
        };
        // The allocations above are stream-ordered on `compute`
        // (cuMemAllocAsync); the first copy and decode into this slot wait on
        // `ready`, so recording it here puts them after the allocations (also
        // for a slot added mid-run by `grow`, while `compute` is busy).
        slot.ready
            .record(compute)
            .map_err(|e| driver_err("cuEventRecord (slot allocation)", e))?;
        Ok(slot)
    }

    /// Waits (producer thread) until the previous H2D copy from this slot's pinned
    /// buffers has completed, and returns the GPU time of the previous use
    /// (`(h2d_ms, kernel_ms)`) with what it enqueued, for the counters.
    ///
    /// # Errors
    /// [`LoaderError::Gpu`] if the previous copy or kernel failed.
    pub(crate) fn begin_host_writes(
        &mut self,
    ) -> Result<Option<(InFlight, f32, f32)>, LoaderError> {
        let Some(prev) = self.in_flight.take() else {
            return Ok(None);
        };
        self.h2d_end
            .synchronize()
            .map_err(|e| driver_err("cuEventSynchronize (staging reuse)", e))?;
        let h2d_ms = super::event_time::elapsed_ms(&self.h2d_start, &self.h2d_end)
            .map_err(|e| driver_err("cuEventElapsedTime (h2d)", e))?;
        // The batch of the previous use was handed over and dropped, so its kernel
        // is normally long done: this rarely blocks.
        let kernel_ms = super::event_time::elapsed_ms(&self.kernel_start, &self.ready)
            .map_err(|e| driver_err("cuEventElapsedTime (transform)", e))?;
        Ok(Some((prev, h2d_ms, kernel_ms)))
    }
}

impl Slot {
    /// The slot's pixel staging, writable: allocated here on first use when
    /// `sizes.lazy_pixels`. The flag says whether it was allocated by this call
    /// (for the memory counters).
    ///
    /// # Errors
    /// [`LoaderError::Gpu`] when pinned memory runs out, or cudarc's wait before
    /// a host access fails.
    pub(crate) fn pinned_pixels(&mut self) -> Result<(&mut [u8], bool), LoaderError> {
        let allocated = self.pinned.is_none();
        if allocated {
            let ctx = Arc::clone(self.compute.context());
            self.pinned = Some(alloc_pixels(&ctx, self.sizes, self.write_combined)?);
        }
        let pixels = match self.pinned.as_mut() {
            Some(p) => p
                .as_mut_slice()
                .map_err(|e| driver_err("pinned staging access", e))?,
            None => &mut [],
        };
        Ok((pixels, allocated))
    }

    /// Whether the pixel staging is allocated.
    pub(crate) fn has_pixels(&self) -> bool {
        self.pinned.is_some()
    }
}

/// The pixel staging of a slot of `sizes`.
fn alloc_pixels(
    ctx: &Arc<CudaContext>,
    sizes: SlotSizes,
    write_combined: bool,
) -> Result<PinnedHostSlice<u8>, LoaderError> {
    let staging = sizes.pixel_bytes();
    // Write-combined only when asked (`LoaderBuilder::write_combined_staging`):
    // the host only writes this buffer, except a CPU decode of a JPEG record of
    // a raw dataset, which is then slow but correct.
    let flags = if write_combined {
        cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED
    } else {
        0
    };
    // SAFETY: the contents are uninitialized bytes; the host writes every byte it
    // later copies (see `begin_host_writes`); `flags` is 0 (cached page-locked
    // memory) or WRITECOMBINED, both valid for cuMemHostAlloc and both readable
    // by the device.
    unsafe { ctx.alloc_pinned_with_flags::<u8>(staging, flags) }
        .map_err(|e| oom("pinned staging (cuMemHostAlloc)", staging, e))
}

/// A slot's pinned buffers, readable, and the device buffers they are copied
/// into: every H2D copy of a batch goes through here.
///
/// Callers order each copy's stream after the last reader of its destination
/// (the slot's previous kernel: a wait on `ready`) and record `h2d_end` after
/// the copies, per the module's reuse rules.
pub(crate) struct H2dSources<'a> {
    slot: &'a Slot,
    /// `slot.pinned`: image `i` at `i * pinned_stride`.
    pixels: &'a [u8],
    /// `slot.pinned_params`.
    params: &'a [ImageParams],
}

impl Slot {
    /// The slot's pinned buffers, readable, for the batch's H2D copies.
    ///
    /// # Errors
    /// [`LoaderError::Gpu`] if cudarc's wait before a host access fails.
    pub(crate) fn h2d_sources(&self) -> Result<H2dSources<'_>, LoaderError> {
        let pixels = match &self.pinned {
            Some(p) => p
                .as_slice()
                .map_err(|e| driver_err("pinned staging access", e))?,
            // Not allocated: nothing was staged (`Slot::pinned_pixels`).
            None => &[],
        };
        let params = self
            .pinned_params
            .as_slice()
            .map_err(|e| driver_err("pinned parameters access", e))?;
        Ok(H2dSources {
            slot: self,
            pixels,
            params,
        })
    }
}

impl<'a> H2dSources<'a> {
    /// Image `i`'s `bytes` staged in pinned memory.
    pub(crate) fn staged(&self, i: usize, bytes: usize) -> &'a [u8] {
        let at = i * self.slot.sizes.pinned_stride;
        &self.pixels[at..at + bytes]
    }

    /// Enqueues the copy of the staging prefix `[..bytes]` to the start of the
    /// arena (the host staged every image at `i * stride` in both).
    pub(crate) fn pixels(&self, bytes: usize, stream: &CudaStream) -> Result<(), LoaderError> {
        // SAFETY: a prefix of the staging, which is laid out like the arena
        // (`pinned_stride == stride` where the host stages every image).
        unsafe { self.pinned_to_arena(0, &self.pixels[..bytes], stream) }
            .map_err(|e| driver_err("cuMemcpyHtoDAsync (pixels)", e))
    }

    /// Enqueues the copy of one `(pinned offset, arena offset, len)` region
    /// (a CPU-resized oversize image).
    pub(crate) fn region(
        &self,
        (from, to, len): (usize, usize, usize),
        stream: &CudaStream,
    ) -> Result<(), LoaderError> {
        // SAFETY: the region lies in the staging (the slice checks it) and in
        // the arena (`to + len ≤ batch * stride`: an image's own place).
        unsafe { self.pinned_to_arena(to, &self.pixels[from..from + len], stream) }
            .map_err(|e| driver_err("cuMemcpyHtoDAsync (oversize pixels)", e))
    }

    /// Enqueues the copy of the first `n` kernel parameters.
    pub(crate) fn params(&self, n: usize, stream: &CudaStream) -> Result<(), LoaderError> {
        debug_assert!(n <= self.slot.params.len());
        // SAFETY: the source is this slot's pinned parameters, kept like its
        // pinned staging (see `pinned_to_arena`); the destination holds
        // `batch ≥ n` entries.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(
                self.slot.params_ptr,
                &self.params[..n],
                stream.cu_stream(),
            )
        }
        .map_err(|e| driver_err("cuMemcpyHtoDAsync (params)", e))
    }

    /// Enqueues the copy of image `i`'s pixels from `src` (its staged bytes, or
    /// its record in a registered dataset map) to its place in the arena.
    ///
    /// # Safety
    /// `src` holds at most `stride` bytes, valid and unwritten until this slot's
    /// `h2d_end` completes; `i < batch`.
    pub(crate) unsafe fn image(
        &self,
        i: usize,
        src: &[u8],
        stream: &CudaStream,
    ) -> Result<(), LoaderError> {
        let at = i * self.slot.sizes.stride;
        // SAFETY: image `i`'s own `stride` bytes of the arena; `src` as the
        // caller promises.
        unsafe { self.host_to_arena(at, src, stream) }
            .map_err(|e| driver_err("cuMemcpyHtoDAsync (record)", e))
    }

    /// Enqueues the copies of images `0..srcs.len()` from `srcs` to their places
    /// in the arena in one `cuMemcpyBatchAsync`.
    ///
    /// # Safety
    /// At most `batch` sources, each of at most `stride` bytes, valid and
    /// unwritten until this slot's `h2d_end` completes; `cuMemcpyBatchAsync` is
    /// available (`batch_copy::supported`).
    pub(crate) unsafe fn images_batched(
        &self,
        srcs: &[&[u8]],
        stream: &CudaStream,
    ) -> Result<(), DriverError> {
        let stride = self.slot.sizes.stride;
        let mut dsts: Vec<u64> = (0..srcs.len())
            .map(|i| self.slot.arena_ptr + (i * stride) as u64)
            .collect();
        let mut ptrs: Vec<u64> = srcs.iter().map(|s| s.as_ptr() as u64).collect();
        let mut sizes: Vec<usize> = srcs.iter().map(|s| s.len()).collect();
        // SAFETY: one entry per image in each array; sources as the caller
        // promises; destination `i` is image i's place in this slot's arena.
        unsafe {
            super::batch_copy::memcpy_batch_htod_async(
                &mut dsts,
                &mut ptrs,
                &mut sizes,
                stream.cu_stream(),
            )
        }
    }

    /// # Safety
    /// `offset + src.len()` is within the arena; `src` stays valid and unwritten
    /// until this slot's `h2d_end` completes.
    unsafe fn host_to_arena(
        &self,
        offset: usize,
        src: &[u8],
        stream: &CudaStream,
    ) -> Result<(), DriverError> {
        debug_assert!(offset + src.len() <= self.slot.arena.len());
        // SAFETY: the destination lies inside this slot's arena, which lives as
        // long as the slot and is freed on `compute` after the consumers; the
        // bounds and the source as the caller promises.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(
                self.slot.arena_ptr + offset as u64,
                src,
                stream.cu_stream(),
            )
        }
    }

    /// # Safety
    /// `src` lies in this slot's pinned staging (`self.pixels`) and
    /// `offset + src.len()` within the arena.
    unsafe fn pinned_to_arena(
        &self,
        offset: usize,
        src: &[u8],
        stream: &CudaStream,
    ) -> Result<(), DriverError> {
        // SAFETY: the slot's pinned staging is neither written nor freed before
        // the copies that read it complete: `Slot::begin_host_writes` waits for
        // `h2d_end` before the host writes it again, `Drop` before it is freed,
        // and a batch that failed drains every stream before its slot is reused.
        unsafe { self.host_to_arena(offset, src, stream) }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Device buffers are freed asynchronously on `compute`: make it wait for the
        // consumers first. Pinned memory is freed by the host at once: wait for the
        // copies reading it. Failures are logged (never a panic), with a host wait
        // as the fallback.
        // cudarc binds the context through `check_err`, which returns (and clears)
        // any error recorded earlier: clear it first so that it cannot make the
        // waits below fail before they are queued.
        let _ = self.compute.context().check_err();
        // A slot dropped by a panic in the producer may have decodes in flight
        // into its arena on a stream nothing below waits for (the nvJPEG lanes'
        // streams are joined only at the end of a batch): wait for the whole
        // device before its memory goes back to the pool. A panic path only.
        if std::thread::panicking() {
            if let Err(e) = self.compute.context().synchronize() {
                tracing::warn!("slot teardown while unwinding: synchronize failed: {e}");
            }
        }
        for ev in self.release.drain(..) {
            if let Err(e) = self.compute.wait(&ev) {
                tracing::warn!("slot teardown: stream wait failed ({e}); synchronizing");
                if let Err(e) = ev.synchronize() {
                    tracing::warn!("slot teardown: release event failed: {e}");
                }
            }
        }
        if self.in_flight.is_some() {
            if let Err(e) = self.h2d_end.synchronize() {
                tracing::warn!("slot teardown: staging copy event failed: {e}");
            }
        }
    }
}

/// The raw address of a device buffer (stable for its life).
fn device_address<T>(slice: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (ptr, _record) = slice.device_ptr(stream);
    ptr
}

fn oom(what: &'static str, bytes: usize, e: cudarc::driver::DriverError) -> LoaderError {
    if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        return LoaderError::GpuOutOfMemory {
            what,
            bytes: bytes as u64,
            reason: "the driver has no memory left for it (CUDA_ERROR_OUT_OF_MEMORY)".into(),
        };
    }
    // Not formatted here: a `DriverError`'s text comes from the driver (cuGetErrorString).
    driver_err(what, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::{sys::CUresult, DriverError};

    /// A slot the device has no memory for is the caller's to fix (smaller batches, less
    /// prefetch, a model that leaves room), and Python's MemoryError; any other failure
    /// of the allocation stays a GPU error. Driver errors are plain values, so no GPU is
    /// needed to build them (only to print one: its text comes from the driver).
    #[test]
    fn only_an_allocation_the_driver_has_no_memory_for_is_short_of_memory() {
        let e = oom(
            "device arena (cuMemAlloc)",
            3 << 20,
            DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        );
        assert!(
            matches!(e, LoaderError::GpuOutOfMemory { bytes, .. } if bytes == 3 << 20),
            "{e:?}"
        );
        assert!(
            e.is_short_of_memory() && !e.is_short_of_host_memory(),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("device arena (cuMemAlloc): 3145728 bytes (3.0 MiB)")
                && text.contains("lower batch_size or prefetch"),
            "{text}"
        );
        let e = oom(
            "device arena (cuMemAlloc)",
            3 << 20,
            DriverError(CUresult::CUDA_ERROR_INVALID_CONTEXT),
        );
        assert!(matches!(e, LoaderError::Gpu { .. }), "{e:?}");
        assert!(!e.is_short_of_memory(), "{e}");
    }
}
