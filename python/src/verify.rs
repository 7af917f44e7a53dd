//! `stoker.verify`: `stoker verify --json` for Python, where the package brings no CLI.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

use crate::args;
use crate::dataset::json_to_py;
use crate::errors::format_error;
use crate::logging::Call;

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
/// Raises when the manifest cannot be read: ``FileNotFoundError`` where there is none
/// (not a dataset, an unfinished conversion), else ``stoker.StokerError``; when the check
/// cannot go on for no fault of the dataset's, so that it says nothing about it:
/// ``MemoryError`` where a decode or a read could not get its memory,
/// ``OSError`` with its errno (``EMFILE``, ``ETIMEDOUT``, ...) where the process has no
/// file descriptor left or the storage stopped answering; and ``KeyboardInterrupt`` on Ctrl-C, which stops the check.
#[pyfunction]
#[pyo3(signature = (path, decode=false))]
pub(crate) fn verify<'py>(
    py: Python<'py>,
    path: Bound<'py, PyAny>,
    #[pyo3(from_py_with = args::decode)] decode: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let _logs = Call::new(py);
    let path = args::path(&path, "path")?;
    let stop = Arc::new(AtomicBool::new(false));
    let asked = Arc::clone(&stop);
    let check =
        move || stoker_formats::verify_dir_until(&path, decode, &|| asked.load(Ordering::Relaxed));
    let thread = ("stoker-verify", "verify's thread");
    let stopping = || stop.store(true, Ordering::Relaxed);
    let report = crate::signals::interruptibly(py, thread, check, |_| None, stopping)?;
    let report = report.map_err(format_error)?;
    let mut value = serde_json::to_value(&report)
        .map_err(|e| crate::errors::StokerError::new_err(e.to_string()))?;
    value["ok"] = serde_json::Value::Bool(report.ok());
    json_to_py(py, &value.to_string())
}
