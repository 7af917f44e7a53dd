//! # Overview
//!
//! The GPU path: [`crate::Device::Cuda`] batches delivered in device memory while
//! the training step runs. Same sampler, same per-sample crop/flip
//! ([`crate::Transform::params`]), same bad-record policy and counters as the CPU
//! path; only where the pixels go differs.
//!
//! ```text
//!  raw records:  reader pool (rayon): CRC ──▶ copy stream: one batched copy from the
//!                page-locked dataset map (or pinned staging) ──▶ arena ─┐
//!  JPEG records: read-ahead thread ──▶ producer: nvJPEG decode_batch (decode k%2) ─▶ arena ─┤
//!                                                                               ▼
//!        compute stream: fused kernel (crop·resize·flip·normalize·layout·dtype) ─▶ batch tensor
//!        ─▶ `ready` event ─▶ consumer stream waits (no host sync) ─▶ batch dropped: `release`
//!           event on that stream ─▶ the slot's next kernel waits for it
//! ```
//!
//! The stages, in flow order (each its own module):
//!
//! - `setup`: the steps of `build`: device and context ([`visible_devices`],
//!   [`unavailable_reason`]), decoder, streams, staging ring, reader pool.
//! - `staging`: `K = prefetch + 2` slots allocated once at build (pinned staging,
//!   device arena, kernel parameters, batch tensor, events); sizes fixed by the
//!   configuration and reported in [`crate::Stats`] (`pinned_bytes`, `device_bytes`).
//!   Only a consumer that keeps every batch alive makes the ring grow (warned).
//!   A slot's H2D copies are its own methods.
//! - `shared`: what every stage reads, fixed at build.
//! - `epoch`: the consumer side of an epoch; `producer`: its thread, which walks
//!   the batches in order and takes a slot for each.
//! - `read_ahead` (JPEG records): reads and checks batch k+1 while batch k
//!   decodes; `records`: one record read, checked and staged on the host.
//! - `raw_batch` and `jpeg_batch`: a batch of raw records staged by the reader
//!   pool, or of JPEG records decoded by nvJPEG into the arena.
//! - `assembly`: kernel parameters, H2D copies, the fused transform, the batch.
//! - [`kernel`]: the fused transform (`transform.cu`, compiled by NVRTC at build into
//!   sm-agnostic PTX): antialiased bilinear resize of each image's crop box,
//!   horizontal flip, rounding to a u8 level, normalization, NCHW/NHWC and
//!   u8/f16/f32 straight into the batch tensor; plus a CPU reference of its math.
//! - [`handoff`]: [`CudaImages`], the device half of a [`crate::Batch`]: the
//!   consumer's stream waits on the batch's ready event; dropping the batch records
//!   the release point on that stream, and the slot's next kernel waits for it.
//!   The consumer thread never synchronizes the device.
//! - [`nvml`]: GPU, JPEG-engine and CPU utilization sampled during each epoch (NVML
//!   through our own small run-time table, optional); the "GPU < 70% while
//!   CPU > 85%" rule becomes a verdict line logged at the end of every epoch.
//!
//! The copy and compute streams are created at the device's highest stream
//! priority, so that the loader's short kernels are not queued behind a training
//! step that fills every SM.
//!
//! Decoding: JPEG records go to [`stoker_decode::GpuDecoder`] (nvJPEG hardware
//! engines, the CUDA decoder, or the CPU per image), which writes RGB straight
//! into the slot's device arena on one of two decode streams (alternating by
//! batch; each waits only for the last kernel that read the slot's arena, and
//! the compute stream waits for the decode before the transform), packed there by size
//! (`arena_pack`); an image larger than what its batch leaves of the arena is decoded,
//! cropped and resized on the CPU and copied. Raw
//! (pre-decoded) records go to the device straight from the dataset's memory map,
//! page-locked at build (`registered`) or, over the page-lock limit, as a moving
//! window of shards (`window_plan`, `window_locker`); the limit holds for the
//! whole process, whose page-locked bytes `lock_ledger` counts across loaders.
//! Each batch's records go in one `cuMemcpyBatchAsync`
//! (`batch_copy`; [`crate::LoaderBuilder::zero_copy_h2d`]); where that is not
//! possible the reader pool copies them into pinned staging (non-temporal stores,
//! [`copy_streaming`]) and one H2D copy per batch goes on the copy stream.
//!
//! ```no_run
//! use stoker_formats::Dataset;
//! use stoker_loader::{Device, Images, Loader, Output, Transform};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let loader = Loader::builder(Dataset::open("data/imagenet")?)
//!     .batch_size(256)
//!     .transform(Transform::random_resized_crop(224).hflip(0.5))
//!     .output(Output::F16Nchw)
//!     .device(Device::Cuda(0))
//!     .build()?;
//! for batch in loader.epoch(0) {
//!     let batch = batch?;
//!     if let Images::Cuda(images) = &batch.images {
//!         let stream = images.context().new_stream()?;
//!         images.wait(&stream)?; // GPU-side wait, no host sync
//!         let _x = images.as_f16_bits().unwrap();
//!     }
//! }
//! # Ok(()) }
//! ```

mod arena_pack;
mod assembly;
pub(crate) mod batch_copy;
mod device;
mod epoch;
mod event_time;
pub mod handoff;
mod jpeg_batch;
pub mod kernel;
mod lock_ledger;
mod lock_part;
pub mod nvml;
mod producer;
mod raw_batch;
mod read_ahead;
mod records;
mod registered;
mod setup;
mod shared;
#[cfg(test)]
mod source_scan;
pub(crate) mod staging;
mod stream_copy;
mod window_locker;
mod window_plan;

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use crate::config::LoaderConfig;
use crate::error::LoaderError;
use crate::metrics::Metrics;
use crate::pipeline::{EpochPlan, EpochStream, Pipeline};

pub use batch_copy::{memcpy_batch_htod_async, supported as batch_copies_supported};
pub use cudarc;
pub use device::{unavailable_reason, visible_devices};
pub use event_time::elapsed_ms as event_elapsed_ms;
pub use handoff::CudaImages;
pub use setup::{decoder_defaults, JPEG_STAGING_PIXELS};
pub use stream_copy::copy_streaming;

use kernel::TransformKernel;
use setup::Streams;
use shared::Shared;
use staging::SlotSizes;

/// The GPU backend (see the module docs).
pub struct GpuPipeline {
    shared: Arc<Shared>,
    slots: usize,
    sizes: SlotSizes,
}

impl std::fmt::Debug for GpuPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuPipeline")
            .field("device", &self.shared.ctx.ordinal())
            .field("slots", &self.slots)
            .field("slot_sizes", &self.sizes)
            .finish()
    }
}

impl Pipeline for GpuPipeline {
    fn start_epoch(&self, plan: EpochPlan) -> Result<Box<dyn EpochStream + Send>, LoaderError> {
        Ok(Box::new(epoch::GpuEpoch::start(
            Arc::clone(&self.shared),
            plan,
        )?))
    }
}

/// Builds the GPU backend for `config` (called by the loader for `Device::Cuda`,
/// and for `Device::Auto`, which falls back to the CPU on `GpuUnavailable`).
///
/// # Errors
/// - [`LoaderError::GpuUnavailable`]: no driver, no such device, no NVRTC;
/// - [`LoaderError::GpuOutOfMemory`]: pinned or device memory for the slots ran out
///   (the message names the sizes asked);
/// - [`LoaderError::Gpu`]: a CUDA call failed;
/// - [`LoaderError::Thread`]: the reader pool could not start.
pub(crate) fn build(
    config: &LoaderConfig,
    metrics: Arc<Metrics>,
) -> Result<GpuPipeline, LoaderError> {
    let ordinal = setup::ordinal(config)?;
    if let Some(reason) = unavailable_reason(ordinal) {
        return Err(LoaderError::GpuUnavailable { reason });
    }
    drop(config.dataset.reader()?);
    let ctx = setup::context(config, ordinal)?;
    let kernel = TransformKernel::load(&ctx)?;
    let (nvjpeg, limits) = setup::decoder(&ctx, config)?;
    let Streams {
        copy,
        compute,
        decode,
    } = Streams::new(&ctx)?;

    let size = config.transform.out_size();
    let (mean, std) = config.transform.mean_std();
    let (dtype, args) = assembly::transform_args(size, config.output, mean, std);
    // Before the ring: a ring for records from the page-locked map allocates no
    // pixel staging up front.
    let direct = setup::register_direct(&ctx, &copy, config, nvjpeg.is_some());
    let sizes = setup::slot_sizes(config, size, dtype, nvjpeg.is_some(), &direct);
    let (slots, prefetch) = setup::ring(config, &sizes)?;
    let want_device = setup::device_memory(&ctx, slots, &sizes, ordinal)?;
    let (free_tx, free_rx) = setup::fill_ring(&ctx, &compute, sizes, slots, config)?;
    let workers = config.workers.max(1);
    let pool = setup::reader_pool(workers)?;
    let batched = setup::batched_copies(&direct);

    metrics.set_backend(setup::describe(ordinal, &nvjpeg, &direct, batched, workers));
    // nvJPEG route: the producer thread reads and submits each batch (decode time
    // is the wall time of `decode_batch`); raw route: the reader pool copies.
    let host_threads = if nvjpeg.is_some() { 1 } else { workers as u64 };
    setup::report(&metrics, &sizes, slots, prefetch, want_device, host_threads);
    // NVML now, not in the first epoch's sampler (which its epoch's end joins).
    let nvml = nvml::preload();
    tracing::info!(
        device = ordinal,
        slots,
        pinned_mib = sizes.pinned_bytes_of(slots, sizes.with_pixels_at_build(slots)) >> 20,
        device_mib = want_device >> 20,
        nvml,
        "GPU loader ready"
    );
    Ok(GpuPipeline {
        shared: Arc::new(Shared {
            ctx,
            copy,
            compute,
            decode,
            kernel,
            nvjpeg,
            limits,
            dataset: config.dataset.clone(),
            transform: config.transform,
            size,
            output: config.output,
            dtype,
            args,
            metrics,
            pool,
            prefetch,
            sizes,
            slots: AtomicUsize::new(slots),
            pixel_staging: AtomicUsize::new(sizes.with_pixels_at_build(slots)),
            free_tx,
            free_rx,
            write_combined: config.write_combined,
            waits: setup::wait_mode(config),
            streaming_stores: config.streaming_stores,
            batch_copies: AtomicBool::new(batched),
            direct,
            consumer_stream: config.cuda_stream.clone(),
        }),
        slots,
        sizes,
    })
}
