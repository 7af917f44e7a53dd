//! A loader used in a `fork` of the process that built it (Python's `multiprocessing`
//! with the fork start method, `os.fork()`): its pipeline threads exist only in the
//! parent, so the child used to wait forever for a batch, and to hang again joining
//! threads when it dropped the loader. Photos from the repository's
//! `examples/data/sample`.
//!
//! Alone in its own test binary: it forks, and a fork copies only the calling thread.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sample_dataset;
use stoker_loader::{Loader, LoaderError, Transform};

/// What the child checks; its exit code says which check failed (0: all held).
fn child(loader: Arc<Loader>, mut running: stoker_loader::Epoch<'static>) -> i32 {
    match running.next() {
        Some(Err(LoaderError::ForkedProcess { built, now })) => {
            if now != std::process::id() || built == now {
                return 2;
            }
        }
        _ => return 3,
    }
    if running.next().is_some() {
        return 4; // one error, then the end
    }
    drop(running); // used to hang joining the parent's threads
    match loader.epoch(1).next() {
        Some(Err(LoaderError::ForkedProcess { .. })) => {}
        _ => return 5,
    }
    drop(loader); // the last reference: used to hang the same way
    0
}

#[test]
fn a_forked_child_gets_an_error_instead_of_waiting_forever_and_drops_the_loader() {
    let dir = tempfile::tempdir().unwrap();
    let loader = Arc::new(
        Loader::builder(sample_dataset(dir.path()))
            .batch_size(4)
            .workers(2)
            .transform(Transform::random_resized_crop(32))
            .build()
            .unwrap(),
    );
    // The parent forks mid-epoch, as a training loop would.
    let mut running = loader.epoch_shared(0);
    running.next().unwrap().unwrap();
    // SAFETY: the child runs only `child` (which takes no lock another thread of this
    // process could hold: the loader's threads touch neither the epoch's progress nor
    // the consumer's state) and leaves through `_exit`, never returning into the test
    // harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            child(Arc::clone(&loader), running)
        }))
        .unwrap_or(6);
        // SAFETY: ends the child at once, without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let status = wait_for(pid, Duration::from_secs(60))
        .expect("the forked child still runs after 60 s: it hangs");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x} (exit code {}: see `child`)",
        libc::WEXITSTATUS(status)
    );
    // The parent's epoch goes on untouched: the other 3 batches of 15 images.
    let rest: Vec<_> = running.map(|b| b.unwrap().index).collect();
    assert_eq!(rest, [1, 2, 3]);
}

/// Waits up to `limit` for the child `pid`; its exit status, or `None` (then it is
/// killed) when it still runs.
fn wait_for(pid: libc::pid_t, limit: Duration) -> Option<libc::c_int> {
    let deadline = Instant::now() + limit;
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid place for its status.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(status);
        }
        if Instant::now() > deadline {
            // SAFETY: `pid` is our child, not yet reaped; then reaped here.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What a child forked beside the consuming thread checks: every read answers without
/// waiting, and the state is the one the consumer had reached at the fork. `reached` is
/// that consumer's last handed-out batch, counted across epochs (`epoch * n + position`).
/// Its exit code says which check failed (0: all held).
fn reader_child(loader: &Loader, reached: u64) -> i32 {
    let n = loader.num_batches();
    let s = loader.state();
    // A batch handed out but not yet counted by the consumer is one ahead.
    let at = s.epoch * n + s.position;
    if s.position > n || !(reached..=reached + 1).contains(&at) {
        return 10;
    }
    if loader.pending_epoch().is_some() || loader.resume_note(s.epoch).is_some() {
        return 11;
    }
    let _ = loader.batches_if_started(s.epoch);
    // Parts whose lock a parent thread held at the fork read empty; the counts do not.
    if loader.stats().batches == 0 {
        return 12;
    }
    loader.reset_stats();
    if loader.cancel_prefetch() {
        return 13;
    }
    if !matches!(loader.load_state(s), Err(LoaderError::ForkedProcess { .. })) {
        return 14;
    }
    match loader.epoch(s.epoch + 1).next() {
        Some(Err(LoaderError::ForkedProcess { .. })) => 0,
        _ => 15,
    }
}

#[test]
fn a_child_forked_beside_a_training_thread_reads_the_loader_without_hanging() {
    // The consumer updates its state under a lock after every batch, on its own thread;
    // a child forked while it held that lock waited forever in `state()` (Python's
    // `state_dict()`), as did `stats()` for the pipeline threads' locks. A thread that
    // polls both (a monitor, a checkpointing thread) holds those locks often, so that
    // many of the forks land inside them.
    let dir = tempfile::tempdir().unwrap();
    let loader = Arc::new(
        Loader::builder(sample_dataset(dir.path()))
            .batch_size(1)
            .workers(2)
            .transform(Transform::random_resized_crop(16))
            .build()
            .unwrap(),
    );
    let n = loader.num_batches();
    let reached = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (loader, reached, stop) = (loader.clone(), reached.clone(), stop.clone());
        std::thread::spawn(move || {
            for epoch in 0.. {
                for batch in loader.epoch(epoch) {
                    reached.store(epoch * n + batch.unwrap().index + 1, Ordering::Release);
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                }
            }
            unreachable!("epochs never run out")
        })
    };
    let poller = {
        let (loader, stop) = (loader.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::hint::black_box((loader.state(), loader.stats(), loader.pending_epoch()));
            }
        })
    };
    while reached.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    let before = reached.load(Ordering::Acquire);
    let mut failures = Vec::new();
    for _ in 0..300 {
        // SAFETY: the child runs only `reader_child`, whose reads take no lock that a
        // thread of this process can hold for good (which is what it checks), and leaves
        // through `_exit`, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let at_fork = reached.load(Ordering::Acquire);
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                reader_child(&loader, at_fork)
            }))
            .unwrap_or(6);
            // SAFETY: ends the child at once, without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        match wait_for(pid, Duration::from_secs(20)) {
            None => failures.push("hung".to_owned()),
            Some(s) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0 => {}
            Some(s) => failures.push(format!("status {s:#x}")),
        }
        if failures.len() >= 3 {
            break;
        }
    }
    let after = reached.load(Ordering::Acquire);
    stop.store(true, Ordering::Release);
    consumer.join().unwrap();
    poller.join().unwrap();
    assert!(
        failures.is_empty(),
        "children that failed (exit codes: see `reader_child`): {failures:?}"
    );
    // The parent's loader went on meanwhile.
    assert!(after > before, "the consumer stood still at {before}");
}
