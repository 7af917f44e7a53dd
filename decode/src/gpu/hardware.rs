//! Step 3 of a batch: the hardware JPEG engines. The batch's hardware list is
//! copied into pinned staging and split over lanes (a batched-API state and a
//! stream each), which parse and submit in parallel, one thread per lane.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};

use super::batch::{Batch, Plan};
use super::device::record_or_synchronize;
use super::options::{GpuDecoderOptions, WaitMode};
use super::staging::{stage_bitstreams, PinnedRing};
use crate::nvjpeg::{
    Backend, BatchedState, CachedMemory, Handle, JpegStream, NvJpeg, NvjpegStatus, OutputImage,
};
use crate::threads::spawn_or_run;
use crate::{DecodeError, DecodeTimings, ImageInfo, Route};

/// The batch size (whole decoder, split over the lanes) that
/// [`GpuDecoderOptions::hardware_preallocate`] sizes the engines' memory for
/// (the loader's and the benchmarks' default batch).
const PREALLOCATE_BATCH: usize = 256;
/// Image size (width, height) that preallocation is hinted with: a typical
/// ImageNet-like photo (500×375 in the bench set) fits.
const PREALLOCATE_SIZE: (u32, u32) = (640, 480);
/// Most JPEG streams for parallel step-1 checks.
const MAX_CHECK_STREAMS: usize = 16;

/// A batched-API decoder state and the batch size it was initialized for.
pub(super) struct LaneState {
    state: BatchedState,
    /// Batch size `state` was initialized for (0: must initialize).
    batch_size: usize,
    /// Recorded on the lane's stream after this state's last
    /// `nvjpegDecodeBatched`: the next initialize or decode on the state
    /// waits for it on the host. nvjpeg.h: "Any currently running batched
    /// decoding should be finished before calling" initialize, and a state
    /// holds one batch's buffers (nvImageCodec syncs the same way).
    done: Option<CudaEvent>,
}

impl LaneState {
    fn new(state: BatchedState) -> LaneState {
        LaneState {
            state,
            batch_size: 0,
            done: None,
        }
    }
}

/// Batched decoder states used in turn (one call each), and the stream they
/// decode on.
pub(super) struct HwLane {
    /// At least one, made from this lane's handle (its own, or the shared
    /// one); used by one thread at a time. More than one
    /// ([`GpuDecoderOptions::hardware_states_per_lane`]) lets a call prepare on
    /// one state while the previous call's work on another is still in flight.
    states: Vec<LaneState>,
    /// The state the next call uses.
    turn: usize,
    /// This lane's own handle (with
    /// [`GpuDecoderOptions::hardware_handle_per_lane`], and for the
    /// GPU-Huffman lane), else `None`: the states hold the shared one.
    /// Declared after `states`: released after the states made from it.
    handle: Option<Arc<Handle>>,
    /// Internal stream; joined into the caller's stream after each batch.
    pub(super) stream: Arc<CudaStream>,
    /// How the host waits for a state's previous batch: the kind of event
    /// recorded.
    wait: WaitMode,
}

impl HwLane {
    /// A batched lane on nvJPEG's GPU-hybrid backend (Huffman decoding on the
    /// GPU), or `None` (logged) when the library or device refuses it.
    pub(super) fn gpu_hybrid(
        lib: &'static NvJpeg,
        (ctx, priority): (&Arc<CudaContext>, i32),
        wait: WaitMode,
        memory: Option<&Arc<CachedMemory>>,
    ) -> Option<HwLane> {
        let lane = Handle::new(lib, Backend::GpuHybrid, memory).and_then(|handle| {
            let state = BatchedState::new(&handle)?;
            Ok(HwLane {
                states: vec![LaneState::new(state)],
                turn: 0,
                handle: Some(handle),
                stream: ctx.new_stream_with_priority(priority)?,
                wait,
            })
        });
        lane.map_err(|e| {
            tracing::info!("nvJPEG GPU-hybrid backend unavailable ({e}); gpu_huffman_share ignored")
        })
        .ok()
    }

    /// One `nvjpegDecodeBatched` call on this lane's next state and its
    /// stream (after `nvjpegDecodeBatchedInitialize` when the batch size
    /// changed), adding the host time of both to `times`.
    ///
    /// # Safety
    /// `data`, `lens` and `outs` have one entry per image; each bitstream
    /// stays readable until the lane's stream has passed this call; each
    /// output `(pointer, pitch)` addresses `pitch * height` writable device
    /// bytes for its image's header; a CUDA context is current.
    pub(super) unsafe fn decode_batched(
        &mut self,
        data: &[*const u8],
        lens: &[usize],
        outs: &[(u64, usize)],
        times: &mut LaneTimes,
    ) -> Result<(), DecodeError> {
        let n = data.len();
        let mut images: Vec<OutputImage> = outs
            .iter()
            .map(|&(ptr, pitch)| OutputImage::interleaved(ptr, pitch))
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
            // SAFETY: the state's previous batch is done (its event was
            // waited for just above, or it never had one).
            let r = unsafe { ls.state.initialize(n) };
            times.init += initializing.elapsed().as_secs_f64();
            r?;
            ls.batch_size = n;
        }
        let decoding = Instant::now();
        // SAFETY: the state was initialized for n images and `images` has n
        // entries; the caller's contract covers the inputs and outputs.
        let r = unsafe { ls.state.decode(data, lens, &mut images, &self.stream) };
        times.decode += decoding.elapsed().as_secs_f64();
        if r.is_err() {
            // nvjpeg.h: after a failed batch, initialize again.
            ls.batch_size = 0;
        }
        // Whatever the call queued, the state is busy until the stream passes here.
        ls.done = record_or_synchronize(&self.stream, self.wait, "a lane state event")?;
        r
    }
}

/// One hardware lane's host time in a batch.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LaneTimes {
    /// Copying the lane's bitstreams into pinned staging.
    pub(super) copy: f64,
    /// Waiting for the state's previous batch to finish.
    pub(super) state_wait: f64,
    /// Inside `nvjpegDecodeBatchedInitialize`.
    pub(super) init: f64,
    /// Inside `nvjpegDecodeBatched` (host side).
    pub(super) decode: f64,
}

impl LaneTimes {
    /// The lane's whole host time.
    pub(super) fn total(&self) -> f64 {
        self.copy + self.state_wait + self.init + self.decode
    }
}

/// The hardware-engine path.
pub(super) struct Hardware {
    pub(super) lanes: Vec<HwLane>,
    /// JPEG streams for step 1's `nvjpegDecodeBatchedSupported` checks, all
    /// made from `handle`, at least one: parallel chunk `p` uses the `p`-th
    /// only (JPEG streams are not thread safe).
    pub(super) check_streams: Vec<JpegStream>,
    /// `(engines, cores per engine)` from nvjpegGetHardwareDecoderInfo.
    pub(super) engines: Option<(u32, u32)>,
    /// Whether `nvjpegDecodeBatchedPreAllocate` succeeded on every lane.
    pub(super) preallocated: bool,
    // The shared handle is held by the states and check streams made from
    // it, and released after the last of them.
}

impl Hardware {
    /// The engines' handle, check streams and lanes, on the context current
    /// on this thread, allocating through `memory` when given.
    pub(super) fn new(
        lib: &'static NvJpeg,
        (ctx, priority): (&Arc<CudaContext>, i32),
        options: &GpuDecoderOptions,
        memory: Option<&Arc<CachedMemory>>,
    ) -> Result<Hardware, DecodeError> {
        let lanes = options.hardware_lanes.max(1);
        let handle = Handle::new(lib, Backend::Hardware, memory)?;
        let engines = handle.hardware_info().ok();
        // nvJPEG docs: zero engines "indicates that hardware decoder is not
        // available" (e.g. a MIG slice without a JPEG engine).
        if let Some((0, _)) = engines {
            return Err(DecodeError::Nvjpeg {
                call: "nvjpegGetHardwareDecoderInfo (0 engines)",
                status: NvjpegStatus::ARCH_MISMATCH,
            });
        }
        let checks = std::thread::available_parallelism()
            .map_or(1, |c| c.get())
            .clamp(1, MAX_CHECK_STREAMS);
        let mut check_streams = Vec::with_capacity(checks);
        for _ in 0..checks {
            check_streams.push(JpegStream::new(&handle)?);
        }
        // The preallocation hint: this lane's share of a typical batch,
        // rounded up to whole engine cores like the lane chunks.
        let cores = engines.map_or(1, |(_, c)| (c as usize).max(1));
        let hint_batch = PREALLOCATE_BATCH.div_ceil(lanes).div_ceil(cores) * cores;
        let mut preallocate = options.hardware_preallocate;
        let mut out = Vec::with_capacity(lanes);
        for k in 0..lanes {
            out.push(Self::lane(
                (lib, memory),
                (ctx, priority),
                options,
                &handle,
                k,
                (hint_batch, &mut preallocate),
            )?);
        }
        Ok(Hardware {
            lanes: out,
            check_streams,
            engines,
            preallocated: options.hardware_preallocate && preallocate,
        })
    }

    /// Hardware lane `k`: its own handle if asked for (the shared one if that
    /// fails), its states, preallocated for `hint_batch` images while
    /// `preallocate` holds (cleared, with one log, on the first refusal).
    fn lane(
        (lib, memory): (&'static NvJpeg, Option<&Arc<CachedMemory>>),
        (ctx, priority): (&Arc<CudaContext>, i32),
        options: &GpuDecoderOptions,
        shared: &Arc<Handle>,
        k: usize,
        (hint_batch, preallocate): (usize, &mut bool),
    ) -> Result<HwLane, DecodeError> {
        // A lane whose own handle cannot be had uses the shared one
        // (rather than losing the hardware path altogether).
        let own = if options.hardware_handle_per_lane {
            match Handle::new(lib, Backend::Hardware, memory) {
                Ok(h) => Some(h),
                Err(e) => {
                    tracing::info!("hardware lane {k}: no handle of its own ({e}); sharing one");
                    None
                }
            }
        } else {
            None
        };
        let h = own.as_ref().unwrap_or(shared);
        let states_per_lane = options.hardware_states_per_lane.max(1);
        let mut states = Vec::with_capacity(states_per_lane);
        for _ in 0..states_per_lane {
            let mut state = BatchedState::new(h)?;
            if *preallocate {
                match state.preallocate(hint_batch, PREALLOCATE_SIZE) {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::info!(
                            "nvjpegDecodeBatchedPreAllocate is missing from {}; \
                             hardware lanes allocate while decoding",
                            lib.path().display()
                        );
                        *preallocate = false;
                    }
                    Err(e) => {
                        tracing::info!(
                            "{e} on hardware lane {k}; the lanes allocate while decoding"
                        );
                        *preallocate = false;
                    }
                }
            }
            states.push(LaneState::new(state));
        }
        Ok(HwLane {
            states,
            turn: 0,
            handle: own,
            stream: ctx.new_stream_with_priority(priority)?,
            wait: options.waits,
        })
    }

    /// How many lanes decode with a handle of their own.
    pub(super) fn lane_handles(&self) -> usize {
        self.lanes.iter().filter(|l| l.handle.is_some()).count()
    }

    /// Copies the hardware list into pinned staging and decodes it on the
    /// hardware lanes in parallel. Returns the images of lanes that failed.
    fn decode(
        &mut self,
        ctx: &Arc<CudaContext>,
        staging: &mut PinnedRing,
        timings: &mut DecodeTimings,
        batch: Batch<'_>,
        list: &[usize],
    ) -> Result<Vec<usize>, DecodeError> {
        let total: usize = list.iter().map(|&i| batch.inputs[i].len()).sum();
        // Waits only until the batch before last stopped reading this buffer.
        let waited = Instant::now();
        let taken = staging.take(ctx, total);
        timings.staging_wait_s += waited.elapsed().as_secs_f64();
        let (k, mut buf) = taken?;
        let r = buf
            .as_mut_slice()
            .map_err(DecodeError::from)
            .and_then(|dst| self.run_lanes(ctx, timings, batch, list, dst));
        if r.is_err() {
            // Lanes may have queued work that reads the buffer before failing.
            for lane in &self.lanes {
                if let Err(e) = lane.stream.synchronize() {
                    tracing::warn!("lane stream synchronize failed: {e}");
                }
            }
        }
        // The caller's stream joined the lanes: the buffer is free once it passes here.
        staging.put(k, buf, batch.stream);
        r
    }

    /// Decodes the hardware list on the lanes in parallel, each lane copying
    /// its chunk's bitstreams into its own part of `dst` (pinned, at least
    /// the list's total bytes, not read by queued device work) on its own
    /// thread first; the caller's stream joins the lanes. Returns the images
    /// of lanes that failed.
    fn run_lanes(
        &mut self,
        ctx: &Arc<CudaContext>,
        timings: &mut DecodeTimings,
        batch: Batch<'_>,
        list: &[usize],
        dst: &mut [u8],
    ) -> Result<Vec<usize>, DecodeError> {
        let cores = self.engines.map(|(_, c)| c as usize);
        let sizes = lane_chunks(list.len(), self.lanes.len(), cores);
        let lanes = sizes.len();
        let starts: Vec<usize> = sizes
            .iter()
            .scan(0usize, |at, &len| {
                let start = *at;
                *at += len;
                Some(start)
            })
            .collect();
        for lane in &self.lanes[..lanes] {
            lane.stream.join(batch.stream)?;
        }
        let wall = Instant::now();
        let lane_results: Vec<LaneResult> = std::thread::scope(|s| {
            let mut joins = Vec::new();
            // Each lane's bitstreams go to its own part of `dst`, one after
            // another in list order, so the parts are disjoint.
            let mut rest = dst;
            for (k, lane) in self.lanes[..lanes].iter_mut().enumerate() {
                let chunk = &list[starts[k]..starts[k] + sizes[k]];
                let bytes: usize = chunk.iter().map(|&i| batch.inputs[i].len()).sum();
                let (part, tail) = std::mem::take(&mut rest).split_at_mut(bytes);
                rest = tail;
                joins.push(spawn_or_run(s, "stoker-nvjpeg-lane", move || {
                    run_lane(lane, ctx, batch, chunk, part, k)
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
        timings.hw_lanes_s += wall.elapsed().as_secs_f64();
        let mut slowest = 0.0f64;
        for (_, lt, _) in &lane_results {
            timings.staging_copy_s += lt.copy;
            timings.stream_wait_s += lt.state_wait;
            timings.hw_init_s += lt.init;
            timings.hw_decode_s += lt.decode;
            slowest = slowest.max(lt.total());
        }
        timings.hw_lane_max_s += slowest;
        for lane in &self.lanes[..lanes] {
            batch.stream.join(&lane.stream)?;
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
}

/// A lane's index (`usize::MAX`: its thread panicked), host times and outcome.
type LaneResult = (usize, LaneTimes, Result<(), DecodeError>);

/// One lane's thread: copies `chunk`'s bitstreams into `part` (this lane's
/// own part of the pinned staging) and decodes them on the lane.
fn run_lane(
    lane: &mut HwLane,
    ctx: &Arc<CudaContext>,
    batch: Batch<'_>,
    chunk: &[usize],
    part: &mut [u8],
    k: usize,
) -> LaneResult {
    let mut times = LaneTimes::default();
    let outs: Vec<(u64, usize)> = chunk
        .iter()
        .map(|&i| (batch.dst[i], batch.info(i).width as usize * 3))
        .collect();
    let mut run = || -> Result<(), DecodeError> {
        ctx.bind_to_thread()?;
        let copying = Instant::now();
        let (data, lens) = stage_bitstreams(part, batch.inputs, chunk);
        times.copy = copying.elapsed().as_secs_f64();
        // SAFETY: `data`/`lens`/`outs` have chunk.len() entries; the
        // bitstreams live in pinned staging until the staging event
        // completes; each output holds width*3*height bytes (checked
        // against the probed header); this thread alone uses the lane.
        unsafe { lane.decode_batched(&data, &lens, &outs, &mut times) }
    };
    let r = run();
    (k, times, r)
}

/// Step 3: the engines decode the plan's hardware list; the images of a
/// failed lane move to the CUDA decoder (or, when nvJPEG cannot take them,
/// the CPU), and a batch that fails as a whole moves to the CUDA decoder.
/// Returns the images and seconds of the engines' part (for the automatic
/// CPU share).
pub(super) fn decode_stage(
    hw: &mut Hardware,
    ctx: &Arc<CudaContext>,
    staging: &mut PinnedRing,
    timings: &mut DecodeTimings,
    batch: Batch<'_>,
    plan: &mut Plan,
) -> (usize, f64) {
    let engines_started = Instant::now();
    let decoded = hw.decode(ctx, staging, timings, batch, &plan.hw);
    let engines_part = (plan.hw.len(), engines_started.elapsed().as_secs_f64());
    match decoded {
        Ok(failed) => {
            for &i in &plan.hw {
                if !failed.contains(&i) {
                    plan.results[i] = Some(Ok((batch.info(i).clone(), Route::NvjpegHardware)));
                }
            }
            for i in failed {
                if batch.infos[i]
                    .as_ref()
                    .is_some_and(ImageInfo::nvjpeg_decodable)
                {
                    plan.cuda.push(i);
                } else {
                    plan.cpu.push(i);
                }
            }
        }
        Err(e) => {
            tracing::warn!("hardware batch failed, retrying its images on the CUDA path: {e}");
            plan.cuda.extend_from_slice(&plan.hw);
        }
    }
    engines_part
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
