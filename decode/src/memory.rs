//! Memory for a CPU decode whose buffers the decoders allocate infallibly.
//!
//! [`can_allocate`] answers for one moment: with `-j N`, N threads could each be told yes
//! before any of them allocated, and together need more than the process may have (`ulimit
//! -v`), where the decoders' failed allocation aborts the process. A [`DecodeMemory`] is
//! that answer kept for the length of a decode: the bytes of every decode in progress in
//! the process count against the next one.

use std::sync::{Condvar, Mutex, PoisonError};

use crate::per_process::PerProcess;
use crate::probe::can_allocate;

/// The count of the [`DecodeMemory`]s alive in one process.
///
/// A child of `fork` gets a count of its own, made afresh ([`state`]), not the parent's
/// reset: a parent thread inside [`DecodeMemory::reserve`] at the fork holds the lock, and
/// in the child no thread is left to release it. Every decode of a child forked while the
/// parent converted (a PyTorch `DataLoader` worker, a `multiprocessing` fork) then waited
/// for ever at its first image.
#[derive(Debug)]
struct State {
    held: Mutex<Held>,
    /// Told each time a [`DecodeMemory`] ends, for the decodes waiting on one.
    ended: Condvar,
}

/// This process's state, made at its first use; the parent's is left as it was.
fn state() -> &'static State {
    static STATE: PerProcess<State> = PerProcess::new();
    STATE.get_or_init(|| State {
        held: Mutex::new(Held::new()),
        ended: Condvar::new(),
    })
}

/// A [`State`]'s count: `bytes` reserved, and the queue of the decodes waiting for some:
/// they are served in the order they came, so a large image does not wait for ever while
/// small ones, each fitting beside the others, keep the count up.
#[derive(Debug)]
struct Held {
    bytes: u64,
    /// The ticket the next decode that has to wait takes.
    next: u64,
    /// The ticket of the waiting decode served next (`== next`: nobody waits).
    serving: u64,
}

impl Held {
    const fn new() -> Held {
        Held {
            bytes: 0,
            next: 0,
            serving: 0,
        }
    }

    /// Takes `bytes` when they fit on top of what is held.
    fn take(&mut self, bytes: u64, fits: &impl Fn(u64) -> bool) -> bool {
        let fit = fits(self.bytes.saturating_add(bytes));
        if fit {
            self.bytes = self.bytes.saturating_add(bytes);
        }
        fit
    }
}

/// Bytes reserved for one decode, given back when dropped. A thread holds one at a time:
/// one that asks for a second while it holds one may wait for itself.
///
/// # Examples
///
/// ```
/// use stoker_decode::DecodeMemory;
/// let held = DecodeMemory::reserve(3 * 640 * 480).expect("a small image fits");
/// // ... decode the image ...
/// drop(held);
/// assert!(DecodeMemory::reserve(u64::MAX).is_none());
/// ```
#[derive(Debug)]
#[must_use = "the bytes are reserved only while this is alive"]
pub struct DecodeMemory {
    /// Counted in `state` until dropped.
    bytes: u64,
    /// The count of the process it was made in.
    state: &'static State,
}

impl DecodeMemory {
    /// Reserves `bytes` (an [`ImageInfo::decode_bytes`](crate::ImageInfo::decode_bytes))
    /// for a decode: when they could be allocated on top of every other reservation in
    /// the process, at once; when not, but other decodes hold reservations, once enough of
    /// them have ended; `None` when they could not be allocated with no other decode in
    /// progress, the image's own answer whatever the threads do. Those that wait are
    /// served in the order they came, and while one waits a new one waits behind it even
    /// where it would fit: otherwise small images, each fitting beside the others, could
    /// keep a large one waiting until the whole conversion ran dry.
    ///
    /// The memory the other decodes already use is counted twice (allocated, and held),
    /// so a decode may wait when memory is short that would in fact have fit; it is never
    /// refused for that.
    pub fn reserve(bytes: u64) -> Option<DecodeMemory> {
        Self::reserve_with(bytes, can_allocate)
    }

    /// [`reserve`](Self::reserve) with the allocation check given, for tests.
    fn reserve_with(bytes: u64, fits: impl Fn(u64) -> bool) -> Option<DecodeMemory> {
        let state = state();
        let mut held = state.held.lock().unwrap_or_else(PoisonError::into_inner);
        // In turn behind those already waiting (with nobody waiting, served at once), each
        // served when it fits or is alone.
        let ticket = held.next;
        held.next += 1;
        loop {
            if held.serving == ticket {
                let taken = held.take(bytes, &fits);
                if taken || held.bytes == 0 {
                    held.serving += 1;
                    state.ended.notify_all();
                    // A refused one is not made even for a moment: its drop would give back
                    // bytes it never held, and take the lock this thread holds.
                    return if taken {
                        Some(DecodeMemory { bytes, state })
                    } else {
                        None
                    };
                }
            }
            held = state
                .ended
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for DecodeMemory {
    fn drop(&mut self) {
        // One made before a fork, dropped in the child, was never counted there; its
        // parent's lock may be held for good there, so it is not touched.
        if !std::ptr::eq(self.state, state()) {
            return;
        }
        let mut held = self
            .state
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.bytes = held.bytes.saturating_sub(self.bytes);
        self.state.ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// Returns once a reservation waits in the queue.
    fn wait_until_one_waits() {
        loop {
            let held = state().held.lock().unwrap_or_else(PoisonError::into_inner);
            if held.next != held.serving {
                return;
            }
            drop(held);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The tests share the process's count: one at a time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    /// With 1000 bytes free: two decodes of 600 each passed a check of their own, one after
    /// the other, and together needed 1200.
    #[test]
    fn a_decode_waits_while_another_holds_what_both_would_need() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let free = |n: u64| n <= 1000;
        let first = DecodeMemory::reserve_with(600, free).unwrap();
        let (tx, rx) = mpsc::channel();
        let second = std::thread::spawn(move || {
            let held = DecodeMemory::reserve_with(600, free);
            let _ = tx.send(());
            held.is_some()
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the second reservation did not wait for the first"
        );
        drop(first);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the second reservation went on once the first ended");
        assert!(second.join().unwrap());
        // What could not fit alone is refused at once, not waited for.
        assert!(DecodeMemory::reserve_with(1001, free).is_none());
        assert_eq!(state().held.lock().unwrap().bytes, 0);
    }

    /// A large image that had to wait was overtaken by every small one that fitted beside
    /// the decodes in progress: with one worker always decoding, it waited for ever.
    #[test]
    fn a_decode_that_waits_is_not_overtaken_by_later_ones_that_fit() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let free = |n: u64| n <= 1000;
        let small = DecodeMemory::reserve_with(600, free).unwrap();
        let (tx, rx) = mpsc::channel();
        let large_tx = tx.clone();
        let large = std::thread::spawn(move || {
            let held = DecodeMemory::reserve_with(900, free);
            let _ = large_tx.send("large");
            held.map(|h| h.bytes)
        });
        // The large one is queued once it holds a ticket.
        wait_until_one_waits();
        let later = std::thread::spawn(move || {
            let held = DecodeMemory::reserve_with(100, free);
            let _ = tx.send("later");
            held.map(|h| h.bytes)
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the later decode (600 + 100 fits) went ahead of the one waiting"
        );
        drop(small);
        // Both are served now (900 + 100 fit together), in the order of their tickets;
        // which thread then reaches its `send` first is up to the scheduler.
        let mut served = [
            rx.recv_timeout(Duration::from_secs(10)).ok(),
            rx.recv_timeout(Duration::from_secs(10)).ok(),
        ];
        served.sort();
        assert_eq!(served, [Some("large"), Some("later")]);
        assert_eq!(large.join().unwrap(), Some(900));
        assert_eq!(later.join().unwrap(), Some(100));
        assert_eq!(state().held.lock().unwrap().bytes, 0);
    }

    /// A waiting decode that cannot fit alone is refused once the others ended, and the
    /// one behind it is served.
    #[test]
    fn a_waiting_decode_that_cannot_fit_alone_is_refused_and_the_next_served() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        // Fits alone up to 1000; a check made while 600 are held fails for anything.
        let first = DecodeMemory::reserve_with(600, |n: u64| n <= 1000).unwrap();
        let (tx, rx) = mpsc::channel();
        let too_large = std::thread::spawn(move || {
            DecodeMemory::reserve_with(1001, |n: u64| n <= 1000).map(|h| h.bytes)
        });
        wait_until_one_waits();
        let behind = std::thread::spawn(move || {
            let held = DecodeMemory::reserve_with(500, |n: u64| n <= 1000);
            let _ = tx.send(());
            held.map(|h| h.bytes)
        });
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
        drop(first);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the one behind was served");
        assert_eq!(too_large.join().unwrap(), None);
        assert_eq!(behind.join().unwrap(), Some(500));
    }

    /// A child forked while another thread held a reservation starts from nothing: that
    /// thread is not in the child to give it back, and a decode there that did not fit
    /// beside it waited for ever.
    #[test]
    fn a_forked_child_does_not_wait_for_its_parents_reservations() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let free = |n: u64| n <= 1000;
        let parents = DecodeMemory::reserve_with(700, free).unwrap();
        assert_eq!(
            reserve_in_a_child(free),
            0,
            "the child waited or was refused"
        );
        drop(parents);
    }

    /// A child forked while another thread held the count's lock (inside `reserve`, as
    /// the parent's conversion threads are at every image) gets a count of its own: the
    /// parent's lock is never released there.
    #[test]
    fn a_child_forked_while_a_thread_holds_the_lock_does_not_wait_for_it() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let (locked_tx, locked_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let held = state().held.lock().unwrap_or_else(PoisonError::into_inner);
            locked_tx.send(()).unwrap();
            let _ = release_rx.recv();
            drop(held);
        });
        locked_rx.recv().unwrap();
        let status = reserve_in_a_child(|n: u64| n <= 1000);
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(status, 0, "the child waited for its parent's lock");
    }

    /// Forks a child that reserves 700 bytes under `free` and says whether it got them:
    /// its wait status (0: got them; SIGALRM after 5 s: it waited).
    fn reserve_in_a_child(free: fn(u64) -> bool) -> i32 {
        // SAFETY: the child only reserves and ends with _exit (no unwinding, no atexit
        // handlers of the parent's test harness); SIGALRM ends it if it waits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            // SAFETY: plain system calls in the child.
            unsafe { libc::alarm(5) };
            let code = match DecodeMemory::reserve_with(700, free) {
                Some(_) => 0,
                None => 1,
            };
            // SAFETY: as above.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        status
    }
}
