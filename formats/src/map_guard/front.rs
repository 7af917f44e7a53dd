//! Putting ours in front of the SIGBUS action in place.
//!
//! Ours is passed in as a value, not named: the handler puts itself back in front too
//! (after a handler it called replaced it), so naming it here would make this module and
//! the handler's depend on each other.

use std::ffi::c_void;

use super::action::{query, Action};
use super::behind::keep;
use super::turn::Turn;

/// A signal handler with the SA_SIGINFO signature, as ours is.
pub(super) type Entry = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void);

/// Installs `entry` in front of the SIGBUS action in place, unless it is the one in place.
/// False when the kernel refused. Async-signal-safe.
pub(super) fn put_in_front(turn: &Turn, entry: Entry) -> bool {
    // Asked again with the turn held: another thread may have installed ours meanwhile.
    let Some(current) = query() else {
        return false;
    };
    if is_ours(&current, entry) {
        return true;
    }
    // In force before ours is installed: the handler forwards to it from its first call.
    let current = Action::of(&current);
    keep(current, turn);
    #[cfg(test)]
    super::tests::between_query_and_install();
    // SAFETY: all-zero is a valid `sigaction`, overwritten by the call.
    let mut replaced: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `ours()` is a valid action whose handler has the SA_SIGINFO signature and is
    // async-signal-safe (atomics, errno, mmap, sigaction, pthread_sigmask); `replaced` is
    // writable.
    if unsafe { libc::sigaction(libc::SIGBUS, &ours(entry), &mut replaced) } != 0 {
        return false;
    }
    // The action ours replaced, from the same call: another library's, when its sigaction
    // landed after the query. Until it is kept here, a fault outside shard maps goes to
    // the one it had replaced.
    if !is_ours(&replaced, entry) && Action::of(&replaced) != current {
        keep(Action::of(&replaced), turn);
    }
    true
}

pub(super) fn is_ours(action: &libc::sigaction, entry: Entry) -> bool {
    action.sa_sigaction == entry as usize
}

/// Our action: `entry`, with SA_ONSTACK so that a fault on a thread that runs on its
/// alternate signal stack (Rust threads set one up) is handled there too, and SA_RESTART
/// so that a SIGBUS sent (not a fault) during a system call that the handler behind ours
/// handles restarts the call, as it would without ours, instead of failing it with EINTR.
fn ours(entry: Entry) -> libc::sigaction {
    // SAFETY: all-zero is a valid `sigaction` (empty mask, no flags), filled in below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = entry as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    action
}
