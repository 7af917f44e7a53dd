//! Putting ours in front of the SIGBUS action in place.
//!
//! Ours (its entry functions, one per generation) is passed in, not named: the handler
//! puts itself back in front too (after a handler it called replaced it), so naming it
//! here would make this module and the handler's depend on each other.

use std::ffi::c_void;

use super::action::{query, Action};
use super::behind::{generation_for, installed, GENERATIONS};
use super::turn::Turn;

/// A signal handler with the SA_SIGINFO signature, as ours is.
pub(super) type Entry = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void);
/// Ours: entry `g` passes signals outside shard maps to the action behind generation `g`.
pub(super) type Entries = [Entry; GENERATIONS];

/// Installs ours in front of the SIGBUS action in place, unless ours is the one in place.
/// False when the kernel refused. Async-signal-safe.
pub(super) fn put_in_front(turn: &Turn, ours: &Entries) -> bool {
    // Asked again with the turn held: another thread may have installed ours meanwhile.
    let Some(current) = query() else {
        return false;
    };
    if is_ours(&current, ours) {
        return true;
    }
    // Kept before ours is installed: the handler forwards to it from its first call.
    let current = Action::of(&current);
    let g = generation_for(current, turn);
    #[cfg(test)]
    super::tests::between_query_and_install();
    // SAFETY: all-zero is a valid `sigaction`, overwritten by the call.
    let mut replaced: libc::sigaction = unsafe { std::mem::zeroed() };
    if !install(ours[g], &mut replaced) {
        return false;
    }
    installed(g, turn);
    if Action::of(&replaced) == current {
        return true;
    }
    // The action ours replaced, from the same call, is not the one generation `g` passes
    // signals to: another library's sigaction landed after the query (or one of ours,
    // put back by a library taking itself out). Until the generation in front of it is
    // installed, a fault outside shard maps goes to the action it had replaced.
    let again = generation_of(replaced.sa_sigaction, ours)
        .unwrap_or_else(|| generation_for(Action::of(&replaced), turn));
    if install(ours[again], std::ptr::null_mut()) {
        installed(again, turn);
    }
    true
}

/// Installs `entry` as the SIGBUS action; the one it replaced goes to `replaced` unless
/// that is null. False when the kernel refused.
fn install(entry: Entry, replaced: *mut libc::sigaction) -> bool {
    // SAFETY: `action(entry)` is a valid action whose handler, one of ours, has the
    // SA_SIGINFO signature and is async-signal-safe (atomics, errno, mmap, sigaction,
    // pthread_sigmask); `replaced` is writable or null.
    unsafe { libc::sigaction(libc::SIGBUS, &action(entry), replaced) == 0 }
}

/// Whether `action` is ours, as any generation.
pub(super) fn is_ours(action: &libc::sigaction, ours: &Entries) -> bool {
    generation_of(action.sa_sigaction, ours).is_some()
}

/// The generation whose entry is `handler`, if it is one of ours.
pub(super) fn generation_of(handler: usize, ours: &Entries) -> Option<usize> {
    ours.iter().position(|&entry| entry as usize == handler)
}

/// The action of `entry`, with SA_ONSTACK so that a fault on a thread that runs on its
/// alternate signal stack (Rust threads set one up) is handled there too, and SA_RESTART
/// so that a SIGBUS sent (not a fault) during a system call that the handler behind ours
/// handles restarts the call, as it would without ours, instead of failing it with EINTR.
fn action(entry: Entry) -> libc::sigaction {
    // SAFETY: all-zero is a valid `sigaction` (empty mask, no flags), filled in below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = entry as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    action
}
