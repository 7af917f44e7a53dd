//! Batch assembly: the per-image kernel parameters, the H2D copies (raw route)
//! or the oversize copies (nvJPEG route), the fused transform on the compute
//! stream, and the [`Batch`] that carries the slot to the consumer with its
//! ready event.

use std::sync::atomic::Ordering;

use super::handoff::CudaImages;
use super::kernel::{ImageParams, KernelDtype, LaunchBuffers, TransformArgs};
use super::records::Staged;
use super::shared::Shared;
use super::staging::{H2dSources, InFlight, Slot};
use crate::batch::{Batch, Images};
use crate::config::DType;
use crate::config::Output;
use crate::error::{driver_err, LoaderError};
use crate::pipeline::EpochPlan;

/// How the pixels of a batch reach the device arena.
#[derive(Clone, Copy, Debug)]
pub(super) enum Copies<'a> {
    /// Raw records on the copy stream, `bytes` in all: staged in pinned memory by
    /// the reader pool and copied in one piece, or, `by_record` (some are in the
    /// registered dataset map), copied record by record into the arena.
    Staged { bytes: usize, by_record: bool },
    /// Decoded into the arena by nvJPEG on a decode stream (joined by the compute
    /// stream), image `i` at `offsets[i]` (packed, `arena_pack`); only these
    /// `(pinned offset, arena offset, len)` regions (CPU-resized images) come from
    /// pinned memory.
    Decoded {
        regions: &'a [(usize, usize, usize)],
        offsets: &'a [usize],
    },
}

/// Enqueues H2D + transform for the staged images and wraps the slot in a batch.
pub(super) fn enqueue(
    shared: &Shared,
    plan: &EpochPlan,
    k: u64,
    mut slot: Box<Slot>,
    images: &[Staged],
    copies: Copies<'_>,
) -> Result<Batch, LoaderError> {
    let n = images.len();
    let offsets = match copies {
        Copies::Staged { .. } => None,
        Copies::Decoded { offsets, .. } => Some(offsets),
    };
    if let Err(e) = write_params(&mut slot, images, offsets) {
        // This batch's decodes may still be writing the arena.
        return_failed_slot(shared, slot);
        return Err(e);
    }
    let h2d_bytes = match copies {
        Copies::Staged { bytes, .. } => bytes,
        Copies::Decoded { regions, .. } => regions.iter().map(|r| r.2).sum(),
    };
    debug_assert!(
        n <= slot.params.len() && slot.sizes.batch * slot.sizes.stride <= slot.arena.len()
    );
    let result = (|| -> Result<(), LoaderError> {
        let sources = slot.h2d_sources()?;
        queue_copies(shared, &slot, &sources, images, copies)?;
        queue_transform(shared, &mut slot, n)
    })();
    if let Err(e) = result {
        return_failed_slot(shared, slot);
        return Err(e);
    }
    Ok(hand_over(shared, plan, k, slot, images, h2d_bytes))
}

/// Writes the kernel parameters of `images` into the slot's pinned parameters:
/// image `i` at `offsets[i]` in the arena, or at `i * stride` without offsets.
fn write_params(
    slot: &mut Slot,
    images: &[Staged],
    offsets: Option<&[usize]>,
) -> Result<(), LoaderError> {
    let stride = slot.sizes.stride;
    let params = slot
        .pinned_params
        .as_mut_slice()
        .map_err(|e| driver_err("pinned parameters access", e))?;
    for (i, s) in images.iter().enumerate() {
        params[i] = ImageParams {
            src_offset: offsets.map_or(i * stride, |o| o[i]) as u64,
            src_width: s.width,
            src_height: s.height,
            src_pitch: s.width * s.channels,
            src_channels: s.channels,
            crop_x: s.crop.0 as f32,
            crop_y: s.crop.1 as f32,
            crop_w: s.crop.2 as f32,
            crop_h: s.crop.3 as f32,
            flip: u32::from(s.flip),
            out_index: i as u32,
        };
    }
    Ok(())
}

/// Enqueues the copies of the batch's pixels (as `copies` says) and kernel
/// parameters, bracketed by the slot's `h2d_start` / `h2d_end` events.
fn queue_copies(
    shared: &Shared,
    slot: &Slot,
    sources: &H2dSources<'_>,
    images: &[Staged],
    copies: Copies<'_>,
) -> Result<(), LoaderError> {
    let n = images.len();
    let copy = &shared.copy;
    let compute = &shared.compute;
    match copies {
        Copies::Staged { bytes, by_record } => {
            // The previous kernel of this slot read `arena` and `params` (a wait
            // on a never-recorded event is a no-op).
            copy.wait(&slot.ready)
                .map_err(|e| driver_err("cuStreamWaitEvent (arena reuse)", e))?;
            slot.h2d_start
                .record(copy)
                .map_err(|e| driver_err("cuEventRecord", e))?;
            if by_record {
                copy_records(shared, sources, images)?;
            } else {
                sources.pixels(bytes, copy)?;
            }
            sources.params(n, copy)?;
            slot.h2d_end
                .record(copy)
                .map_err(|e| driver_err("cuEventRecord", e))?;
            compute
                .wait(&slot.h2d_end)
                .map_err(|e| driver_err("cuStreamWaitEvent (h2d done)", e))?;
        }
        Copies::Decoded { regions, .. } => {
            // nvJPEG wrote the arena on a decode stream, which the compute stream
            // joined: the parameters and the CPU-resized oversize images follow
            // on the compute stream.
            slot.h2d_start
                .record(compute)
                .map_err(|e| driver_err("cuEventRecord", e))?;
            for &region in regions {
                sources.region(region, compute)?;
            }
            sources.params(n, compute)?;
            slot.h2d_end
                .record(compute)
                .map_err(|e| driver_err("cuEventRecord", e))?;
        }
    }
    Ok(())
}

/// Enqueues the fused transform of the slot's `n` images on the compute stream,
/// after the consumers of the slot's previous batch, and records `ready`.
fn queue_transform(shared: &Shared, slot: &mut Slot, n: usize) -> Result<(), LoaderError> {
    let compute = &shared.compute;
    // The release events are cleared only once every wait is queued: on an
    // error they stay, and the error path waits for them on the host.
    for ev in &slot.release {
        compute
            .wait(ev)
            .map_err(|e| driver_err("cuStreamWaitEvent (consumer released)", e))?;
    }
    slot.release.clear();
    slot.kernel_start
        .record(compute)
        .map_err(|e| driver_err("cuEventRecord", e))?;
    // SAFETY: `arena` holds the n staged images at their offsets (`i * stride`,
    // or their disjoint places of `ArenaPack`) with the sizes in `params`
    // (written by `write_params`, copied before the kernel by
    // `queue_copies`); crop boxes come from `Transform::params` and lie inside
    // their images; `out_index < n ≤ batch` and `out` holds `batch` images of the
    // configured size and dtype; the compute stream waited for every consumer
    // of the previous batch in this slot; all buffers belong to `slot`, which
    // lives until after the kernel (it is handed to the batch, and freed only
    // after its release events).
    unsafe {
        shared.kernel.launch(
            compute,
            shared.dtype,
            &LaunchBuffers {
                arena: slot.arena_ptr,
                params: slot.params_ptr,
                images: n as u32,
                out: slot.out_ptr,
            },
            &shared.args,
        )?;
    }
    slot.ready
        .record(compute)
        .map_err(|e| driver_err("cuEventRecord", e))?;
    Ok(())
}

/// Wraps the slot, its work enqueued, in the batch handed to the consumer.
fn hand_over(
    shared: &Shared,
    plan: &EpochPlan,
    k: u64,
    mut slot: Box<Slot>,
    images: &[Staged],
    h2d_bytes: usize,
) -> Batch {
    let n = images.len();
    let s = shared.size as usize;
    let out_bytes = n * 3 * s * s * shared.dtype.size();
    slot.in_flight = Some(InFlight {
        images: n as u64,
        h2d_bytes: h2d_bytes as u64 + (n * std::mem::size_of::<ImageParams>()) as u64,
        out_bytes: out_bytes as u64,
    });
    let shape = shared.output.shape(n, s);
    let dtype = shared.output.dtype();
    Batch {
        images: Images::Cuda(CudaImages::new(slot, shared.free_tx.clone(), shape, dtype)),
        labels: images.iter().map(|s| s.label).collect(),
        indices: images.iter().map(|s| s.index).collect(),
        epoch: plan.epoch,
        index: k,
    }
}

/// Enqueues the pixel copies of a batch whose records are (partly) in the
/// registered dataset map, record by record into their places in the arena, after
/// `h2d_start` on the copy stream: one batched call where the driver has it, else
/// one copy per record (more streams do not make those faster:
/// `examples/h2d_probe`). Images without a `source` come from this slot's staging.
fn copy_records(
    shared: &Shared,
    sources: &H2dSources<'_>,
    images: &[Staged],
) -> Result<(), LoaderError> {
    let copy = &shared.copy;
    let srcs: Vec<&[u8]> = images
        .iter()
        .enumerate()
        .map(|(i, s)| match s.source {
            // SAFETY: `stage_one` took `addr..addr + bytes` from a record payload
            // inside a map of `Shared::direct`: a read-only map of a finished shard
            // that nobody writes, mapped while `Shared::dataset` lives, page-locked
            // until `Shared` drops after its streams are synchronized (whole) or
            // until an event after this batch's copies completes (a window:
            // `producer` releases it only after its last batch is enqueued).
            Some(addr) => unsafe { std::slice::from_raw_parts(addr as *const u8, s.bytes) },
            None => sources.staged(i, s.bytes),
        })
        .collect();
    // SAFETY (of the copies below): each source is a record in `Shared::direct`
    // (see above: never written, mapped and registered longer than any copy) or this
    // slot's staging, not written again before `h2d_end` completes
    // (`Slot::begin_host_writes`); each holds `bytes ≤ stride`.
    if shared.batch_copies.load(Ordering::Relaxed) {
        // SAFETY: as above; `batch_copies` is set only where `batch_copy::supported`.
        match unsafe { sources.images_batched(&srcs, copy) } {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::warn!("cuMemcpyBatchAsync failed ({e}): one copy per record from now on");
                shared.batch_copies.store(false, Ordering::Relaxed);
            }
        }
    }
    for (i, src) in srcs.iter().enumerate() {
        // SAFETY: as above.
        unsafe { sources.image(i, src, copy) }?;
    }
    Ok(())
}

/// Returns the slot of a batch that failed in [`enqueue`] to the free list,
/// clean. Part of its work may be enqueued (decodes still writing the arena,
/// a copy still reading the pinned buffers): the copy, decode and compute
/// streams are drained before the slot can be rewritten. The consumer may still
/// read the slot's output until its release events complete: those are waited
/// for too. Error path only, on the producer thread.
fn return_failed_slot(shared: &Shared, mut slot: Box<Slot>) {
    shared.synchronize_streams("after a failed batch");
    for ev in slot.release.drain(..) {
        if let Err(err) = ev.synchronize() {
            tracing::warn!("after a failed batch, a release event failed: {err}");
        }
    }
    let _ = shared.free_tx.try_send(slot);
}

/// Kernel launch arguments for the configured transform and output.
pub(crate) fn transform_args(
    size: u32,
    output: Output,
    mean: [f32; 3],
    std: [f32; 3],
) -> (KernelDtype, TransformArgs) {
    let dtype = match output.dtype() {
        DType::U8 => KernelDtype::U8,
        DType::F16 => KernelDtype::F16,
        DType::F32 => KernelDtype::F32,
        DType::Bf16 => KernelDtype::Bf16,
    };
    let chw = u32::from(output.is_planar());
    (
        dtype,
        TransformArgs {
            out_width: size,
            out_height: size,
            layout_chw: chw,
            normalize: 1,
            mean,
            std,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_map_to_kernel_dtype_layout_and_normalization() {
        let (mean, std) = (
            crate::transform::IMAGENET_MEAN,
            crate::transform::IMAGENET_STD,
        );
        let (d, a) = transform_args(224, Output::U8Nhwc, mean, std);
        assert_eq!((d, a.layout_chw), (KernelDtype::U8, 0));
        let (d, a) = transform_args(224, Output::F16Nchw, mean, std);
        assert_eq!((d, a.layout_chw, a.normalize), (KernelDtype::F16, 1, 1));
        let (d, a) = transform_args(160, Output::F32Nchw, mean, std);
        assert_eq!((d, a.out_width, a.out_height), (KernelDtype::F32, 160, 160));
        assert_eq!((a.mean, a.std), (mean, std));
        // Channels last: the float kernels write interleaved.
        let (d, a) = transform_args(224, Output::F16Nhwc, mean, std);
        assert_eq!((d, a.layout_chw, a.normalize), (KernelDtype::F16, 0, 1));
        let (d, a) = transform_args(224, Output::Bf16Nchw, mean, std);
        assert_eq!((d, a.layout_chw, a.normalize), (KernelDtype::Bf16, 1, 1));
        let (d, a) = transform_args(224, Output::Bf16Nhwc, mean, std);
        assert_eq!((d, a.layout_chw, a.normalize), (KernelDtype::Bf16, 0, 1));
        let (d, a) = transform_args(224, Output::F32Nhwc, mean, std);
        assert_eq!((d, a.layout_chw, a.normalize), (KernelDtype::F32, 0, 1));
    }
}
