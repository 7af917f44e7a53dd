//! The install turn: one thread at a time writes the actions behind ours and installs ours.

use std::sync::atomic::{AtomicI32, Ordering};

/// The pid of the process one of whose threads is putting ours in front, or 0: one at a
/// time, so that the actions behind ours have one writer. Not a lock a `fork` can leave
/// held: a child finds its parent's pid here and takes over.
static INSTALLING: AtomicI32 = AtomicI32::new(0);

/// The right to write the actions behind ours and install ours, held by one thread at a
/// time.
pub(super) struct Turn(());

impl Turn {
    /// The turn, if no other thread of this process holds it. Async-signal-safe.
    pub(super) fn try_take() -> Option<Turn> {
        // SAFETY: getpid has no preconditions and is async-signal-safe.
        let me = unsafe { libc::getpid() };
        let holder = INSTALLING.load(Ordering::Relaxed);
        if holder == me {
            return None;
        }
        INSTALLING
            .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Turn(()))
    }

    /// The turn, once the thread that holds it (installing, a few system calls) is done.
    pub(super) fn take() -> Turn {
        loop {
            if let Some(turn) = Turn::try_take() {
                return turn;
            }
            std::thread::yield_now();
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        INSTALLING.store(0, Ordering::Release);
    }
}
