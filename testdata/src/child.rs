//! One test of the running test binary, run again in a child process: for scenarios that
//! end the process (a fatal signal, a handler that exits) or need a process of their own.

use std::ffi::OsStr;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Runs the test named `test` (an exact name) of this binary in a child process with
/// `var` set in its environment, and returns its exit status and what it printed on
/// stdout (stderr is dropped). The child's stdout goes to a file, not a pipe, so that a
/// child that prints a lot cannot block on a full pipe.
///
/// The child's `TMPDIR` is a folder of the parent's, removed once the child has ended:
/// these children usually die of a signal or leave with `_exit`, so the temporary
/// folders they make would otherwise never be removed, and pile up in the machine's
/// `/tmp` with every test run.
///
/// # Panics
///
/// When the child cannot be started or still runs after `limit` (it is killed first).
pub fn run_test(test: &str, var: (&str, &str), limit: Duration) -> (ExitStatus, String) {
    run_test_with(test, [var], limit)
}

/// [`run_test`] with any number of variables set in the child's environment.
///
/// # Panics
///
/// As [`run_test`].
pub fn run_test_with<K, V>(
    test: &str,
    vars: impl IntoIterator<Item = (K, V)>,
    limit: Duration,
) -> (ExitStatus, String)
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let scratch = std::env::temp_dir().join(format!(
        "stoker-child-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = scratch.join("tmp");
    std::fs::create_dir_all(&tmp).expect("child's temporary folder");
    let out = scratch.join("stdout");
    let file = std::fs::File::create(&out).expect("child's stdout file");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("TMPDIR", &tmp)
        .envs(vars)
        .stdout(file)
        .stderr(Stdio::null())
        .spawn()
        .expect("child test process");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("child status") {
            break status;
        }
        if started.elapsed() > limit {
            child.kill().expect("kill child");
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&scratch);
            panic!("{test}: still ran after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let printed = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&scratch);
    (status, printed)
}

/// Forks; the child runs `check` and leaves with `_exit` (0 when `check` returned true, 1
/// when it returned false or panicked), never returning into the test harness. Returns the
/// child's wait status, or `None` when it still ran after `limit` (it is killed): for "a
/// child of `fork` can still do this" tests, where a hang must fail the test.
///
/// # Panics
///
/// When `fork` fails.
pub fn check_in_fork(limit: Duration, check: impl FnOnce() -> bool) -> Option<i32> {
    // SAFETY: the child runs only `check`, what the caller tests a forked child for, and
    // leaves with _exit, so nothing of the parent's test harness runs in it.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // A panic must not unwind into the harness's copy in the child.
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).unwrap_or(false);
        // SAFETY: ends the child without running the parent's exit code.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    assert!(pid > 0, "fork failed");
    wait_forked(pid, limit)
}

/// Waits up to `limit` for the forked child `pid` (a process made with `fork`, which
/// `std::process` cannot wait for): its wait status, or `None` when it still ran, after
/// which it is killed and reaped.
pub fn wait_forked(pid: i32, limit: Duration) -> Option<i32> {
    let (started, mut status) = (Instant::now(), 0);
    // SAFETY: waitpid and kill on the caller's own child, into a valid int.
    while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
        if started.elapsed() > limit {
            // SAFETY: as above.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        // Short: callers fork thousands of children that each live well under a millisecond.
        std::thread::sleep(Duration::from_micros(100));
    }
    Some(status)
}
