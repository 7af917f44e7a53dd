//! The CPU backend for the images no nvJPEG route takes or keeps, their pixels
//! copied to the device on the caller's stream: those routed to the CPU from
//! the start (CMYK, headers nvJPEG cannot read), decoded beside the engines;
//! then, in step 5, those that failed on the GPU or a share left.

use std::time::Instant;

use rayon::prelude::*;

use super::batch::{Batch, Plan};
use crate::threads::in_pool;
use crate::{CpuDecoder, DecodeError, DecodeTimings, ImageInfo, Route};

/// A CPU decode: info, route and the RGB pixels.
pub(super) type CpuDecoded = Result<(ImageInfo, Route, Vec<u8>), DecodeError>;

/// CPU decodes, each with the position of its image in the batch.
pub(super) type CpuResults = Vec<(usize, CpuDecoded)>;

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
    let decoded = decode_list(cpu, batch, &plan.cpu);
    deliver(batch, decoded, plan);
    timings.cpu_s += started.elapsed().as_secs_f64();
}

/// The CPU decodes of the images `list` names (each image's region only), in
/// parallel on the decode pool; nothing reaches the device yet ([`deliver`]).
/// Needs no CUDA context: the decoder runs it beside the engines for the
/// images routed to the CPU from the start.
pub(super) fn decode_list(cpu: &CpuDecoder, batch: Batch<'_>, list: &[usize]) -> CpuResults {
    let one = |&i: &usize| {
        let r = cpu.decode_region_to_vec_routed(batch.inputs[i], batch.usage.region(i));
        (i, r)
    };
    in_pool(|parallel| {
        if parallel {
            list.par_iter().map(one).collect()
        } else {
            list.iter().map(one).collect()
        }
    })
}

/// Each of `decoded`'s results into the plan, its needed bytes copied to the
/// image's output on the caller's stream (queued; the pixels are staged by the
/// driver before this returns).
pub(super) fn deliver(batch: Batch<'_>, decoded: CpuResults, plan: &mut Plan) {
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
}
