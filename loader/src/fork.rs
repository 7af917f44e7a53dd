//! What a `fork` of the process that built a loader can still read without hanging.
//!
//! A forked child has only the thread that called `fork`. A lock that any other thread
//! held at that instant stays held in the child for good, and taking it there waits
//! forever. The consumer of an epoch updates where it stands under a lock after every
//! batch, on whatever thread runs the training loop, and the pipeline's threads count
//! routes and bad records under theirs; so a child asking a loader it inherited for its
//! state (a checkpoint written from a forked process, Python's `os.fork` beside a loop on
//! another thread) or its counters hung now and then, when the fork fell inside one of
//! those moments.
//!
//! [`ForkSafe`] keeps a value a child can always read whole; [`Owner`] says whether this
//! process is the one that made something: the one check behind every refusal
//! ([`LoaderError::ForkedProcess`]) and every read that only skips in a fork.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use crate::error::LoaderError;

/// The process that made something (a loader, an iterator, a writer): in any other
/// process it is a fork's copy, where the owner's other threads, and any lock they held,
/// are gone. [`Owner::default`] is this process.
///
/// # Examples
///
/// ```
/// let owner = stoker_loader::Owner::default();
/// assert!(!owner.forked());
/// assert!(owner.fork_error().is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner(u32);

impl Owner {
    /// Whether this process is a fork of the owner.
    pub fn forked(self) -> bool {
        std::process::id() != self.0
    }

    /// [`LoaderError::ForkedProcess`] when this process is a fork of the owner: what using
    /// a loader's threads from there gets.
    pub fn fork_error(self) -> Option<LoaderError> {
        let now = std::process::id();
        (now != self.0).then_some(LoaderError::ForkedProcess { built: self.0, now })
    }

    /// `m` locked; in a fork, `None` when it is held (by a thread that does not exist
    /// here, so it would never be released).
    pub(crate) fn lock<T>(self, m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
        if !self.forked() {
            return Some(m.lock().unwrap_or_else(|p| p.into_inner()));
        }
        lock_unless_held(m)
    }
}

/// `m` locked (a poisoned lock's data taken), or `None` when it is held: what a forked
/// child may do with a lock a thread of its parent may have held at the fork, which is
/// never released there.
pub(crate) fn lock_unless_held<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl Default for Owner {
    /// This process.
    fn default() -> Self {
        Owner(std::process::id())
    }
}

/// A value behind a lock whose latest whole copy a forked child reads without the lock.
///
/// Writers go through [`ForkSafe::lock`], so one at a time. As a writer lets go, it
/// copies the value into the slot `current` does not name, then points `current` at it:
/// a writer that a fork cut short was writing the slot readers do not read, and the child
/// sees the value of the last write that completed before the fork.
#[derive(Debug)]
pub(crate) struct ForkSafe<T> {
    value: Mutex<T>,
    /// Copies of `value` after the last two writes, `copies[current]` the latest. Locked
    /// only by a writer (which holds `value`, and takes the slot `current` does not name)
    /// and by readers in a fork: in a child, no thread of the parent holds
    /// `copies[current]`.
    copies: [Mutex<T>; 2],
    current: AtomicUsize,
    owner: Owner,
}

impl<T: Copy> ForkSafe<T> {
    pub(crate) fn new(value: T) -> Self {
        ForkSafe {
            value: Mutex::new(value),
            copies: [Mutex::new(value), Mutex::new(value)],
            current: AtomicUsize::new(0),
            owner: Owner::default(),
        }
    }

    /// The value, to read or change. Not in a fork: a thread of the parent may hold the
    /// lock there for good (callers check [`Owner::forked`] first).
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        Guard {
            cell: self,
            value: self.value.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// The value; in a fork, as the last write completed before the fork left it.
    pub(crate) fn get(&self) -> T {
        if !self.owner.forked() {
            return *self.value.lock().unwrap_or_else(|p| p.into_inner());
        }
        let latest = &self.copies[self.current.load(Ordering::Acquire)];
        *latest.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// [`ForkSafe::lock`]'s guard: publishes the value as it goes.
pub(crate) struct Guard<'a, T: Copy> {
    cell: &'a ForkSafe<T>,
    value: MutexGuard<'a, T>,
}

impl<T: Copy> Deref for Guard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Copy> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Copy> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // Still under `value`'s lock (the field drops after this body): the only writer.
        let next = 1 - self.cell.current.load(Ordering::Relaxed);
        *self.cell.copies[next]
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = *self.value;
        self.cell.current.store(next, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `owner` as if this process were a fork of it.
    fn as_fork<T>(mut cell: ForkSafe<T>) -> ForkSafe<T> {
        cell.owner = Owner(std::process::id().wrapping_add(1));
        cell
    }

    #[test]
    fn a_fork_reads_the_last_write_without_the_locks_a_parent_thread_holds() {
        let cell = std::sync::Arc::new(as_fork(ForkSafe::new((0u64, 0u64))));
        *cell.lock() = (3, 7);
        // A parent thread mid-write at the fork, half-way through publishing: both locks
        // it took stay held for good, and the slot it was writing holds half a value.
        let mut cut = cell.lock();
        *cut = (4, 9);
        std::mem::forget(cut);
        let mut slot = cell.copies[1 - cell.current.load(Ordering::Relaxed)]
            .lock()
            .unwrap();
        slot.0 = 4;
        std::mem::forget(slot);
        let (done, read) = std::sync::mpsc::channel();
        let reader = std::sync::Arc::clone(&cell);
        std::thread::spawn(move || {
            let _ = done.send(reader.get());
        });
        let got = read
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("read without waiting for the held locks");
        assert_eq!(got, (3, 7));
    }

    #[test]
    fn the_owner_reads_every_write_at_once() {
        let cell = ForkSafe::new(1u64);
        for v in 2..6 {
            *cell.lock() += 1;
            assert_eq!(cell.get(), v);
        }
        // Held by a writer: the owner waits for it, and sees what it wrote.
        let writer = cell.lock();
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| cell.get());
            std::thread::sleep(std::time::Duration::from_millis(50));
            let mut writer = writer;
            *writer = 10;
            drop(writer);
            assert_eq!(reader.join().unwrap(), 10);
        });
    }

    #[test]
    fn a_fork_skips_a_lock_a_parent_thread_holds() {
        let m = Mutex::new(5);
        let fork = Owner(std::process::id().wrapping_add(1));
        assert_eq!(fork.lock(&m).map(|g| *g), Some(5));
        std::mem::forget(m.lock().unwrap());
        assert!(fork.lock(&m).is_none());
        assert!(!Owner::default().forked() && fork.forked());
    }
}
