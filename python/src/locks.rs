//! Locking shared by the loader and its epoch iterators, without deadlocking on the GIL.

use std::sync::{Condvar, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use pyo3::Python;

/// Locks `m`, taking the data of a poisoned lock (a panic already became an exception).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks `m`, waiting without the GIL: its holder may be a thread in `__next__` that
/// needs the GIL back to finish, so waiting with it could deadlock.
pub(crate) fn lock_detached<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    loop {
        match m.try_lock() {
            Ok(guard) => return guard,
            Err(TryLockError::Poisoned(p)) => return p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                py.detach(|| std::thread::sleep(Duration::from_millis(1)))
            }
        }
    }
}

/// Turns taken in the order they are asked for, waited for without the GIL.
///
/// [`lock_detached`] is not fair: a thread that unlocks and locks again in a loop (a
/// `Writer.write` per sample from several threads) takes the lock back before a waiter
/// polling every millisecond sees it free, so `close()` or `abort()` from another thread
/// waited until the writing stopped. A ticket serves every caller in turn.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    /// The next ticket handed out, and the ticket whose turn it is.
    tickets: Mutex<(u64, u64)>,
    served: Condvar,
}

/// The caller's turn, until dropped.
pub(crate) struct Turn<'a>(&'a Turns);

impl Turns {
    /// Waits, with the GIL released, until every caller that came before has had its turn.
    pub(crate) fn take(&self, py: Python<'_>) -> Turn<'_> {
        py.detach(|| {
            let mut t = lock(&self.tickets);
            let mine = t.0;
            t.0 += 1;
            while t.1 != mine {
                t = self.served.wait(t).unwrap_or_else(|p| p.into_inner());
            }
        });
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.0.tickets).1 += 1;
        self.0.served.notify_all();
    }
}
