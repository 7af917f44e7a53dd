//! `stoker.Epoch`: the batches of one epoch, for `for` loops and `next()`.
//!
//! An iterator starts its epoch at its first `next`, not when it is made, and a new one
//! stops the loader's earlier ones. Training frameworks need both: PyTorch Lightning
//! calls `iter()` once only to check that the loader is iterable, sets the epoch
//! (`sampler.set_epoch`) after `iter()` and before the first batch, ends an epoch after
//! `len()` batches without the `next` that would end the iterator, and builds the next
//! epoch's iterator before it drops the last one (`CombinedLoader`).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::ThreadId;

use pyo3::prelude::*;
use stoker_loader::{LoaderError, Next, Owner};

use crate::batch::Batch;
use crate::errors::{loader_error, warn, StokerError};
use crate::locks::{lock, lock_detached};
use crate::logging::Call;
use crate::signals::SIGNAL_CHECK;

/// The epoch a loader's next `iter(loader)` runs (`set_epoch`, `load_state_dict`), shared
/// with the iterators so that only one that really starts that epoch uses it up.
pub(crate) type PendingEpoch = Arc<Mutex<Option<u64>>>;

/// Which epoch an iterator runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Which {
    /// `loader.epoch(e)`.
    Fixed(u64),
    /// `iter(loader)`: the loader's next epoch as it stands at the first `next`
    /// ([`next_epoch_of`]).
    Next,
}

/// Where an iterator stands.
enum Run {
    /// Made, no `next` yet: holds the loader to start the epoch with.
    Unstarted(Arc<stoker_loader::Loader>),
    /// Started (dropping it stops the pipeline's work and lets go of the loader). Boxed:
    /// the epoch is large, and made once per iterator.
    Running(Box<stoker_loader::Epoch<'static>>),
    /// Finished, interrupted or closed.
    Ended,
}

/// Why an iterator was stopped from outside, for the error its next `next` raises
/// (`0`: it was not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum StoppedBy {
    /// `Loader.close()`.
    Close = 1,
    /// A newer iterator of the same loader, or `load_state_dict`.
    Newer = 2,
}

/// What an epoch iterator shares with its loader, so that `Loader.close()` and newer
/// iterators can stop it.
pub(crate) struct EpochShared {
    inner: Mutex<Run>,
    /// Set by `close`: a `__next__` on another thread holds `inner` while it waits,
    /// and gives it up when it sees this (within one `SIGNAL_CHECK`).
    closed: AtomicBool,
    /// A [`StoppedBy`] when it was stopped from outside while it had batches to give:
    /// `next` then raises, so that a training loop on another thread does not take the
    /// stop for the end of the epoch.
    stopped_by: AtomicU8,
    /// The thread holding `inner` in `next`, to tell a close from a signal handler that
    /// runs inside that `next` (which must not wait for the lock) from one on another
    /// thread (which waits, so that the threads are joined when `close` returns).
    holder: Mutex<Option<ThreadId>>,
    /// The process that made it: in a fork its lock may be held by a thread that does
    /// not exist there, so nothing there waits for the lock.
    process: Owner,
}

/// Marks the current thread as `inner`'s holder while alive.
struct Holding<'a>(&'a Mutex<Option<ThreadId>>);

impl<'a> Holding<'a> {
    fn new(holder: &'a Mutex<Option<ThreadId>>) -> Self {
        *lock(holder) = Some(std::thread::current().id());
        Holding(holder)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        *lock(self.0) = None;
    }
}

impl EpochShared {
    /// Stops the epoch's work now, also while another thread waits in `next` (that `next`
    /// then ends the iteration).
    pub(crate) fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        if self.process.forked() {
            // Its pipeline's threads are the parent's; what the child inherited leaks.
            return;
        }
        let run = match self.inner.try_lock() {
            Ok(mut inner) => std::mem::replace(&mut *inner, Run::Ended),
            // Held by this very thread: a signal handler closing the loader runs inside
            // `next`'s wait, and waiting for the lock would never end. That `next` drops
            // the epoch when it sees `closed`.
            Err(_) if *lock(&self.holder) == Some(std::thread::current().id()) => return,
            // Held by a `next` on another thread: it gives the lock up within one
            // `SIGNAL_CHECK` once it sees `closed`, and the threads are joined here.
            Err(_) => std::mem::replace(&mut *lock_detached(py, &self.inner), Run::Ended),
        };
        // Dropping joins the pipeline's threads: not while holding the GIL.
        py.detach(move || drop(run));
    }

    /// What [`EpochShared::stop`] tells a later `next`, without taking the lock or
    /// joining anything: for a fork, where the lock may be held by a thread that does not
    /// exist there.
    pub(crate) fn mark_stopped(&self, by: StoppedBy) {
        self.stopped_by.store(by as u8, Ordering::Release);
        self.closed.store(true, Ordering::Release);
    }

    /// `close`, from outside the iterator (`Loader.close()`, a newer iterator): a later
    /// `next` raises, saying `by`.
    pub(crate) fn stop(&self, py: Python<'_>, by: StoppedBy) {
        // An iterator that already ended keeps ending; one that has not started, is
        // running, or is held by a thread waiting in `next` raises from now on. Set
        // before `closed`, which the waiting thread reads first.
        let ended = self
            .inner
            .try_lock()
            .is_ok_and(|run| matches!(*run, Run::Ended));
        if !ended {
            self.stopped_by.store(by as u8, Ordering::Release);
        }
        self.close(py);
    }
}

/// The epoch `iter(loader)` runs when it starts: the one set by `set_epoch` or
/// `load_state_dict` (`pending`), else a loaded state not yet taken (an epoch that asked
/// for another one failed), else the one after the last begun (a loop left early does
/// not repeat its order and augmentations, as with a PyTorch `DataLoader`). `None` when
/// that is the one after 2**64-1, the last.
pub(crate) fn next_epoch_of(inner: &stoker_loader::Loader, pending: &PendingEpoch) -> Option<u64> {
    if let Some(epoch) = *lock(pending) {
        return Some(epoch);
    }
    if let Some(epoch) = inner.pending_epoch() {
        return Some(epoch);
    }
    let s = inner.state();
    if s.position > 0 {
        s.epoch.checked_add(1)
    } else {
        Some(s.epoch)
    }
}

/// The batches of one epoch, in order (``stoker.Batch``, which unpacks to
/// ``images, labels``). The epoch starts at the first ``next``; a newer iterator of the
/// same loader (or ``load_state_dict``) stops this one. Waiting for a batch releases the
/// GIL; Ctrl-C stops it.
#[pyclass(module = "stoker", frozen, weakref)]
pub(crate) struct Epoch {
    shared: Arc<EpochShared>,
    which: Which,
    /// The epoch and the batches this iterator yields (the epoch's, less those a resume
    /// skips), set when it starts.
    started_as: OnceLock<(u64, u64)>,
    /// Set when an exception raised while waiting (Ctrl-C, a signal handler's) stopped
    /// the epoch: a later `next` raises, where `StopIteration` would pass for a finished
    /// epoch with its remaining batches silently lost.
    interrupted: AtomicBool,
    /// The loader's pending epoch, cleared once this iterator hands out a batch or
    /// ends, if it is this epoch; an iterator that fails to start (another epoch is
    /// running) leaves it for the next try.
    pending: PendingEpoch,
    /// The loader's placement from the launcher's variables, checked against
    /// `torch.distributed` before the epoch starts ([`crate::torch_dist::check`]).
    placed_from_env: Option<Arc<stoker_loader::Placement>>,
}

impl Epoch {
    /// An iterator over `which` epoch of `loader`, not started.
    pub(crate) fn new(
        loader: Arc<stoker_loader::Loader>,
        which: Which,
        pending: PendingEpoch,
        placed_from_env: Option<Arc<stoker_loader::Placement>>,
    ) -> Self {
        Epoch {
            shared: Arc::new(EpochShared {
                inner: Mutex::new(Run::Unstarted(loader)),
                closed: AtomicBool::new(false),
                stopped_by: AtomicU8::new(0),
                holder: Mutex::new(None),
                process: Owner::default(),
            }),
            which,
            started_as: OnceLock::new(),
            interrupted: AtomicBool::new(false),
            pending,
            placed_from_env,
        }
    }

    /// What `Loader.close()` and newer iterators need to stop this one.
    pub(crate) fn shared(&self) -> Weak<EpochShared> {
        Arc::downgrade(&self.shared)
    }

    /// The epoch this iterator runs if it starts now.
    fn epoch_to_start(&self, loader: &stoker_loader::Loader) -> u64 {
        match self.which {
            Which::Fixed(epoch) => epoch,
            // `iter()` refused the one past the last; one begun since by another
            // iterator (a thread) runs the last again rather than fail here.
            Which::Next => next_epoch_of(loader, &self.pending).unwrap_or(u64::MAX),
        }
    }

    /// Starts the epoch of `loader` this iterator runs; with the note to raise as a
    /// `UserWarning` when that skips the rest of a resumed state's epoch (logged by the
    /// loader, which Python's warning filters would not see).
    fn start(&self, py: Python<'_>, loader: &Arc<stoker_loader::Loader>) -> (Run, Option<String>) {
        let epoch = self.epoch_to_start(loader);
        let note = loader.resume_note(epoch);
        let (it, mut held) = crate::logging::holding(|| py.detach(|| loader.epoch_shared(epoch)));
        if let Some(note) = &note {
            held.handed_over(note);
        }
        // `set` fails only for a second start, which `Run` rules out.
        // Batches only: an epoch that cannot start yields its error, and no batch.
        let _ = self.started_as.set((epoch, it.batches_left()));
        (Run::Running(Box::new(it)), note)
    }

    /// This epoch has started: a pending request for it is used up.
    fn started(&self) {
        let Some(&(epoch, _)) = self.started_as.get() else {
            return;
        };
        let mut pending = lock(&self.pending);
        if *pending == Some(epoch) {
            *pending = None;
        }
    }

    /// The error of a `next` after a stop from outside or an interrupt; `None` when the
    /// iterator simply ended.
    fn ended_error(&self) -> Option<PyErr> {
        let epoch = self
            .started_as
            .get()
            .map_or_else(|| "not started".to_owned(), |(e, _)| format!("epoch {e}"));
        let by = self.shared.stopped_by.load(Ordering::Acquire);
        if by == StoppedBy::Close as u8 {
            return Some(StokerError::new_err(format!(
                "this iterator ({epoch}) was stopped by Loader.close(); its remaining batches \
                 are not in it"
            )));
        }
        if by == StoppedBy::Newer as u8 {
            return Some(StokerError::new_err(format!(
                "this iterator ({epoch}) was stopped by a newer iter(loader), \
                 loader.epoch(...) or load_state_dict of the same loader: one iterator \
                 runs at a time, the newest; its remaining batches are not in this one"
            )));
        }
        if self.interrupted.load(Ordering::Acquire) {
            return Some(StokerError::new_err(format!(
                "this iterator ({epoch}) was stopped by an exception raised while waiting \
                 for a batch; its remaining batches are not in it: iterate the loader again \
                 for the next epoch, or loader.load_state_dict(loader.state_dict()) to \
                 continue this one"
            )));
        }
        None
    }
}

#[pymethods]
impl Epoch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Batch>> {
        // Before `guard`: dropped after it, so the events go to Python's handlers with
        // the iterator unlocked.
        let mut logs = Call::deliver_first(py)?;
        // Before the lock, which a parent thread waiting in `next` at the fork holds for
        // good in the child.
        if let Some(e) = self.shared.process.fork_error() {
            return Err(loader_error(e));
        }
        let mut guard = lock_detached(py, &self.shared.inner);
        // Declared after `guard`: dropped first, so the mark goes before the lock does.
        let _holding = Holding::new(&self.shared.holder);
        loop {
            // Also on each wait's turn: the loader's threads read shards while this one
            // waits, and another Python thread may replace the handler meanwhile.
            crate::signals::guard_shard_reads();
            if self.shared.closed.load(Ordering::Acquire) {
                *guard = Run::Ended;
            }
            if let Run::Unstarted(loader) = &*guard {
                // Not started: the next `next` checks again.
                crate::torch_dist::check(py, self.placed_from_env.as_deref(), true)?;
                let loader = Arc::clone(loader);
                let (run, note) = self.start(py, &loader);
                *guard = run;
                if let Some(note) = note {
                    // Raised with the epoch running: under `-W error` the exception
                    // stops this `next`, and the following one gives the first batch.
                    warn(py, format!("stoker: {note}"))?;
                }
            }
            let Run::Running(epoch) = &mut *guard else {
                return match self.ended_error() {
                    Some(e) => Err(e),
                    None => Ok(None),
                };
            };
            match py.detach(|| epoch.next_timeout(SIGNAL_CHECK)) {
                // Closed while this batch was made: not handed out after `close`.
                Next::Ready(Ok(_)) if self.shared.closed.load(Ordering::Acquire) => {
                    *guard = Run::Ended;
                }
                Next::Ready(Ok(batch)) => {
                    self.started();
                    logs.keep_for_next();
                    return Batch::new(py, batch).map(Some);
                }
                Next::Ready(Err(e)) => {
                    // Another epoch iterator is alive: this one never started.
                    if !matches!(e, LoaderError::EpochInProgress { .. }) {
                        self.started();
                    }
                    return Err(loader_error(e));
                }
                Next::Pending => {
                    if let Err(interrupt) = py.check_signals() {
                        // Stop the pipeline now, not when the iterator is collected.
                        *guard = Run::Ended;
                        self.interrupted.store(true, Ordering::Release);
                        return Err(interrupt);
                    }
                }
                _ => {
                    self.started();
                    *guard = Run::Ended;
                    return Ok(None);
                }
            }
        }
    }

    /// Batches of the epoch this iterator runs (after a resume: those left in the
    /// epoch), as ``len()`` of a PyTorch ``DataLoader`` iterator: the total, not those
    /// still to come, so that a progress bar or a framework counting ``i + 1 == len(it)``
    /// reads the epoch's length whenever it asks. Fixed at the first ``next``, and kept
    /// after ``close()`` or a stop (the epoch had that many batches; the iterator gives
    /// no more). Before the first ``next``, those it would yield if it started now: 0
    /// once it cannot start (closed, stopped by a newer iterator, or in a fork).
    fn __len__(&self, py: Python<'_>) -> usize {
        if let Some(&(_, len)) = self.started_as.get() {
            return len as usize;
        }
        // In a fork it cannot start, and its lock may be held for good by a parent thread
        // that was waiting in `next` at the fork.
        if self.shared.process.forked() {
            return 0;
        }
        match (
            &*lock_detached(py, &self.shared.inner),
            self.started_as.get(),
        ) {
            (Run::Unstarted(loader), _) => {
                loader.batches_if_started(self.epoch_to_start(loader)) as usize
            }
            // Started meanwhile, or stopped before it started.
            (_, started) => started.map_or(0, |&(_, len)| len as usize),
        }
    }

    /// Stops this epoch's work now (also done when the iterator is freed), also while
    /// another thread waits in ``next``: that ``next`` then ends the iteration.
    fn close(&self, py: Python<'_>) {
        let _logs = Call::new(py);
        self.shared.close(py);
    }
}
