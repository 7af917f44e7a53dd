//! A batch of raw (pre-decoded) records: the reader pool stages every record
//! into the slot's pinned buffer (or points at it in the registered dataset
//! map), then the batch goes to [`super::assembly`] for the copies and the
//! transform.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use super::assembly::{enqueue, Copies};
use super::records::{stage_position, ReaderState, Staged, ThreadStates};
use super::registered::RegisteredMaps;
use super::shared::{report_slot_memory, reuse_slot, Shared};
use super::staging::Slot;
use crate::batch::Batch;
use crate::error::LoaderError;
use crate::pipeline::EpochPlan;

/// Builds batch `k` into `slot`, copying raw records from `direct` (the
/// page-locked maps this batch may read) where they lie in it; `None` if stopped
/// meanwhile (the slot goes back). The reader pool's threads read with the
/// epoch's `states`.
pub(super) fn build_batch(
    shared: &Shared,
    plan: &EpochPlan,
    k: u64,
    mut slot: Box<Slot>,
    stop: &AtomicBool,
    direct: Option<&RegisteredMaps>,
    states: &ThreadStates,
) -> Option<Result<Batch, LoaderError>> {
    let give_back = |slot: Box<Slot>| {
        let _ = shared.free_tx.try_send(slot);
    };
    // Counters of the previous use of this slot, and the pinned-reuse wait.
    if let Err(e) = reuse_slot(shared, &mut slot) {
        give_back(slot);
        return Some(Err(e));
    }
    let positions: Vec<usize> = plan.batch_range(k).collect();
    let n = positions.len();
    let stride = slot.sizes.stride;
    // The host stages every image here: pinned and arena share one layout.
    debug_assert_eq!(slot.sizes.pinned_stride, stride);
    let stage = |pos: usize, state: &mut ReaderState, dst: &mut [u8]| {
        if stop.load(Ordering::Relaxed) {
            return Err(LoaderError::Thread {
                thread: "stoker-gpu".into(),
                reason: "stopped".into(),
            });
        }
        stage_position(shared, plan, pos, state, dst, direct)
    };
    let staged: Vec<Result<Staged, LoaderError>> = if slot.has_pixels() {
        let pinned = match slot.pinned_pixels() {
            Ok((p, _)) => p,
            Err(e) => {
                give_back(slot);
                return Some(Err(e));
            }
        };
        shared.pool.install(|| {
            pinned[..n * stride]
                .par_chunks_mut(stride)
                .zip(positions.par_iter())
                .map_init(
                    || states.lend(|| ReaderState::new(shared)),
                    |state, (dst, &pos)| stage(pos, state, dst),
                )
                .collect()
        })
    } else {
        match stage_without_pixels(shared, &mut slot, &positions, states, &stage) {
            Ok(staged) => staged,
            Err(e) => {
                give_back(slot);
                return Some(Err(e));
            }
        }
    };
    if stop.load(Ordering::Acquire) {
        give_back(slot);
        return None;
    }
    let mut images = Vec::with_capacity(n);
    for s in staged {
        match s {
            Ok(s) => images.push(s),
            Err(e) => {
                give_back(slot);
                return Some(Err(e));
            }
        }
    }
    // One copy of the staging prefix, or (records in the registered map) one per
    // record, of its own bytes.
    let by_record = images.iter().any(|s| s.source.is_some());
    let bytes = if by_record {
        images.iter().map(|s| s.bytes).sum()
    } else {
        match images.last() {
            Some(last) => (n - 1) * stride + last.bytes,
            None => 0,
        }
    };
    Some(enqueue(
        shared,
        plan,
        k,
        slot,
        &images,
        Copies::Staged { bytes, by_record },
    ))
}

/// Stages the records at `positions` for a slot without pixel staging (records
/// copied from the page-locked map need none): each reader thread puts a record
/// the map cannot give (outside the window, a replacement, a resized image) in
/// its own buffer first; only if there is one is the slot's pixel staging
/// allocated (once per slot, counted in the reported pinned bytes) and those
/// records copied into their places in it.
///
/// # Errors
/// Pinned memory for the staging could not be allocated.
fn stage_without_pixels<F>(
    shared: &Shared,
    slot: &mut Slot,
    positions: &[usize],
    states: &ThreadStates,
    stage: &F,
) -> Result<Vec<Result<Staged, LoaderError>>, LoaderError>
where
    F: Fn(usize, &mut ReaderState, &mut [u8]) -> Result<Staged, LoaderError> + Sync,
{
    let stride = slot.sizes.stride;
    // Each record staged, with its pixels when they are in the thread's buffer.
    type Spilled = Result<(Staged, Option<Vec<u8>>), LoaderError>;
    let results: Vec<Spilled> = shared.pool.install(|| {
        positions
            .par_iter()
            .map_init(
                || states.lend(|| ReaderState::new(shared)),
                |lent, &pos| {
                    let (state, own) = lent.with_spill(stride);
                    let s = stage(pos, state, own)?;
                    let spilled = s.source.is_none().then(|| own[..s.bytes].to_vec());
                    Ok((s, spilled))
                },
            )
            .collect()
    });
    if results.iter().any(|r| matches!(r, Ok((_, Some(_))))) {
        let (pinned, allocated) = slot.pinned_pixels()?;
        for (i, r) in results.iter().enumerate() {
            if let Ok((_, Some(bytes))) = r {
                pinned[i * stride..i * stride + bytes.len()].copy_from_slice(bytes);
            }
        }
        if allocated {
            shared.pixel_staging.fetch_add(1, Ordering::AcqRel);
            report_slot_memory(shared);
            tracing::debug!("raw records: a record outside the page-locked map; this slot now has pixel staging");
        }
    }
    Ok(results.into_iter().map(|r| r.map(|(s, _)| s)).collect())
}
