//! `stoker.verify`: `stoker verify --json` for Python, where the package brings no CLI.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::args;
use crate::dataset::json_to_py;
use crate::errors::format_error;
use crate::logging::Call;
use crate::signals::SIGNAL_CHECK;

/// How long a stopped check is waited for before Ctrl-C reaches the caller anyway: it
/// stops at its next record, but a read of a network file system can hang.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Checks every byte of the dataset at ``path`` against its manifest, as ``stoker verify``
/// does, and returns the report as a dict with the keys of ``stoker verify --json``:
/// ``ok`` (True only when every record is sound), the counts (``samples``, ``checked``,
/// ``ok_records``, ``bad_records``, ``lost_records``, ``decoded``, ``shards``,
/// ``opened``, ``read_in_part``), ``bad`` (each problem: ``shard``, ``index``,
/// ``problem``, ``source``: the input it was made from), ``lost`` (the records of each
/// shard that is missing, damaged, cut short or altered: ``shard``, ``first_index``,
/// ``count``, ``cause``, ``reason``, ``sources``), ``notes`` and ``seconds``.
///
/// A dataset too damaged for ``stoker.Dataset`` still gets a report: each shard is
/// opened on its own. ``decode=True`` also decodes every JPEG on the CPU. Run it on data
/// that was copied, restored or stored on unreliable media before training on it.
///
/// Raises only when the manifest cannot be read: ``FileNotFoundError`` where there is
/// none (not a dataset, an unfinished conversion), else ``stoker.StokerError``; and
/// ``KeyboardInterrupt`` on Ctrl-C, which stops the check.
#[pyfunction]
#[pyo3(signature = (path, decode=false))]
pub(crate) fn verify<'py>(
    py: Python<'py>,
    path: Bound<'py, PyAny>,
    decode: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let _logs = Call::new(py);
    let path = args::path(&path, "path")?;
    let stop = Arc::new(AtomicBool::new(false));
    let caller = std::thread::current();
    // Not a scoped thread: at interpreter exit CPython may end this caller's thread without
    // unwinding (see `convert_interruptibly`), and the check must not borrow its stack.
    let job = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("stoker-verify".into())
            .spawn(move || {
                let r = stoker_formats::verify_dir_until(&path, decode, &|| {
                    stop.load(Ordering::Relaxed)
                });
                caller.unpark();
                r
            })
            .map_err(|e| {
                format_error(stoker_formats::FormatError::Threads {
                    what: "verify's thread".into(),
                    reason: e.to_string(),
                })
            })?
    };
    let mut stopped_at: Option<(Instant, PyErr)> = None;
    while !job.is_finished() {
        py.detach(|| std::thread::park_timeout(SIGNAL_CHECK));
        crate::logging::deliver(py);
        match stopped_at.take() {
            Some((since, interrupt)) if since.elapsed() > STOP_GRACE => return Err(interrupt),
            Some(s) => stopped_at = Some(s),
            None => {
                if let Err(interrupt) = py.check_signals() {
                    stop.store(true, Ordering::Relaxed);
                    stopped_at = Some((Instant::now(), interrupt));
                }
            }
        }
    }
    let report = job
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    if let Some((_, interrupt)) = stopped_at {
        return Err(interrupt);
    }
    let report = report.map_err(format_error)?;
    let mut value = serde_json::to_value(&report)
        .map_err(|e| crate::errors::StokerError::new_err(e.to_string()))?;
    value["ok"] = serde_json::Value::Bool(report.ok());
    json_to_py(py, &value.to_string())
}
