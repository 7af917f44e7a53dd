//! A process that forks while its threads open datasets (a PyTorch `DataLoader` starting
//! its worker processes while the training process opens a dataset on another thread)
//! must give children that can open datasets too. Each child inherits the memory of
//! whatever the parent's threads held at the fork, locks included, but not the threads
//! that would release them; nor the threads of a pool the parent started, such as the
//! one `verify` decodes on.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use stoker_formats::{convert, verify, ConvertOptions, Dataset, NoProgress, Source};

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

/// A child forked after its parent verified with `--decode` (a `DataLoader` worker forked
/// once the training process checked its data) verifies too: verify's decode pool was
/// the parent's there, without its threads, and the child's first decode waited for ever.
#[test]
fn a_child_forked_after_a_decoding_verify_verifies_too() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), &out);
    o.check_decode = false;
    convert(&o, &NoProgress).unwrap();
    let ds = Dataset::open(&out).unwrap();
    let verified = |ds: &Dataset| verify(ds, true).is_ok_and(|r| r.ok() && r.decoded > 0);
    assert!(verified(&ds), "the parent's verify failed");
    let status = stoker_testdata::child::check_in_fork(Duration::from_secs(30), || verified(&ds));
    assert_eq!(
        status,
        Some(0),
        "the child's verify failed, or (None) still ran 30 s after the fork"
    );
}
