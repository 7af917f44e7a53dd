//! Where the decoders' host work runs when it runs beside the caller, and what happens
//! when no thread can start.
//!
//! A container's or job's process limit (`pids.max`, `ulimit -u`) can be lower than the
//! threads a process wants, and the two ways std and rayon start threads panic then:
//! `std::thread::Scope::spawn` on the spot, and a parallel iterator outside any pool when
//! it first builds rayon's global pool. A decoder in a training loop must not take the
//! process down for that, so here the same work runs on the calling thread instead: the
//! results are the same, only not in parallel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use crate::per_process::PerProcess;

/// A job started by [`spawn_or_run`]: on its own thread, or already done on the caller's.
pub(crate) enum Started<'scope, T> {
    Thread(ScopedJoinHandle<'scope, T>),
    Done(std::thread::Result<T>),
}

impl<T> Started<'_, T> {
    /// The job's result; `Err` if it panicked (as [`ScopedJoinHandle::join`]).
    pub(crate) fn join(self) -> std::thread::Result<T> {
        match self {
            Started::Thread(handle) => handle.join(),
            Started::Done(result) => result,
        }
    }
}

/// Starts `f` on a thread of scope `s` named `name`, or, when the thread cannot start,
/// runs it now on this one (once, with a warning per process). A panic in `f` is caught
/// either way and given by [`Started::join`], as a scoped thread's would be.
pub(crate) fn spawn_or_run<'scope, T, F>(
    s: &'scope Scope<'scope, '_>,
    name: &str,
    f: F,
) -> Started<'scope, T>
where
    T: Send + 'scope,
    F: FnOnce() -> T + Send + 'scope,
{
    // `spawn_scoped` drops its closure when the thread cannot start, so the job waits
    // here, where the caller can still take it back.
    let job = Arc::new(Mutex::new(Some(f)));
    let theirs = Arc::clone(&job);
    let spawned = if refuse_spawn_for_tests() {
        Err(std::io::Error::from(std::io::ErrorKind::WouldBlock))
    } else {
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn_scoped(s, move || {
                let f = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
                f.map(|f| f()).expect("a job is taken once")
            })
    };
    match spawned {
        Ok(handle) => Started::Thread(handle),
        Err(e) => {
            static SAID: AtomicBool = AtomicBool::new(false);
            warn_once(&SAID, &format!("cannot start thread {name} ({e})"));
            let f = job.lock().unwrap_or_else(PoisonError::into_inner).take();
            let f = f.expect("a thread that did not start did not take its job");
            Started::Done(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
        }
    }
}

/// Runs `f` where rayon's parallel iterators in it have threads: on the caller's rayon
/// pool when the caller is on one, else on stoker's decode pool, with `true`. When that
/// pool cannot be made, runs `f(false)` on this thread: `f` then does the same work with
/// plain iterators, one item after another.
pub(crate) fn in_pool<T: Send>(f: impl FnOnce(bool) -> T + Send) -> T {
    if rayon::current_thread_index().is_some() {
        return f(true);
    }
    match host_pool() {
        Some(pool) => pool.install(|| f(true)),
        None => f(false),
    }
}

/// The threads [`in_pool`] gives parallel work: the caller's pool's, or the decode
/// pool's, or 1. (`rayon::current_num_threads` would build rayon's global pool, and panic
/// where it cannot.)
pub(crate) fn pool_threads() -> usize {
    if rayon::current_thread_index().is_some() {
        return rayon::current_num_threads();
    }
    host_pool().map_or(1, rayon::ThreadPool::current_num_threads)
}

/// The pool of [`in_pool`], one thread per available CPU, made on first use; `None`
/// (with one warning per process) while its threads cannot start, tried again at most
/// every [`POOL_RETRY`]: a shared pod's `pids.max` may be reached only for a moment. Not
/// rayon's global pool: building that one panics where threads cannot start.
///
/// One per process: a child of `fork` (a PyTorch `DataLoader` worker) has none of its
/// parent's pool threads, and work installed on that pool there waited for ever.
fn host_pool() -> Option<&'static rayon::ThreadPool> {
    static HOST: PerProcess<HostPool> = PerProcess::new();
    let host = HOST.get_or_init(HostPool::default);
    if let Some(pool) = host.pool.get() {
        return Some(pool);
    }
    if refuse_spawn_for_tests() {
        return None;
    }
    let mut failed_at = host
        .failed_at
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    // Made by another thread while this one waited for the lock.
    if let Some(pool) = host.pool.get() {
        return Some(pool);
    }
    if failed_at.is_some_and(|t| t.elapsed() < POOL_RETRY) {
        return None;
    }
    // One per available CPU, whatever RAYON_NUM_THREADS says.
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
        .thread_name(|i| format!("stoker-decode-{i}"))
        .build();
    match built {
        Ok(pool) => Some(host.pool.get_or_init(|| pool)),
        Err(e) => {
            *failed_at = Some(Instant::now());
            warn_once(
                &host.said,
                &format!("cannot start the decode threads ({e})"),
            );
            None
        }
    }
}

/// One process's [`host_pool`].
#[derive(Default)]
struct HostPool {
    /// Set once, by the thread holding `failed_at`.
    pool: OnceLock<rayon::ThreadPool>,
    /// When starting the pool's threads last failed; held while a thread starts them.
    failed_at: Mutex<Option<Instant>>,
    /// The failure was told.
    said: AtomicBool,
}

/// How long [`host_pool`] waits before it tries again to start its threads.
const POOL_RETRY: Duration = Duration::from_secs(10);

/// One warning per process and kind (`said`): a process limit usually stays, and a
/// warning per batch would flood the log. An atomic, not a `OnceLock`: one being set by
/// another thread at a fork stays locked for good in the child.
fn warn_once(said: &AtomicBool, what: &str) {
    if !said.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "{what}; decoding on the calling thread instead, more slowly (a container's or job's process limit, pids.max or ulimit -u, or its memory limit, ulimit -v, may be below what the threads stoker starts need)"
        );
    }
}

/// Tests of the fallbacks make every start fail in their process (the child that
/// `without_threads_the_same_work_runs_on_the_callers_thread` runs sets it).
fn refuse_spawn_for_tests() -> bool {
    cfg!(test) && std::env::var_os("STOKER_TEST_REFUSE_THREADS").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    fn squares() -> (Vec<u64>, bool) {
        let items: Vec<u64> = (0..1000).collect();
        in_pool(|parallel| {
            let squares = if parallel {
                items.par_iter().map(|x| x * x).collect()
            } else {
                items.iter().map(|x| x * x).collect()
            };
            (squares, parallel)
        })
    }

    #[test]
    fn in_pool_gives_the_same_results_either_way() {
        let want: Vec<u64> = (0..1000).map(|x| x * x).collect();
        let (got, parallel) = squares();
        assert_eq!(got, want);
        // Here threads start; in the child of the test below they cannot.
        assert_eq!(parallel, !refuse_spawn_for_tests());
        assert_eq!(pool_threads() > 1, parallel && num_cpus() > 1);
    }

    fn num_cpus() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    #[test]
    fn a_job_runs_once_and_gives_its_result_or_its_panic() {
        let mut hits = 0;
        let (ok, panicked) = std::thread::scope(|s| {
            let ok = spawn_or_run(s, "stoker-test-ok", || {
                hits += 1;
                7
            });
            let panicked = spawn_or_run(s, "stoker-test-panic", || -> u32 { panic!("boom") });
            (ok.join(), panicked.join())
        });
        assert_eq!(ok.unwrap(), 7);
        assert_eq!(hits, 1);
        assert!(panicked.is_err());
    }

    /// The same two tests in a child process where every thread start is refused: the
    /// fallbacks themselves run, with the same results.
    #[test]
    fn without_threads_the_same_work_runs_on_the_callers_thread() {
        if refuse_spawn_for_tests() {
            return; // the child itself
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--exact", "--test-threads=1"])
            .args([
                "threads::tests::in_pool_gives_the_same_results_either_way",
                "threads::tests::a_job_runs_once_and_gives_its_result_or_its_panic",
            ])
            .env("STOKER_TEST_REFUSE_THREADS", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("2 passed"), "{text}");
    }
}
