//! The SIGBUS handler: a fault in a registered map gets a page of zeros; any other SIGBUS
//! is passed to the action behind ours, as the kernel would have delivered it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::action::{change_mask, pending, query, set_default, set_mask, Action};
use super::behind::behind;
use super::front::{generation_of, put_in_front, Entries};
use super::mark;
use super::registry::owner;
use super::turn::Turn;

/// Ours: one function per generation, each passing signals outside shard maps on to the
/// action behind its generation ([`super::behind`]).
pub(super) static ENTRIES: Entries = [
    on_sigbus::<0>,
    on_sigbus::<1>,
    on_sigbus::<2>,
    on_sigbus::<3>,
    on_sigbus::<4>,
    on_sigbus::<5>,
    on_sigbus::<6>,
    on_sigbus::<7>,
    on_sigbus::<8>,
    on_sigbus::<9>,
    on_sigbus::<10>,
    on_sigbus::<11>,
    on_sigbus::<12>,
    on_sigbus::<13>,
    on_sigbus::<14>,
    on_sigbus::<15>,
];

/// The page size, set before the handler is installed.
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// Records the page size, for the handler to map zeros over whole pages.
pub(super) fn learn_page_size() {
    // SAFETY: sysconf has no memory-safety preconditions (it reads the auxiliary vector).
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        PAGE.store(page as usize, Ordering::Relaxed);
    }
}

/// Ours as generation `G`. A fault in a registered map ends here; anything else goes to
/// [`forward`] from this frame, with no frame in between: every frame counts on a small
/// alternate stack (see [`forward`]).
extern "C" fn on_sigbus<const G: usize>(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
) {
    // SAFETY: errno is this thread's; read here and written back below, so that the code
    // the signal interrupted finds it as it left it.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel hands an SA_SIGINFO handler a valid siginfo_t, and so does a
    // handler that calls ours as the one it replaced (null only from a broken one).
    let code = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_code }
    };
    if code <= 0 || !zeros_over_lost_page(info) {
        forward(G, sig, code, info, context);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// For a fault (`si_code` > 0) at an address in a registered map: maps a page of zeros
/// over the page that could not be read and marks the map. False when the address is in
/// no registered map, or the kernel refused the mapping.
fn zeros_over_lost_page(info: *mut libc::siginfo_t) -> bool {
    // SAFETY: a fault's siginfo (si_code > 0) holds the address that faulted.
    let addr = unsafe { (*info).si_addr() } as usize;
    let Some(slot) = owner(addr) else {
        return false;
    };
    let page = PAGE.load(Ordering::Relaxed);
    let start = addr & !(page - 1);
    // SAFETY: the page lies inside a live registered map (its slot is in use, and a map is
    // unregistered before it is unmapped), which this process only reads: replacing it
    // with a private page of zeros changes what later reads of that page see, and nothing
    // else.
    let zeros = unsafe {
        libc::mmap(
            start as *mut c_void,
            page,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if zeros == libc::MAP_FAILED {
        return false;
    }
    slot.mark_faulted();
    true
}

/// Passes a SIGBUS that is not ours to the action behind generation `g`. Not inlined: a
/// local of its frame is where it runs for [`mark`], which compares that place between
/// calls of this function, so it must be the same function each time.
///
/// Only what is needed after the handler returns is kept in this frame and in
/// [`call`]'s; the rest is done in functions that have returned by then. All of it may be
/// on a small alternate stack, and a handler that raises the signal again while this runs
/// (Python's faulthandler) adds a second kernel signal frame there (3.3–3.6 KiB each with
/// AVX-512), on which ours runs again. faulthandler's own stack (`SIGSTKSZ` +
/// `AT_MINSIGSTKSZ`, 11.6 KiB there) holds both; the 8 KiB Rust gives its threads does not
/// on such a CPU, where that fault then ends the process with SIGSEGV, not SIGBUS.
#[inline(never)]
fn forward(
    g: usize,
    sig: libc::c_int,
    code: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
) {
    let frame = 0u8;
    let here = std::hint::black_box(&frame) as *const u8 as usize;
    if mark::passing(info, here) & 1 << g != 0 {
        // Called back with the signal this generation is passing on: the handler it
        // passed it to passes it back. Passing it on again would go round until the stack
        // overflows; it ends as it would with no handler left to take it.
        mark::give_up(info);
        end_as_default(sig, code);
        return;
    }
    let Some(previous) = handler_behind(g, sig, code) else {
        return;
    };
    let was = mark::enter(info, g, here);
    let before = query();
    call(&previous, sig, info, context);
    if !mark::leave(info, was, here) {
        after_call(sig, &previous, before);
    }
    // Otherwise a generation called back with it took the default action: putting ours
    // back in front of that would catch the fault again when it recurs.
}

/// The action behind generation `g` when it has a handler to call; else the signal is
/// ended here as that action (the default one, or ignored) would end it.
fn handler_behind(g: usize, sig: libc::c_int, code: libc::c_int) -> Option<Action> {
    // None only for a generation reused while this read it: the action its entry stood in
    // front of is gone, so there is nothing to pass the signal to but the default action.
    let previous = behind(g).unwrap_or(Action::DEFAULT);
    match previous.handler {
        // A SIGBUS sent by kill() to a process that ignored it.
        libc::SIG_IGN if code <= 0 => None,
        libc::SIG_DFL | libc::SIG_IGN => {
            end_as_default(sig, code);
            None
        }
        _ => Some(previous),
    }
}

/// Once the handler `previous` returned: puts ours back in front when it took ours out,
/// and gives the default action a signal it raised straight back to itself.
fn after_call(sig: libc::c_int, previous: &Action, before: Option<Action>) {
    // A handler that changed the action and left the signal pending raised it back to
    // itself (faulthandler puts back what it replaced, then raises). One that left the
    // action alone may have been sent another SIGBUS while it ran (another thread, another
    // process): that goes to it as usual, unless it keeps coming back round after round,
    // which is a handler raising it to itself through an action it set to the same value.
    let changed = query() != before;
    // A handler that puts itself (or anything else) in place when called has taken ours
    // out: put ours back in front of what it left, as the next open would. Skipped when
    // another thread of this process, or the one this interrupted, is installing.
    if let Some(turn) = Turn::try_take() {
        put_in_front(&turn, &ENTRIES);
    }
    if raised_back(sig, previous) {
        let rounds = UNCHANGED_ROUNDS.fetch_add(1, Ordering::SeqCst) + 1;
        if changed || rounds >= ROUNDS_BEFORE_DEFAULT {
            UNCHANGED_ROUNDS.store(0, Ordering::SeqCst);
            set_default(sig);
        }
    } else {
        UNCHANGED_ROUNDS.store(0, Ordering::SeqCst);
    }
}

/// Calls in a row after which the handler behind ours, which left the action alone,
/// found SIGBUS pending again; see [`after_call`].
static UNCHANGED_ROUNDS: AtomicUsize = AtomicUsize::new(0);

/// So many such rounds in a row are a handler raising the signal to itself, not signals
/// sent while it ran (a second one sent during its call is the first round; a sender
/// faster than a slow handler, 20 sends 50 ms apart to a 200 ms handler, makes five).
/// The count is process-wide (no thread-local storage is async-signal-safe in a
/// `dlopen`ed extension); a handler raising to itself costs that many calls before the
/// default action.
const ROUNDS_BEFORE_DEFAULT: usize = 32;

/// Whether the handler just called raised `sig` again while it was blocked, to have it
/// delivered once it returns, with the action in place passing it straight back to that
/// handler. Python's faulthandler raises the signal again after putting back the handler
/// it replaced, to end the process; when that is the copy of ours standing in front of
/// faulthandler itself (which installed itself twice), the signal would go round between
/// the two for ever. Without SA_NODEFER the raise waits for this handler to return, so
/// it is seen here; with it, the raise reaches the copy of ours at once, inside the
/// handler's call, and that case is not caught.
fn raised_back(sig: libc::c_int, previous: &Action) -> bool {
    pending(sig)
        && query()
            .and_then(|now| generation_of(now.handler, &ENTRIES))
            .and_then(behind)
            .is_some_and(|now| now == *previous)
}

/// Ends the signal as the default action would. With the default action back, a fault
/// recurs when the faulting instruction runs again, and a sent signal is raised again
/// (pending until this handler returns): either way the process ends as it would have
/// without our handler.
fn end_as_default(sig: libc::c_int, code: libc::c_int) {
    set_default(sig);
    if code <= 0 {
        // SAFETY: raise is async-signal-safe.
        unsafe { libc::raise(sig) };
    }
}

/// Calls `previous`'s handler as the kernel would have delivered the signal to it: with
/// the arguments its SA_SIGINFO flag says, with its `sa_mask` blocked and, unless it asked
/// for SA_NODEFER, the signal itself (faulthandler's NODEFER lets the signal it raises
/// again reach the handler it put back at once). A one-shot (SA_RESETHAND) handler
/// finds the default action in place, as it counts on: a crash reporter that returns
/// expects the fault to recur into the default action, not into itself.
fn call(previous: &Action, sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    if previous.flags & libc::SA_RESETHAND != 0 {
        set_default(sig);
    }
    let bit = 1u64 << (sig - 1);
    let blocked = if previous.flags & libc::SA_NODEFER == 0 {
        previous.mask | bit
    } else {
        previous.mask
    };
    // The signal was not blocked where it was delivered (a fault on a blocked SIGBUS
    // kills; a sent one waits), so unblocking it here gives the handler the mask the
    // kernel would have.
    let was = change_mask(blocked, bit & !blocked);
    if previous.flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an SA_SIGINFO action's handler has this signature; it gets the
        // arguments the kernel gave us.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(previous.handler) };
        f(sig, info, context);
    } else {
        // SAFETY: without SA_SIGINFO the handler takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(previous.handler) };
        f(sig);
    }
    set_mask(was);
}
