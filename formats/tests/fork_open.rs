//! A process that forks while its threads open datasets (a PyTorch `DataLoader` starting
//! its worker processes while the training process opens a dataset on another thread)
//! must give children that can open datasets too. Each child inherits the memory of
//! whatever the parent's threads held at the fork, locks included, but not the threads
//! that would release them.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use stoker_formats::{convert, ConvertOptions, Dataset, NoProgress, Source};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");

#[test]
fn children_forked_while_threads_open_datasets_open_them_too() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), &out);
    o.check_decode = false;
    o.shards = Some(4);
    convert(&o, &NoProgress).unwrap();
    let (stop, mut hung) = (AtomicBool::new(false), 0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let ds = Dataset::open(&out).unwrap();
                    assert_eq!(ds.reader().unwrap().get(0).unwrap().index, 0);
                }
            });
        }
        for _ in 0..200 {
            hung += usize::from(fork_and_wait(&out, Duration::from_secs(5)));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(hung, 0, "children that still ran 5 s after their fork");
}

/// Forks a child that opens the dataset at `dir`, reads a record and exits; true when it
/// still ran after `limit` (it is killed then).
fn fork_and_wait(dir: &Path, limit: Duration) -> bool {
    // SAFETY: the child only opens a dataset and leaves with _exit; what it inherits from
    // the parent's threads mid-open is what is tested.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok = Dataset::open(dir).is_ok_and(|ds| ds.reader().is_ok_and(|r| r.get(1).is_ok()));
        // SAFETY: _exit ends the child without running the parent's exit code.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    assert!(pid > 0, "fork failed");
    let Some(status) = stoker_testdata::child::wait_forked(pid, limit) else {
        return true;
    };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: {status}"
    );
    false
}
