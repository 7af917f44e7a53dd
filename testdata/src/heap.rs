//! A counting global allocator, for the tests and benches that measure heap use: a binary
//! declares it as its `#[global_allocator]` and reads the counts around the work measured.
//!
//! ```
//! #[global_allocator]
//! static HEAP: stoker_testdata::heap::Counting = stoker_testdata::heap::Counting;
//! let before = stoker_testdata::heap::start_peak();
//! let v = vec![0u8; 1 << 20];
//! assert!(stoker_testdata::heap::peak() - before >= 1 << 20);
//! drop(v);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes allocated now and the most at any time.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to `System` unchanged; only counters are updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's obligations for `alloc` are the same for `System`.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

/// Bytes allocated now (through [`Counting`]).
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Starts a peak measurement from what is allocated now, and returns that.
pub fn start_peak() -> usize {
    let now = live();
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// The most bytes allocated at any time since [`start_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}
