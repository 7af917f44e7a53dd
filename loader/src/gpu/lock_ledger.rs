//! The page-lock ledger: how many bytes of dataset maps this process keeps
//! page-locked for raw records, all its loaders together, and the choice each
//! new loader makes from what is left ([`route`]). Pure bookkeeping (no CUDA):
//! `registered` reserves from it before `cuMemHostRegister` and gives back after
//! `cuMemHostUnregister`.
//!
//! Why per process: the page-lock limit (`LoaderBuilder::page_lock_limit`, half
//! the memory by default) is there so that locked pages never crowd out the rest
//! of the machine. Counted per loader, two loaders of one process over two
//! datasets (training and validation; an old loader still holding a dataset that
//! was replaced on disk and a new one over the new files) could each lock up to
//! the limit, together all of the memory.
//!
//! What is counted: the manifest's bytes of each registered shard (the sizes the
//! window plans are cut by, so that a loader alone never has a window refused),
//! once per registered range however many loaders share it (`registered` keeps
//! one registration per range and counts its users in a [`Ranges`]).
//!
//! Not counted: the staging ring's pinned buffers. They have their own budget
//! (`pinned_memory`, this process's share of the node), which is divided among
//! the node's processes; the page-lock limit is not, since processes mapping one
//! dataset lock the same page-cache pages. One budget for both would be either
//! divided or not, wrong for one of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::window_locker::LIVE;

/// Bytes page-locked, against a limit each reservation names.
///
/// The limit is the reserving loader's own (`page_lock_limit`, else half the
/// memory): a loader locks more only while the process's total stays within it,
/// so a loader with a lower limit than another's never pushes the total over its
/// own.
#[derive(Debug)]
pub(crate) struct Ledger {
    /// Bytes of the live [`Reservation`]s (and of those kept with
    /// [`Reservation::keep`]): only [`Ledger::reserve`] raises it, only a
    /// reservation's `Drop` lowers it.
    held: AtomicU64,
}

impl Ledger {
    /// An empty ledger.
    pub(crate) const fn new() -> Ledger {
        Ledger {
            held: AtomicU64::new(0),
        }
    }

    /// Bytes reserved now.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// Reserves `bytes` if the ledger then holds at most `limit`, all or nothing
    /// (a set of shards is registered whole or not at all).
    ///
    /// # Errors
    /// [`Refused`], saying what was held, when `bytes` is more than is left.
    pub(crate) fn reserve(&self, bytes: u64, limit: u64) -> Result<Reservation<'_>, Refused> {
        let mut held = self.held.load(Ordering::Acquire);
        loop {
            if bytes > limit.saturating_sub(held) {
                return Err(Refused {
                    want: bytes,
                    held,
                    limit,
                });
            }
            // `held + bytes <= limit`: no overflow.
            match self.held.compare_exchange_weak(
                held,
                held + bytes,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(Reservation {
                        ledger: self,
                        bytes,
                    })
                }
                Err(now) => held = now,
            }
        }
    }
}

/// A reservation refused: `want` bytes asked while `held` of `limit` were held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) want: u64,
    pub(crate) held: u64,
    pub(crate) limit: u64,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} MiB more would take this process past the {} MiB page-lock limit, {} MiB of which its loaders hold",
            self.want.div_ceil(1 << 20),
            self.limit >> 20,
            self.held.div_ceil(1 << 20)
        )
    }
}

/// Bytes held in a [`Ledger`] until this drops.
#[derive(Debug)]
pub(crate) struct Reservation<'l> {
    ledger: &'l Ledger,
    /// Counted in `ledger.held` while this lives.
    bytes: u64,
}

impl<'l> Reservation<'l> {
    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Moves `bytes` of this reservation (at most all of it) into a new one, so
    /// that each range registered under one reservation gives its own bytes back.
    pub(crate) fn split_off(&mut self, bytes: u64) -> Reservation<'l> {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Reservation {
            ledger: self.ledger,
            bytes,
        }
    }

    /// Keeps the bytes counted for the rest of the process: for a registration
    /// that could not be undone, whose pages stay locked.
    pub(crate) fn keep(mut self) {
        self.bytes = 0;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.ledger.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// One registered range: its length, its users and the bytes it holds.
#[derive(Debug)]
struct Range<'l> {
    len: usize,
    /// Users (registrations of loaders' maps) of the range, at least 1.
    users: usize,
    /// Given back when the last user leaves ([`Ranges::leave`]).
    charge: Reservation<'l>,
}

/// The registered ranges of the process, by start address: each registered
/// once, counted once in the ledger, and shared by every user.
#[derive(Debug, Default)]
pub(crate) struct Ranges<'l> {
    ranges: HashMap<usize, Range<'l>>,
}

/// A range asked for with another length than it is registered with (a mapping
/// replaced at the same address while the old one is still registered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OtherLength(pub(crate) usize);

impl<'l> Ranges<'l> {
    /// Whether a range starts at `start`.
    pub(crate) fn contains(&self, start: usize) -> bool {
        self.ranges.contains_key(&start)
    }

    /// Charges of the ranges among `wanted` (`(start, charge)`) not yet
    /// registered, each start counted once: what registering them all reserves.
    pub(crate) fn unregistered(&self, wanted: impl IntoIterator<Item = (usize, u64)>) -> u64 {
        let mut seen = std::collections::HashSet::new();
        wanted
            .into_iter()
            .filter(|&(start, _)| !self.contains(start) && seen.insert(start))
            .map(|(_, charge)| charge)
            .sum()
    }

    /// Counts one more user of the range at `start` when there is one
    /// (`Ok(true)`); `Ok(false)` when there is none (the caller registers it and
    /// [`Ranges::insert`]s it).
    ///
    /// # Errors
    /// [`OtherLength`] when it is registered with another length.
    pub(crate) fn join(&mut self, start: usize, len: usize) -> Result<bool, OtherLength> {
        match self.ranges.get_mut(&start) {
            Some(r) if r.len == len => {
                r.users += 1;
                Ok(true)
            }
            Some(r) => Err(OtherLength(r.len)),
            None => Ok(false),
        }
    }

    /// Adds a range just registered, with its first user and the bytes it holds.
    pub(crate) fn insert(&mut self, start: usize, len: usize, charge: Reservation<'l>) {
        let old = self.ranges.insert(
            start,
            Range {
                len,
                users: 1,
                charge,
            },
        );
        debug_assert!(old.is_none(), "a range registered twice");
    }

    /// One user of the range at `start` leaves. When it was the last, the range
    /// is removed and its reservation returned: the caller unregisters the range,
    /// then drops it (the bytes stay counted until the pages are unlocked).
    pub(crate) fn leave(&mut self, start: usize) -> Option<Reservation<'l>> {
        let r = self.ranges.get_mut(&start)?;
        r.users -= 1;
        if r.users > 0 {
            return None;
        }
        self.ranges.remove(&start).map(|r| r.charge)
    }
}

/// How a raw dataset's records reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Its map page-locked whole at build.
    Whole,
    /// A moving page-locked window of shards of at most `window` bytes, [`LIVE`]
    /// windows at a time (`window_locker`).
    Window { window: u64 },
    /// Staged through pinned memory: not even a window is left.
    Staged,
}

/// The route of a dataset of `total` bytes, `shared` of which are page-locked
/// already (by other loaders over the same shard maps, whose registrations it
/// joins at no cost), in a process holding `held` bytes locked, under `limit`:
/// whole when what it adds fits in what is left; else windows of a [`LIVE`]th of
/// what is left; else staged. A `limit` of 0 always stages (what the setting
/// promises), even a dataset others locked.
///
/// Alone (`held` and `shared` 0) this is the choice each loader made before the
/// ledger: whole up to the limit, else windows of half of it.
pub(crate) fn route(total: u64, shared: u64, held: u64, limit: u64) -> Route {
    let left = limit.saturating_sub(held);
    if limit == 0 {
        Route::Staged
    } else if total.saturating_sub(shared) <= left {
        Route::Whole
    } else {
        match left / LIVE as u64 {
            0 => Route::Staged,
            window => Route::Window { window },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_reservation_holds_its_bytes_until_it_drops() {
        let ledger = Ledger::new();
        let a = ledger.reserve(300, 1000).unwrap();
        let b = ledger.reserve(700, 1000).unwrap();
        assert_eq!((a.bytes(), b.bytes(), ledger.held()), (300, 700, 1000));
        drop(a);
        assert_eq!(ledger.held(), 700);
        drop(b);
        assert_eq!(ledger.held(), 0);
    }

    #[test]
    fn a_reservation_bigger_than_what_is_left_is_refused_whole() {
        let ledger = Ledger::new();
        let held = ledger.reserve(600, 1000).unwrap();
        // 401 > 400 left: refused, nothing taken (not trimmed to 400).
        let refused = ledger.reserve(401, 1000).unwrap_err();
        assert_eq!(
            refused,
            Refused {
                want: 401,
                held: 600,
                limit: 1000
            }
        );
        assert_eq!(ledger.held(), 600);
        // Exactly what is left fits.
        let rest = ledger.reserve(400, 1000).unwrap();
        assert_eq!(ledger.held(), 1000);
        // A loader with a lower limit than the process holds gets nothing, even 1 byte.
        assert!(ledger.reserve(1, 800).is_err());
        // Nothing asked is always granted.
        assert_eq!(ledger.reserve(0, 800).unwrap().bytes(), 0);
        drop((held, rest));
        assert_eq!(ledger.held(), 0);
        assert!(ledger.reserve(1001, 1000).is_err());
        assert!(ledger.reserve(u64::MAX, u64::MAX).is_ok());
    }

    #[test]
    fn a_refusal_names_what_the_process_holds() {
        let why = Refused {
            want: 3 << 20,
            held: 5 << 20,
            limit: 6 << 20,
        }
        .to_string();
        assert!(why.contains("3 MiB more") && why.contains("6 MiB"), "{why}");
        assert!(why.contains("5 MiB of which its loaders hold"), "{why}");
    }

    #[test]
    fn split_off_parts_give_their_own_bytes_back() {
        let ledger = Ledger::new();
        let mut whole = ledger.reserve(100, 100).unwrap();
        let a = whole.split_off(30);
        let b = whole.split_off(1000);
        assert_eq!((a.bytes(), b.bytes(), whole.bytes()), (30, 70, 0));
        drop(whole);
        assert_eq!(ledger.held(), 100);
        drop(b);
        assert_eq!(ledger.held(), 30);
        // A registration that could not be undone stays counted.
        a.keep();
        assert_eq!(ledger.held(), 30);
    }

    /// Registers `ranges` (`(start, len)`, charged `len`) for one user the way
    /// `registered` does: reserve what is new, then join or insert each.
    fn register<'l>(
        ledger: &'l Ledger,
        table: &mut Ranges<'l>,
        ranges: &[(usize, usize)],
        limit: u64,
    ) -> Result<(), Refused> {
        let new = table.unregistered(ranges.iter().map(|&(s, l)| (s, l as u64)));
        let mut reserved = ledger.reserve(new, limit)?;
        for &(start, len) in ranges {
            if !table.join(start, len).unwrap() {
                table.insert(start, len, reserved.split_off(len as u64));
            }
        }
        assert_eq!(reserved.bytes(), 0);
        Ok(())
    }

    #[test]
    fn ranges_shared_by_two_loaders_are_counted_once() {
        let ledger = Ledger::new();
        let mut table = Ranges::default();
        let dataset = [(0x1000, 100), (0x2000, 200)];
        register(&ledger, &mut table, &dataset, 400).unwrap();
        assert_eq!(ledger.held(), 300);
        // A second loader over the same open dataset: nothing new, and it fits
        // although twice the dataset would not.
        assert_eq!(table.unregistered(dataset.map(|(s, l)| (s, l as u64))), 0);
        register(&ledger, &mut table, &dataset, 400).unwrap();
        assert_eq!(ledger.held(), 300);
        // A third range, partly shared: only the new one is charged.
        register(&ledger, &mut table, &[(0x2000, 200), (0x3000, 100)], 400).unwrap();
        assert_eq!(ledger.held(), 400);
        // A window naming a range twice charges it once.
        assert_eq!(table.unregistered([(0x4000, 10), (0x4000, 10)]), 10);
        // The first loader leaves: its ranges stay registered for the others.
        assert!(table.leave(0x1000).is_none());
        assert!(table.leave(0x2000).is_none());
        assert_eq!(ledger.held(), 400);
        // The last user of each range gets its bytes back to unregister it.
        let last = table.leave(0x1000).expect("last user of 0x1000");
        assert_eq!(last.bytes(), 100);
        assert!(!table.contains(0x1000));
        drop(last);
        assert!(table.leave(0x2000).is_none());
        drop(table.leave(0x2000));
        drop(table.leave(0x3000));
        assert_eq!(ledger.held(), 0);
        assert!(table.leave(0x3000).is_none(), "no such range any more");
    }

    #[test]
    fn a_range_joined_with_another_length_is_an_error() {
        let ledger = Ledger::new();
        let mut table = Ranges::default();
        register(&ledger, &mut table, &[(0x1000, 100)], 1000).unwrap();
        assert_eq!(table.join(0x1000, 200), Err(OtherLength(100)));
        assert_eq!(table.join(0x2000, 200), Ok(false));
    }

    #[test]
    fn concurrent_reservations_never_exceed_the_limit() {
        const LIMIT: u64 = 1000;
        let ledger = Ledger::new();
        // Bytes granted and not yet given back, counted by the threads
        // themselves: never above the limit, whatever the interleaving.
        let granted = AtomicU64::new(0);
        let over = AtomicBool::new(false);
        let refusals = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (ledger, granted, over, refusals) = (&ledger, &granted, &over, &refusals);
                s.spawn(move || {
                    // Each thread holds up to 3 reservations of 100..400 bytes
                    // (a loader's live windows), so that the limit is reached
                    // even when the threads happen to run one at a time.
                    let mut live = std::collections::VecDeque::new();
                    for i in 0..20_000u64 {
                        let want = 100 + (t * 7919 + i * 104_729) % 300;
                        match ledger.reserve(want, LIMIT) {
                            Ok(r) => {
                                let now = granted.fetch_add(want, Ordering::SeqCst) + want;
                                if now > LIMIT || ledger.held() > LIMIT {
                                    over.store(true, Ordering::SeqCst);
                                }
                                live.push_back(r);
                            }
                            Err(_) => {
                                refusals.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        if live.len() == 3 || (i % 2 == 1 && !live.is_empty()) {
                            let r = live.pop_front().unwrap();
                            granted.fetch_sub(r.bytes(), Ordering::SeqCst);
                            drop(r);
                        }
                    }
                    for r in live {
                        granted.fetch_sub(r.bytes(), Ordering::SeqCst);
                    }
                });
            }
        });
        assert!(!over.load(Ordering::SeqCst), "over the limit at some point");
        assert_eq!(ledger.held(), 0, "every byte given back");
        // Some were refused: the limit was reached, and held.
        assert!(refusals.load(Ordering::Relaxed) > 0);
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn alone_a_loader_routes_as_before_the_ledger() {
        // Whole up to the limit, else windows of half of it, else staged.
        assert_eq!(route(100 * MIB, 0, 0, 100 * MIB), Route::Whole);
        assert_eq!(
            route(101 * MIB, 0, 0, 100 * MIB),
            Route::Window { window: 50 * MIB }
        );
        assert_eq!(route(101, 0, 0, 1), Route::Staged);
        assert_eq!(route(101 * MIB, 0, 0, 0), Route::Staged);
    }

    #[test]
    fn what_other_loaders_hold_shrinks_the_route() {
        // Training holds 60 of a 100 MiB limit: a 50 MiB validation set, whole
        // alone, moves windows of 20 MiB over it.
        assert_eq!(
            route(50 * MIB, 0, 60 * MIB, 100 * MIB),
            Route::Window { window: 20 * MIB }
        );
        // 40 MiB fit in what is left.
        assert_eq!(route(40 * MIB, 0, 60 * MIB, 100 * MIB), Route::Whole);
        // Nothing left (or 1 byte, no window of it): staged.
        assert_eq!(route(50 * MIB, 0, 100 * MIB, 100 * MIB), Route::Staged);
        assert_eq!(route(50 * MIB, 0, 100 * MIB - 1, 100 * MIB), Route::Staged);
        // The process holds more than this loader's own limit.
        assert_eq!(route(MIB, 0, 200 * MIB, 100 * MIB), Route::Staged);
    }

    #[test]
    fn a_dataset_another_loader_locked_is_joined_not_counted_again() {
        // A second loader over the open dataset a first locked whole (60 of 100
        // MiB): nothing to add, locked whole too.
        assert_eq!(route(60 * MIB, 60 * MIB, 60 * MIB, 100 * MIB), Route::Whole);
        // Half of it locked by a windowed loader: the other half fits.
        assert_eq!(route(60 * MIB, 30 * MIB, 30 * MIB, 70 * MIB), Route::Whole);
        // A loader with a lower limit than the dataset, over one a loader with a
        // higher limit locked whole, joins it (it used to lock windows of its own
        // besides).
        assert_eq!(
            route(120 * MIB, 120 * MIB, 120 * MIB, 100 * MIB),
            Route::Whole
        );
        // A limit of 0 stages all the same.
        assert_eq!(route(60 * MIB, 60 * MIB, 60 * MIB, 0), Route::Staged);
    }
}
