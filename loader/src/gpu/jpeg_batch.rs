//! A batch of JPEG records through nvJPEG: the records are checked (by the
//! read-ahead or here), decoded straight into the slot's device arena on decode
//! stream `k % 2` (packed by size, [`super::arena_pack`]), failures replaced,
//! images that do not fit resized on the CPU; then the batch goes to
//! [`super::assembly`] for the transform.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use cudarc::driver::CudaStream;
use stoker_decode::{BatchUse, CpuDecoder, DecodeError, GpuDecoder, ImageInfo, Region, Route};
use stoker_formats::DatasetReader;

use super::arena_pack::{ArenaPack, ArenaPart};
use super::assembly::{enqueue, Copies};
use super::read_ahead::Prepared;
use super::records::{check_record, stage_oversize, Checked, HostStaging, ReaderState, Staged};
use super::shared::{reuse_slot, Shared};
use super::staging::Slot;
use crate::batch::Batch;
use crate::error::{driver_err, LoaderError};
use crate::metrics::Stage;
use crate::pipeline::{reader_unavailable, EpochPlan};
use crate::scratch_memory::{retry_short_of_memory, Scratch};
use crate::transform::SampleParams;

/// Builds batch `k` through nvJPEG: the records are read and checked on the
/// producer thread (bytes borrowed from the memory map) and decoded by `decoder`
/// straight into the slot's arena on decode stream `k % 2` (hardware engines, the
/// CUDA decoder or the CPU, per image). A record that fails is replaced as on the
/// CPU path; an image larger than what the batch leaves of the arena is decoded,
/// cropped and resized on the CPU and copied. `None` if stopped meanwhile (the
/// slot goes back).
// The producer's pieces of state, passed as they are (bundling them would only
// move the borrows into a struct built once per batch).
#[allow(clippy::too_many_arguments)]
pub(super) fn build_batch_nvjpeg(
    shared: &Shared,
    plan: &EpochPlan,
    k: u64,
    mut slot: Box<Slot>,
    state: &mut ReaderState,
    decoder: &Mutex<GpuDecoder>,
    stop: &AtomicBool,
    prepared: Option<Prepared<'_>>,
) -> Option<Result<Batch, LoaderError>> {
    // This batch decodes on its own stream of the pair (see `Shared::decode`).
    let decode_stream = &shared.decode[(k % 2) as usize];
    // A slot given back without its batch may have decodes in flight into its
    // arena, which nothing else orders before the slot's next decode (on either
    // stream of the pair): let them finish first. Error and stop paths only.
    let give_back = |slot: Box<Slot>| {
        if let Err(e) = decode_stream.synchronize() {
            tracing::warn!("decode stream synchronize failed: {e}");
        }
        let _ = shared.free_tx.try_send(slot);
    };
    // The read-ahead's checks of the first pass, taken one by one; replacements
    // (and everything, without a read-ahead) are read here.
    let mut prepared: Vec<Option<Result<Checked<'_>, LoaderError>>> = match prepared {
        Some(Prepared::Records(records)) => records.into_iter().map(Some).collect(),
        _ => Vec::new(),
    };
    if let Err(e) = reuse_slot(shared, &mut slot) {
        give_back(slot);
        return Some(Err(e));
    }
    let mut progress = match Progress::new(plan, k, &slot) {
        Ok(progress) => progress,
        Err(e) => {
            give_back(slot);
            return Some(Err(e));
        }
    };
    if let Err(e) = wait_for_arena(shared, &slot, decode_stream) {
        give_back(slot);
        return Some(Err(e));
    }
    let mut first_round = true;
    let mut dec = decoder.lock().unwrap_or_else(|p| p.into_inner());
    while progress.done.iter().any(Option::is_none) {
        if stop.load(Ordering::Acquire) {
            give_back(slot);
            return None;
        }
        let reader = match state.reader.as_ref() {
            Ok(r) => r,
            Err(reason) => {
                give_back(slot);
                return Some(Err(reader_unavailable("stoker-gpu", reason)));
            }
        };
        // 1. Read and check what is left; images that do not fit go through the CPU.
        let cpu = (&state.decoder, &mut state.scratch);
        let todo = match check_left(
            shared,
            plan,
            &mut slot,
            reader,
            cpu,
            &mut prepared,
            &mut progress,
        ) {
            Ok(todo) => todo,
            Err(fatal) => {
                give_back(slot);
                return Some(Err(fatal));
            }
        };
        if todo.is_empty() {
            state.scratch.trim_if_asked();
            continue;
        }
        // 2. Decode straight into the arena (one output view per image).
        // Replacements (later rounds) go where an image of an earlier round
        // failed: those wait for the stream, earlier rounds included.
        let outputs_idle = std::mem::take(&mut first_round);
        // The decoder's host side reads the payloads from the shard maps here, on this
        // thread, for records the read-ahead thread checked perhaps a whole training
        // step ago (`read_checked` guarded that thread's reads, not this one's).
        crate::pipeline::guard_reads();
        let results = decode_into_arena(
            shared,
            &mut slot,
            &mut dec,
            decode_stream,
            &todo,
            outputs_idle,
        );
        if let Err(fatal) = progress.take_decoded(shared, plan, &todo, results) {
            give_back(slot);
            return Some(Err(fatal));
        }
        state.scratch.trim_if_asked();
    }
    drop(dec);
    // The transform (and the oversize copies into the arena) follow the decode.
    if let Err(e) = shared.compute.join(decode_stream) {
        // `give_back` lets the decode finish before the slot is reused.
        give_back(slot);
        return Some(Err(driver_err("cuStreamWaitEvent (decode done)", e)));
    }
    let offsets = progress.pack.offsets();
    let images: Vec<Staged> = progress.done.into_iter().flatten().collect();
    Some(enqueue(
        shared,
        plan,
        k,
        slot,
        &images,
        Copies::Decoded {
            regions: &progress.regions,
            offsets: &offsets,
        },
    ))
}

/// An image of the batch to decode on the device: its position in the batch,
/// its JPEG bytes, its label, its crop and flip, and its place in the arena
/// (`(offset, bytes)`).
type Todo<'a> = (usize, &'a [u8], u32, SampleParams, (usize, usize));

/// Where each position of a batch stands across the decode rounds.
struct Progress {
    /// The batch's positions in the epoch's order.
    positions: Vec<usize>,
    /// The record now tried at each position (a replacement after a failure).
    current: Vec<u64>,
    /// Failures at each position so far, for [`EpochPlan::replace_failed`].
    attempts: Vec<u32>,
    /// Each position's image once staged (decoded, or resized on the CPU).
    done: Vec<Option<Staged>>,
    /// `(pinned offset, arena offset, len)` of the CPU-resized images.
    regions: Vec<(usize, usize, usize)>,
    /// Each position's place in the slot's arena.
    pack: ArenaPack,
}

impl Progress {
    fn new(plan: &EpochPlan, k: u64, slot: &Slot) -> Result<Progress, LoaderError> {
        let positions: Vec<usize> = plan.batch_range(k).collect();
        let n = positions.len();
        let sizes = &slot.sizes;
        // On this route the pinned stride is one CPU-resized output.
        let pack = ArenaPack::new(sizes.batch * sizes.stride, n, sizes.pinned_stride).ok_or_else(
            || LoaderError::InvalidConfig {
                field: "size",
                reason: "the output images do not fit the device arena's budget per image".into(),
            },
        )?;
        Ok(Progress {
            current: positions.iter().map(|&p| plan.order[p]).collect(),
            attempts: vec![0u32; n],
            done: vec![None; n],
            regions: Vec::new(),
            pack,
            positions,
        })
    }

    /// Moves position `i` to its next replacement after `error`, or returns the
    /// error that ends the batch.
    fn replace(
        &mut self,
        plan: &EpochPlan,
        i: usize,
        error: LoaderError,
    ) -> Result<(), LoaderError> {
        plan.replace_failed(
            self.positions[i],
            error,
            &mut self.attempts[i],
            &mut self.current[i],
        )
    }

    /// Takes the decoder's `results` for `todo`: decoded images are done, failed
    /// ones replaced; `Err` is the error that ends the batch.
    fn take_decoded(
        &mut self,
        shared: &Shared,
        plan: &EpochPlan,
        todo: &[Todo<'_>],
        results: Vec<Result<(ImageInfo, Route), DecodeError>>,
    ) -> Result<(), LoaderError> {
        for (&(i, _, label, p, _), result) in todo.iter().zip(results) {
            let index = self.current[i];
            match result {
                Ok((info, route)) => {
                    shared.metrics.count_route(route.name());
                    self.done[i] = Some(Staged {
                        index,
                        label,
                        width: info.width,
                        height: info.height,
                        channels: 3,
                        crop: p.crop,
                        flip: p.flip,
                        bytes: info.rgb_len(),
                        source: None,
                    });
                }
                Err(source) => {
                    let error = LoaderError::Decode { index, source };
                    self.replace(plan, i, error)?;
                }
            }
        }
        Ok(())
    }
}

/// Orders the batch's decodes after the last reader of the slot's arena.
fn wait_for_arena(
    shared: &Shared,
    slot: &Slot,
    decode_stream: &CudaStream,
) -> Result<(), LoaderError> {
    // The decode waits for the kernel that last read this slot's arena (a
    // never-recorded event: no wait), not for the previous batch.
    decode_stream
        .wait(&slot.ready)
        .map_err(|e| driver_err("cuStreamWaitEvent (arena reuse, decode)", e))?;
    // The hardware engines write the arena when they are called, not in stream
    // order, so its last reader (the transform of this slot's previous batch; for
    // a new slot, its allocation) must be done on the host's clock. Usually it
    // is: `begin_host_writes` waited for it. With that, the first decode
    // need not wait for everything queued on the decode stream (the batch
    // before last), which keeps running meanwhile. Timed as the decoder's
    // `stream_wait_s`.
    let waiting = Instant::now();
    slot.ready
        .synchronize()
        .map_err(|e| driver_err("cuEventSynchronize (arena reuse)", e))?;
    shared
        .metrics
        .add_gpu_decode_timings(&stoker_decode::DecodeTimings {
            stream_wait_s: waiting.elapsed().as_secs_f64(),
            ..Default::default()
        });
    Ok(())
}

/// Reads and checks the records of the positions not done yet (the
/// read-ahead's checks first, where it made them): those that get a place in
/// the arena are returned for the device decode, each with its crop drawn from
/// the header (the decoder needs only the crop: the kernel's taps stay inside
/// the crop box); the others are decoded, cropped and resized on the CPU into
/// the slot's pinned staging. Failed records are replaced; `Err` is the error
/// that ends the batch.
fn check_left<'a, 'r: 'a>(
    shared: &Shared,
    plan: &EpochPlan,
    slot: &mut Slot,
    reader: &'a DatasetReader,
    (decoder, scratch): (&CpuDecoder, &mut Scratch),
    prepared: &mut [Option<Result<Checked<'r>, LoaderError>>],
    progress: &mut Progress,
) -> Result<Vec<Todo<'a>>, LoaderError> {
    let host = HostStaging::new(shared, plan);
    let pinned_stride = slot.sizes.pinned_stride;
    let mut todo: Vec<Todo<'a>> = Vec::new();
    for i in 0..progress.done.len() {
        if progress.done[i].is_some() {
            continue;
        }
        let index = progress.current[i];
        let host = host.keyed(plan.draw_key(progress.positions[i], progress.attempts[i]));
        let checked = match prepared.get_mut(i).and_then(Option::take) {
            // Checked on the read-ahead thread; one without a place is decoded here.
            Some(c) => {
                crate::pipeline::guard_reads();
                c
            }
            None => check_record(shared, reader, index, decoder.limits()),
        };
        let outcome = match checked {
            Ok(Checked {
                payload,
                label,
                info,
            }) => {
                if let Some(place) = progress.pack.place(i, info.rgb_len()) {
                    let p = host.draw.params(info.width, info.height);
                    todo.push((i, payload, label, p, place));
                    Ok(())
                } else {
                    // Allocated with the slot on this route (never lazy).
                    let staged = slot.pinned_pixels().and_then(|(pinned, _)| {
                        let dst = &mut pinned[i * pinned_stride..(i + 1) * pinned_stride];
                        retry_short_of_memory(&mut *scratch, false, Scratch::release, |s| {
                            stage_oversize(&host, index, label, payload, (decoder, s), dst)
                        })
                    });
                    staged.map(|s| {
                        let at = progress.pack.cpu_place(i);
                        progress.regions.push((i * pinned_stride, at, s.bytes));
                        progress.done[i] = Some(s);
                    })
                }
            }
            Err(e) => Err(e),
        };
        if let Err(error) = outcome {
            progress.replace(plan, i, error)?;
        }
    }
    Ok(todo)
}

/// Decodes `todo` straight into the slot's arena (each image at its place) on
/// `decode_stream`, and moves the decoder's phase times and the decode
/// counters into the loader's stats.
fn decode_into_arena(
    shared: &Shared,
    slot: &mut Slot,
    dec: &mut GpuDecoder,
    decode_stream: &CudaStream,
    todo: &[Todo<'_>],
    outputs_idle: bool,
) -> Vec<Result<(ImageInfo, Route), DecodeError>> {
    let t_decode = Instant::now();
    let results = {
        let places: Vec<(usize, usize)> = todo.iter().map(|t| t.4).collect();
        let mut carved = ArenaPart::carve(&mut slot.arena, &places, decode_stream);
        let inputs: Vec<&[u8]> = todo.iter().map(|t| t.1).collect();
        let regions: Vec<Region> = todo.iter().map(|t| t.3.region()).collect();
        let usage = BatchUse {
            outputs_idle,
            regions: Some(&regions),
        };
        let r = dec.decode_batch_for(&inputs, carved.parts.as_mut_slice(), decode_stream, usage);
        // The decoder's phase times move into the loader's stats.
        shared.metrics.add_gpu_decode_timings(&dec.timings());
        dec.reset_timings();
        r
    };
    let bytes: usize = todo.iter().map(|t| t.1.len()).sum();
    shared.metrics.record(
        Stage::Decode,
        todo.len() as u64,
        bytes as u64,
        t_decode.elapsed(),
    );
    results
}
