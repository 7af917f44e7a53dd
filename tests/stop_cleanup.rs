//! The stop handler's temporary paths are freed once replaced or forgotten: the Python
//! package runs the CLI in its own process (`stoker._command`), so a long-lived process
//! that writes many outputs (`stoker decode -o`) would otherwise keep every path.
#![cfg(feature = "cli")] // the module serves the CLI only

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Counts the bytes this test binary holds, to see whether the paths are given back.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the counter only
// records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn replaced_and_forgotten_paths_are_freed() {
    // Long names, so that keeping them would show: 10,000 outputs would hold about 2 MB.
    let path = |i: usize| PathBuf::from(format!("/tmp/{}.{i}.stoker.tmp", "x".repeat(200)));
    // The first call installs the handlers, which may allocate once.
    stoker::stop_cleanup::remove_on_stop(&path(0));
    stoker::stop_cleanup::forget();
    let before = LIVE.load(Ordering::SeqCst);
    for i in 0..10_000 {
        // A retry replaces the path without forgetting it first (a name already taken).
        stoker::stop_cleanup::remove_on_stop(&path(i));
        stoker::stop_cleanup::remove_on_stop(&path(i + 1));
        stoker::stop_cleanup::forget();
    }
    let grown = LIVE.load(Ordering::SeqCst) - before;
    assert!(
        grown < 64 * 1024,
        "{grown} bytes still held after 10,000 outputs"
    );
}
