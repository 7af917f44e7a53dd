//! Locking shared by the loader and its epoch iterators, without deadlocking on the GIL.

use std::sync::{Mutex, MutexGuard, TryLockError};
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
