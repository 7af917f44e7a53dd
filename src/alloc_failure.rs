//! Exit status 3 with a message, not SIGABRT, when memory runs out in an allocation that
//! cannot fail softly.
//!
//! stoker's large buffers are allocated fallibly, and a failure there stops a command with
//! exit status 3 ("no fault of the inputs: run again"). Small allocations (a `Vec` growing,
//! a decoder's rows) cannot fail softly: Rust prints "memory allocation of N bytes failed"
//! and aborts, and the hook that would change that (`std::alloc::set_alloc_error_hook`) is
//! unstable. Under a tight memory limit (`ulimit -v`, strict overcommit) a conversion then
//! died by SIGABRT, status 134, where a script retries on 3.
//!
//! [`ReportingAllocator`] (the global allocator of the `stoker` binary and of the Python
//! extension) notes the thread whose allocation failed, and [`exit_on_failure`]'s SIGABRT
//! handler ends the abort of that thread with status 3 and a message instead. Any other
//! abort (a failed assertion in C code, heap corruption) runs its course, unless its
//! thread was the last to have an allocation fail, softly (`try_reserve`): under such a
//! shortage of memory, the abort is taken for one more. The temporary file of `decode -o`
//! is taken away first ([`crate::stop_cleanup`]); a conversion's output is left as a kill
//! leaves it, for `--resume`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_int;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Once;

/// The system allocator, noting each allocation it could not serve (see the module).
///
/// # Examples
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: stoker::alloc_failure::ReportingAllocator =
///     stoker::alloc_failure::ReportingAllocator;
///
/// fn main() {
///     stoker::alloc_failure::exit_on_failure();
///     // ...
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportingAllocator;

/// The kernel id of the thread whose allocation failed last; 0 for none. Never cleared:
/// between the failure and the abort, Rust's report allocates (with `RUST_BACKTRACE` set,
/// the backtrace it prints), so a later success says nothing. One slot, not a thread-local:
/// a thread-local of a shared library (the Python extension) may be allocated on its first
/// use, which neither a failed allocation nor a signal handler can afford. Another thread
/// failing between an allocation's failure and its abort leaves that abort a plain one.
static FAILED_ON: AtomicI64 = AtomicI64::new(0);

/// This thread's kernel id: the raw system call, as glibc's `gettid` (2.30) is newer than
/// the oldest glibc the wheel supports (2.28). Async-signal-safe.
fn thread_id() -> i64 {
    // SAFETY: `gettid` takes no arguments, cannot fail and touches no memory.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

fn noted(p: *mut u8) -> *mut u8 {
    if p.is_null() {
        FAILED_ON.store(thread_id(), Ordering::SeqCst);
    }
    p
}

// SAFETY: every call is passed on to the system allocator with its arguments unchanged, and
// its result returned unchanged; a failure is only noted.
unsafe impl GlobalAlloc for ReportingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        noted(unsafe { System.alloc(layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        noted(unsafe { System.alloc_zeroed(layout) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on.
        noted(unsafe { System.realloc(ptr, layout, new_size) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// What the process prints after Rust's own "memory allocation of N bytes failed".
const MESSAGE: &[u8] = b"stoker: error: out of memory (the system is short of it, or the \
process is at its limit: ulimit -v, a container's), which says nothing about the inputs: \
run the command again once that is fixed (a conversion: with --resume)\n";

/// Installs the SIGABRT handler (once; later calls do nothing) that ends the abort of a
/// thread whose allocation failed with [`crate::cli::OUTSIDE_FAULT`] (3). Only for a
/// program whose global allocator is [`ReportingAllocator`]: without it no failure is
/// noted, and every abort runs its course. A SIGABRT the program already ignores or
/// handles is left to it.
pub fn exit_on_failure() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: a zeroed `sigaction` is a valid value; the query of the old action goes
        // into a valid, writable struct; the handler below is async-signal-safe (atomics,
        // syscall(gettid), unlink, write, _exit).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGABRT, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                return;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_abort as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGABRT, &action, std::ptr::null_mut());
        }
    });
}

/// The abort of a thread whose allocation failed: the temporary file taken away, the
/// message, exit status 3. Any other: returns, and `abort` goes on to end the process by
/// SIGABRT as it would have.
extern "C" fn on_abort(_sig: c_int) {
    if FAILED_ON.load(Ordering::SeqCst) != thread_id() {
        return;
    }
    crate::stop_cleanup::remove_now();
    // SAFETY: write and _exit are async-signal-safe; MESSAGE is a valid buffer of its
    // length. A failed write changes nothing: the status still says it.
    unsafe {
        libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
        libc::_exit(crate::cli::OUTSIDE_FAULT.into());
    }
}
