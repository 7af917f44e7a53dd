//! Page-locking (and unlocking) a window's shards on several threads at once.
//!
//! Why: `cuMemHostRegister` pins a shard's pages one after another on the calling
//! thread (reading from storage any that are not in the page cache), and a dataset
//! over the page-lock limit locks every byte of it once per epoch. On one thread
//! that ran at 20–35 GB/s on the H200 machine, below the 53 GB/s the copies of the
//! window reach, so the producer waited for windows (docs/BENCHMARKS.md, run 7).
//! Shards are registered separately, so they can be pinned in parallel.
//!
//! Generic over the per-thread set-up (binding the CUDA context), so that the
//! scheduling is tested without a GPU.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Threads that lock one window's shards when `STOKER_LOCK_THREADS` does not say.
const DEFAULT_THREADS: usize = 4;

/// The most threads `STOKER_LOCK_THREADS` may ask for.
const MAX_THREADS: usize = 64;

/// Threads [`on_threads`] uses for page-locking: `STOKER_LOCK_THREADS` (1 to 64,
/// a diagnostic: 1 is the old one-thread locking) when set and valid, else 4.
/// Read once per process.
pub(crate) fn lock_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        let v = std::env::var("STOKER_LOCK_THREADS").ok();
        match v.as_deref().map(str::parse::<usize>) {
            None => DEFAULT_THREADS,
            Some(Ok(n)) if (1..=MAX_THREADS).contains(&n) => n,
            Some(_) => {
                tracing::warn!(
                    "STOKER_LOCK_THREADS={v:?} ignored: expected 1 to {MAX_THREADS}; \
                     using {DEFAULT_THREADS}"
                );
                DEFAULT_THREADS
            }
        }
    })
}

/// `f` applied to every item, on up to `threads` threads: the calling thread and
/// helpers that each run `setup` first (a helper whose `setup` fails takes no
/// item). Results come back in `items`' order. A helper that cannot start (a
/// process limit) leaves its part to the others; the calling thread alone
/// always finishes the work. Each item is done exactly once; a panic in `f`
/// (on any thread) is raised again here once every item is done, as it would
/// have been had the caller done that item itself.
pub(crate) fn on_threads<T, R, S, F>(items: &[T], threads: usize, setup: S, f: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    S: Fn() -> bool + Sync,
    F: Fn(&T) -> R + Sync,
{
    let helpers = threads.min(items.len()).saturating_sub(1);
    if helpers == 0 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            // Caught per item, so that the other items of this thread keep their
            // results (a registration done is never done again).
            done.push((i, catch_unwind(AssertUnwindSafe(|| f(item)))));
        }
    };
    let mut all = std::thread::scope(|s| {
        let started: Vec<_> = (0..helpers)
            .filter_map(|_| {
                let spawned = std::thread::Builder::new()
                    .name("stoker-gpu-lock-part".into())
                    .spawn_scoped(s, || if setup() { work() } else { Vec::new() });
                spawned.ok()
            })
            .collect();
        let mut all = work();
        for handle in started {
            // `work` catches what `f` raises; `setup` is the caller's to keep quiet.
            all.extend(handle.join().unwrap_or_default());
        }
        all
    });
    all.sort_unstable_by_key(|(i, _)| *i);
    debug_assert_eq!(all.len(), items.len(), "every item taken once");
    let mut out = Vec::with_capacity(all.len());
    let mut panicked = None;
    for (_, r) in all {
        match r {
            Ok(r) => out.push(r),
            Err(p) => panicked = panicked.or(Some(p)),
        }
    }
    if let Some(p) = panicked {
        resume_unwind(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Mutex;

    #[test]
    fn every_item_is_done_once_in_order_on_several_threads() {
        let items: Vec<u64> = (0..100).collect();
        let seen = Mutex::new(HashSet::new());
        let out = on_threads(
            &items,
            4,
            || true,
            |&x| {
                seen.lock().unwrap().insert(std::thread::current().id());
                // Long enough that the helpers take items too.
                std::thread::sleep(std::time::Duration::from_millis(1));
                x * 2
            },
        );
        assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
        let threads = seen.lock().unwrap().len();
        assert!((2..=4).contains(&threads), "{threads} threads");
    }

    #[test]
    fn helpers_whose_setup_fails_leave_the_work_to_the_caller() {
        let items: Vec<u32> = (0..20).collect();
        let caller = std::thread::current().id();
        let out = on_threads(
            &items,
            8,
            || false,
            |&x| {
                assert_eq!(std::thread::current().id(), caller);
                x + 1
            },
        );
        assert_eq!(out, (1..21).collect::<Vec<_>>());
    }

    #[test]
    fn one_thread_or_one_item_runs_on_the_caller() {
        let caller = std::thread::current().id();
        let on_caller = |&x: &u8| {
            assert_eq!(std::thread::current().id(), caller);
            x
        };
        assert_eq!(on_threads(&[1u8, 2, 3], 1, || true, on_caller), [1, 2, 3]);
        assert_eq!(on_threads(&[7u8], 16, || true, on_caller), [7]);
        assert!(on_threads(&[] as &[u8], 4, || true, on_caller).is_empty());
    }

    #[test]
    fn a_panic_on_a_helper_is_raised_on_the_caller_after_every_item() {
        let items: Vec<usize> = (0..16).collect();
        let done = AtomicUsize::new(0);
        let raised = std::panic::catch_unwind(AssertUnwindSafe(|| {
            on_threads(
                &items,
                4,
                || true,
                |&x| {
                    done.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    assert_ne!(x, 5, "item 5 fails");
                    x
                },
            )
        }));
        assert!(raised.is_err());
        // No item was dropped or done twice because of the panic.
        assert_eq!(done.load(Ordering::Relaxed), 16);
    }
}
