//! What the loader's iteration yields: a `Batch` that unpacks to `(images, labels)`;
//! `Images` and `Labels` are DLPack producers, so `torch.from_dlpack(images)`,
//! `numpy.from_dlpack(images)`, CuPy and JAX take them without a copy.

use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyInt, PyIterator, PyList, PySlice, PyTuple};
use stoker_loader::dlpack::{sys, ConsumerStream, ManagedTensor};
use stoker_loader::{CudaImages, DType, HostImages, Output};

use crate::args;
use crate::capsule::{into_capsule, wants_versioned};
use crate::errors::{loader_error, StokerError};

/// Where the pixels are. Each DLPack export holds a clone of the `Arc`, so the batch
/// (its host buffer or GPU slot) goes back to the loader only when this object and
/// every tensor made from it are freed.
enum Pixels {
    Host(Arc<HostImages>),
    Cuda(Arc<CudaImages>),
}

/// The images of a batch: ``[n, 3, h, w]`` (float32/float16/bfloat16) or ``[n, h, w, 3]``
/// (uint8, or a float dtype with ``layout="nhwc"``), in host memory (``device ==
/// "cpu"``) or on the GPU (``"cuda:N"``). Take them with ``torch.from_dlpack(images)`` /
/// ``numpy.from_dlpack(images)`` (no copy; a tensor kept alive is never overwritten by
/// later batches; NumPy has no bfloat16).
#[pyclass(module = "stoker", frozen, weakref)]
pub(crate) struct Images {
    pixels: Pixels,
}

impl Images {
    fn shape(&self) -> [usize; 4] {
        match &self.pixels {
            Pixels::Host(h) => h.shape(),
            Pixels::Cuda(c) => c.shape(),
        }
    }

    fn dtype(&self) -> DType {
        match &self.pixels {
            Pixels::Host(h) => h.dtype(),
            Pixels::Cuda(c) => c.dtype(),
        }
    }

    fn dl_device(&self) -> (i32, i32) {
        match &self.pixels {
            Pixels::Host(_) => (sys::K_DL_CPU, 0),
            Pixels::Cuda(c) => (sys::K_DL_CUDA, c.context().ordinal() as i32),
        }
    }
}

#[pymethods]
impl Images {
    /// The DLPack capsule of the images (DLPack's Python protocol). On the GPU the
    /// consumer's ``stream`` (``None``/1: legacy default, 2: per-thread default, -1: no
    /// synchronization, else a ``cudaStream_t``) is made to wait for the batch first;
    /// host images have no stream and take only ``None`` or -1 (another is a
    /// ``BufferError``, as NumPy raises). A ``stream`` that is no int is a ``TypeError``,
    /// one below -1, 0 or past a pointer's range a ``ValueError``, on either device.
    /// With ``max_version`` ``(1, 0)`` or later (NumPy ≥ 2.1, PyTorch, CuPy and JAX pass
    /// it) the capsule is DLPack 1.0's versioned one, whose flags say that host images
    /// are shared (read-only: NumPy's array is; PyTorch has no read-only tensors) and
    /// that a copy is the consumer's own (writable); without it, the legacy capsule.
    /// ``copy=True`` exports a copy of host images (the consumer's own memory); on the
    /// GPU it, and a ``dl_device`` other than the images', raise ``BufferError``.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::stream)] stream: Option<i64>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        #[pyo3(from_py_with = args::copy)] copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        check_device(self.dl_device(), dl_device.as_ref())?;
        let copy = copy == Some(true);
        if copy && matches!(self.pixels, Pixels::Cuda(_)) {
            return Err(PyBufferError::new_err(
                "copy=True: stoker does not copy GPU batches; copy the tensor after taking it",
            ));
        }
        if matches!(self.pixels, Pixels::Host(_)) {
            args::host_stream(stream)?;
        }
        let tensor = match &self.pixels {
            Pixels::Host(h) if copy => h.copy_to_dlpack(),
            Pixels::Host(h) => h.to_dlpack(),
            Pixels::Cuda(c) => {
                let stream = ConsumerStream::from_dlpack_arg(stream).map_err(loader_error)?;
                // SAFETY: DLPack's protocol: a stream handle passed to `__dlpack__` is
                // a live stream of the tensor's device on which the consumer uses the
                // tensor, so it outlives the consumer's use of the batch (PyTorch's
                // and CuPy's streams are pooled and never destroyed).
                unsafe { c.to_dlpack(stream) }.map_err(loader_error)?
            }
        };
        into_capsule(py, tensor, wants_versioned(max_version.as_ref()))
    }

    /// ``(device_type, device_id)``: ``(1, 0)`` for the CPU, ``(2, N)`` for ``cuda:N``.
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.dl_device()
    }

    /// ``numpy.asarray(images)``: host images as ``numpy.from_dlpack`` gives them (no copy,
    /// read-only), or converted to ``dtype`` / copied when asked. Without it NumPy made a
    /// 0-d array of the object, silently. GPU images are a ``TypeError``: take them with
    /// ``torch.from_dlpack``.
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        if let Pixels::Cuda(_) = slf.get().pixels {
            return Err(PyTypeError::new_err(format!(
                "these images are on {}: a NumPy array cannot hold them; take them with torch.from_dlpack(images) (then .cpu().numpy() for a host copy)",
                slf.get().device()
            )));
        }
        if slf.get().dtype() == DType::Bf16 {
            return Err(PyTypeError::new_err(
                "these images are bfloat16, which NumPy has no type for: take them with \
                 torch.from_dlpack(images) (then .float().numpy() for float32), or ask the \
                 loader for dtype=\"float32\"",
            ));
        }
        let numpy = py.import("numpy")?;
        let array = numpy.call_method1("from_dlpack", (slf,))?;
        let converts_to = match dtype.filter(|d| !d.is_none()) {
            Some(d)
                if !array
                    .getattr("dtype")?
                    .eq(numpy.call_method1("dtype", (&d,))?)? =>
            {
                Some(d)
            }
            _ => None,
        };
        if let Some(dtype) = converts_to {
            if copy == Some(false) {
                return Err(PyValueError::new_err(format!(
                    "copy=False: the images are {}, and {dtype} needs a copy",
                    dtype_name(slf.get().dtype())
                )));
            }
            return array.call_method1("astype", (dtype,));
        }
        match copy {
            Some(true) => array.call_method0("copy"),
            _ => Ok(array),
        }
    }

    /// ``(n, c, h, w)`` or ``(n, h, w, c)``.
    #[getter(shape)]
    fn py_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.shape())
    }

    /// ``"uint8"``, ``"float16"``, ``"bfloat16"`` or ``"float32"``.
    #[getter(dtype)]
    fn py_dtype(&self) -> &'static str {
        dtype_name(self.dtype())
    }

    /// ``"cpu"`` or ``"cuda:N"``.
    #[getter]
    fn device(&self) -> String {
        match self.dl_device() {
            (sys::K_DL_CUDA, n) => format!("cuda:{n}"),
            _ => "cpu".into(),
        }
    }

    /// The address of the first element (a device address on the GPU, known once a
    /// consumer's stream waited, i.e. after a ``__dlpack__`` call; ``None`` before).
    #[getter]
    fn data_ptr(&self) -> Option<u64> {
        match &self.pixels {
            Pixels::Host(h) => Some(match h.dtype() {
                DType::U8 => h.as_u8().map(|s| s.as_ptr() as u64),
                DType::F16 => h.as_f16().map(|s| s.as_ptr() as u64),
                DType::Bf16 => h.as_bf16().map(|s| s.as_ptr() as u64),
                _ => h.as_f32().map(|s| s.as_ptr() as u64),
            }?),
            Pixels::Cuda(c) => c.device_ptr(),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "stoker.Images(shape={:?}, dtype={}, device={})",
            self.shape(),
            dtype_name(self.dtype()),
            self.device()
        )
    }
}

/// The labels of a batch (``int64``, host memory, one per image): a sequence of ints
/// (indexing, slicing to a list) and a DLPack producer (``torch.from_dlpack(labels)``,
/// a copy of its own). Not picklable or copyable, as ``Batch`` and ``Images``: keep the
/// tensor or ``tolist()``.
#[pyclass(module = "stoker", frozen, sequence, weakref)]
pub(crate) struct Labels {
    values: Vec<i64>,
}

#[pymethods]
impl Labels {
    /// A DLPack capsule of a copy of the labels (host ``int64``); see ``Images.__dlpack__``.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::stream)] stream: Option<i64>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        #[pyo3(from_py_with = args::copy)] copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // Host memory: no stream to wait on.
        args::host_stream(stream)?;
        // A copy per export (at most a batch of int64s), so each tensor owns its own; a
        // consumer that forbids copies is told so, as the protocol asks.
        check_device((sys::K_DL_CPU, 0), dl_device.as_ref())?;
        if copy == Some(false) {
            return Err(PyBufferError::new_err(
                "copy=False: labels are exported as a copy of their int64 values",
            ));
        }
        into_capsule(
            py,
            ManagedTensor::from_vec(self.values.clone()),
            wants_versioned(max_version.as_ref()),
        )
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (sys::K_DL_CPU, 0)
    }

    fn __len__(&self) -> usize {
        self.values.len()
    }

    /// A label (an int), or a list of them for a slice (`labels[1:3]`, as a list's).
    fn __getitem__<'py>(&self, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = key.py();
        let len = self.values.len() as isize;
        if let Ok(slice) = key.cast::<PySlice>() {
            let s = slice.indices(len)?;
            let picked =
                (0..s.slicelength as isize).map(|k| self.values[(s.start + k * s.step) as usize]);
            return Ok(PyList::new(py, picked)?.into_any());
        }
        let index = args::index(key)?;
        let i = if index < 0 { index + len } else { index };
        if !(0..len).contains(&i) {
            return Err(PyIndexError::new_err("label index out of range"));
        }
        Ok(self.values[i as usize].into_pyobject(py)?.into_any())
    }

    /// The labels as a list of ints.
    fn tolist(&self) -> Vec<i64> {
        self.values.clone()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        PyList::new(py, &self.values)?.try_iter()
    }

    fn __repr__(&self) -> String {
        format!("stoker.Labels({:?})", self.values)
    }
}

/// A DLPack export to another device than the batch's, which stoker does not do, as
/// `BufferError` (the protocol's exception). The pair is read as Python ints: a device
/// type or number past `i32` (which no device has) is another device, where PyO3's
/// `(i32, i32)` raised a bare `OverflowError`.
fn check_device(ours: (i32, i32), dl_device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let Some(want) = dl_device else {
        return Ok(());
    };
    let shown = want.repr().map(|r| r.to_string()).unwrap_or_default();
    let (kind, id) = want
        .extract::<(Bound<'_, PyInt>, Bound<'_, PyInt>)>()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "dl_device={shown}: want a (device_type, device_id) tuple of ints"
            ))
        })?;
    if (kind.extract::<i32>().ok(), id.extract::<i32>().ok()) == (Some(ours.0), Some(ours.1)) {
        return Ok(());
    }
    Err(PyBufferError::new_err(format!(
        "dl_device={shown}: the batch is on {ours:?} and stoker does not move it"
    )))
}

/// The batch layout of `dtype=` and `layout=`; an error names both as the caller wrote
/// them, in Python's spelling (not Rust's `Some(..)`).
pub(crate) fn output(dtype: Option<&str>, layout: Option<&str>) -> PyResult<Output> {
    match (dtype.unwrap_or("float32"), layout) {
        ("float32", None | Some("nchw")) => Ok(Output::F32Nchw),
        ("float16", None | Some("nchw")) => Ok(Output::F16Nchw),
        ("float32", Some("nhwc")) => Ok(Output::F32Nhwc),
        ("float16", Some("nhwc")) => Ok(Output::F16Nhwc),
        ("bfloat16", None | Some("nchw")) => Ok(Output::Bf16Nchw),
        ("bfloat16", Some("nhwc")) => Ok(Output::Bf16Nhwc),
        ("uint8", None | Some("nhwc")) => Ok(Output::U8Nhwc),
        _ => {
            let given = |v: Option<&str>| v.map_or("None".to_string(), |v| format!("{v:?}"));
            Err(PyValueError::new_err(format!(
                "dtype={}, layout={}: want float32, float16 or bfloat16 with layout \"nchw\" \
                 (the default) or \"nhwc\", or uint8 with \"nhwc\"",
                given(dtype),
                given(layout)
            )))
        }
    }
}

fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::U8 => "uint8",
        DType::F16 => "float16",
        DType::Bf16 => "bfloat16",
        _ => "float32",
    }
}

/// One batch: unpacks as ``images, labels = batch`` (so ``for images, labels in
/// loader`` works), and carries the dataset ``indices`` of its images, its ``epoch``
/// and its position ``index`` in the epoch.
#[pyclass(module = "stoker", frozen, sequence, weakref)]
pub(crate) struct Batch {
    images: Py<Images>,
    labels: Py<Labels>,
    indices: Vec<u64>,
    epoch: u64,
    index: u64,
}

impl Batch {
    /// The Python batch of a loader batch.
    pub(crate) fn new(py: Python<'_>, batch: stoker_loader::Batch) -> PyResult<Self> {
        let pixels = match batch.images {
            stoker_loader::Images::Host(h) => Pixels::Host(Arc::new(h)),
            stoker_loader::Images::Cuda(c) => Pixels::Cuda(Arc::new(c)),
            _ => return Err(StokerError::new_err("batch images of an unknown kind")),
        };
        Ok(Batch {
            images: Py::new(py, Images { pixels })?,
            labels: Py::new(
                py,
                Labels {
                    values: batch.labels.into_iter().map(i64::from).collect(),
                },
            )?,
            indices: batch.indices,
            epoch: batch.epoch,
            index: batch.index,
        })
    }
}

#[pymethods]
impl Batch {
    /// The images (``stoker.Images``).
    #[getter]
    fn images(&self, py: Python<'_>) -> Py<Images> {
        self.images.clone_ref(py)
    }

    /// The labels (``stoker.Labels``).
    #[getter]
    fn labels(&self, py: Python<'_>) -> Py<Labels> {
        self.labels.clone_ref(py)
    }

    /// Dataset index of each image.
    #[getter]
    fn indices(&self) -> Vec<u64> {
        self.indices.clone()
    }

    /// The epoch this batch belongs to.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Position of this batch in its epoch (0-based).
    #[getter]
    fn index(&self) -> u64 {
        self.index
    }

    fn __len__(&self) -> usize {
        2
    }

    /// ``images, labels = batch``.
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        PyTuple::new(
            py,
            [
                self.images.clone_ref(py).into_any(),
                self.labels.clone_ref(py).into_any(),
            ],
        )?
        .try_iter()
    }

    fn __getitem__(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::index)] i: isize,
    ) -> PyResult<Py<PyAny>> {
        match i {
            0 | -2 => Ok(self.images.clone_ref(py).into_any()),
            1 | -1 => Ok(self.labels.clone_ref(py).into_any()),
            _ => Err(PyIndexError::new_err("a batch is (images, labels)")),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "stoker.Batch(epoch={}, index={}, images={}, labels={})",
            self.epoch,
            self.index,
            self.images.get().__repr__(),
            self.labels.bind(py).get().values.len()
        )
    }
}
