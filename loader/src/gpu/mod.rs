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
//! the compute stream waits for the decode before the transform); images larger than a
//! staging stride are decoded, cropped and resized on the CPU and copied. Raw
//! (pre-decoded) records go to the device straight from the dataset's memory map,
//! page-locked at build (`registered`), in one `cuMemcpyBatchAsync` per batch
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

mod assembly;
pub(crate) mod batch_copy;
mod epoch;
pub mod handoff;
mod jpeg_batch;
pub mod kernel;
pub mod nvml;
mod producer;
mod raw_batch;
mod read_ahead;
mod records;
mod registered;
mod shared;
pub(crate) mod staging;
mod stream_copy;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaContext;
use stoker_decode::{DecodeError, GpuDecoder, GpuDecoderOptions};
use stoker_formats::{Dataset, Encoding};

use crate::builder::{Device, LoaderConfig};
use crate::error::{driver_err, LoaderError};
use crate::metrics::{Metrics, Stage};
use crate::pipeline::{EpochPlan, EpochStream, Pipeline};

pub use batch_copy::{memcpy_batch_htod_async, supported as batch_copies_supported};
pub use cudarc;
pub use handoff::CudaImages;
pub use stream_copy::copy_streaming;

use kernel::TransformKernel;
use shared::Shared;
use staging::{Slot, SlotSizes};

/// Pixels reserved per image in the staging ring for JPEG datasets (640×480):
/// larger images are cropped and resized on the CPU before staging.
pub const JPEG_STAGING_PIXELS: usize = 640 * 480;

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

/// How many CUDA devices this process can see (`CUDA_VISIBLE_DEVICES` applies:
/// the driver counts only the devices it lists), or why none can be used. Never
/// panics: checks for the driver library before any cudarc call.
///
/// # Examples
///
/// ```
/// match stoker_loader::gpu::visible_devices() {
///     Ok(n) => println!("{n} CUDA device(s)"),
///     Err(reason) => println!("no GPU: {reason}"),
/// }
/// ```
pub fn visible_devices() -> Result<usize, String> {
    // SAFETY: only tries to dlopen the driver library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(
            "the NVIDIA driver library (libcuda.so) was not found: no GPU driver on this machine"
                .into(),
        );
    }
    CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .map_err(|e| format!("the CUDA driver failed to initialize ({e}): no usable GPU"))
}

/// Why the GPU path cannot run here, or `None` when a CUDA driver with at least
/// `ordinal + 1` devices is present. Never panics (checks the library before any
/// cudarc call).
pub fn unavailable_reason(ordinal: usize) -> Option<String> {
    match visible_devices() {
        Err(reason) => Some(reason),
        Ok(n) if n <= ordinal => Some(format!(
            "CUDA device {ordinal} requested but the driver reports {n} device(s)"
        )),
        Ok(_) => None,
    }
}

/// The nvJPEG decoder's options: the builder's (or [`decoder_defaults`]), with
/// the builder's CPU share on top, and the CPU share's pool sized from this
/// process's share of the node's cores unless the options say.
fn decoder_options(config: &LoaderConfig) -> GpuDecoderOptions {
    let mut options = config.gpu_decoder.clone().unwrap_or_else(decoder_defaults);
    if let Some(share) = config.gpu_cpu_share {
        options.cpu_share = share;
    }
    if options.cpu_share_threads == 0 {
        options.cpu_share_threads = cpu_share_threads(config.node_cores, options.hardware_lanes);
    }
    options
}

/// Threads for the decoder's CPU share on `cores` (this process's share of the
/// node): the decoder's own rule (the cores left after the hardware lanes' parsing
/// threads and two more, at least 1) applied to the share instead of the machine,
/// so that eight processes on a node do not each start a pool for every core.
fn cpu_share_threads(cores: usize, lanes: usize) -> usize {
    cores.saturating_sub(lanes + 2).max(1)
}

/// Slots of the staging ring: `prefetch + 2`, or fewer when that many would take
/// more than `budget` bytes of pinned memory at `slot_bytes` each (at least 3: one
/// batch in flight). `None` when not even 3 fit.
fn ring_slots(prefetch: usize, slot_bytes: usize, budget: u64) -> Option<usize> {
    let fit = budget / (slot_bytes.max(1) as u64);
    let want = prefetch.max(1) + 2;
    (fit >= 3).then(|| want.min(usize::try_from(fit).unwrap_or(usize::MAX)))
}

/// The nvJPEG decoder options the GPU loader uses unless
/// [`crate::LoaderBuilder::gpu_decoder`] gives others: the decoder's defaults
/// with two decoder states per hardware lane. The loader submits batch k+1
/// while batch k's engine work may still run; with one state per lane, the
/// lane would first wait on the host for batch k to finish (a state is not
/// reinitialized while its batch decodes), leaving the engines idle while
/// k+1 is parsed. The second state costs one more preallocated buffer set
/// per lane (about 60 MB of device memory each with the default hint).
///
/// # Examples
/// ```
/// let o = stoker_loader::gpu::decoder_defaults();
/// assert_eq!(o.hardware_states_per_lane, 2);
/// // Start from these to change one option and keep the rest.
/// let o = stoker_decode::GpuDecoderOptions { cpu_share: 0.15, ..o };
/// assert_eq!(o.hardware_states_per_lane, 2);
/// ```
pub fn decoder_defaults() -> GpuDecoderOptions {
    GpuDecoderOptions {
        hardware_states_per_lane: 2,
        ..GpuDecoderOptions::default()
    }
}

/// The greatest (numerically lowest) stream priority of `ctx`'s device, or 0
/// (the default priority) when the range cannot be read or the device has none.
fn stream_priority(ctx: &Arc<CudaContext>) -> i32 {
    if let Err(e) = ctx.bind_to_thread() {
        tracing::warn!("cannot bind the CUDA context to read stream priorities: {e}");
        return 0;
    }
    match cudarc::driver::result::stream::get_priority_range() {
        // `(least, greatest)`: smaller is higher; both 0 without priority support.
        Ok((least, greatest)) => {
            tracing::debug!(least, greatest, "CUDA stream priority range");
            greatest.min(least)
        }
        Err(e) => {
            tracing::warn!("cuCtxGetStreamPriorityRange failed ({e}): default stream priority");
            0
        }
    }
}

/// Staging bytes per image for `dataset` with outputs of `size × size`.
fn staging_stride(dataset: &Dataset, size: u32) -> usize {
    let manifest = dataset.manifest();
    let out = size as usize * size as usize * 3;
    let per_image = match (manifest.encoding, &manifest.raw_size) {
        (Encoding::Raw, Some(r)) => r.width as usize * r.height as usize * usize::from(r.channels),
        _ => JPEG_STAGING_PIXELS * 3,
    };
    // Oversized images are staged as their CPU-resized `size × size` RGB output.
    per_image.max(out)
}

/// Builds the GPU backend for `config` (called by the loader for `Device::Cuda`,
/// and for `Device::Auto`, which falls back to the CPU on `GpuUnavailable`).
///
/// # Errors
/// - [`LoaderError::GpuUnavailable`]: no driver, no such device, no NVRTC;
/// - [`LoaderError::Gpu`]: a CUDA call failed, or pinned / device memory ran out
///   (the message names the sizes asked);
/// - [`LoaderError::Thread`]: the reader pool could not start.
pub(crate) fn build(
    config: &LoaderConfig,
    metrics: Arc<Metrics>,
) -> Result<GpuPipeline, LoaderError> {
    let ordinal = match config.device {
        Device::Cuda(n) => n,
        // The loader resolves Auto to a device before it calls this.
        Device::Auto => {
            match crate::launcher::choose_device(Device::Auto, config.placement.local_rank, || {
                visible_devices().unwrap_or(0)
            }) {
                Device::Cuda(n) => n,
                _ => 0,
            }
        }
        _ => {
            return Err(LoaderError::GpuUnavailable {
                reason: "the GPU backend was asked to build for a non-CUDA device".into(),
            })
        }
    };
    if let Some(reason) = unavailable_reason(ordinal) {
        return Err(LoaderError::GpuUnavailable { reason });
    }
    drop(config.dataset.reader()?);
    let ctx = CudaContext::new(ordinal).map_err(|e| LoaderError::GpuUnavailable {
        reason: format!("cannot create a CUDA context on device {ordinal}: {e}"),
    })?;
    if let Some(stream) = &config.cuda_stream {
        if **stream.context() != *ctx {
            return Err(LoaderError::InvalidConfig {
                field: "cuda_stream",
                reason: format!(
                    "the stream belongs to device {}'s context {:?}, the loader runs in device {ordinal}'s primary context",
                    stream.context().ordinal(),
                    stream.context().cu_ctx()
                ),
            });
        }
    }
    let kernel = TransformKernel::load(&ctx)?;
    let options = decoder_options(config);
    let limits = options.limits;
    let nvjpeg = match config.dataset.manifest().encoding {
        Encoding::Jpeg => Some(Mutex::new(GpuDecoder::new(&ctx, options).map_err(
            |e| match e {
                DecodeError::Load(e) => LoaderError::GpuUnavailable {
                    reason: format!("nvJPEG (libnvjpeg) could not be loaded: {e}"),
                },
                other => LoaderError::Gpu {
                    op: "nvJPEG decoder creation",
                    source: Box::new(other),
                },
            },
        )?)),
        _ => None,
    };
    // The highest stream priority: the consumer's training kernels fill every SM,
    // and at equal priority the loader's transforms and nvJPEG's CUDA work queue
    // behind them (decode throughput collapses under a busy consumer). A
    // higher-priority stream's blocks are scheduled first as SMs free up (and may
    // preempt); the loader's work is small, so the consumer loses little.
    let priority = stream_priority(&ctx);
    let copy = ctx
        .new_stream_with_priority(priority)
        .map_err(|e| driver_err("cuStreamCreateWithPriority (copy)", e))?;
    let compute = ctx
        .new_stream_with_priority(priority)
        .map_err(|e| driver_err("cuStreamCreateWithPriority (compute)", e))?;
    let decode_stream = || {
        ctx.new_stream_with_priority(priority)
            .map_err(|e| driver_err("cuStreamCreateWithPriority (decode)", e))
    };
    let decode = [decode_stream()?, decode_stream()?];

    let size = config.transform.out_size();
    let (mean, std) = config.transform.mean_std();
    let (dtype, args) = assembly::transform_args(size, config.output, mean, std);
    let batch = config.batch_size as usize;
    let stride = staging_stride(&config.dataset, size);
    let sizes = SlotSizes {
        batch,
        stride,
        pinned_stride: if nvjpeg.is_some() {
            (size as usize).pow(2) * 3
        } else {
            stride
        },
        out_bytes: batch * 3 * size as usize * size as usize * dtype.size(),
    };
    let Some(slots) = ring_slots(
        config.prefetch.max(1) as usize,
        sizes.pinned_bytes(),
        config.pinned_memory,
    ) else {
        return Err(LoaderError::InvalidConfig {
            field: "pinned_memory",
            reason: format!(
                "the staging ring needs at least 3 slots of {} bytes of pinned memory, {} bytes allowed (this process's share of the node's memory by default); lower batch_size or raise pinned_memory",
                sizes.pinned_bytes(),
                config.pinned_memory
            ),
        });
    };
    let prefetch = slots - 2;
    if prefetch < config.prefetch.max(1) as usize {
        let msg =
            "GPU path: prefetch lowered so that the staging ring fits the pinned-memory share";
        if config.prefetch_explicit {
            tracing::warn!(
                asked = config.prefetch,
                prefetch,
                pinned_memory = config.pinned_memory,
                "{msg}"
            );
        } else {
            tracing::info!(
                asked = config.prefetch,
                prefetch,
                pinned_memory = config.pinned_memory,
                "{msg}"
            );
        }
    }
    let want_device = slots * sizes.device_bytes();
    if let Ok((free, total)) = ctx.mem_get_info() {
        if want_device > free {
            return Err(LoaderError::Gpu {
                op: "device memory for the staging ring",
                source: format!(
                    "{slots} slots × {} bytes = {want_device} bytes asked, {free} of {total} bytes free on device {ordinal}; lower batch_size or prefetch",
                    sizes.device_bytes()
                )
                .into(),
            });
        }
    }
    // Unbounded: a slot added by `pipeline::grow` must always find its place back.
    let (free_tx, free_rx) = crossbeam_channel::unbounded();
    for _ in 0..slots {
        let slot = Slot::new(&ctx, &compute, sizes, config.write_combined)?;
        // Cannot fail: the receiver is alive.
        let _ = free_tx.try_send(Box::new(slot));
    }
    let workers = config.workers.max(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .thread_name(|i| format!("stoker-gpu-reader-{i}"))
        .build()
        .map_err(|e| LoaderError::Thread {
            thread: "stoker-gpu-reader".into(),
            reason: e.to_string(),
        })?;

    // Raw records: copy straight from the page-locked dataset map when allowed.
    let direct = if nvjpeg.is_none() && config.zero_copy {
        let started = std::time::Instant::now();
        let max = registered::half_of_memory().unwrap_or(0);
        match registered::RegisteredMaps::register(&ctx, &config.dataset, max) {
            Ok(maps) => {
                tracing::info!(
                    mib = maps.bytes() >> 20,
                    ms = started.elapsed().as_millis() as u64,
                    "raw records: dataset map page-locked, records go to the device from it"
                );
                Some(maps)
            }
            Err(reason) => {
                tracing::info!("raw records: staged through pinned memory ({reason})");
                None
            }
        }
    } else {
        None
    };
    // One batched copy per batch where the driver has it; `STOKER_H2D_PER_RECORD=1`
    // (a diagnostic, read here at build) asks for one copy per record instead.
    let per_record = std::env::var_os("STOKER_H2D_PER_RECORD").is_some_and(|v| v == "1");
    let batched = direct.is_some() && !per_record && batch_copy::supported();
    metrics.set_backend(match &nvjpeg {
        Some(dec) => {
            let dec = dec.lock().unwrap_or_else(|p| p.into_inner());
            match dec.hardware_engines() {
                Some((engines, cores)) => format!(
                    "cuda:{ordinal}, nvJPEG hardware engines ({engines} × {cores} cores) + CUDA decoder + CPU fallback"
                ),
                None if dec.has_hardware() => format!(
                    "cuda:{ordinal}, nvJPEG hardware engines + CUDA decoder + CPU fallback"
                ),
                None => format!("cuda:{ordinal}, nvJPEG CUDA decoder + CPU fallback (no hardware engines)"),
            }
        }
        None => match &direct {
            Some(maps) => format!(
                "cuda:{ordinal}, raw records: zero-copy H2D from the page-locked dataset map ({} MiB, {}), {workers} reader threads",
                maps.bytes() >> 20,
                if batched { "one batched copy per batch" } else { "one copy per record" }
            ),
            None => format!("cuda:{ordinal}, raw records: pinned staging + H2D, {workers} reader threads"),
        },
    });
    metrics.set_pinned_bytes((slots * sizes.pinned_bytes()) as u64);
    metrics.set_device_bytes(want_device as u64);
    metrics.set_queue_capacity(prefetch as u64);
    // nvJPEG route: the producer thread reads and submits each batch (decode time
    // is the wall time of `decode_batch`); raw route: the reader pool copies.
    let host_threads = if nvjpeg.is_some() { 1 } else { workers as u64 };
    metrics.set_threads(Stage::Read, host_threads);
    metrics.set_threads(Stage::Decode, host_threads);
    metrics.set_threads(Stage::H2d, 1);
    metrics.set_threads(Stage::Transform, 1);
    metrics.set_threads(Stage::Handoff, 1);
    // NVML now, not in the first epoch's sampler (which its epoch's end joins).
    let nvml = nvml::preload();
    tracing::info!(
        device = ordinal,
        slots,
        pinned_mib = (slots * sizes.pinned_bytes()) >> 20,
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
            free_tx,
            free_rx,
            write_combined: config.write_combined,
            streaming_stores: config.streaming_stores,
            batch_copies: std::sync::atomic::AtomicBool::new(batched),
            direct,
            consumer_stream: config.cuda_stream.clone(),
        }),
        slots,
        sizes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_formats::{DatasetWriter, Provenance, RecordMeta, WriterOptions};

    fn dataset(dir: &std::path::Path, encoding: Encoding, w: u32, h: u32) -> Dataset {
        let mut wr = DatasetWriter::create(
            dir,
            WriterOptions {
                encoding: Some(encoding),
                ..WriterOptions::default()
            },
        )
        .unwrap();
        let meta = RecordMeta {
            encoding,
            height: h,
            width: w,
            channels: 3,
            label: 0,
        };
        let payload = match encoding {
            Encoding::Raw => vec![7u8; (w * h * 3) as usize],
            _ => std::fs::read(stoker_testdata::bench_dir().join("00000.jpg")).unwrap(),
        };
        wr.push(meta, &payload).unwrap();
        wr.finish(vec!["c".into()], Provenance::stoker("gpu unit test"))
            .unwrap();
        Dataset::open(dir).unwrap()
    }

    #[test]
    fn staging_stride_is_the_raw_size_or_the_jpeg_budget_and_never_below_the_output() {
        let raw = tempfile::tempdir().unwrap();
        let ds = dataset(raw.path(), Encoding::Raw, 64, 48);
        assert_eq!(staging_stride(&ds, 32), 64 * 48 * 3);
        // A 224 output is larger than a 64×48 raw image: the stride holds it.
        assert_eq!(staging_stride(&ds, 224), 224 * 224 * 3);
        let jpeg = tempfile::tempdir().unwrap();
        let ds = dataset(jpeg.path(), Encoding::Jpeg, 500, 375);
        assert_eq!(staging_stride(&ds, 224), JPEG_STAGING_PIXELS * 3);
        // The bench images (500×375) are staged as they are.
        assert!(500 * 375 * 3 <= staging_stride(&ds, 224));
    }

    #[test]
    fn slot_sizes_count_every_buffer() {
        let params = 256 * std::mem::size_of::<kernel::ImageParams>();
        let out = 256 * 3 * 224 * 224 * 2;
        let raw = SlotSizes {
            batch: 256,
            stride: 500 * 375 * 3,
            pinned_stride: 500 * 375 * 3,
            out_bytes: out,
        };
        assert_eq!(raw.pinned_bytes(), 256 * 500 * 375 * 3 + params);
        assert_eq!(raw.device_bytes(), raw.pinned_bytes() + out);
        // nvJPEG route: the host stages only CPU-resized oversize images.
        let jpeg = SlotSizes {
            pinned_stride: 224 * 224 * 3,
            ..raw
        };
        assert_eq!(jpeg.pinned_bytes(), 256 * 224 * 224 * 3 + params);
        assert_eq!(jpeg.device_bytes(), raw.device_bytes());
    }

    #[test]
    fn the_staging_ring_fits_the_pinned_share() {
        // Room for all: prefetch + 2.
        assert_eq!(ring_slots(4, 100, 10_000), Some(6));
        // Room for 4 slots of 100 bytes: prefetch lowered to 2.
        assert_eq!(ring_slots(4, 100, 450), Some(4));
        // One batch in flight needs 3 slots.
        assert_eq!(ring_slots(4, 100, 300), Some(3));
        assert_eq!(ring_slots(4, 100, 299), None);
        assert_eq!(ring_slots(0, 100, u64::MAX), Some(3));
    }

    #[test]
    fn cpu_share_threads_follow_the_node_share() {
        // Alone on 16 cores with 4 lanes: the decoder's own rule.
        assert_eq!(cpu_share_threads(16, 4), 10);
        // One of 8 processes on 16 cores (2 each): one thread, never 0.
        assert_eq!(cpu_share_threads(2, 4), 1);
    }

    #[test]
    fn no_driver_is_a_reason_not_a_panic() {
        // On a machine without the driver this names it; with a GPU, device 4096
        // does not exist. Either way a reason, never a panic.
        let reason = unavailable_reason(4096).expect("no device 4096 anywhere");
        assert!(!reason.is_empty());
    }
}
