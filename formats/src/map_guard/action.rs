//! SIGBUS actions as plain values, and the few `sigaction` and signal-set calls made on
//! them; every function here is async-signal-safe.

use std::mem::MaybeUninit;

/// A SIGBUS action as ours forwards to it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Action {
    /// `sa_sigaction`: a handler, `SIG_DFL` or `SIG_IGN`.
    pub(super) handler: usize,
    pub(super) flags: libc::c_int,
    /// The signals its `sa_mask` blocks, signal `s` at bit `s - 1`: Linux numbers its
    /// signals 1 to 64 (128 on MIPS, whose signals above 64 are not kept).
    pub(super) mask: u64,
}

impl Action {
    pub(super) const DEFAULT: Action = Action {
        handler: libc::SIG_DFL,
        flags: 0,
        mask: 0,
    };

    pub(super) fn of(action: &libc::sigaction) -> Action {
        let mut mask = 0;
        for sig in 1..=64 {
            // SAFETY: sigismember reads a valid set; a number the system has no signal for
            // is -1, not a member.
            if unsafe { libc::sigismember(&action.sa_mask, sig) } == 1 {
                mask |= 1 << (sig - 1);
            }
        }
        Action {
            handler: action.sa_sigaction,
            flags: action.sa_flags,
            mask,
        }
    }
}

/// The SIGBUS action in place, or `None` when it cannot be asked.
pub(super) fn query() -> Option<libc::sigaction> {
    // SAFETY: an all-zero `sigaction` is a valid value to be overwritten by the query.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query (no new action) into a valid, writable `sigaction`.
    (unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut current) } == 0)
        .then_some(current)
}

/// Puts the default action in place for `sig`. Zeroed in place rather than built and
/// moved, which a debug build does with two copies on the stack: it runs on top of two
/// kernel signal frames when a handler ours passed a signal to raises it again.
pub(super) fn set_default(sig: libc::c_int) {
    let mut default = MaybeUninit::<libc::sigaction>::uninit();
    // SAFETY: all-zero with SIG_DFL is the default action; sigaction is async-signal-safe
    // and reads the action it is given.
    unsafe {
        default.as_mut_ptr().write_bytes(0, 1);
        (*default.as_mut_ptr()).sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, default.as_ptr(), std::ptr::null_mut());
    }
}

/// Blocks the signals in `block` for this thread, then unblocks those in `unblock`; the
/// mask it had goes to `was`. Signal `s` is bit `s - 1`.
pub(super) fn change_mask(block: u64, unblock: u64, was: &mut MaybeUninit<libc::sigset_t>) {
    let mut set = MaybeUninit::uninit();
    // SAFETY: pthread_sigmask is async-signal-safe; `set` is filled before each use and
    // `was` is writable.
    unsafe {
        fill(&mut set, block);
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), was.as_mut_ptr());
        if unblock != 0 {
            fill(&mut set, unblock);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, set.as_ptr(), std::ptr::null_mut());
        }
    }
}

/// Gives this thread back the mask `change_mask` found.
pub(super) fn restore_mask(was: &libc::sigset_t) {
    // SAFETY: pthread_sigmask is async-signal-safe; `was` is a valid set.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, was, std::ptr::null_mut()) };
}

/// Makes `set` the set of the signals in `mask` (signal `s` at bit `s - 1`).
fn fill(set: &mut MaybeUninit<libc::sigset_t>, mask: u64) {
    // SAFETY: sigemptyset initializes the set; sigaddset only writes it; both are
    // async-signal-safe.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for sig in 1..=64 {
            if mask & (1 << (sig - 1)) != 0 {
                libc::sigaddset(set.as_mut_ptr(), sig);
            }
        }
    }
}
