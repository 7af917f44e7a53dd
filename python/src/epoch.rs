//! `stoker.Epoch`: the batches of one epoch, for `for` loops and `next()`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use pyo3::prelude::*;
use stoker_loader::{LoaderError, Next};

use crate::batch::Batch;
use crate::errors::{loader_error, StokerError};
use crate::locks::{lock, lock_detached};
use crate::signals::SIGNAL_CHECK;

/// The epoch a loader's next `iter(loader)` runs (`set_epoch`, `load_state_dict`), shared
/// with the iterators so that only one that really starts that epoch uses it up.
pub(crate) type PendingEpoch = Arc<Mutex<Option<u64>>>;

/// What an epoch iterator shares with its loader, so that `Loader.close()` can stop it.
pub(crate) struct EpochShared {
    /// `None` once finished, interrupted or closed (dropping it stops the pipeline's
    /// work and lets go of the loader).
    inner: Mutex<Option<stoker_loader::Epoch<'static>>>,
    /// Set by `close`: a `__next__` on another thread holds `inner` while it waits,
    /// and gives it up when it sees this (within one `SIGNAL_CHECK`).
    closed: AtomicBool,
    /// Set when `Loader.close()` closed it: `next` then raises, so that a training loop
    /// on another thread does not take the stop for the end of the epoch.
    by_loader: AtomicBool,
    /// The thread holding `inner` in `next`, to tell a close from a signal handler that
    /// runs inside that `next` (which must not wait for the lock) from one on another
    /// thread (which waits, so that the threads are joined when `close` returns).
    holder: Mutex<Option<ThreadId>>,
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
        let epoch = match self.inner.try_lock() {
            Ok(mut inner) => inner.take(),
            // Held by this very thread: a signal handler closing the loader runs inside
            // `next`'s wait, and waiting for the lock would never end. That `next` drops
            // the epoch when it sees `closed`.
            Err(_) if *lock(&self.holder) == Some(std::thread::current().id()) => return,
            // Held by a `next` on another thread: it gives the lock up within one
            // `SIGNAL_CHECK` once it sees `closed`, and the threads are joined here.
            Err(_) => lock_detached(py, &self.inner).take(),
        };
        // Dropping joins the pipeline's threads: not while holding the GIL.
        py.detach(move || drop(epoch));
    }

    /// `close`, as `Loader.close()` does it: a later `next` raises.
    pub(crate) fn close_by_loader(&self, py: Python<'_>) {
        // An iterator that already ended keeps ending; one that is running (or held by a
        // thread waiting in `next`) raises from now on. Set before `closed`, which the
        // waiting thread reads first.
        let running = self.inner.try_lock().map_or(true, |epoch| epoch.is_some());
        if running {
            self.by_loader.store(true, Ordering::Release);
        }
        self.close(py);
    }
}

/// The batches of one epoch, in order (``stoker.Batch``, which unpacks to
/// ``images, labels``). Waiting for a batch releases the GIL; Ctrl-C stops it.
#[pyclass(module = "stoker", frozen)]
pub(crate) struct Epoch {
    shared: Arc<EpochShared>,
    epoch: u64,
    /// Batches this iterator yields: the epoch's, less those a resume skips.
    len: u64,
    /// Set when an exception raised while waiting (Ctrl-C, a signal handler's) stopped
    /// the epoch: a later `next` raises, where `StopIteration` would pass for a finished
    /// epoch with its remaining batches silently lost.
    interrupted: AtomicBool,
    /// The loader's pending epoch, cleared once this iterator hands out a batch or
    /// ends, if it is this epoch; an iterator that fails to start (another epoch is
    /// running) leaves it for the next try.
    pending: PendingEpoch,
}

impl Epoch {
    pub(crate) fn new(
        inner: stoker_loader::Epoch<'static>,
        len: u64,
        pending: PendingEpoch,
    ) -> Self {
        Epoch {
            epoch: inner.epoch(),
            shared: Arc::new(EpochShared {
                inner: Mutex::new(Some(inner)),
                closed: AtomicBool::new(false),
                by_loader: AtomicBool::new(false),
                holder: Mutex::new(None),
            }),
            len,
            interrupted: AtomicBool::new(false),
            pending,
        }
    }

    /// What `Loader.close()` needs to stop this iterator.
    pub(crate) fn shared(&self) -> Weak<EpochShared> {
        Arc::downgrade(&self.shared)
    }

    /// This epoch has started: a pending request for it is used up.
    fn started(&self) {
        let mut pending = lock(&self.pending);
        if *pending == Some(self.epoch) {
            *pending = None;
        }
    }
}

#[pymethods]
impl Epoch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Batch>> {
        let mut guard = lock_detached(py, &self.shared.inner);
        // Declared after `guard`: dropped first, so the mark goes before the lock does.
        let _holding = Holding::new(&self.shared.holder);
        loop {
            if self.shared.closed.load(Ordering::Acquire) {
                *guard = None;
            }
            let Some(epoch) = guard.as_mut() else {
                if self.shared.by_loader.load(Ordering::Acquire) {
                    return Err(StokerError::new_err(format!(
                        "epoch {} was stopped by Loader.close(); its remaining batches are not \
                         in this iterator",
                        self.epoch
                    )));
                }
                if self.interrupted.load(Ordering::Acquire) {
                    return Err(StokerError::new_err(format!(
                        "epoch {} was stopped by an exception raised while waiting for a \
                         batch; its remaining batches are not in this iterator: iterate the \
                         loader again for the next epoch, or \
                         loader.load_state_dict(loader.state_dict()) to continue this one",
                        self.epoch
                    )));
                }
                return Ok(None);
            };
            match py.detach(|| epoch.next_timeout(SIGNAL_CHECK)) {
                // Closed while this batch was made: not handed out after `close`.
                Next::Ready(Ok(_)) if self.shared.closed.load(Ordering::Acquire) => {
                    *guard = None;
                }
                Next::Ready(Ok(batch)) => {
                    self.started();
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
                        *guard = None;
                        self.interrupted.store(true, Ordering::Release);
                        return Err(interrupt);
                    }
                }
                _ => {
                    self.started();
                    *guard = None;
                    return Ok(None);
                }
            }
        }
    }

    /// Batches this iterator yields (after a resume: those left in the epoch).
    fn __len__(&self) -> usize {
        self.len as usize
    }

    /// Stops this epoch's work now (also done when the iterator is freed), also while
    /// another thread waits in ``next``: that ``next`` then ends the iteration.
    fn close(&self, py: Python<'_>) {
        self.shared.close(py);
    }
}
