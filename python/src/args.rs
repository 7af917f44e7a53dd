//! Arguments, checked before they become Rust settings: numbers, text and flags, paths
//! and DLPack's `stream=`, each error naming its keyword in the message itself (PyO3
//! names it only in the exception's `__notes__`, which `str(e)` and log lines omit).
//!
//! PyO3 alone takes `True` for the int 1 (a bool is an int to Python), so
//! `Loader(batch_size=True)` made batches of one and `hflip=True` flipped every image;
//! it raises a bare `OverflowError` for `jobs=-1`, whose message does not name the
//! keyword. Here a bool or another type is a `TypeError`, and a value out of range (or a
//! float that is not finite) a `ValueError`, each naming the keyword.
//!
//! The keywords with a range have their extractor below, for
//! `#[pyo3(from_py_with = args::NAME)]`: the signature keeps its default
//! (`quality=90`), and the ranges are in one list. The bounds the Rust options check
//! again with more to say (`jobs` past the most threads, `shard_size` under 64 KiB,
//! `size` past 16384) are left to them.

use std::path::PathBuf;

use pyo3::exceptions::{PyIndexError, PyMemoryError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyString};

/// The integer types arguments become.
pub(crate) trait Int: TryFrom<i128> {
    /// The type's largest value.
    const MAX: i128;
}

macro_rules! int_types {
    ($($t:ty),*) => { $(impl Int for $t { const MAX: i128 = <$t>::MAX as i128; })* };
}
int_types!(u8, u32, u64, usize, i64);

/// The values an int argument takes, and what a value outside them is told.
#[derive(Clone, Copy)]
pub(crate) struct Bounds<'a> {
    min: i128,
    /// `None`: the type's largest value.
    max: Option<i128>,
    /// Said of a value below `min` or above `max` instead of the bound itself, where
    /// the bound is not the point (`part=`: "it is below parts=").
    below: Option<&'a str>,
    above: Option<&'a str>,
}

impl<'a> Bounds<'a> {
    /// `min` up to the type's largest value.
    pub(crate) fn at_least(min: i128) -> Self {
        Bounds {
            min,
            max: None,
            below: None,
            above: None,
        }
    }

    /// `min` to `max`.
    pub(crate) fn between(min: i128, max: i128) -> Self {
        Bounds {
            max: Some(max),
            ..Bounds::at_least(min)
        }
    }

    /// What a value below, or above, the bounds is told.
    pub(crate) fn saying(self, below: &'a str, above: &'a str) -> Self {
        Bounds {
            below: Some(below),
            above: Some(above),
            ..self
        }
    }
}

/// `value`, the argument `name=`, as a `T` within `bounds`: a `TypeError` for a bool or
/// a non-integer, a `ValueError` out of range. Anything with `__index__` (a NumPy
/// integer) is an int.
pub(crate) fn int<T: Int>(value: &Bound<'_, PyAny>, name: &str, bounds: Bounds<'_>) -> PyResult<T> {
    refuse_bool(value, name, "an int")?;
    let max = bounds.max.unwrap_or(T::MAX).min(T::MAX);
    // The int itself first, as Python's own int arguments take it (`operator.index`):
    // PyO3's 128-bit extraction of an object with `__index__` also asks it for `>>`.
    let int = if value.is_instance_of::<PyInt>() {
        value.clone()
    } else {
        value
            .py()
            .import("operator")?
            .call_method1("index", (value,))
            .map_err(|_| wrong_type(value, name, "an int"))?
    };
    // `None`: past the 128-bit ints, and out of range.
    let n = match int.extract::<i128>() {
        Ok(n) => Some(n),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => None,
        Err(_) => return Err(wrong_type(value, name, "an int")),
    };
    let fits = n.filter(|n| (bounds.min..=max).contains(n));
    if let Some(n) = fits.and_then(|n| T::try_from(n).ok()) {
        return Ok(n);
    }
    let negative = n.map_or_else(|| int.lt(0).unwrap_or(false), |n| n < 0);
    let below = n.map_or(negative, |n| n < bounds.min);
    let what = match (below, negative) {
        (true, true) => "a negative int",
        (true, false) => "too small",
        (false, _) => "too large",
    };
    let range = match bounds.max {
        Some(max) => format!("want {} to {max}", bounds.min),
        None if below => format!("want at least {}", bounds.min),
        None => format!("want at most {max}"),
    };
    let hint = match (below, bounds.below, bounds.above) {
        (true, Some(hint), _) | (false, _, Some(hint)) => hint.to_string(),
        _ => range,
    };
    Err(PyValueError::new_err(format!(
        "{name}={} is {what}: {hint}",
        shown(value)
    )))
}

/// `value`, the argument `name=`, as a float for which `ok` holds (`want` says which):
/// a `TypeError` for a bool or a non-number, a `ValueError` otherwise. An int is a
/// float, as everywhere in Python.
pub(crate) fn float(
    value: &Bound<'_, PyAny>,
    name: &str,
    ok: impl Fn(f64) -> bool,
    want: &str,
) -> PyResult<f64> {
    refuse_bool(value, name, "a float")?;
    match value.extract::<f64>() {
        Ok(x) if ok(x) => Ok(x),
        Ok(_) => Err(PyValueError::new_err(format!(
            "{name}={}: want {want}",
            shown(value)
        ))),
        // An int past the floats.
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => Err(PyValueError::new_err(
            format!("{name}={} is too large: want {want}", shown(value)),
        )),
        Err(_) => Err(wrong_type(value, name, "a float")),
    }
}

/// The `TypeError` for a bool given where `kind` (an int, a float) is wanted.
fn refuse_bool(value: &Bound<'_, PyAny>, name: &str, kind: &str) -> PyResult<()> {
    // NumPy's bool is no Python bool, but it converts to 1.0 as quietly.
    let ty = value.get_type();
    let numpy_bool = ty.module().is_ok_and(|m| m == "numpy")
        && ty.name().is_ok_and(|n| n == "bool" || n == "bool_");
    // Nor is a torch tensor of bools (`torch.tensor(True)`, a mask's element).
    let torch_bool = ty.module().is_ok_and(|m| m == "torch")
        && value
            .getattr("dtype")
            .and_then(|d| d.str().map(|s| s.to_string()))
            .is_ok_and(|d| d == "torch.bool");
    if value.is_instance_of::<PyBool>() || numpy_bool || torch_bool {
        return Err(PyTypeError::new_err(format!(
            "{name}={value} is a bool: {name}= takes {kind}"
        )));
    }
    Ok(())
}

/// A str given as `name=`, named in the error: a `TypeError` for another type, a
/// `ValueError` for a str that cannot be UTF-8 (a lone surrogate, as `os.fsdecode` makes of
/// undecodable bytes), where PyO3 alone says "takes a str, not str" or a bare
/// `UnicodeEncodeError`.
pub(crate) fn text(value: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    if !value.is_instance_of::<PyString>() {
        return Err(wrong_type(value, name, "a str"));
    }
    value.extract::<String>().map_err(|e| {
        PyValueError::new_err(format!(
            "{name}={} is not UTF-8 text: {}",
            value.repr().map(|r| r.to_string()).unwrap_or_default(),
            e.value(value.py())
        ))
    })
}

/// Text given as `name=` (a state dict's `order`, `dataset`) parsed into a `T`; `None`
/// stays `None`.
pub(crate) fn parsed<T: std::str::FromStr<Err = String>>(
    value: Option<Bound<'_, PyAny>>,
    name: &str,
) -> PyResult<Option<T>> {
    value
        .map(|v| text(&v, name)?.parse().map_err(PyValueError::new_err))
        .transpose()
}

/// A bool given as `name=` (Python's or NumPy's; not an int), named in the error.
pub(crate) fn boolean(value: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    value
        .extract::<bool>()
        .map_err(|_| wrong_type(value, name, "a bool"))
}

/// A str given as `name=` that must be one of `choices`, as the spelling in `choices`: a
/// `TypeError` for another type and a `ValueError` for another str, each naming `name=`
/// (PyO3 alone named the keyword only in the exception's `__notes__`). `&'static`, so
/// that the signature keeps its literal default (`encoding="jpeg"`), which `help()` shows.
pub(crate) fn choice(
    value: &Bound<'_, PyAny>,
    name: &str,
    choices: &[&'static str],
) -> PyResult<&'static str> {
    let got = text(value, name)?;
    if let Some(&known) = choices.iter().find(|&&c| c == got) {
        return Ok(known);
    }
    let quoted: Vec<String> = choices.iter().map(|c| format!("{c:?}")).collect();
    let want = match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "nothing".to_owned(),
    };
    Err(PyValueError::new_err(format!(
        "{name}={got:?}: want {want}"
    )))
}

fn wrong_type(value: &Bound<'_, PyAny>, name: &str, kind: &str) -> PyErr {
    PyTypeError::new_err(format!("{name}= takes {kind}, not {}", type_name(value)))
}

/// `str(value)`, or nothing where Python refuses it (an int past 4300 digits).
fn shown(value: &Bound<'_, PyAny>) -> String {
    value.str().map(|s| s.to_string()).unwrap_or_default()
}

/// `None`, or `value` through `get`.
fn optional<T>(
    value: &Bound<'_, PyAny>,
    get: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Option<T>> {
    if value.is_none() {
        return Ok(None);
    }
    get(value).map(Some)
}

/// Two values, `name[0]` and `name[1]`, through `get`.
fn pair<T>(
    value: &Bound<'_, PyAny>,
    name: &str,
    get: impl Fn(&Bound<'_, PyAny>, &str) -> PyResult<T>,
) -> PyResult<(T, T)> {
    let [a, b] = items::<2>(value, name)?;
    Ok((
        get(&a, &format!("{name}[0]"))?,
        get(&b, &format!("{name}[1]"))?,
    ))
}

/// The `N` items of a tuple or list given as `name=`.
fn items<'py, const N: usize>(
    value: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<[Bound<'py, PyAny>; N]> {
    let what = format!("a tuple of {N} numbers");
    let len = sequence(value, name, &what)?;
    if len != N {
        return Err(PyValueError::new_err(format!(
            "{name}= takes {N} numbers, not {len}"
        )));
    }
    let mut out = Vec::with_capacity(N);
    for i in 0..N {
        out.push(value.get_item(i)?);
    }
    Ok(out
        .try_into()
        .unwrap_or_else(|_| unreachable!("N items were read")))
}

/// Up to `max` items of a sequence given as `name=`, each through `get` (given the item
/// and its index).
///
/// Not PyO3's `Vec` extraction, which reserves as many slots as the sequence says it has
/// before reading any: `classes=range(10**12)` aborted the process on that allocation.
/// Here the length is checked against `max` first and nothing is reserved by it, so a
/// long lazy sequence of the wrong items stops at its first item; the list grows as
/// items come, and a growth the allocator refuses is a `MemoryError`, not an abort.
pub(crate) fn list<'py, T>(
    value: &Bound<'py, PyAny>,
    name: &str,
    what: &str,
    max: usize,
    get: impl Fn(&Bound<'py, PyAny>, usize) -> PyResult<T>,
) -> PyResult<Vec<T>> {
    let len = sequence(value, name, what)?;
    if len > max {
        return Err(PyValueError::new_err(format!(
            "{name}= has {len} items: at most {max}"
        )));
    }
    let mut out = Vec::new();
    for i in 0..len {
        let item = get(&value.get_item(i)?, i)?;
        out.try_reserve(1).map_err(|_| {
            PyMemoryError::new_err(format!("{name}=: out of memory after {i} items"))
        })?;
        out.push(item);
    }
    Ok(out)
}

/// Whether `value` is a sequence (a list, tuple, range, NumPy array; not a str, whose
/// items would be its characters) and its length, or the `TypeError` saying `name=` takes
/// `what`.
fn sequence(value: &Bound<'_, PyAny>, name: &str, what: &str) -> PyResult<usize> {
    let wrong = || PyTypeError::new_err(format!("{name}= takes {what}, not {}", type_name(value)));
    // The C API's check, which PyO3's own `Vec` extraction makes: true for whatever has
    // `__getitem__` and is not a dict (a NumPy array is no `collections.abc.Sequence`,
    // which `cast::<PySequence>` asks for).
    // SAFETY: `value` is a live object for the call; `PySequence_Check` only reads its
    // type's slots and cannot fail.
    let is_sequence = unsafe { pyo3::ffi::PySequence_Check(value.as_ptr()) } == 1;
    // An array of another library (a torch tensor: `mean=torch.tensor(...)`, as
    // `indices=` takes one) indexes through the mapping slots, not the sequence ones.
    let is_array = !value.is_instance_of::<PyDict>()
        && value.hasattr("tolist").unwrap_or(false)
        // SAFETY: as above, for the mapping slots.
        && unsafe { pyo3::ffi::PyMapping_Check(value.as_ptr()) } == 1;
    if !(is_sequence || is_array) || value.is_instance_of::<PyString>() {
        return Err(wrong());
    }
    value.len().map_err(|_| wrong())
}

/// The name of `value`'s type, for messages.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}

// The keywords. Counts start at 1; seeds, ranks and epochs at 0.

/// `quality=` of `convert` and `Writer`.
pub(crate) fn quality(v: &Bound<'_, PyAny>) -> PyResult<u8> {
    int(v, "quality", Bounds::between(1, 100))
}

/// `max_side=` of `convert` and `Writer` (the JPEG limit).
pub(crate) fn max_side(v: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
    let max = i128::from(stoker_formats::MAX_SIDE);
    optional(v, |v| int(v, "max_side", Bounds::between(1, max)))
}

/// `size=(width, height)` of `convert` and `Writer` (raw records).
pub(crate) fn raw_size(v: &Bound<'_, PyAny>) -> PyResult<Option<(u32, u32)>> {
    optional(v, |v| {
        let max = i128::from(stoker_formats::MAX_SIDE);
        pair(v, "size", |v, name| int(v, name, Bounds::between(1, max)))
    })
}

/// `jobs=` of `convert` and `Writer`.
pub(crate) fn jobs(v: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    optional(v, |v| int(v, "jobs", Bounds::at_least(1)))
}

/// `shard_size=` of `convert` and `Writer`.
pub(crate) fn shard_size(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    int(v, "shard_size", Bounds::at_least(1))
}

/// `shards=` of `convert`.
pub(crate) fn shards(v: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    optional(v, |v| int(v, "shards", Bounds::at_least(1)))
}

/// `max_pixels=` of `convert` and `Writer`.
pub(crate) fn max_pixels(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    int(v, "max_pixels", Bounds::at_least(1))
}

/// `max_file_size=` of `convert` and `Writer`.
pub(crate) fn max_file_size(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    int(v, "max_file_size", Bounds::at_least(1))
}

/// `seed=` of `convert`.
pub(crate) fn convert_seed(v: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    optional(v, seed)
}

/// `seed=` of `Loader`.
pub(crate) fn seed(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    int(v, "seed", Bounds::at_least(0))
}

/// `batch_size=` of `Loader`.
pub(crate) fn batch_size(v: &Bound<'_, PyAny>) -> PyResult<usize> {
    int(v, "batch_size", Bounds::at_least(1))
}

/// `quasi_block=` of `Loader`.
pub(crate) fn quasi_block(v: &Bound<'_, PyAny>) -> PyResult<u32> {
    int(v, "quasi_block", Bounds::at_least(1))
}

/// `size=` of `Loader` (the output side).
pub(crate) fn crop_size(v: &Bound<'_, PyAny>) -> PyResult<u32> {
    int(v, "size", Bounds::at_least(1))
}

/// `resize=` of `Loader`.
pub(crate) fn resize(v: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
    optional(v, |v| int(v, "resize", Bounds::at_least(1)))
}

/// `rank=` of `Loader`.
pub(crate) fn rank(v: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    optional(v, |v| int(v, "rank", Bounds::at_least(0)))
}

/// `world_size=` of `Loader`.
pub(crate) fn world_size(v: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    optional(v, |v| int(v, "world_size", Bounds::at_least(1)))
}

/// `prefetch=` of `Loader`.
pub(crate) fn prefetch(v: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    optional(v, |v| int(v, "prefetch", Bounds::at_least(1)))
}

/// `workers=` of `Loader`.
pub(crate) fn workers(v: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    optional(v, |v| int(v, "workers", Bounds::at_least(1)))
}

/// `pinned_memory=` of `Loader`.
pub(crate) fn pinned_memory(v: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    optional(v, |v| int(v, "pinned_memory", Bounds::at_least(1)))
}

/// `page_lock_limit=` of `Loader` (0: stage every record).
pub(crate) fn page_lock_limit(v: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    optional(v, |v| int(v, "page_lock_limit", Bounds::at_least(0)))
}

/// `epoch` of `Loader.set_epoch`, `Loader.epoch` and `loader.sampler.set_epoch`.
pub(crate) fn epoch(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    int(v, "epoch", Bounds::at_least(0))
}

/// The most bytes of `manifest.json` a dataset is opened with.
const MANIFEST_BYTES: usize = stoker_formats::MAX_MANIFEST_BYTES as usize;
/// What a class name costs besides its UTF-8 bytes, counted against [`MANIFEST_BYTES`]:
/// its `String` (24 bytes) and its heap block's least overhead. More than the 3 bytes it
/// takes in the manifest (two quotes and a comma); a name of characters JSON escapes
/// takes more there than its UTF-8 bytes, which this bound does not count.
const CLASS_COST: usize = 32;

/// `classes=` of `Writer`: class names, each counted as its UTF-8 bytes and
/// [`CLASS_COST`], at most [`MANIFEST_BYTES`] in all: what a dataset's manifest can hold,
/// and a bound on what the copy of the names takes here. A lazy sequence claiming 4e9 cheap
/// names (the label range, the bound before) was read in full, its memory growing until
/// the OOM killer ended the process, and 60 million one-letter names (240 MB by the
/// manifest's count) took 3.4 GB; now more than 8,388,608 names are refused before the
/// first is read, and names past the bound stop where they cross it, each measured before
/// it is copied.
pub(crate) fn classes(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<String>>> {
    optional(v, |v| {
        let spent = std::cell::Cell::new(0usize);
        let over = |i: usize| {
            PyValueError::new_err(format!(
                "classes= is over the limit of {} MiB of class names (each counted as its \
                 UTF-8 bytes and {CLASS_COST} more) at classes[{i}]: a dataset's manifest \
                 holds no more",
                MANIFEST_BYTES >> 20
            ))
        };
        list(
            v,
            "classes",
            "a list of str",
            MANIFEST_BYTES / CLASS_COST,
            |item, i| {
                // A str's length in characters is at most its UTF-8 length: one over the
                // bound by that is refused before it is copied.
                if let Ok(s) = item.cast::<PyString>() {
                    if s.len()?.saturating_add(CLASS_COST) > MANIFEST_BYTES - spent.get() {
                        return Err(over(i));
                    }
                }
                let name = text(item, &format!("classes[{i}]"))?;
                let cost = name.len() + CLASS_COST;
                if cost > MANIFEST_BYTES - spent.get() {
                    return Err(over(i));
                }
                spent.set(spent.get() + cost);
                Ok(name)
            },
        )
    })
}

/// A path given as `name=`, as `open()` takes one: a str, `bytes` (the file name's own
/// bytes, which need not be UTF-8 on Unix) or an `os.PathLike` whose `__fspath__` gives
/// either; another type is a `TypeError` naming `name=`. One holding a NUL byte is a
/// `ValueError`, as Python's own file functions refuse it ("embedded null byte"): no file
/// name can hold one, and the operating system's refusal came back as a
/// `stoker.StokerError` whose message showed the NUL as nothing.
///
/// Not PyO3's `PathBuf` extraction, which refused `bytes` (`b"ds-\xff"`, a directory
/// `os.listdir(b".")` names) with a message that did not name the argument.
pub(crate) fn path(value: &Bound<'_, PyAny>, name: &str) -> PyResult<PathBuf> {
    let py = value.py();
    // A value that is a path by type but whose `__fspath__` failed keeps that error: the
    // message of the user's own `__fspath__` is what says why.
    let path_by_type = is_path_by_type(value)?;
    let fspath = py
        .import("os")?
        .call_method1("fspath", (value,))
        .map_err(|e| {
            if e.is_instance_of::<PyTypeError>(py) && !path_by_type {
                wrong_type(value, name, "a path")
            } else {
                e
            }
        })?;
    let path = match fspath.cast::<PyBytes>() {
        Ok(bytes) => path_of_bytes(bytes)?,
        Err(_) => fspath.extract::<PathBuf>()?,
    };
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(PyValueError::new_err(format!(
            "{name}={:?}: a path cannot hold a NUL byte",
            path.display().to_string()
        )));
    }
    Ok(path)
}

/// Whether `value` is a path by its type (str, bytes, or a type with `__fspath__`, where
/// `os.fspath` looks): a `TypeError` from [`path`] for such a one is the user's own
/// `__fspath__`'s, whose message says why, and is kept as it is.
pub(crate) fn is_path_by_type(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>()
        || value.get_type().hasattr("__fspath__")?)
}

/// The path a `bytes` file name stands for: on Unix its bytes as they are.
#[cfg(unix)]
fn path_of_bytes(bytes: &Bound<'_, PyBytes>) -> PyResult<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    Ok(std::ffi::OsStr::from_bytes(bytes.as_bytes()).into())
}

/// The path a `bytes` file name stands for: elsewhere what `os.fsdecode` makes of it, as
/// Python's own file functions take it.
#[cfg(not(unix))]
fn path_of_bytes(bytes: &Bound<'_, PyBytes>) -> PyResult<PathBuf> {
    bytes
        .py()
        .import("os")?
        .call_method1("fsdecode", (bytes,))?
        .extract()
}

/// The str keywords with a fixed set of values, each an extractor for
/// `#[pyo3(from_py_with = args::NAME)]` (see [`choice`]).
macro_rules! choices {
    ($($(#[$doc:meta])* $f:ident = $name:literal [$($c:literal),+];)*) => {$(
        $(#[$doc])*
        pub(crate) fn $f(v: &Bound<'_, PyAny>) -> PyResult<&'static str> {
            choice(v, $name, &[$($c),+])
        }
    )*};
}

choices! {
    /// `encoding=` of `convert` and `Writer`.
    encoding = "encoding" ["jpeg", "raw"];
    /// `resize=` of `convert` and `Writer`.
    resize_mode = "resize" ["shorter-side", "stretch"];
    /// `layout=` of `convert`: how the source is laid out.
    source_layout = "layout" ["auto", "classes", "flat", "webdataset"];
    /// `crop=` of `Loader`.
    crop = "crop" ["random", "center"];
    /// `on_error=` of `Loader`.
    on_error = "on_error" ["replace", "raise"];
    /// `gpu_waits=` of `Loader`.
    gpu_waits = "gpu_waits" ["auto", "spin", "block"];
}

/// `layout=` of `Loader` (checked with `dtype=`).
pub(crate) fn output_layout(v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    optional(v, |v| text(v, "layout"))
}

/// The bool keywords, each an extractor for `#[pyo3(from_py_with = args::NAME)]` that
/// names its keyword in the `TypeError` (PyO3 alone named it only in `__notes__`).
macro_rules! flags {
    ($($(#[$doc:meta])* $f:ident;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $f(v: &Bound<'_, PyAny>) -> PyResult<bool> {
            boolean(v, stringify!($f))
        }
    )*};
}

flags! {
    /// `resume=` of `convert`.
    resume;
    /// `strict=` of `convert` and `Writer`.
    strict;
    /// `gpu_friendly=` of `convert` and `Writer`.
    gpu_friendly;
    /// `check=` of `convert` and `Writer`.
    check;
    /// `shuffle=` of `convert`.
    shuffle;
    /// `drop_last=` of `Loader`.
    drop_last;
    /// `prefetch_next_epoch=` of `Loader`.
    prefetch_next_epoch;
    /// `decode=` of `verify`.
    decode;
}

/// `progress=` of `convert` (`None`: when stderr is a terminal).
pub(crate) fn progress(v: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
    optional(v, |v| boolean(v, "progress"))
}

/// `copy=` of `__dlpack__`.
pub(crate) fn copy(v: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
    optional(v, |v| boolean(v, "copy"))
}

/// `stream=` of `__dlpack__`, as the Python array API standard has it: `None`, or an
/// int of at least -1 (-1: no synchronization; CUDA's 1 and 2: the legacy and
/// per-thread default streams; above 2, a stream handle), 0 being disallowed as
/// ambiguous. A bool or another type is a `TypeError` (as PyTorch's), and any other int
/// a `ValueError` naming `stream=`, on either device (`stream=2**70` was a bare
/// `OverflowError`); host batches then take only `None` and -1 ([`host_stream`]). A
/// handle is a pointer, which user space keeps under 2**63.
pub(crate) fn stream(v: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    const WANT: &str = "want None, -1 (no synchronization), 1 or 2 (CUDA's legacy and \
                        per-thread default streams) or a stream handle above 2";
    optional(v, |v| {
        let bounds = Bounds::at_least(-1).saying(WANT, "a stream handle is at most 2**63 - 1");
        let stream: i64 = int(v, "stream", bounds)?;
        if stream == 0 {
            return Err(PyValueError::new_err(format!(
                "stream=0 is ambiguous in DLPack and disallowed: {WANT}"
            )));
        }
        Ok(stream)
    })
}

/// `stream=` given to a host batch's `__dlpack__`: the array API standard accepts only
/// `None` "on CPU and other device types without streams"; -1 (no synchronization) is
/// taken too, as PyTorch's CPU tensors take it. Another stream is a `BufferError`, as
/// NumPy raises: a consumer that follows the protocol asks `__dlpack_device__` first and
/// passes no stream for host memory, so one passed means it took the batch for a GPU's.
pub(crate) fn host_stream(stream: Option<i64>) -> PyResult<()> {
    match stream {
        None | Some(-1) => Ok(()),
        Some(s) => Err(pyo3::exceptions::PyBufferError::new_err(format!(
            "stream={s}: these are host (CPU) memory, which has no stream; pass None"
        ))),
    }
}

/// `source=` of `Writer`, recorded in the manifest.
pub(crate) fn source(v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    optional(v, |v| text(v, "source"))
}

/// `name=` of `Writer.write`, what the report calls a skipped sample.
pub(crate) fn sample_name(v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    optional(v, |v| text(v, "name"))
}

/// `parts=` of `merge`: part directories, at most as many as a conversion has parts.
pub(crate) fn parts(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<PathBuf>>> {
    optional(v, |v| {
        let max = stoker_formats::MAX_PARTS as usize;
        list(v, "parts", "a list of paths", max, |item, i| {
            path(item, &format!("parts[{i}]"))
        })
    })
}

/// A sequence index (`Dataset[i]`, `labels[i]`, `batch[i]`), taken as a list takes one: a
/// bool is an int there, and an int past the index range is an `IndexError`, where PyO3
/// alone raises a bare `OverflowError`.
pub(crate) fn index(v: &Bound<'_, PyAny>) -> PyResult<isize> {
    match v.extract::<isize>() {
        Ok(i) => Ok(i),
        Err(e) if e.is_instance_of::<PyOverflowError>(v.py()) => Err(PyIndexError::new_err(
            format!("index {} is out of range", shown(v)),
        )),
        Err(_) => Err(PyTypeError::new_err(format!(
            "indices must be integers, not {}",
            type_name(v)
        ))),
    }
}

/// A fraction from 0 to 1.
fn fraction(x: f64) -> bool {
    (0.0..=1.0).contains(&x)
}

/// `hflip=` of `Loader`, a probability.
pub(crate) fn hflip(v: &Bound<'_, PyAny>) -> PyResult<f64> {
    float(v, "hflip", fraction, "a probability from 0.0 to 1.0")
}

/// `gpu_cpu_share=` of `Loader` (the builder would clamp; a value outside is more likely
/// a mistake).
pub(crate) fn gpu_cpu_share(v: &Bound<'_, PyAny>) -> PyResult<Option<f32>> {
    optional(v, |v| {
        float(v, "gpu_cpu_share", fraction, "a fraction from 0.0 to 1.0").map(|x| x as f32)
    })
}

/// `scale=(lo, hi)` of `Loader`, fractions of the image's area (`lo <= hi` is the
/// transform's check).
pub(crate) fn scale(v: &Bound<'_, PyAny>) -> PyResult<Option<(f64, f64)>> {
    optional(v, |v| {
        pair(v, "scale", |v, name| {
            float(
                v,
                name,
                |x| x > 0.0 && x <= 1.0,
                "a fraction of the area, above 0.0 and at most 1.0",
            )
        })
    })
}

/// `ratio=(lo, hi)` of `Loader`, aspect ratios.
pub(crate) fn ratio(v: &Bound<'_, PyAny>) -> PyResult<Option<(f64, f64)>> {
    optional(v, |v| {
        pair(v, "ratio", |v, name| {
            float(
                v,
                name,
                |x| x > 0.0 && x.is_finite(),
                "a finite aspect ratio above 0",
            )
        })
    })
}

/// `mean=` of `Loader`: three finite numbers.
pub(crate) fn mean(v: &Bound<'_, PyAny>) -> PyResult<Option<[f32; 3]>> {
    optional(v, |v| {
        channels(v, "mean", |x| (x as f32).is_finite(), "a finite number")
    })
}

/// `std=` of `Loader`: three finite numbers, none 0.
pub(crate) fn std(v: &Bound<'_, PyAny>) -> PyResult<Option<[f32; 3]>> {
    optional(v, |v| {
        channels(
            v,
            "std",
            |x| (x as f32).is_finite() && x as f32 != 0.0,
            "a finite number other than 0",
        )
    })
}

/// One value per RGB channel, `name[0]` to `name[2]`.
fn channels(
    value: &Bound<'_, PyAny>,
    name: &str,
    ok: impl Fn(f64) -> bool + Copy,
    want: &str,
) -> PyResult<[f32; 3]> {
    let mut out = [0.0; 3];
    for (i, item) in items::<3>(value, name)?.iter().enumerate() {
        out[i] = float(item, &format!("{name}[{i}]"), ok, want)? as f32;
    }
    Ok(out)
}
