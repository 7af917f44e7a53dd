//! GPU backend: nvJPEG hardware engines (batched) for single-scan baseline
//! files, the nvJPEG CUDA decoder (hybrid backend, decoupled API) for the rest
//! of what nvJPEG takes, and the CPU backend for whatever nvJPEG rejects — per
//! image, never failing the whole batch.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DevicePtrMut, PinnedHostSlice};
use rayon::prelude::*;

use crate::nvjpeg::{result, sys, NvJpeg, Owned};
use crate::{probe, CpuDecoder, DecodeError, ImageInfo, Limits, Route, RouteCounters, RouteCounts};

/// A CPU decode: info, route and the RGB pixels.
type CpuDecoded = Result<(ImageInfo, Route, Vec<u8>), DecodeError>;

/// Options of a [`GpuDecoder`].
///
/// # Examples
/// ```
/// use stoker_decode::GpuDecoderOptions;
/// let o = GpuDecoderOptions { hardware_lanes: 8, ..GpuDecoderOptions::default() };
/// assert!(o.hardware);
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
    pub cpu_share: f32,
}

impl Default for GpuDecoderOptions {
    fn default() -> Self {
        GpuDecoderOptions {
            limits: Limits::default(),
            hardware: true,
            hardware_lanes: 4,
            cuda_states: 4,
            cpu_share: 0.0,
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

/// One hardware decoder state and the stream it decodes on.
struct HwLane {
    /// Batched-API state created from the hardware handle; used by one thread at a time.
    state: Owned,
    /// Internal stream; joined into the caller's stream after each batch.
    stream: Arc<CudaStream>,
    /// Batch size the state was initialized for (0: must initialize).
    batch_size: usize,
}

/// The hardware-engine path.
struct Hardware {
    lanes: Vec<HwLane>,
    /// Stream object for `nvjpegDecodeBatchedSupported` checks.
    check_stream: Owned,
    /// `(engines, cores per engine)` from nvjpegGetHardwareDecoderInfo.
    engines: Option<(u32, u32)>,
    /// Declared last: destroyed after the states made from it.
    handle: Owned,
}

/// One CUDA-decoder state with its buffers.
struct CudaSlot {
    /// Recorded on the caller's stream after this slot's last host-to-device
    /// transfer, which reads the slot's pinned buffer: the next host phase on
    /// this slot waits for it (and for nothing else).
    free: Option<CudaEvent>,
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
/// the host.
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
    /// Stream of the CPU share's host-to-device copies, so they overlap the
    /// engines' work on the caller's stream; the caller's stream joins it.
    share_stream: Arc<CudaStream>,
    options: GpuDecoderOptions,
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
            match Self::create_hardware(lib, ctx, options.hardware_lanes.max(1)) {
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
        Ok(GpuDecoder {
            ctx: ctx.clone(),
            lib,
            cpu: Arc::new(CpuDecoder::new(options.limits)),
            counters: RouteCounters::default(),
            hw,
            cuda,
            staging: PinnedRing::default(),
            share_staging: PinnedRing::default(),
            share_stream: ctx.new_stream()?,
            options,
        })
    }

    fn create_hardware(
        lib: &'static NvJpeg,
        ctx: &Arc<CudaContext>,
        lanes: usize,
    ) -> Result<Hardware, DecodeError> {
        let t = lib.table();
        // SAFETY: a context is current (bound by the caller); objects are owned
        // by `Owned` values destroyed with the matching call.
        unsafe {
            let handle = Owned::new(
                result::create_ex(t, sys::NVJPEG_BACKEND_HARDWARE)?,
                t.nvjpegDestroy,
                "hardware handle",
            );
            let engines = result::hardware_info(t, handle.ptr()).ok();
            let check_stream = Owned::new(
                result::jpeg_stream_create(t, handle.ptr())?,
                t.nvjpegJpegStreamDestroy,
                "jpeg stream",
            );
            let mut out = Vec::with_capacity(lanes);
            for _ in 0..lanes {
                out.push(HwLane {
                    state: Owned::new(
                        result::jpeg_state_create(t, handle.ptr())?,
                        t.nvjpegJpegStateDestroy,
                        "hardware state",
                    ),
                    stream: ctx.new_stream()?,
                    batch_size: 0,
                });
            }
            Ok(Hardware {
                lanes: out,
                check_stream,
                engines,
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

    /// The nvJPEG library in use.
    pub fn library(&self) -> &'static NvJpeg {
        self.lib
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
        let n = inputs.len();
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
        if let Err(e) = self.ctx.bind_to_thread() {
            return (0..n).map(|_| Err(DecodeError::Cuda(e))).collect();
        }
        let mut results: Vec<Option<Result<(ImageInfo, Route), DecodeError>>> =
            (0..n).map(|_| None).collect();
        let mut infos: Vec<Option<ImageInfo>> = (0..n).map(|_| None).collect();
        let (mut hw_list, mut cuda_list, mut cpu_list) = (Vec::new(), Vec::new(), Vec::new());

        // 1. Probe and route.
        let t = self.lib.table();
        for i in 0..n {
            let info = match probe(inputs[i], &self.options.limits).and_then(|info| {
                info.supported()?;
                let got = outputs[i].len();
                if got < info.rgb_len() {
                    return Err(DecodeError::OutputTooSmall {
                        need: info.rgb_len(),
                        got,
                    });
                }
                Ok(info)
            }) {
                Ok(info) => info,
                Err(e) => {
                    results[i] = Some(Err(e));
                    continue;
                }
            };
            let route = match &self.hw {
                Some(hw) if info.hardware_decodable() => {
                    // SAFETY: handle and stream live, created from the same handle;
                    // the input slice outlives the calls.
                    let ok = unsafe {
                        result::stream_parse_header(
                            t,
                            hw.handle.ptr(),
                            inputs[i],
                            hw.check_stream.ptr(),
                        )
                        .and_then(|()| {
                            result::batched_supported(t, hw.handle.ptr(), hw.check_stream.ptr())
                        })
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
            match route {
                Route::NvjpegHardware => hw_list.push(i),
                Route::NvjpegCuda => cuda_list.push(i),
                _ => cpu_list.push(i),
            }
            infos[i] = Some(info);
        }

        // 1b. The CPU share: the last hardware-decodable images of the batch,
        //     decoded on the CPUs while the engines decode the rest.
        let share = self.options.cpu_share;
        let share = if share.is_nan() {
            0.0
        } else {
            share.clamp(0.0, 1.0)
        };
        let take = ((hw_list.len() as f64 * f64::from(share)).round() as usize).min(hw_list.len());
        let share_list = hw_list.split_off(hw_list.len() - take);
        // 2. Device pointers of every output (the stream waits for earlier work
        //    on them; the guards record our writes when dropped at the end).
        let mut ptrs = Vec::with_capacity(n);
        for o in outputs.iter_mut() {
            ptrs.push(o.device_ptr_mut(stream));
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
        let share_done = std::thread::scope(|s| {
            let share_job = share_buf.map(|(k, mut buf)| {
                let (cpu, share_list, infos) = (&cpu, &share_list, &infos);
                s.spawn(move || {
                    let decoded = buf.as_mut_slice().map(|slice| {
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
                                let len = out.len();
                                (i, off, len, cpu.decode_into_routed(inputs[i], out))
                            })
                            .collect::<Vec<_>>()
                    });
                    (k, buf, decoded)
                })
            });
            // 3. Hardware engines.
            if !hw_list.is_empty() {
                match self.decode_hardware(inputs, &infos, &ptrs, &hw_list, stream) {
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
                let failed = self.decode_cuda(inputs, &infos, &ptrs, &cuda_list, stream);
                for &i in &cuda_list {
                    if !failed.contains(&i) {
                        results[i] =
                            Some(Ok((infos[i].clone().expect("probed"), Route::NvjpegCuda)));
                    }
                }
                cpu_list.extend(failed);
            }

            share_job.map(|j| j.join())
        });

        // 4b. Copy the share's pixels (pinned, asynchronous) on the share stream.
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
            Some(Ok((k, buf, Err(e)))) => {
                tracing::warn!("CPU share staging unreadable ({e}); pageable copies");
                self.share_staging.put(k, buf, &self.share_stream);
                cpu_list.extend_from_slice(&share_list);
            }
            Some(Ok((k, buf, Ok(decoded)))) => {
                // Nothing queued reads the buffer (its event was waited for in
                // `take`), so this returns at once.
                match buf.as_slice() {
                    Ok(host) => {
                        for (i, off, len, r) in decoded {
                            results[i] = Some(r.and_then(|(info, _)| {
                                // SAFETY: the destination holds at least rgb_len() ==
                                // `len` bytes (checked in step 1 against the same
                                // header); the source is pinned and stays untouched
                                // until the share stream passes the event `put`
                                // records below; the share stream waited for earlier
                                // work on the output.
                                unsafe {
                                    cudarc::driver::result::memcpy_htod_async(
                                        ptrs[i].0,
                                        &host[off..off + len],
                                        self.share_stream.cu_stream(),
                                    )
                                }?;
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
            let cpu = &self.cpu;
            let decoded: Vec<(usize, CpuDecoded)> = cpu_list
                .par_iter()
                .map(|&i| (i, cpu.decode_to_vec_routed(inputs[i])))
                .collect();
            for (i, r) in decoded {
                results[i] = Some(r.and_then(|(info, route, pixels)| {
                    // SAFETY: the destination holds at least rgb_len() bytes (checked
                    // in step 1 against the same header); the copy is queued on
                    // `stream`, which waited for earlier work on the buffer; the
                    // pageable source is staged by the driver before this returns.
                    unsafe {
                        cudarc::driver::result::memcpy_htod_async(
                            ptrs[i].0,
                            &pixels,
                            stream.cu_stream(),
                        )
                    }?;
                    Ok((info, route))
                }));
            }
        }

        drop(ptrs);
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
        let (k, mut staging) = self.staging.take(&self.ctx, total)?;
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

    /// Copies the hardware list into `base` (pinned, at least the list's total
    /// bytes) and decodes it on the hardware lanes in parallel; the caller's
    /// stream joins the lanes. Returns the images of lanes that failed.
    fn run_lanes<G>(
        &mut self,
        inputs: &[&[u8]],
        infos: &[Option<ImageInfo>],
        ptrs: &[(cudarc::driver::sys::CUdeviceptr, G)],
        list: &[usize],
        stream: &CudaStream,
        base: *mut u8,
    ) -> Result<Vec<usize>, DecodeError> {
        let mut offsets = Vec::with_capacity(list.len());
        let mut off = 0usize;
        for &i in list {
            let src = inputs[i];
            // SAFETY: `base` points to at least the list's total bytes (the
            // caller's contract) and `off + src.len()` stays within that total;
            // source and destination do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), base.add(off), src.len()) };
            offsets.push(off);
            off += src.len();
        }
        let hw = self
            .hw
            .as_mut()
            .expect("hardware path exists when hw_list is non-empty");
        let lanes = hw.lanes.len().min(list.len());
        let per_lane = list.len().div_ceil(lanes);
        for lane in &hw.lanes[..lanes] {
            lane.stream.join(stream)?;
        }
        let t = self.lib.table();
        let handle = SendPtr(hw.handle.ptr());
        let ctx = &self.ctx;
        let base = SendPtr(base.cast());
        let lane_results: Vec<(usize, Result<(), DecodeError>)> = std::thread::scope(|s| {
            let mut joins = Vec::new();
            for (k, (lane, chunk)) in hw.lanes.iter_mut().zip(list.chunks(per_lane)).enumerate() {
                let offs = &offsets[k * per_lane..k * per_lane + chunk.len()];
                let outs: Vec<(u64, usize)> = chunk
                    .iter()
                    .map(|&i| {
                        let info = infos[i].as_ref().expect("probed");
                        (ptrs[i].0, info.width as usize * 3)
                    })
                    .collect();
                let lens: Vec<usize> = chunk.iter().map(|&i| inputs[i].len()).collect();
                let (handle, base) = (&handle, &base);
                joins.push(s.spawn(move || {
                    let mut run = || -> Result<(), DecodeError> {
                        ctx.bind_to_thread()?;
                        let data: Vec<*const u8> = offs
                            .iter()
                            // SAFETY: each offset lies inside the staging buffer.
                            .map(|&o| unsafe { base.0.cast::<u8>().add(o).cast_const() })
                            .collect();
                        let mut images: Vec<sys::nvjpegImage_t> = outs
                            .iter()
                            .map(|&(ptr, pitch)| {
                                let mut img = sys::nvjpegImage_t::default();
                                img.channel[0] = ptr as *mut u8;
                                img.pitch[0] = pitch;
                                img
                            })
                            .collect();
                        if lane.batch_size != chunk.len() {
                            lane.batch_size = 0;
                            // SAFETY: handle and this lane's state are live; the state
                            // is used by this thread only.
                            result::check("nvjpegDecodeBatchedInitialize", unsafe {
                                (t.nvjpegDecodeBatchedInitialize)(
                                    handle.0,
                                    lane.state.ptr(),
                                    chunk.len() as i32,
                                    1,
                                    sys::NVJPEG_OUTPUT_RGBI,
                                )
                            })?;
                            lane.batch_size = chunk.len();
                        }
                        // SAFETY: `data`/`lens`/`images` have chunk.len() entries; the
                        // bitstreams live in pinned staging until `staging_free`
                        // completes; each output holds width*3*height bytes
                        // (checked against the probed header).
                        let r = result::check("nvjpegDecodeBatched", unsafe {
                            (t.nvjpegDecodeBatched)(
                                handle.0,
                                lane.state.ptr(),
                                data.as_ptr(),
                                lens.as_ptr(),
                                images.as_mut_ptr(),
                                lane.stream.cu_stream().cast(),
                            )
                        });
                        if r.is_err() {
                            // nvjpeg.h: after a failed batch, initialize again.
                            lane.batch_size = 0;
                        }
                        r
                    };
                    (k, run())
                }));
            }
            joins
                .into_iter()
                .map(|j| {
                    j.join().unwrap_or_else(|_| {
                        (
                            usize::MAX,
                            Err(DecodeError::Panicked {
                                decoder: "nvjpeg",
                                message: "hardware lane thread panicked".into(),
                            }),
                        )
                    })
                })
                .collect()
        });
        for lane in &hw.lanes[..lanes] {
            stream.join(&lane.stream)?;
        }
        let mut failed = Vec::new();
        for (k, r) in lane_results {
            if let Err(e) = r {
                if k == usize::MAX {
                    return Err(e);
                }
                tracing::debug!("hardware lane {k} failed: {e}");
                failed.extend_from_slice(
                    &list[k * per_lane..(k * per_lane + per_lane).min(list.len())],
                );
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
                    match stream.record_event(None) {
                        Ok(ev) => slot.free = Some(ev),
                        Err(e) => {
                            tracing::warn!("recording a slot event failed ({e}); synchronizing");
                            slot.free = None;
                            stream.synchronize()?;
                        }
                    }
                    // SAFETY: as above; the device phase reads the slot's device
                    // buffer, ordered after the transfer on the same stream.
                    unsafe {
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
                    }
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
        match stream.record_event(None) {
            Ok(ev) => self.free[k] = Some(ev),
            Err(e) => {
                // Without the event the next user could overwrite it in flight.
                tracing::warn!("recording a staging event failed ({e}); synchronizing");
                if let Err(e) = stream.synchronize() {
                    tracing::warn!("stream synchronize failed: {e}");
                }
            }
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

    #[test]
    fn no_gpu_is_an_error_not_a_panic() {
        match cuda_context(0) {
            Ok(_) => println!("a GPU is present; nothing to check"),
            Err(DecodeError::NoGpu { reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("want NoGpu, got {e}"),
        }
    }
}
