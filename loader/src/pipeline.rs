//! The internal contract between [`crate::Loader`] and a backend (CPU in `cpu.rs`, GPU in
//! `loader/src/gpu/`): what a backend is given for an epoch ([`EpochPlan`]) and what it hands
//! back ([`EpochStream`]). Backends import this module, never the builder or the loader.
//!
//! # Contract
//!
//! - The loader computes this rank's order for the epoch with the [`crate::Sampler`] and
//!   passes it in an [`EpochPlan`] to [`Pipeline::start_epoch`].
//! - The backend produces batches `plan.start_batch .. plan.num_batches` of
//!   `plan.order` and returns them **in order** from [`EpochStream::next_batch`] (blocking),
//!   then `None`. Batch `k` holds the samples `plan.order[plan.batch_range(k)]`; a sample that
//!   fails is replaced through [`EpochPlan::replace_failed`] (which notes it; the consumer
//!   side counts it when its batch is handed out)
//!   unless `plan.on_error` is
//!   [`crate::OnError::Error`], in which case batch `k` is an `Err` naming the record and the
//!   stream continues with batch `k + 1`.
//! - Per-sample crop/flip come from [`crate::Transform::params`] with `plan.seed`,
//!   `plan.epoch` and the dataset index of the sample actually used.
//! - The backend keeps at most `prefetch` batches in flight, records the read / decode /
//!   transform / h2d stages into the shared metrics, and reports how many finished batches
//!   are waiting ([`EpochStream::ready`]).
//! - Dropping the stream stops production promptly (well under a second): no thread may stay
//!   blocked on a consumer that is gone. Dropping the backend joins its threads.
//! - The loader, not the backend, measures consumer wait, handoff, elapsed time and the resume
//!   position.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::batch::Batch;
use crate::config::OnError;
use crate::error::LoaderError;
use crate::metrics::Metrics;

/// How many replacements are tried for one bad sample before the batch fails with
/// [`LoaderError::TooManyBadRecords`].
const MAX_REPLACEMENTS: u32 = 16;

/// What to produce for one epoch on this rank.
#[derive(Debug, Clone)]
pub(crate) struct EpochPlan {
    /// The epoch number (seeds the transforms).
    pub(crate) epoch: u64,
    /// The shuffle seed (seeds the transforms together with `epoch`).
    pub(crate) seed: u64,
    /// This rank's sample indices for the epoch, in order.
    pub(crate) order: Arc<[u64]>,
    /// Full batch size; the last batch may be shorter.
    pub(crate) batch_size: u64,
    /// Batches in the epoch.
    pub(crate) num_batches: u64,
    /// First batch to produce (`> 0` when resuming mid-epoch).
    pub(crate) start_batch: u64,
    /// Replace bad records or fail the batch.
    pub(crate) on_error: OnError,
    /// The bad records met while building this epoch's batches (shared with the
    /// consumer side, which counts them as their batches are handed out).
    pub(crate) bad: Arc<BadLog>,
}

impl EpochPlan {
    /// Positions in `order` of batch `batch`.
    pub(crate) fn batch_range(&self, batch: u64) -> Range<usize> {
        let start = (batch * self.batch_size) as usize;
        start..(start + self.batch_size as usize).min(self.order.len())
    }

    /// The sample that stands in for position `pos` after `attempt` (≥ 1) failures: the
    /// `attempt`-th next sample of this epoch's order, wrapping around. Deterministic, so the
    /// replacement does not depend on thread timing.
    pub(crate) fn replacement(&self, pos: usize, attempt: u32) -> u64 {
        self.order[(pos + attempt as usize) % self.order.len()]
    }

    /// Notes that record `*current`, tried for position `pos`, failed with `error`, and
    /// moves `*current` to the next replacement (`*attempt` counts them), or returns the
    /// error that ends the batch ([`OnError::Error`], or too many failures in a row).
    pub(crate) fn replace_failed(
        &self,
        pos: usize,
        error: LoaderError,
        attempt: &mut u32,
        current: &mut u64,
    ) -> Result<(), LoaderError> {
        self.note_bad(pos, *current, &error);
        if self.on_error == OnError::Error {
            return Err(error);
        }
        *attempt += 1;
        if *attempt > MAX_REPLACEMENTS {
            return Err(LoaderError::TooManyBadRecords {
                index: self.order[pos],
                attempts: MAX_REPLACEMENTS,
            });
        }
        *current = self.replacement(pos, *attempt);
        Ok(())
    }

    /// Notes that record `index`, tried for position `pos`, failed with `error`. It is
    /// counted in [`crate::Stats::bad_records`] (and logged) when the batch holding
    /// `pos` is handed out, not before.
    fn note_bad(&self, pos: usize, index: u64, error: &LoaderError) {
        let entry = BadEntry {
            batch: pos as u64 / self.batch_size.max(1),
            index,
            error: error.to_string(),
        };
        self.bad
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
    }
}

/// Bad records met while an epoch's batches are built, held until their batch is
/// handed out: [`crate::Stats::bad_records`] counts a bad record only when the consumer
/// gets the batch it was met in (replaced, or as that batch's error), so batches built
/// and never handed out (an early start that is discarded, the batches prefetched when
/// an epoch is dropped mid-way) count nothing, and no record counts twice.
#[derive(Debug, Default)]
pub(crate) struct BadLog(Mutex<Vec<BadEntry>>);

#[derive(Debug)]
struct BadEntry {
    batch: u64,
    index: u64,
    error: String,
}

impl BadLog {
    /// Counts (and logs, the first time an index is seen) the bad records of batch
    /// `batch`, which is being handed out.
    pub(crate) fn hand_out(&self, batch: u64, epoch: u64, on_error: OnError, metrics: &Metrics) {
        let handed: Vec<BadEntry> = {
            let mut entries = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if entries.is_empty() {
                return;
            }
            let (handed, kept) = std::mem::take(&mut *entries)
                .into_iter()
                .partition(|e| e.batch == batch);
            *entries = kept;
            handed
        };
        for e in handed {
            if metrics.bad_record(e.index) {
                match on_error {
                    OnError::Replace => {
                        tracing::warn!(index = e.index, epoch, error = %e.error, "bad record replaced by the next sample")
                    }
                    OnError::Error => {
                        tracing::warn!(index = e.index, epoch, error = %e.error, "bad record: its batch is an error (OnError::Error)")
                    }
                }
            }
        }
    }
}

/// A backend: builds batches for an epoch.
pub(crate) trait Pipeline: Send + Sync {
    /// Starts producing `plan`'s batches.
    ///
    /// # Errors
    ///
    /// Whatever prevents the epoch from starting (the backend is unusable).
    fn start_epoch(&self, plan: EpochPlan) -> Result<Box<dyn EpochStream + Send>, LoaderError>;
}

/// What a wait for the next batch of an epoch came to ([`crate::Epoch::next_until`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Next {
    /// The next batch (or its error; iteration may continue).
    Ready(Result<Batch, LoaderError>),
    /// The deadline passed first; ask again.
    Pending,
    /// The epoch has no more batches.
    Done,
}

/// The batches of one epoch, in order.
pub(crate) trait EpochStream {
    /// The next batch, waiting for it until `deadline` (for ever with `None`):
    /// [`Next::Pending`] only when the deadline passed, [`Next::Done`] after the last one.
    fn next_batch(&mut self, deadline: Option<Instant>) -> Next;
    /// Finished batches waiting right now (queue occupancy).
    fn ready(&self) -> u64;
}

/// The error of a worker (`thread`) whose shard reader could not be opened (`reason`): not a
/// bad record, the worker cannot read at all.
pub(crate) fn reader_unavailable(thread: &str, reason: &str) -> LoaderError {
    LoaderError::Thread {
        thread: thread.to_owned(),
        reason: format!("cannot open a shard reader: {reason}"),
    }
}

/// The message of a caught panic (a worker's or the producer's), for
/// [`LoaderError::Thread`].
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".into()
    }
}
