//! Signals around Rust work: how long it may hold a Python caller before it looks for
//! Ctrl-C, and the SIGBUS handler that turns a lost shard page into an error.

use std::time::{Duration, Instant};

use pyo3::{PyErr, PyResult, Python};

/// How long Rust work may hold a Python caller before it gets the GIL back to look for
/// Ctrl-C (`check_signals`): a wait for a batch, a conversion. Short enough to feel
/// immediate, long enough to cost nothing.
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// How long stopped work is waited for before its caller gets the exception anyway: far
/// longer than a conversion takes to stop between inputs or a check between records (a
/// fraction of a second), so that a `resume=True` right after finds it stopped.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Runs `work` on a thread of its own (`thread`: its name, and what errors call it),
/// while this one, holding the GIL only to look, checks for Ctrl-C every
/// [`SIGNAL_CHECK`]: Python's handler only sets a flag,
/// so work run here with the GIL released went on to its end (minutes to hours) before
/// `KeyboardInterrupt`. Each look also delivers the log and runs `tick`, whose error stops
/// the work as Ctrl-C does; `stop` is called on the first error, which is returned (also
/// when the work finished meanwhile: the user asked to stop). Stopped work that does not
/// end within [`STOP_GRACE`] (a system call that never returns: opening a pipe nobody
/// writes) is left to end with the process.
///
/// The thread owns what it uses (not a scoped thread borrowing this frame): a daemon
/// thread still in such a call at interpreter exit is ended by CPython 3.11–3.13 with
/// `pthread_exit` when it asks for the GIL back, which pops this frame without waiting for
/// a scoped thread, and the work then read a dead stack (a SIGSEGV at exit).
pub(crate) fn interruptibly<T: Send + 'static>(
    py: Python<'_>,
    (name, what): (&str, &str),
    work: impl FnOnce() -> T + Send + 'static,
    mut tick: impl FnMut(Python<'_>) -> Option<PyErr>,
    stop: impl Fn(),
) -> PyResult<T> {
    let caller = std::thread::current();
    let job = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let done = work();
            caller.unpark();
            done
        })
        .map_err(|e| {
            crate::errors::format_error(stoker_formats::FormatError::Threads {
                what: what.into(),
                reason: e.to_string(),
            })
        })?;
    let mut interrupted: Option<(PyErr, Instant)> = None;
    while !job.is_finished() {
        py.detach(|| std::thread::park_timeout(SIGNAL_CHECK));
        // Such work runs for minutes to hours: its log is not kept to the end.
        crate::logging::deliver(py);
        // Every look, also once stopped: `tick` may be what the work waits for.
        let error = tick(py);
        if interrupted.is_none() {
            if let Some(e) = error.or_else(|| py.check_signals().err()) {
                stop();
                interrupted = Some((e, Instant::now()));
            }
        }
        if let Some((e, _)) = interrupted.take_if(|(_, since)| since.elapsed() > STOP_GRACE) {
            return Err(e);
        }
    }
    let done = job
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    match interrupted {
        Some((e, _)) => Err(e),
        None => Ok(done),
    }
}

/// Puts stoker's SIGBUS handler for shard maps back in front, where Python code has
/// replaced it since the shards were opened: `faulthandler.enable()` (a fault in a map
/// then ended the process with "Fatal Python error: Bus error"), `signal.signal(SIGBUS,
/// ...)` (whose C handler returns to the faulting read, which faults again forever: a
/// hang), a DataLoader worker's handler. Python code runs only between stoker calls, so
/// each call that reads shards, or waits for threads that do, calls this first; when the
/// handler is in place it is one `sigaction` query.
pub(crate) fn guard_shard_reads() {
    stoker_formats::install_read_fault_handler();
}
