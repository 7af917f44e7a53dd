//! The CPU share: the last hardware-decodable images of each batch, and some
//! of its CUDA-decoder images (`offload`), decoded on the CPUs (a thread pool
//! of the decoder's own) into pinned staging while the engines decode the
//! rest, then copied to their outputs on a stream of its own
//! ([`GpuDecoderOptions::cpu_share`], [`GpuDecoderOptions::cpu_share_auto`],
//! [`GpuDecoderOptions::cpu_offload`]).

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaStream, DriverError, PinnedHostSlice};
use rayon::prelude::*;

use super::batch::{Batch, Decoded, Plan};
use super::offload::{Measured, OffloadControl};
use super::options::{share_fraction, GpuDecoderOptions};
use super::staging::PinnedRing;
use crate::threads::in_pool;
use crate::{CpuDecoder, DecodeError, DecodeTimings, ImageInfo, Route};

/// The share's staging, stream, threads and fraction.
pub(super) struct CpuShare {
    /// Pinned staging for the share's pixels, grown on demand.
    pub(super) staging: PinnedRing,
    /// Stream of the share's host-to-device copies, so they overlap the
    /// engines' work on the caller's stream; the caller's stream joins it.
    pub(super) stream: Arc<CudaStream>,
    /// The share's threads (`cpu_share_threads`), made with the decoder when
    /// a share is configured; `None`: stoker's decode pool (see `threads::in_pool`).
    pool: Option<Arc<rayon::ThreadPool>>,
    /// The share in use: `cpu_share`, or with `cpu_share_auto` the
    /// controller's current fraction.
    control: ShareControl,
    /// How many CUDA-decoder images go to the share's threads.
    offload: OffloadControl,
    /// The current batch's list holds its hardware images first, then this
    /// many offloaded CUDA-decoder images (set by `split`).
    offloaded: usize,
    /// CUDA-decoder images of the current batch before the split.
    cuda_total: usize,
}

/// One image of the share: its index, its offset in the staging, the bytes
/// of it to copy, and the decode's outcome.
type SharePart = (usize, usize, Range<usize>, Decoded);

/// The GPU side of a batch, for the controllers: the engines' images and
/// seconds (on the calling thread), and the CUDA decoder's (beside them, on a
/// thread of its own).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MainPart {
    pub(super) engines: (usize, f64),
    pub(super) cuda: (usize, f64),
}

/// One batch's share, owned by the thread that decodes it.
pub(super) struct ShareJob {
    /// Index of `buf` in the ring.
    k: usize,
    /// The list's images from this position on are offloaded CUDA-decoder images.
    offloaded_from: usize,
    /// Pinned, at least the share's total RGB bytes, not read by queued device work.
    buf: PinnedHostSlice<u8>,
    pool: Option<Arc<rayon::ThreadPool>>,
}

/// What a [`ShareJob`] gives back.
pub(super) struct ShareDone {
    k: usize,
    buf: PinnedHostSlice<u8>,
    /// Per image, or the error of reaching the staging.
    decoded: Result<Vec<SharePart>, DriverError>,
    /// Wall time of the decode.
    seconds: f64,
    /// Thread time of the decodes of the hardware images and of the
    /// offloaded ones (to split the wall time between the two controllers).
    thread_s: [f64; 2],
}

impl CpuShare {
    /// The share's stream (on `ctx`), pool (when a share is configured) and
    /// starting fraction.
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        options: &GpuDecoderOptions,
        priority: i32,
    ) -> Result<CpuShare, DecodeError> {
        let control = ShareControl::new(options);
        let offload = OffloadControl::new(options.cpu_offload);
        let stream = ctx.new_stream_with_priority(priority)?;
        Ok(CpuShare {
            staging: PinnedRing::new(options.waits),
            stream,
            pool: (control.fraction > 0.0 || offload.enabled())
                .then(|| share_pool(options))
                .flatten(),
            control,
            offload,
            offloaded: 0,
            cuda_total: 0,
        })
    }

    /// The fraction of each batch's CUDA-decoder images decoded on the CPUs now.
    pub(super) fn offload_fraction(&self) -> f64 {
        self.offload.fraction()
    }

    /// Where the offloaded CUDA-decoder images start in the current batch's
    /// share list of `len` images (they end it; `split` put them there).
    fn first_offloaded(&self, len: usize) -> usize {
        len - self.offloaded.min(len)
    }

    /// The fraction of each batch's hardware images decoded on the CPUs now.
    pub(super) fn fraction(&self) -> f64 {
        self.control.fraction
    }

    /// Step 1b: the share's images, taken from the end of `hw`, then the
    /// offloaded ones, taken from the end of `cuda`.
    pub(super) fn split(&mut self, hw: &mut Vec<usize>, cuda: &mut Vec<usize>) -> Vec<usize> {
        let hw_count = hw.len() as f64;
        let take = ((hw_count * self.control.fraction).round() as usize).min(hw.len());
        let mut list = hw.split_off(hw.len() - take);
        self.cuda_total = cuda.len();
        self.offloaded = self.offload.take(cuda.len());
        list.extend(cuda.split_off(cuda.len() - self.offloaded));
        list
    }

    /// The share's pixels go through pinned staging and are copied on the
    /// share stream, which waits for earlier work on the outputs (queued on
    /// the caller's stream so far) but not for this batch's nvJPEG work. When
    /// the staging cannot be had, `list` goes to the CPU stage instead.
    pub(super) fn start(
        &mut self,
        ctx: &Arc<CudaContext>,
        batch: Batch<'_>,
        list: &[usize],
        plan: &mut Plan,
    ) -> Option<ShareJob> {
        if list.is_empty() {
            return None;
        }
        let total: usize = list
            .iter()
            .map(|&i| batch.infos[i].as_ref().map_or(0, ImageInfo::rgb_len))
            .sum();
        match self
            .stream
            .join(batch.stream)
            .map_err(DecodeError::from)
            .and_then(|()| self.staging.take(ctx, total))
        {
            Ok((k, buf)) => Some(ShareJob {
                k,
                offloaded_from: self.first_offloaded(list.len()),
                buf,
                pool: self.pool.clone(),
            }),
            Err(e) => {
                tracing::warn!("CPU share staging unavailable ({e}); pageable copies");
                plan.cpu.extend_from_slice(list);
                None
            }
        }
    }

    /// Step 4b: updates the automatic share and the offload, then copies the
    /// share's pixels (pinned, asynchronous) on the share stream and has the
    /// caller's stream join it; what could not be staged goes to the CPU stage.
    pub(super) fn finish(
        &mut self,
        done: Option<std::thread::Result<ShareDone>>,
        batch: Batch<'_>,
        list: &[usize],
        plan: &mut Plan,
        timings: &mut DecodeTimings,
        main: MainPart,
    ) {
        let (n_hw, t_hw) = main.engines;
        let n_share = self.first_offloaded(list.len());
        let offloaded = list.len() - n_share;
        match &done {
            Some(Ok(done)) => {
                timings.cpu_share_s += done.seconds;
                if done.decoded.is_ok() {
                    // The wall time split between the two kinds of images by
                    // the thread time each took.
                    let [t_share, t_off] = done.thread_s;
                    let total = t_share + t_off;
                    let part = |t: f64| {
                        if total > 0.0 {
                            done.seconds * t / total
                        } else {
                            0.0
                        }
                    };
                    if n_share > 0 || offloaded == 0 {
                        self.control.update(n_hw, t_hw, n_share, part(t_share));
                    } else {
                        // Only offloaded images on the CPUs: the engines' rate
                        // without the share.
                        self.control.update(n_hw, t_hw, 0, 0.0);
                    }
                    self.offload_update(main, offloaded, part(t_off), done.seconds);
                }
            }
            // A batch without the share: the rates to compare with.
            None if list.is_empty() => {
                self.control.update(n_hw, t_hw, 0, 0.0);
                self.offload_update(main, 0, 0.0, 0.0);
            }
            _ => {}
        }
        match done {
            None => {}
            Some(Err(_)) => {
                for &i in list {
                    plan.results[i] = Some(Err(DecodeError::Panicked {
                        decoder: "cpu-share",
                        message: "CPU-share thread panicked".into(),
                    }));
                }
            }
            Some(Ok(ShareDone {
                k,
                buf,
                decoded: Err(e),
                ..
            })) => {
                tracing::warn!("CPU share staging unreadable ({e}); pageable copies");
                self.staging.put(k, buf, &self.stream);
                plan.cpu.extend_from_slice(list);
            }
            Some(Ok(ShareDone {
                k,
                buf,
                decoded: Ok(decoded),
                ..
            })) => {
                self.copy_out(&buf, decoded, batch, plan);
                self.staging.put(k, buf, &self.stream);
                if let Err(e) = batch.stream.join(&self.stream) {
                    tracing::warn!("joining the share stream failed ({e}); synchronizing");
                    if let Err(e) = self.stream.synchronize() {
                        for &i in list {
                            plan.results[i] = Some(Err(DecodeError::Cuda(e)));
                        }
                    }
                }
            }
        }
    }

    /// The offload's update from one batch's measurements.
    fn offload_update(&mut self, main: MainPart, offloaded: usize, offloaded_s: f64, share_s: f64) {
        let (n_cuda, cuda_s) = main.cuda;
        self.offload.update(
            self.cuda_total,
            Measured {
                n_cuda,
                cuda_s,
                // The CUDA decoder runs beside the engines.
                main_s: main.engines.1.max(cuda_s),
                n_offloaded: offloaded,
                offloaded_s,
                share_s,
            },
        );
    }

    /// Queues the copy of every decoded image's needed bytes from `buf` to
    /// its output on the share stream and records the results.
    fn copy_out(
        &self,
        buf: &PinnedHostSlice<u8>,
        decoded: Vec<SharePart>,
        batch: Batch<'_>,
        plan: &mut Plan,
    ) {
        let offloaded_from = self.first_offloaded(decoded.len());
        // Nothing queued reads the buffer (its event was waited for in
        // `take`), so this returns at once.
        match buf.as_slice() {
            Ok(host) => {
                for (at, (i, off, span, r)) in decoded.into_iter().enumerate() {
                    let route = if at >= offloaded_from {
                        Route::CpuOffload
                    } else {
                        Route::CpuShare
                    };
                    plan.results[i] = Some(r.and_then(|(info, _)| {
                        // An empty region copies nothing.
                        if !span.is_empty() {
                            // SAFETY: the destination holds at least rgb_len()
                            // ≥ `span.end` bytes (checked in step 1 against the
                            // same header); the source is pinned and stays
                            // untouched until the share stream passes the event
                            // `put` records after this; the share stream waited for
                            // earlier work on the output.
                            unsafe {
                                cudarc::driver::result::memcpy_htod_async(
                                    batch.dst[i] + span.start as u64,
                                    &host[off + span.start..off + span.end],
                                    self.stream.cu_stream(),
                                )
                            }?;
                        }
                        Ok((info, route))
                    }));
                }
            }
            Err(e) => {
                tracing::warn!("CPU share staging unreadable ({e})");
                for (i, ..) in decoded {
                    plan.results[i] = Some(Err(DecodeError::Cuda(e)));
                }
            }
        }
    }
}

impl ShareJob {
    /// Decodes the images of `list` (each its region only) into consecutive
    /// parts of the staging, in the share's pool.
    pub(super) fn run(mut self, cpu: &CpuDecoder, batch: Batch<'_>, list: &[usize]) -> ShareDone {
        let started = Instant::now();
        let decode_all = |slice: &mut [u8], parallel: bool| {
            let mut parts = Vec::with_capacity(list.len());
            let (mut rest, mut off) = (slice, 0usize);
            for &i in list {
                let len = batch.infos[i].as_ref().map_or(0, ImageInfo::rgb_len);
                let (part, tail) = rest.split_at_mut(len);
                parts.push((i, off, part));
                rest = tail;
                off += len;
            }
            let one = |(i, off, out): (usize, usize, &mut [u8])| {
                let t = Instant::now();
                let r = cpu.decode_region_routed(batch.inputs[i], out, batch.usage.region(i));
                let span = r
                    .as_ref()
                    .map_or(0..0, |(info, _)| batch.usage.needed(i, info));
                ((i, off, span, r), t.elapsed().as_secs_f64())
            };
            if parallel {
                parts.into_par_iter().map(one).collect::<Vec<_>>()
            } else {
                parts.into_iter().map(one).collect::<Vec<_>>()
            }
        };
        let pool = self.pool.as_deref();
        let timed = self.buf.as_mut_slice().map(|slice| match pool {
            Some(pool) => pool.install(|| decode_all(slice, true)),
            None => in_pool(|parallel| decode_all(slice, parallel)),
        });
        let mut thread_s = [0.0; 2];
        let decoded = timed.map(|parts| {
            parts
                .into_iter()
                .enumerate()
                .map(|(at, (part, secs))| {
                    thread_s[usize::from(at >= self.offloaded_from)] += secs;
                    part
                })
                .collect()
        });
        ShareDone {
            k: self.k,
            buf: self.buf,
            decoded,
            seconds: started.elapsed().as_secs_f64(),
            thread_s,
        }
    }
}

/// The CPU share in force for the next batch.
///
/// Fixed (`cpu_share`), or with `cpu_share_auto` chosen from measurements.
/// While the share is on it moves toward its balance point (both sides take
/// as long). The controller keeps two running rates: with the share, the
/// engines' part and the CPUs' images per second added (what a balanced batch
/// gets, measured while both run, so an engines' part slowed by the CPUs'
/// work counts against the share); without it, the engines' part alone. The
/// share stays on only while the first beats the second by
/// [`ShareControl::MARGIN`]; otherwise it is off (0). One batch in
/// `probe_every` runs the other way, so that a change (other work on the
/// CPUs, other images) is noticed: from [`ShareControl::PROBE_EVERY`], doubled
/// up to [`ShareControl::PROBE_MAX`] each time a probe confirms the choice.
struct ShareControl {
    /// The share for the next batch.
    fraction: f64,
    auto: bool,
    /// The share used while on: moves toward the balance point.
    balance: f64,
    /// Running images per second with the share (balanced), and without it.
    rate_on: Option<f64>,
    rate_off: Option<f64>,
    /// Whether the share is on, as chosen from the two rates.
    on: bool,
    /// Whether the next batch is a probe of the state not chosen.
    probing: bool,
    since_probe: u32,
    probe_every: u32,
}

impl ShareControl {
    /// Where the automatic share starts when `cpu_share` is 0.
    const START: f64 = 0.1;
    /// Bounds of the automatic share while on.
    const MIN: f64 = 0.02;
    const MAX: f64 = 0.5;
    /// How far one batch moves the share toward its balance point: a batch's
    /// timings are noisy, and a step changes the next batch's split.
    const GAIN: f64 = 0.3;
    /// Weight of a new batch in the running rate of the state in use (a probe
    /// replaces the other state's rate: the old value is stale).
    const RATE_WEIGHT: f64 = 0.3;
    /// The share stays on only when it is at least this much faster.
    const MARGIN: f64 = 0.01;
    const PROBE_EVERY: u32 = 16;
    const PROBE_MAX: u32 = 256;

    fn new(options: &GpuDecoderOptions) -> ShareControl {
        let asked = share_fraction(options.cpu_share);
        let start = if options.cpu_share_auto {
            (if asked > 0.0 { asked } else { Self::START }).clamp(Self::MIN, Self::MAX)
        } else {
            asked
        };
        ShareControl {
            fraction: start,
            auto: options.cpu_share_auto,
            balance: start,
            rate_on: None,
            rate_off: None,
            on: true,
            probing: false,
            since_probe: 0,
            probe_every: Self::PROBE_EVERY,
        }
    }

    /// One batch: the engines' part took `t_hw` seconds for `n_hw` images on
    /// the calling thread while the CPUs took `t_cpu` for `n_cpu` (0 and 0.0
    /// for a batch without the share). Sets the next batch's share.
    fn update(&mut self, n_hw: usize, t_hw: f64, n_cpu: usize, t_cpu: f64) {
        if !self.auto {
            return;
        }
        let rate = |n: usize, t: f64| (n > 0 && t > 0.0 && t.is_finite()).then(|| n as f64 / t);
        let (r_hw, r_cpu) = (rate(n_hw, t_hw), rate(n_cpu, t_cpu));
        // A side with images but no usable time says nothing about either rate.
        if (n_hw > 0 && r_hw.is_none()) || (n_cpu > 0 && r_cpu.is_none()) {
            return;
        }
        let fresh = std::mem::take(&mut self.probing);
        let mix = |old: Option<f64>, new: f64| match old {
            Some(old) if !fresh => old + Self::RATE_WEIGHT * (new - old),
            _ => new,
        };
        match (r_hw, r_cpu) {
            (_, Some(r_cpu)) => {
                self.rate_on = Some(mix(self.rate_on, r_hw.unwrap_or(0.0) + r_cpu));
                if let Some(r_hw) = r_hw {
                    let balance = r_cpu / (r_hw + r_cpu);
                    self.balance += Self::GAIN * (balance - self.balance);
                    self.balance = self.balance.clamp(Self::MIN, Self::MAX);
                }
            }
            (Some(r_hw), None) => self.rate_off = Some(mix(self.rate_off, r_hw)),
            (None, None) => {
                self.probing = fresh;
                return;
            }
        }
        // First the share on, then off, then whichever is faster.
        let on = match (self.rate_on, self.rate_off) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(with), Some(without)) => {
                let choice = with > without * (1.0 + Self::MARGIN);
                if choice != self.on {
                    self.on = choice;
                    self.probe_every = Self::PROBE_EVERY;
                } else if fresh {
                    self.probe_every = (self.probe_every * 2).min(Self::PROBE_MAX);
                }
                self.since_probe += 1;
                if self.since_probe >= self.probe_every {
                    self.since_probe = 0;
                    self.probing = true;
                }
                self.on != self.probing
            }
        };
        self.fraction = if on { self.balance } else { 0.0 };
    }
}

/// The CPU share's pool (`None`, with a warning, if it cannot be made: then
/// stoker's decode pool, or the calling thread, decodes the share).
fn share_pool(options: &GpuDecoderOptions) -> Option<Arc<rayon::ThreadPool>> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let n = share_threads(options, cores);
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("stoker-cpu-share-{i}"))
        .build()
    {
        Ok(pool) => Some(Arc::new(pool)),
        Err(e) => {
            tracing::warn!(
                "CPU share pool of {n} threads failed ({e}); using stoker's decode pool"
            );
            None
        }
    }
}

/// Threads for the CPU share: `cpu_share_threads`, or with 0 the cores left
/// after the hardware lanes and two more threads (the caller's and one spare),
/// at least 1. When the pool only takes CUDA-decoder images (the offload, no
/// CPU share), the CUDA decoder's slot threads are busy whenever it is, and
/// are left their cores too.
fn share_threads(options: &GpuDecoderOptions, cores: usize) -> usize {
    if options.cpu_share_threads > 0 {
        return options.cpu_share_threads;
    }
    let cuda = if options.has_cpu_share() {
        0
    } else {
        options.cuda_states
    };
    cores
        .saturating_sub(options.hardware_lanes + cuda + 2)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates batches of 256 on a machine where the engines' part runs at
    /// `hw(share)` img/s (it may slow down while the CPUs decode a share) and
    /// the CPUs at `cpu` img/s. Returns the controller and the images per
    /// second over the last `tail` of `batches` batches.
    fn run(
        options: &GpuDecoderOptions,
        hw: impl Fn(f64) -> f64,
        cpu: f64,
        batches: usize,
        tail: usize,
    ) -> (ShareControl, f64) {
        let mut c = ShareControl::new(options);
        let (mut images, mut seconds) = (0.0, 0.0);
        for b in 0..batches {
            let n_cpu = (256.0 * c.fraction).round() as usize;
            let n_hw = 256 - n_cpu;
            let (t_hw, t_cpu) = (n_hw as f64 / hw(c.fraction), n_cpu as f64 / cpu);
            if b >= batches - tail {
                images += 256.0;
                seconds += t_hw.max(t_cpu);
            }
            c.update(n_hw, t_hw, n_cpu, t_cpu);
        }
        (c, images / seconds)
    }

    fn auto() -> GpuDecoderOptions {
        GpuDecoderOptions {
            cpu_share_auto: true,
            ..GpuDecoderOptions::default()
        }
    }

    #[test]
    fn the_automatic_cpu_share_settles_where_both_sides_take_as_long() {
        // Engines 24k img/s, CPUs 6k img/s: both take as long at 6 / 30 = 0.2,
        // where the batch runs at 30k img/s instead of 24k.
        let (c, rate) = run(&auto(), |_| 24_000.0, 6_000.0, 40, 16);
        assert!((c.balance - 0.2).abs() < 0.01, "{}", c.balance);
        assert!(c.on && c.fraction == c.balance);
        // One batch in 16 measures the rate without the share.
        assert!(rate > 29_000.0 && rate < 30_000.0, "{rate}");
        // From a high start it comes down to the same point.
        let high = GpuDecoderOptions {
            cpu_share: 0.45,
            ..auto()
        };
        assert!((run(&high, |_| 24_000.0, 6_000.0, 40, 1).0.balance - 0.2).abs() < 0.01);
        // Engines slower than the CPUs: capped at half the batch.
        assert_eq!(
            run(&auto(), |_| 1_000.0, 9_000.0, 40, 1).0.balance,
            ShareControl::MAX
        );
    }

    /// A share that does not help goes to 0: the CPUs are too slow to matter,
    /// or decoding on them slows the engines' part (its host side competes
    /// for the cores) by more than they add. The batches then run at the
    /// engines' rate but for probe batches, fewer and fewer.
    #[test]
    fn the_automatic_cpu_share_backs_off_to_zero_when_it_does_not_help() {
        for (hw, cpu) in [
            (Box::new(|_| 24_000.0) as Box<dyn Fn(f64) -> f64>, 200.0),
            // 6k img/s of CPU decoding, but the engines lose 40 % while it runs.
            (
                Box::new(|f: f64| if f > 0.0 { 14_400.0 } else { 24_000.0 }),
                6_000.0,
            ),
        ] {
            let (c, rate) = run(&auto(), &hw, cpu, 600, 300);
            assert!(!c.on, "the share was kept");
            assert!(c.fraction == 0.0 || c.probing);
            assert!(
                c.probe_every > ShareControl::PROBE_EVERY,
                "probes confirmed the choice"
            );
            assert!(rate > 0.98 * 24_000.0, "{rate}");
        }
    }

    /// The probes notice when the share starts to help (the engines' part got
    /// slower, e.g. larger images): it comes back on.
    #[test]
    fn the_automatic_cpu_share_comes_back_when_it_helps_again() {
        let mut c = run(&auto(), |_| 24_000.0, 200.0, 100, 1).0;
        assert!(!c.on);
        for _ in 0..2 * ShareControl::PROBE_MAX {
            let n_cpu = (256.0 * c.fraction).round() as usize;
            let n_hw = 256 - n_cpu;
            c.update(n_hw, n_hw as f64 / 8_000.0, n_cpu, n_cpu as f64 / 8_000.0);
        }
        assert!(c.on, "rates on {:?} off {:?}", c.rate_on, c.rate_off);
        // Degenerate timings change nothing.
        let before = (c.fraction, c.rate_on, c.rate_off);
        c.update(0, 0.0, 0, 0.0);
        c.update(100, f64::NAN, 10, 0.01);
        c.update(100, 0.01, 10, f64::INFINITY);
        assert_eq!((c.fraction, c.rate_on, c.rate_off), before);
    }

    #[test]
    fn a_fixed_cpu_share_does_not_move() {
        let fixed = GpuDecoderOptions {
            cpu_share: 0.25,
            ..GpuDecoderOptions::default()
        };
        assert_eq!(run(&fixed, |_| 24_000.0, 6_000.0, 30, 1).0.fraction, 0.25);
        let none = GpuDecoderOptions::default();
        assert_eq!(run(&none, |_| 24_000.0, 6_000.0, 30, 1).0.fraction, 0.0);
    }

    #[test]
    fn the_cpu_share_leaves_cores_to_the_lanes() {
        let with = |lanes, share: f32, threads| GpuDecoderOptions {
            hardware_lanes: lanes,
            cuda_states: 4,
            cpu_share: share,
            cpu_share_threads: threads,
            ..GpuDecoderOptions::default()
        };
        // 16 cores and 4 lanes with a CPU share: 10 share threads.
        assert_eq!(share_threads(&with(4, 0.15, 0), 16), 10);
        assert_eq!(share_threads(&with(8, 0.15, 0), 16), 6);
        let auto = GpuDecoderOptions {
            cpu_share_auto: true,
            ..with(4, 0.0, 0)
        };
        assert_eq!(share_threads(&auto, 16), 10);
        // The offload alone: the CUDA decoder's 4 slot threads keep theirs.
        assert_eq!(share_threads(&with(4, 0.0, 0), 16), 6);
        // Never none, and an explicit count wins.
        assert_eq!(share_threads(&with(4, 0.15, 0), 2), 1);
        assert_eq!(share_threads(&with(4, 0.0, 0), 6), 1);
        assert_eq!(share_threads(&with(4, 0.0, 3), 2), 3);
    }
}
