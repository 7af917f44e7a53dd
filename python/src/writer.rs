//! `stoker.Writer`: a dataset from samples written one at a time (encoded image bytes and a
//! label), over [`stoker_formats::SampleWriter`].

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};
use stoker_formats::{FormatError, SampleOptions, SampleWriter};
use stoker_loader::Owner;

use crate::args::{self, Bounds};
use crate::dataset::{json_to_py, parse_encoding, parse_resize};
use crate::errors::format_error;
use crate::locks::{lock_detached, Turn, Turns};
use crate::logging::Call;
use crate::signals::SIGNAL_CHECK;

/// Writes a dataset from samples: encoded images (JPEG, PNG, ... as bytes) and their
/// labels, for images that are not files in a folder (a Hugging Face dataset, a database,
/// TFRecords). Each sample is converted exactly as ``stoker.convert`` converts a file
/// with the same options, and the result is the same kind of dataset::
///
///     with stoker.Writer("data/train", classes=names) as w:
///         for image_bytes, label in samples:
///             w.write(image_bytes, label)
///     print(w.report["written"])
///
/// ``classes`` names the labels (label ``i`` is ``classes[i]``; a label with no name is
/// a ``ValueError``); without it the classes are ``"0"`` to the largest label. ``source``
/// is recorded in the manifest as where the samples came from. The other keywords are
/// ``stoker.convert``'s: ``encoding``, ``max_side``, ``quality``, ``size``, ``resize``,
/// ``jobs``, ``shard_size``, ``strict``, ``max_pixels``, ``max_file_size``,
/// ``gpu_friendly``, ``check``, checked alike (a ``TypeError`` for a bool where a number
/// is wanted, a ``ValueError`` naming the keyword for a number out of range).
///
/// ``part`` and ``parts`` (both or neither) write part ``part`` of ``parts`` of one
/// dataset into ``out/part-IIIII-of-NNNNN/``, as ``stoker.convert(..., part=, parts=)``
/// names its parts, so that several processes can each write a contiguous slice of the
/// samples and :func:`merge` then joins the parts into ``out``: the merged dataset reads
/// exactly like one writer fed part 0's samples, then part 1's, and so on. Every part
/// needs the same ``classes`` (required with a part), ``source`` and output keywords, and
/// one part may be empty. ``part`` and ``parts`` are ints (not bools; a ``TypeError``
/// otherwise), ``0 <= part < parts`` (a ``ValueError`` otherwise), as for ``convert``. A
/// writer cannot resume: a part whose writer was killed before ``close()`` is written
/// again, by a new writer given all its samples, once its directory is deleted.
///
/// ``out`` must be new or empty, and nothing is a dataset until ``close()`` (or the end
/// of a ``with`` block without an exception) writes the manifest and returns the report
/// dict ``stoker.convert`` returns. An exception in the ``with`` block, ``abort()``, or a
/// writer garbage-collected unclosed (which says so in a ``UserWarning``) takes away
/// everything it wrote. Ctrl-C reaches a ``write`` or ``close`` that waits for the
/// transcoding threads within a fraction of a second: the sample is then not taken, or
/// the writer not closed, and the writer goes on (a ``with`` block aborts it). Samples are
/// transcoded in chunks on ``jobs`` threads while later ones are written (the GIL is
/// released meanwhile), so a bad sample is skipped, or with ``strict=True`` raises, at a
/// later ``write`` or at ``close``; an error that stops the writer takes its output away,
/// and every later call raises. A full disk (a quota, the file size limit) stops it with
/// an ``OSError`` of its errno (``ENOSPC``, ``EDQUOT``, ``EFBIG``).
///
/// Calls from several threads take turns (samples are stored in the order the calls
/// run). A writer belongs to the process that made it: in a forked child it raises, and
/// its garbage collection there leaves the parent's output alone.
#[pyclass(module = "stoker", frozen, weakref)]
pub(crate) struct Writer {
    /// `None` once closed or aborted. Boxed: the writer is aligned to 64 bytes (a
    /// cache-padded field inside), more than Python allocates objects with, which pyo3
    /// checks (a panic that aborts the process).
    inner: Mutex<Option<Box<SampleWriter>>>,
    /// Taken before `inner`, so that calls from several threads get it in the order they
    /// came (see [`Turns`]).
    turns: Turns,
    /// The report of `close()`, as JSON, once it has run.
    report: Mutex<Option<String>>,
    /// The error `close()` failed with, which closed the writer without a dataset.
    failed: Mutex<Option<String>>,
    out: PathBuf,
    /// Larger samples are skipped, so they are not copied.
    max_file_size: u64,
    /// The process that made the writer (a fork's copy refuses before taking any lock).
    process: Owner,
}

#[pymethods]
impl Writer {
    #[new]
    #[pyo3(signature = (
        out, classes=None, *, source=None, encoding="jpeg", max_side=None, quality=90,
        size=None, resize="shorter-side", jobs=None,
        shard_size=1_073_741_824, strict=false,
        max_pixels=100_000_000, max_file_size=67_108_864,
        gpu_friendly=false, check=true, part=None, parts=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        out: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::classes)] classes: Option<Vec<String>>,
        #[pyo3(from_py_with = args::source)] source: Option<String>,
        #[pyo3(from_py_with = args::encoding)] encoding: &str,
        #[pyo3(from_py_with = args::max_side)] max_side: Option<u32>,
        #[pyo3(from_py_with = args::quality)] quality: u8,
        #[pyo3(from_py_with = args::raw_size)] size: Option<(u32, u32)>,
        #[pyo3(from_py_with = args::resize_mode)] resize: &str,
        #[pyo3(from_py_with = args::jobs)] jobs: Option<usize>,
        #[pyo3(from_py_with = args::shard_size)] shard_size: u64,
        #[pyo3(from_py_with = args::strict)] strict: bool,
        #[pyo3(from_py_with = args::max_pixels)] max_pixels: u64,
        #[pyo3(from_py_with = args::max_file_size)] max_file_size: u64,
        #[pyo3(from_py_with = args::gpu_friendly)] gpu_friendly: bool,
        #[pyo3(from_py_with = args::check)] check: bool,
        part: Option<Bound<'_, PyAny>>,
        parts: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Writer> {
        let _logs = Call::new(py);
        let out = args::path(out, "out")?;
        let mut o = SampleOptions::new(source.unwrap_or_else(|| "stoker.Writer".into()));
        o.encoding = parse_encoding(encoding)?;
        o.resize = parse_resize(resize)?;
        o.max_side = max_side;
        o.quality = quality;
        o.raw_size = size;
        o.jobs = jobs;
        o.shard_bytes = shard_size;
        o.strict = strict;
        o.max_pixels = max_pixels;
        o.max_file_size = max_file_size;
        o.gpu_friendly = gpu_friendly;
        o.check_decode = check;
        o.part = crate::dataset::parse_part(part.as_ref(), parts.as_ref())?;
        let w = py
            .detach(|| SampleWriter::create(out, o, classes))
            .map_err(format_error)?;
        for note in w.warnings() {
            crate::errors::warn(py, format!("stoker.Writer: {note}"))?;
        }
        // A part's own directory: where its shards and manifest are.
        let out = w.out().to_path_buf();
        Ok(Writer {
            inner: Mutex::new(Some(Box::new(w))),
            turns: Turns::default(),
            report: Mutex::new(None),
            failed: Mutex::new(None),
            out,
            max_file_size,
            process: Owner::default(),
        })
    }

    /// Adds a sample: ``image`` is the encoded image (``bytes``, ``bytearray``, or any
    /// one-dimensional object with the buffer protocol and one-byte items, such as a
    /// ``memoryview`` or a NumPy ``uint8`` array of the file's bytes, or a ``uint8`` torch
    /// tensor of them, as ``torchvision.io.read_file`` gives), ``label`` its class,
    /// ``name`` where it came from (default ``"sample N"``, counting from 0; ``"part I sample
    /// N"`` for a writer of part ``I``): what the report
    /// calls it if it is skipped, and its record's ``Dataset.source_of``.
    #[pyo3(signature = (image, label, name=None))]
    fn write(
        &self,
        py: Python<'_>,
        image: &Bound<'_, PyAny>,
        label: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::sample_name)] name: Option<String>,
    ) -> PyResult<()> {
        let mut logs = Call::deliver_first(py)?;
        self.check_process()?;
        let label = class_index(label)?;
        let image = image_bytes(image, self.max_file_size)?;
        let held = match &image {
            Image::Bytes(data) => data.len() as u64,
            Image::TooLarge(_) => 0,
        };
        let name = name.as_deref().unwrap_or("");
        loop {
            let mut inner = self.inner(py);
            let w = inner.writer.as_mut().ok_or_else(|| self.closed_error(py))?;
            // Waited for outside the turn, checking for Ctrl-C (`wait_for_chunk`).
            if let Some(chunk) = w.waits_for(Some(held)) {
                drop(inner);
                wait_for_chunk(py, &chunk)?;
                continue;
            }
            let written = py.detach(|| match image {
                Image::Bytes(data) => w.write(data, label, name),
                Image::TooLarge(bytes) => w.write_too_large(bytes, label, name),
            });
            if written.is_ok() {
                // Taken: a Ctrl-C in a handler now would say it was not.
                logs.keep_for_next();
            }
            return written.map_err(writer_error);
        }
    }

    /// Converts the samples still held, writes the manifest, and returns the report (a
    /// dict with the keys of ``stoker.convert``'s; ``inputs`` counts the samples). Once
    /// closed, ``close()`` returns the same report again and ``write`` raises.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let _logs = Call::new(py);
        self.check_process()?;
        // The last samples go to the pool, and are waited for, before `finish` takes the
        // writer: it would wait for them with Ctrl-C unseen.
        self.wait_for_pool(py)?;
        let flushed = match self.inner(py).writer.as_mut() {
            Some(w) => py.detach(|| w.flush()),
            None => Ok(()),
        };
        if flushed.is_ok() {
            self.wait_for_pool(py)?;
        }
        let mut inner = self.inner(py);
        let json = match inner.writer.take() {
            Some(w) => {
                // A failed flush fails the close as a failed finish does.
                let report = flushed.and_then(|()| py.detach(|| w.finish()));
                let report = report.map_err(|e| {
                    *lock_detached(py, &self.failed) = Some(e.to_string());
                    writer_error(e)
                })?;
                let json = serde_json::to_string(&report)
                    .map_err(|e| crate::errors::StokerError::new_err(e.to_string()))?;
                *lock_detached(py, &self.report) = Some(json.clone());
                json
            }
            None => lock_detached(py, &self.report)
                .clone()
                .ok_or_else(|| self.closed_error(py))?,
        };
        // The turn ends before json.loads runs Python code: a signal handler, a profile
        // hook or a finalizer run there that used this writer (`w.abort()` on SIGTERM)
        // waited for the turn its own thread held, forever.
        drop(inner);
        json_to_py(py, &json)
    }

    /// The same as ``close()``.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.close(py)
    }

    /// Stops without a dataset: takes away everything this writer wrote. Does nothing on
    /// a writer already closed or aborted.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        let _logs = Call::new(py);
        self.check_process()?;
        let taken = self.inner(py).writer.take();
        // The clean-up removes files: not with the GIL held.
        py.detach(move || drop(taken));
        Ok(())
    }

    /// The report of ``close()``, or ``None`` before it.
    #[getter]
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.check_process()?;
        let json = lock_detached(py, &self.report).clone();
        json.map(|j| json_to_py(py, &j)).transpose()
    }

    /// Whether the writer is closed or aborted.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        self.check_process()?;
        Ok(self.inner(py).writer.is_none())
    }

    /// The output directory (with a part, the part's own directory under ``out``).
    #[getter]
    fn out(&self) -> PathBuf {
        self.out.clone()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Closes the writer after a block that ended normally, aborts it after an exception
    /// (which goes on; in a forked child, leaving the parent's writer alone).
    fn __exit__(
        &self,
        py: Python<'_>,
        ty: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if ty.is_some() {
            // In a forked child the writer is the parent's, which abort() refuses: the
            // block's own exception goes on, not that refusal.
            if self.process.forked() {
                return Ok(false);
            }
            self.abort(py)?;
        } else if !self.closed(py)? {
            if let Err(e) = self.close(py) {
                // Ctrl-C while `close` waited for the last samples leaves the writer
                // open, holding its lock (a rerun was refused as "another writer"): the
                // block aborts it, as after an exception inside it.
                if !self.closed(py).unwrap_or(true) {
                    self.abort(py)?;
                }
                return Err(e);
            }
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = match self.closed(py) {
            Ok(true) => "closed",
            Ok(false) => "open",
            Err(_) => "of another process",
        };
        format!(
            "stoker.Writer({:?}, {state})",
            self.out.display().to_string()
        )
    }
}

/// A writer freed unclosed takes its output away, as documented; a forgotten `close()`
/// at the end of a script lost hours of writing without a word. It says so, as a
/// `UserWarning` (not a `ResourceWarning`, which Python shows only in development mode).
impl Drop for Writer {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        let Some(w) = inner.as_ref() else {
            return;
        };
        // A forked child's copy leaves the parent's output alone: nothing is lost.
        if self.process.forked() {
            return;
        }
        let text = format!(
            "stoker.Writer({:?}) was freed unclosed: its {} sample(s) are discarded and what it wrote is removed (call close(), or write inside `with stoker.Writer(...) as w:`)",
            self.out.display().to_string(),
            w.samples()
        );
        Python::attach(|py| {
            // A writer freed while an exception is on its way (`Writer(...).write(bad)`
            // raising as its temporary is freed) keeps that exception: warning with it
            // set made Python replace it by a SystemError.
            let pending = PyErr::take(py);
            // A warning made an error (`-W error`) cannot leave a destructor.
            if let Err(e) = crate::errors::warn(py, text) {
                e.write_unraisable(py, None);
            }
            if let Some(e) = pending {
                e.restore(py);
            }
        });
    }
}

/// The writer, held in the caller's turn.
struct Held<'a> {
    /// Dropped first: the lock is free before the next caller's turn comes.
    writer: MutexGuard<'a, Option<Box<SampleWriter>>>,
    _turn: Turn<'a>,
}

impl Writer {
    /// Waits for the caller's turn, then locks the writer.
    fn inner(&self, py: Python<'_>) -> Held<'_> {
        let turn = self.turns.take(py);
        Held {
            writer: lock_detached(py, &self.inner),
            _turn: turn,
        }
    }

    fn closed_error(&self, py: Python<'_>) -> PyErr {
        let why = match lock_detached(py, &self.failed).as_deref() {
            Some(e) => format!(" (close() failed, leaving no dataset: {e})"),
            None => String::new(),
        };
        PyValueError::new_err(format!(
            "stoker.Writer({:?}) is closed{why}",
            self.out.display().to_string()
        ))
    }

    /// Waits until `close` would not wait for the thread pool, outside the caller's turn
    /// and checking for Ctrl-C: waiting inside the call saw Ctrl-C (and ran Python's signal
    /// handlers) only seconds later, after the pool's chunk. Not in the turn, so that a
    /// handler that uses the writer (`w.abort()` on SIGTERM) finds it free. A closed
    /// writer is left to the call.
    fn wait_for_pool(&self, py: Python<'_>) -> PyResult<()> {
        loop {
            let chunk = match self.inner(py).writer.as_ref() {
                Some(w) => w.waits_for(None),
                None => None,
            };
            match chunk {
                Some(chunk) => wait_for_chunk(py, &chunk)?,
                None => return Ok(()),
            }
        }
    }

    /// Refuses use in a forked child before any lock is taken: a lock held by a thread of
    /// the parent at the fork is held forever in the child.
    fn check_process(&self) -> PyResult<()> {
        if !self.process.forked() {
            return Ok(());
        }
        Err(crate::errors::StokerError::new_err(format!(
            "stoker.Writer({:?}) was created in another process: a writer cannot be used in a fork of the process that made it (make one in each process, into its own directory)",
            self.out.display().to_string()
        )))
    }
}

/// Waits for `chunk`, without the GIL, checking for Ctrl-C (and running Python's signal
/// handlers) every [`SIGNAL_CHECK`].
fn wait_for_chunk(py: Python<'_>, chunk: &stoker_formats::ChunkDone) -> PyResult<()> {
    while !py.detach(|| chunk.wait_timeout(SIGNAL_CHECK)) {
        crate::logging::deliver(py);
        py.check_signals()?;
    }
    Ok(())
}

/// The bytes of an encoded image, copied once from `bytes` or `bytearray` (the writer
/// keeps them until their chunk is converted, and a stored JPEG's bytes become its record),
/// or through a `memoryview` from any other buffer of one-byte items (a DLPack tensor's
/// through NumPy); of a sample over `max_file_size`, only the size.
fn image_bytes(image: &Bound<'_, PyAny>, max_file_size: u64) -> PyResult<Image> {
    // A sample the writer skips for its size is not copied (nor are its two copies made
    // through a memoryview): only its size is needed.
    let fits = |len: usize| len as u64 <= max_file_size;
    if let Ok(b) = image.cast::<PyBytes>() {
        let b = b.as_bytes();
        return Ok(match fits(b.len()) {
            true => Image::Bytes(b.to_vec()),
            false => Image::TooLarge(b.len() as u64),
        });
    }
    if let Ok(b) = image.cast::<PyByteArray>() {
        return Ok(match fits(b.len()) {
            true => Image::Bytes(b.to_vec()),
            false => Image::TooLarge(b.len() as u64),
        });
    }
    // The limited API this module is built for (abi3, Python 3.9) has no buffer protocol
    // before 3.11: a memoryview's `tobytes()` makes one more copy.
    let py = image.py();
    let memoryview = py.import("builtins")?.getattr("memoryview")?;
    let view = match memoryview.call1((image,)) {
        Ok(view) => view,
        // A torch tensor (what torchvision.io.read_file gives) has no buffer, but DLPack:
        // NumPy reads a host one without a copy.
        Err(_) if image.hasattr("__dlpack__")? => {
            let array = py
                .import("numpy")
                .and_then(|np| np.call_method1("from_dlpack", (image,)))
                .map_err(|e| {
                    PyTypeError::new_err(format!(
                        "image: a {} NumPy cannot take from host memory ({e}); give the encoded image's bytes (a GPU tensor: tensor.cpu())",
                        crate::args::type_name(image)
                    ))
                })?;
            memoryview.call1((array,))?
        }
        Err(_) => {
            return Err(PyTypeError::new_err(format!(
                "image must be the encoded image's bytes (bytes, bytearray, memoryview, a uint8 array or tensor), not {}",
                crate::args::type_name(image)
            )))
        }
    };
    let itemsize: usize = view.getattr("itemsize")?.extract()?;
    if itemsize != 1 {
        return Err(PyTypeError::new_err(format!(
            "image must be bytes of an encoded image; this buffer has items of {itemsize} bytes (an array of decoded pixels or of another dtype than uint8?)"
        )));
    }
    // Encoded bytes are one-dimensional: more dimensions are an image already decoded (an
    // HF dataset in numpy format), which would be skipped as "not an image" one by one.
    let ndim: usize = view.getattr("ndim")?.extract()?;
    if ndim != 1 {
        let shape = view.getattr("shape")?.repr()?;
        return Err(PyTypeError::new_err(format!(
            "image must be the encoded image's bytes (one dimension); this buffer has shape {shape}: decoded pixels? give the file's bytes (an HF Image column cast with decode=False)"
        )));
    }
    let len: usize = view.getattr("nbytes")?.extract()?;
    if !fits(len) {
        return Ok(Image::TooLarge(len as u64));
    }
    let bytes = view.call_method0("tobytes")?;
    Ok(Image::Bytes(bytes.cast::<PyBytes>()?.as_bytes().to_vec()))
}

/// A sample as `write` takes it.
enum Image {
    /// Its bytes, copied.
    Bytes(Vec<u8>),
    /// Its size, over the writer's `max_file_size`: skipped without being copied.
    TooLarge(u64),
}

/// A label as a class index: a Python or NumPy integer (anything with `__index__`) from 0
/// up. Not a bool: `True` would be stored as class 1 without a word.
fn class_index(label: &Bound<'_, PyAny>) -> PyResult<u32> {
    let above = format!("labels are class indices, at most {}", u32::MAX);
    let bounds =
        Bounds::between(0, u32::MAX.into()).saying("labels are class indices, from 0", &above);
    args::int(label, "label", bounds)
}

/// The exception for an error of the writer: a label without a class is the caller's
/// argument (`ValueError`), the rest as every other format error.
fn writer_error(e: FormatError) -> PyErr {
    match e {
        e @ FormatError::LabelOutOfRange { .. } => PyValueError::new_err(e.to_string()),
        e => format_error(e),
    }
}
