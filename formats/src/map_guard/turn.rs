//! The install turn: one thread at a time writes the actions behind ours and installs ours.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The pid of the process one of whose threads is putting ours in front, or 0: one at a
/// time, so that the actions behind ours have one writer. Not a lock a `fork` can leave
/// held: a child starts with it free ([`free_in_child`]). Where a fork skipped that
/// handler (a raw `clone`, or a fork while the first turn is taken, before the handler is
/// registered), the child finds another process's pid here and takes over.
///
/// The pid alone is not enough: a child can have the very pid the turn names. One forked
/// into a new pid namespace is pid 1 there, as is a container's first process, whose
/// threads it forked from; and pids are reused. It then took the turn for held by one of
/// its own threads and waited for it for ever.
static INSTALLING: AtomicI32 = AtomicI32::new(0);
/// Set by the first thread to take the turn, which registers [`free_in_child`].
static AT_FORK: AtomicBool = AtomicBool::new(false);

/// `pthread_atfork`'s child handler: no thread of the child holds the turn.
extern "C" fn free_in_child() {
    INSTALLING.store(0, Ordering::Relaxed);
}

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
    /// Not for a signal handler: the first call registers the fork handler.
    pub(super) fn take() -> Turn {
        // Not a `Once`: a fork while another thread runs one leaves it running for good in
        // the child, which then waits for it at its first install. A thread that comes
        // here while the first registers goes on; a fork in that moment is what the pid
        // in the turn is for.
        if !AT_FORK.swap(true, Ordering::Relaxed) {
            // SAFETY: registers a child handler that only stores to an atomic, which is
            // async-signal-safe, as a handler run in the child of a threaded fork must be.
            // Should it fail (ENOMEM), the pid in the turn remains.
            unsafe { libc::pthread_atfork(None, None, Some(free_in_child)) };
        }
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
