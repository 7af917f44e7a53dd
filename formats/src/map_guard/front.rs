//! Putting ours in front of the SIGBUS action in place.
//!
//! Ours (its entry functions, one per generation) is passed in, not named: the handler
//! puts itself back in front too (after a handler it called replaced it), so naming it
//! here would make this module and the handler's depend on each other.

use std::ffi::c_void;

use super::action::{self, query, Action};
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
    if generation_of(current.handler, ours).is_some() {
        return true;
    }
    // Kept before ours is installed: the handler forwards to it from its first call.
    let g = generation_for(current, turn);
    #[cfg(test)]
    super::tests::between_query_and_install();
    let Some(replaced) = install(ours[g]) else {
        return false;
    };
    installed(g, turn);
    if replaced == current {
        return true;
    }
    // The action ours replaced, from the same call, is not the one generation `g` passes
    // signals to: another library's sigaction landed after the query (or one of ours,
    // put back by a library taking itself out). Until the generation in front of it is
    // installed, a fault outside shard maps goes to the action it had replaced.
    let again =
        generation_of(replaced.handler, ours).unwrap_or_else(|| generation_for(replaced, turn));
    if install(ours[again]).is_some() {
        installed(again, turn);
    }
    true
}

/// Installs `entry` as the SIGBUS action, with SA_ONSTACK so that a fault on a thread
/// that runs on its alternate signal stack (Rust threads set one up) is handled there
/// too, and SA_RESTART so that a SIGBUS sent (not a fault) during a system call that the
/// handler behind ours handles restarts the call, as it would without ours, instead of
/// failing it with EINTR. The action it replaced, or `None` when the kernel refused.
fn install(entry: Entry) -> Option<Action> {
    // SAFETY: `entry` is one of ours: SA_SIGINFO, and async-signal-safe (atomics, errno,
    // mmap, sigaction, sigpending, pthread_sigmask).
    unsafe { action::install(entry as usize, libc::SA_ONSTACK | libc::SA_RESTART) }
}

/// The generation whose entry is `handler`, if it is one of ours.
pub(super) fn generation_of(handler: usize, ours: &Entries) -> Option<usize> {
    ours.iter().position(|&entry| entry as usize == handler)
}
