//! Batch assembly: the per-image kernel parameters, the H2D copies (raw route)
//! or the oversize copies (nvJPEG route), the fused transform on the compute
//! stream, and the [`Batch`] that carries the slot to the consumer with its
//! ready event.

use std::sync::atomic::Ordering;

use super::batch_copy;
use super::handoff::CudaImages;
use super::kernel::{ImageParams, KernelDtype, LaunchBuffers, TransformArgs};
use super::records::Staged;
use super::shared::Shared;
use super::staging::{InFlight, Slot};
use crate::batch::{Batch, DType, Images};
use crate::builder::Output;
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
    /// stream); only these `(pinned offset, arena offset, len)` regions (CPU-resized
    /// oversize images) come from pinned memory.
    Decoded {
        regions: &'a [(usize, usize, usize)],
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
    let stride = slot.sizes.stride;
    {
        let params = match slot.pinned_params.as_mut_slice() {
            Ok(p) => p,
            Err(e) => {
                // This batch's decodes may still be writing the arena.
                return_failed_slot(shared, slot);
                return Err(driver_err("pinned parameters access", e));
            }
        };
        for (i, s) in images.iter().enumerate() {
            params[i] = ImageParams {
                src_offset: (i * stride) as u64,
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
    }
    let h2d_bytes = match copies {
        Copies::Staged { bytes, .. } => bytes,
        Copies::Decoded { regions } => regions.iter().map(|r| r.2).sum(),
    };
    debug_assert!(n <= slot.params.len() && slot.sizes.batch * stride <= slot.arena.len());
    let result = (|| -> Result<(), LoaderError> {
        let copy = &shared.copy;
        let compute = &shared.compute;
        let pinned = slot
            .pinned
            .as_slice()
            .map_err(|e| driver_err("pinned staging access", e))?;
        let pinned_params = slot
            .pinned_params
            .as_slice()
            .map_err(|e| driver_err("pinned parameters access", e))?;
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
                    copy_records(shared, &slot, images, pinned)?;
                } else {
                    // SAFETY: the destination is this slot's arena, at least as large
                    // as the source (`arena` = batch * stride ≥ bytes); the pinned
                    // source is not written by the host again before `h2d_end`
                    // completes (`Slot::begin_host_writes`); the copy stream waited
                    // for the previous reader of the arena.
                    unsafe {
                        cudarc::driver::result::memcpy_htod_async(
                            slot.arena_ptr,
                            &pinned[..bytes],
                            copy.cu_stream(),
                        )
                    }
                    .map_err(|e| driver_err("cuMemcpyHtoDAsync (pixels)", e))?;
                }
                // SAFETY: as above, for `params` (batch entries ≥ n) and its pinned source.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        slot.params_ptr,
                        &pinned_params[..n],
                        copy.cu_stream(),
                    )
                }
                .map_err(|e| driver_err("cuMemcpyHtoDAsync (params)", e))?;
                slot.h2d_end
                    .record(copy)
                    .map_err(|e| driver_err("cuEventRecord", e))?;
                compute
                    .wait(&slot.h2d_end)
                    .map_err(|e| driver_err("cuStreamWaitEvent (h2d done)", e))?;
            }
            Copies::Decoded { regions } => {
                // nvJPEG wrote the arena on a decode stream, which the compute stream
                // joined: the parameters and the CPU-resized oversize images follow
                // on the compute stream.
                slot.h2d_start
                    .record(compute)
                    .map_err(|e| driver_err("cuEventRecord", e))?;
                // SAFETY: as above; every region lies inside the slot's staging
                // (`from + len ≤ batch * pinned_stride`) and arena (`to + len ≤
                // batch * stride`); ordering is the compute stream's.
                unsafe {
                    for &(from, to, len) in regions {
                        cudarc::driver::result::memcpy_htod_async(
                            slot.arena_ptr + to as u64,
                            &pinned[from..from + len],
                            compute.cu_stream(),
                        )
                        .map_err(|e| driver_err("cuMemcpyHtoDAsync (oversize pixels)", e))?;
                    }
                    cudarc::driver::result::memcpy_htod_async(
                        slot.params_ptr,
                        &pinned_params[..n],
                        compute.cu_stream(),
                    )
                    .map_err(|e| driver_err("cuMemcpyHtoDAsync (params)", e))?;
                }
                slot.h2d_end
                    .record(compute)
                    .map_err(|e| driver_err("cuEventRecord", e))?;
            }
        }
        // The release events are cleared only once every wait is queued: on an
        // error they stay, and the error path below waits for them on the host.
        for ev in &slot.release {
            compute
                .wait(ev)
                .map_err(|e| driver_err("cuStreamWaitEvent (consumer released)", e))?;
        }
        slot.release.clear();
        slot.kernel_start
            .record(compute)
            .map_err(|e| driver_err("cuEventRecord", e))?;
        // SAFETY: `arena` holds the n staged images at `i * stride` with the sizes
        // in `params` (written above, copied before the kernel by the wait on
        // `h2d_end`); crop boxes come from `Transform::params` and lie inside their
        // images; `out_index < n ≤ batch` and `out` holds `batch` images of the
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
    })();
    if let Err(e) = result {
        return_failed_slot(shared, slot);
        return Err(e);
    }
    let s = shared.size as usize;
    let out_bytes = n * 3 * s * s * shared.dtype.size();
    slot.in_flight = Some(InFlight {
        images: n as u64,
        h2d_bytes: h2d_bytes as u64 + (n * std::mem::size_of::<ImageParams>()) as u64,
        out_bytes: out_bytes as u64,
    });
    let shape = match shared.output {
        Output::U8Nhwc => [n, s, s, 3],
        _ => [n, 3, s, s],
    };
    let dtype = match shared.dtype {
        KernelDtype::U8 => DType::U8,
        KernelDtype::F16 => DType::F16,
        KernelDtype::F32 => DType::F32,
    };
    Ok(Batch {
        images: Images::Cuda(CudaImages::new(slot, shared.free_tx.clone(), shape, dtype)),
        labels: images.iter().map(|s| s.label).collect(),
        indices: images.iter().map(|s| s.index).collect(),
        epoch: plan.epoch,
        index: k,
    })
}

/// Enqueues the pixel copies of a batch whose records are (partly) in the
/// registered dataset map, record by record into their places in the arena, after
/// `h2d_start` on the copy stream: one batched call where the driver has it, else
/// one copy per record (more streams do not make those faster: `examples/h2d_probe`,
/// docs/BENCHMARKS.md run 6). Images without a `source` come from this slot's
/// staging.
fn copy_records(
    shared: &Shared,
    slot: &Slot,
    images: &[Staged],
    pinned: &[u8],
) -> Result<(), LoaderError> {
    let copy = &shared.copy;
    let stride = slot.sizes.stride;
    // SAFETY (of every copy below): destinations are image i's place in this
    // slot's arena (`bytes ≤ stride`), which the copy stream waited for before
    // `h2d_start`. Sources are record payloads inside `Shared::direct` (a
    // page-locked, read-only map of a finished shard that nobody writes,
    // registered until `Shared` drops, after its streams are synchronized) or this
    // slot's pinned staging, not written again before `h2d_end` completes
    // (`Slot::begin_host_writes`).
    let source = |i: usize, s: &Staged| -> &[u8] {
        match s.source {
            // SAFETY: `stage_one` took `addr..addr + bytes` from a record payload
            // that `Shared::direct` contains (see above).
            Some(addr) => unsafe { std::slice::from_raw_parts(addr as *const u8, s.bytes) },
            None => &pinned[i * stride..i * stride + s.bytes],
        }
    };
    if shared.batch_copies.load(Ordering::Relaxed) {
        let n = images.len();
        let mut dsts: Vec<u64> = (0..n)
            .map(|i| slot.arena_ptr + (i * stride) as u64)
            .collect();
        let mut srcs: Vec<u64> = images
            .iter()
            .enumerate()
            .map(|(i, s)| source(i, s).as_ptr() as u64)
            .collect();
        let mut sizes: Vec<usize> = images.iter().map(|s| s.bytes).collect();
        // SAFETY: `batch_copies` is set only where `batch_copy::supported`; one
        // entry per image in each array; sources and destinations as above.
        match unsafe {
            batch_copy::memcpy_batch_htod_async(&mut dsts, &mut srcs, &mut sizes, copy.cu_stream())
        } {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::warn!("cuMemcpyBatchAsync failed ({e}): one copy per record from now on");
                shared.batch_copies.store(false, Ordering::Relaxed);
            }
        }
    }
    for (i, s) in images.iter().enumerate() {
        // SAFETY: as above.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(
                slot.arena_ptr + (i * stride) as u64,
                source(i, s),
                copy.cu_stream(),
            )
        }
        .map_err(|e| driver_err("cuMemcpyHtoDAsync (record)", e))?;
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
    let (dtype, chw) = match output {
        Output::U8Nhwc => (KernelDtype::U8, 0),
        Output::F16Nchw => (KernelDtype::F16, 1),
        _ => (KernelDtype::F32, 1),
    };
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
    }
}
