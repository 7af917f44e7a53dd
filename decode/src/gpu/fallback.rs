//! Step 5 of a batch: the CPU backend for every image no nvJPEG route took or
//! kept (routed to the CPU, failed on the GPU, or left by a share), its
//! pixels copied to the device on the caller's stream.

use std::time::Instant;

use rayon::prelude::*;

use super::batch::{Batch, Plan};
use crate::threads::in_pool;
use crate::{CpuDecoder, DecodeError, DecodeTimings, ImageInfo, Route};

/// A CPU decode: info, route and the RGB pixels.
type CpuDecoded = Result<(ImageInfo, Route, Vec<u8>), DecodeError>;

/// Decodes the plan's CPU list (each image's region only) in parallel and
/// queues the copy of each one's needed bytes.
pub(super) fn decode_stage(
    cpu: &CpuDecoder,
    timings: &mut DecodeTimings,
    batch: Batch<'_>,
    plan: &mut Plan,
) {
    if plan.cpu.is_empty() {
        return;
    }
    let started = Instant::now();
    let one = |&i: &usize| {
        let r = cpu.decode_region_to_vec_routed(batch.inputs[i], batch.usage.region(i));
        (i, r)
    };
    let list = &plan.cpu;
    let decoded: Vec<(usize, CpuDecoded)> = in_pool(|parallel| {
        if parallel {
            list.par_iter().map(one).collect()
        } else {
            list.iter().map(one).collect()
        }
    });
    for (i, r) in decoded {
        plan.results[i] = Some(r.and_then(|(info, route, pixels)| {
            let span = batch.usage.needed(i, &info);
            let span = span.start.min(pixels.len())..span.end.min(pixels.len());
            // An empty region copies nothing.
            if !span.is_empty() {
                // SAFETY: the destination holds at least rgb_len() ≥
                // `span.end` bytes (checked in step 1 against the same
                // header), so it holds `span.start + span.len()`; the copy
                // is queued on the caller's stream, which waited for earlier
                // work on the buffer; the pageable source is staged by the
                // driver before this returns.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        batch.dst[i] + span.start as u64,
                        &pixels[span],
                        batch.stream.cu_stream(),
                    )
                }?;
            }
            Ok((info, route))
        }));
    }
    timings.cpu_s += started.elapsed().as_secs_f64();
}
