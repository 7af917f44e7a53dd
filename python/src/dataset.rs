//! `stoker.convert` and `stoker.Dataset`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use stoker_formats::{ConvertOptions, Encoding, Layout, Part, Progress, ResizeMode, Source};

use crate::args::{self, Bounds};
use crate::errors::format_error;
use crate::logging::Call;

/// `json.loads(text)`: the Rust reports are serde structs; their JSON is the dict.
pub(crate) fn json_to_py<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

// The signatures below write the formats crate's defaults as literals, so that Python's
// `help()` shows them (a path shows as `...`).
const _: () = assert!(stoker_formats::DEFAULT_SHARD_BYTES == 1_073_741_824);
const _: () = assert!(stoker_formats::DEFAULT_MAX_FILE_SIZE == 67_108_864);

/// Converts an image folder (one subdirectory per class), a list file or WebDataset tar
/// shards into a dataset of LMDB shards, like ``stoker convert``, and returns its report
/// as a dict with the keys of ``stoker convert --json`` (``inputs``, ``written``,
/// ``skipped``, ``shards``, ``bytes``, ``seconds``, ``audit``, ...).
///
/// Progress goes to stderr: a bar when it is a terminal (``progress=None``), always
/// (``True``: where stderr is no terminal, such as a job's log file, a line at the start
/// and then once a minute, ``progress: 120/500 images (24.0%) in 4 seconds, ...``) or
/// never (``False``). Options are the CLI's flags: ``list`` (a file of
/// ``path,label`` lines, paths relative to ``src`` or absolute), ``encoding`` ("jpeg" or "raw"), ``max_side``,
/// ``quality``, ``size`` ((width, height), raw encoding), ``resize`` ("shorter-side" or
/// "stretch"), ``jobs``, ``shard_size`` (bytes of records, at least 65536; LMDB's pages
/// make the file up to twice that for records of 2 to 4 KB; ``resume`` continues from the
/// last finished shard, so smaller shards lose less of an interrupted run), ``shards`` (by count:
/// each shard but the last holds ceil(inputs / shards) records, so there may be fewer, and
/// fewer still, with a ``UserWarning``, when shards would hold under 64 KiB; not with
/// ``shard_size``), ``resume``, ``strict``,
/// ``max_pixels``, ``max_file_size`` (bytes; larger inputs are skipped), ``gpu_friendly``,
/// ``check`` (test-decode stored JPEGs), ``shuffle`` (store the records in a random order
/// drawn from ``seed`` instead of class by class, so that ``Loader(shuffle="quasi")``
/// still mixes the classes in every batch), ``layout`` ("auto", "classes", "flat" or
/// "webdataset": ``src`` a ``.tar`` file or a folder of them, each sample's image read in
/// place and labelled by its ``cls`` member, skipped samples named ``TAR:MEMBER``; "auto"
/// picks it for a ``.tar`` file or a folder of only ``.tar`` files),
/// ``classes`` (the class names, label ``i`` naming ``classes[i]``: a list row's label may
/// then be a class name, and a class folder is labelled by its name; a list of str, a
/// ``stoker.Dataset`` or the path of a dataset, whose classes are taken (the train set's,
/// for its validation list or tree), or of a text file of one name a line),
/// ``part`` and ``parts`` (convert part ``part`` of ``parts`` into
/// ``out/part-IIIII-of-NNNNN/``, for :func:`merge`; unlike the CLI, Python does not read
/// them from Slurm's or Kubernetes' array variables: a training script may run in an
/// array for other reasons).
///
/// Raises ``TypeError`` for an argument of the wrong type (a bool is not an int),
/// ``ValueError`` for bad options (a number out of range, named by its keyword),
/// ``FileNotFoundError`` for a missing
/// source, ``OSError`` with its errno (``EMFILE``, ``ETIMEDOUT``, ...) or ``MemoryError``
/// when the conversion stops for no fault of its inputs (no file descriptor left, storage
/// that stopped answering, a full disk, no memory: ``resume=True`` goes on once that is
/// fixed),
/// ``stoker.StokerError`` for the rest (an output that already holds a
/// dataset, a bad input with ``strict=True``, ...). Ctrl-C stops the conversion
/// within a fraction of a second (``KeyboardInterrupt``); what was finished stays, and
/// ``resume=True`` continues it (stopped before its first record, a fresh conversion
/// leaves no output directory).
#[pyfunction]
#[pyo3(signature = (
    src, out, *, list=None, encoding="jpeg", max_side=None, quality=90, size=None,
    resize="shorter-side", jobs=None, shard_size=1_073_741_824,
    shards=None, resume=false, strict=false, max_pixels=100_000_000,
    max_file_size=67_108_864, gpu_friendly=false, check=true,
    shuffle=false, seed=None, layout="auto", part=None, parts=None, progress=None,
    classes=None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn convert<'py>(
    py: Python<'py>,
    src: Bound<'py, PyAny>,
    out: Bound<'py, PyAny>,
    list: Option<Bound<'py, PyAny>>,
    #[pyo3(from_py_with = args::encoding)] encoding: &str,
    #[pyo3(from_py_with = args::max_side)] max_side: Option<u32>,
    #[pyo3(from_py_with = args::quality)] quality: u8,
    #[pyo3(from_py_with = args::raw_size)] size: Option<(u32, u32)>,
    #[pyo3(from_py_with = args::resize_mode)] resize: &str,
    #[pyo3(from_py_with = args::jobs)] jobs: Option<usize>,
    #[pyo3(from_py_with = args::shard_size)] shard_size: u64,
    #[pyo3(from_py_with = args::shards)] shards: Option<u64>,
    #[pyo3(from_py_with = args::resume)] resume: bool,
    #[pyo3(from_py_with = args::strict)] strict: bool,
    #[pyo3(from_py_with = args::max_pixels)] max_pixels: u64,
    #[pyo3(from_py_with = args::max_file_size)] max_file_size: u64,
    #[pyo3(from_py_with = args::gpu_friendly)] gpu_friendly: bool,
    #[pyo3(from_py_with = args::check)] check: bool,
    #[pyo3(from_py_with = args::shuffle)] shuffle: bool,
    #[pyo3(from_py_with = args::convert_seed)] seed: Option<u64>,
    #[pyo3(from_py_with = args::source_layout)] layout: &str,
    part: Option<Bound<'py, PyAny>>,
    parts: Option<Bound<'py, PyAny>>,
    #[pyo3(from_py_with = args::progress)] progress: Option<bool>,
    classes: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let _logs = Call::new(py);
    // The CLI refuses the pair: `shards` would take over and `shard_size` go unused.
    if shards.is_some() && shard_size != stoker_formats::DEFAULT_SHARD_BYTES {
        return Err(PyValueError::new_err(
            "shard_size= and shards= both say how to cut the dataset: give one (shards= cuts it by count)",
        ));
    }
    let (src, out) = (args::path(&src, "src")?, args::path(&out, "out")?);
    let list = list.map(|l| args::path(&l, "list")).transpose()?;
    let source = match list {
        Some(list) => Source::List { root: src, list },
        None => Source::ImageFolder(src),
    };
    let mut opts = ConvertOptions::new(source, out);
    opts.classes = parse_classes(classes.as_ref())?;
    opts.encoding = parse_encoding(encoding)?;
    opts.resize = parse_resize(resize)?;
    opts.max_side = max_side;
    opts.quality = quality;
    opts.raw_size = size;
    opts.jobs = jobs;
    opts.shard_bytes = shard_size;
    opts.shards = shards;
    opts.resume = resume;
    opts.strict = strict;
    opts.max_pixels = max_pixels;
    opts.max_file_size = max_file_size;
    opts.gpu_friendly = gpu_friendly;
    opts.layout = layout
        .parse::<Layout>()
        .map_err(|e| PyValueError::new_err(format!("layout={e}")))?;
    opts.part = parse_part(part.as_ref(), parts.as_ref())?;
    opts.check_decode = check;
    opts.shuffle = match (shuffle, seed) {
        (true, seed) => Some(seed.unwrap_or(0)),
        (false, None) => None,
        (false, Some(_)) => {
            return Err(PyValueError::new_err(
                "seed= orders the records only with shuffle=True",
            ))
        }
    };
    let bar = Arc::new(Cancellable {
        bar: progress_bar(progress),
        cancel: AtomicBool::new(false),
        notes: Mutex::new(None),
        noted: Condvar::new(),
        listed: AtomicUsize::new(0),
    });
    let report = {
        let work_bar = Arc::clone(&bar);
        let convert = move || stoker_formats::convert(&opts, &*work_bar);
        let cancel = || bar.cancel.store(true, Ordering::Relaxed);
        let thread = ("stoker-convert", "the conversion's thread");
        crate::signals::interruptibly(py, thread, convert, |py| bar.raise_notes(py), cancel)?
            .map_err(format_error)?
    };
    // The report's warnings after the listing's are about what was written (fewer shards
    // than `shards=` asked): raised now, as the dataset is finished.
    for w in report
        .warnings
        .iter()
        .skip(bar.listed.load(Ordering::Relaxed))
    {
        crate::errors::warn(py, format!("stoker.convert: {w}"))?;
    }
    let json = serde_json::to_string(&report)
        .map_err(|e| crate::errors::StokerError::new_err(e.to_string()))?;
    json_to_py(py, &json)
}

/// The `encoding=` keyword of `convert` and `Writer`.
pub(crate) fn parse_encoding(encoding: &str) -> PyResult<Encoding> {
    match encoding {
        "jpeg" => Ok(Encoding::Jpeg),
        "raw" => Ok(Encoding::Raw),
        other => Err(PyValueError::new_err(format!(
            "encoding={other:?}: want \"jpeg\" or \"raw\""
        ))),
    }
}

/// The `resize=` keyword of `convert` and `Writer`.
pub(crate) fn parse_resize(resize: &str) -> PyResult<ResizeMode> {
    match resize {
        "shorter-side" => Ok(ResizeMode::ShorterSide),
        "stretch" => Ok(ResizeMode::Stretch),
        other => Err(PyValueError::new_err(format!(
            "resize={other:?}: want \"shorter-side\" or \"stretch\""
        ))),
    }
}

/// The part `part=`/`parts=` ask for (both or neither), as `convert` and `Writer` take them.
///
/// The values come as Python objects, not `u32`s, for a message that says what is wrong
/// with the two together (`part=3, parts=3`); each is read as every int argument is
/// ([`args::int`]: a bool is a `TypeError`, not part 1).
pub(crate) fn parse_part(
    part: Option<&Bound<'_, PyAny>>,
    parts: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Part>> {
    let (index, count) = match (part, parts) {
        (None, None) => return Ok(None),
        (Some(i), Some(n)) => (part_number("part", i)?, part_number("parts", n)?),
        _ => {
            return Err(PyValueError::new_err(
                "part= and parts= go together: part=I of parts=N",
            ))
        }
    };
    let max = i64::from(stoker_formats::MAX_PARTS);
    let reason = if count < 1 {
        "parts= must be at least 1".to_string()
    } else if count > max {
        format!("parts= is at most {max}")
    } else if index < 0 || index >= count {
        format!("part= must be 0 to parts - 1 (here 0 to {})", count - 1)
    } else {
        let (index, count) = (index as u32, count as u32);
        return Part::new(index, count).map(Some).map_err(format_error);
    };
    Err(PyValueError::new_err(format!(
        "part={index}, parts={count}: {reason}"
    )))
}

/// The integer given as `name=` (`part=` or `parts=`). Any `i64` passes, for
/// `parse_part` to say what is wrong with the two together; past it, the hint is the
/// bound that matters.
fn part_number(name: &str, value: &Bound<'_, PyAny>) -> PyResult<i64> {
    let above = match name {
        "part" => "it must be below parts=".to_string(),
        _ => format!("at most {} parts", stoker_formats::MAX_PARTS),
    };
    let bounds = Bounds::at_least(i64::MIN.into()).saying("it counts from 0", &above);
    args::int(value, name, bounds)
}

/// Merges the parts of a partitioned conversion (``convert(..., part=I, parts=N)``
/// into the same ``out``), or of a writing (``Writer(out, ..., part=I, parts=N)``), into
/// one dataset at ``out``, like ``stoker merge``, and
/// returns its report as a dict with the keys of ``stoker merge --json`` (``parts``,
/// ``samples``, ``shards``, ``bytes``, ...). ``parts`` lists the part directories
/// (default: every ``part-*`` directory under ``out``); they must be on ``out``'s file
/// system, since shards are linked, not copied (each is read once, to check it against
/// its part's digest).
///
/// Raises ``stoker.StokerError`` for parts that do not exist, are unfinished, missing,
/// duplicated or from different conversions, for a shard that is not the one its part
/// wrote (its digest differs), and for an ``out`` that holds no parts; ``OSError`` with
/// its errno when it stops for no fault of the parts (no file descriptor left, storage
/// that stopped answering, a full disk), the parts left whole.
#[pyfunction]
#[pyo3(signature = (out, parts=None))]
pub(crate) fn merge<'py>(
    py: Python<'py>,
    out: Bound<'py, PyAny>,
    #[pyo3(from_py_with = args::parts)] parts: Option<Vec<PathBuf>>,
) -> PyResult<Bound<'py, PyAny>> {
    let _logs = Call::new(py);
    let out = args::path(&out, "out")?;
    // The CLI's "no parts named" means every part; an empty list given here names none.
    if parts.as_ref().is_some_and(Vec::is_empty) {
        return Err(PyValueError::new_err(
            "parts=[] names no part: leave parts out to merge every part-* directory of out",
        ));
    }
    let parts = parts.unwrap_or_default();
    let report = py
        .detach(|| stoker_formats::merge(&out, &parts))
        .map_err(format_error)?;
    let json = serde_json::to_string(&report)
        .map_err(|e| crate::errors::StokerError::new_err(e.to_string()))?;
    json_to_py(py, &json)
}

/// `progress=`'s bar: on a terminal a bar; elsewhere (a job's log file, a pipe) a bar
/// draws nothing, so `True` writes a line a minute there, as the CLI does, and `None` stays
/// silent.
fn progress_bar(progress: Option<bool>) -> stoker_formats::convert::TerminalBar {
    use stoker_formats::convert::TerminalBar;
    let terminal = std::io::stderr().is_terminal();
    match progress {
        Some(true) if !terminal => TerminalBar::log_lines(
            std::time::Duration::from_secs(60),
            false,
            Box::new(std::io::stderr()),
        ),
        show => TerminalBar::new(show.unwrap_or(terminal), false),
    }
}

/// The progress bar, plus the flag that stops the conversion on Ctrl-C.
struct Cancellable {
    bar: stoker_formats::convert::TerminalBar,
    cancel: AtomicBool,
    /// The listing's warnings, handed from the conversion thread to the caller's, which
    /// raises them as `UserWarning`s while the conversion waits: a warning filter that
    /// makes them errors (`-W error`) then stops it before anything is written, not after
    /// the dataset is finished.
    notes: Mutex<Option<Vec<String>>>,
    /// Signalled when the caller's thread has raised `notes`.
    noted: Condvar,
    /// How many warnings the listing gave (the report's first ones).
    listed: AtomicUsize,
}

impl Cancellable {
    /// Raises the warnings handed over, if any (with the GIL), then lets the conversion
    /// go on; a warning raised as an exception cancels it and is returned.
    fn raise_notes(&self, py: Python<'_>) -> Option<PyErr> {
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        let pending = notes.take()?;
        let error = pending
            .into_iter()
            .find_map(|w| crate::errors::warn(py, format!("stoker.convert: {w}")).err());
        if error.is_some() {
            self.cancel.store(true, Ordering::Relaxed);
        }
        self.noted.notify_all();
        error
    }
}

impl Progress for Cancellable {
    fn start(&self, inputs: u64) {
        self.bar.start(inputs);
    }
    fn advance(&self, inputs: u64, bytes: u64) {
        self.bar.advance(inputs, bytes);
    }
    fn skipped(&self, path: &Path, reason: &str) {
        self.bar.skipped(path, reason);
    }
    fn warnings(&self, warnings: &[String]) {
        self.listed.store(warnings.len(), Ordering::Relaxed);
        if warnings.is_empty() {
            return;
        }
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        *notes = Some(warnings.to_vec());
        while notes.is_some() {
            notes = self.noted.wait(notes).unwrap_or_else(|p| p.into_inner());
        }
    }
    fn finish(&self) {
        self.bar.finish();
    }
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// A converted dataset, opened read-only: ``len(ds)``, ``ds.classes``, ``ds.manifest``
/// (the ``manifest.json`` as a dict), and ``ds[i]`` → ``(jpeg_or_raw_bytes, label)``
/// for inspection. Pass it (or its path) to ``stoker.Loader``.
///
/// Raises ``FileNotFoundError`` when ``path`` does not exist or is not a dataset (a file,
/// a folder of images, parts not yet merged: no ``manifest.json``; the message says
/// what to do) or when a shard its manifest lists is missing (the message says to run
/// ``stoker.verify``), ``stoker.StokerError`` when its manifest or shards are invalid. Pickles
/// as its path (a ``spawn``-started process reopens it).
#[pyclass(module = "stoker", frozen, weakref)]
pub(crate) struct Dataset {
    pub(crate) inner: stoker_formats::Dataset,
    /// Made once: `Dataset::reader` checks every shard, which `__getitem__` over thousands
    /// of shards paid for each record; it checks the record's own shard instead.
    reader: stoker_formats::DatasetReader,
}

impl Dataset {
    /// Refuses record `index`'s `label` where it names no class (a class list cut short,
    /// a record written by another tool): the loader refuses such a record, and a label
    /// past the list reaches a loss as an out-of-range class.
    fn labelled(&self, index: u64, label: u32) -> Result<(), stoker_formats::FormatError> {
        let classes = self.inner.manifest().classes.len();
        match stoker_formats::label_problem(label, classes) {
            Some(reason) => Err(stoker_formats::FormatError::InvalidRecord { index, reason }),
            None => Ok(()),
        }
    }

    /// The record `index` names, negative counting from the end; `IndexError` out of range.
    fn position(&self, index: isize) -> PyResult<u64> {
        let index = index as i64;
        let len = self.inner.len() as i64;
        let i = if index < 0 { index + len } else { index };
        if !(0..len).contains(&i) {
            return Err(PyIndexError::new_err(format!(
                "index {index} is out of range (dataset has {len} samples)"
            )));
        }
        Ok(i as u64)
    }
}

#[pymethods]
impl Dataset {
    #[new]
    fn new(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Self> {
        let _logs = Call::new(py);
        let path = args::path(path, "path")?;
        // Absolute from the start: a pickle made after a `chdir` must still name this
        // dataset, not whatever the relative path means then.
        let path = std::path::absolute(&path).unwrap_or(path);
        let (inner, reader) = py
            .detach(|| {
                let inner = stoker_formats::Dataset::open(&path)?;
                let reader = inner.reader()?;
                Ok((inner, reader))
            })
            .map_err(format_error)?;
        Ok(Dataset { inner, reader })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    /// ``(payload bytes, label)`` of record ``index`` (negative counts from the end).
    /// Raises ``stoker.StokerError`` for a damaged record, and for one whose label names
    /// no class (the loader refuses it; ``inspect_record`` reports it).
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::index)] index: isize,
    ) -> PyResult<(Bound<'py, PyBytes>, u32)> {
        let _logs = Call::often(py);
        let i = self.position(index)?;
        crate::signals::guard_shard_reads();
        self.inner.check_unchanged_at(i).map_err(format_error)?;
        let record = self.reader.get(i).map_err(format_error)?;
        if let Err(e) = record.check_crc() {
            // Zeros where a page could not be read: that is the error, not the CRC.
            self.reader.check_read(i).map_err(format_error)?;
            return Err(format_error(e));
        }
        let bytes = PyBytes::new(py, record.payload);
        // The copy came from the shard's map: its pages were still the file's.
        self.reader.check_read(i).map_err(format_error)?;
        let label = record.header.label;
        self.labelled(i, label).map_err(format_error)?;
        Ok((bytes, label))
    }

    /// Every record's label in index order (``labels()[i]`` is ``self[i][1]``), to choose
    /// records by class for ``Loader(indices=...)``: ``[i for i, l in
    /// enumerate(ds.labels()) if l in keep]``. Reads each record's header, not its image.
    /// Raises ``stoker.StokerError`` naming the first record whose header is damaged or
    /// whose label names no class (the loader refuses such records).
    fn labels(&self, py: Python<'_>) -> PyResult<Vec<u32>> {
        let _logs = Call::new(py);
        crate::signals::guard_shard_reads();
        self.inner.check_unchanged().map_err(format_error)?;
        py.detach(|| {
            (0..self.inner.len())
                .map(|i| {
                    let label = self.reader.get(i)?.header.label;
                    // A page that could not be read reads as zeros: no label at all.
                    self.reader.check_read(i)?;
                    self.labelled(i, label)?;
                    Ok(label)
                })
                .collect::<Result<Vec<u32>, stoker_formats::FormatError>>()
        })
        .map_err(format_error)
    }

    /// The input record ``index`` came from (negative counts from the end), relative to
    /// the folder converted: ``class/file.jpg``, a list file's row, ``SHARD.tar:MEMBER``;
    /// ``stoker.Writer``'s ``name`` of the sample; ``None`` when the dataset has no source
    /// map (made by a stoker before maps were written). Raises ``IndexError`` out of range and
    /// ``stoker.StokerError`` when the map is damaged.
    ///
    /// A ``str`` exactly as stored (a name that is not UTF-8 as ``os.fsdecode`` gives it), not
    /// a ``pathlib.Path``: a Path rewrote names (``https://x//a.jpg`` lost slashes, ``./a.jpg``
    /// its ``./``), and a name no longer matched the metadata it came with.
    fn source_of(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::index)] index: isize,
    ) -> PyResult<Option<std::ffi::OsString>> {
        let _logs = Call::new(py);
        let i = self.position(index)?;
        let name = py
            .detach(|| self.inner.source_of(i))
            .map_err(format_error)?;
        Ok(name.map(PathBuf::into_os_string))
    }

    /// Record ``index`` (negative counts from the end) as ``stoker inspect DATASET
    /// --record N --json`` reports it, a dict: ``index``, ``shard``, ``source`` (as
    /// ``source_of`` gives it, as text), ``record`` (``label``, ``class``, ``encoding``,
    /// ``width``, ``height``, ``channels``, ``payload_bytes``, ``crc_ok``; ``None`` when
    /// the record cannot be read), ``problem`` (why not, or a payload that fails its
    /// CRC; ``None`` for a sound record) and ``source_problem`` (why a damaged or missing
    /// source map could not give ``source``; ``None`` when it could). A raw record's bytes (``ds[i][0]``) are its
    /// pixels, ``(height, width, channels)`` in row order. Raises ``IndexError`` out of
    /// range and ``stoker.StokerError`` when a shard was changed since the dataset was opened.
    fn inspect_record<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::index)] index: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _logs = Call::new(py);
        let i = self.position(index)?;
        crate::signals::guard_shard_reads();
        let report = py
            .detach(|| stoker_formats::inspect_record_with(&self.inner, &self.reader, i))
            .map_err(format_error)?;
        let json = serde_json::to_string(&report)
            .map_err(|e| crate::errors::StokerError::new_err(e.to_string()))?;
        json_to_py(py, &json)
    }

    /// Class names; label ``i`` is ``classes[i]``.
    #[getter]
    fn classes(&self) -> Vec<String> {
        self.inner.manifest().classes.clone()
    }

    /// The dataset's ``manifest.json`` as a dict.
    #[getter]
    fn manifest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &self.inner.manifest().to_json())
    }

    /// The dataset directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.root().to_path_buf()
    }

    /// Pickled as `stoker.Dataset(path)`: the shards are read-only files, so reopening
    /// them by path in another process gives the same dataset.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (PathBuf,))> {
        Ok((
            slf.get_type().into_any(),
            (slf.get().inner.root().to_path_buf(),),
        ))
    }

    fn __repr__(&self) -> String {
        repr(
            self.inner.root(),
            self.inner.len(),
            self.inner.manifest().classes.len(),
        )
    }
}

fn repr(root: &Path, len: u64, classes: usize) -> String {
    format!(
        "stoker.Dataset({:?}, samples={len}, classes={classes})",
        root.display().to_string()
    )
}

/// `convert(classes=...)`: a list of names, a `stoker.Dataset`'s classes, or the path of
/// a dataset or of a file of names (`stoker_formats::convert::class_names`).
fn parse_classes(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<String>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if let Ok(ds) = value.cast::<Dataset>() {
        return Ok(Some(ds.get().inner.manifest().classes.clone()));
    }
    if args::is_path_by_type(value)? {
        let path = args::path(value, "classes")?;
        return stoker_formats::convert::class_names(&path)
            .map(Some)
            .map_err(format_error);
    }
    let iter = value.try_iter().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "classes= takes a list of class names, a stoker.Dataset, or the path of a dataset or of a file of names, not {}",
            args::type_name(value)
        ))
    })?;
    let mut names = Vec::new();
    for (i, item) in iter.enumerate() {
        // A dataset has at most 2^20 classes: an endless iterator stops there, and Ctrl-C
        // stops a long one.
        if i % (1 << 16) == (1 << 16) - 1 {
            value.py().check_signals()?;
        }
        if i >= 1 << 20 {
            return Err(PyValueError::new_err(
                "classes= holds more than 1048576 names, the most a dataset may have: an endless iterator?",
            ));
        }
        let item = item?;
        let name = item.extract::<String>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "classes[{i}] is of type {}, not a class name (a str)",
                args::type_name(&item)
            ))
        })?;
        names.push(name);
    }
    Ok(Some(names))
}
