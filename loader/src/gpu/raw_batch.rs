//! A batch of raw (pre-decoded) records: the reader pool stages every record
//! into the slot's pinned buffer (or points at it in the registered dataset
//! map), then the batch goes to [`super::assembly`] for the copies and the
//! transform.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use super::assembly::{enqueue, Copies};
use super::records::{stage_position, ReaderState, Staged};
use super::shared::{reuse_slot, Shared};
use super::staging::Slot;
use crate::batch::Batch;
use crate::error::{driver_err, LoaderError};
use crate::pipeline::EpochPlan;

/// Builds batch `k` into `slot`; `None` if stopped meanwhile (the slot goes back).
pub(super) fn build_batch(
    shared: &Shared,
    plan: &EpochPlan,
    k: u64,
    mut slot: Box<Slot>,
    stop: &AtomicBool,
) -> Option<Result<Batch, LoaderError>> {
    let give_back = |slot: Box<Slot>| {
        let _ = shared.free_tx.try_send(slot);
    };
    // Counters of the previous use of this slot, and the pinned-reuse wait.
    if let Err(e) = reuse_slot(shared, &mut slot) {
        give_back(slot);
        return Some(Err(e));
    }
    let range = plan.batch_range(k);
    let n = range.len();
    let stride = slot.sizes.stride;
    // The host stages every image here: pinned and arena share one layout.
    debug_assert_eq!(slot.sizes.pinned_stride, stride);
    let staged: Vec<Result<Staged, LoaderError>> = {
        let pinned = match slot.pinned.as_mut_slice() {
            Ok(p) => p,
            Err(e) => {
                give_back(slot);
                return Some(Err(driver_err("pinned staging access", e)));
            }
        };
        let positions: Vec<usize> = range.collect();
        shared.pool.install(|| {
            pinned[..n * stride]
                .par_chunks_mut(stride)
                .zip(positions.par_iter())
                .map_init(
                    || ReaderState::new(shared),
                    |state, (dst, &pos)| {
                        if stop.load(Ordering::Relaxed) {
                            return Err(LoaderError::Thread {
                                thread: "stoker-gpu".into(),
                                reason: "stopped".into(),
                            });
                        }
                        stage_position(shared, plan, pos, state, dst)
                    },
                )
                .collect()
        })
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
