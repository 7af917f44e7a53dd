//! State that belongs to one process, made afresh in a child of `fork`.
//!
//! A child of `fork` gets its parent's memory but only the thread that forked: a thread
//! pool's workers are not there, nor the threads that would release the locks they held at
//! the fork. State kept in a plain `static` (a `OnceLock`, a `Mutex`) is then dead or
//! locked for good in the child, and a PyTorch `DataLoader` forks its workers after the
//! training process has decoded. A [`PerProcess`] gives each process a value of its own,
//! made at its first use there.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// The forks this process descends from, as the child handler counted them. With the
/// process id it tells a child from its parent where the id alone does not: a child in a
/// new pid namespace can have its parent's id.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// `pthread_atfork`'s child handler.
extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Which process a value was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Maker {
    pid: u32,
    forks: u64,
}

impl Maker {
    /// This process. A fork that skipped the handler (a raw `clone`, or a fork while the
    /// first use registers it) is still told by the process id.
    fn this() -> Maker {
        // Not a `Once`: a fork while another thread runs one leaves it running for good
        // in the child.
        static AT_FORK: AtomicBool = AtomicBool::new(false);
        if !AT_FORK.swap(true, Ordering::Relaxed) {
            // SAFETY: registers a child handler that only adds to an atomic, which is
            // async-signal-safe, as a handler run in the child of a threaded fork must be.
            unsafe { libc::pthread_atfork(None, None, Some(count_fork)) };
            #[cfg(test)]
            tests::while_registering();
        }
        Maker {
            pid: std::process::id(),
            forks: FORKS.load(Ordering::Relaxed),
        }
    }
}

/// A value and the process it was made for.
#[derive(Debug)]
struct Made<T> {
    by: Maker,
    value: T,
}

/// A value of each process, made at its first use in that process; for a `static`.
///
/// In a child of `fork` the parent's value is neither used nor dropped: dropping a thread
/// pool would wait for threads that are not in the child, and a lock in it may be held for
/// good. Values are never freed (one per process that used it, each made once).
///
/// # Examples
///
/// ```
/// use std::sync::Mutex;
/// use stoker_decode::PerProcess;
///
/// static COUNT: PerProcess<Mutex<u64>> = PerProcess::new();
/// *COUNT.get_or_init(|| Mutex::new(0)).lock().unwrap() += 1;
/// assert_eq!(*COUNT.get_or_init(|| Mutex::new(0)).lock().unwrap(), 1);
/// ```
#[doc(hidden)]
#[derive(Debug)]
pub struct PerProcess<T> {
    /// Null until the first use; else the value of the process that last made one, which
    /// is never freed, so that references to it live as long as the process.
    current: AtomicPtr<Made<T>>,
    /// Holds `T`s: `Send` and `Sync` only as `T` is (`AtomicPtr` is both for any `T`).
    _holds: PhantomData<T>,
}

impl<T> PerProcess<T> {
    /// None made yet.
    pub const fn new() -> Self {
        PerProcess {
            current: AtomicPtr::new(std::ptr::null_mut()),
            _holds: PhantomData,
        }
    }

    /// This process's value, made by `make` at the first use in this process. Threads that
    /// come first at once may each call their `make`; one value is kept, the others are
    /// dropped. No lock is taken: one held by the parent at a fork would be held for good
    /// in the child.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_decode::PerProcess;
    ///
    /// static PID: PerProcess<u32> = PerProcess::new();
    /// assert_eq!(*PID.get_or_init(std::process::id), std::process::id());
    /// ```
    pub fn get_or_init(&'static self, make: impl FnOnce() -> T) -> &'static T {
        let me = Maker::this();
        let mut current = self.current.load(Ordering::Acquire);
        // SAFETY: read from `current`.
        if let Some(value) = unsafe { Self::made_by(current, me) } {
            return value;
        }
        let fresh = Box::into_raw(Box::new(Made {
            by: me,
            value: make(),
        }));
        loop {
            match self
                .current
                .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // SAFETY: published, and never freed.
                Ok(_) => return unsafe { &(*fresh).value },
                Err(now) => {
                    // SAFETY: read from `current`.
                    if let Some(value) = unsafe { Self::made_by(now, me) } {
                        // SAFETY: `fresh` was never published; this thread still owns it.
                        drop(unsafe { Box::from_raw(fresh) });
                        return value;
                    }
                    current = now;
                }
            }
        }
    }

    /// The value `made` points to when it was made by `me`.
    ///
    /// # Safety
    ///
    /// `made` is null or was read from a `current`, whose values are never freed.
    unsafe fn made_by(made: *const Made<T>, me: Maker) -> Option<&'static T> {
        // SAFETY: the caller's.
        let made = unsafe { made.as_ref() }?;
        (made.by == me).then_some(&made.value)
    }
}

impl<T> Default for PerProcess<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI32, AtomicUsize};
    use std::time::Duration;

    use super::*;

    /// Threads that come first at once all get the one value kept.
    #[test]
    fn every_thread_of_a_process_gets_the_same_value() {
        static VALUE: PerProcess<AtomicUsize> = PerProcess::new();
        let values: Vec<usize> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| std::ptr::from_ref(VALUE.get_or_init(AtomicUsize::default)) as usize)
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(values.iter().all(|&v| v == values[0]), "{values:?}");
    }

    /// A forked child gets a value of its own; the parent keeps its own.
    #[test]
    fn a_forked_child_makes_its_own_value() {
        static VALUE: PerProcess<u32> = PerProcess::new();
        let parents = VALUE.get_or_init(std::process::id);
        // SAFETY: the child only reads an atomic, allocates and leaves with _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let own = VALUE.get_or_init(std::process::id);
            let ok = *own == std::process::id() && !std::ptr::eq(own, parents);
            // SAFETY: _exit ends the child without running the test harness's exit code.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let status = stoker_testdata::child::wait_forked(child, Duration::from_secs(30));
        assert_eq!(status, Some(0), "the child used its parent's value");
        assert!(std::ptr::eq(VALUE.get_or_init(|| 0), parents));
    }

    /// Set by the child test below: another thread forks while this one registers the
    /// fork handler, at the first use.
    static ARMED: AtomicBool = AtomicBool::new(false);
    /// The process that fork made.
    static FORKED: AtomicI32 = AtomicI32::new(0);
    /// What both processes of the child test use.
    static USED: PerProcess<u32> = PerProcess::new();

    /// Called by the first use, once the fork handler is registered.
    pub(super) fn while_registering() {
        if !ARMED.swap(false, Ordering::Relaxed) {
            return;
        }
        let forker = std::thread::spawn(|| {
            // SAFETY: the child uses a value and leaves with _exit; what it inherits from
            // the first use, midway, is what is tested.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let ok = *USED.get_or_init(std::process::id) == std::process::id();
                // SAFETY: _exit ends the child without running the parent's exit code.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) };
            }
            pid
        });
        FORKED.store(forker.join().unwrap(), Ordering::Relaxed);
    }

    /// The child process's side of the test below: a no-op when run as a plain test.
    #[test]
    fn child() {
        if std::env::var("STOKER_PER_PROCESS_CHILD").is_err() {
            return;
        }
        ARMED.store(true, Ordering::Relaxed);
        USED.get_or_init(std::process::id);
        let pid = FORKED.load(Ordering::Relaxed);
        assert!(pid > 0, "no fork");
        match stoker_testdata::child::wait_forked(pid, Duration::from_secs(5)) {
            Some(status) => println!("child exited {status}"),
            None => println!("child hung"),
        }
    }

    /// Registering the fork handler in a `Once` (as the shard registry once did) left a
    /// child forked meanwhile waiting for ever at its own first use (in about 1 of 30 runs
    /// of formats/tests/fork_open.rs): it found the `Once` still running, with no thread to
    /// finish it. A child forked then makes its own value like any other.
    #[test]
    fn a_child_forked_while_the_first_use_registers_the_fork_handler_makes_its_own() {
        let (status, printed) = stoker_testdata::child::run_test(
            "per_process::tests::child",
            ("STOKER_PER_PROCESS_CHILD", "fork while registering"),
            Duration::from_secs(60),
        );
        assert!(status.success(), "{status:?}: {printed}");
        assert!(printed.contains("child exited 0\n"), "{printed}");
    }
}
