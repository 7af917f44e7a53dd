//! Takes away a temporary file (the one `stoker decode -o` writes before renaming it into
//! place) when the process is stopped by SIGINT, SIGTERM or SIGHUP (Ctrl-C, `timeout`, a
//! closed terminal): those end a Rust process without running destructors, so each stop
//! would leave a `.NAME*.stoker.tmp` behind. SIGKILL cannot be caught. One file at a time: a program writing one output per run.
//!
//! The CLI installs the handlers for every subcommand ([`install`]), temporary file or
//! not: as process 1 of a container (`docker run IMAGE stoker convert ...`, a Kubernetes
//! pod whose command execs stoker) the kernel drops a signal whose action is the
//! default, so without a handler SIGTERM (`docker stop`, a pod's eviction or deletion)
//! and Ctrl-C did nothing and the conversion ran on until SIGKILL at the end of the
//! grace period. With it, such a stop ends stoker at once with the status a shell
//! reports for the signal, leaving the output as a kill does (`--resume` continues).

use std::ffi::{c_char, c_int, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

/// The temporary file to remove on a stop; null when none. A path is owned by whoever
/// takes it out with a `swap`: the handler (which ends the process and never frees it) or
/// the thread replacing or forgetting it (which frees it). A `swap` hands a pointer to one
/// of them only, so a path freed here is one no handler holds or can still take.
static TEMPORARY: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());

const SIGNALS: [c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Removes `path` if the process is stopped by SIGINT, SIGTERM or SIGHUP before [`forget`]
/// is called (replacing any path given before), then stops it by that signal as it would
/// have been. Installs the handlers at the first call; a signal ignored then stays ignored.
pub fn remove_on_stop(path: &Path) {
    install();
    // A path with a NUL byte cannot name a file, so no file of that name can be left.
    let new =
        CString::new(path.as_os_str().as_bytes()).map_or(std::ptr::null_mut(), CString::into_raw);
    free_taken(TEMPORARY.swap(new, Ordering::SeqCst));
}

/// The temporary file is gone or renamed into place: nothing to remove any more.
pub fn forget() {
    free_taken(TEMPORARY.swap(std::ptr::null_mut(), Ordering::SeqCst));
}

/// Frees a path just taken out of [`TEMPORARY`] by a thread (not the handler). A handler
/// that runs during the free, on this thread or another, finds the next path or none.
fn free_taken(taken: *mut c_char) {
    if !taken.is_null() {
        // SAFETY: every non-null pointer in `TEMPORARY` came from `CString::into_raw`, and
        // the `swap` that returned it made this thread its only owner (see `TEMPORARY`).
        drop(unsafe { CString::from_raw(taken) });
    }
}

/// Installs the stop handlers (once; later calls do nothing): SIGINT, SIGTERM and SIGHUP
/// then end the process as their default action would, also as process 1, after removing
/// the temporary file given to [`remove_on_stop`], if any. A signal ignored at the first
/// call stays ignored.
pub fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(install_handlers);
}

fn install_handlers() {
    for sig in SIGNALS {
        // SAFETY: a zeroed `sigaction` is a valid value; the handler below is
        // async-signal-safe (an atomic load, unlink, signal, raise), and the query of
        // the old action into a valid, writable struct. A signal the shell set to be
        // ignored (`nohup`, a background job's SIGINT) stays ignored.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as *const () as usize;
            // A second stop (systemd sends SIGTERM and SIGHUP together) waits for the
            // first's handler, which might otherwise be cut between taking the path and
            // removing the file.
            libc::sigemptyset(&mut action.sa_mask);
            for other in SIGNALS {
                libc::sigaddset(&mut action.sa_mask, other);
            }
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Removes the temporary file given to [`remove_on_stop`], if any, for a handler that ends
/// the process ([`crate::alloc_failure`]'s too). Async-signal-safe: an atomic swap and
/// `unlink`; the path is taken, never freed.
pub(crate) fn remove_now() {
    let path = TEMPORARY.swap(std::ptr::null_mut(), Ordering::SeqCst);
    if !path.is_null() {
        // SAFETY: `path` is a C string that this `swap` made this caller's alone, so no
        // thread frees it; unlink is async-signal-safe.
        unsafe {
            libc::unlink(path);
        }
    }
}

/// Removes the temporary file, then stops the process by the same signal with its
/// default action, so the exit status is what it would have been (130 for Ctrl-C). As
/// process 1 (a container started without an init), where the kernel drops signals whose
/// action is the default, it exits with the status a shell reports for the signal
/// instead: going on without the file would only fail later.
extern "C" fn on_stop(sig: c_int) {
    remove_now();
    // SAFETY: getpid, _exit, signal and raise are async-signal-safe.
    unsafe {
        if libc::getpid() == 1 {
            libc::_exit(128 + sig);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}
