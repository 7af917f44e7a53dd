//! The producer thread of a GPU epoch: walks the epoch's batches in order; for
//! each it takes a free slot of the staging ring (growing the ring when the
//! consumer holds every slot), has the batch built on the raw or the nvJPEG
//! route, and sends it. On the nvJPEG route a read-ahead thread checks batch
//! k+1 meanwhile. Nothing waits for the GPU on the way: while the consumer
//! trains on batch i, batch i+1 is being transformed, i+2 copied or decoded and
//! i+3 read, bounded by the ring.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;
use stoker_formats::DatasetReader;

use super::jpeg_batch::build_batch_nvjpeg;
use super::raw_batch::build_batch;
use super::read_ahead::{read_ahead, Prepared};
use super::records::{ReaderState, ThreadStates};
use super::registered::{CudaRegistrar, DirectMaps, RegisteredMaps};
use super::shared::{report_slot_memory, Shared, POLL};
use super::staging::Slot;
use super::window_locker::{Locked, Locker};
use super::window_plan::{plan_windows, window_of, Window};
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
    // Raw records over a dataset too large to lock whole: the page-locked
    // windows this epoch moves through (ended, whatever happens, on drop).
    let mut walk = WindowWalk::start(shared, plan);
    // The reader pool's states, kept over the epoch's raw batches.
    let states = ThreadStates::new(shared.pool.current_num_threads());
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
        let window = match walk.as_mut().map(|w| w.maps(k, stop)) {
            Some(None) => {
                // Stopped while the window was being locked.
                let _ = shared.free_tx.try_send(slot);
                return;
            }
            Some(Some(maps)) => maps,
            None => None,
        };
        let direct = shared
            .direct
            .as_ref()
            .and_then(DirectMaps::fixed)
            .or(window.as_deref());
        let built = catch_unwind(AssertUnwindSafe(|| match &shared.nvjpeg {
            Some(decoder) => {
                build_batch_nvjpeg(shared, plan, k, slot, state, decoder, stop, prepared)
            }
            None => build_batch(shared, plan, k, slot, stop, direct, &states),
        }));
        drop(window);
        if let Some(w) = walk.as_mut() {
            // Batch k's copies are enqueued (or it failed and the streams were
            // drained): its window may be unlocked after them.
            w.batch_enqueued(k);
        }
        let item = match built {
            Ok(Some(item)) => item,
            Ok(None) => return, // stopped
            Err(panic) => {
                // The slot went down with the panic (its `Drop` waited for the
                // device while unwinding): count it out, so that the reported
                // memory stays true and `take_slot` can grow the ring back if the
                // consumer needs it.
                shared.slots.fetch_sub(1, Ordering::AcqRel);
                // With lazy staging, whether it held its pixel staging went down
                // with it: still counted (an upper bound).
                if !shared.sizes.lazy_pixels {
                    shared.pixel_staging.fetch_sub(1, Ordering::AcqRel);
                }
                report_slot_memory(shared);
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

/// The producer's walk through an epoch's page-locked windows (raw records over
/// a dataset too large to lock whole, `window_plan` / `window_locker`): takes
/// each window before its first batch and releases it after its last batch's
/// copies are enqueued, with an event after them; dropping it ends the epoch's
/// windows after an event that follows everything enqueued so far.
struct WindowWalk<'s> {
    shared: &'s Shared,
    locker: &'s Locker<CudaRegistrar>,
    token: u64,
    windows: Vec<Window>,
    /// The window of the batch being built, and its maps while held.
    at: usize,
    held: Option<Locked<RegisteredMaps>>,
    /// For the epoch's summary: windows taken, bytes and time their locking
    /// took, and how long the producer waited for them.
    taken: u64,
    locked_bytes: u64,
    lock_time: Duration,
    waited: Duration,
}

impl<'s> WindowWalk<'s> {
    /// The walk for `plan`, or `None` when the dataset is not locked as a
    /// window, or the epoch's order has no window plan (it is staged, logged).
    fn start(shared: &'s Shared, plan: &EpochPlan) -> Option<WindowWalk<'s>> {
        let Some(DirectMaps::Windowed(locker)) = &shared.direct else {
            return None;
        };
        let shard_bytes: Vec<u64> = shared
            .dataset
            .manifest()
            .shards
            .iter()
            .map(|s| s.bytes)
            .collect();
        let planned = plan_windows(
            plan.start_batch..plan.num_batches,
            |k| &plan.order[plan.batch_range(k)],
            |i| shared.dataset.shard_of(i),
            &shard_bytes,
            locker.window_bytes(),
        );
        match planned {
            Ok(windows) => {
                tracing::info!(
                    epoch = plan.epoch,
                    windows = windows.len(),
                    window_mib = locker.window_bytes() >> 20,
                    "raw records: this epoch moves a page-locked window over the dataset"
                );
                let token = locker.begin(windows.iter().map(|w| w.shards.clone()).collect());
                Some(WindowWalk {
                    shared,
                    locker,
                    token,
                    windows,
                    at: 0,
                    held: None,
                    taken: 0,
                    locked_bytes: 0,
                    lock_time: Duration::ZERO,
                    waited: Duration::ZERO,
                })
            }
            Err(reason) => {
                tracing::info!(
                    epoch = plan.epoch,
                    "raw records: this epoch is staged through pinned memory ({reason})"
                );
                None
            }
        }
    }

    /// The maps batch `k` copies from (`Some(None)`: its window could not be
    /// locked, its records are staged); `None` once stopped.
    fn maps(&mut self, k: u64, stop: &AtomicBool) -> Option<Option<Arc<RegisteredMaps>>> {
        let w = window_of(&self.windows, k, self.at)?;
        if self.held.is_none() || w != self.at {
            self.at = w;
            let started = Instant::now();
            let taken = self.locker.wait_window(self.token, w, stop)?;
            self.waited += started.elapsed();
            if taken.locked.is_ok() {
                self.taken += 1;
                self.locked_bytes += self.windows[w].bytes;
                self.lock_time += taken.lock_time;
            }
            self.held = Some(taken.locked);
        }
        Some(self.held.as_ref().and_then(|l| l.as_ref().ok().cloned()))
    }

    /// Batch `k` is enqueued: after the last batch of its window, the window is
    /// released once the copies enqueued so far are done.
    fn batch_enqueued(&mut self, k: u64) {
        if self
            .windows
            .get(self.at)
            .is_some_and(|w| w.batches.end == k + 1)
            && self.held.is_some()
        {
            self.held = None;
            self.locker
                .release_window(self.token, self.at, self.fence());
        }
    }

    /// An event after everything enqueued on the copy stream (`None` if it could
    /// not be recorded: the locker then waits for the whole stream). Always a
    /// blocking one, whatever `Shared::waits` says: the locker's thread waits
    /// for it off the batches' path, about a training step each time, which
    /// spinning would take a core for.
    fn fence(&self) -> Option<CudaEvent> {
        self.shared
            .copy
            .record_event(Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC))
            .map_err(|e| tracing::warn!("recording a page-locked window's fence: {e}"))
            .ok()
    }
}

impl Drop for WindowWalk<'_> {
    fn drop(&mut self) {
        self.held = None;
        self.locker.end(self.token, self.fence());
        // Whether locking keeps up: the locker locks a window while the one
        // before is read, so the producer waits only when locking is slower.
        let secs = self.lock_time.as_secs_f64();
        tracing::info!(
            windows = self.taken,
            locked_mib = self.locked_bytes >> 20,
            lock_ms = self.lock_time.as_millis() as u64,
            lock_gb_s = if secs > 0.0 {
                self.locked_bytes as f64 / secs / 1e9
            } else {
                0.0
            },
            producer_waited_ms = self.waited.as_millis() as u64,
            "raw records: page-locked windows of the epoch"
        );
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
        shared.waits,
    )?;
    let total = shared.slots.fetch_add(1, Ordering::AcqRel) + 1;
    if !shared.sizes.lazy_pixels {
        shared.pixel_staging.fetch_add(1, Ordering::AcqRel);
    }
    tracing::warn!(
        slots = total,
        "the consumer holds every GPU batch slot: adding one (drop batches to keep memory fixed)"
    );
    report_slot_memory(shared);
    Ok(Box::new(slot))
}
