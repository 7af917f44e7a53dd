//! Page-cache read-ahead for the records of the next batches, in the epoch's order.
//!
//! Workers read records through the shards' maps. Read cold, a record is one page fault
//! after another, each a wait for the storage, and on a shuffled order the kernel's own
//! read-ahead cannot guess the next record. So a thread of its own walks the epoch's order
//! a few batches ahead of the consumer and asks the kernel for those records' pages
//! ([`stoker_formats::DatasetReader::will_need`]): their reads are then in flight together, and the
//! workers find the pages cached (docs/BENCHMARKS.md, "Cold reads with read-ahead").
//!
//! Bounded: the records of the batches being built (`prefetch` past the consumer) and
//! [`EXTRA_BATCHES`] more, never the rest of the epoch, so what is read ahead is used
//! before the page cache lets it go. Off the workers' path: what the hints cost when
//! everything is cached already (a lookup and an `madvise` per record) is this thread's.
//! `STOKER_READ_AHEAD=0` turns it off, a benchmarking aid to compare with and without.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use stoker_formats::Dataset;

use crate::fork::Owner;
use crate::pipeline::{EpochPlan, EpochStream, Next};

/// Batches past those being built whose records are advised too: the ones the workers
/// claim next, whose reads should be done by the time they start them.
const EXTRA_BATCHES: u64 = 2;

/// At most this many bytes of records (by the dataset's mean record size) are advised past
/// the consumer: a prefetch set far beyond what an epoch uses (the CPU ring clamps it to
/// the epoch) would otherwise read the whole epoch ahead, and on a dataset larger than the
/// page cache evict pages before their batch is built. 1 GiB: a few times what the default
/// prefetch gives with large batches of large records (batch 256 of 224² raw pixels, 150 kB
/// each, is 38 MB a batch).
const MAX_AHEAD_BYTES: u64 = 1 << 30;

/// Records advised per call: few enough that the consumer's progress (and the stop an
/// epoch's drop waits for) is looked at often, since finding a record can fault in its
/// leaf page from slow storage; enough that a sequential order's neighbours join into
/// long ranges (16 raw 224² records are 2.4 MB).
const CHUNK: usize = 16;

/// Whether read-ahead is on: unless `STOKER_READ_AHEAD` is `0`, `false`, `off` or `no`.
fn enabled() -> bool {
    std::env::var("STOKER_READ_AHEAD").map_or(true, |v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "off" | "no"
        )
    })
}

/// `stream` with the read-ahead of `plan`'s records beside it, or `stream` itself when
/// read-ahead is off or cannot start (its records are then read as they are met).
pub(crate) fn beside(
    stream: Box<dyn EpochStream + Send>,
    plan: &EpochPlan,
    dataset: &Dataset,
    prefetch: u64,
) -> Box<dyn EpochStream + Send> {
    if !enabled() {
        return stream;
    }
    let progress = Arc::new(Progress {
        handed: AtomicU64::new(plan.start_batch),
        stop: AtomicBool::new(false),
    });
    let walk = Walk {
        order: Arc::clone(&plan.order),
        batch_size: plan.batch_size,
        num_batches: plan.num_batches,
        window: window(prefetch, plan.batch_size, mean_record_bytes(dataset)),
        from: plan.batch_range(plan.start_batch).start,
    };
    let (theirs, dataset) = (Arc::clone(&progress), dataset.clone());
    let started = std::thread::Builder::new()
        .name("stoker-read-ahead".into())
        .spawn(move || {
            // Opened here, not on the consumer's thread: a reader `stat`s every shard.
            // One that cannot open reads nothing ahead; the workers' readers say why.
            let Ok(reader) = dataset.reader() else {
                return;
            };
            walk.run(&theirs, &mut |records| {
                // Finding the records' values walks the shard's B-tree pages in its map.
                crate::pipeline::guard_reads();
                reader.will_need(records);
            })
        });
    match started {
        Ok(thread) => Box::new(AheadStream {
            inner: stream,
            progress,
            thread: Some(thread),
            process: Owner::default(),
        }),
        Err(_) => stream,
    }
}

/// Batches past the consumer to advise: those being built (`prefetch`) and
/// [`EXTRA_BATCHES`], at most [`MAX_AHEAD_BYTES`] of records of `record_bytes`, and at
/// least the next batch.
fn window(prefetch: u64, batch_size: u64, record_bytes: u64) -> u64 {
    let batch_bytes = batch_size.saturating_mul(record_bytes).max(1);
    prefetch
        .saturating_add(EXTRA_BATCHES)
        .min(MAX_AHEAD_BYTES / batch_bytes)
        .max(1)
}

/// The mean size of a record in the shards (their bytes over their records).
fn mean_record_bytes(dataset: &Dataset) -> u64 {
    let shards = &dataset.manifest().shards;
    let records: u64 = shards.iter().map(|s| s.count).sum();
    dataset.manifest().shard_bytes() / records.max(1)
}

/// How far the consumer got, shared with the read-ahead thread.
#[derive(Debug)]
struct Progress {
    /// Batches handed out (the absolute number of the next one).
    handed: AtomicU64,
    /// Set when the epoch is dropped: the thread ends.
    stop: AtomicBool,
}

/// What the read-ahead thread walks: one epoch's order, batch by batch.
struct Walk {
    order: Arc<Vec<u64>>,
    batch_size: u64,
    num_batches: u64,
    /// Batches past the consumer whose records are advised.
    window: u64,
    /// The first position to advise (the epoch's start, or where it resumes).
    from: usize,
}

impl Walk {
    /// One past the last position of the order to advise once `handed` batches have been
    /// handed out: the end of batch `handed + window`'s predecessor, at most the order's end.
    fn end(&self, handed: u64) -> usize {
        let batches = handed.saturating_add(self.window).min(self.num_batches);
        let end = batches.saturating_mul(self.batch_size);
        usize::try_from(end).map_or(self.order.len(), |e| e.min(self.order.len()))
    }

    /// The first position of the order not yet handed out once `handed` batches have been:
    /// the start of batch `handed`, at most the order's end.
    fn handed_end(&self, handed: u64) -> usize {
        let start = handed.min(self.num_batches).saturating_mul(self.batch_size);
        usize::try_from(start).map_or(self.order.len(), |s| s.min(self.order.len()))
    }

    /// Hands the records of the window to `advise` as the consumer moves, in order and
    /// each once, until the order's end or `progress.stop`; waits (parked) while the window
    /// is done. Records of batches already handed out are skipped: when the workers read
    /// faster than this thread finds records (cold leaf pages on a slow file system, many
    /// workers), advising them would only read again what may already have been evicted,
    /// and keep this thread busy for nothing for the rest of the epoch.
    fn run(&self, progress: &Progress, advise: &mut dyn FnMut(&[u64])) {
        let mut next = self.from;
        while next < self.order.len() {
            if progress.stop.load(Ordering::Acquire) {
                return;
            }
            let handed = progress.handed.load(Ordering::Acquire);
            next = next.max(self.handed_end(handed));
            let end = self.end(handed);
            if next >= end {
                // Woken by each batch handed out, and by the stop; the timeout only
                // bounds a missed wake-up.
                std::thread::park_timeout(std::time::Duration::from_millis(50));
                continue;
            }
            let to = end.min(next + CHUNK);
            advise(&self.order[next..to]);
            next = to;
        }
    }
}

/// An epoch's batches with the read-ahead thread beside them: the batches are the inner
/// stream's, unchanged; each one handed out moves the read-ahead's window on.
struct AheadStream {
    inner: Box<dyn EpochStream + Send>,
    progress: Arc<Progress>,
    /// Joined on drop. `None` only during drop.
    thread: Option<JoinHandle<()>>,
    /// The process whose thread `thread` is: in a forked child it does not exist.
    process: Owner,
}

impl EpochStream for AheadStream {
    fn next_batch(&mut self, deadline: Option<Instant>) -> Next {
        let next = self.inner.next_batch(deadline);
        if matches!(next, Next::Ready(_)) {
            // Batches come in order, errors too: one more handed out either way.
            self.progress.handed.fetch_add(1, Ordering::AcqRel);
            if let Some(thread) = &self.thread {
                thread.thread().unpark();
            }
        }
        next
    }

    fn ready(&self) -> u64 {
        self.inner.ready()
    }

    fn all_claimed(&self) -> bool {
        self.inner.all_claimed()
    }
}

impl Drop for AheadStream {
    /// Stops and joins the thread: it is at most one call of [`CHUNK`] records from
    /// seeing the stop. In a forked child the thread stayed in the parent, and a join
    /// would wait for ever: the handle is left alone.
    fn drop(&mut self) {
        self.progress.stop.store(true, Ordering::Release);
        if self.process.forked() {
            std::mem::forget(self.thread.take());
            return;
        }
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(len: u64, batch_size: u64, window: u64) -> Walk {
        Walk {
            order: Arc::new((0..len).rev().collect()),
            batch_size,
            num_batches: len.div_ceil(batch_size),
            window,
            from: 0,
        }
    }

    #[test]
    fn the_window_is_prefetch_and_two_batches_at_most_a_gib_at_least_one_batch() {
        // ImageNet-like JPEG records (110 kB), batch 256, default prefetch: prefetch + 2.
        assert_eq!(window(4, 256, 110_000), 6);
        // A prefetch far past an epoch's batches: as many batches as fit in 1 GiB.
        assert_eq!(
            window(1_000_000_000, 256, 110_000),
            (1 << 30) / (256 * 110_000)
        );
        assert_eq!(window(u64::MAX, u64::MAX, u64::MAX), 1);
        // Batches larger than the budget: still the next one.
        assert_eq!(window(4, 4096, 1 << 20), 1);
        // An empty dataset's mean of 0 bytes does not divide by zero.
        assert_eq!(window(4, 64, 0), 6);
    }

    #[test]
    fn the_window_is_the_next_batches_and_nothing_past_them() {
        let w = walk(1000, 64, 3);
        // Nothing handed out yet: batches 0, 1, 2.
        assert_eq!(w.end(0), 192);
        assert_eq!(w.end(5), 8 * 64);
        // The last batch is short (1000 = 15 × 64 + 40): the window stops at the order's end.
        assert_eq!(w.end(13), 1000);
        assert_eq!(w.end(16), 1000);
        assert_eq!(w.end(u64::MAX), 1000);
    }

    #[test]
    fn records_of_batches_already_handed_out_are_not_advised() {
        // The consumer is at batch 10 before the thread looks: batches 0 to 9 are read.
        let w = walk(1000, 64, 3);
        let progress = Progress {
            handed: AtomicU64::new(10),
            stop: AtomicBool::new(false),
        };
        let mut advised = Vec::new();
        // Batches 10 to 12 are advised, and the walk then waits: stopped once it has them.
        w.run(&progress, &mut |records| {
            advised.extend_from_slice(records);
            if advised.len() >= 3 * 64 {
                progress.stop.store(true, Ordering::Release);
            }
        });
        let order: Vec<u64> = (0..1000).rev().collect();
        assert_eq!(advised, order[640..832]);
        // Past the last batch: nothing left to advise.
        assert_eq!(w.handed_end(16), 1000);
        assert_eq!(w.handed_end(u64::MAX), 1000);
    }

    #[test]
    fn records_are_advised_in_order_once_each_and_only_inside_the_window() {
        let w = Walk {
            from: 64,
            ..walk(1000, 64, 3)
        };
        let progress = Arc::new(Progress {
            handed: AtomicU64::new(1),
            stop: AtomicBool::new(false),
        });
        let advised = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (theirs, seen) = (Arc::clone(&progress), Arc::clone(&advised));
        let thread = std::thread::spawn(move || {
            w.run(&theirs, &mut |records| {
                seen.lock().unwrap().extend_from_slice(records)
            })
        });
        let wait_for = |n: usize| {
            let t = Instant::now();
            while advised.lock().unwrap().len() < n {
                assert!(
                    t.elapsed().as_secs() < 20,
                    "{} advised",
                    advised.lock().unwrap().len()
                );
                std::thread::yield_now();
            }
            // Time to go past the window, were it to.
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let order: Vec<u64> = (0..1000).rev().collect();
        // Resumed at batch 1, one handed out: batches 1, 2, 3.
        wait_for(192);
        assert_eq!(*advised.lock().unwrap(), order[64..256]);
        // Two more handed out: batches 4 and 5 follow.
        progress.handed.store(3, Ordering::Release);
        thread.thread().unpark();
        wait_for(320);
        assert_eq!(*advised.lock().unwrap(), order[64..384]);
        progress.stop.store(true, Ordering::Release);
        thread.thread().unpark();
        thread.join().unwrap();
        assert_eq!(advised.lock().unwrap().len(), 320);
    }
}
