//! Shard maps whose failed page reads become errors instead of a dead process.
//!
//! A read through a file mapping raises SIGBUS when the page cannot be delivered: the file
//! was cut short under the map (`cp` or `rsync --inplace` over a dataset in use), or the
//! storage returned an I/O error (a network or FUSE file system, a bad sector). By default
//! that kills the process, wherever the read happened: in a CRC, a decoder, a copy.
//!
//! So every shard map is registered here, and registering installs a SIGBUS handler for
//! the process (again, in front, when another library has replaced it since; see
//! [`install`]). A fault inside a registered map gets a page of zeros mapped
//! over the lost page, and the map is marked as faulted; the read then goes on and sees
//! zeros, and whoever read records of that map checks the mark afterwards
//! ([`GuardedMap::faulted`], through `DatasetReader::check_read`) and reports the record as
//! unreadable. The same approach as Sapling's indexedlog, for the same reason: reading every
//! record with `pread` would give up the zero-copy read path, and a `setjmp`-style escape
//! from the faulting instruction is not something Rust code can do soundly.
//!
//! A fault anywhere else is passed on unchanged: to the handler installed before ours (a
//! Rust program's stack-overflow handler, Python's `faulthandler`), called as the kernel
//! would have called it (its signature, its mask, SA_NODEFER, SA_RESETHAND), or to the
//! default action, so the process dies of it as it would have without stoker. That last
//! step is why this is not built on `signal-hook-registry`: it forwards to a previous
//! handler, but has no way to give a fault back to the default action, and returning from
//! such a fault runs the faulting instruction again, forever. "Before ours" is the action
//! in place when that copy of ours was installed: ours is installed as one of a few entry
//! functions, a generation each, so that a library that keeps ours to pass its own signals
//! on to, and that ours is later put in front of, does not get them back ([`behind`]).
//!
//! When the handler it was passed to returns having put itself (or anything else) in place
//! of ours, ours goes back in front of it. A library that replaces ours at any other time,
//! or whose handler jumps out (`siglongjmp`) instead of returning, leaves shard faults
//! fatal until the next [`install`]: the next open, `Dataset::reader`, record read by the
//! loader, or item read from Python. Nothing here can watch the SIGBUS action between
//! those calls.
//!
//! Nothing about a signal passed on is kept for the next one, so a handler that recovers
//! from SIGBUS by jumping out gets every one, not just the first. What stops a signal
//! going round between ours and another handler is in the signal itself: a mark in its
//! siginfo for a handler that calls ours back with it ([`mark`]), and for one that raises
//! it again, the generations (the copy of ours it puts back passes it further down) or,
//! when the raised signal would come straight back to it, the default action.
//!
//! The handler never waits and allocates nothing: it reads fixed tables of atomics (one
//! slot per map, and one per generation for the action behind it, each with a sequence
//! number so that a slot being reused is never read half-written), tries the install turn
//! without waiting for it, and makes async-signal-safe system calls: one `mmap` for a fault
//! of ours; `sigaction`, `sigpending` and `pthread_sigmask` for one passed on. It keeps
//! its frames small: it may run on an 8 KiB alternate signal stack under two kernel
//! signal frames (see `handler::forward`).

mod action;
mod behind;
mod front;
mod handler;
mod mark;
mod registry;
#[cfg(test)]
mod tests;
mod turn;

use std::cell::Cell;
use std::sync::Once;
use std::time::{Duration, Instant};

use front::{generation_of, put_in_front};
use handler::ENTRIES;
use registry::{claim, faulted, release, SLOTS};
use turn::Turn;

/// A read-only file map registered with the SIGBUS handler.
pub(crate) struct GuardedMap {
    map: memmap2::Mmap,
    /// The map's slot in the registry; `None` when the table was full (then a failed read
    /// kills the process, as it would without this module).
    slot: Option<usize>,
}

impl std::fmt::Debug for GuardedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedMap")
            .field("len", &self.map.len())
            .field("guarded", &self.slot.is_some())
            .field("faulted", &self.faulted())
            .finish()
    }
}

impl GuardedMap {
    /// Registers `map`, with the process's SIGBUS handler in place ([`install`]).
    pub(crate) fn new(map: memmap2::Mmap) -> Self {
        if map.is_empty() {
            return Self { map, slot: None };
        }
        install();
        let range = map.as_ptr_range();
        let slot = claim(range.start as usize, range.end as usize);
        if slot.is_none() {
            static WARNED: Once = Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "more than {SLOTS} shard maps open: a shard cut short while it is read \
                     now ends the process (SIGBUS) instead of failing its records"
                );
            });
        }
        Self { map, slot }
    }

    /// The mapped bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Asks the kernel to read the pages of `bytes` (a range of the map) into the page
    /// cache, without waiting for them (`madvise(MADV_WILLNEED)`): a hint, which changes no
    /// byte of the map and moves no page into it, so the guard's mark is unaffected.
    ///
    /// # Errors
    ///
    /// The `madvise` error (a range outside the map is refused before it is asked).
    pub(crate) fn will_need(&self, bytes: std::ops::Range<usize>) -> std::io::Result<()> {
        if bytes.start > bytes.end || bytes.end > self.map.len() {
            return Err(std::io::ErrorKind::InvalidInput.into());
        }
        self.map
            .advise_range(memmap2::Advice::WillNeed, bytes.start, bytes.len())
    }

    /// Whether a read of this map has failed since it was made: its lost pages now read as
    /// zeros, so nothing read from it can be trusted.
    pub(crate) fn faulted(&self) -> bool {
        self.slot.is_some_and(faulted)
    }
}

impl Drop for GuardedMap {
    fn drop(&mut self) {
        // Unregistered before `map` is unmapped (fields drop after this), so the handler
        // never takes an address of a later, unrelated mapping for this one.
        if let Some(i) = self.slot {
            release(i);
        }
    }
}

/// Installs stoker's SIGBUS handler for shard maps, unless it is the one in place: also
/// after another library replaced it without passing faults on (Python's
/// `faulthandler.enable()` called late, torch's DataLoader workers), which would turn a
/// shard read fault back into a dead process. The handler found in its place is where
/// faults outside shard maps go from then on (a library that kept the copy of ours it
/// replaced still passes its signals to the action behind that copy). Every shard open
/// calls it; a program that installs a SIGBUS handler of its own afterwards can call it
/// again.
///
/// When ours is in place this is one `sigaction` query. Otherwise one thread at a time
/// puts it in front, without a lock that a `fork` while another thread installs could
/// leave held in the child. What ours replaced comes from the call that installs it, so a
/// handler another library installs at the same moment is passed the faults outside shard
/// maps, not skipped.
pub fn install() {
    handler::learn_page_size();
    if action::query().is_none_or(|current| generation_of(current.handler, &ENTRIES).is_some()) {
        return;
    }
    if !put_in_front(&Turn::take(), &ENTRIES) {
        // Once: the loader calls this before records, up to once a millisecond a thread.
        static WARNED: Once = Once::new();
        WARNED.call_once(|| {
            tracing::warn!("cannot install the SIGBUS handler; shard read faults stay fatal");
        });
    }
}

/// How long a thread reads shards between two
/// [`refresh_read_fault_handler`](crate::refresh_read_fault_handler) checks.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(1);

/// [`install_read_fault_handler`](crate::install_read_fault_handler), unless this thread
/// did it in the last [`READ_FAULT_HANDLER_REFRESH`](crate::READ_FAULT_HANDLER_REFRESH):
/// for a reader that calls it before each record. Per record, a handler installed by
/// another library while a batch is being read no longer has the rest of that batch's
/// reads, but a `sigaction` query per record (about 0.3 µs) cost 8–14 % more on a warm CRC
/// read of a 47 KB record, and proportionally more on the raw GPU path, which copies
/// records at tens of GB/s (docs/BENCHMARKS.md, "The SIGBUS guard per record"). Once a
/// millisecond per thread cost 0–3 % in the same runs, and leaves a replaced handler at
/// most that long, plus the record being read, to see a fault first.
pub fn refresh() {
    thread_local! {
        static CHECKED: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    CHECKED.with(|checked| {
        if checked
            .get()
            .is_none_or(|at| now.saturating_duration_since(at) >= REFRESH_INTERVAL)
        {
            install();
            checked.set(Some(now));
        }
    });
}
