//! GPU backend: nvJPEG hardware engines (batched) for single-scan baseline
//! files, the nvJPEG CUDA decoder (hybrid backend, decoupled API) for the rest
//! of what nvJPEG takes, and the CPU backend for whatever nvJPEG rejects — per
//! image, never failing the whole batch.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DevicePtrMut, PinnedHostSlice};
use rayon::prelude::*;

use crate::nvjpeg::{result, sys, NvJpeg, Owned};
use crate::{
    probe, CpuDecoder, DecodeError, DecodeTimings, ImageInfo, Limits, Region, Route, RouteCounters,
    RouteCounts,
};

/// A CPU decode: info, route and the RGB pixels.
type CpuDecoded = Result<(ImageInfo, Route, Vec<u8>), DecodeError>;

/// How a caller of [`GpuDecoder::decode_batch_for`] will use a batch's outputs,
/// so the decoder can skip work the caller does not need.
///
/// # Examples
/// ```
/// use stoker_decode::{BatchUse, Region};
/// // A loader that waited for its outputs and reads one crop of each image.
/// let crops = [
///     Region { x: 40, y: 12, width: 300, height: 168 },
///     Region { x: 0, y: 50, width: 96, height: 46 },
/// ];
/// let usage = BatchUse { outputs_idle: true, regions: Some(&crops) };
/// assert_eq!(BatchUse::default().regions, None);
/// # let _ = usage;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchUse<'a> {
    /// The caller has already waited on the host for every earlier use of the
    /// outputs: see [`GpuDecoder::decode_batch_idle_outputs`]. Default false.
    pub outputs_idle: bool,
    /// Per input, the region of its output the caller reads (a crop); the
    /// bytes of the output outside it are unspecified afterwards (left as
    /// they were, or, in the region's rows, other bytes). The CPU routes
    /// decode the region with [`CpuDecoder::decode_region_into_routed`] (the
    /// decode skips work outside it and stops below it) and copy only the
    /// rows it spans; the nvJPEG routes decode whole images. `None` (the
    /// default): the whole of every image.
    pub regions: Option<&'a [Region]>,
}

/// Options of a [`GpuDecoder`].
///
/// # Examples
/// ```
/// use stoker_decode::GpuDecoderOptions;
/// let o = GpuDecoderOptions { hardware_lanes: 8, ..GpuDecoderOptions::default() };
/// assert!(o.hardware);
/// assert!(o.hardware_preallocate && !o.hardware_handle_per_lane);
/// ```
#[derive(Debug, Clone)]
pub struct GpuDecoderOptions {
    /// Pixel limit enforced from each header before anything is queued.
    pub limits: Limits,
    /// Use the hardware JPEG engines when `nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE)` succeeds.
    pub hardware: bool,
    /// Hardware decoder states in flight per batch, each parsing on its own
    /// thread and decoding on its own stream (host-side parsing is what keeps
    /// the engines idle with a single state). Default 4.
    pub hardware_lanes: usize,
    /// CUDA-decoder states whose host phase (Huffman decoding on the CPU) runs
    /// in parallel. Default 4.
    pub cuda_states: usize,
    /// Fraction (0.0 to 1.0) of each batch's hardware-decodable images —
    /// those at the end of the batch — decoded on the CPU (rayon) into pinned
    /// staging while the engines decode the rest, then copied to their
    /// outputs asynchronously on the caller's stream. Counted as
    /// [`Route::CpuShare`]. Use it when the engines, not the CPUs, bound
    /// throughput. Default 0.0 (off); values outside 0..=1 are clamped, NaN is 0.
    /// With [`GpuDecoderOptions::cpu_share_auto`], the starting share.
    pub cpu_share: f32,
    /// Threads that decode the CPU share, in a pool of the decoder's own (made
    /// with the decoder when a share is configured). 0 (the default): the machine's cores minus
    /// `hardware_lanes` minus 2 (the calling thread and one more), at least 1,
    /// so that the lanes' host-side parsing, which feeds the engines, keeps
    /// cores of its own instead of being time-sliced with CPU decoding.
    pub cpu_share_threads: usize,
    /// Adjust the CPU share after every batch instead of keeping `cpu_share`
    /// fixed: the share moves toward the fraction at which the CPUs take as
    /// long over it as the calling thread takes over the engines' part
    /// (parsing and submitting, and waiting for engines still busy with
    /// earlier batches). It grows while the CPUs finish first and shrinks
    /// while the engines' part waits for them. Starts from `cpu_share` (0:
    /// 0.1) and stays within 0.02..=0.5 (0.02 keeps it measured).
    /// [`GpuDecoder::cpu_share_now`] says where it stands. Default false.
    pub cpu_share_auto: bool,
    /// Call `nvjpegDecodeBatchedPreAllocate` on each hardware lane's state
    /// when it is created, so the engines' device memory comes from a pool
    /// sized up front instead of being allocated while decoding (NVIDIA's
    /// nvImageCodec always does this and reports a large gain). The hint is
    /// the lane's share of a 256-image batch (rounded up to whole engine
    /// cores), 640×480, 4:2:0, interleaved RGB: nvJPEG treats it as a starting
    /// size and grows the buffers for larger images. Skipped, with one `info`
    /// log, when the library lacks the function or refuses. Default true.
    pub hardware_preallocate: bool,
    /// Give each hardware lane its own `nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE)`
    /// handle (its state is created from it) instead of sharing one: tests
    /// whether one handle serializes the lanes' host-side work. Default false.
    pub hardware_handle_per_lane: bool,
    /// Decoder states per hardware lane, used in turn, one per call (values
    /// below 1 mean 1): with 2, a lane's next batch is parsed and submitted on
    /// one state while the previous batch's work on the other may still be in
    /// flight, in case nvJPEG waits for a state's previous work before reusing
    /// it (nvImageCodec waits on an event before reusing its single state).
    /// Default 1.
    pub hardware_states_per_lane: usize,
    /// Fraction (0.0 to 1.0) of each batch's hardware-decodable images — those
    /// just before the CPU share's, at the end of the batch — decoded by
    /// nvJPEG's GPU-hybrid backend (`NVJPEG_BACKEND_GPU_HYBRID`, batched:
    /// Huffman decoding on the GPU's SMs) on its own thread and stream while
    /// the engines decode the rest ([`Route::NvjpegGpuHuffman`]). For when the
    /// engines are the bound and the SMs have room; nvjpeg.h documents the GPU
    /// Huffman path for batched baseline files in batches of more than 100
    /// images, so a share of 100 images or fewer stays on the engines
    /// (otherwise it would be Huffman-decoded on one CPU thread). Default 0.0 (off);
    /// out-of-range values are clamped, NaN is 0. When the backend cannot be
    /// created the images stay on the engines (logged once).
    pub gpu_huffman_share: f32,
}

/// The batch size (whole decoder, split over the lanes) that
/// [`GpuDecoderOptions::hardware_preallocate`] sizes the engines' memory for
/// (the loader's and the benchmarks' default batch).
const PREALLOCATE_BATCH: usize = 256;
/// Image size (width, height) that preallocation is hinted with: a typical
/// ImageNet-like photo (500×375 in the bench set) fits.
const PREALLOCATE_SIZE: (u32, u32) = (640, 480);
/// The GPU-hybrid backend's batched decode does Huffman on the GPU only for
/// batches larger than this (nvjpeg.h); smaller GPU-Huffman shares stay on the
/// engines.
const GPU_HUFFMAN_MIN_BATCH: usize = 100;
/// Step 1 (probe and route) runs on rayon from this many images up.
const PARALLEL_ROUTE_MIN: usize = 32;
/// Fewest images per parallel step-1 chunk.
const ROUTE_CHUNK_MIN: usize = 16;
/// Most `nvjpegJpegStream_t`s for parallel step-1 checks.
const MAX_CHECK_STREAMS: usize = 16;

impl Default for GpuDecoderOptions {
    fn default() -> Self {
        GpuDecoderOptions {
            limits: Limits::default(),
            hardware: true,
            hardware_lanes: 4,
            cuda_states: 4,
            cpu_share: 0.0,
            cpu_share_threads: 0,
            cpu_share_auto: false,
            hardware_preallocate: true,
            hardware_handle_per_lane: false,
            hardware_states_per_lane: 1,
            gpu_huffman_share: 0.0,
        }
    }
}

/// Returns a CUDA context on device `ordinal`, or [`DecodeError::NoGpu`] saying
/// why not (no driver library, no device, driver error). Never panics.
///
/// # Examples
/// ```no_run
/// let ctx = stoker_decode::cuda_context(0)?;
/// # Ok::<(), stoker_decode::DecodeError>(())
/// ```
///
/// # Errors
/// [`DecodeError::NoGpu`].
pub fn cuda_context(ordinal: usize) -> Result<Arc<CudaContext>, DecodeError> {
    // SAFETY: is_culib_present only tries to open the driver library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(DecodeError::NoGpu {
            reason: "the CUDA driver library (libcuda.so) is not present".into(),
        });
    }
    let count = CudaContext::device_count().map_err(|e| DecodeError::NoGpu {
        reason: format!("cuDeviceGetCount failed: {e}"),
    })?;
    if ordinal >= count.max(0) as usize {
        return Err(DecodeError::NoGpu {
            reason: format!("device {ordinal} requested, {count} present"),
        });
    }
    CudaContext::new(ordinal).map_err(|e| DecodeError::NoGpu {
        reason: format!("creating a context on device {ordinal}: {e}"),
    })
}

/// A batched-API decoder state and the batch size it was initialized for.
struct LaneState {
    state: Owned,
    /// Batch size `state` was initialized for (0: must initialize).
    batch_size: usize,
    /// Recorded on the lane's stream after this state's last
    /// `nvjpegDecodeBatched`: the next initialize or decode on the state
    /// waits for it on the host. nvjpeg.h: "Any currently running batched
    /// decoding should be finished before calling" initialize, and a state
    /// holds one batch's buffers (nvImageCodec syncs the same way).
    done: Option<CudaEvent>,
}

/// Batched decoder states used in turn (one call each), and the stream they
/// decode on.
struct HwLane {
    /// At least one, created from this lane's handle (its own, or the shared
    /// one); used by one thread at a time. More than one
    /// ([`GpuDecoderOptions::hardware_states_per_lane`]) lets a call prepare on
    /// one state while the previous call's work on another is still in flight.
    states: Vec<LaneState>,
    /// The state the next call uses.
    turn: usize,
    /// This lane's own hardware handle with
    /// [`GpuDecoderOptions::hardware_handle_per_lane`], else `None` (the
    /// shared handle). Declared after `states`: destroyed after the states made from it.
    handle: Option<Owned>,
    /// Internal stream; joined into the caller's stream after each batch.
    stream: Arc<CudaStream>,
}

impl HwLane {
    /// The handle this lane's state was created from.
    fn handle_ptr(&self, shared: sys::nvjpegHandle_t) -> sys::nvjpegHandle_t {
        self.handle.as_ref().map_or(shared, Owned::ptr)
    }

    /// One `nvjpegDecodeBatched` call on this lane's state and stream (after
    /// `nvjpegDecodeBatchedInitialize` when the batch size changed), adding the
    /// host time of both to `times`.
    ///
    /// # Safety
    /// `handle` is the live handle this lane's state was created from; `data`,
    /// `lens` and `outs` have one entry per image; each bitstream stays readable
    /// until the lane's stream has passed this call; each output `(pointer,
    /// pitch)` addresses `pitch * height` writable device bytes for its image's
    /// header; no other thread uses this lane meanwhile; a CUDA context is current.
    unsafe fn decode_batched(
        &mut self,
        t: &sys::Table,
        handle: sys::nvjpegHandle_t,
        data: &[*const u8],
        lens: &[usize],
        outs: &[(u64, usize)],
        times: &mut LaneTimes,
    ) -> Result<(), DecodeError> {
        let n = data.len();
        let mut images: Vec<sys::nvjpegImage_t> = outs
            .iter()
            .map(|&(ptr, pitch)| {
                let mut img = sys::nvjpegImage_t::default();
                img.channel[0] = ptr as *mut u8;
                img.pitch[0] = pitch;
                img
            })
            .collect();
        let k = self.turn % self.states.len().max(1);
        self.turn = (k + 1) % self.states.len().max(1);
        let ls = &mut self.states[k];
        if let Some(done) = ls.done.take() {
            let waiting = Instant::now();
            let r = done.synchronize();
            times.state_wait += waiting.elapsed().as_secs_f64();
            r?;
        }
        if ls.batch_size != n {
            ls.batch_size = 0;
            let initializing = Instant::now();
            // SAFETY: the handle and this lane's state are live (caller's contract).
            let r = result::check("nvjpegDecodeBatchedInitialize", unsafe {
                (t.nvjpegDecodeBatchedInitialize)(
                    handle,
                    ls.state.ptr(),
                    n as i32,
                    1,
                    sys::NVJPEG_OUTPUT_RGBI,
                )
            });
            times.init += initializing.elapsed().as_secs_f64();
            r?;
            ls.batch_size = n;
        }
        let decoding = Instant::now();
        // SAFETY: the caller's contract covers the inputs, outputs and the state;
        // `images` has n entries.
        let r = result::check("nvjpegDecodeBatched", unsafe {
            (t.nvjpegDecodeBatched)(
                handle,
                ls.state.ptr(),
                data.as_ptr(),
                lens.as_ptr(),
                images.as_mut_ptr(),
                self.stream.cu_stream().cast(),
            )
        });
        times.decode += decoding.elapsed().as_secs_f64();
        if r.is_err() {
            // nvjpeg.h: after a failed batch, initialize again.
            ls.batch_size = 0;
        }
        // Whatever the call queued, the state is busy until the stream passes here.
        ls.done = record_or_synchronize(&self.stream, "a lane state event")?;
        r
    }
}

/// The hardware-engine path.
struct Hardware {
    lanes: Vec<HwLane>,
    /// Stream objects for step 1's `nvjpegDecodeBatchedSupported` checks, all
    /// created from `handle`, at least one: parallel chunk `p` uses
    /// `check_streams[p]` only (jpeg streams are not thread safe).
    check_streams: Vec<Owned>,
    /// `(engines, cores per engine)` from nvjpegGetHardwareDecoderInfo.
    engines: Option<(u32, u32)>,
    /// Whether `nvjpegDecodeBatchedPreAllocate` succeeded on every lane.
    preallocated: bool,
    /// Declared last: destroyed after the states and streams made from it.
    handle: Owned,
}

/// One hardware lane's host time in a batch.
#[derive(Debug, Clone, Copy, Default)]
struct LaneTimes {
    copy: f64,
    /// Waiting for the state's previous batch to finish.
    state_wait: f64,
    init: f64,
    decode: f64,
}

/// One CUDA-decoder state with its buffers.
struct CudaSlot {
    /// Recorded on the caller's stream after this slot's last host-to-device
    /// transfer, which reads the slot's pinned buffer: the next host phase on
    /// this slot waits for it (and for nothing else).
    free: Option<CudaEvent>,
    /// Recorded after this slot's last `nvjpegDecodeJpegDevice`, which reads
    /// the slot's device buffer: the next transfer into that buffer waits for
    /// it on the device. Needed when consecutive calls come on different
    /// streams (the loader alternates two), which do not order each other.
    device_free: Option<CudaEvent>,
    params: Owned,
    jstream: Owned,
    state: Owned,
    /// Attached to `state`; kept alive (and destroyed after it) by this field.
    #[allow(dead_code)]
    pinned: Owned,
    /// Attached to `state`; kept alive (and destroyed after it) by this field.
    #[allow(dead_code)]
    device: Owned,
}

/// The CUDA (hybrid) path via the decoupled API.
struct CudaPath {
    slots: Vec<CudaSlot>,
    decoder: Owned,
    /// Declared last: destroyed after everything made from it.
    handle: Owned,
}

/// Decodes batches of JPEGs into device memory (RGB interleaved u8, HWC,
/// pitch `width * 3`) on a caller-given CUDA stream.
///
/// Routing per image: [`probe`] first (pixel limit, unsupported features);
/// then the hardware engines for files [`ImageInfo::hardware_decodable`] and
/// `nvjpegDecodeBatchedSupported` accept ([`Route::NvjpegHardware`]); the
/// CUDA decoder for other files [`ImageInfo::nvjpeg_decodable`] accepts
/// ([`Route::NvjpegCuda`]); the CPU backend for the rest and for every image
/// nvJPEG fails on (BAD_JPEG, JPEG_NOT_SUPPORTED, ...), its pixels copied to
/// the device ([`Route::CpuZune`] / [`Route::CpuFallback`]). One result per
/// image; counters per route.
///
/// With [`GpuDecoderOptions::cpu_share`] > 0 the last hardware images of each
/// batch are decoded on the CPUs meanwhile ([`Route::CpuShare`]).
///
/// Input bitstreams for the hardware engines (and the CPU share's pixels) are
/// copied into pinned staging, two buffers used in turn: a batch waits on an
/// event for the batch before last to be done with its buffer, never on the
/// caller's stream. Work is queued on `stream` (and on internal streams the
/// caller's stream waits for); results are on the device when `stream`
/// reaches that point: synchronize or record an event before reading them on
/// the host. One exception to "never waits on the caller's stream": nvJPEG's
/// hardware batched decode writes its outputs when called, not in stream
/// order, so before the engines write, the calling thread waits for the work
/// already queued on `stream` (timed in [`DecodeTimings::stream_wait_s`]);
/// [`GpuDecoder::decode_batch_idle_outputs`] skips that wait for a caller that
/// has waited for the outputs itself.
///
/// # Examples
/// ```no_run
/// use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions};
/// let ctx = cuda_context(0)?;
/// let stream = ctx.default_stream();
/// let mut dec = GpuDecoder::new(&ctx, GpuDecoderOptions::default())?;
/// let jpeg = std::fs::read("a.jpg").unwrap();
/// let info = stoker_decode::probe(&jpeg, &Default::default())?;
/// let mut out = vec![stream.alloc_zeros::<u8>(info.rgb_len())?];
/// let results = dec.decode_batch(&[&jpeg], &mut out, &stream);
/// let (info, route) = results[0].as_ref().unwrap();
/// stream.synchronize()?;
/// println!("{}x{} via {route}", info.width, info.height);
/// # Ok::<(), stoker_decode::DecodeError>(())
/// ```
pub struct GpuDecoder {
    ctx: Arc<CudaContext>,
    lib: &'static NvJpeg,
    /// Shared with the CPU-share thread of a batch.
    cpu: Arc<CpuDecoder>,
    counters: RouteCounters,
    hw: Option<Hardware>,
    cuda: CudaPath,
    /// Pinned staging for hardware-path bitstreams, grown on demand.
    staging: PinnedRing,
    /// Pinned staging for the CPU share's pixels, grown on demand.
    share_staging: PinnedRing,
    /// Pinned staging for the GPU-Huffman share's bitstreams, grown on demand:
    /// nvJPEG may read them after the call returns (asynchronous copies), so
    /// they must not be the caller's (possibly pageable, short-lived) memory.
    huffman_staging: PinnedRing,
    /// Stream of the CPU share's host-to-device copies, so they overlap the
    /// engines' work on the caller's stream; the caller's stream joins it.
    share_stream: Arc<CudaStream>,
    /// Wall-clock time per phase since creation or the last reset.
    timings: DecodeTimings,
    /// The CPU share's threads (`cpu_share_threads`), made with the decoder
    /// when a share is configured; `None`: rayon's global pool.
    share_pool: Option<Arc<rayon::ThreadPool>>,
    /// The CPU share in use: `cpu_share`, or with `cpu_share_auto` the
    /// controller's current fraction.
    share: ShareControl,
    /// The GPU-Huffman lane (its own GPU-hybrid handle, state and stream) when
    /// `gpu_huffman_share > 0` and the backend could be created; taken out for
    /// the length of a batch by the thread that decodes on it.
    huffman: Option<HwLane>,
    options: GpuDecoderOptions,
}

impl Drop for GpuDecoder {
    /// Waits for this decoder's own in-flight work (lane streams, the CPU
    /// share's copies, staging and CUDA-slot events) before its states,
    /// buffers and pinned staging are destroyed: nvJPEG states and buffers
    /// must not be freed under queued work. Errors are logged, never raised.
    fn drop(&mut self) {
        if let Err(e) = self.ctx.bind_to_thread() {
            tracing::warn!("GpuDecoder drop: binding the context failed ({e})");
        }
        let mut streams: Vec<&Arc<CudaStream>> = vec![&self.share_stream];
        if let Some(hw) = &self.hw {
            streams.extend(hw.lanes.iter().map(|l| &l.stream));
        }
        if let Some(lane) = &self.huffman {
            streams.push(&lane.stream);
        }
        for s in streams {
            if let Err(e) = s.synchronize() {
                tracing::warn!("GpuDecoder drop: stream synchronize failed ({e})");
            }
        }
        let events = [&self.staging, &self.share_staging, &self.huffman_staging]
            .into_iter()
            .flat_map(|r| r.free.iter().flatten())
            .chain(
                self.cuda
                    .slots
                    .iter()
                    .flat_map(|s| [s.free.as_ref(), s.device_free.as_ref()])
                    .flatten(),
            );
        for ev in events {
            if let Err(e) = ev.synchronize() {
                tracing::warn!("GpuDecoder drop: event synchronize failed ({e})");
            }
        }
    }
}

impl std::fmt::Debug for GpuDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDecoder")
            .field("library", &self.lib)
            .field("hardware", &self.hw.is_some())
            .field("engines", &self.hardware_engines())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl GpuDecoder {
    /// Loads nvJPEG and creates the decoders on `ctx`'s device.
    ///
    /// The hardware path is optional: when `nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE)`
    /// fails (GPUs without JPEG engines) every nvJPEG-decodable image takes the
    /// CUDA path.
    ///
    /// # Errors
    /// [`DecodeError::Load`] when nvJPEG is missing, [`DecodeError::Nvjpeg`] /
    /// [`DecodeError::Cuda`] when the library or driver refuses.
    pub fn new(
        ctx: &Arc<CudaContext>,
        options: GpuDecoderOptions,
    ) -> Result<GpuDecoder, DecodeError> {
        let lib = NvJpeg::load()?;
        let t = lib.table();
        ctx.bind_to_thread()?;
        let hw = if options.hardware {
            match Self::create_hardware(lib, ctx, &options) {
                Ok(hw) => Some(hw),
                Err(e) => {
                    tracing::info!("nvJPEG hardware backend unavailable: {e}");
                    None
                }
            }
        } else {
            None
        };
        // SAFETY: a context is current (bound above); every object is owned by
        // an `Owned` that destroys it with the matching call.
        let cuda = unsafe {
            let handle = Owned::new(
                result::create_ex(t, sys::NVJPEG_BACKEND_DEFAULT)?,
                t.nvjpegDestroy,
                "handle",
            );
            let decoder = Owned::new(
                result::decoder_create(t, handle.ptr(), sys::NVJPEG_BACKEND_HYBRID)?,
                t.nvjpegDecoderDestroy,
                "decoder",
            );
            let mut slots = Vec::new();
            for _ in 0..options.cuda_states.max(1) {
                let state = Owned::new(
                    result::decoder_state_create(t, handle.ptr(), decoder.ptr())?,
                    t.nvjpegJpegStateDestroy,
                    "decoder state",
                );
                let pinned = Owned::new(
                    result::buffer_pinned_create(t, handle.ptr())?,
                    t.nvjpegBufferPinnedDestroy,
                    "pinned buffer",
                );
                let device = Owned::new(
                    result::buffer_device_create(t, handle.ptr())?,
                    t.nvjpegBufferDeviceDestroy,
                    "device buffer",
                );
                result::check(
                    "nvjpegStateAttachPinnedBuffer",
                    (t.nvjpegStateAttachPinnedBuffer)(state.ptr(), pinned.ptr()),
                )?;
                result::check(
                    "nvjpegStateAttachDeviceBuffer",
                    (t.nvjpegStateAttachDeviceBuffer)(state.ptr(), device.ptr()),
                )?;
                let jstream = Owned::new(
                    result::jpeg_stream_create(t, handle.ptr())?,
                    t.nvjpegJpegStreamDestroy,
                    "jpeg stream",
                );
                let params = Owned::new(
                    result::decode_params_rgbi(t, handle.ptr())?,
                    t.nvjpegDecodeParamsDestroy,
                    "decode params",
                );
                slots.push(CudaSlot {
                    free: None,
                    device_free: None,
                    params,
                    jstream,
                    state,
                    pinned,
                    device,
                });
            }
            CudaPath {
                slots,
                decoder,
                handle,
            }
        };
        let share = ShareControl::new(&options);
        Ok(GpuDecoder {
            ctx: ctx.clone(),
            lib,
            cpu: Arc::new(CpuDecoder::new(options.limits)),
            counters: RouteCounters::default(),
            hw,
            cuda,
            staging: PinnedRing::default(),
            share_staging: PinnedRing::default(),
            huffman_staging: PinnedRing::default(),
            share_stream: ctx.new_stream()?,
            timings: DecodeTimings::default(),
            share_pool: (share.fraction > 0.0)
                .then(|| share_pool(&options))
                .flatten(),
            share,
            huffman: if share_fraction(options.gpu_huffman_share) > 0.0 {
                Self::create_huffman_lane(lib, ctx)
            } else {
                None
            },
            options,
        })
    }

    /// A batched lane on nvJPEG's GPU-hybrid backend, or `None` (logged) when
    /// the library or device refuses it.
    fn create_huffman_lane(lib: &'static NvJpeg, ctx: &Arc<CudaContext>) -> Option<HwLane> {
        let t = lib.table();
        // SAFETY: a context is current (bound by `new`); the state is created from
        // the handle and declared before it in `HwLane`, so it is destroyed first.
        let lane = unsafe {
            result::create_ex(t, sys::NVJPEG_BACKEND_GPU_HYBRID).and_then(|h| {
                let handle = Owned::new(h, t.nvjpegDestroy, "GPU-hybrid handle");
                let state = Owned::new(
                    result::jpeg_state_create(t, handle.ptr())?,
                    t.nvjpegJpegStateDestroy,
                    "GPU-hybrid state",
                );
                Ok(HwLane {
                    states: vec![LaneState {
                        state,
                        batch_size: 0,
                        done: None,
                    }],
                    turn: 0,
                    handle: Some(handle),
                    stream: ctx.new_stream()?,
                })
            })
        };
        lane.map_err(|e| {
            tracing::info!("nvJPEG GPU-hybrid backend unavailable ({e}); gpu_huffman_share ignored")
        })
        .ok()
    }

    fn create_hardware(
        lib: &'static NvJpeg,
        ctx: &Arc<CudaContext>,
        options: &GpuDecoderOptions,
    ) -> Result<Hardware, DecodeError> {
        let t = lib.table();
        let lanes = options.hardware_lanes.max(1);
        let states_per_lane = options.hardware_states_per_lane.max(1);
        // SAFETY: a context is current (bound by the caller); objects are owned
        // by `Owned` values destroyed with the matching call, each state before
        // the handle it was created from (field order in `HwLane`/`Hardware`).
        unsafe {
            let handle = Owned::new(
                result::create_ex(t, sys::NVJPEG_BACKEND_HARDWARE)?,
                t.nvjpegDestroy,
                "hardware handle",
            );
            let engines = result::hardware_info(t, handle.ptr()).ok();
            // nvJPEG docs: zero engines "indicates that hardware decoder is not
            // available" (e.g. a MIG slice without a JPEG engine).
            if let Some((0, _)) = engines {
                return Err(DecodeError::Nvjpeg {
                    call: "nvjpegGetHardwareDecoderInfo (0 engines)",
                    status: crate::nvjpeg::NvjpegStatus(sys::NVJPEG_STATUS_ARCH_MISMATCH),
                });
            }
            let checks = std::thread::available_parallelism()
                .map_or(1, |c| c.get())
                .clamp(1, MAX_CHECK_STREAMS);
            let mut check_streams = Vec::with_capacity(checks);
            for _ in 0..checks {
                check_streams.push(Owned::new(
                    result::jpeg_stream_create(t, handle.ptr())?,
                    t.nvjpegJpegStreamDestroy,
                    "jpeg stream",
                ));
            }
            // The preallocation hint: this lane's share of a typical batch,
            // rounded up to whole engine cores like the lane chunks.
            let cores = engines.map_or(1, |(_, c)| (c as usize).max(1));
            let hint_batch = PREALLOCATE_BATCH.div_ceil(lanes).div_ceil(cores) * cores;
            let mut preallocate = options.hardware_preallocate;
            let mut out = Vec::with_capacity(lanes);
            for k in 0..lanes {
                // A lane whose own handle cannot be had uses the shared one
                // (rather than losing the hardware path altogether).
                let own = if options.hardware_handle_per_lane {
                    match result::create_ex(t, sys::NVJPEG_BACKEND_HARDWARE) {
                        Ok(h) => Some(Owned::new(h, t.nvjpegDestroy, "lane hardware handle")),
                        Err(e) => {
                            tracing::info!(
                                "hardware lane {k}: no handle of its own ({e}); sharing one"
                            );
                            None
                        }
                    }
                } else {
                    None
                };
                let h = own.as_ref().map_or(handle.ptr(), Owned::ptr);
                let mut states = Vec::with_capacity(states_per_lane);
                for _ in 0..states_per_lane {
                    let state = Owned::new(
                        result::jpeg_state_create(t, h)?,
                        t.nvjpegJpegStateDestroy,
                        "hardware state",
                    );
                    if preallocate {
                        let hint = result::BatchHint {
                            batch: hint_batch,
                            width: PREALLOCATE_SIZE.0,
                            height: PREALLOCATE_SIZE.1,
                            // nvJPEG docs: with mixed subsamplings, 4:4:4 sizes
                            // the buffers so that every image can reuse them.
                            subsampling: sys::NVJPEG_CSS_444,
                            format: sys::NVJPEG_OUTPUT_RGBI,
                        };
                        match result::batched_pre_allocate(lib.optional(), h, state.ptr(), hint) {
                            Ok(true) => {}
                            Ok(false) => {
                                tracing::info!(
                                    "nvjpegDecodeBatchedPreAllocate is missing from {}; \
                                     hardware lanes allocate while decoding",
                                    lib.path().display()
                                );
                                preallocate = false;
                            }
                            Err(e) => {
                                tracing::info!(
                                    "{e} on hardware lane {k}; the lanes allocate while decoding"
                                );
                                preallocate = false;
                            }
                        }
                    }
                    states.push(LaneState {
                        state,
                        batch_size: 0,
                        done: None,
                    });
                }
                out.push(HwLane {
                    states,
                    turn: 0,
                    handle: own,
                    stream: ctx.new_stream()?,
                });
            }
            Ok(Hardware {
                lanes: out,
                check_streams,
                engines,
                preallocated: options.hardware_preallocate && preallocate,
                handle,
            })
        }
    }

    /// True when the hardware JPEG engines are in use.
    pub fn has_hardware(&self) -> bool {
        self.hw.is_some()
    }

    /// `(engines, cores per engine)` of the hardware decoder, when known.
    pub fn hardware_engines(&self) -> Option<(u32, u32)> {
        self.hw.as_ref().and_then(|h| h.engines)
    }

    /// Whether `nvjpegDecodeBatchedPreAllocate` sized every hardware lane's
    /// memory up front (see [`GpuDecoderOptions::hardware_preallocate`]).
    ///
    /// # Examples
    /// ```no_run
    /// # use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions};
    /// let dec = GpuDecoder::new(&cuda_context(0)?, GpuDecoderOptions::default())?;
    /// println!("preallocated: {}, lanes with their own handle: {}",
    ///     dec.hardware_preallocated(), dec.hardware_lane_handles());
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn hardware_preallocated(&self) -> bool {
        self.hw.as_ref().is_some_and(|h| h.preallocated)
    }

    /// Whether the GPU-Huffman lane exists ([`GpuDecoderOptions::gpu_huffman_share`]
    /// above 0 and nvJPEG's GPU-hybrid backend created).
    ///
    /// # Examples
    /// ```no_run
    /// # use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions};
    /// let options = GpuDecoderOptions { gpu_huffman_share: 0.4, ..Default::default() };
    /// let dec = GpuDecoder::new(&cuda_context(0)?, options)?;
    /// if !dec.has_gpu_huffman() {
    ///     println!("no GPU-hybrid backend: the share stays on the engines");
    /// }
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn has_gpu_huffman(&self) -> bool {
        self.huffman.is_some()
    }

    /// How many hardware lanes decode with a handle of their own (see
    /// [`GpuDecoderOptions::hardware_handle_per_lane`]; a lane whose handle
    /// could not be created shares the decoder's).
    pub fn hardware_lane_handles(&self) -> usize {
        self.hw
            .as_ref()
            .map_or(0, |h| h.lanes.iter().filter(|l| l.handle.is_some()).count())
    }

    /// The nvJPEG library in use.
    pub fn library(&self) -> &'static NvJpeg {
        self.lib
    }

    /// The fraction of each batch's hardware images decoded on the CPUs now:
    /// [`GpuDecoderOptions::cpu_share`], or where
    /// [`GpuDecoderOptions::cpu_share_auto`] has taken it.
    ///
    /// # Examples
    /// ```no_run
    /// # use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions};
    /// # let ctx = cuda_context(0)?;
    /// let options = GpuDecoderOptions { cpu_share_auto: true, ..Default::default() };
    /// let mut dec = GpuDecoder::new(&ctx, options)?;
    /// // ... decode_batch calls ...
    /// println!("CPU share now {:.0} %", 100.0 * dec.cpu_share_now());
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn cpu_share_now(&self) -> f64 {
        self.share.fraction
    }

    /// Wall-clock seconds per phase of [`decode_batch`](Self::decode_batch),
    /// summed over the calls since creation or the last
    /// [`reset_timings`](Self::reset_timings).
    ///
    /// # Examples
    /// ```no_run
    /// # use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions};
    /// # let ctx = cuda_context(0)?;
    /// let mut dec = GpuDecoder::new(&ctx, GpuDecoderOptions::default())?;
    /// // ... decode_batch calls ...
    /// println!("{}", dec.timings());
    /// dec.reset_timings();
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn timings(&self) -> DecodeTimings {
        self.timings
    }

    /// Clears [`timings`](Self::timings) (after a warm-up, say).
    pub fn reset_timings(&mut self) {
        self.timings = DecodeTimings::default();
    }

    /// Images decoded per route (and failures) since creation.
    pub fn route_counts(&self) -> RouteCounts {
        self.counters.snapshot()
    }

    /// Decodes one image through the GPU routes and copies the pixels back to
    /// the host (synchronizing). For tools and tests, not the fast path.
    ///
    /// # Errors
    /// As [`decode_batch`](Self::decode_batch), plus [`DecodeError::Cuda`] for
    /// the allocation and the copy.
    pub fn decode_to_host(
        &mut self,
        data: &[u8],
    ) -> Result<(ImageInfo, Route, Vec<u8>), DecodeError> {
        let info = probe(data, &self.options.limits)?;
        let stream = self.ctx.default_stream();
        let mut out = [stream.alloc_zeros::<u8>(info.rgb_len().max(1))?];
        let (info, route) = self
            .decode_batch(&[data], &mut out, &stream)
            .pop()
            .unwrap_or(Err(DecodeError::BatchShape {
                inputs: 1,
                outputs: 0,
            }))?;
        let mut pixels = stream.clone_dtoh(&out[0])?;
        stream.synchronize()?;
        pixels.truncate(info.rgb_len());
        Ok((info, route, pixels))
    }

    /// Decodes `inputs[i]` into `outputs[i]` (RGB HWC u8, `rgb_len()` bytes
    /// from offset 0), queued on `stream`. One result per input, with the route
    /// that decoded it. A failing image leaves its output untouched and fails alone.
    ///
    /// # Errors (per image)
    /// Every [`probe`] error; [`DecodeError::Unsupported`];
    /// [`DecodeError::OutputTooSmall`]; the CPU backend's error when nvJPEG
    /// and the CPU both fail; [`DecodeError::BatchShape`] (every image) when
    /// the slice lengths differ; [`DecodeError::Cuda`] for driver failures.
    pub fn decode_batch<O: DevicePtrMut<u8>>(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [O],
        stream: &CudaStream,
    ) -> Vec<Result<(ImageInfo, Route), DecodeError>> {
        self.decode_batch_for(inputs, outputs, stream, BatchUse::default())
    }

    /// [`GpuDecoder::decode_batch`] for outputs the GPU is done with: the caller
    /// has already waited on the host for every earlier use of `outputs` (for
    /// instance with `CudaEvent::synchronize` on an event recorded after their
    /// last reader), and any stream-ordered allocation of them. The decoder then
    /// skips its host wait for the work queued on `stream` before the hardware
    /// engines write (see [`GpuDecoder`]), so that work (an earlier batch's
    /// transform, say) keeps running on the GPU while this batch is parsed and
    /// submitted. Results and errors are those of `decode_batch`.
    ///
    /// If the promise does not hold, the engines may write while earlier work
    /// still reads or writes the outputs: wrong pixels, not host memory
    /// unsafety.
    ///
    /// Other host waits remain: the CUDA-path images wait for their slot's
    /// previous use (with more such images than `cuda_states`, that use was
    /// on this stream), and allocating or growing pinned staging (the first
    /// calls, or a batch larger than any before) may wait for the device.
    ///
    /// # Examples
    /// ```no_run
    /// use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions};
    /// let ctx = cuda_context(0)?;
    /// let stream = ctx.new_stream()?;
    /// let mut dec = GpuDecoder::new(&ctx, GpuDecoderOptions::default())?;
    /// let jpeg = std::fs::read("a.jpg").unwrap();
    /// let info = stoker_decode::probe(&jpeg, &Default::default())?;
    /// let mut out = vec![stream.alloc_zeros::<u8>(info.rgb_len())?];
    /// // The allocation (and anything else that used `out`) is done.
    /// stream.synchronize()?;
    /// let results = dec.decode_batch_idle_outputs(&[&jpeg], &mut out, &stream);
    /// stream.synchronize()?;
    /// assert!(results[0].is_ok());
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn decode_batch_idle_outputs<O: DevicePtrMut<u8>>(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [O],
        stream: &CudaStream,
    ) -> Vec<Result<(ImageInfo, Route), DecodeError>> {
        let usage = BatchUse {
            outputs_idle: true,
            ..BatchUse::default()
        };
        self.decode_batch_for(inputs, outputs, stream, usage)
    }

    /// [`GpuDecoder::decode_batch`], told how the caller will use the outputs
    /// (see [`BatchUse`]) so that the decoder can skip work: the host wait of
    /// [`decode_batch_idle_outputs`](Self::decode_batch_idle_outputs), and on
    /// the CPU routes (the CPU share, files nvJPEG cannot take) the pixels
    /// outside each image's region, which are neither decoded in full nor
    /// copied. Results and errors are those of `decode_batch`, plus
    /// [`DecodeError::RegionsShape`] (every image) when `usage.regions` has a
    /// different length than `inputs`.
    ///
    /// # Examples
    /// ```no_run
    /// use stoker_decode::{cuda_context, BatchUse, GpuDecoder, GpuDecoderOptions, Region};
    /// let ctx = cuda_context(0)?;
    /// let stream = ctx.new_stream()?;
    /// let mut dec = GpuDecoder::new(&ctx, GpuDecoderOptions::default())?;
    /// let jpeg = std::fs::read("a.jpg").unwrap();
    /// let info = stoker_decode::probe(&jpeg, &Default::default())?;
    /// let mut out = vec![stream.alloc_zeros::<u8>(info.rgb_len())?];
    /// // Only a 100×80 crop at (20, 10) is read afterwards.
    /// let crop = Region { x: 20, y: 10, width: 100, height: 80 };
    /// let usage = BatchUse { regions: Some(&[crop]), ..BatchUse::default() };
    /// let results = dec.decode_batch_for(&[&jpeg], &mut out, &stream, usage);
    /// stream.synchronize()?;
    /// assert!(results[0].is_ok());
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn decode_batch_for<O: DevicePtrMut<u8>>(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [O],
        stream: &CudaStream,
        usage: BatchUse<'_>,
    ) -> Vec<Result<(ImageInfo, Route), DecodeError>> {
        let n = inputs.len();
        let call_started = Instant::now();
        if outputs.len() != n {
            return (0..n)
                .map(|_| {
                    Err(DecodeError::BatchShape {
                        inputs: n,
                        outputs: outputs.len(),
                    })
                })
                .collect();
        }
        if let Some(regions) = usage.regions.filter(|r| r.len() != n) {
            return (0..n)
                .map(|_| {
                    Err(DecodeError::RegionsShape {
                        inputs: n,
                        regions: regions.len(),
                    })
                })
                .collect();
        }
        let host_wait = !usage.outputs_idle;
        let region_of = |i: usize| usage.regions.map(|r| r[i]);
        // The bytes of output `i` that are copied: the rows of its region.
        let needed = |i: usize, info: &ImageInfo| match region_of(i) {
            Some(r) => {
                let row = info.width as usize * 3;
                let bottom = r.bottom().min(info.height) as usize;
                r.y.min(info.height) as usize * row..bottom * row
            }
            None => 0..info.rgb_len(),
        };
        if let Err(e) = self.ctx.bind_to_thread() {
            return (0..n).map(|_| Err(DecodeError::Cuda(e))).collect();
        }
        let mut results: Vec<Option<Result<(ImageInfo, Route), DecodeError>>> =
            (0..n).map(|_| None).collect();
        let mut infos: Vec<Option<ImageInfo>> = (0..n).map(|_| None).collect();
        let (mut hw_list, mut cuda_list, mut cpu_list) = (Vec::new(), Vec::new(), Vec::new());

        // 1. Probe and route (in parallel chunks for large batches; the
        //    per-image results and the lists' order do not depend on it).
        let started = Instant::now();
        let out_lens: Vec<usize> = outputs.iter().map(|o| o.len()).collect();
        for (i, routed) in self.route_all(inputs, &out_lens).into_iter().enumerate() {
            match routed {
                Ok((info, route)) => {
                    match route {
                        Route::NvjpegHardware => hw_list.push(i),
                        Route::NvjpegCuda => cuda_list.push(i),
                        _ => cpu_list.push(i),
                    }
                    infos[i] = Some(info);
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        self.timings.probe_s += started.elapsed().as_secs_f64();

        // 1b. The CPU share: the last hardware-decodable images of the batch,
        //     decoded on the CPUs while the engines decode the rest.
        let hw_count = hw_list.len() as f64;
        let take = ((hw_count * self.share.fraction).round() as usize).min(hw_list.len());
        let share_list = hw_list.split_off(hw_list.len() - take);
        // 1c. The GPU-Huffman share: the hardware-decodable images just before the
        //     CPU share's, decoded by the GPU-hybrid backend beside the engines.
        let mut gpu_list = if self.huffman.is_some() {
            let take = ((hw_count * share_fraction(self.options.gpu_huffman_share)).round()
                as usize)
                .min(hw_list.len());
            if take > GPU_HUFFMAN_MIN_BATCH {
                hw_list.split_off(hw_list.len() - take)
            } else {
                if take > 0 {
                    tracing::debug!(
                        "GPU-Huffman share of {take} images is not above \
                         {GPU_HUFFMAN_MIN_BATCH}: left on the engines"
                    );
                }
                Vec::new()
            }
        } else {
            Vec::new()
        };
        // 2. Device pointers of every output (the stream waits for earlier work
        //    on them; the guards record our writes when dropped at the end).
        let mut ptrs = Vec::with_capacity(n);
        for o in outputs.iter_mut() {
            ptrs.push(o.device_ptr_mut(stream));
        }
        // 2a. nvJPEG's hardware batched decode writes its outputs when it is
        //     called, not when the stream gets there: a stream wait does not
        //     order it, a host wait does (torchcodec #1634, nvJPEG 12.3-13.2).
        //     So before the engines (or the GPU-Huffman lane) write, wait on the
        //     host for what is queued on the caller's stream so far, which
        //     includes every earlier use of the outputs (waited for just above).
        //     If that cannot be done, those images take the CUDA path, which
        //     keeps stream order. Skipped when the caller has waited for the
        //     outputs itself (`decode_batch_idle_outputs`).
        if host_wait && (!hw_list.is_empty() || !gpu_list.is_empty()) {
            let waiting = Instant::now();
            let waited = stream
                .record_event(None)
                .and_then(|ev| ev.synchronize())
                .or_else(|_| stream.synchronize());
            self.timings.stream_wait_s += waiting.elapsed().as_secs_f64();
            if let Err(e) = waited {
                tracing::warn!(
                    "cannot wait for the caller's stream ({e}); this batch's hardware \
                     images take the CUDA path"
                );
                cuda_list.append(&mut hw_list);
                cuda_list.append(&mut gpu_list);
            }
        }

        // The share's pixels go through pinned staging and are copied on the
        // share stream, which waits for earlier work on the outputs (queued on
        // `stream` so far) but not for this batch's nvJPEG work.
        let mut share_buf = None;
        if !share_list.is_empty() {
            let total: usize = share_list
                .iter()
                .map(|&i| infos[i].as_ref().map_or(0, ImageInfo::rgb_len))
                .sum();
            match self
                .share_stream
                .join(stream)
                .map_err(DecodeError::from)
                .and_then(|()| self.share_staging.take(&self.ctx, total))
            {
                Ok(b) => share_buf = Some(b),
                Err(e) => {
                    tracing::warn!("CPU share staging unavailable ({e}); pageable copies");
                    cpu_list.extend_from_slice(&share_list);
                }
            }
        }
        let cpu = Arc::clone(&self.cpu);
        let share_pool = self.share_pool.clone();
        // The GPU-Huffman lane leaves `self` for the batch (its thread owns it), and
        // waits on its stream for earlier work on the outputs.
        let gpu_bytes: usize = gpu_list.iter().map(|&i| inputs[i].len()).sum();
        let mut huffman_lane = match self.huffman.take() {
            Some(lane) if !gpu_list.is_empty() => match lane
                .stream
                .join(stream)
                .map_err(DecodeError::from)
                .and_then(|()| self.huffman_staging.take(&self.ctx, gpu_bytes))
            {
                Ok(staged) => Some((lane, staged)),
                Err(e) => {
                    tracing::warn!(
                        "GPU-Huffman lane unusable for this batch ({e}); engines instead"
                    );
                    self.huffman = Some(lane);
                    hw_list.extend_from_slice(&gpu_list);
                    None
                }
            },
            other => {
                self.huffman = other;
                None
            }
        };
        let huffman_outs: Vec<(u64, usize)> = gpu_list
            .iter()
            .map(|&i| {
                (
                    ptrs[i].0,
                    infos[i].as_ref().map_or(0, |f| f.width as usize * 3),
                )
            })
            .collect();
        let huffman_ctx = Arc::clone(&self.ctx);
        let lib = self.lib;
        // Images and seconds of the engines' part on this thread (for `cpu_share_auto`).
        let mut engines_part = (0usize, 0.0f64);
        let (share_done, huffman_done) = std::thread::scope(|s| {
            let huffman_job = huffman_lane.take().map(|(mut lane, (k, mut staging))| {
                let (gpu_list, outs, ctx) = (&gpu_list, &huffman_outs, &huffman_ctx);
                s.spawn(move || {
                    // Declared after `lane` and `staging` (captured), so dropped
                    // before them: if this thread panics, the lane's queued work,
                    // which reads the staging and the lane's state, ends first.
                    let _sync = SyncOnPanic(Arc::clone(&lane.stream));
                    let mut times = LaneTimes::default();
                    let r = ctx
                        .bind_to_thread()
                        .map_err(DecodeError::from)
                        .and_then(|()| staging.as_mut_ptr().map_err(DecodeError::from))
                        .and_then(|base| {
                            let copying = Instant::now();
                            // SAFETY: the buffer holds at least the share's total
                            // bytes (taken with that size); no queued device work
                            // reads it (its event was waited for in `take`); this
                            // thread alone writes it.
                            let (data, lens) =
                                unsafe { stage_bitstreams(base, 0, inputs, gpu_list) };
                            times.copy = copying.elapsed().as_secs_f64();
                            let handle = lane.handle_ptr(std::ptr::null_mut());
                            // SAFETY: the lane owns its handle (made with its state); one
                            // entry per image in `data`/`lens`/`outs`; the bitstreams
                            // live in pinned staging until the caller's stream, which
                            // joins this lane, passes the staging event; each output
                            // holds width*3*height bytes (checked in step 1); this
                            // thread alone has the lane.
                            unsafe {
                                lane.decode_batched(
                                    lib.table(),
                                    handle,
                                    &data,
                                    &lens,
                                    outs,
                                    &mut times,
                                )
                            }
                        });
                    (lane, (k, staging), times, r)
                })
            });
            let share_job = share_buf.map(|(k, mut buf)| {
                let (cpu, share_list, infos) = (&cpu, &share_list, &infos);
                let share_pool = share_pool.as_deref();
                s.spawn(move || {
                    let started = Instant::now();
                    let decode_all = |slice: &mut [u8]| {
                        let mut parts = Vec::with_capacity(share_list.len());
                        let (mut rest, mut off) = (slice, 0usize);
                        for &i in share_list {
                            let len = infos[i].as_ref().map_or(0, ImageInfo::rgb_len);
                            let (part, tail) = rest.split_at_mut(len);
                            parts.push((i, off, part));
                            rest = tail;
                            off += len;
                        }
                        parts
                            .into_par_iter()
                            .map(|(i, off, out)| {
                                let r = cpu.decode_region_routed(inputs[i], out, region_of(i));
                                let span = r.as_ref().map_or(0..0, |(info, _)| needed(i, info));
                                (i, off, span, r)
                            })
                            .collect::<Vec<_>>()
                    };
                    let decoded = buf.as_mut_slice().map(|slice| match share_pool {
                        Some(pool) => pool.install(|| decode_all(slice)),
                        None => decode_all(slice),
                    });
                    (k, buf, decoded, started.elapsed().as_secs_f64())
                })
            });
            // 3. Hardware engines.
            if !hw_list.is_empty() {
                let engines_started = Instant::now();
                let decoded = self.decode_hardware(inputs, &infos, &ptrs, &hw_list, stream);
                engines_part = (hw_list.len(), engines_started.elapsed().as_secs_f64());
                match decoded {
                    Ok(failed) => {
                        for &i in &hw_list {
                            if !failed.contains(&i) {
                                results[i] = Some(Ok((
                                    infos[i].clone().expect("probed"),
                                    Route::NvjpegHardware,
                                )));
                            }
                        }
                        for i in failed {
                            if infos[i].as_ref().is_some_and(ImageInfo::nvjpeg_decodable) {
                                cuda_list.push(i);
                            } else {
                                cpu_list.push(i);
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(
                            "hardware batch failed, retrying its images on the CUDA path: {e}"
                        );
                        cuda_list.extend_from_slice(&hw_list);
                    }
                }
            }

            // 4. CUDA decoder.
            if !cuda_list.is_empty() {
                let started = Instant::now();
                let failed = self.decode_cuda(inputs, &infos, &ptrs, &cuda_list, stream);
                self.timings.cuda_s += started.elapsed().as_secs_f64();
                for &i in &cuda_list {
                    if !failed.contains(&i) {
                        results[i] =
                            Some(Ok((infos[i].clone().expect("probed"), Route::NvjpegCuda)));
                    }
                }
                cpu_list.extend(failed);
            }

            (share_job.map(|j| j.join()), huffman_job.map(|j| j.join()))
        });

        // 4a. The GPU-Huffman share: the caller's stream waits for its lane; what
        //     failed (or all of it, if the lane did) goes to the CPU below.
        match huffman_done {
            None => {}
            Some(Err(_)) => {
                // The lane is lost with its thread (which waited for the lane's
                // stream while unwinding, `SyncOnPanic`): later batches leave the
                // share on the engines. Wait for the whole context once as well,
                // in case that wait failed: these images' outputs are refilled
                // (CPU replacements). A panic path only.
                if let Err(e) = self.ctx.synchronize() {
                    tracing::warn!("synchronizing after the GPU-Huffman lane's panic failed: {e}");
                }
                for &i in &gpu_list {
                    results[i] = Some(Err(DecodeError::Panicked {
                        decoder: "nvjpeg-gpu-huffman",
                        message: "GPU-Huffman lane thread panicked".into(),
                    }));
                }
            }
            Some(Ok((lane, (k, staging), times, r))) => {
                self.timings.gpu_huffman_s +=
                    times.copy + times.state_wait + times.init + times.decode;
                let joined = stream.join(&lane.stream);
                if let Err(e) = &joined {
                    // Without the join, the CPU's copies below could overtake the lane.
                    tracing::warn!("joining the GPU-Huffman lane failed ({e}); synchronizing");
                    if let Err(e) = lane.stream.synchronize() {
                        tracing::warn!("GPU-Huffman lane synchronize failed: {e}");
                    }
                }
                // The caller's stream joined the lane (or the lane was synchronized):
                // the staging is free once the caller's stream passes here.
                self.huffman_staging.put(k, staging, stream);
                match r {
                    Ok(()) if joined.is_ok() => {
                        for &i in &gpu_list {
                            results[i] = Some(Ok((
                                infos[i].clone().expect("probed"),
                                Route::NvjpegGpuHuffman,
                            )));
                        }
                    }
                    r => {
                        if let Err(e) = r {
                            tracing::debug!("GPU-Huffman batch failed ({e}); using the CPU");
                        }
                        cpu_list.extend_from_slice(&gpu_list);
                    }
                }
                self.huffman = Some(lane);
            }
        }

        // 4b. Copy the share's pixels (pinned, asynchronous) on the share stream.
        if let Some(Ok((_, _, decoded, share_s))) = &share_done {
            self.timings.cpu_share_s += *share_s;
            if decoded.is_ok() {
                let (n_hw, t_hw) = engines_part;
                self.share.update(n_hw, t_hw, share_list.len(), *share_s);
            }
        }
        match share_done {
            None => {}
            Some(Err(_)) => {
                for &i in &share_list {
                    results[i] = Some(Err(DecodeError::Panicked {
                        decoder: "cpu-share",
                        message: "CPU-share thread panicked".into(),
                    }));
                }
            }
            Some(Ok((k, buf, Err(e), _))) => {
                tracing::warn!("CPU share staging unreadable ({e}); pageable copies");
                self.share_staging.put(k, buf, &self.share_stream);
                cpu_list.extend_from_slice(&share_list);
            }
            Some(Ok((k, buf, Ok(decoded), _))) => {
                // Nothing queued reads the buffer (its event was waited for in
                // `take`), so this returns at once.
                match buf.as_slice() {
                    Ok(host) => {
                        for (i, off, span, r) in decoded {
                            results[i] = Some(r.and_then(|(info, _)| {
                                // An empty region copies nothing.
                                if !span.is_empty() {
                                    // SAFETY: the destination holds at least rgb_len()
                                    // ≥ `span.end` bytes (checked in step 1 against the
                                    // same header); the source is pinned and stays
                                    // untouched until the share stream passes the event
                                    // `put` records below; the share stream waited for
                                    // earlier work on the output.
                                    unsafe {
                                        cudarc::driver::result::memcpy_htod_async(
                                            ptrs[i].0 + span.start as u64,
                                            &host[off + span.start..off + span.end],
                                            self.share_stream.cu_stream(),
                                        )
                                    }?;
                                }
                                Ok((info, Route::CpuShare))
                            }));
                        }
                    }
                    Err(e) => {
                        tracing::warn!("CPU share staging unreadable ({e})");
                        for (i, ..) in decoded {
                            results[i] = Some(Err(DecodeError::Cuda(e)));
                        }
                    }
                }
                self.share_staging.put(k, buf, &self.share_stream);
                if let Err(e) = stream.join(&self.share_stream) {
                    tracing::warn!("joining the share stream failed ({e}); synchronizing");
                    if let Err(e) = self.share_stream.synchronize() {
                        for &i in &share_list {
                            results[i] = Some(Err(DecodeError::Cuda(e)));
                        }
                    }
                }
            }
        }
        // 5. CPU for the rest, copied to the device.
        if !cpu_list.is_empty() {
            let started = Instant::now();
            let cpu = &self.cpu;
            let decoded: Vec<(usize, CpuDecoded)> = cpu_list
                .par_iter()
                .map(|&i| (i, cpu.decode_region_to_vec_routed(inputs[i], region_of(i))))
                .collect();
            for (i, r) in decoded {
                results[i] = Some(r.and_then(|(info, route, pixels)| {
                    let span = needed(i, &info);
                    let span = span.start.min(pixels.len())..span.end.min(pixels.len());
                    // An empty region copies nothing.
                    if !span.is_empty() {
                        // SAFETY: the destination holds at least rgb_len() ≥
                        // `span.end` bytes (checked in step 1 against the same
                        // header), so it holds `span.start + span.len()`; the copy
                        // is queued on `stream`, which waited for earlier work on
                        // the buffer; the pageable source is staged by the driver
                        // before this returns.
                        unsafe {
                            cudarc::driver::result::memcpy_htod_async(
                                ptrs[i].0 + span.start as u64,
                                &pixels[span],
                                stream.cu_stream(),
                            )
                        }?;
                    }
                    Ok((info, route))
                }));
            }
            self.timings.cpu_s += started.elapsed().as_secs_f64();
        }

        drop(ptrs);
        self.timings.calls += 1;
        self.timings.images += n as u64;
        self.timings.total_s += call_started.elapsed().as_secs_f64();
        results
            .into_iter()
            .map(|r| {
                let r = r.unwrap_or(Err(DecodeError::Corrupt {
                    decoder: "nvjpeg",
                    message: "image was not routed".into(),
                }));
                match &r {
                    Ok((_, route)) => self.counters.record(*route),
                    Err(_) => self.counters.record_failure(),
                }
                r
            })
            .collect()
    }

    /// Step 1 of [`decode_batch`](Self::decode_batch) for every input; see [`route_batch`].
    fn route_all(
        &self,
        inputs: &[&[u8]],
        out_lens: &[usize],
    ) -> Vec<Result<(ImageInfo, Route), DecodeError>> {
        let t = self.lib.table();
        match &self.hw {
            Some(hw) => {
                let streams: Vec<SendPtr> =
                    hw.check_streams.iter().map(|s| SendPtr(s.ptr())).collect();
                // SAFETY: the handle and the check streams are live (owned by
                // `self.hw`, borrowed for this call), created from that handle,
                // and used by nothing else meanwhile (`&self` here, and the only
                // other users are step 1 of other `&mut self` calls).
                unsafe {
                    route_batch(
                        Some((t, hw.handle.ptr(), &streams, &self.ctx)),
                        &self.options.limits,
                        inputs,
                        out_lens,
                    )
                }
            }
            // SAFETY: no nvJPEG objects are used without a check.
            None => unsafe { route_batch(None, &self.options.limits, inputs, out_lens) },
        }
    }

    /// Copies the hardware list into pinned staging and decodes it on the
    /// hardware lanes in parallel. Returns the images of lanes that failed.
    fn decode_hardware<G>(
        &mut self,
        inputs: &[&[u8]],
        infos: &[Option<ImageInfo>],
        ptrs: &[(cudarc::driver::sys::CUdeviceptr, G)],
        list: &[usize],
        stream: &CudaStream,
    ) -> Result<Vec<usize>, DecodeError> {
        let total: usize = list.iter().map(|&i| inputs[i].len()).sum();
        // Waits only until the batch before last stopped reading this buffer.
        let waited = Instant::now();
        let taken = self.staging.take(&self.ctx, total);
        self.timings.staging_wait_s += waited.elapsed().as_secs_f64();
        let (k, mut staging) = taken?;
        let r = staging
            .as_mut_ptr()
            .map_err(DecodeError::from)
            .and_then(|base| self.run_lanes(inputs, infos, ptrs, list, stream, base));
        if r.is_err() {
            // Lanes may have queued work that reads the buffer before failing.
            if let Some(hw) = &self.hw {
                for lane in &hw.lanes {
                    if let Err(e) = lane.stream.synchronize() {
                        tracing::warn!("lane stream synchronize failed: {e}");
                    }
                }
            }
        }
        // The caller's stream joined the lanes: the buffer is free once it passes here.
        self.staging.put(k, staging, stream);
        r
    }

    /// Decodes the hardware list on the lanes in parallel, each lane copying
    /// its chunk's bitstreams into `base` (pinned, at least the list's total
    /// bytes, not read by queued device work) on its own thread first; the
    /// caller's stream joins the lanes. Returns the images of lanes that failed.
    fn run_lanes<G>(
        &mut self,
        inputs: &[&[u8]],
        infos: &[Option<ImageInfo>],
        ptrs: &[(cudarc::driver::sys::CUdeviceptr, G)],
        list: &[usize],
        stream: &CudaStream,
        base: *mut u8,
    ) -> Result<Vec<usize>, DecodeError> {
        // Where each bitstream goes in `base`: prefix sums, so the lanes'
        // ranges are disjoint.
        let mut offsets = Vec::with_capacity(list.len());
        let mut off = 0usize;
        for &i in list {
            offsets.push(off);
            off += inputs[i].len();
        }
        let hw = self
            .hw
            .as_mut()
            .expect("hardware path exists when hw_list is non-empty");
        let cores = hw.engines.map(|(_, c)| c as usize);
        let sizes = lane_chunks(list.len(), hw.lanes.len(), cores);
        let lanes = sizes.len();
        let starts: Vec<usize> = sizes
            .iter()
            .scan(0usize, |at, &len| {
                let start = *at;
                *at += len;
                Some(start)
            })
            .collect();
        for lane in &hw.lanes[..lanes] {
            lane.stream.join(stream)?;
        }
        let t = self.lib.table();
        let shared = SendPtr(hw.handle.ptr());
        let ctx = &self.ctx;
        let base = SendPtr(base.cast());
        let wall = Instant::now();
        type LaneResult = (usize, LaneTimes, Result<(), DecodeError>);
        let lane_results: Vec<LaneResult> = std::thread::scope(|s| {
            let mut joins = Vec::new();
            for (k, lane) in hw.lanes[..lanes].iter_mut().enumerate() {
                let range = starts[k]..starts[k] + sizes[k];
                let chunk = &list[range.clone()];
                let start = offsets[range.start];
                let outs: Vec<(u64, usize)> = chunk
                    .iter()
                    .map(|&i| {
                        let info = infos[i].as_ref().expect("probed");
                        (ptrs[i].0, info.width as usize * 3)
                    })
                    .collect();
                let (shared, base) = (&shared, &base);
                joins.push(s.spawn(move || {
                    let mut times = LaneTimes::default();
                    let handle = lane.handle_ptr(shared.0);
                    let mut run = || -> Result<(), DecodeError> {
                        ctx.bind_to_thread()?;
                        let copying = Instant::now();
                        // SAFETY: `base` holds at least the list's total bytes
                        // (caller's contract) and this chunk's bytes start at
                        // its prefix sum `start`; the lanes' ranges are disjoint
                        // (prefix sums over disjoint chunks), so no other thread
                        // writes them; no queued device work reads the buffer
                        // (its event was waited for in `take`).
                        let (data, lens) =
                            unsafe { stage_bitstreams(base.0.cast(), start, inputs, chunk) };
                        times.copy = copying.elapsed().as_secs_f64();
                        // SAFETY: `data`/`lens`/`outs` have chunk.len() entries; the
                        // bitstreams live in pinned staging until the staging event
                        // completes; each output holds width*3*height bytes (checked
                        // against the probed header); this thread alone uses the lane.
                        unsafe { lane.decode_batched(t, handle, &data, &lens, &outs, &mut times) }
                    };
                    let r = run();
                    (k, times, r)
                }));
            }
            joins
                .into_iter()
                .map(|j| {
                    j.join().unwrap_or_else(|_| {
                        (
                            usize::MAX,
                            LaneTimes::default(),
                            Err(DecodeError::Panicked {
                                decoder: "nvjpeg",
                                message: "hardware lane thread panicked".into(),
                            }),
                        )
                    })
                })
                .collect()
        });
        self.timings.hw_lanes_s += wall.elapsed().as_secs_f64();
        let mut slowest = 0.0f64;
        for (_, lt, _) in &lane_results {
            self.timings.staging_copy_s += lt.copy;
            self.timings.stream_wait_s += lt.state_wait;
            self.timings.hw_init_s += lt.init;
            self.timings.hw_decode_s += lt.decode;
            slowest = slowest.max(lt.copy + lt.state_wait + lt.init + lt.decode);
        }
        self.timings.hw_lane_max_s += slowest;
        let hw = self
            .hw
            .as_ref()
            .expect("hardware path exists when hw_list is non-empty");
        for lane in &hw.lanes[..lanes] {
            stream.join(&lane.stream)?;
        }
        let mut failed = Vec::new();
        for (k, _, r) in lane_results {
            if let Err(e) = r {
                if k == usize::MAX {
                    return Err(e);
                }
                tracing::debug!("hardware lane {k} failed: {e}");
                failed.extend_from_slice(&list[starts[k]..starts[k] + sizes[k]]);
            }
        }
        Ok(failed)
    }

    /// Decodes the list with the CUDA decoder: host phases in parallel over the
    /// slots, then transfer and device phases on `stream`. Returns the failures.
    fn decode_cuda<G>(
        &mut self,
        inputs: &[&[u8]],
        infos: &[Option<ImageInfo>],
        ptrs: &[(cudarc::driver::sys::CUdeviceptr, G)],
        list: &[usize],
        stream: &CudaStream,
    ) -> Vec<usize> {
        let t = self.lib.table();
        let handle = SendPtr(self.cuda.handle.ptr());
        let decoder = SendPtr(self.cuda.decoder.ptr());
        let ctx = &self.ctx;
        let cu_stream: sys::cudaStream_t = stream.cu_stream().cast();
        let mut failed = Vec::new();
        let slots = self.cuda.slots.len();
        for chunk in list.chunks(slots) {
            let host: Vec<Result<(), DecodeError>> = std::thread::scope(|s| {
                let joins: Vec<_> = self
                    .cuda
                    .slots
                    .iter()
                    .zip(chunk)
                    .map(|(slot, &i)| {
                        let (handle, decoder) = (&handle, &decoder);
                        let data = inputs[i];
                        let slot = SlotRef(slot);
                        s.spawn(move || -> Result<(), DecodeError> {
                            let slot = slot.get();
                            ctx.bind_to_thread()?;
                            // The slot's previous transfer (this batch's earlier round
                            // or an earlier batch) may still read its pinned buffer,
                            // which the host phase overwrites.
                            if let Some(ev) = &slot.free {
                                ev.synchronize()?;
                            }
                            // SAFETY: handle/decoder live; this slot's state, stream and
                            // params are used by this thread only; `data` outlives the call.
                            unsafe {
                                result::stream_parse(t, handle.0, data, slot.jstream.ptr())?;
                                result::check(
                                    "nvjpegDecodeJpegHost",
                                    (t.nvjpegDecodeJpegHost)(
                                        handle.0,
                                        decoder.0,
                                        slot.state.ptr(),
                                        slot.params.ptr(),
                                        slot.jstream.ptr(),
                                    ),
                                )
                            }
                        })
                    })
                    .collect();
                joins
                    .into_iter()
                    .map(|j| {
                        j.join().unwrap_or_else(|_| {
                            Err(DecodeError::Panicked {
                                decoder: "nvjpeg",
                                message: "host-phase thread panicked".into(),
                            })
                        })
                    })
                    .collect()
            });
            for ((slot, &i), h) in self.cuda.slots.iter_mut().zip(chunk).zip(host) {
                let info = infos[i].as_ref().expect("probed");
                let r = h.and_then(|()| {
                    let mut img = sys::nvjpegImage_t::default();
                    img.channel[0] = ptrs[i].0 as *mut u8;
                    img.pitch[0] = info.width as usize * 3;
                    // The previous device phase on this slot (maybe on another
                    // stream) must be done reading the device buffer first.
                    // The event stays until a new one replaces it, so a
                    // failure below leaves the next transfer still ordered.
                    if let Some(ev) = &slot.device_free {
                        stream.wait(ev)?;
                    }
                    // SAFETY: the host phase of this slot succeeded; the output holds
                    // width*3*height bytes; work is queued on the caller's stream.
                    unsafe {
                        result::check(
                            "nvjpegDecodeJpegTransferToDevice",
                            (t.nvjpegDecodeJpegTransferToDevice)(
                                handle.0,
                                decoder.0,
                                slot.state.ptr(),
                                slot.jstream.ptr(),
                                cu_stream,
                            ),
                        )?;
                    }
                    // The transfer reads the slot's pinned buffer: the slot's next
                    // host phase waits for this event (not for the whole stream).
                    slot.free = record_or_synchronize(stream, "a slot event")?;
                    // SAFETY: as above; the device phase reads the slot's device
                    // buffer, ordered after the transfer on the same stream.
                    let device = unsafe {
                        result::check(
                            "nvjpegDecodeJpegDevice",
                            (t.nvjpegDecodeJpegDevice)(
                                handle.0,
                                decoder.0,
                                slot.state.ptr(),
                                &mut img,
                                cu_stream,
                            ),
                        )
                    };
                    // Recorded whatever the call returned: a failed call may still
                    // have queued work that reads the device buffer.
                    slot.device_free = record_or_synchronize(stream, "a slot event")?;
                    device?;
                    Ok(())
                });
                if let Err(e) = r {
                    tracing::debug!("nvJPEG CUDA path failed on image {i}: {e}; using the CPU");
                    failed.push(i);
                }
            }
        }
        failed
    }
}

/// Copies the bitstreams of `list` (indices into `inputs`) one after another
/// into pinned staging at `base`, from byte `start` on, and returns the
/// pointer and length arrays `nvjpegDecodeBatched` takes.
///
/// # Safety
/// `base` is valid for writes of `start` plus the listed inputs' total bytes;
/// no other thread writes that range and no queued device work reads it
/// meanwhile; it does not overlap the inputs.
unsafe fn stage_bitstreams(
    base: *mut u8,
    start: usize,
    inputs: &[&[u8]],
    list: &[usize],
) -> (Vec<*const u8>, Vec<usize>) {
    let mut data = Vec::with_capacity(list.len());
    let mut lens = Vec::with_capacity(list.len());
    let mut off = start;
    for &i in list {
        let src = inputs[i];
        // SAFETY: [off, off + len) lies inside the range the caller vouches for,
        // which nothing else touches meanwhile and which does not overlap `src`.
        let dst = unsafe { base.add(off) };
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        data.push(dst.cast_const());
        lens.push(src.len());
        off += src.len();
    }
    (data, lens)
}

/// An event recorded on `stream` now, or, when it cannot be recorded, `None`
/// after waiting for the stream on the host instead (logged as `what`): either
/// way the caller can tell when the work queued so far is done.
fn record_or_synchronize(
    stream: &CudaStream,
    what: &str,
) -> Result<Option<CudaEvent>, cudarc::driver::DriverError> {
    match stream.record_event(None) {
        Ok(ev) => Ok(Some(ev)),
        Err(e) => {
            tracing::warn!("recording {what} failed ({e}); synchronizing");
            stream.synchronize().map(|()| None)
        }
    }
}

/// The CPU share's fraction, fixed or adjusted batch by batch
/// ([`GpuDecoderOptions::cpu_share_auto`]).
#[derive(Debug, Clone, Copy)]
struct ShareControl {
    fraction: f64,
    auto: bool,
}

impl ShareControl {
    /// Where the automatic share starts when `cpu_share` is 0.
    const START: f64 = 0.1;
    /// Bounds of the automatic share: never 0, so that it stays measured.
    const MIN: f64 = 0.02;
    const MAX: f64 = 0.5;
    /// How far one batch moves the share toward its balance point: a batch's
    /// timings are noisy, and a step changes the next batch's split.
    const GAIN: f64 = 0.3;

    fn new(options: &GpuDecoderOptions) -> ShareControl {
        let asked = share_fraction(options.cpu_share);
        if options.cpu_share_auto {
            let start = if asked > 0.0 { asked } else { Self::START };
            ShareControl {
                fraction: start.clamp(Self::MIN, Self::MAX),
                auto: true,
            }
        } else {
            ShareControl {
                fraction: asked,
                auto: false,
            }
        }
    }

    /// One batch: the engines' part took `t_hw` seconds for `n_hw` images on
    /// the calling thread while the CPUs took `t_cpu` for `n_cpu`. The balance
    /// point is the share at which both would take as long at these rates.
    fn update(&mut self, n_hw: usize, t_hw: f64, n_cpu: usize, t_cpu: f64) {
        if !self.auto || n_hw == 0 || n_cpu == 0 || t_hw <= 0.0 || t_cpu <= 0.0 {
            return;
        }
        let (r_hw, r_cpu) = (n_hw as f64 / t_hw, n_cpu as f64 / t_cpu);
        let balance = r_cpu / (r_hw + r_cpu);
        let next = self.fraction + Self::GAIN * (balance - self.fraction);
        if next.is_finite() {
            self.fraction = next.clamp(Self::MIN, Self::MAX);
        }
    }
}

/// Waits for a stream when dropped during a panic, so that buffers dropped
/// after it are not freed under work still queued on it.
struct SyncOnPanic(Arc<CudaStream>);

impl Drop for SyncOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Err(e) = self.0.synchronize() {
                tracing::warn!("stream synchronize while unwinding failed: {e}");
            }
        }
    }
}

/// The CPU share's pool (`None`, with a warning, if it cannot be made: then
/// rayon's global pool decodes the share).
fn share_pool(options: &GpuDecoderOptions) -> Option<Arc<rayon::ThreadPool>> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let n = share_threads(options.cpu_share_threads, options.hardware_lanes, cores);
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("stoker-cpu-share-{i}"))
        .build()
    {
        Ok(pool) => Some(Arc::new(pool)),
        Err(e) => {
            tracing::warn!("CPU share pool of {n} threads failed ({e}); using rayon's");
            None
        }
    }
}

/// Threads for the CPU share: `asked`, or with 0 the cores left after the
/// hardware lanes and two more threads (the caller's and one spare), at least 1.
fn share_threads(asked: usize, lanes: usize, cores: usize) -> usize {
    if asked > 0 {
        asked
    } else {
        cores.saturating_sub(lanes + 2).max(1)
    }
}

/// A share option as a fraction in 0..=1 (NaN is 0).
fn share_fraction(v: f32) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        f64::from(v.clamp(0.0, 1.0))
    }
}

/// Splits `n` images over at most `lanes` lanes: chunk sizes in lane order,
/// none empty, as even as the rule allows. With `cores` (cores per hardware
/// engine) known, every chunk but the last is a multiple of it, so each
/// lane's batch fills whole engines (nvImageCodec rounds its hardware share
/// the same way); the last chunk takes the remainder.
fn lane_chunks(n: usize, lanes: usize, cores: Option<usize>) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let unit = cores.unwrap_or(1).max(1);
    let units = n.div_ceil(unit);
    let used = lanes.max(1).min(units);
    let (each, extra) = (units / used, units % used);
    let mut sizes: Vec<usize> = (0..used)
        .map(|k| (each + usize::from(k < extra)) * unit)
        .collect();
    // The units cover n plus less than one unit: the last chunk (at least one
    // whole unit) gives the surplus back and stays non-empty.
    let surplus = units * unit - n;
    if let Some(last) = sizes.last_mut() {
        *last -= surplus;
    }
    sizes
}

/// Step 1 for a batch: [`route_one`] for every input, in order. From
/// [`PARALLEL_ROUTE_MIN`] images up it runs on rayon in chunks, chunk `p`
/// checking with `check.2[p]`; each image's result is the same either way.
///
/// # Safety
/// With `check = Some((table, handle, streams, ctx))`: `handle` is a live
/// hardware handle created in `ctx`, `streams` (at least one) live jpeg streams
/// created from it, none used by anything else during the call.
unsafe fn route_batch(
    check: Option<(
        &sys::Table,
        sys::nvjpegHandle_t,
        &[SendPtr],
        &Arc<CudaContext>,
    )>,
    limits: &Limits,
    inputs: &[&[u8]],
    out_lens: &[usize],
) -> Vec<Result<(ImageInfo, Route), DecodeError>> {
    let n = inputs.len();
    let handle = check.map(|(t, h, streams, ctx)| (t, SendPtr(h), streams, ctx));
    let most = match &handle {
        Some((_, _, streams, _)) => streams.len().max(1),
        None => rayon::current_num_threads(),
    };
    let parts = if n >= PARALLEL_ROUTE_MIN {
        most.min(n / ROUTE_CHUNK_MIN).max(1)
    } else {
        1
    };
    let chunk = n.div_ceil(parts).max(1);
    let run = |p: usize| -> Vec<Result<(ImageInfo, Route), DecodeError>> {
        let check = handle.as_ref().and_then(|(t, h, streams, ctx)| {
            // A rayon thread may not have the decoder's context current, and
            // nvJPEG's checks may call CUDA; without it, route by the header.
            if parts > 1 {
                if let Err(e) = ctx.bind_to_thread() {
                    tracing::debug!("binding the CUDA context for routing failed ({e})");
                    return None;
                }
            }
            Some((*t, h.0, streams[p].0))
        });
        let (lo, hi) = ((p * chunk).min(n), ((p + 1) * chunk).min(n));
        (lo..hi)
            // SAFETY: the caller guarantees the handle and streams; stream `p`
            // is used by this chunk only, on one thread.
            .map(|i| unsafe { route_one(check, limits, inputs[i], out_lens[i]) })
            .collect()
    };
    if parts == 1 {
        run(0)
    } else {
        (0..parts)
            .into_par_iter()
            .map(run)
            .collect::<Vec<_>>()
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Step 1 for one image: probe (pixel limit, unsupported features), check the
/// output size, then route: the hardware engines when the header allows it
/// and `nvjpegDecodeBatchedSupported` agrees, the CUDA decoder for other
/// nvJPEG-decodable files, the CPU for the rest and for headers nvJPEG cannot read.
///
/// # Safety
/// With `check = Some((table, handle, stream))`: `handle` is a live hardware handle
/// and `stream` a live jpeg stream created from it that no other thread uses
/// during the call.
unsafe fn route_one(
    check: Option<(&sys::Table, sys::nvjpegHandle_t, sys::nvjpegJpegStream_t)>,
    limits: &Limits,
    data: &[u8],
    out_len: usize,
) -> Result<(ImageInfo, Route), DecodeError> {
    let info = probe(data, limits)?;
    info.supported()?;
    if out_len < info.rgb_len() {
        return Err(DecodeError::OutputTooSmall {
            need: info.rgb_len(),
            got: out_len,
        });
    }
    let route = match check {
        Some((t, handle, stream)) if info.hardware_decodable() => {
            // SAFETY: the caller guarantees handle and stream; `data` outlives the calls.
            let ok = unsafe {
                result::stream_parse_header(t, handle, data, stream)
                    .and_then(|()| result::batched_supported(t, handle, stream))
            };
            match ok {
                Ok(true) => Route::NvjpegHardware,
                Ok(false) => Route::NvjpegCuda,
                // nvJPEG cannot read the header: let the CPU decide.
                Err(_) => Route::CpuZune,
            }
        }
        _ if info.nvjpeg_decodable() => Route::NvjpegCuda,
        _ => Route::CpuZune,
    };
    Ok((info, route))
}

/// Two pinned host buffers used in turn, each with the event after which the
/// device no longer reads it: a batch waits (on that event, never on a whole
/// stream) only until the batch before last is done with its buffer.
#[derive(Default)]
struct PinnedRing {
    bufs: [Option<PinnedHostSlice<u8>>; 2],
    free: [Option<CudaEvent>; 2],
    next: usize,
}

impl PinnedRing {
    /// The next buffer, with at least `len` bytes, once the device no longer
    /// reads it. Give it back with [`put`](Self::put) and the same index.
    fn take(
        &mut self,
        ctx: &Arc<CudaContext>,
        len: usize,
    ) -> Result<(usize, PinnedHostSlice<u8>), DecodeError> {
        let k = self.next;
        self.next = (k + 1) % self.bufs.len();
        if let Some(ev) = self.free[k].take() {
            ev.synchronize()?;
        }
        match self.bufs[k].take() {
            Some(b) if b.len() >= len => Ok((k, b)),
            // A smaller buffer is dropped here, after its event completed.
            _ => {
                // SAFETY: the memory is written before it is read. Plain pinned
                // memory (flags 0), not write-combined: it is read on the host
                // (nvJPEG parses bitstreams there).
                let b = unsafe {
                    ctx.alloc_pinned_with_flags::<u8>(len.max(1).next_power_of_two(), 0)
                }?;
                Ok((k, b))
            }
        }
    }

    /// Returns buffer `k`, which work queued on `stream` so far may still read.
    fn put(&mut self, k: usize, buf: PinnedHostSlice<u8>, stream: &CudaStream) {
        // Without the event (or the wait) the next user could overwrite it in flight.
        match record_or_synchronize(stream, "a staging event") {
            Ok(ev) => self.free[k] = ev,
            Err(e) => tracing::warn!("stream synchronize failed: {e}"),
        }
        self.bufs[k] = Some(buf);
    }
}

/// A raw nvJPEG pointer sent to a scoped worker thread.
struct SendPtr(*mut std::ffi::c_void);
// SAFETY: nvJPEG handles and decoders are thread safe (nvJPEG docs, "Thread
// Safety"); only states are not, and those are never shared between threads.
unsafe impl Send for SendPtr {}
// SAFETY: as above; shared references only pass the pointer value.
unsafe impl Sync for SendPtr {}

/// A CUDA slot lent to one host-phase thread.
struct SlotRef<'a>(&'a CudaSlot);
// SAFETY: each slot is given to exactly one thread per round (zip over
// distinct slots), so its state and stream are never used concurrently.
unsafe impl Send for SlotRef<'_> {}

impl<'a> SlotRef<'a> {
    /// The slot (a method, so closures capture the whole `SlotRef`).
    fn get(&self) -> &'a CudaSlot {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loader moves a decoder into its GPU worker thread.
    #[test]
    fn gpu_decoder_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<GpuDecoder>();
        assert_send::<GpuDecoderOptions>();
    }

    /// Simulates batches of 256: the engines' part runs at `hw` img/s, the
    /// CPUs at `cpu` img/s; returns the share after `batches` batches.
    fn settle(options: &GpuDecoderOptions, hw: f64, cpu: f64, batches: usize) -> f64 {
        let mut c = ShareControl::new(options);
        for _ in 0..batches {
            let n_cpu = (256.0 * c.fraction).round() as usize;
            let n_hw = 256 - n_cpu;
            c.update(n_hw, n_hw as f64 / hw, n_cpu, n_cpu as f64 / cpu);
        }
        c.fraction
    }

    #[test]
    fn the_automatic_cpu_share_settles_where_both_sides_take_as_long() {
        let auto = GpuDecoderOptions {
            cpu_share_auto: true,
            ..GpuDecoderOptions::default()
        };
        // Engines 24k img/s, CPUs 6k img/s: both take as long at 6 / 30 = 0.2.
        let f = settle(&auto, 24_000.0, 6_000.0, 30);
        assert!((f - 0.2).abs() < 0.01, "{f}");
        // From a high start it comes down to the same point.
        let high = GpuDecoderOptions {
            cpu_share: 0.45,
            ..auto
        };
        assert!((settle(&high, 24_000.0, 6_000.0, 30) - 0.2).abs() < 0.01);
        // Slow CPUs: the share stays at its floor (still measured), never 0.
        assert_eq!(settle(&auto, 24_000.0, 10.0, 30), ShareControl::MIN);
        // Engines slower than the CPUs: capped at half the batch.
        assert_eq!(settle(&auto, 1_000.0, 9_000.0, 30), ShareControl::MAX);
        // Degenerate timings change nothing.
        let mut c = ShareControl::new(&auto);
        c.update(0, 0.0, 10, 0.01);
        c.update(100, 0.01, 10, 0.0);
        c.update(100, f64::NAN, 10, 0.01);
        assert_eq!(c.fraction, ShareControl::START);
    }

    #[test]
    fn a_fixed_cpu_share_does_not_move() {
        let fixed = GpuDecoderOptions {
            cpu_share: 0.25,
            ..GpuDecoderOptions::default()
        };
        assert_eq!(settle(&fixed, 24_000.0, 6_000.0, 30), 0.25);
        assert_eq!(
            settle(&GpuDecoderOptions::default(), 24_000.0, 6_000.0, 30),
            0.0
        );
    }

    #[test]
    fn the_cpu_share_leaves_cores_to_the_lanes() {
        // The H200 machine: 16 cores, 4 lanes → 10 share threads.
        assert_eq!(share_threads(0, 4, 16), 10);
        assert_eq!(share_threads(0, 8, 16), 6);
        // Never none, and an explicit count wins.
        assert_eq!(share_threads(0, 4, 2), 1);
        assert_eq!(share_threads(0, 4, 6), 1);
        assert_eq!(share_threads(3, 4, 2), 3);
    }

    #[test]
    fn lane_chunks_cover_the_list_without_empty_lanes() {
        for n in 0..200 {
            for lanes in 1..10 {
                for cores in [None, Some(1), Some(3), Some(5), Some(8)] {
                    let sizes = lane_chunks(n, lanes, cores);
                    assert_eq!(sizes.iter().sum::<usize>(), n, "{n} {lanes} {cores:?}");
                    assert!(sizes.len() <= lanes);
                    assert!(
                        sizes.iter().all(|&s| s > 0),
                        "{n} {lanes} {cores:?}: {sizes:?}"
                    );
                    let c = cores.unwrap_or(1);
                    if let Some((_, head)) = sizes.split_last() {
                        assert!(head.iter().all(|s| s % c == 0), "{sizes:?} with {c} cores");
                    }
                    // As many lanes as there are whole units of work.
                    assert_eq!(sizes.len(), lanes.min(n.div_ceil(c)));
                    // Even: lanes differ by at most one unit (the last may be short).
                    if let (Some(max), Some(min)) = (sizes.iter().max(), sizes.iter().min()) {
                        assert!(max - min < 2 * c, "{sizes:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn lane_chunks_examples() {
        assert_eq!(lane_chunks(256, 4, None), vec![64, 64, 64, 64]);
        assert_eq!(lane_chunks(9, 4, None), vec![3, 2, 2, 2]);
        assert_eq!(
            lane_chunks(256, 7, Some(5)),
            vec![40, 40, 40, 35, 35, 35, 31]
        );
        assert_eq!(lane_chunks(3, 4, Some(5)), vec![3]);
        assert_eq!(lane_chunks(12, 4, Some(5)), vec![5, 5, 2]);
        assert!(lane_chunks(0, 4, Some(5)).is_empty());
    }

    /// Step 1 in parallel chunks gives the same per-image results, in the
    /// same order, as one image after another (CPU routes: no nvJPEG here).
    #[test]
    fn parallel_routing_matches_serial_routing() {
        let dir = stoker_testdata::dir().join("conformance/core");
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut files: Vec<Vec<u8>> = entries
            .flatten()
            .filter_map(|e| std::fs::read(e.path()).ok())
            .collect();
        files.push(b"not a jpeg".to_vec());
        files.push(Vec::new());
        let inputs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
        // Small outputs for some, so OutputTooSmall shows up too.
        let out_lens: Vec<usize> = (0..inputs.len())
            .map(|i| if i % 7 == 3 { 16 } else { usize::MAX })
            .collect();
        let limits = Limits::default();
        let serial: Vec<_> = inputs
            .iter()
            .zip(&out_lens)
            // SAFETY: no nvJPEG objects without a check.
            .map(|(d, &l)| unsafe { route_one(None, &limits, d, l) })
            .collect();
        // SAFETY: as above.
        let parallel = unsafe { route_batch(None, &limits, &inputs, &out_lens) };
        assert!(
            inputs.len() >= PARALLEL_ROUTE_MIN,
            "too few files to go parallel"
        );
        assert_eq!(serial.len(), parallel.len());
        for (i, (a, b)) in serial.iter().zip(&parallel).enumerate() {
            match (a, b) {
                (Ok(x), Ok(y)) => assert_eq!(x, y, "image {i}"),
                (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string(), "image {i}"),
                _ => panic!("image {i}: {a:?} vs {b:?}"),
            }
        }
        assert!(serial.iter().any(Result::is_err) && serial.iter().any(Result::is_ok));
    }

    #[test]
    fn options_default_to_preallocation_and_a_shared_handle() {
        let o = GpuDecoderOptions::default();
        assert!(o.hardware_preallocate);
        assert!(!o.hardware_handle_per_lane);
        assert_eq!(o.hardware_lanes, 4);
    }

    #[test]
    fn no_gpu_is_an_error_not_a_panic() {
        match cuda_context(0) {
            Ok(ctx) => assert_eq!(ctx.ordinal(), 0),
            Err(DecodeError::NoGpu { reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("want NoGpu, got {e}"),
        }
        // A device that no machine has: the same typed error with or without a GPU.
        match cuda_context(4096) {
            Err(DecodeError::NoGpu { reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("want NoGpu, got {e}"),
            Ok(_) => panic!("device 4096 opened"),
        }
    }
}
