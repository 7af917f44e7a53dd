//! Marks on the siginfo of a SIGBUS that ours is passing on: which generations of ours
//! are passing it on, so that one called back with it does not pass it on again.
//!
//! Generations keep a library that calls ours back from getting its signal back
//! ([`super::behind`]), except where the library itself made the loop: one behind ours
//! that installs itself a second time keeps ours, standing in front of it, as the handler
//! it passes signals to. Ours passes the signal to it, it passes it to ours, and so on
//! until the stack overflows. Ours must see that it is called with a signal it is passing
//! on already, and end it with the default action instead, as the process would end with
//! no handler left to take it.
//!
//! The mark is written into the signal's own siginfo, in bytes past every field (24
//! bytes before its end, at 104 of 128), for as long as the handler it was passed to runs,
//! and put back as it was afterwards. A library calling ours back passes that siginfo, or
//! a copy of it, so the mark comes along; a new signal does not carry it: the kernel
//! writes those bytes as zeros on every delivery and refuses to deliver a signal sent
//! with anything else there (`copy_siginfo_to_user`, `post_copy_siginfo_from_user`,
//! since Linux 4.20). Nothing is kept per thread, so there is no thread-local storage to
//! reach from the handler (not async-signal-safe in a library loaded with `dlopen`, as a
//! Python extension is) and no flag that a handler jumping out (`siglongjmp`) would leave
//! set.
//!
//! Older kernels leave those bytes as they were on the stack, so a handler that jumped
//! out can leave a mark behind in a siginfo no one uses any more, where the next signal's
//! siginfo will be. Hence the mark also records where on the stack the `forward` that
//! wrote it runs: a handler called back runs below that frame, while a new signal
//! delivered at the same place runs its `forward` exactly where the abandoned one was, and
//! finds the mark dead. (A new signal reaching ours through a handler in front of it,
//! with such a leftover mark at the same place, would pass for a call back there; only
//! on those kernels, after a handler jumped out.)

use super::behind::GENERATIONS;

/// Where the mark lies in a `siginfo_t`, which is 128 bytes on every Linux; the fields of
/// any signal end by byte 48 (`struct kernel_siginfo`).
const AT: usize = 104;
/// Says the bytes at [`AT`] are a mark.
const TAG: u64 = u64::from_be_bytes(*b"stokerBU");
/// In [`Mark::passing`]: a generation called back took the default action, so those
/// passing the signal on leave it in place for the fault to recur into.
const GAVE_UP: u64 = 1 << 63;

// A bit for each generation in `passing`, below GAVE_UP.
const _: () = assert!(GENERATIONS < 63);

/// The three words at [`AT`].
#[derive(Clone, Copy)]
pub(super) struct Mark {
    tag: u64,
    /// Bit `g`: generation `g` is passing the signal on; and [`GAVE_UP`].
    passing: u64,
    /// Where the innermost `forward` passing it on runs.
    frame: usize,
}

impl Mark {
    /// Whether this is a mark put by a `forward` running above `here` (a frame of the
    /// same function, deeper on the same stack).
    fn live_above(&self, here: usize) -> bool {
        self.tag == TAG && self.frame > here
    }
}

/// The words at [`AT`] of the siginfo at `info`.
///
/// # Safety
///
/// `info` points to a whole `siginfo_t`, readable; it need not be aligned.
unsafe fn read(info: *mut libc::siginfo_t) -> Mark {
    let at = info.cast::<u8>().add(AT);
    Mark {
        tag: at.cast::<u64>().read_unaligned(),
        passing: at.add(8).cast::<u64>().read_unaligned(),
        frame: at.add(16).cast::<usize>().read_unaligned(),
    }
}

/// # Safety
///
/// `info` points to a whole `siginfo_t`, writable; it need not be aligned.
unsafe fn write(info: *mut libc::siginfo_t, mark: Mark) {
    let at = info.cast::<u8>().add(AT);
    at.cast::<u64>().write_unaligned(mark.tag);
    at.add(8).cast::<u64>().write_unaligned(mark.passing);
    at.add(16).cast::<usize>().write_unaligned(mark.frame);
}

/// The generations passing on the signal of `info` in frames above `here`.
pub(super) fn passing(info: *mut libc::siginfo_t, here: usize) -> u64 {
    if info.is_null() {
        return 0;
    }
    // SAFETY: a handler's siginfo is a whole siginfo_t, from the kernel or, for a handler
    // called back, the caller's (the one it was given, or a copy).
    let mark = unsafe { read(info) };
    if mark.live_above(here) {
        mark.passing & !GAVE_UP
    } else {
        0
    }
}

/// Marks the signal of `info` as passed on by generation `g`, whose `forward` runs at
/// `here`. Returns what was there, for [`leave`] to put back.
pub(super) fn enter(info: *mut libc::siginfo_t, g: usize, here: usize) -> Option<Mark> {
    if info.is_null() {
        return None;
    }
    // SAFETY: as in `passing`; a handler's siginfo is writable (on the stack, the
    // kernel's or the caller's).
    unsafe {
        let was = read(info);
        let outer = if was.live_above(here) { was.passing } else { 0 };
        let mark = Mark {
            tag: TAG,
            passing: outer | 1 << g,
            frame: here,
        };
        write(info, mark);
        Some(was)
    }
}

/// Puts back what [`enter`] found, the handler it was passed to having returned. True
/// when a generation called back with the signal took the default action ([`give_up`]);
/// a `forward` above `here` that is passing it on finds that too.
pub(super) fn leave(info: *mut libc::siginfo_t, was: Option<Mark>, here: usize) -> bool {
    let Some(mut was) = was else {
        return false;
    };
    // SAFETY: as in `enter`.
    unsafe {
        let now = read(info);
        let gave_up = now.tag == TAG && now.passing & GAVE_UP != 0;
        if gave_up && was.live_above(here) {
            was.passing |= GAVE_UP;
        }
        write(info, was);
        gave_up
    }
}

/// Records that the default action was taken for the signal of `info`.
pub(super) fn give_up(info: *mut libc::siginfo_t) {
    if info.is_null() {
        return;
    }
    // SAFETY: as in `enter`.
    unsafe {
        let mut mark = read(info);
        if mark.tag == TAG {
            mark.passing |= GAVE_UP;
            write(info, mark);
        }
    }
}
