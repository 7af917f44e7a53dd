//! The CPU share: the last hardware-decodable images of each batch, decoded
//! on the CPUs (a thread pool of the decoder's own) into pinned staging while
//! the engines decode the rest, then copied to their outputs on a stream of
//! its own ([`GpuDecoderOptions::cpu_share`], [`GpuDecoderOptions::cpu_share_auto`]).

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaStream, DriverError, PinnedHostSlice};
use rayon::prelude::*;

use super::batch::{Batch, Decoded, Plan};
use super::options::{share_fraction, GpuDecoderOptions};
use super::staging::PinnedRing;
use crate::{CpuDecoder, DecodeError, DecodeTimings, ImageInfo, Route};

/// The share's staging, stream, threads and fraction.
pub(super) struct CpuShare {
    /// Pinned staging for the share's pixels, grown on demand.
    pub(super) staging: PinnedRing,
    /// Stream of the share's host-to-device copies, so they overlap the
    /// engines' work on the caller's stream; the caller's stream joins it.
    pub(super) stream: Arc<CudaStream>,
    /// The share's threads (`cpu_share_threads`), made with the decoder when
    /// a share is configured; `None`: rayon's global pool.
    pool: Option<Arc<rayon::ThreadPool>>,
    /// The share in use: `cpu_share`, or with `cpu_share_auto` the
    /// controller's current fraction.
    control: ShareControl,
}

/// One image of the share: its index, its offset in the staging, the bytes
/// of it to copy, and the decode's outcome.
type SharePart = (usize, usize, Range<usize>, Decoded);

/// One batch's share, owned by the thread that decodes it.
pub(super) struct ShareJob {
    /// Index of `buf` in the ring.
    k: usize,
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
}

impl CpuShare {
    /// The share's stream (on `ctx`), pool (when a share is configured) and
    /// starting fraction.
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        options: &GpuDecoderOptions,
    ) -> Result<CpuShare, DecodeError> {
        let control = ShareControl::new(options);
        let stream = ctx.new_stream()?;
        Ok(CpuShare {
            staging: PinnedRing::default(),
            stream,
            pool: (control.fraction > 0.0)
                .then(|| share_pool(options))
                .flatten(),
            control,
        })
    }

    /// The fraction of each batch's hardware images decoded on the CPUs now.
    pub(super) fn fraction(&self) -> f64 {
        self.control.fraction
    }

    /// Step 1b: the share's images, taken from the end of `hw`.
    pub(super) fn split(&self, hw: &mut Vec<usize>) -> Vec<usize> {
        let hw_count = hw.len() as f64;
        let take = ((hw_count * self.control.fraction).round() as usize).min(hw.len());
        hw.split_off(hw.len() - take)
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

    /// Step 4b: updates the automatic share, then copies the share's pixels
    /// (pinned, asynchronous) on the share stream and has the caller's stream
    /// join it; what could not be staged goes to the CPU stage.
    pub(super) fn finish(
        &mut self,
        done: Option<std::thread::Result<ShareDone>>,
        batch: Batch<'_>,
        list: &[usize],
        plan: &mut Plan,
        timings: &mut DecodeTimings,
        (n_hw, t_hw): (usize, f64),
    ) {
        if let Some(Ok(done)) = &done {
            timings.cpu_share_s += done.seconds;
            if done.decoded.is_ok() {
                self.control.update(n_hw, t_hw, list.len(), done.seconds);
            }
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

    /// Queues the copy of every decoded image's needed bytes from `buf` to
    /// its output on the share stream and records the results.
    fn copy_out(
        &self,
        buf: &PinnedHostSlice<u8>,
        decoded: Vec<SharePart>,
        batch: Batch<'_>,
        plan: &mut Plan,
    ) {
        // Nothing queued reads the buffer (its event was waited for in
        // `take`), so this returns at once.
        match buf.as_slice() {
            Ok(host) => {
                for (i, off, span, r) in decoded {
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
                        Ok((info, Route::CpuShare))
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
        let decode_all = |slice: &mut [u8]| {
            let mut parts = Vec::with_capacity(list.len());
            let (mut rest, mut off) = (slice, 0usize);
            for &i in list {
                let len = batch.infos[i].as_ref().map_or(0, ImageInfo::rgb_len);
                let (part, tail) = rest.split_at_mut(len);
                parts.push((i, off, part));
                rest = tail;
                off += len;
            }
            parts
                .into_par_iter()
                .map(|(i, off, out)| {
                    let r = cpu.decode_region_routed(batch.inputs[i], out, batch.usage.region(i));
                    let span = r
                        .as_ref()
                        .map_or(0..0, |(info, _)| batch.usage.needed(i, info));
                    (i, off, span, r)
                })
                .collect::<Vec<_>>()
        };
        let pool = self.pool.as_deref();
        let decoded = self.buf.as_mut_slice().map(|slice| match pool {
            Some(pool) => pool.install(|| decode_all(slice)),
            None => decode_all(slice),
        });
        ShareDone {
            k: self.k,
            buf: self.buf,
            decoded,
            seconds: started.elapsed().as_secs_f64(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // 16 cores and 4 lanes: 10 share threads.
        assert_eq!(share_threads(0, 4, 16), 10);
        assert_eq!(share_threads(0, 8, 16), 6);
        // Never none, and an explicit count wins.
        assert_eq!(share_threads(0, 4, 2), 1);
        assert_eq!(share_threads(0, 4, 6), 1);
        assert_eq!(share_threads(3, 4, 2), 3);
    }
}
