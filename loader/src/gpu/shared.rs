//! What every stage of the GPU backend shares, fixed at build: the context and
//! its streams, the transform kernel, the decoder, the staging ring's free list
//! and the settings the stages read; plus the counters they all feed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use cudarc::driver::{CudaContext, CudaStream};
use stoker_decode::{GpuDecoder, Limits};
use stoker_formats::Dataset;

use super::kernel::{KernelDtype, TransformArgs, TransformKernel};
use super::registered::DirectMaps;
use super::staging::{Slot, SlotSizes};
use crate::config::Output;
use crate::error::LoaderError;
use crate::metrics::{Metrics, Stage};
use crate::transform::Transform;

/// Everything the stages of the GPU backend share, fixed at build (only the
/// slot count and `batch_copies` change afterwards, as their fields say).
///
/// Dropping it first waits for the copy, decode and compute streams (see its
/// `Drop`), so that the kernel module, the decoder, the registered map and the
/// slots' buffers outlive the work queued on them.
pub(crate) struct Shared {
    /// The device's primary context: every stream, event, buffer, module and
    /// decoder state below belongs to it.
    pub(crate) ctx: Arc<CudaContext>,
    /// H2D copies of raw records. Each batch's copies wait on its slot's `ready`
    /// (the previous kernel that read the arena) and record its `h2d_end`.
    pub(crate) copy: Arc<CudaStream>,
    /// Transforms, and on the nvJPEG route the oversize and parameter copies. The
    /// slots' device buffers are allocated and freed on it; it waits for a
    /// batch's copies or decode before that batch's kernel.
    pub(crate) compute: Arc<CudaStream>,
    /// nvJPEG decodes, batch `k` on `decode[k % 2]`: a batch's decode waits only
    /// for the kernel that last read its slot's arena (and for the decode two
    /// batches back), not for the previous batch's decode and transform, so the
    /// JPEG engines get batch k+1 while batch k finishes. The decoder orders its
    /// own reused buffers across the two streams.
    pub(crate) decode: [Arc<CudaStream>; 2],
    /// The fused transform, loaded into `ctx`; launched on `compute` only.
    pub(crate) kernel: TransformKernel,
    /// nvJPEG (hardware engines / CUDA / CPU per image) for JPEG datasets; `None`
    /// for raw datasets, whose pixels are staged and copied as they are. Locked
    /// by the producer thread for the whole decode of a batch.
    pub(crate) nvjpeg: Option<Mutex<GpuDecoder>>,
    /// The decoder's pixel limit, which the loader's own header probes and
    /// CPU decodes (read-ahead, oversize images) apply too.
    pub(crate) limits: Limits,
    /// The dataset; the producer, the read-ahead and each reader thread open
    /// their own reader on it.
    pub(crate) dataset: Dataset,
    /// Draws each sample's crop and flip, as on the CPU path.
    pub(crate) transform: Transform,
    /// Output side in pixels (`args.out_width == args.out_height == size`).
    pub(crate) size: u32,
    /// The batch tensor's layout and element type; `dtype` and `args` were
    /// derived from it (`assembly::transform_args`).
    pub(crate) output: Output,
    /// The kernel's output element type; `sizes.out_bytes` was computed with it.
    pub(crate) dtype: KernelDtype,
    /// The kernel's per-launch arguments (output size, layout, normalization).
    pub(crate) args: TransformArgs,
    /// The loader's counters, shared with the consumer side.
    pub(crate) metrics: Arc<Metrics>,
    /// Reader / CPU-decode threads, used from the producer thread only.
    pub(crate) pool: rayon::ThreadPool,
    /// Batches handed over ahead of the consumer: the bound of each epoch's
    /// result channel; the ring was built with `prefetch + 2` slots.
    pub(crate) prefetch: usize,
    /// Sizes of every slot (slots added later included); never change.
    pub(crate) sizes: SlotSizes,
    /// Slots alive, in the ring or held by batches: grows only if the consumer
    /// keeps every batch alive (`producer::take_slot`), shrinks when a slot is
    /// lost to a panic; the reported pinned/device bytes are `slots × sizes`.
    pub(crate) slots: AtomicUsize,
    /// Slots holding their pixel staging: all of them, or (`sizes.lazy_pixels`)
    /// those that met a record the page-locked map could not give; with `slots`,
    /// what the reported pinned bytes count.
    pub(crate) pixel_staging: AtomicUsize,
    /// Free slots of the staging ring. Unbounded, so that a slot given back
    /// never blocks; it holds at most `slots` slots.
    pub(crate) free_tx: Sender<Box<Slot>>,
    pub(crate) free_rx: Receiver<Box<Slot>>,
    /// Pinned staging is write-combined (`LoaderBuilder::write_combined_staging`),
    /// for slots added later too.
    pub(crate) write_combined: bool,
    /// How the host waits on the slots' events, for slots added later too
    /// (`setup::wait_mode`).
    pub(crate) waits: stoker_decode::WaitMode,
    /// Raw records are staged with streaming stores (`LoaderBuilder::streaming_staging_stores`).
    pub(crate) streaming_stores: bool,
    /// Raw records: the dataset's map, page-locked whole or as a moving window;
    /// records inside it are copied to the device from there
    /// (`LoaderBuilder::zero_copy_h2d`). `None` on the nvJPEG route. Whole: registered
    /// until this struct drops, after its streams are synchronized; windowed: each
    /// window unlocked after an event that follows its last copy (`window_locker`);
    /// so no queued copy reads a map unregistered.
    pub(crate) direct: Option<DirectMaps>,
    /// Records from `direct` go in one `cuMemcpyBatchAsync` per batch: set only
    /// where the driver has it (13 and later), cleared if the call fails (one
    /// copy per record from then on); never set again.
    pub(crate) batch_copies: AtomicBool,
    /// Batches are handed out already waited on this stream
    /// (`LoaderBuilder::cuda_stream`); it belongs to `ctx` (checked at build).
    pub(crate) consumer_stream: Option<Arc<CudaStream>>,
}

impl Shared {
    /// Waits on the host for everything queued on the copy, decode and compute
    /// streams; failures are logged (`when` says in what situation), never raised.
    pub(crate) fn synchronize_streams(&self, when: &str) {
        for (what, s) in [
            ("copy", &self.copy),
            ("decode 0", &self.decode[0]),
            ("decode 1", &self.decode[1]),
            ("compute", &self.compute),
        ] {
            if let Err(e) = s.synchronize() {
                tracing::warn!("{when}, {what} stream synchronize failed: {e}");
            }
        }
    }
}

impl Drop for Shared {
    /// Lets queued transforms, decodes and copies finish before the kernel
    /// module, the decoder's states and the staging they use are destroyed
    /// (fields drop after this). Errors are logged, never raised.
    fn drop(&mut self) {
        // A stale error recorded earlier must not stop the waits below.
        let _ = self.ctx.check_err();
        self.synchronize_streams("at GPU loader teardown");
        // The idle slots (device memory and pinned staging) go now: the bounded channel
        // would keep them for as long as any batch handed out (each holds a sender to
        // come back) is alive. Each slot's Drop orders its frees after its events.
        while self.free_rx.try_recv().is_ok() {}
    }
}

/// How often blocked producer calls look at the stop flag.
pub(super) const POLL: Duration = Duration::from_millis(20);

/// Waits until `slot`'s previous use has completed ([`Slot::begin_host_writes`]) and adds
/// that use to the H2D and transform counters (GPU time from events).
///
/// # Errors
/// As [`Slot::begin_host_writes`]: the previous copy or kernel failed.
pub(super) fn reuse_slot(shared: &Shared, slot: &mut Slot) -> Result<(), LoaderError> {
    let Some((prev, h2d_ms, kernel_ms)) = slot.begin_host_writes()? else {
        return Ok(());
    };
    let ms = |v: f32| Duration::from_secs_f64(f64::from(v.max(0.0)) / 1e3);
    shared
        .metrics
        .record(Stage::H2d, prev.images, prev.h2d_bytes, ms(h2d_ms));
    shared
        .metrics
        .record(Stage::Transform, prev.images, prev.out_bytes, ms(kernel_ms));
    Ok(())
}

/// Reports the pinned and device memory of the slots alive, pixel staging
/// counted for the slots holding theirs.
pub(super) fn report_slot_memory(shared: &Shared) {
    let slots = shared.slots.load(Ordering::Acquire);
    let with_pixels = shared.pixel_staging.load(Ordering::Acquire);
    shared
        .metrics
        .set_pinned_bytes(shared.sizes.pinned_bytes_of(slots, with_pixels) as u64);
    shared
        .metrics
        .set_device_bytes((slots * shared.sizes.device_bytes()) as u64);
}
