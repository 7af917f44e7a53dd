//! The GPU-Huffman share: hardware-decodable images that nvJPEG's GPU-hybrid
//! backend (Huffman decoding on the GPU's SMs) decodes on a lane and thread
//! of its own while the engines decode the rest
//! ([`GpuDecoderOptions::gpu_huffman_share`]).

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, PinnedHostSlice};

use super::batch::{Batch, Plan};
use super::device::SyncOnPanic;
use super::hardware::{HwLane, LaneTimes};
use super::options::{share_fraction, GpuDecoderOptions};
use super::staging::{stage_bitstreams, PinnedRing};
use crate::nvjpeg::{CachedMemory, NvJpeg};
use crate::{DecodeError, DecodeTimings, Route};

/// The GPU-hybrid backend's batched decode does Huffman on the GPU only for
/// batches larger than this (nvjpeg.h); smaller GPU-Huffman shares stay on the
/// engines.
const GPU_HUFFMAN_MIN_BATCH: usize = 100;

/// The GPU-Huffman lane and its staging.
pub(super) struct GpuHuffman {
    /// Pinned staging for the share's bitstreams, grown on demand: nvJPEG may
    /// read them after the call returns (asynchronous copies), so they must
    /// not be the caller's (possibly pageable, short-lived) memory.
    pub(super) staging: PinnedRing,
    /// The lane (its own GPU-hybrid handle, state and stream) when the share
    /// is above 0 and the backend could be created; taken out for the length
    /// of a batch by the thread that decodes on it.
    pub(super) lane: Option<HwLane>,
    /// `gpu_huffman_share` as a fraction in 0..=1.
    fraction: f64,
}

impl GpuHuffman {
    /// The lane when `options` ask for a share (`None` inside when they do
    /// not, or when the backend cannot be created: logged).
    pub(super) fn new(
        lib: &'static NvJpeg,
        (ctx, priority): (&Arc<CudaContext>, i32),
        options: &GpuDecoderOptions,
        memory: Option<&Arc<CachedMemory>>,
    ) -> GpuHuffman {
        let fraction = share_fraction(options.gpu_huffman_share);
        GpuHuffman {
            staging: PinnedRing::new(options.waits),
            lane: if fraction > 0.0 {
                HwLane::gpu_hybrid(lib, (ctx, priority), options.waits, memory)
            } else {
                None
            },
            fraction,
        }
    }

    /// Step 1c: the share's images, taken from the end of `hw` (whose length
    /// before step 1b was `hw_count`), or none when the share is not above
    /// [`GPU_HUFFMAN_MIN_BATCH`] images.
    pub(super) fn split(&self, hw_count: usize, hw: &mut Vec<usize>) -> Vec<usize> {
        if self.lane.is_none() {
            return Vec::new();
        }
        let take = ((hw_count as f64 * self.fraction).round() as usize).min(hw.len());
        if take > GPU_HUFFMAN_MIN_BATCH {
            hw.split_off(hw.len() - take)
        } else {
            if take > 0 {
                tracing::debug!(
                    "GPU-Huffman share of {take} images is not above \
                     {GPU_HUFFMAN_MIN_BATCH}: left on the engines"
                );
            }
            Vec::new()
        }
    }

    /// Takes the lane out for this batch once its stream waits for earlier
    /// work on the outputs and its staging is free; when that fails, `list`
    /// goes back to the engines and no job is made.
    pub(super) fn start(
        &mut self,
        ctx: &Arc<CudaContext>,
        batch: Batch<'_>,
        list: &[usize],
        plan: &mut Plan,
    ) -> Option<HuffmanJob> {
        let gpu_bytes: usize = list.iter().map(|&i| batch.inputs[i].len()).sum();
        let (lane, (k, staging)) = match self.lane.take() {
            Some(lane) if !list.is_empty() => match lane
                .stream
                .join(batch.stream)
                .map_err(DecodeError::from)
                .and_then(|()| self.staging.take(ctx, gpu_bytes))
            {
                Ok(staged) => (lane, staged),
                Err(e) => {
                    tracing::warn!(
                        "GPU-Huffman lane unusable for this batch ({e}); engines instead"
                    );
                    self.lane = Some(lane);
                    plan.hw.extend_from_slice(list);
                    return None;
                }
            },
            other => {
                self.lane = other;
                return None;
            }
        };
        let outs = list
            .iter()
            .map(|&i| {
                (
                    batch.dst[i],
                    batch.infos[i].as_ref().map_or(0, |f| f.width as usize * 3),
                )
            })
            .collect();
        Some(HuffmanJob {
            lane,
            k,
            staging,
            outs,
        })
    }

    /// Step 4a: the caller's stream waits for the lane, the lane comes back;
    /// what failed (or all of it, if the lane did) goes to the CPU.
    pub(super) fn finish(
        &mut self,
        ctx: &CudaContext,
        done: Option<std::thread::Result<HuffmanDone>>,
        batch: Batch<'_>,
        list: &[usize],
        plan: &mut Plan,
        timings: &mut DecodeTimings,
    ) {
        match done {
            None => {}
            Some(Err(_)) => {
                // The lane is lost with its thread (which waited for the lane's
                // stream while unwinding, `SyncOnPanic`): later batches leave the
                // share on the engines. Wait for the whole context once as well,
                // in case that wait failed: these images' outputs are refilled
                // (CPU replacements). A panic path only.
                if let Err(e) = ctx.synchronize() {
                    tracing::warn!("synchronizing after the GPU-Huffman lane's panic failed: {e}");
                }
                for &i in list {
                    plan.results[i] = Some(Err(DecodeError::Panicked {
                        decoder: "nvjpeg-gpu-huffman",
                        message: "GPU-Huffman lane thread panicked".into(),
                    }));
                }
            }
            Some(Ok(done)) => {
                timings.gpu_huffman_s += done.times.total();
                let joined = batch.stream.join(&done.lane.stream);
                if let Err(e) = &joined {
                    // Without the join, the CPU's copies below could overtake the lane.
                    tracing::warn!("joining the GPU-Huffman lane failed ({e}); synchronizing");
                    if let Err(e) = done.lane.stream.synchronize() {
                        tracing::warn!("GPU-Huffman lane synchronize failed: {e}");
                    }
                }
                // The caller's stream joined the lane (or the lane was synchronized):
                // the staging is free once the caller's stream passes here.
                self.staging.put(done.k, done.staging, batch.stream);
                match done.result {
                    Ok(()) if joined.is_ok() => {
                        for &i in list {
                            plan.results[i] =
                                Some(Ok((batch.info(i).clone(), Route::NvjpegGpuHuffman)));
                        }
                    }
                    r => {
                        if let Err(e) = r {
                            tracing::debug!("GPU-Huffman batch failed ({e}); using the CPU");
                        }
                        plan.cpu.extend_from_slice(list);
                    }
                }
                self.lane = Some(done.lane);
            }
        }
    }
}

/// One batch's GPU-Huffman work, owned by the thread that runs it.
pub(super) struct HuffmanJob {
    lane: HwLane,
    /// Index of `staging` in the ring.
    k: usize,
    /// Pinned, at least the share's total bytes, not read by queued device work.
    staging: PinnedHostSlice<u8>,
    /// Per image: the output's device address and row pitch.
    outs: Vec<(u64, usize)>,
}

/// What a [`HuffmanJob`] gives back: the lane, the staging and the outcome.
pub(super) struct HuffmanDone {
    lane: HwLane,
    k: usize,
    staging: PinnedHostSlice<u8>,
    times: LaneTimes,
    result: Result<(), DecodeError>,
}

impl HuffmanJob {
    /// Copies the bitstreams of `list` into the staging and decodes them on
    /// the lane (on the calling thread, a scoped one).
    pub(super) fn run(self, ctx: &CudaContext, inputs: &[&[u8]], list: &[usize]) -> HuffmanDone {
        let HuffmanJob {
            mut lane,
            k,
            mut staging,
            outs,
        } = self;
        // Declared after `lane` and `staging`, so dropped before them: if this
        // thread panics, the lane's queued work, which reads the staging and
        // the lane's state, ends first.
        let _sync = SyncOnPanic(Arc::clone(&lane.stream));
        let mut times = LaneTimes::default();
        let result = ctx
            .bind_to_thread()
            .map_err(DecodeError::from)
            .and_then(|()| staging.as_mut_slice().map_err(DecodeError::from))
            .and_then(|dst| {
                let copying = Instant::now();
                // The buffer holds at least the share's total bytes (taken with
                // that size); no queued device work reads it (its event was
                // waited for in `take`); this thread alone writes it.
                let (data, lens) = stage_bitstreams(dst, inputs, list);
                times.copy = copying.elapsed().as_secs_f64();
                // SAFETY: one entry per image in `data`/`lens`/`outs`; the
                // bitstreams live in pinned staging until the caller's stream,
                // which joins this lane, passes the staging event; each output
                // holds width*3*height bytes (checked in step 1); this thread
                // alone has the lane.
                unsafe { lane.decode_batched(&data, &lens, &outs, &mut times) }
            });
        HuffmanDone {
            lane,
            k,
            staging,
            times,
            result,
        }
    }
}
