//! The producer thread of a GPU epoch: walks the epoch's batches in order; for
//! each it takes a free slot of the staging ring (growing the ring when the
//! consumer holds every slot), has the batch built on the raw or the nvJPEG
//! route, and sends it. On the nvJPEG route a read-ahead thread checks batch
//! k+1 meanwhile. Nothing waits for the GPU on the way: while the consumer
//! trains on batch i, batch i+1 is being transformed, i+2 copied or decoded and
//! i+3 read, bounded by the ring.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use stoker_formats::DatasetReader;

use super::jpeg_batch::build_batch_nvjpeg;
use super::raw_batch::build_batch;
use super::read_ahead::{read_ahead, Prepared};
use super::records::ReaderState;
use super::shared::{Shared, POLL};
use super::staging::Slot;
use crate::batch::Batch;
use crate::error::{driver_err, LoaderError};
use crate::pipeline::{panic_message, EpochPlan};

/// The producer thread: every batch of the plan, in order.
///
/// On the nvJPEG route a second thread (`stoker-gpu-read`) reads, CRC-checks and
/// probes the records of batch k+1 while this one decodes batch k (bounded to one
/// batch ahead); the payloads stay borrowed from that thread's memory-mapped
/// reader, which outlives both threads.
pub(super) fn produce(
    shared: &Shared,
    plan: &EpochPlan,
    tx: &Sender<Result<Batch, LoaderError>>,
    stop: &AtomicBool,
) {
    if let Err(e) = shared.ctx.bind_to_thread() {
        let _ = tx.send(Err(driver_err("cuCtxSetCurrent (producer)", e)));
        return;
    }
    // The producer's own reader and CPU decoder (nvJPEG route: records that the
    // read-ahead did not check, and replacements, are read here, their bytes
    // borrowed from the memory map while nvJPEG parses them).
    let mut state = ReaderState::new(shared);
    // Without a reader for the read-ahead, the producer reads every record itself.
    let mut ahead_reader = shared
        .nvjpeg
        .as_ref()
        .and_then(|_| shared.dataset.reader().ok());
    std::thread::scope(|scope| {
        let ahead = ahead_reader.as_mut().and_then(|reader| {
            let (ahead_tx, ahead_rx) = crossbeam_channel::bounded(1);
            std::thread::Builder::new()
                .name("stoker-gpu-read".into())
                .spawn_scoped(scope, move || {
                    // `&mut` moved in (the reader is Send, not Sync), used shared
                    // here for the whole scope: the payloads live as long.
                    let reader: &DatasetReader = reader;
                    read_ahead(shared, plan, reader, stop, &ahead_tx);
                })
                .ok()
                .map(|_| ahead_rx)
        });
        produce_batches(shared, plan, tx, stop, &mut state, ahead.as_ref());
        // Dropping `ahead` here ends a read-ahead blocked on its send.
    });
}

/// The batches of the plan, in order (see [`produce`]).
fn produce_batches<'r>(
    shared: &Shared,
    plan: &EpochPlan,
    tx: &Sender<Result<Batch, LoaderError>>,
    stop: &AtomicBool,
    state: &mut ReaderState,
    ahead: Option<&Receiver<(u64, Prepared<'r>)>>,
) {
    for k in plan.start_batch..plan.num_batches {
        // Taken before the slot so that the read-ahead of k+1 starts at once.
        let prepared = match ahead {
            Some(rx) if shared.nvjpeg.is_some() => match next_prepared(rx, k, stop) {
                Prepared::Stopped => return,
                p => Some(p),
            },
            _ => None,
        };
        let slot = match take_slot(shared, stop, tx) {
            Some(Ok(slot)) => slot,
            Some(Err(e)) => {
                let _ = tx.send(Err(e));
                return;
            }
            None => return,
        };
        let built = catch_unwind(AssertUnwindSafe(|| match &shared.nvjpeg {
            Some(decoder) => {
                build_batch_nvjpeg(shared, plan, k, slot, state, decoder, stop, prepared)
            }
            None => build_batch(shared, plan, k, slot, stop),
        }));
        let item = match built {
            Ok(Some(item)) => item,
            Ok(None) => return, // stopped
            Err(panic) => {
                // The slot went down with the panic (its `Drop` waited for the
                // device while unwinding): count it out, so that the reported
                // memory stays true and `take_slot` can grow the ring back if the
                // consumer needs it.
                let total = shared
                    .slots
                    .fetch_sub(1, Ordering::AcqRel)
                    .saturating_sub(1);
                report_slot_memory(shared, total);
                Err(LoaderError::Thread {
                    thread: "stoker-gpu".into(),
                    reason: panic_message(&panic),
                })
            }
        };
        let mut item = item;
        loop {
            match tx.send_timeout(item, POLL) {
                Ok(()) => break,
                Err(SendTimeoutError::Timeout(back)) => {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    item = back;
                }
                Err(SendTimeoutError::Disconnected(_)) => return,
            }
        }
    }
}

/// The read-ahead's batch `k`: waits for it, watching the stop flag.
fn next_prepared<'r>(
    rx: &Receiver<(u64, Prepared<'r>)>,
    k: u64,
    stop: &AtomicBool,
) -> Prepared<'r> {
    loop {
        match rx.recv_timeout(POLL) {
            Ok((got, p)) if got == k => return p,
            // Cannot happen (both walk the same batches in order); read it here.
            Ok(_) => return Prepared::Missing,
            Err(RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Acquire) {
                    return Prepared::Stopped;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return Prepared::Missing,
        }
    }
}

/// A free slot, or `None` once stopped.
///
/// When the consumer holds every slot (it keeps batches alive instead of dropping
/// them) and nothing is waiting in the queue, waiting would never end: the ring
/// grows by one slot instead (logged once per growth; reported in the stats'
/// pinned/device bytes), as the CPU path allocates a buffer in that case.
fn take_slot(
    shared: &Shared,
    stop: &AtomicBool,
    queued: &Sender<Result<Batch, LoaderError>>,
) -> Option<Result<Box<Slot>, LoaderError>> {
    loop {
        match shared.free_rx.recv_timeout(POLL) {
            Ok(slot) => return Some(Ok(slot)),
            Err(RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Acquire) {
                    return None;
                }
                if queued.is_empty() && shared.free_rx.is_empty() {
                    return Some(grow(shared));
                }
            }
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// Allocates one more slot (see [`take_slot`]).
fn grow(shared: &Shared) -> Result<Box<Slot>, LoaderError> {
    let slot = Slot::new(
        &shared.ctx,
        &shared.compute,
        shared.sizes,
        shared.write_combined,
    )?;
    let total = shared.slots.fetch_add(1, Ordering::AcqRel) + 1;
    tracing::warn!(
        slots = total,
        "the consumer holds every GPU batch slot: adding one (drop batches to keep memory fixed)"
    );
    report_slot_memory(shared, total);
    Ok(Box::new(slot))
}

/// Reports the pinned and device memory of `slots` batch slots.
fn report_slot_memory(shared: &Shared, slots: usize) {
    shared
        .metrics
        .set_pinned_bytes((slots * shared.sizes.pinned_bytes()) as u64);
    shared
        .metrics
        .set_device_bytes((slots * shared.sizes.device_bytes()) as u64);
}
