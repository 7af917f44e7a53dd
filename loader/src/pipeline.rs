//! The internal contract between [`crate::Loader`] and a backend (CPU here, GPU in
//! `loader/src/gpu/`), and the public epoch iterator built on it.
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
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::batch::Batch;
use crate::builder::OnError;
use crate::error::LoaderError;
use crate::metrics::{Metrics, Stage};
use crate::sampler::LoaderState;

// The record → pixels steps, at the path the GPU backend imports them from.
pub(crate) use crate::pixels::{cpu_decode_counted, raw_payload_len, read_checked};

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
    fn hand_out(&self, batch: u64, epoch: u64, on_error: OnError, metrics: &Metrics) {
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

/// An epoch whose pipeline has started: its batches, and the bad records met building
/// them.
pub(crate) struct Started {
    pub(crate) stream: Box<dyn EpochStream + Send>,
    pub(crate) bad: Arc<BadLog>,
    pub(crate) on_error: OnError,
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

/// What a wait for the next batch of an epoch came to ([`Epoch::next_until`]).
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

/// Which epoch is being iterated, and how far the consumer got.
#[derive(Debug)]
pub(crate) struct Progress {
    /// `Some(epoch)` while an [`Epoch`] iterator is alive.
    pub(crate) active: Option<u64>,
    /// What [`crate::Loader::state`] reports.
    pub(crate) state: LoaderState,
}

pub(crate) fn lock(progress: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    progress.lock().unwrap_or_else(|p| p.into_inner())
}

/// The batches of one epoch: an iterator of `Result<Batch, LoaderError>`, returned by
/// [`crate::Loader::epoch`].
///
/// Dropping it mid-epoch stops the pipeline's work on this epoch promptly; the loader can then
/// start another epoch (or resume this one from [`crate::Loader::state`]).
pub struct Epoch<'a> {
    epoch: u64,
    /// `ready` sampled when the consumer started waiting for the next batch (kept across
    /// [`Next::Pending`] returns, so a timed wait counts the queue once per batch).
    ready_at_ask: Option<u64>,
    stream: Option<Box<dyn EpochStream + Send>>,
    /// The bad records met building this epoch's batches, counted at hand-out.
    bad: Option<(Arc<BadLog>, OnError)>,
    /// One past the last batch of the epoch.
    end: u64,
    /// Called once when the last batch is handed out: starts the next epoch's
    /// pipeline while the consumer works on this one's last batch
    /// ([`crate::LoaderBuilder::prefetch_next_epoch`]).
    on_last: Option<Box<dyn FnOnce() + Send + 'a>>,
    /// An error to yield once before ending (the epoch could not start).
    pending: Option<LoaderError>,
    metrics: Arc<Metrics>,
    progress: Arc<Mutex<Progress>>,
    /// Up to when this iterator's lifetime has been counted as elapsed ([`crate::metrics::clock_ns`]).
    mark_ns: u64,
    finished: bool,
    /// Whether this iterator registered itself as the active epoch (and must clear it).
    owns_active: bool,
    /// What must outlive the pipeline (the loader, for [`crate::Loader::epoch_shared`]);
    /// declared last so it is dropped after the stream.
    _owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl<'a> Epoch<'a> {
    pub(crate) fn running(
        epoch: u64,
        started: Started,
        end: u64,
        on_last: Option<Box<dyn FnOnce() + Send + 'a>>,
        metrics: Arc<Metrics>,
        progress: Arc<Mutex<Progress>>,
        owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Self {
        Epoch {
            epoch,
            ready_at_ask: None,
            stream: Some(started.stream),
            bad: Some((started.bad, started.on_error)),
            end,
            on_last,
            pending: None,
            metrics,
            progress,
            mark_ns: crate::metrics::clock_ns(),
            finished: false,
            owns_active: true,
            _owner: owner,
        }
    }

    pub(crate) fn failed(
        epoch: u64,
        error: LoaderError,
        metrics: Arc<Metrics>,
        progress: Arc<Mutex<Progress>>,
        owns_active: bool,
    ) -> Self {
        Epoch {
            epoch,
            ready_at_ask: None,
            stream: None,
            bad: None,
            end: 0,
            on_last: None,
            pending: Some(error),
            metrics,
            progress,
            mark_ns: crate::metrics::clock_ns(),
            finished: false,
            owns_active,
            _owner: None,
        }
    }

    /// The epoch being iterated.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Counts the bad records of batch `batch`, being handed out now.
    fn count_bad(&self, batch: u64) {
        if let Some((bad, on_error)) = &self.bad {
            bad.hand_out(batch, self.epoch, *on_error, &self.metrics);
        }
    }

    /// The next batch, waiting for it at most until `deadline`: [`Next::Pending`] if
    /// it passed first (call again; nothing is lost), [`Next::Done`] at the end of the
    /// epoch. The iterator's `next` is this without a deadline. For a consumer that must
    /// stay responsive while it waits (a Python binding checking for Ctrl-C, a
    /// training loop with a watchdog); the time spent waiting counts as consumer wait
    /// in [`crate::Stats`] either way.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::{Duration, Instant};
    /// use stoker_loader::{Loader, Next};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?;
    /// let mut epoch = loader.epoch(0);
    /// loop {
    ///     match epoch.next_until(Instant::now() + Duration::from_millis(100)) {
    ///         Next::Ready(batch) => { let _batch = batch?; }
    ///         Next::Pending => { /* check for a stop request, then wait again */ }
    ///         Next::Done => break,
    ///         _ => unreachable!("no other outcome"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn next_until(&mut self, deadline: Instant) -> Next {
        self.advance(Some(deadline))
    }

    /// [`Epoch::next_until`] with a deadline `timeout` from now.
    pub fn next_timeout(&mut self, timeout: Duration) -> Next {
        self.advance(Some(Instant::now() + timeout))
    }

    fn advance(&mut self, deadline: Option<Instant>) -> Next {
        if let Some(e) = self.pending.take() {
            return Next::Ready(Err(e));
        }
        let Some(stream) = self.stream.as_mut() else {
            return Next::Done;
        };
        let ready = *self.ready_at_ask.get_or_insert_with(|| stream.ready());
        let t0 = Instant::now();
        let item = stream.next_batch(deadline);
        let wait = t0.elapsed();
        self.metrics.account_elapsed(&mut self.mark_ns);
        if !matches!(item, Next::Pending) {
            self.ready_at_ask = None;
        }
        match &item {
            Next::Pending => self.metrics.wait_only(wait),
            Next::Ready(Ok(batch)) => {
                self.count_bad(batch.index);
                let t1 = Instant::now();
                {
                    let mut p = lock(&self.progress);
                    p.state.epoch = self.epoch;
                    p.state.position = batch.index + 1;
                }
                let handoff = t1.elapsed();
                self.metrics.handoff(batch.len() as u64, wait, ready);
                self.metrics
                    .record(Stage::Handoff, batch.len() as u64, 0, handoff);
                if batch.index + 1 >= self.end {
                    if let Some(start_next) = self.on_last.take() {
                        // Time the consumer spends here is waiting, like a blocked `next`.
                        let t2 = Instant::now();
                        start_next();
                        self.metrics.wait_only(t2.elapsed());
                    }
                }
            }
            Next::Ready(Err(_)) => {
                self.metrics.wait_only(wait);
                // Batches come in order, so this error is batch `position`.
                let position = {
                    let mut p = lock(&self.progress);
                    p.state.epoch = self.epoch;
                    p.state.position += 1;
                    p.state.position - 1
                };
                self.count_bad(position);
            }
            Next::Done => {
                self.metrics.wait_only(wait);
                self.finished = true;
                self.stream = None;
                let mut p = lock(&self.progress);
                p.state.epoch = self.epoch + 1;
                p.state.position = 0;
            }
        }
        item
    }
}

impl Iterator for Epoch<'_> {
    type Item = Result<Batch, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.advance(None) {
            Next::Ready(item) => Some(item),
            // Only a deadline makes a stream answer `Pending`; be safe and end.
            Next::Pending | Next::Done => None,
        }
    }
}

impl Drop for Epoch<'_> {
    fn drop(&mut self) {
        // Stop the backend first (its Drop stops the workers), then account.
        self.stream = None;
        self.metrics.account_elapsed(&mut self.mark_ns);
        self.metrics.epoch_done(self.finished);
        if self.owns_active {
            lock(&self.progress).active = None;
        }
    }
}

impl std::fmt::Debug for Epoch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch")
            .field("epoch", &self.epoch)
            .field("finished", &self.finished)
            .finish()
    }
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
