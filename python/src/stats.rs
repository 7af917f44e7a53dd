//! `stoker.Stats`: a loader's counters as a read-only mapping.

use std::sync::OnceLock;

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dataset::json_to_py;

/// The loader's counters. A read-only mapping of the fields of the Rust ``Stats``
/// (``epochs``, ``batches``, ``images``, ``images_per_s``, ``fed_ratio``,
/// ``consumer_wait_s``, ``stages`` (the per-stage table), ``backend``...) plus
/// ``verdict``; ``str(stats)`` is the same table and verdict the Rust loader prints.
#[pyclass(module = "stoker", frozen, mapping, weakref)]
pub(crate) struct Stats {
    pub(crate) inner: stoker_loader::Stats,
    /// The mapping, made at its first read and kept: the snapshot does not change, and
    /// making it (JSON both ways, and the verdict) for every key made `dict(stats)` cost
    /// a millisecond, a key 45 µs.
    cached: OnceLock<Py<PyDict>>,
}

impl Stats {
    pub(crate) fn new(inner: stoker_loader::Stats) -> Stats {
        Stats {
            inner,
            cached: OnceLock::new(),
        }
    }

    /// The kept mapping. Its nested dicts and lists are handed out as copies
    /// ([`Stats::owned`]), so that no caller can change what the next one reads.
    fn cached<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyDict>> {
        if self.cached.get().is_none() {
            let d = self.dict(py)?.unbind();
            let _ = self.cached.set(d);
        }
        let d = self.cached.get().expect("set above");
        Ok(d.bind(py))
    }

    /// A new dict of the counters.
    fn dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = json_to_py(py, &self.inner.to_json())?.cast_into::<PyDict>()?;
        d.set_item("verdict", self.inner.verdict())?;
        Ok(d)
    }

    /// `v` as the caller's own: a copy of a dict or a list, the value itself otherwise
    /// (numbers, strings and `None` cannot be changed).
    fn owned<'py>(v: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if v.is_instance_of::<PyDict>() || v.is_instance_of::<pyo3::types::PyList>() {
            v.py().import("copy")?.call_method1("deepcopy", (v,))
        } else {
            Ok(v)
        }
    }
}

#[pymethods]
impl Stats {
    /// The same object: a snapshot does not change, so a copy (``copy.copy``, and
    /// ``copy.deepcopy`` of a dict of metrics that holds it) need not be another.
    fn __copy__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// As ``__copy__``.
    fn __deepcopy__(slf: Py<Self>, _memo: &Bound<'_, PyAny>) -> Py<Self> {
        slf
    }

    /// Pickles as its JSON (the Rust ``Stats``' own): a snapshot sent to a logging process
    /// or saved with a checkpoint comes back equal.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, (String,))> {
        let rebuild = py.import("stoker._stoker")?.getattr("_stats_from_json")?;
        Ok((rebuild, (self.inner.to_json(),)))
    }

    /// Equal to a snapshot of the same counters, such as the one a pickle gives back.
    /// Compared as their JSON, where a NaN (a rate of nothing) equals itself.
    fn __eq__(&self, other: PyRef<'_, Self>) -> bool {
        self.inner.to_json() == other.inner.to_json()
    }

    /// Hashable as before `__eq__` was defined, consistently with it.
    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.inner.to_json().hash(&mut h);
        h.finish()
    }

    /// A plain dict of the counters.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.dict(py)
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        let v = self
            .cached(py)?
            .get_item(key)?
            .ok_or_else(|| PyKeyError::new_err(key.to_owned()))?;
        Stats::owned(v)
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.cached(py)?.len())
    }

    fn __contains__(&self, py: Python<'_>, key: &str) -> PyResult<bool> {
        self.cached(py)?.contains(key)
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.cached(py)?.keys().into_any().try_iter()?.into_any())
    }

    /// ``stats[key]``, or ``default`` when there is no such counter (as ``dict.get``).
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.cached(py)?.get_item(key)? {
            Some(v) => Stats::owned(v),
            None => Ok(default.unwrap_or_else(|| py.None().into_bound(py))),
        }
    }

    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.cached(py)?.call_method0("keys")
    }

    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.dict(py)?.call_method0("items")
    }

    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.dict(py)?.call_method0("values")
    }

    /// The stats as JSON (the Rust ``Stats::to_json``).
    fn to_json(&self) -> String {
        self.inner.to_json()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "stoker.Stats(images={}, images_per_s={:.1}, fed_ratio={:.3})",
            self.inner.images, self.inner.images_per_s, self.inner.fed_ratio
        )
    }
}

/// A pickled [`Stats`] back from its JSON.
#[pyfunction]
#[pyo3(name = "_stats_from_json")]
pub(crate) fn stats_from_json(text: &str) -> PyResult<Stats> {
    serde_json::from_str(text)
        .map(Stats::new)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("not a stoker.Stats: {e}")))
}
