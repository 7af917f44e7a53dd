//! A cache of memory blocks behind nvJPEG's allocator callbacks.
//!
//! nvJPEG's own allocators are `cudaMalloc`/`cudaFree` and
//! `cudaHostAlloc`/`cudaFreeHost`, called whenever a state or buffer grows.
//! A free waits for the whole device, every stream's queued work included:
//! beside a training step, a decode call that frees waits for that step. The
//! cache keeps freed blocks instead and hands them out again, so that after
//! the buffers have reached their working size nothing is freed at all.
//!
//! A block nvJPEG frees may still be read or written by work queued before
//! the free, on the stream the free names. It becomes reusable when an event
//! recorded on that stream at the free has completed; until then it is held.
//! A free that names no stream (the null stream: a state or buffer
//! destroyed) gives the block back to CUDA at once, as nvJPEG's own allocator
//! would, since no event could say when every stream is done with it.
//!
//! Blocks are never split: a request takes a whole idle block of at least its
//! size and at most twice it, and new blocks are allocated in size classes
//! (four per power of two) so that a buffer growing by a little reuses the
//! block it grew into. Idle blocks beyond the peak bytes in use (at least
//! [`IDLE_FLOOR`]) go back to CUDA, the oldest ready ones first.
//!
//! The logic is generic over [`Backing`] (CUDA device or pinned memory in
//! `allocator.rs`), so it is tested here without a GPU.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Idle bytes a cache may keep even when the peak in use is smaller.
pub(crate) const IDLE_FLOOR: usize = 64 << 20;

/// Where blocks come from and go back to, and the events that say when a
/// stream is done with one.
pub(crate) trait Backing {
    /// A recorded event; dropping it releases it.
    type Event;
    /// A new block of exactly `bytes` (non-zero); its address.
    fn alloc(&self, bytes: usize) -> Option<usize>;
    /// Gives a block from [`alloc`](Self::alloc) back.
    fn release(&self, addr: usize);
    /// An event recorded on `stream` (non-zero) now; `None` if that failed.
    fn record(&self, stream: usize) -> Option<Self::Event>;
    /// Whether the work before `event` is done (`false` while pending or broken).
    fn done(&self, event: &Self::Event) -> bool;
    /// Waits for `event`; `false` if the wait failed.
    fn wait(&self, event: &Self::Event) -> bool;
}

/// What a cache has done since it was made.
///
/// # Examples
/// ```
/// let s = stoker_decode::BlockStats::default();
/// assert_eq!(s.requests, s.reused + s.fresh + s.failed);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockStats {
    /// Allocations nvJPEG asked for (zero-byte ones excluded).
    pub requests: u64,
    /// Requests served with an idle block.
    pub reused: u64,
    /// Requests served with a new block from CUDA (`cuMemAlloc`, `cuMemHostAlloc`).
    pub fresh: u64,
    /// Requests that could not be served (nvJPEG then reports an allocator failure).
    pub failed: u64,
    /// Frees nvJPEG made that kept the block for reuse.
    pub kept: u64,
    /// Blocks given back to CUDA (`cuMemFree`, `cuMemFreeHost`) while nvJPEG
    /// was decoding: frees naming no stream, and idle blocks over the limit.
    /// Each may wait for the whole device, which is what the cache is for
    /// avoiding; in steady decoding this stays put.
    pub released: u64,
    /// Frees of an address the cache did not hand out (refused).
    pub unknown_frees: u64,
    /// Bytes in blocks nvJPEG holds now.
    pub live_bytes: u64,
    /// Bytes in idle blocks now.
    pub idle_bytes: u64,
    /// The most bytes nvJPEG held at once.
    pub peak_live_bytes: u64,
}

/// The size class a request of `bytes` (non-zero) is allocated in: at least
/// 4 KiB, then four classes per power of two, so at most a quarter is unused.
pub(crate) fn size_class(bytes: usize) -> usize {
    const MIN: usize = 4096;
    if bytes <= MIN {
        return MIN;
    }
    match bytes.checked_next_power_of_two() {
        // Classes in (p/2, p]: 5p/8, 6p/8, 7p/8, p.
        Some(p) => bytes.div_ceil(p / 8) * (p / 8),
        None => bytes,
    }
}

/// An idle block and, until its stream has passed the free, the event that says so.
struct Idle<E> {
    addr: usize,
    capacity: usize,
    after: Option<E>,
}

struct State<E> {
    /// Blocks nvJPEG holds: address → capacity.
    live: HashMap<usize, usize>,
    /// Idle blocks, oldest first.
    idle: Vec<Idle<E>>,
    stats: BlockStats,
}

/// The cache over one [`Backing`]. Thread safe: nvJPEG calls its allocators
/// from every thread that decodes.
pub(crate) struct BlockCache<B: Backing> {
    backing: B,
    state: Mutex<State<B::Event>>,
}

impl<B: Backing> BlockCache<B> {
    pub(crate) fn new(backing: B) -> BlockCache<B> {
        BlockCache {
            backing,
            state: Mutex::new(State {
                live: HashMap::new(),
                idle: Vec::new(),
                stats: BlockStats::default(),
            }),
        }
    }

    #[cfg(test)]
    fn backing(&self) -> &B {
        &self.backing
    }

    /// A panic elsewhere while holding the lock leaves the maps consistent
    /// (every update is one insert or remove), so a poisoned lock is used as is.
    fn lock(&self) -> MutexGuard<'_, State<B::Event>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn stats(&self) -> BlockStats {
        self.lock().stats
    }

    /// A block of at least `bytes`: its address, `Some(0)` for zero bytes,
    /// `None` when neither an idle block nor CUDA can give one.
    pub(crate) fn alloc(&self, bytes: usize) -> Option<usize> {
        if bytes == 0 {
            return Some(0);
        }
        let mut st = self.lock();
        st.stats.requests += 1;
        let class = size_class(bytes);
        if let Some(i) = self.ready_fit(&mut st, bytes, class) {
            let block = st.idle.remove(i);
            st.stats.idle_bytes -= block.capacity as u64;
            st.stats.reused += 1;
            Self::hand_out(&mut st, block.addr, block.capacity);
            return Some(block.addr);
        }
        let Some(addr) = self.fresh(&mut st, class) else {
            st.stats.failed += 1;
            return None;
        };
        st.stats.fresh += 1;
        Self::hand_out(&mut st, addr, class);
        Some(addr)
    }

    /// The smallest idle block in `bytes ..= 2 × class` whose stream is done
    /// with it (its event dropped once seen done).
    fn ready_fit(&self, st: &mut State<B::Event>, bytes: usize, class: usize) -> Option<usize> {
        let mut best: Option<usize> = None;
        for i in 0..st.idle.len() {
            let cap = st.idle[i].capacity;
            if cap < bytes || cap > class.saturating_mul(2) {
                continue;
            }
            if best.is_some_and(|b| st.idle[b].capacity <= cap) {
                continue;
            }
            if self.ready(&mut st.idle[i]) {
                best = Some(i);
            }
        }
        best
    }

    fn ready(&self, block: &mut Idle<B::Event>) -> bool {
        match &block.after {
            None => true,
            Some(e) if self.backing.done(e) => {
                block.after = None;
                true
            }
            Some(_) => false,
        }
    }

    /// A new block of `bytes`; when CUDA has none, the ready idle blocks are
    /// given back and it is asked again, then the pending ones after a wait.
    fn fresh(&self, st: &mut State<B::Event>, bytes: usize) -> Option<usize> {
        if let Some(a) = self.backing.alloc(bytes) {
            return Some(a);
        }
        self.release_idle(st, false);
        if let Some(a) = self.backing.alloc(bytes) {
            return Some(a);
        }
        self.release_idle(st, true);
        self.backing.alloc(bytes)
    }

    /// Gives idle blocks back to CUDA: the ready ones, and with `wait` every
    /// one (waiting for its event first; one whose wait fails is kept).
    fn release_idle(&self, st: &mut State<B::Event>, wait: bool) {
        let mut kept = Vec::new();
        for mut block in std::mem::take(&mut st.idle) {
            let free = self.ready(&mut block)
                || (wait && block.after.as_ref().is_some_and(|e| self.backing.wait(e)));
            if free {
                drop(block.after.take());
                self.backing.release(block.addr);
                st.stats.released += 1;
                st.stats.idle_bytes -= block.capacity as u64;
            } else {
                kept.push(block);
            }
        }
        st.idle = kept;
    }

    fn hand_out(st: &mut State<B::Event>, addr: usize, capacity: usize) {
        st.live.insert(addr, capacity);
        st.stats.live_bytes += capacity as u64;
        st.stats.peak_live_bytes = st.stats.peak_live_bytes.max(st.stats.live_bytes);
    }

    /// Takes back `addr`, which work queued on `stream` before this call may
    /// still use (`stream` 0: the null stream). `false` for an address this
    /// cache did not hand out, which is left alone.
    pub(crate) fn free(&self, addr: usize, stream: usize) -> bool {
        if addr == 0 {
            return true;
        }
        let mut st = self.lock();
        let Some(capacity) = st.live.remove(&addr) else {
            st.stats.unknown_frees += 1;
            return false;
        };
        st.stats.live_bytes -= capacity as u64;
        let after = if stream == 0 {
            None
        } else {
            self.backing.record(stream)
        };
        if after.is_none() {
            // No event can say when the block is free: give it back the way
            // nvJPEG's own allocator would have.
            self.backing.release(addr);
            st.stats.released += 1;
            return true;
        }
        st.idle.push(Idle {
            addr,
            capacity,
            after,
        });
        st.stats.kept += 1;
        st.stats.idle_bytes += capacity as u64;
        self.trim(&mut st);
        true
    }

    /// Gives the oldest ready idle blocks back while the idle bytes exceed
    /// the peak in use (or [`IDLE_FLOOR`]).
    fn trim(&self, st: &mut State<B::Event>) {
        let limit = st.stats.peak_live_bytes.max(IDLE_FLOOR as u64);
        let mut i = 0;
        while st.stats.idle_bytes > limit && i < st.idle.len() {
            if self.ready(&mut st.idle[i]) {
                let block = st.idle.remove(i);
                self.backing.release(block.addr);
                st.stats.released += 1;
                st.stats.idle_bytes -= block.capacity as u64;
            } else {
                i += 1;
            }
        }
    }
}

impl<B: Backing> Drop for BlockCache<B> {
    /// Gives every block back. It runs after the last nvJPEG handle made with
    /// the cache is destroyed, so blocks still live were never freed by
    /// nvJPEG and nothing uses them any more.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for block in std::mem::take(&mut st.idle) {
            if let Some(e) = &block.after {
                self.backing.wait(e);
            }
            drop(block.after);
            self.backing.release(block.addr);
        }
        if !st.live.is_empty() {
            tracing::debug!(
                "{} blocks nvJPEG did not free are given back with its allocator",
                st.live.len()
            );
        }
        for (addr, _) in std::mem::take(&mut st.live) {
            self.backing.release(addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashSet;
    use std::rc::Rc;

    /// Memory from a counter, a budget of bytes, and events a test completes.
    #[derive(Default)]
    struct Fake {
        next: RefCell<usize>,
        budget: RefCell<Option<usize>>,
        held: Rc<RefCell<HashMap<usize, usize>>>,
        released: RefCell<Vec<usize>>,
        pending: Rc<RefCell<HashSet<usize>>>,
        events: RefCell<usize>,
        no_events: RefCell<bool>,
    }

    struct Ev {
        id: usize,
        pending: Rc<RefCell<HashSet<usize>>>,
    }

    impl Backing for Fake {
        type Event = Ev;
        fn alloc(&self, bytes: usize) -> Option<usize> {
            let used: usize = self.held.borrow().values().sum();
            if self.budget.borrow().is_some_and(|b| used + bytes > b) {
                return None;
            }
            let mut next = self.next.borrow_mut();
            *next += 1 << 32;
            self.held.borrow_mut().insert(*next, bytes);
            Some(*next)
        }
        fn release(&self, addr: usize) {
            assert!(
                self.held.borrow_mut().remove(&addr).is_some(),
                "double release"
            );
            self.released.borrow_mut().push(addr);
        }
        fn record(&self, _stream: usize) -> Option<Ev> {
            if *self.no_events.borrow() {
                return None;
            }
            let mut n = self.events.borrow_mut();
            *n += 1;
            self.pending.borrow_mut().insert(*n);
            Some(Ev {
                id: *n,
                pending: Rc::clone(&self.pending),
            })
        }
        fn done(&self, e: &Ev) -> bool {
            !e.pending.borrow().contains(&e.id)
        }
        fn wait(&self, e: &Ev) -> bool {
            e.pending.borrow_mut().remove(&e.id);
            true
        }
    }

    impl Fake {
        fn complete_all(&self) {
            self.pending.borrow_mut().clear();
        }
    }

    const STREAM: usize = 0x5000;

    #[test]
    fn size_classes_waste_under_a_quarter_and_grow_monotonically() {
        assert_eq!(size_class(1), 4096);
        assert_eq!(size_class(4096), 4096);
        assert_eq!(size_class(4097), 5120);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), 5 << 18);
        let mut last = 0;
        for bytes in (1..5_000_000).step_by(997) {
            let c = size_class(bytes);
            assert!(c >= bytes && c >= last);
            assert!(bytes <= 4096 || (c - bytes) * 4 < bytes, "{bytes} -> {c}");
            last = c;
        }
        assert_eq!(size_class(usize::MAX), usize::MAX);
    }

    #[test]
    fn a_freed_block_is_reused_only_after_its_stream_has_passed_the_free() {
        let cache = BlockCache::new(Fake::default());
        let a = cache.alloc(1000).unwrap();
        assert!(cache.free(a, STREAM));
        // Still pending on the stream: a new block.
        let b = cache.alloc(1000).unwrap();
        assert_ne!(a, b);
        cache.backing().complete_all();
        let c = cache.alloc(900).unwrap();
        assert_eq!(c, a, "the completed block is handed out again");
        let s = cache.stats();
        assert_eq!(
            (s.requests, s.fresh, s.reused, s.kept, s.released),
            (3, 2, 1, 1, 0)
        );
        assert_eq!(s.live_bytes, 2 * 4096);
        assert!(cache.backing().released.borrow().is_empty());
    }

    #[test]
    fn steady_growth_and_shrink_settles_without_releasing() {
        // A buffer that grows and shrinks with the images of each batch, as a
        // state's buffers do on mixed sizes.
        let cache = BlockCache::new(Fake::default());
        let sizes = [3 << 20, 5 << 20, 4 << 20, 6 << 20, 2 << 20, 6 << 20];
        let mut held = cache.alloc(sizes[0]).unwrap();
        for round in 0..50 {
            for &s in &sizes {
                cache.free(held, STREAM);
                cache.backing().complete_all();
                held = cache.alloc(s + round).unwrap();
            }
        }
        let s = cache.stats();
        assert_eq!(s.released, 0);
        assert!(s.fresh <= 6, "{s:?}");
        assert_eq!(s.reused + s.fresh, s.requests);
    }

    #[test]
    fn a_free_without_a_stream_or_an_event_gives_the_block_back_at_once() {
        let cache = BlockCache::new(Fake::default());
        let a = cache.alloc(10).unwrap();
        assert!(cache.free(a, 0));
        assert_eq!(*cache.backing().released.borrow(), vec![a]);
        *cache.backing().no_events.borrow_mut() = true;
        let b = cache.alloc(10).unwrap();
        assert!(cache.free(b, STREAM));
        assert_eq!(cache.stats().released, 2);
        assert_eq!(cache.stats().idle_bytes, 0);
    }

    #[test]
    fn unknown_and_null_addresses() {
        let cache = BlockCache::new(Fake::default());
        assert_eq!(cache.alloc(0), Some(0));
        assert!(cache.free(0, STREAM));
        assert!(!cache.free(0xdead, STREAM));
        let a = cache.alloc(10).unwrap();
        assert!(cache.free(a, STREAM));
        assert!(!cache.free(a, STREAM), "a double free is refused");
        let s = cache.stats();
        assert_eq!((s.requests, s.unknown_frees), (1, 2));
    }

    #[test]
    fn blocks_far_larger_than_a_request_are_not_used_for_it() {
        let cache = BlockCache::new(Fake::default());
        let big = cache.alloc(1 << 20).unwrap();
        cache.free(big, STREAM);
        cache.backing().complete_all();
        let small = cache.alloc(4096).unwrap();
        assert_ne!(small, big);
        let half = cache.alloc((1 << 19) + 1).unwrap();
        assert_eq!(half, big, "within twice the class: reused");
    }

    #[test]
    fn idle_bytes_over_the_peak_in_use_go_back_oldest_ready_first() {
        let cache = BlockCache::new(Fake::default());
        // Peak in use 48 MiB (below the floor): idle may reach 64 MiB.
        let blocks: Vec<usize> = (0..3).map(|_| cache.alloc(16 << 20).unwrap()).collect();
        for &b in &blocks {
            cache.free(b, STREAM);
        }
        cache.backing().complete_all();
        let s = cache.stats();
        assert_eq!((s.released, s.idle_bytes), (0, 48 << 20));
        // 40 MiB more idle: 88 MiB > 64 MiB, so the two oldest ready ones go.
        let big = cache.alloc(40 << 20).unwrap();
        cache.free(big, STREAM);
        let s = cache.stats();
        assert_eq!(s.released, 2, "{s:?}");
        assert_eq!(*cache.backing().released.borrow(), blocks[..2].to_vec());
        assert_eq!(s.idle_bytes, (16 << 20) + (40 << 20));
    }

    #[test]
    fn when_cuda_runs_out_idle_blocks_are_given_back_and_the_request_retried() {
        let cache = BlockCache::new(Fake::default());
        *cache.backing().budget.borrow_mut() = Some(3 << 20);
        let a = cache.alloc(1 << 20).unwrap();
        let b = cache.alloc(1 << 20).unwrap();
        cache.free(a, STREAM);
        cache.free(b, STREAM);
        // Pending: the retry waits for them, gives them back, and fits.
        let c = cache.alloc(2 << 20).unwrap();
        assert_ne!(c, 0);
        let s = cache.stats();
        assert_eq!((s.released, s.idle_bytes, s.failed), (2, 0, 0));
        // Over the budget even with nothing idle: refused, counted.
        assert_eq!(cache.alloc(3 << 20), None);
        assert_eq!(cache.stats().failed, 1);
    }

    #[test]
    fn dropping_the_cache_gives_every_block_back_once() {
        let fake = Fake::default();
        let (pending, held) = (Rc::clone(&fake.pending), Rc::clone(&fake.held));
        let cache = BlockCache::new(fake);
        let a = cache.alloc(100).unwrap();
        let _live = cache.alloc(200).unwrap();
        cache.free(a, STREAM);
        assert!(!pending.borrow().is_empty());
        assert_eq!(held.borrow().len(), 2);
        // `release` panics on a second release of one block.
        drop(cache);
        assert!(
            pending.borrow().is_empty(),
            "the pending block was waited for"
        );
        assert!(held.borrow().is_empty(), "every block was given back");
    }
}
