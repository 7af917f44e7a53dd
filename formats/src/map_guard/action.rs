//! SIGBUS actions as plain values, and the few `sigaction` and signal-set calls made on
//! them; every function here is async-signal-safe.

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

/// Puts the default action in place for `sig`.
pub(super) fn set_default(sig: libc::c_int) {
    // SAFETY: all-zero with SIG_DFL is the default action; sigaction is async-signal-safe.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &default, std::ptr::null_mut());
    }
}

/// The set of the signals in `mask` (signal `s` at bit `s - 1`).
pub(super) fn sigset(mask: u64) -> libc::sigset_t {
    // SAFETY: all-zero is a valid set, emptied and filled by calls that are
    // async-signal-safe and only write the set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in 1..=64 {
            if mask & (1 << (sig - 1)) != 0 {
                libc::sigaddset(&mut set, sig);
            }
        }
        set
    }
}
