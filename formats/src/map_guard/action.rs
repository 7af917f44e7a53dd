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
        Action {
            handler: action.sa_sigaction,
            flags: action.sa_flags,
            mask: bits(&action.sa_mask),
        }
    }
}

/// The SIGBUS action in place, or `None` when it cannot be asked. The `sigaction` it is
/// read into lives only in this function's frame, as in the others here that take or give
/// one: the callers may run on a nearly full alternate signal stack (see
/// `handler::forward`), and a debug build copies a `sigaction` (152 bytes) around.
pub(super) fn query() -> Option<Action> {
    let mut current = MaybeUninit::<libc::sigaction>::uninit();
    // SAFETY: a query (no new action) into a `sigaction` it fills on success.
    unsafe {
        if libc::sigaction(libc::SIGBUS, std::ptr::null(), current.as_mut_ptr()) != 0 {
            return None;
        }
        Some(Action::of(current.assume_init_ref()))
    }
}

/// Installs `handler`, an SA_SIGINFO handler, as the SIGBUS action with `flags`; returns
/// the action it replaced, or `None` when the kernel refused.
///
/// # Safety
///
/// `handler` has the SA_SIGINFO signature and is async-signal-safe.
pub(super) unsafe fn install(handler: usize, flags: libc::c_int) -> Option<Action> {
    let mut action = MaybeUninit::<libc::sigaction>::uninit();
    let mut replaced = MaybeUninit::<libc::sigaction>::uninit();
    // SAFETY: all-zero is a valid `sigaction` (empty mask, no flags), filled in below; the
    // caller vouches for the handler; `replaced` is filled on success.
    unsafe {
        action.as_mut_ptr().write_bytes(0, 1);
        (*action.as_mut_ptr()).sa_sigaction = handler;
        (*action.as_mut_ptr()).sa_flags = libc::SA_SIGINFO | flags;
        if libc::sigaction(libc::SIGBUS, action.as_ptr(), replaced.as_mut_ptr()) != 0 {
            return None;
        }
        Some(Action::of(replaced.assume_init_ref()))
    }
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

/// Whether `sig` is pending for this thread: raised while blocked, waiting to be delivered.
pub(super) fn pending(sig: libc::c_int) -> bool {
    let mut set = MaybeUninit::uninit();
    // SAFETY: sigpending is async-signal-safe and fills the set it is given, which
    // sigismember then reads.
    unsafe { libc::sigpending(set.as_mut_ptr()) == 0 && libc::sigismember(set.as_ptr(), sig) == 1 }
}

/// Blocks the signals in `block` for this thread, then unblocks those in `unblock`;
/// returns the mask it had, for [`set_mask`]. Signal `s` is bit `s - 1`; Linux has 64
/// signals (MIPS has 128, whose upper half is not kept). A mask as 64 bits, not a
/// `sigset_t` (128 bytes), is what the caller keeps on a small alternate signal stack
/// while the handler it calls runs.
pub(super) fn change_mask(block: u64, unblock: u64) -> u64 {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    let mut was = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: pthread_sigmask is async-signal-safe; `set` is filled before each use and
    // `was` is filled by the first call.
    unsafe {
        fill(&mut set, block);
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), was.as_mut_ptr());
        if unblock != 0 {
            fill(&mut set, unblock);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, set.as_ptr(), std::ptr::null_mut());
        }
        bits(was.assume_init_ref())
    }
}

/// Gives this thread the mask `mask` (as [`change_mask`] returns it).
pub(super) fn set_mask(mask: u64) {
    let mut set = MaybeUninit::uninit();
    // SAFETY: pthread_sigmask is async-signal-safe; `set` is filled first.
    unsafe {
        fill(&mut set, mask);
        libc::pthread_sigmask(libc::SIG_SETMASK, set.as_ptr(), std::ptr::null_mut());
    }
}

/// The signals of `set`, signal `s` at bit `s - 1`.
fn bits(set: &libc::sigset_t) -> u64 {
    let (mut mask, mut sig) = (0, 1);
    while sig <= 64 {
        // SAFETY: sigismember reads a valid set; a number the system has no signal for
        // is -1, not a member.
        if unsafe { libc::sigismember(set, sig) } == 1 {
            mask |= 1 << (sig - 1);
        }
        sig += 1;
    }
    mask
}

/// Makes `set` the set of the signals in `mask` (signal `s` at bit `s - 1`).
fn fill(set: &mut MaybeUninit<libc::sigset_t>, mask: u64) {
    // SAFETY: sigemptyset initializes the set; sigaddset only writes it; both are
    // async-signal-safe.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        let mut sig = 1;
        while sig <= 64 {
            if mask & 1 << (sig - 1) != 0 {
                libc::sigaddset(set.as_mut_ptr(), sig);
            }
            sig += 1;
        }
    }
}
