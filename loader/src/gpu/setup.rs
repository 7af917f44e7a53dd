//! The steps of building the GPU backend, in the order `super::build` takes
//! them: the device and its context, the decoder, the streams, the staging
//! ring's sizes and slots, the reader pool, the raw-record map registration,
//! and what the backend reports about itself.

use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};
use cudarc::driver::{CudaContext, CudaStream};
use stoker_decode::{DecodeError, GpuDecoder, GpuDecoderOptions, Limits, WaitMode};
use stoker_formats::{Dataset, Encoding};

use super::arena_pack::ARENA_ALIGN;
use super::batch_copy;
use super::device::{stream_priority, visible_devices};
use super::kernel::KernelDtype;
use super::lock_ledger::{self, Route};
use super::lock_part::{self, OverLimit, OVER_LIMIT_VAR};
use super::registered::{self, CudaRegistrar, DirectMaps, RegisteredMaps};
use super::staging::{Slot, SlotSizes};
use super::window_locker::{self, Locker};
use crate::config::{Device, LoaderConfig};
use crate::error::{driver_err, LoaderError};
use crate::metrics::{Metrics, Stage};

/// Pixels budgeted per image in a slot's device arena for JPEG datasets (640×480):
/// the images of a batch are packed, so one above the budget is decoded on the
/// device while the batch fits (`arena_pack`); what does not fit is cropped and
/// resized on the CPU before staging.
pub const JPEG_STAGING_PIXELS: usize = 640 * 480;

/// The nvJPEG decoder's options: the builder's (or [`decoder_defaults`]), with
/// the builder's CPU share on top, and the CPU share's pool sized from this
/// process's share of the node's cores unless the options say.
fn decoder_options(config: &LoaderConfig) -> GpuDecoderOptions {
    let mut options = config
        .gpu_decoder
        .clone()
        .unwrap_or_else(|| GpuDecoderOptions {
            // What the conversion accepted (see `Manifest::decode_limits`); options given
            // to the builder keep their own.
            limits: config.dataset.manifest().decode_limits(),
            ..decoder_defaults()
        });
    if let Some(share) = config.gpu_cpu_share {
        options.cpu_share = share;
    }
    if options.cpu_share_threads == 0 {
        options.cpu_share_threads = cpu_share_threads(config.node_cores, options.hardware_lanes);
    }
    if config.gpu_waits != WaitMode::Auto {
        options.waits = config.gpu_waits;
    }
    options
}

/// How the loader's host waits on its own events (a slot's staging reuse and
/// batch ready) spend the wait: the builder's setting
/// ([`crate::LoaderBuilder::gpu_waits`]), `Auto` resolved by the decoder's rule
/// (blocking when its options give it a CPU share), so that the loader and its
/// decoder wait alike.
pub(super) fn wait_mode(config: &LoaderConfig) -> WaitMode {
    decoder_options(config).wait_mode()
}

/// Threads for the decoder's CPU share on `cores` (this process's share of the
/// node): the decoder's own rule (the cores left after the hardware lanes' parsing
/// threads and two more, at least 1) applied to the share instead of the machine,
/// so that eight processes on a node do not each start a pool for every core.
/// At most the decoder's [`stoker_decode::MAX_SHARE_THREADS`], which it refuses past: a
/// node of more cores still builds.
fn cpu_share_threads(cores: usize, lanes: usize) -> usize {
    cores
        .saturating_sub(lanes.saturating_add(2))
        .clamp(1, stoker_decode::MAX_SHARE_THREADS)
}

/// Slots of the staging ring: `prefetch + 2`, or fewer when that many would take
/// more than `budget` bytes of pinned memory at `slot_bytes` each (at least 3: one
/// batch in flight). `None` when not even 3 fit.
fn ring_slots(prefetch: usize, slot_bytes: usize, budget: u64) -> Option<usize> {
    let fit = budget / (slot_bytes.max(1) as u64);
    // Saturating: `LoaderBuilder::prefetch(usize::MAX)` asks for as many as fit.
    let want = prefetch.max(1).saturating_add(2);
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

/// Staging bytes per image for `dataset` with outputs of `size × size`.
fn staging_stride(dataset: &Dataset, size: u32) -> usize {
    let manifest = dataset.manifest();
    let out = size as usize * size as usize * 3;
    match (manifest.encoding, &manifest.raw_size) {
        // Oversized images are staged as their CPU-resized `size × size` RGB output.
        (Encoding::Raw, Some(r)) => {
            (r.width as usize * r.height as usize * usize::from(r.channels)).max(out)
        }
        // Packed at aligned places, each at least one such output (`ArenaPack`).
        _ => (JPEG_STAGING_PIXELS * 3).max(out.next_multiple_of(ARENA_ALIGN)),
    }
}

/// The device `config` asks for: `Device::Cuda(n)`, or for `Device::Auto` the
/// one the launcher's rule picks for this local rank.
pub(super) fn ordinal(config: &LoaderConfig) -> Result<usize, LoaderError> {
    match config.device {
        Device::Cuda(n) => Ok(n),
        // The loader resolves Auto to a device before it calls this.
        Device::Auto => Ok(
            match crate::launcher::choose_device(Device::Auto, config.placement.local_rank, || {
                visible_devices().unwrap_or(0)
            }) {
                Device::Cuda(n) => n,
                _ => 0,
            },
        ),
        _ => Err(LoaderError::GpuUnavailable {
            reason: "the GPU backend was asked to build for a non-CUDA device".into(),
        }),
    }
}

/// The primary context of device `ordinal`, checked against the consumer's
/// stream (`LoaderBuilder::cuda_stream`), which must belong to it.
pub(super) fn context(
    config: &LoaderConfig,
    ordinal: usize,
) -> Result<Arc<CudaContext>, LoaderError> {
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
    Ok(ctx)
}

/// The nvJPEG decoder for a JPEG dataset (`None` for raw records), and the pixel
/// limit the loader's own probes and CPU decodes apply with it.
pub(super) fn decoder(
    ctx: &Arc<CudaContext>,
    config: &LoaderConfig,
) -> Result<(Option<Mutex<GpuDecoder>>, Limits), LoaderError> {
    let options = decoder_options(config);
    let limits = options.limits;
    let nvjpeg = match config.dataset.manifest().encoding {
        Encoding::Jpeg => Some(Mutex::new(GpuDecoder::new(ctx, options).map_err(
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
    Ok((nvjpeg, limits))
}

/// The loader's streams.
pub(super) struct Streams {
    pub(super) copy: Arc<CudaStream>,
    pub(super) compute: Arc<CudaStream>,
    pub(super) decode: [Arc<CudaStream>; 2],
}

impl Streams {
    /// The copy, compute and two decode streams, at the highest stream priority.
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<Streams, LoaderError> {
        // The highest stream priority: the consumer's training kernels fill every
        // SM, and at equal priority the loader's transforms and nvJPEG's CUDA work
        // queue behind them (decode throughput collapses under a busy consumer). A
        // higher-priority stream's blocks are scheduled first as SMs free up (and
        // may preempt); the loader's work is small, so the consumer loses little.
        let priority = stream_priority(ctx);
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
        Ok(Streams {
            copy,
            compute,
            decode,
        })
    }
}

/// Sizes of every slot for `config`, outputs of `size × size` in `dtype`.
pub(super) fn slot_sizes(
    config: &LoaderConfig,
    size: u32,
    dtype: KernelDtype,
    nvjpeg: bool,
    direct: &Option<DirectMaps>,
) -> SlotSizes {
    let batch = config.batch_size as usize;
    let stride = staging_stride(&config.dataset, size);
    SlotSizes {
        batch,
        stride,
        pinned_stride: if nvjpeg {
            (size as usize).pow(2) * 3
        } else {
            stride
        },
        out_bytes: batch * 3 * size as usize * size as usize * dtype.size(),
        // Raw records from the page-locked map need no staging: it is allocated
        // only by a slot that meets a record the map cannot give. With a part of
        // the map locked, most batches have such records: staged in place, not
        // spilled and copied again.
        lazy_pixels: !nvjpeg
            && matches!(direct, Some(DirectMaps::Whole(_) | DirectMaps::Windowed(_))),
    }
}

/// The slot count and the prefetch depth that fit the pinned-memory share
/// (prefetch lowered, and said, when the asked one does not fit).
pub(super) fn ring(
    config: &LoaderConfig,
    sizes: &SlotSizes,
) -> Result<(usize, usize), LoaderError> {
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
    Ok((slots, prefetch))
}

/// The device bytes of `slots` slots, or an error naming the sizes when the
/// device has not that much free.
pub(super) fn device_memory(
    ctx: &Arc<CudaContext>,
    slots: usize,
    sizes: &SlotSizes,
    ordinal: usize,
) -> Result<usize, LoaderError> {
    let want_device = slots * sizes.device_bytes();
    if let Ok((free, total)) = ctx.mem_get_info() {
        if want_device > free {
            return Err(LoaderError::GpuOutOfMemory {
                what: "device memory for the staging ring",
                bytes: want_device as u64,
                reason: format!(
                    "{slots} slots of {} bytes each, and {free} of {total} bytes are free on device {ordinal}",
                    sizes.device_bytes()
                ),
            });
        }
    }
    Ok(want_device)
}

/// Both ends of the staging ring's free list.
type FreeList = (Sender<Box<Slot>>, Receiver<Box<Slot>>);

/// The free list of the staging ring, holding `slots` new slots (pinned
/// staging and waits as `config` says).
pub(super) fn fill_ring(
    ctx: &Arc<CudaContext>,
    compute: &Arc<CudaStream>,
    sizes: SlotSizes,
    slots: usize,
    config: &LoaderConfig,
) -> Result<FreeList, LoaderError> {
    let wait = wait_mode(config);
    tracing::debug!(%wait, "GPU loader host waits");
    // Unbounded: a slot added by `producer::grow` must always find its place back.
    let (free_tx, free_rx) = crossbeam_channel::unbounded();
    for _ in 0..slots {
        let slot = Slot::new(ctx, compute, sizes, config.write_combined, wait)?;
        // Cannot fail: the receiver is alive.
        let _ = free_tx.try_send(Box::new(slot));
    }
    Ok((free_tx, free_rx))
}

/// The reader / CPU-decode threads.
pub(super) fn reader_pool(workers: usize) -> Result<rayon::ThreadPool, LoaderError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .thread_name(|i| format!("stoker-gpu-reader-{i}"))
        .build()
        .map_err(|e| LoaderError::thread_start("stoker-gpu-reader", e))
}

/// Raw records: the dataset's map, page-locked, when allowed and possible, so
/// that records are copied to the device straight from it: whole when it fits
/// what the process's other loaders leave of the page-lock limit (the choice is
/// [`lock_ledger::route`]'s), else, for an order with locality, as a moving
/// window of half of what is left (`window_locker`), and for a whole-dataset
/// shuffle as a part of its shards locked for good (`lock_part`).
pub(super) fn register_direct(
    ctx: &Arc<CudaContext>,
    copy: &Arc<CudaStream>,
    config: &LoaderConfig,
    nvjpeg: bool,
) -> Option<DirectMaps> {
    if nvjpeg || !config.zero_copy {
        return None;
    }
    let limit = config
        .page_lock_limit
        .or_else(registered::half_of_memory)
        .unwrap_or(0);
    let total = registered::total_bytes(&config.dataset);
    // Everything the process holds is other loaders': this one has locked nothing yet.
    let (shared, others) = registered::locked_now(&config.dataset);
    match lock_ledger::route(total, shared, others, limit) {
        Route::Whole => register_whole(ctx, config, limit),
        Route::Staged if others == 0 => {
            tracing::info!(
                "raw records: staged through pinned memory (a page-lock limit of {limit} bytes)"
            );
            None
        }
        Route::Staged => {
            tracing::info!(
                "raw records: staged through pinned memory (a page-lock limit of {limit} bytes for the process, {others} bytes of which its other loaders hold page-locked)"
            );
            None
        }
        Route::Window { .. }
            if OverLimit::choose(
                &config.shuffle,
                std::env::var(OVER_LIMIT_VAR).ok().as_deref(),
            ) == OverLimit::Part =>
        {
            register_part(ctx, config, limit, limit.saturating_sub(others))
        }
        Route::Window { window } => {
            let registrar = CudaRegistrar {
                ctx: Arc::clone(ctx),
                dataset: config.dataset.clone(),
                limit,
                copy: Arc::clone(copy),
            };
            match Locker::start(registrar, window) {
                Ok(locker) => {
                    log_window(total, window, others);
                    Some(DirectMaps::Windowed(locker))
                }
                Err(e) => {
                    tracing::info!(
                        "raw records: staged through pinned memory (no locking thread: {e})"
                    );
                    None
                }
            }
        }
    }
}

/// Page-locks the whole dataset at build, or says why not (its records are then staged).
fn register_whole(ctx: &Arc<CudaContext>, config: &LoaderConfig, limit: u64) -> Option<DirectMaps> {
    let started = std::time::Instant::now();
    match RegisteredMaps::register(ctx, &config.dataset, limit) {
        Ok(maps) => {
            tracing::info!(
                mib = maps.bytes() >> 20,
                ms = started.elapsed().as_millis() as u64,
                "raw records: dataset map page-locked, records go to the device from it"
            );
            Some(DirectMaps::Whole(maps))
        }
        Err(reason) => {
            tracing::info!("raw records: staged through pinned memory ({reason})");
            None
        }
    }
}

/// Page-locks as many shards of the dataset as fit in `left` bytes (of the process's
/// `limit`) at build, for good (`lock_part`); the others' records are staged. `None`
/// (all staged) when no shard fits or the driver refuses.
fn register_part(
    ctx: &Arc<CudaContext>,
    config: &LoaderConfig,
    limit: u64,
    left: u64,
) -> Option<DirectMaps> {
    let started = std::time::Instant::now();
    let entries = &config.dataset.manifest().shards;
    let bytes: Vec<u64> = entries.iter().map(|s| s.bytes).collect();
    let shards = lock_part::part_shards(&bytes, &registered::locked_shards(&config.dataset), left);
    if shards.is_empty() {
        tracing::info!(
            "raw records: staged through pinned memory (no shard fits in the {left} bytes left of the page-lock limit)"
        );
        return None;
    }
    match RegisteredMaps::register_shards(ctx, &config.dataset, &shards, limit) {
        Ok(maps) => {
            tracing::info!(
                shards = shards.len(),
                of = entries.len(),
                mib = maps.bytes() >> 20,
                dataset_mib = registered::total_bytes(&config.dataset) >> 20,
                ms = started.elapsed().as_millis() as u64,
                "raw records: the dataset is over the page-lock limit and shuffled whole; a part of its shards is page-locked for good, the others' records are staged"
            );
            Some(DirectMaps::Part {
                maps,
                shards: shards.len(),
                of: entries.len(),
            })
        }
        Err(reason) => {
            tracing::info!("raw records: staged through pinned memory ({reason})");
            None
        }
    }
}

/// Says that the dataset (`total` bytes) moves windows of `window` bytes, and
/// why: over the page-lock limit, or over what the process's other loaders,
/// holding `others` bytes, leave of it.
fn log_window(total: u64, window: u64, others: u64) {
    if others == 0 {
        tracing::info!(
            dataset_mib = total >> 20,
            window_mib = window >> 20,
            "raw records: the dataset is over the page-lock limit; each epoch moves a page-locked window over it"
        );
    } else {
        tracing::info!(
            dataset_mib = total >> 20,
            window_mib = window >> 20,
            others_mib = others >> 20,
            "raw records: the dataset is over what this process's other loaders leave of the page-lock limit; each epoch moves a page-locked window over it"
        );
    }
}

/// Whether records from the registered map go in one batched copy per batch:
/// where the driver has it, unless `STOKER_H2D_PER_RECORD=1` (a diagnostic,
/// read here at build) asks for one copy per record.
pub(super) fn batched_copies(direct: &Option<DirectMaps>) -> bool {
    let per_record = std::env::var_os("STOKER_H2D_PER_RECORD").is_some_and(|v| v == "1");
    direct.is_some() && !per_record && batch_copy::supported()
}

/// What the backend is, for [`crate::Stats`]: device, decode route and copies.
pub(super) fn describe(
    ordinal: usize,
    nvjpeg: &Option<Mutex<GpuDecoder>>,
    direct: &Option<DirectMaps>,
    batched: bool,
    workers: usize,
) -> String {
    match nvjpeg {
        Some(dec) => {
            let dec = dec.lock().unwrap_or_else(|p| p.into_inner());
            // Which allocators nvJPEG's memory comes from changes what its calls wait for.
            let memory = if dec.nvjpeg_memory_stats().is_some() {
                "; nvJPEG memory from stoker's caches"
            } else {
                ""
            };
            match dec.hardware_engines() {
                Some((engines, cores)) => format!(
                    "cuda:{ordinal}, nvJPEG hardware engines ({engines} × {cores} cores) + CUDA decoder + CPU fallback{memory}"
                ),
                None if dec.has_hardware() => format!(
                    "cuda:{ordinal}, nvJPEG hardware engines + CUDA decoder + CPU fallback{memory}"
                ),
                None => format!("cuda:{ordinal}, nvJPEG CUDA decoder + CPU fallback (no hardware engines){memory}"),
            }
        }
        None => match direct {
            Some(DirectMaps::Whole(maps)) => format!(
                "cuda:{ordinal}, raw records: zero-copy H2D from the page-locked dataset map ({} MiB, {}), {workers} reader threads",
                maps.bytes() >> 20,
                if batched { "one batched copy per batch" } else { "one copy per record" }
            ),
            Some(DirectMaps::Part { maps, shards, of }) => format!(
                "cuda:{ordinal}, raw records: zero-copy H2D from the page-locked map of {shards} of {of} shards ({} MiB, {}), the others' records through pinned staging, {workers} reader threads",
                maps.bytes() >> 20,
                if batched { "one batched copy per batch" } else { "one copy per record" }
            ),
            Some(DirectMaps::Windowed(locker)) => format!(
                "cuda:{ordinal}, raw records: zero-copy H2D from a moving page-locked window of the dataset map ({} MiB × {}, {}), {workers} reader threads",
                locker.window_bytes() >> 20,
                window_locker::LIVE,
                if batched { "one batched copy per batch" } else { "one copy per record" }
            ),
            None => format!("cuda:{ordinal}, raw records: pinned staging + H2D, {workers} reader threads"),
        },
    }
}

/// Sets the backend's fixed counters: memory, queue depth and threads per stage.
pub(super) fn report(
    metrics: &Metrics,
    sizes: &SlotSizes,
    slots: usize,
    prefetch: usize,
    want_device: usize,
    host_threads: u64,
) {
    metrics
        .set_pinned_bytes(sizes.pinned_bytes_of(slots, sizes.with_pixels_at_build(slots)) as u64);
    metrics.set_device_bytes(want_device as u64);
    metrics.set_queue_capacity(prefetch as u64);
    metrics.set_threads(Stage::Read, host_threads);
    metrics.set_threads(Stage::Decode, host_threads);
    metrics.set_threads(Stage::H2d, 1);
    metrics.set_threads(Stage::Transform, 1);
    metrics.set_threads(Stage::Handoff, 1);
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
        // An output above the budget: a place per image holds one, aligned.
        assert_eq!(
            staging_stride(&ds, 555),
            (555 * 555 * 3usize).next_multiple_of(256)
        );
    }

    #[test]
    fn slot_sizes_count_every_buffer() {
        let params = 256 * std::mem::size_of::<crate::gpu::kernel::ImageParams>();
        let out = 256 * 3 * 224 * 224 * 2;
        let raw = SlotSizes {
            batch: 256,
            stride: 500 * 375 * 3,
            pinned_stride: 500 * 375 * 3,
            out_bytes: out,
            lazy_pixels: false,
        };
        assert_eq!(raw.pinned_bytes(), 256 * 500 * 375 * 3 + params);
        assert_eq!(raw.device_bytes(), raw.pinned_bytes() + out);
        // Pixel staging counted only for the slots that hold theirs.
        assert_eq!(raw.pinned_bytes_of(4, 4), 4 * raw.pinned_bytes());
        assert_eq!(raw.pinned_bytes_of(4, 0), 4 * params);
        assert_eq!(raw.pinned_bytes_of(4, 1), 4 * params + 256 * 500 * 375 * 3);
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
    fn prefetch_usize_max_is_a_ring_the_pinned_share_fits_not_an_overflow() {
        // `prefetch + 2` overflowed: a panic in a debug build, in release a ring of one
        // slot (below the three one batch in flight needs).
        assert_eq!(ring_slots(usize::MAX, 100, 1_000), Some(10));
        assert_eq!(ring_slots(usize::MAX, 100, 299), None);
    }

    #[test]
    fn the_builders_wait_mode_reaches_the_decoder_and_the_slots() {
        let dir = tempfile::tempdir().unwrap();
        let ds = dataset(dir.path(), Encoding::Jpeg, 500, 375);
        let config = |b: crate::LoaderBuilder| b.into_config();
        // An explicit mode is kept by both, whatever the CPU share.
        let block = config(crate::Loader::builder(ds.clone()).gpu_waits(WaitMode::Block));
        assert_eq!(decoder_options(&block).waits, WaitMode::Block);
        assert_eq!(wait_mode(&block), WaitMode::Block);
        let spin = config(
            crate::Loader::builder(ds.clone())
                .gpu_cpu_share(0.2)
                .gpu_waits(WaitMode::Spin),
        );
        assert_eq!(wait_mode(&spin), WaitMode::Spin);
        // The builder's mode overrides the decoder options' own.
        let over = config(
            crate::Loader::builder(ds.clone())
                .gpu_decoder(GpuDecoderOptions {
                    waits: WaitMode::Block,
                    ..decoder_defaults()
                })
                .gpu_waits(WaitMode::Spin),
        );
        assert_eq!(decoder_options(&over).waits, WaitMode::Spin);
        // Auto spins, with a CPU share too (unless the environment decides it).
        if std::env::var_os("STOKER_GPU_WAITS").is_none() {
            let plain = config(crate::Loader::builder(ds.clone()));
            assert_eq!(wait_mode(&plain), WaitMode::Spin);
            let shared = config(crate::Loader::builder(ds).gpu_cpu_share(0.2));
            assert_eq!(wait_mode(&shared), WaitMode::Spin);
        }
    }

    #[test]
    fn cpu_share_threads_follow_the_node_share() {
        // Alone on 16 cores with 4 lanes: the decoder's own rule.
        assert_eq!(cpu_share_threads(16, 4), 10);
        // One of 8 processes on 16 cores (2 each): one thread, never 0.
        assert_eq!(cpu_share_threads(2, 4), 1);
        // A process alone on a node of 2048 cores: within what the decoder takes (it
        // refused the 2042 this gave, and the loader failed to build).
        assert_eq!(cpu_share_threads(2048, 4), stoker_decode::MAX_SHARE_THREADS);
        assert_eq!(cpu_share_threads(usize::MAX, usize::MAX), 1);
    }
}
