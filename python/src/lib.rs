//! # Overview
//!
//! The `stoker` Python package (`import stoker`): the extension module `stoker._stoker`,
//! built with maturin (`pip install ./python`). It wraps the Rust crates and holds no
//! logic of its own beyond turning Python arguments into their settings and their
//! errors into Python exceptions:
//!
//! - `dataset`: `stoker.convert(src, out, **options)` (the converter's report as a
//!   dict, the keys of `stoker convert --json`) and `stoker.Dataset(path)`.
//! - `writer`: `stoker.Writer(out, classes)`, a dataset from samples written one at a
//!   time (encoded image bytes and a label), a context manager.
//! - `loader`: `stoker.Loader(...)`, its epoch iterator (GIL released while waiting,
//!   Ctrl-C checked between bounded waits), `stats()`, `state_dict()` /
//!   `load_state_dict()`.
//! - `batch`: what iteration yields: `Images` and `Labels`, both DLPack producers
//!   (`__dlpack__`, `__dlpack_device__`) over [`stoker_loader::dlpack`].
//! - `capsule`: the one FFI piece: a DLPack tensor in a `"dltensor"` capsule.
//! - `command`: the `stoker` command (the Rust CLI) for the console script and
//!   `python -m stoker`.
//! - `errors`: Rust errors → `ValueError`, `FileNotFoundError`, `OSError` or `MemoryError`
//!   (a stop for no fault of the inputs) or `stoker.StokerError`.
//! - `logging`: the crates' `tracing` events → Python's `logging` (logger `stoker`),
//!   queued and delivered on the caller's thread.
//!
//! ```python
//! import stoker, numpy as np
//! loader = stoker.Loader("data/train", batch_size=64, device="cpu")
//! for images, labels in loader:
//!     x = np.from_dlpack(images)      # float32 [64, 3, 224, 224], no copy
//! ```

mod args;
mod batch;
mod capsule;
mod command;
mod dataset;
mod epoch;
mod errors;
mod indices;
mod loader;
mod loader_args;
mod locks;
mod logging;
mod sampler;
mod signals;
mod stats;
mod torch_dist;
mod verify;
mod writer;

use pyo3::prelude::*;

/// The system allocator, noting failures, so that the `stoker` command run in this process
/// (`command`) ends with exit status 3 and a message where memory runs out and Rust would
/// abort. It changes nothing for the rest of the package: without the command's SIGABRT
/// handler, such an abort runs its course.
#[global_allocator]
static ALLOCATOR: stoker::alloc_failure::ReportingAllocator =
    stoker::alloc_failure::ReportingAllocator;

/// The extension module `stoker._stoker`.
#[pymodule]
fn _stoker(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    logging::install(py);
    m.add_function(wrap_pyfunction!(logging::deliver_logs, m)?)?;
    // What the loader's threads log after the program's last call to stoker.
    py.import("atexit")?
        .call_method1("register", (m.getattr("_deliver_logs")?,))?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("StokerError", py.get_type::<errors::StokerError>())?;
    m.add(
        "IMAGENET_MEAN",
        stoker_loader::transform::IMAGENET_MEAN.to_vec(),
    )?;
    m.add(
        "IMAGENET_STD",
        stoker_loader::transform::IMAGENET_STD.to_vec(),
    )?;
    m.add_function(wrap_pyfunction!(dataset::convert, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::merge, m)?)?;
    m.add_function(wrap_pyfunction!(verify::verify, m)?)?;
    m.add_function(wrap_pyfunction!(command::command, m)?)?;
    m.add_function(wrap_pyfunction!(stats::stats_from_json, m)?)?;
    m.add_class::<dataset::Dataset>()?;
    m.add_class::<writer::Writer>()?;
    m.add_class::<loader::Loader>()?;
    m.add_class::<epoch::Epoch>()?;
    m.add_class::<sampler::LoaderSampler>()?;
    m.add_class::<stats::Stats>()?;
    m.add_class::<batch::Batch>()?;
    m.add_class::<batch::Images>()?;
    m.add_class::<batch::Labels>()?;
    Ok(())
}
