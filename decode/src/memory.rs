//! Memory for a CPU decode whose buffers the decoders allocate infallibly.
//!
//! [`can_allocate`] answers for one moment: with `-j N`, N threads could each be told yes
//! before any of them allocated, and together need more than the process may have (`ulimit
//! -v`), where the decoders' failed allocation aborts the process. A [`DecodeMemory`] is
//! that answer kept for the length of a decode: the bytes of every decode in progress in
//! the process count against the next one.

use std::sync::{Condvar, Mutex, PoisonError};

use crate::probe::can_allocate;

/// Bytes held by the [`DecodeMemory`]s alive in this process, and the process: a child
/// forked while other threads held some starts from nothing (those threads are not in
/// it, and would never give them back to it).
static HELD: Mutex<Held> = Mutex::new(Held { pid: 0, bytes: 0 });

/// [`HELD`]'s count: `bytes` reserved in the process `pid`.
struct Held {
    pid: u32,
    bytes: u64,
}

/// Told each time a [`DecodeMemory`] ends, for the decodes waiting on one.
static ENDED: Condvar = Condvar::new();

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
    /// Counted in [`HELD`] until dropped.
    bytes: u64,
    /// The process it was counted in.
    pid: u32,
}

impl DecodeMemory {
    /// Reserves `bytes` (an [`ImageInfo::decode_bytes`](crate::ImageInfo::decode_bytes))
    /// for a decode: when they could be allocated on top of every other reservation in
    /// the process, at once; when not, but other decodes hold reservations, once enough of
    /// them have ended; `None` when they could not be allocated with no other decode in
    /// progress, the image's own answer whatever the threads do.
    ///
    /// The memory the other decodes already use is counted twice (allocated, and held),
    /// so a decode may wait when memory is short that would in fact have fit; it is never
    /// refused for that.
    pub fn reserve(bytes: u64) -> Option<DecodeMemory> {
        Self::reserve_with(bytes, can_allocate)
    }

    /// [`reserve`](Self::reserve) with the allocation check given, for tests.
    fn reserve_with(bytes: u64, fits: impl Fn(u64) -> bool) -> Option<DecodeMemory> {
        let pid = std::process::id();
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if held.pid != pid {
                *held = Held { pid, bytes: 0 };
            }
            if fits(held.bytes.saturating_add(bytes)) {
                held.bytes = held.bytes.saturating_add(bytes);
                return Some(DecodeMemory { bytes, pid });
            }
            if held.bytes == 0 {
                return None;
            }
            held = ENDED.wait(held).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for DecodeMemory {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        // One made before a fork, dropped in the child, was never counted there.
        if held.pid == self.pid {
            held.bytes = held.bytes.saturating_sub(self.bytes);
        }
        ENDED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

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
        assert_eq!(HELD.lock().unwrap().bytes, 0);
    }

    /// A child forked while another thread held a reservation starts from nothing: that
    /// thread is not in the child to give it back, and a decode there that did not fit
    /// beside it waited for ever.
    #[test]
    fn a_forked_child_does_not_wait_for_its_parents_reservations() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let free = |n: u64| n <= 1000;
        let parents = DecodeMemory::reserve_with(700, free).unwrap();
        // SAFETY: the child only takes HELD's lock (not held by anyone at the fork: the
        // reservation above is counted, not locked) and ends with _exit; SIGALRM ends it
        // if it waits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            unsafe { libc::alarm(5) };
            let code = match DecodeMemory::reserve_with(700, free) {
                Some(_) => 0,
                None => 1,
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child waited or was refused: status {status:#x}"
        );
        drop(parents);
    }
}
