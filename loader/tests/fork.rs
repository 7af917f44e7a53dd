//! A loader used in a `fork` of the process that built it (Python's `multiprocessing`
//! with the fork start method, `os.fork()`): its pipeline threads exist only in the
//! parent, so the child used to wait forever for a batch, and to hang again joining
//! threads when it dropped the loader. Photos from the repository's
//! `examples/data/sample`.
//!
//! Alone in its own test binary: it forks, and a fork copies only the calling thread.

mod common;

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
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid place for its status.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: `pid` is our child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child still runs after 60 s: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x} (exit code {}: see `child`)",
        libc::WEXITSTATUS(status)
    );
    // The parent's epoch goes on untouched: the other 3 batches of 15 images.
    let rest: Vec<_> = running.map(|b| b.unwrap().index).collect();
    assert_eq!(rest, [1, 2, 3]);
}
