//! The registered shard maps: a fixed table of atomics the signal handler can search
//! without a lock or an allocation.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// As many slots as the kernel allows mappings per process by default (`vm.max_map_count`
/// is 65,530), so the table does not run out before the address space does. Each slot is
/// 32 bytes of zero-initialized static memory, touched only as slots are used.
pub(super) const SLOTS: usize = 1 << 16;

/// One registered map. `seq % 4` says its state: 0 free, 1 being filled, 2 in use, 3 being
/// emptied; every use adds 4, so a reader that sees the same `seq` before and after
/// reading `start` and `end` read one consistent registration.
pub(super) struct Slot {
    seq: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

impl Slot {
    const fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            faulted: AtomicBool::new(false),
        }
    }

    /// Marks the map as having lost a page. Async-signal-safe.
    pub(super) fn mark_faulted(&self) {
        self.faulted.store(true, Ordering::Release);
        HANDLED.fetch_add(1, Ordering::Relaxed);
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// One past the highest slot ever used: the handler looks no further.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Where the next registration starts looking for a free slot.
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Faults handled in registered maps, for tests and diagnostics.
static HANDLED: AtomicU64 = AtomicU64::new(0);

/// Faults handled in registered maps since the process started.
#[cfg(test)]
pub(super) fn handled() -> u64 {
    HANDLED.load(Ordering::Relaxed)
}

/// Registers the map `start..end`; its slot, or `None` when the table is full.
pub(super) fn claim(start: usize, end: usize) -> Option<usize> {
    let hint = NEXT.load(Ordering::Relaxed);
    for k in 0..SLOTS {
        let i = (hint + k) % SLOTS;
        let slot = &TABLE[i];
        let seq = slot.seq.load(Ordering::Relaxed);
        if !seq.is_multiple_of(4)
            || slot
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        fence(Ordering::Release);
        slot.start.store(start, Ordering::Relaxed);
        slot.end.store(end, Ordering::Relaxed);
        slot.faulted.store(false, Ordering::Relaxed);
        slot.seq.store(seq + 2, Ordering::Release);
        HIGH.fetch_max(i + 1, Ordering::AcqRel);
        NEXT.store((i + 1) % SLOTS, Ordering::Relaxed);
        return Some(i);
    }
    None
}

/// Unregisters slot `i`, before its map is unmapped.
pub(super) fn release(i: usize) {
    let slot = &TABLE[i];
    let seq = slot.seq.load(Ordering::Relaxed);
    slot.seq.store(seq + 1, Ordering::Relaxed);
    fence(Ordering::Release);
    slot.start.store(0, Ordering::Relaxed);
    slot.end.store(0, Ordering::Relaxed);
    slot.seq.store(seq + 2, Ordering::Release);
}

/// Whether a read of the map in slot `i` has failed since it was registered.
pub(super) fn faulted(i: usize) -> bool {
    TABLE[i].faulted.load(Ordering::Acquire)
}

/// The registered slot whose map holds `addr`. Called in the signal handler.
pub(super) fn owner(addr: usize) -> Option<&'static Slot> {
    let high = HIGH.load(Ordering::Acquire).min(SLOTS);
    TABLE[..high].iter().find(|slot| {
        let before = slot.seq.load(Ordering::Acquire);
        if before % 4 != 2 {
            return false;
        }
        let (start, end) = (
            slot.start.load(Ordering::Relaxed),
            slot.end.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        slot.seq.load(Ordering::Relaxed) == before && start <= addr && addr < end
    })
}
