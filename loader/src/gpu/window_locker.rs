//! The moving page-locked window over a raw dataset too large to lock whole: a
//! thread (`stoker-gpu-lock`) locks the windows of each epoch's plan
//! (`window_plan`) ahead of the producer and unlocks each one once the copies
//! that read it are done, so that at most [`LIVE`] windows are locked at any time.
//!
//! Why a thread: locking reads every page of the window from storage first
//! (`cuMemHostRegister` faults them in), which takes as long as reading the
//! window; done here it overlaps the batches of the window before.
//!
//! The scheduling is generic over how windows are locked and how a copy is
//! waited for ([`Registrar`]), so that it is tested without a GPU; the CUDA
//! registrar is `CudaRegistrar` in `registered`.
//!
//! Protocol, per epoch (a `token`): [`Locker::begin`] queues its windows;
//! before the first batch of window `w` the producer takes it with
//! [`Locker::wait_window`]; after the last one it hands back a fence (an event
//! after that batch's copies) with [`Locker::release_window`]; when the epoch
//! ends or stops, [`Locker::end`] with a fence after its last copies drops
//! whatever of it is left. A window's maps are only dropped (unlocked) after its
//! fence completes. Should the thread die (a panic), every window asked for
//! after that comes back unlocked, saying why, and its records are staged.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Windows locked at once: the one the producer reads and the next one,
/// locked while the first is read. Each window holds at most half the budget.
pub(crate) const LIVE: usize = 2;

/// How often a producer waiting for a window looks at its stop flag.
const POLL: Duration = Duration::from_millis(20);

/// How windows are locked and copies waited for.
pub(crate) trait Registrar: Send + 'static {
    /// Locked shards; unlocked when dropped.
    type Maps: Send + Sync + 'static;
    /// A point in the copy stream; [`Registrar::wait`] blocks until the copies
    /// before it are done.
    type Fence: Send + 'static;
    /// Locks the mappings of `shards`, or says why not.
    fn lock(&self, shards: &[usize]) -> Result<Self::Maps, String>;
    /// Blocks until the copies before `fence` are done.
    fn wait(&self, fence: Self::Fence);
}

/// A window as the producer gets it: its locked maps, or why they are not (its
/// records are then staged through pinned memory).
pub(crate) type Locked<M> = Result<Arc<M>, String>;

/// A window taken by the producer, and how long locking it took.
pub(crate) struct Taken<M> {
    pub(crate) locked: Locked<M>,
    pub(crate) lock_time: Duration,
}

/// A window locked (or failed to lock): `(token, window, maps, lock time)`.
type Live<M> = (u64, usize, Locked<M>, Duration);

/// What is released once its fence completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// One window of one epoch.
    Window(u64, usize),
    /// Every window of one epoch, locked or still queued.
    Epoch(u64),
}

/// The locker's state; every field under [`Inner::state`].
struct State<M, F> {
    /// The next epoch token.
    next_token: u64,
    /// Windows to lock, in the order the producers will read them:
    /// `(token, window, shards)`.
    pending: VecDeque<(u64, usize, Vec<usize>)>,
    /// Windows locked (or failed to lock) and not yet released, with the time
    /// locking took: at most [`LIVE`].
    live: Vec<Live<M>>,
    /// Releases to carry out in order, each after its fence.
    releases: VecDeque<(Release, F)>,
    /// Set by `Drop`: release everything and stop.
    shutdown: bool,
    /// Set when the thread panicked: what it said. Nothing is locked or
    /// released any more (what is locked stays so until the `Locker` drops).
    dead: Option<String>,
}

struct Inner<M, F> {
    state: Mutex<State<M, F>>,
    /// Signalled on every change of `state`.
    changed: Condvar,
}

impl<M, F> Inner<M, F> {
    fn lock(&self) -> MutexGuard<'_, State<M, F>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The locking thread and its queue (see the module docs).
pub(crate) struct Locker<R: Registrar> {
    inner: Arc<Inner<R::Maps, R::Fence>>,
    thread: Option<JoinHandle<()>>,
    /// Bytes a window may lock (half the page-lock budget).
    window_bytes: u64,
}

impl<R: Registrar> std::fmt::Debug for Locker<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("window_bytes", &self.window_bytes)
            .finish()
    }
}

impl<R: Registrar> Locker<R> {
    /// Starts the locking thread; windows of at most `window_bytes`.
    pub(crate) fn start(registrar: R, window_bytes: u64) -> std::io::Result<Locker<R>> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                next_token: 0,
                pending: VecDeque::new(),
                live: Vec::new(),
                releases: VecDeque::new(),
                shutdown: false,
                dead: None,
            }),
            changed: Condvar::new(),
        });
        let thread = {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name("stoker-gpu-lock".into())
                .spawn(move || {
                    let ran = catch_unwind(AssertUnwindSafe(|| run(&registrar, &inner)));
                    if let Err(panic) = ran {
                        let why = crate::pipeline::panic_message(&panic);
                        tracing::error!("the page-locking thread {why}; later windows are staged");
                        inner.lock().dead = Some(why);
                        inner.changed.notify_all();
                    }
                })?
        };
        Ok(Locker {
            inner,
            thread: Some(thread),
            window_bytes,
        })
    }

    /// Bytes a window may lock.
    pub(crate) fn window_bytes(&self) -> u64 {
        self.window_bytes
    }

    /// Queues an epoch's windows (their shards, in the order they are read);
    /// returns the epoch's token.
    pub(crate) fn begin(&self, windows: Vec<Vec<usize>>) -> u64 {
        let mut st = self.inner.lock();
        let token = st.next_token;
        st.next_token += 1;
        st.pending
            .extend(windows.into_iter().enumerate().map(|(w, s)| (token, w, s)));
        drop(st);
        self.inner.changed.notify_all();
        token
    }

    /// Waits until window `w` of epoch `token` is locked (or failed to be, or
    /// the locking thread is dead); `None` once `stop` is set.
    pub(crate) fn wait_window(
        &self,
        token: u64,
        w: usize,
        stop: &AtomicBool,
    ) -> Option<Taken<R::Maps>> {
        let mut st = self.inner.lock();
        loop {
            if let Some((_, _, locked, took)) = st.live.iter().find(|l| l.0 == token && l.1 == w) {
                return Some(Taken {
                    locked: locked.clone(),
                    lock_time: *took,
                });
            }
            if let Some(why) = &st.dead {
                return Some(Taken {
                    locked: Err(format!("the page-locking thread {why}")),
                    lock_time: Duration::ZERO,
                });
            }
            if stop.load(Ordering::Acquire) || st.shutdown {
                return None;
            }
            st = self
                .inner
                .changed
                .wait_timeout(st, POLL)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Window `w` of epoch `token` is no longer read once `fence` completes.
    pub(crate) fn release_window(&self, token: u64, w: usize, fence: R::Fence) {
        self.release(Release::Window(token, w), fence);
    }

    /// Epoch `token` reads nothing more once `fence` completes: its windows
    /// still locked or queued are dropped.
    pub(crate) fn end(&self, token: u64, fence: R::Fence) {
        self.release(Release::Epoch(token), fence);
    }

    fn release(&self, what: Release, fence: R::Fence) {
        self.inner.lock().releases.push_back((what, fence));
        self.inner.changed.notify_all();
    }
}

impl<R: Registrar> Drop for Locker<R> {
    /// Stops the thread after it has carried out the releases queued (their
    /// fences complete: the loader's streams were synchronized before) and
    /// dropped every window.
    fn drop(&mut self) {
        self.inner.lock().shutdown = true;
        self.inner.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The locking thread: releases first (they free budget), then locks the next
/// queued window while fewer than [`LIVE`] are locked.
fn run<R: Registrar>(registrar: &R, inner: &Inner<R::Maps, R::Fence>) {
    let mut st = inner.lock();
    loop {
        if let Some((what, fence)) = st.releases.pop_front() {
            drop(st);
            registrar.wait(fence);
            st = inner.lock();
            let gone = released(&mut st, what);
            drop(st);
            // Unlocking (dropping the maps) outside the lock: it can take a while.
            drop(gone);
            inner.changed.notify_all();
            st = inner.lock();
            continue;
        }
        if st.shutdown {
            let gone = std::mem::take(&mut st.live);
            st.pending.clear();
            drop(st);
            drop(gone);
            inner.changed.notify_all();
            return;
        }
        if st.live.len() < LIVE {
            if let Some((token, w, shards)) = st.pending.pop_front() {
                drop(st);
                let started = Instant::now();
                let locked = registrar.lock(&shards).map(Arc::new);
                match &locked {
                    Ok(_) => tracing::debug!(
                        window = w,
                        shards = shards.len(),
                        ms = started.elapsed().as_millis() as u64,
                        "raw records: window page-locked"
                    ),
                    Err(reason) => tracing::warn!(
                        window = w,
                        "raw records: window not page-locked, its records are staged ({reason})"
                    ),
                }
                // Releases are carried out on this thread only, so the epoch
                // of this window cannot have ended meanwhile.
                st = inner.lock();
                st.live.push((token, w, locked, started.elapsed()));
                inner.changed.notify_all();
                continue;
            }
        }
        st = inner.changed.wait(st).unwrap_or_else(|p| p.into_inner());
    }
}

/// Takes out of `st` what `what` releases (returned, to be dropped unlocked).
fn released<M, F>(st: &mut State<M, F>, what: Release) -> Vec<Live<M>> {
    let mut gone = Vec::new();
    let mut i = 0;
    while i < st.live.len() {
        let (t, w, ..) = &st.live[i];
        let hit = match what {
            Release::Window(token, window) => *t == token && *w == window,
            Release::Epoch(token) => *t == token,
        };
        if hit {
            gone.push(st.live.remove(i));
        } else {
            i += 1;
        }
    }
    if let Release::Epoch(token) = what {
        st.pending.retain(|p| p.0 != token);
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Locks by counting shards locked; a fence is a flag the test sets (the
    /// copies before it done) and `wait` spins on it.
    struct Fake {
        /// Shards locked now (each window counted).
        locked: Arc<Mutex<Vec<usize>>>,
        /// The most shards locked at once.
        peak: Arc<AtomicUsize>,
        /// Windows whose lock fails: those holding this shard.
        refuse: Option<usize>,
        /// Windows whose lock panics: those holding this shard.
        panics: Option<usize>,
    }

    struct FakeMaps {
        shards: Vec<usize>,
        locked: Arc<Mutex<Vec<usize>>>,
    }

    impl Drop for FakeMaps {
        fn drop(&mut self) {
            let mut l = self.locked.lock().unwrap();
            for s in &self.shards {
                let at = l.iter().position(|x| x == s).unwrap();
                l.remove(at);
            }
        }
    }

    impl Registrar for Fake {
        type Maps = FakeMaps;
        type Fence = Arc<AtomicBool>;
        fn lock(&self, shards: &[usize]) -> Result<FakeMaps, String> {
            if self.refuse.is_some_and(|r| shards.contains(&r)) {
                return Err("refused".into());
            }
            if self.panics.is_some_and(|r| shards.contains(&r)) {
                panic!("a driver call went wrong");
            }
            let mut l = self.locked.lock().unwrap();
            l.extend_from_slice(shards);
            self.peak.fetch_max(l.len(), Ordering::SeqCst);
            Ok(FakeMaps {
                shards: shards.to_vec(),
                locked: Arc::clone(&self.locked),
            })
        }
        fn wait(&self, fence: Arc<AtomicBool>) {
            while !fence.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn fake(refuse: Option<usize>) -> (Locker<Fake>, Arc<Mutex<Vec<usize>>>, Arc<AtomicUsize>) {
        fake_with(refuse, None)
    }

    fn fake_with(
        refuse: Option<usize>,
        panics: Option<usize>,
    ) -> (Locker<Fake>, Arc<Mutex<Vec<usize>>>, Arc<AtomicUsize>) {
        let locked = Arc::new(Mutex::new(Vec::new()));
        let peak = Arc::new(AtomicUsize::new(0));
        let f = Fake {
            locked: Arc::clone(&locked),
            peak: Arc::clone(&peak),
            refuse,
            panics,
        };
        (Locker::start(f, 1 << 20).unwrap(), locked, peak)
    }

    fn done() -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(true))
    }

    fn shards_of(taken: &Taken<FakeMaps>) -> Vec<usize> {
        taken.locked.as_ref().unwrap().shards.clone()
    }

    #[test]
    fn windows_are_locked_ahead_in_order_and_never_more_than_two() {
        let (locker, locked, peak) = fake(None);
        let stop = AtomicBool::new(false);
        let windows: Vec<Vec<usize>> = (0..6).map(|w| vec![2 * w, 2 * w + 1]).collect();
        let token = locker.begin(windows.clone());
        // Before the producer takes any: the first two are locked, not a third.
        let started = Instant::now();
        while locked.lock().unwrap().len() < 4 && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(*locked.lock().unwrap(), vec![0, 1, 2, 3]);
        for (w, shards) in windows.iter().enumerate() {
            let got = locker.wait_window(token, w, &stop).unwrap();
            assert_eq!(&shards_of(&got), shards);
            drop(got);
            locker.release_window(token, w, done());
        }
        locker.end(token, done());
        drop(locker);
        assert_eq!(
            peak.load(Ordering::SeqCst),
            4,
            "never more than two windows of two shards"
        );
        assert!(locked.lock().unwrap().is_empty(), "everything unlocked");
    }

    #[test]
    fn a_window_stays_locked_until_its_fence_completes() {
        let (locker, locked, _) = fake(None);
        let stop = AtomicBool::new(false);
        let token = locker.begin(vec![vec![0], vec![1], vec![2]]);
        drop(locker.wait_window(token, 0, &stop).unwrap());
        let fence = Arc::new(AtomicBool::new(false));
        locker.release_window(token, 0, Arc::clone(&fence));
        drop(locker.wait_window(token, 1, &stop).unwrap());
        // Window 2 waits for room: 0's copies are still running.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(*locked.lock().unwrap(), vec![0, 1]);
        fence.store(true, Ordering::Release);
        let two = locker.wait_window(token, 2, &stop).unwrap();
        assert_eq!(shards_of(&two), vec![2]);
        assert_eq!(*locked.lock().unwrap(), vec![1, 2]);
        locker.end(token, done());
    }

    #[test]
    fn a_window_that_cannot_be_locked_is_reported_and_the_next_ones_still_are() {
        let (locker, _, _) = fake(Some(1));
        let stop = AtomicBool::new(false);
        let token = locker.begin(vec![vec![0], vec![1], vec![2]]);
        for w in 0..3 {
            let got = locker.wait_window(token, w, &stop).unwrap();
            assert_eq!(got.locked.is_err(), w == 1);
            locker.release_window(token, w, done());
        }
        locker.end(token, done());
    }

    #[test]
    fn an_epoch_stopped_midway_unlocks_its_windows_and_the_next_epoch_proceeds() {
        let (locker, locked, _) = fake(None);
        let stop = AtomicBool::new(false);
        let first = locker.begin((0..5).map(|w| vec![w]).collect());
        drop(locker.wait_window(first, 0, &stop).unwrap());
        locker.end(first, done());
        let second = locker.begin(vec![vec![7], vec![8]]);
        assert_eq!(
            shards_of(&locker.wait_window(second, 0, &stop).unwrap()),
            vec![7]
        );
        // Nothing of the first epoch is locked any more, nor will be.
        std::thread::sleep(Duration::from_millis(50));
        assert!(locked.lock().unwrap().iter().all(|&s| s >= 7));
        drop(locker);
        assert!(locked.lock().unwrap().is_empty());
    }

    #[test]
    fn when_the_locking_thread_dies_the_producer_gets_unlocked_windows_instead_of_waiting() {
        let (locker, locked, _) = fake_with(None, Some(1));
        let stop = AtomicBool::new(false);
        let token = locker.begin(vec![vec![0], vec![1], vec![2]]);
        let first = locker.wait_window(token, 0, &stop).unwrap();
        assert_eq!(shards_of(&first), vec![0]);
        drop(first);
        locker.release_window(token, 0, done());
        for w in 1..3 {
            let got = locker.wait_window(token, w, &stop).unwrap();
            let why = got.locked.err().expect("not locked");
            assert!(why.contains("a driver call went wrong"), "{why}");
        }
        locker.end(token, done());
        // A new epoch does not wait either.
        let next = locker.begin(vec![vec![5]]);
        assert!(locker.wait_window(next, 0, &stop).unwrap().locked.is_err());
        drop(locker);
        assert!(locked.lock().unwrap().is_empty(), "unlocked when dropped");
    }

    #[test]
    fn a_producer_waiting_for_a_window_returns_when_stopped() {
        let (locker, _, _) = fake(None);
        let stop = AtomicBool::new(false);
        let token = locker.begin(vec![vec![0], vec![1], vec![2]]);
        drop(locker.wait_window(token, 0, &stop));
        drop(locker.wait_window(token, 1, &stop));
        // Window 2 cannot be locked before 0 or 1 is released: only the stop ends the wait.
        stop.store(true, Ordering::Release);
        assert!(locker.wait_window(token, 2, &stop).is_none());
        locker.end(token, done());
    }
}
