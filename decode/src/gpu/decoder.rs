//! [`GpuDecoder`]: the decoders of every route, created once, and
//! [`GpuDecoder::decode_batch_for`], which runs a batch through the stages in
//! order (route; the engines, with the shares, the CUDA decoder and the
//! images routed to the CPU beside them; the CPU for what failed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, CudaStream, DevicePtrMut};

use super::batch::{Batch, Decoded, Plan};
use super::cuda::CudaDone;
use super::cuda::CudaPath;
use super::hardware::{self, Hardware};
use super::huffman::{GpuHuffman, HuffmanDone};
use super::options::{BatchUse, GpuDecoderOptions, NvjpegMemory, WaitMode};
use super::share::{CpuShare, MainPart, ShareDone};
use super::staging::PinnedRing;
use super::{device, fallback, routing};
use crate::nvjpeg::{CachedMemory, NvJpeg, NvjpegMemoryStats};
use crate::threads::spawn_or_run;
use crate::{
    probe, CpuDecoder, DecodeError, DecodeTimings, ImageInfo, Route, RouteCounters, RouteCounts,
};

/// Decodes batches of JPEGs into device memory (RGB interleaved u8, HWC,
/// pitch `width * 3`) on a caller-given CUDA stream.
///
/// Routing per image: [`probe()`] first (pixel limit, unsupported features);
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
    /// The CPU share: its staging, stream, threads and fraction.
    share: CpuShare,
    /// The GPU-Huffman share: its lane (when there is one) and staging.
    huffman: GpuHuffman,
    /// Wall-clock time per phase since creation or the last reset.
    timings: DecodeTimings,
    /// nvJPEG's allocators when they are stoker's caches
    /// ([`NvjpegMemory::Cached`]); every handle holds them too.
    memory: Option<Arc<CachedMemory>>,
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
        let mut streams: Vec<&Arc<CudaStream>> = vec![&self.share.stream, &self.cuda.stream];
        if let Some(hw) = &self.hw {
            streams.extend(hw.lanes.iter().map(|l| &l.stream));
        }
        if let Some(lane) = &self.huffman.lane {
            streams.push(&lane.stream);
        }
        for s in streams {
            if let Err(e) = s.synchronize() {
                tracing::warn!("GpuDecoder drop: stream synchronize failed ({e})");
            }
        }
        let events = [&self.staging, &self.share.staging, &self.huffman.staging]
            .into_iter()
            .flat_map(PinnedRing::events)
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
    /// [`DecodeError::InvalidOptions`] for counts out of range
    /// ([`GpuDecoderOptions::validate`]), [`DecodeError::Load`] when nvJPEG is missing,
    /// [`DecodeError::Nvjpeg`] / [`DecodeError::Cuda`] when the library or driver refuses.
    pub fn new(
        ctx: &Arc<CudaContext>,
        mut options: GpuDecoderOptions,
    ) -> Result<GpuDecoder, DecodeError> {
        // Before any state: `cuda_states: usize::MAX` would create states until the GPU's
        // memory ran out, `hardware_states_per_lane` reserve a Vec past the address space.
        options.validate()?;
        // Decided once: every stage below reads the resolved modes.
        options.waits = options.wait_mode();
        options.nvjpeg_memory = options.nvjpeg_memory.resolve();
        let lib = NvJpeg::load()?;
        ctx.bind_to_thread()?;
        let memory =
            (options.nvjpeg_memory == NvjpegMemory::Cached).then(|| CachedMemory::new(ctx));
        let mem = memory.as_ref();
        let priority = device::decoder_stream_priority(ctx, &options);
        let hw = if options.hardware {
            match Hardware::new(lib, (ctx, priority), &options, mem) {
                Ok(hw) => Some(hw),
                Err(e) => {
                    tracing::info!("nvJPEG hardware backend unavailable: {e}");
                    None
                }
            }
        } else {
            None
        };
        let cuda = CudaPath::new(
            (lib, mem),
            (ctx, priority),
            options.cuda_states,
            options.waits,
        )?;
        let share = CpuShare::new(ctx, &options, priority)?;
        Ok(GpuDecoder {
            ctx: ctx.clone(),
            lib,
            cpu: Arc::new(CpuDecoder::new(options.limits)),
            counters: RouteCounters::default(),
            hw,
            cuda,
            staging: PinnedRing::new(options.waits),
            share,
            huffman: GpuHuffman::new(lib, (ctx, priority), &options, mem),
            timings: DecodeTimings::default(),
            memory,
            options,
        })
    }

    /// How this decoder's host waits spend their time: its options'
    /// [`waits`](GpuDecoderOptions::waits), resolved when it was made
    /// ([`WaitMode::Spin`] or [`WaitMode::Block`]). A caller waiting for the
    /// decoder's outputs can wait the same way with [`WaitMode::synchronize`].
    ///
    /// # Examples
    /// ```no_run
    /// use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions, WaitMode};
    /// let ctx = cuda_context(0)?;
    /// let options = GpuDecoderOptions { cpu_share: 0.2, ..Default::default() };
    /// let dec = GpuDecoder::new(&ctx, options)?;
    /// let stream = ctx.new_stream()?;
    /// // ... decode_batch(..., &stream) ...
    /// dec.wait_mode().synchronize(&stream)?;
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn wait_mode(&self) -> WaitMode {
        self.options.waits
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
        self.huffman.lane.is_some()
    }

    /// How many hardware lanes decode with a handle of their own (see
    /// [`GpuDecoderOptions::hardware_handle_per_lane`]; a lane whose handle
    /// could not be created shares the decoder's).
    pub fn hardware_lane_handles(&self) -> usize {
        self.hw.as_ref().map_or(0, Hardware::lane_handles)
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
        self.share.fraction()
    }

    /// The fraction of each batch's CUDA-decoder images (progressive files,
    /// others the engines refuse) decoded on the CPU share's threads now
    /// ([`GpuDecoderOptions::cpu_offload`]; 0 when it is off or has found that
    /// offloading does not pay).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions};
    /// # let ctx = cuda_context(0)?;
    /// let mut dec = GpuDecoder::new(&ctx, GpuDecoderOptions::default())?;
    /// // ... decode_batch calls ...
    /// println!("CUDA-decoder images on the CPUs now: {:.0} %", 100.0 * dec.cpu_offload_now());
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn cpu_offload_now(&self) -> f64 {
        self.share.offload_fraction()
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

    /// What the caches behind nvJPEG's memory have done since the decoder
    /// was made, with [`NvjpegMemory::Cached`]; `None` with nvJPEG's own
    /// allocators.
    ///
    /// # Examples
    /// ```no_run
    /// # use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions, NvjpegMemory};
    /// let options = GpuDecoderOptions { nvjpeg_memory: NvjpegMemory::Cached, ..Default::default() };
    /// let dec = GpuDecoder::new(&cuda_context(0)?, options)?;
    /// // ... decode_batch calls ...
    /// if let Some(stats) = dec.nvjpeg_memory_stats() {
    ///     print!("{stats}");
    /// }
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn nvjpeg_memory_stats(&self) -> Option<NvjpegMemoryStats> {
        self.memory.as_ref().map(|m| m.stats())
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
        self.options.waits.synchronize(&stream)?;
        pixels.truncate(info.rgb_len());
        Ok((info, route, pixels))
    }

    /// Decodes `inputs[i]` into `outputs[i]` (RGB HWC u8, `rgb_len()` bytes
    /// from offset 0), queued on `stream`. One result per input, with the route
    /// that decoded it (on a shape error, one per input, output or region,
    /// whichever are more). A failing image leaves its output untouched and fails alone.
    ///
    /// # Errors (per image)
    /// Every [`probe()`] error; [`DecodeError::Unsupported`];
    /// [`DecodeError::OutputTooSmall`]; the CPU backend's error when nvJPEG
    /// and the CPU both fail; [`DecodeError::BatchShape`] (every image, or every
    /// output when there are more) when the slice lengths differ;
    /// [`DecodeError::Cuda`] for driver failures.
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
    /// [`DecodeError::RegionsShape`] (every image, or every region when there are more)
    /// when `usage.regions` has a different length than `inputs`.
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
        if let Some(refused) = shape_errors(n, outputs.len(), usage) {
            return refused;
        }
        if let Err(e) = self.ctx.bind_to_thread() {
            return (0..n).map(|_| Err(DecodeError::Cuda(e))).collect();
        }

        // 1. Probe and route (in parallel chunks for large batches; the
        //    per-image results and the lists' order do not depend on it).
        let started = Instant::now();
        let out_lens: Vec<usize> = outputs.iter().map(|o| o.len()).collect();
        let (infos, mut plan) = routing::plan(self.route_all(inputs, &out_lens));
        self.timings.probe_s += started.elapsed().as_secs_f64();
        // 1b. The CPU share: the last hardware-decodable images of the batch,
        //     and the offloaded CUDA-decoder images, decoded on the CPUs while
        //     the engines decode the rest.
        let hw_count = plan.hw.len();
        let share_list = self.share.split(&mut plan.hw, &mut plan.cuda);
        // 1c. The GPU-Huffman share: the hardware-decodable images just before the
        //     CPU share's, decoded by the GPU-hybrid backend beside the engines.
        let mut gpu_list = self.huffman.split(hw_count, &mut plan.hw);

        // 2. Device pointers of every output (the stream waits for earlier work
        //    on them; the guards record our writes when dropped at the end).
        let guards: Vec<_> = outputs
            .iter_mut()
            .map(|o| o.device_ptr_mut(stream))
            .collect();
        let dst: Vec<CUdeviceptr> = guards.iter().map(|g| g.0).collect();
        let batch = Batch {
            inputs,
            infos: &infos,
            dst: &dst,
            stream,
            usage,
        };
        // 2a. The engines' host wait for the outputs (see `wait_for_outputs`).
        if !usage.outputs_idle {
            self.wait_for_outputs(stream, &mut plan, &mut gpu_list);
        }
        // 2b. The shares' staging, and the GPU-Huffman lane out of `self`.
        let share_job = self.share.start(&self.ctx, batch, &share_list, &mut plan);
        let huffman_job = self.huffman.start(&self.ctx, batch, &gpu_list, &mut plan);

        // The shares and the CUDA decoder on threads of their own while this thread runs the
        // engines (step 3): the CUDA decoder's host phases (Huffman decoding on the CPU)
        // would otherwise add their whole time to the batch after the engines' part.
        let (ctx, cpu) = (&self.ctx, &*self.cpu);
        let cuda_list = std::mem::take(&mut plan.cuda);
        let cuda_on_own = !cuda_list.is_empty() && self.cuda.begin(stream);
        // The images routed to the CPU from the start (CMYK, say), decoded on the
        // host meanwhile too: after the engines, a whole CPU decode of a large image
        // is added to every batch that has one. Copied to the device after step 4.
        let early_cpu = std::mem::take(&mut plan.cpu);
        let beside = std::thread::scope(|s| {
            let early = (!early_cpu.is_empty()).then(|| {
                let list = &early_cpu;
                spawn_or_run(s, "stoker-cpu-route", move || {
                    let started = Instant::now();
                    (fallback::decode_list(cpu, batch, list), started.elapsed())
                })
            });
            let gpu_list = &gpu_list;
            let huffman = huffman_job.map(|job| move || job.run(ctx, inputs, gpu_list));
            let huffman = huffman.map(|f| spawn_or_run(s, "stoker-gpu-huffman", f));
            let share_list = &share_list;
            let share = share_job.map(|job| move || job.run(cpu, batch, share_list));
            let share = share.map(|f| spawn_or_run(s, "stoker-cpu-share", f));
            // 4. CUDA decoder, beside the engines.
            let (cuda_path, list) = (&mut self.cuda, &cuda_list);
            let cuda_job = move || cuda_path.decode_list(ctx, batch, list, cuda_on_own);
            let cuda = (!list.is_empty()).then(|| spawn_or_run(s, "stoker-cuda-decode", cuda_job));
            // 3. Hardware engines.
            let mut engines_part = (0usize, 0.0f64);
            if let Some(hw) = self.hw.as_mut().filter(|_| !plan.hw.is_empty()) {
                let (staging, timings) = (&mut self.staging, &mut self.timings);
                engines_part = hardware::decode_stage(hw, ctx, staging, timings, batch, &mut plan);
            }
            let cuda_done = cuda.map(|j| {
                j.join().unwrap_or_else(|_| {
                    tracing::warn!("the CUDA decoder's thread panicked; its images go to the CPU");
                    CudaDone::lost(list)
                })
            });
            Beside {
                share: share.map(|j| j.join()),
                huffman: huffman.map(|j| j.join()),
                engines: engines_part,
                cuda: cuda_done,
                early_cpu: early.map(|j| j.join()),
            }
        });
        let lists = Lists {
            share: &share_list,
            gpu: &gpu_list,
            cuda: &cuda_list,
            early_cpu: &early_cpu,
        };
        self.finish_stages(beside, lists, cuda_on_own, batch, &mut plan);

        drop(guards);
        self.tally(plan, n, call_started)
    }

    /// Steps 4' to 5 of [`decode_batch_for`](Self::decode_batch_for): what ran
    /// beside the engines back into the plan (and its pixels onto the device),
    /// then the CPU for what is left.
    fn finish_stages(
        &mut self,
        beside: Beside,
        lists: Lists<'_>,
        cuda_on_own: bool,
        batch: Batch<'_>,
        plan: &mut Plan,
    ) {
        let ctx = &self.ctx;
        let main_part = MainPart {
            engines: beside.engines,
            cuda: (beside.cuda.as_ref()).map_or((0, 0.0), |d| d.part(lists.cuda)),
        };
        if let Some(done) = beside.cuda {
            let timings = &mut self.timings;
            (self.cuda).finish(done, cuda_on_own, lists.cuda, batch, plan, timings);
        }
        // 4'. Images a failed engine lane gave back to the CUDA decoder.
        self.cuda.decode_stage(ctx, &mut self.timings, batch, plan);

        // 4a. The GPU-Huffman share back on the caller's stream.
        let timings = &mut self.timings;
        (self.huffman).finish(ctx, beside.huffman, batch, lists.gpu, plan, timings);
        // 4b. The CPU share's pixels copied on the share stream.
        (self.share).finish(beside.share, batch, lists.share, plan, timings, main_part);
        // 4c. The images routed to the CPU, decoded meanwhile, copied to the device.
        match beside.early_cpu {
            Some(Ok((decoded, took))) => {
                timings.cpu_s += took.as_secs_f64();
                fallback::deliver(batch, decoded, plan);
            }
            Some(Err(_)) => {
                tracing::warn!("the CPU route's thread panicked; its images are decoded again");
                plan.cpu.extend_from_slice(lists.early_cpu);
            }
            None => {}
        }
        // 5. CPU for the rest (failed on the GPU, left by a share), copied to the device.
        fallback::decode_stage(&self.cpu, timings, batch, plan);
    }

    /// Step 1 of [`decode_batch`](Self::decode_batch) for every input; see
    /// `routing::route_batch`.
    fn route_all(&mut self, inputs: &[&[u8]], out_lens: &[usize]) -> Vec<Decoded> {
        let limits = &self.options.limits;
        match &mut self.hw {
            Some(hw) => routing::route_batch(
                Some((&mut hw.check_streams, &self.ctx)),
                limits,
                inputs,
                out_lens,
            ),
            None => routing::route_batch(None, limits, inputs, out_lens),
        }
    }

    /// Step 2a. nvJPEG's hardware batched decode writes its outputs when it
    /// is called, not when the stream gets there: a stream wait does not
    /// order it, a host wait does (torchcodec #1634, nvJPEG 12.3-13.2). So
    /// before the engines (or the GPU-Huffman lane) write, wait on the host
    /// for what is queued on the caller's stream so far, which includes every
    /// earlier use of the outputs (waited for in step 2). If that cannot be
    /// done, those images take the CUDA path, which keeps stream order.
    /// Skipped when the caller has waited for the outputs itself
    /// (`decode_batch_idle_outputs`).
    fn wait_for_outputs(&mut self, stream: &CudaStream, plan: &mut Plan, gpu: &mut Vec<usize>) {
        if plan.hw.is_empty() && gpu.is_empty() {
            return;
        }
        let waiting = Instant::now();
        let waited = self.options.waits.synchronize(stream);
        self.timings.stream_wait_s += waiting.elapsed().as_secs_f64();
        if let Err(e) = waited {
            tracing::warn!(
                "cannot wait for the caller's stream ({e}); this batch's hardware \
                 images take the CUDA path"
            );
            plan.cuda.append(&mut plan.hw);
            plan.cuda.append(gpu);
        }
    }

    /// The end of a call: timings, route counters, one result per input.
    fn tally(&mut self, plan: Plan, n: usize, call_started: Instant) -> Vec<Decoded> {
        self.timings.calls += 1;
        self.timings.images += n as u64;
        self.timings.total_s += call_started.elapsed().as_secs_f64();
        plan.results
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
}

/// What the stages beside the engines (and the engines) gave back.
struct Beside {
    share: Option<std::thread::Result<ShareDone>>,
    huffman: Option<std::thread::Result<HuffmanDone>>,
    /// Images and seconds of the engines' part (the CPU share's balance).
    engines: (usize, f64),
    cuda: Option<CudaDone>,
    /// The images routed to the CPU from the start, decoded, and how long it took.
    early_cpu: Option<std::thread::Result<(fallback::CpuResults, Duration)>>,
}

/// The images each stage beside the engines took.
struct Lists<'a> {
    share: &'a [usize],
    gpu: &'a [usize],
    cuda: &'a [usize],
    early_cpu: &'a [usize],
}

/// The error of every image when the outputs or the regions do not match the
/// inputs one to one, else `None`: one per input, output or region, whichever are more
/// (no inputs and some outputs is an error too, not an empty success).
fn shape_errors(n: usize, outputs: usize, usage: BatchUse<'_>) -> Option<Vec<Decoded>> {
    if outputs != n {
        return Some(
            (0..n.max(outputs))
                .map(|_| Err(DecodeError::BatchShape { inputs: n, outputs }))
                .collect(),
        );
    }
    let regions = usage.regions.filter(|r| r.len() != n)?;
    Some(
        (0..n.max(regions.len()))
            .map(|_| {
                Err(DecodeError::RegionsShape {
                    inputs: n,
                    regions: regions.len(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Region;

    /// The loader moves a decoder into its GPU worker thread.
    #[test]
    fn gpu_decoder_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<GpuDecoder>();
        assert_send::<GpuDecoderOptions>();
    }

    /// No inputs and some outputs (or regions) returned no result at all, which a
    /// caller reading one result per output took for success.
    #[test]
    fn no_inputs_and_some_outputs_or_regions_is_a_shape_error_not_an_empty_success() {
        let errs = shape_errors(0, 3, BatchUse::default()).expect("a shape error");
        assert_eq!(errs.len(), 3);
        assert!(errs.iter().all(|r| matches!(
            r,
            Err(DecodeError::BatchShape {
                inputs: 0,
                outputs: 3
            })
        )));
        let regions = [Region {
            x: 0,
            y: 0,
            width: 1,
            height: 1,
        }; 2];
        let usage = BatchUse {
            regions: Some(&regions),
            ..BatchUse::default()
        };
        let errs = shape_errors(0, 0, usage).expect("a shape error");
        assert_eq!(errs.len(), 2);
        assert!(errs.iter().all(|r| matches!(
            r,
            Err(DecodeError::RegionsShape {
                inputs: 0,
                regions: 2
            })
        )));
        assert!(shape_errors(0, 0, BatchUse::default()).is_none());
        assert_eq!(
            shape_errors(2, 1, BatchUse::default()).map(|e| e.len()),
            Some(2)
        );
    }
}
