//! The [`Loader`] and the [`Epoch`] iterators it hands out: which epoch runs, where the
//! consumer stands (resume state), the next epoch's early start, and the consumer-side
//! counters (wait, handoff, elapsed, bad records at hand-out). The backend behind it
//! produces the batches (`crate::pipeline`).

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::batch::Batch;
use crate::config::{LoaderConfig, OnError};
use crate::error::LoaderError;
use crate::fork::{lock_unless_held, ForkSafe, Owner};
use crate::metrics::{Metrics, Stage, Stats};
use crate::order_ahead::OrderAhead;
use crate::pipeline::{BadLog, EpochPlan, EpochStream, Next, Pipeline};
use crate::resume::{resume_start, DatasetFingerprint, LoaderState};
use crate::sampler::Sampler;

mod checkpoint;
mod notes;

/// An epoch whose pipeline has started: its batches, and the bad records met building
/// them.
pub(crate) struct Started {
    pub(crate) stream: Box<dyn EpochStream + Send>,
    pub(crate) bad: Arc<BadLog>,
    pub(crate) on_error: OnError,
}

/// The loader: hands out epochs of batches in a deterministic order, and reports where the
/// time goes.
///
/// `Loader` is `Send + Sync`; one epoch iterator may be alive at a time.
pub struct Loader {
    /// The next epoch's pipeline, started when the last batch of the current one
    /// was handed out (`LoaderBuilder::prefetch_next_epoch`). Declared before the
    /// backend: its threads stop before the backend's.
    early: Mutex<Option<(u64, Started)>>,
    /// Dropped (threads joined) by `Drop`, after `early`, or leaked in a forked child.
    backend: ManuallyDrop<Box<dyn Pipeline>>,
    /// Shared with the epoch iterators, which report how far the consumer got. Readable
    /// in a fork (a checkpoint written by a forked process), where the consumer's thread
    /// may have held the lock at the fork.
    progress: Arc<ForkSafe<Progress>>,
    /// A resume state not yet applied (taken by the first `epoch` call); readable in a
    /// fork, as `progress`.
    resume: ForkSafe<Option<LoaderState>>,
    sampler: Sampler,
    metrics: Arc<Metrics>,
    pub(crate) config: LoaderConfig,
    /// `config.dataset`'s, recorded in [`Loader::state`] and checked on resume.
    fingerprint: DatasetFingerprint,
    /// The process that built the loader (its threads live there only).
    process: Owner,
    /// The next epoch's order, drawn ahead for large datasets when prefetching.
    order_ahead: OrderAhead,
}

impl Loader {
    /// A loader over `backend`, starting at `resume` (or epoch 0, batch 0).
    pub(crate) fn new(
        backend: Box<dyn Pipeline>,
        sampler: Sampler,
        metrics: Arc<Metrics>,
        config: LoaderConfig,
        resume: Option<LoaderState>,
    ) -> Loader {
        let state = resume.unwrap_or(LoaderState {
            seed: config.seed,
            ..LoaderState::default()
        });
        let fingerprint = DatasetFingerprint::of(config.dataset.manifest());
        Loader {
            early: Mutex::new(None),
            backend: ManuallyDrop::new(backend),
            progress: Arc::new(ForkSafe::new(Progress {
                active: None,
                state,
            })),
            resume: ForkSafe::new(resume),
            sampler,
            metrics,
            config,
            fingerprint,
            process: Owner::default(),
            order_ahead: OrderAhead::default(),
        }
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        let early = self
            .early
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if self.process.forked() {
            // In a fork the pipeline's threads (and CUDA context) do not exist: dropping
            // would wait forever to join them. Leak what the child inherited instead.
            std::mem::forget(early);
            self.order_ahead.forget_owned();
            return;
        }
        // The early start first: its threads stop before the backend's.
        drop(early);
        // SAFETY: `backend` is dropped only here, once, and `self` is not used after.
        unsafe { ManuallyDrop::drop(&mut self.backend) };
    }
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("config", &self.config)
            .field("sampler", &self.sampler)
            .finish()
    }
}

impl Loader {
    /// The batches of `epoch`, in order, as an iterator of `Result<Batch, LoaderError>`.
    ///
    /// If the loader was built with [`crate::LoaderBuilder::resume`] and this is the first epoch
    /// asked for and it is the saved one, iteration starts after the batches already consumed.
    /// Asking for an epoch while another epoch iterator is alive yields one
    /// [`LoaderError::EpochInProgress`].
    ///
    /// # Errors
    ///
    /// Items are `Err` for a batch that could not be built: a bad record under
    /// [`OnError::Error`], [`LoaderError::TooManyBadRecords`], a failed worker. Iteration may
    /// continue after an error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let loader = stoker_loader::Loader::builder(stoker_formats::Dataset::open("data")?).build()?;
    /// for epoch in 0..90 {
    ///     for batch in loader.epoch(epoch) {
    ///         let batch = batch?;
    ///         // train_step(batch.images.as_f32().unwrap(), &batch.labels);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn epoch(&self, epoch: u64) -> Epoch<'_> {
        let on_last: Option<Box<dyn FnOnce() + Send + '_>> =
            self.config.prefetch_next_epoch.then(|| {
                Box::new(move || self.start_early_after(epoch)) as Box<dyn FnOnce() + Send + '_>
            });
        self.epoch_with(epoch, on_last, None)
    }

    /// [`Loader::epoch`] for a loader behind an [`Arc`]: the iterator keeps the loader
    /// alive and borrows nothing, so it can be stored (in a struct, another thread, a
    /// Python object) instead of living in one `for` loop.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use stoker_loader::{Epoch, Loader};
    /// let loader = Arc::new(Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?);
    /// let mut epoch: Epoch<'static> = loader.epoch_shared(0);
    /// drop(loader); // the iterator still works
    /// let first = epoch.next().expect("a non-empty epoch")?;
    /// # let _ = first;
    /// # Ok(()) }
    /// ```
    pub fn epoch_shared(self: &Arc<Self>, epoch: u64) -> Epoch<'static> {
        let on_last: Option<Box<dyn FnOnce() + Send + 'static>> =
            self.config.prefetch_next_epoch.then(|| {
                let me = Arc::clone(self);
                Box::new(move || me.start_early_after(epoch)) as Box<dyn FnOnce() + Send>
            });
        let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::clone(self) as _;
        self.epoch_with(epoch, on_last, Some(owner))
    }

    /// Starts (or fails to start) `epoch`; `on_last` runs when its last batch is
    /// handed out, `owner` is kept alive as long as the iterator.
    fn epoch_with<'a>(
        &self,
        epoch: u64,
        on_last: Option<Box<dyn FnOnce() + Send + 'a>>,
        owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Epoch<'a> {
        if let Some(e) = self.process.fork_error() {
            let (metrics, progress) = (Arc::clone(&self.metrics), Arc::clone(&self.progress));
            return Epoch::failed(epoch, e, metrics, progress, false);
        }
        {
            let mut progress = self.progress.lock();
            if let Some(running) = progress.active {
                return Epoch::failed(
                    epoch,
                    LoaderError::EpochInProgress {
                        running,
                        requested: epoch,
                    },
                    Arc::clone(&self.metrics),
                    Arc::clone(&self.progress),
                    false,
                );
            }
            progress.active = Some(epoch);
        }
        let resume = self.resume.lock().take();
        let start_batch = match resume_start(resume.as_ref(), epoch, self.num_batches()) {
            Ok(start) => start,
            Err(e) => {
                self.keep_resume(resume);
                let (metrics, progress) = (Arc::clone(&self.metrics), Arc::clone(&self.progress));
                return Epoch::failed(epoch, e, metrics, progress, true);
            }
        };
        {
            let mut progress = self.progress.lock();
            progress.state = LoaderState {
                seed: self.config.seed,
                epoch,
                position: start_batch,
                ..LoaderState::default()
            };
        }
        // An early start of this very epoch from its first batch is used as is; any
        // other is dropped here (its threads stop, its batches go back).
        let early = match self.early.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some((e, stream)) if e == epoch && start_batch == 0 => Some(stream),
            // Stopped before the new start, so the two never compete for buffers.
            other => {
                drop(other);
                None
            }
        };
        // A shard truncated or replaced since the last epoch would kill the readers with
        // SIGBUS: one `stat` per shard turns that into this epoch's error.
        if let Err(e) = self.config.dataset.check_unchanged() {
            drop(early);
            self.keep_resume(resume);
            return Epoch::failed(
                epoch,
                e.into(),
                Arc::clone(&self.metrics),
                Arc::clone(&self.progress),
                true,
            );
        }
        let started = match early {
            Some(started) => {
                self.metrics.epoch_started_early();
                Ok(started)
            }
            None => self.start(epoch, start_batch),
        };
        match started {
            Ok(started) => Epoch::running(
                epoch,
                started,
                start_batch..self.sampler.num_batches(),
                on_last,
                Arc::clone(&self.metrics),
                Arc::clone(&self.progress),
                owner,
            ),
            Err(e) => {
                self.keep_resume(resume);
                Epoch::failed(
                    epoch,
                    e,
                    Arc::clone(&self.metrics),
                    Arc::clone(&self.progress),
                    true,
                )
            }
        }
    }

    /// Puts back a resume taken by an epoch that failed to start, so that trying the epoch
    /// again (the shard is back, memory was freed) still starts at the saved batch.
    fn keep_resume(&self, resume: Option<LoaderState>) {
        if resume.is_some() {
            *self.resume.lock() = resume;
        }
    }

    /// Starts the pipeline of `epoch` from batch `start_batch`.
    fn start(&self, epoch: u64, start_batch: u64) -> Result<Started, LoaderError> {
        let bad = Arc::new(BadLog::new(&self.config.dataset));
        let plan = EpochPlan {
            epoch,
            seed: self.config.seed,
            // An `Arc<Vec>`, not `Arc<[u64]>`: no copy of what may be hundreds of MB.
            order: Arc::new(self.order_ahead.for_epoch(
                &self.sampler,
                epoch,
                self.config.prefetch_next_epoch,
            )),
            global_offset: self.sampler.global_position(0),
            dataset_len: self.sampler.dataset_len(),
            indices: self.sampler.shared_indices(),
            batch_size: self.config.batch_size,
            num_batches: self.sampler.num_batches(),
            start_batch,
            on_error: self.config.on_error,
            bad: Arc::clone(&bad),
        };
        let dataset = &self.config.dataset;
        let stream = self.backend.start_epoch(plan.clone())?;
        Ok(Started {
            stream: crate::cache_ahead::beside(stream, &plan, dataset, self.config.prefetch),
            bad,
            on_error: self.config.on_error,
        })
    }

    /// Stops the next epoch started early ([`crate::LoaderBuilder::prefetch_next_epoch`]),
    /// if there is one, and frees what it holds: call it after the last epoch you
    /// will train, so that the loader does not keep decoding batches nobody asks
    /// for (on the GPU path: occupying the JPEG engines, the staging ring and the
    /// utilization sampler) while the program goes on to evaluate or save.
    /// Returns whether an early start was stopped. A later [`Loader::epoch`] call
    /// works as usual, from an empty pipeline.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let loader = stoker_loader::Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?;
    /// for epoch in 0..90 {
    ///     for batch in loader.epoch(epoch) {
    ///         let _batch = batch?;
    ///     }
    /// }
    /// assert!(loader.cancel_prefetch(), "epoch 90 had started early");
    /// # Ok(()) }
    /// ```
    pub fn cancel_prefetch(&self) -> bool {
        if self.process.forked() {
            // In a fork the threads of the early start and of the order drawn ahead do
            // not exist: stopping them would wait forever (or panic joining). Leak them.
            // Not waiting for the lock: a parent thread that held it at the fork never
            // releases it here, and whatever it guards is the parent's anyway.
            if let Some(mut early) = lock_unless_held(&self.early) {
                std::mem::forget(early.take());
            }
            self.order_ahead.forget();
            return false;
        }
        let early = self.early.lock().unwrap_or_else(|p| p.into_inner()).take();
        // Dropping the stream stops its producer and returns its batches; the order too.
        self.order_ahead.cancel();
        early.is_some()
    }

    /// [`Loader::start_early`] for the epoch after `epoch` (there is none after
    /// `u64::MAX`).
    fn start_early_after(&self, epoch: u64) {
        if let Some(next) = epoch.checked_add(1) {
            self.start_early(next);
        }
    }

    /// Starts `epoch`'s pipeline ahead of the consumer's [`Loader::epoch`] call
    /// (none while a resume state is pending: that call will want another start).
    fn start_early(&self, epoch: u64) {
        if self.resume.get().is_some() {
            return;
        }
        // Not on shards that changed: the consumer's own call reports it.
        if self.config.dataset.check_unchanged().is_err() {
            return;
        }
        match self.start(epoch, 0) {
            Ok(started) => {
                let old = self
                    .early
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .replace((epoch, started));
                drop(old);
            }
            // The consumer's own call will start it (and report the error).
            Err(e) => tracing::debug!(%e, epoch, "early start of the next epoch failed"),
        }
    }

    /// A snapshot of the counters (Display: a table and a verdict; serde: JSON). In a
    /// `fork` of the process that built the loader, see [`Metrics::snapshot`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let loader = stoker_loader::Loader::builder(stoker_formats::Dataset::open("data")?).build()?;
    /// let stats = loader.stats();
    /// println!("{stats}"); // table + verdict
    /// std::fs::write("loader-stats.json", stats.to_json())?;
    /// assert!((0.0..=1.0).contains(&stats.fed_ratio));
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> Stats {
        self.metrics.snapshot()
    }

    /// Why this loader's order mixes the classes poorly, when it does (see
    /// [`crate::mixing_note`]); the builder also logs it as a warning.
    pub fn mixing_note(&self) -> Option<String> {
        let m = self.config.dataset.manifest();
        crate::mixing::mixing_note(
            self.config.shuffle,
            self.config.batch_size,
            // A loader over part of the dataset draws from its sorted indices: a random
            // part keeps the class runs, each shorter by the same fraction.
            self.sampler.dataset_len(),
            m.classes.len(),
            m.provenance
                .flags
                .get(stoker_formats::convert::ORDER_FLAG)
                .map(String::as_str),
        )
    }

    /// Zeroes the flow counters (e.g. after a warm-up epoch).
    pub fn reset_stats(&self) {
        self.metrics.reset();
    }

    /// The loader's seed ([`crate::LoaderBuilder::seed`]): the order's (for a shuffled
    /// order) and every random draw's (crops, flips, bad-record replacements).
    pub fn seed(&self) -> u64 {
        self.config.seed
    }

    /// Batches per epoch on this rank (the same on every rank).
    pub fn num_batches(&self) -> u64 {
        self.sampler.num_batches()
    }

    /// The sampler (the order of any epoch, without loading anything).
    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// The shared counters (for exporters that poll them).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

/// Which epoch is being iterated, and how far the consumer got.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    /// `Some(epoch)` while an [`Epoch`] iterator is alive.
    pub(crate) active: Option<u64>,
    /// What [`crate::Loader::state`] reports.
    pub(crate) state: LoaderState,
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
    /// The next batch to hand out (the resume position at the start).
    next: u64,
    /// One past the last batch of the epoch.
    end: u64,
    /// Called once, when the workers have claimed the last batch
    /// ([`EpochStream::all_claimed`]) or else when it is handed out: starts the next
    /// epoch's pipeline while this one's last batches are built and used
    /// ([`crate::LoaderBuilder::prefetch_next_epoch`]).
    on_last: Option<Box<dyn FnOnce() + Send + 'a>>,
    /// An error to yield once before ending (the epoch could not start).
    pending: Option<LoaderError>,
    metrics: Arc<Metrics>,
    progress: Arc<ForkSafe<Progress>>,
    /// Up to when this iterator's lifetime has been counted as elapsed ([`crate::metrics::clock_ns`]).
    mark_ns: u64,
    finished: bool,
    /// Whether this iterator registered itself as the active epoch (and must clear it).
    owns_active: bool,
    /// The process whose pipeline threads feed `stream`.
    process: Owner,
    /// What must outlive the pipeline (the loader, for [`crate::Loader::epoch_shared`]);
    /// declared last so it is dropped after the stream.
    _owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl<'a> Epoch<'a> {
    pub(crate) fn running(
        epoch: u64,
        started: Started,
        batches: std::ops::Range<u64>,
        on_last: Option<Box<dyn FnOnce() + Send + 'a>>,
        metrics: Arc<Metrics>,
        progress: Arc<ForkSafe<Progress>>,
        owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Self {
        Epoch {
            epoch,
            ready_at_ask: None,
            stream: Some(started.stream),
            bad: Some((started.bad, started.on_error)),
            next: batches.start,
            end: batches.end,
            on_last,
            pending: None,
            metrics,
            progress,
            mark_ns: crate::metrics::clock_ns(),
            finished: false,
            owns_active: true,
            process: Owner::default(),
            _owner: owner,
        }
    }

    pub(crate) fn failed(
        epoch: u64,
        error: LoaderError,
        metrics: Arc<Metrics>,
        progress: Arc<ForkSafe<Progress>>,
        owns_active: bool,
    ) -> Self {
        Epoch {
            epoch,
            ready_at_ask: None,
            stream: None,
            bad: None,
            next: 0,
            end: 0,
            on_last: None,
            pending: Some(error),
            metrics,
            progress,
            mark_ns: crate::metrics::clock_ns(),
            finished: false,
            owns_active,
            process: Owner::default(),
            _owner: None,
        }
    }

    /// The epoch being iterated.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The items this iterator has left to yield: the batches not handed out yet (for an
    /// epoch resumed mid-way, from the resume position, not the whole epoch), or 1 for an
    /// epoch that could not start (its error). Also [`ExactSizeIterator::len`]. (One
    /// exception: an iterator used in a `fork` of the process that made it yields one
    /// error and ends.)
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Loader, LoaderState};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?;
    /// loader.load_state(LoaderState { epoch: 2, position: 3, ..loader.state() })?;
    /// let mut epoch = loader.epoch(2);
    /// assert_eq!(epoch.remaining(), loader.num_batches() - 3);
    /// epoch.next();
    /// assert_eq!(epoch.len() as u64, loader.num_batches() - 4);
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> u64 {
        self.batches_left() + u64::from(self.pending.is_some())
    }

    /// The batches this iterator has left to hand out: [`Epoch::remaining`] without the
    /// error of an epoch that could not start.
    pub fn batches_left(&self) -> u64 {
        if self.stream.is_some() {
            self.end.saturating_sub(self.next)
        } else {
            0
        }
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

    /// [`Epoch::next_until`] with a deadline `timeout` from now. A timeout past what an
    /// [`Instant`] can hold (`Duration::MAX`, say) waits without a deadline, as `next` does.
    pub fn next_timeout(&mut self, timeout: Duration) -> Next {
        // `Instant + Duration` panics on overflow: a caller's "wait forever" is no deadline.
        self.advance(Instant::now().checked_add(timeout))
    }

    fn advance(&mut self, deadline: Option<Instant>) -> Next {
        if let Some(e) = self.pending.take() {
            return Next::Ready(Err(e));
        }
        if self.stream.is_some() {
            if let Some(e) = self.process.fork_error() {
                // The threads that would fill the stream stayed in the parent.
                std::mem::forget(self.stream.take());
                self.on_last = None;
                return Next::Ready(Err(e));
            }
        }
        loop {
            let item = self.ask(deadline);
            // A stream answers `Pending` before the deadline when its workers have just
            // claimed its last batch ([`EpochStream::all_claimed`]), for `ask` to start the
            // next epoch: then wait on.
            if matches!(item, Next::Pending) && deadline.is_none_or(|d| Instant::now() < d) {
                continue;
            }
            return item;
        }
    }

    /// Runs `on_last` (starts the next epoch early), once.
    fn start_next(&mut self) {
        if let Some(start_next) = self.on_last.take() {
            // Time the consumer spends here is waiting, like a blocked `next`.
            let t2 = Instant::now();
            start_next();
            self.metrics.wait_only(t2.elapsed());
        }
    }

    /// One wait of [`Epoch::advance`] for the stream, and its accounting.
    fn ask(&mut self, deadline: Option<Instant>) -> Next {
        let Some(stream) = self.stream.as_mut() else {
            return Next::Done;
        };
        let ready = *self.ready_at_ask.get_or_insert_with(|| stream.ready());
        let t0 = Instant::now();
        let item = stream.next_batch(deadline);
        let wait = t0.elapsed();
        // The idle workers can start the next epoch while this one's last batches are built.
        if stream.all_claimed() {
            self.start_next();
        }
        self.metrics.account_elapsed(&mut self.mark_ns);
        if !matches!(item, Next::Pending) {
            self.ready_at_ask = None;
        }
        match &item {
            Next::Pending => self.metrics.wait_only(wait),
            Next::Ready(Ok(batch)) => {
                self.count_bad(batch.index);
                self.next = batch.index + 1;
                let t1 = Instant::now();
                {
                    let mut p = self.progress.lock();
                    p.state.epoch = self.epoch;
                    p.state.position = batch.index + 1;
                }
                let handoff = t1.elapsed();
                self.metrics.handoff(batch.len() as u64, wait, ready);
                self.metrics
                    .record(Stage::Handoff, batch.len() as u64, 0, handoff);
                if batch.index + 1 >= self.end {
                    self.start_next();
                }
            }
            Next::Ready(Err(_)) => {
                self.metrics.wait_only(wait);
                self.next += 1;
                // Batches come in order, so this error is batch `position`.
                let position = {
                    let mut p = self.progress.lock();
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
                let mut p = self.progress.lock();
                // "The next epoch from its start"; after epoch u64::MAX there is none, and
                // (u64::MAX, 0) would replay it on resume: say "this epoch, at its end".
                (p.state.epoch, p.state.position) = match self.epoch.checked_add(1) {
                    Some(next) => (next, 0),
                    None => (self.epoch, self.end),
                };
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

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining()).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

/// [`Epoch::remaining`].
impl ExactSizeIterator for Epoch<'_> {}

impl Drop for Epoch<'_> {
    fn drop(&mut self) {
        // Stop the backend first (its Drop stops the workers), then account. In a fork
        // the workers do not exist, and waiting for them would never end: leak it.
        let forked = self.process.forked();
        if forked {
            std::mem::forget(self.stream.take());
        }
        self.stream = None;
        self.metrics.account_elapsed(&mut self.mark_ns);
        self.metrics.epoch_done(self.finished);
        // Not in a fork, where the parent's consumer thread may hold the lock for good
        // (and the child's loader starts no epoch anyway).
        if self.owns_active && !forked {
            self.progress.lock().active = None;
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
