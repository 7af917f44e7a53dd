//! The next epoch's order, drawn on a thread of its own while the current epoch runs.
//!
//! A global shuffle of a large dataset draws a permutation of every record: seconds at 100M
//! records (docs/BENCHMARKS.md, "Scale"). Drawn when the next epoch starts, that is a pause
//! of the training loop at every epoch boundary, since the next epoch is started when the
//! last batch of the current one is handed out. Drawn ahead, it is ready by then. Only for
//! datasets where the draw takes long enough to matter: below [`DRAW_AHEAD_FROM`] records
//! it takes milliseconds, and a thread and a second order in memory would buy nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::fork::lock_unless_held;
use crate::Sampler;

/// Records from which the next epoch's order is drawn ahead (a global shuffle of 1M
/// records takes tens of milliseconds on one core).
pub(crate) const DRAW_AHEAD_FROM: u64 = 1 << 20;

/// An order being drawn ahead, for one epoch. Dropped (with its loader), it stops the draw
/// and waits for its thread: a draw nobody will use would otherwise go on for seconds
/// and hold its memory (1.2 GB at 100M records) after the loader is gone.
#[derive(Debug, Default)]
pub(crate) struct OrderAhead {
    ahead: Mutex<Option<Drawing>>,
}

/// The thread drawing the order of `epoch`, and the flag that tells it to stop.
#[derive(Debug)]
struct Drawing {
    epoch: u64,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Option<Vec<u64>>>,
}

impl Drawing {
    /// Starts drawing `sampler`'s order of `epoch` on a thread; `None` when no thread
    /// could be started.
    fn start(sampler: &Sampler, epoch: u64) -> Option<Drawing> {
        let sampler = sampler.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let told = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("stoker-order".into())
            .spawn(move || sampler.order_while(epoch, &|| !told.load(Ordering::Relaxed)))
            .ok()?;
        Some(Drawing {
            epoch,
            stop,
            thread,
        })
    }

    /// Stops the draw and waits for its thread (it asks the flag every 2¹⁶ swaps, so the
    /// wait is short).
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.thread.join());
    }
}

impl OrderAhead {
    /// This rank's order of `epoch`: drawn ahead when the loader starts its epochs early
    /// (`prefetch`) and the dataset is large.
    pub(crate) fn for_epoch(&self, sampler: &Sampler, epoch: u64, prefetch: bool) -> Vec<u64> {
        if prefetch {
            self.order(sampler, epoch, DRAW_AHEAD_FROM).0
        } else {
            sampler.order(epoch)
        }
    }

    /// The order of `epoch` for `sampler`: the one drawn ahead if it is for this epoch,
    /// else drawn here; then, for a sampler of at least `from` records, starts drawing
    /// the next epoch's. Returns whether the order was drawn ahead.
    pub(crate) fn order(&self, sampler: &Sampler, epoch: u64, from: u64) -> (Vec<u64>, bool) {
        let taken = self.ahead.lock().unwrap_or_else(|p| p.into_inner()).take();
        let drawn = match taken {
            Some(d) if d.epoch == epoch => d.thread.join().ok().flatten(),
            // Another epoch's (a loop that jumped epochs): stopped before this draw
            // allocates its own.
            Some(d) => {
                d.stop();
                None
            }
            None => None,
        };
        let ahead = drawn.is_some();
        let order = drawn.unwrap_or_else(|| sampler.order(epoch));
        if let Some(next) = epoch
            .checked_add(1)
            .filter(|_| sampler.dataset_len() >= from)
        {
            // Without a thread (none could be started), the next epoch draws its own.
            if let Some(drawing) = Drawing::start(sampler, next) {
                *self.ahead.lock().unwrap_or_else(|p| p.into_inner()) = Some(drawing);
            }
        }
        (order, ahead)
    }

    /// Stops drawing the order ahead, and waits for the thread to end.
    pub(crate) fn cancel(&self) {
        let taken = self.ahead.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(drawing) = taken {
            drawing.stop();
        }
    }

    /// Leaves a thread that is drawing to finish on its own: for a forked child, where it
    /// does not exist and must not be waited for or detached.
    /// Not waiting for the lock: a parent thread that held it at the fork never releases
    /// it in the child, where waiting for it would hang.
    pub(crate) fn forget(&self) {
        let taken = lock_unless_held(&self.ahead).and_then(|mut g| g.take());
        std::mem::forget(taken);
    }

    /// [`OrderAhead::forget`] for its owner, which needs no lock: the forked child's
    /// loader, being dropped, whose parent may have held the lock at the fork (then
    /// `forget` can take nothing, and `Drop` would join a thread that is not there).
    pub(crate) fn forget_owned(&mut self) {
        std::mem::forget(
            self.ahead
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }
}

impl Drop for OrderAhead {
    /// Through `get_mut`, not a lock: in a forked child whose parent held the lock at the
    /// fork, [`OrderAhead::forget`] had to leave the draw in place, and a `lock()` here
    /// would wait forever.
    fn drop(&mut self) {
        let taken = self
            .ahead
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(drawing) = taken {
            drawing.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Shuffle;

    #[test]
    fn the_next_epochs_order_is_drawn_ahead_and_equals_its_own_draw() {
        let s = Sampler::new(5000, Shuffle::Global { seed: 4 }, 1, 3, 16, false).unwrap();
        let ahead = OrderAhead::default();
        let (first, was_ahead) = ahead.order(&s, 7, 1000);
        assert_eq!((first, was_ahead), (s.order(7), false));
        let (second, was_ahead) = ahead.order(&s, 8, 1000);
        assert_eq!((second, was_ahead), (s.order(8), true));
        // A jump to another epoch draws that one here; the next is drawn ahead again.
        assert_eq!(ahead.order(&s, 20, 1000), (s.order(20), false));
        assert_eq!(ahead.order(&s, 21, 1000), (s.order(21), true));
        // Cancelled (the loader's `cancel_prefetch`): nothing is kept.
        ahead.cancel();
        assert!(ahead.ahead.lock().unwrap().is_none());
        assert_eq!(ahead.order(&s, 22, 1000), (s.order(22), false));
    }

    #[test]
    fn a_dropped_order_ahead_stops_its_draw_and_ends_its_thread() {
        // 2²⁵ records: a draw of about a second, 384 MB.
        let s = Sampler::new(1 << 25, Shuffle::Global { seed: 4 }, 0, 1, 16, false).unwrap();
        let ahead = OrderAhead::default();
        let drawing = Drawing::start(&s, 1).unwrap();
        let stop = Arc::clone(&drawing.stop);
        *ahead.ahead.lock().unwrap() = Some(drawing);
        drop(ahead);
        assert!(stop.load(Ordering::Relaxed));
        // The thread's own handle on the flag went with it: the thread has ended (before,
        // it went on drawing after the drop).
        assert_eq!(Arc::strong_count(&stop), 1);
    }

    #[test]
    fn draws_told_to_stop_stop() {
        for shuffle in [
            Shuffle::Global { seed: 1 },
            Shuffle::Quasi { seed: 1, block: 8 },
        ] {
            let s = Sampler::new(1 << 18, shuffle, 1, 2, 16, false).unwrap();
            assert_eq!(s.order_while(3, &|| false), None, "{shuffle:?}");
            assert_eq!(s.order_while(3, &|| true), Some(s.order(3)), "{shuffle:?}");
        }
    }

    #[test]
    fn small_datasets_draw_nothing_ahead() {
        let s = Sampler::new(500, Shuffle::Global { seed: 4 }, 0, 1, 16, false).unwrap();
        let ahead = OrderAhead::default();
        ahead.order(&s, 0, 1000);
        assert_eq!(ahead.order(&s, 1, 1000), (s.order(1), false));
        assert!(ahead.ahead.lock().unwrap().is_none());
    }

    #[test]
    fn a_forked_child_forgets_the_draw_without_waiting_for_a_lock_its_parent_held() {
        // In a fork, a lock some parent thread held at the fork stays held forever; here a
        // thread holds it until `forget` has returned (which waited forever before).
        let ahead = Arc::new(OrderAhead::default());
        let (held, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _guard = ahead.ahead.lock().unwrap();
                held.wait();
                release.wait();
            });
            held.wait();
            ahead.forget();
            release.wait();
        });
    }

    #[test]
    fn a_forked_childs_loader_drops_without_waiting_for_a_lock_its_parent_held() {
        // As in a fork whose parent thread held the lock at the fork: locked for good.
        // Dropping then locked it again (OrderAhead::drop's cancel) and waited forever.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let s = Sampler::new(10, Shuffle::Global { seed: 1 }, 1, 3, 2, false).unwrap();
            let ahead = OrderAhead::default();
            ahead.order(&s, 0, 1);
            std::mem::forget(ahead.ahead.lock().unwrap());
            ahead.forget();
            // (The test's drawing thread exists, so the drop may join it.)
            drop(ahead);
            let _ = done.send(());
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("dropped without waiting for the held lock");
    }
}
