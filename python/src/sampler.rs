//! `stoker.LoaderSampler`: what `loader.sampler` gives, for frameworks that set a
//! loader's epoch through `dataloader.sampler.set_epoch(epoch)` (PyTorch Lightning at
//! every training epoch and evaluation run; Accelerate; hand-written loops written for a
//! `DistributedSampler`). Without it a stoker loader kept its own epoch count, which
//! after a resume from an end-of-epoch checkpoint, or with a loader built again at every
//! epoch, was not the framework's: the same order and crops again, or epochs shifted.

use pyo3::prelude::*;

/// The epoch-setting part of a torch ``Sampler`` for a ``stoker.Loader``:
/// ``set_epoch(epoch)`` is ``loader.set_epoch(epoch)``. It gives no indices (the loader
/// makes its own batches).
#[pyclass(module = "stoker", frozen, weakref)]
pub(crate) struct LoaderSampler {
    /// The `stoker.Loader`, called through Python: this module stays below `loader`.
    loader: Py<PyAny>,
}

impl LoaderSampler {
    pub(crate) fn new(loader: Py<PyAny>) -> Self {
        LoaderSampler { loader }
    }
}

#[pymethods]
impl LoaderSampler {
    /// The epoch the loader's next iterator runs (``Loader.set_epoch``); also an
    /// ``iter(loader)`` made but not started yet (its first ``next`` is after this call),
    /// not ``loader.epoch(n)``, which runs epoch ``n``.
    fn set_epoch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::epoch)] epoch: u64,
    ) -> PyResult<()> {
        self.loader.call_method1(py, "set_epoch", (epoch,))?;
        Ok(())
    }

    /// The loader this sets the epoch of.
    #[getter]
    fn loader(&self, py: Python<'_>) -> Py<PyAny> {
        self.loader.clone_ref(py)
    }

    fn __repr__(&self) -> &'static str {
        "stoker.LoaderSampler(set_epoch -> Loader.set_epoch)"
    }
}
