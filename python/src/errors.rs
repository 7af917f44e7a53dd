//! Rust errors as Python exceptions: settings the caller got wrong are `ValueError`, a
//! missing file is `FileNotFoundError`, memory a record (or the run) could not get
//! `MemoryError`, a run stopped by the system for no fault of its files (no file
//! descriptor left, storage that stopped answering) `OSError` with its errno,
//! everything else `stoker.StokerError`; the
//! message is always the Rust error's. What the library notes for the caller to act on is
//! a `UserWarning`; the rest of what it logs goes to `logging` (`crate::logging`).

use pyo3::exceptions::{
    PyException, PyFileNotFoundError, PyMemoryError, PyOSError, PyUserWarning, PyValueError,
};
use pyo3::{PyErr, PyResult, Python};
use stoker_formats::{FormatError, OutsideFault};
use stoker_loader::LoaderError;

pyo3::create_exception!(
    stoker,
    StokerError,
    PyException,
    "An error of the stoker library (a bad record, a failed loader thread, a GPU failure...); the message is the library's."
);

/// `ENOENT`, the errno of a missing file on Linux and macOS (no `libc` here for one number).
const ENOENT: i32 = 2;

/// The exception for a [`FormatError`].
pub(crate) fn format_error(e: FormatError) -> PyErr {
    match &e {
        FormatError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(e.to_string())
        }
        // Still a missing manifest to a caller catching FileNotFoundError, as before it
        // had its own message.
        FormatError::UnfinishedConversion { .. }
        | FormatError::ConversionInProgress { .. }
        | FormatError::NotADataset { .. } => PyFileNotFoundError::new_err(e.to_string()),
        // A FileNotFoundError as before (errno ENOENT), with the message that says what
        // is missing and what to run.
        FormatError::MissingShard { .. } => PyFileNotFoundError::new_err((ENOENT, e.to_string())),
        FormatError::InvalidOptions(_) => PyValueError::new_err(e.to_string()),
        // Also a plain I/O error whose errno is no fault of the files (EMFILE opening a
        // dataset), as the CLI exits 3 for it.
        _ if e.outside() == Some(OutsideFault::Memory) => PyMemoryError::new_err(e.to_string()),
        // OSError(errno, text) is the subclass Python gives that errno (ETIMEDOUT is a
        // TimeoutError, ECONNRESET a ConnectionResetError), as its own I/O would raise.
        FormatError::OutsideFault { source, .. } | FormatError::Io { source, .. }
            if e.outside().is_some() =>
        {
            match source.raw_os_error() {
                Some(errno) => PyOSError::new_err((errno, e.to_string())),
                None => PyOSError::new_err(e.to_string()),
            }
        }
        // No room to write: a stop for no fault of the inputs as well, so the `OSError`
        // Python's own write would raise (ENOSPC, EDQUOT, EFBIG), with stoker's words.
        FormatError::OutOfSpace { errno, .. }
        | FormatError::WriterOutOfSpace { errno, .. }
        | FormatError::MergeOutOfSpace { errno, .. } => PyOSError::new_err((*errno, e.to_string())),
        _ => StokerError::new_err(e.to_string()),
    }
}

/// The exception for a [`LoaderError`].
pub(crate) fn loader_error(e: LoaderError) -> PyErr {
    match e {
        LoaderError::Format(e) => format_error(e),
        e @ (LoaderError::InvalidConfig { .. }
        | LoaderError::ResumeMismatch { .. }
        | LoaderError::ResumeEpoch { .. }
        | LoaderError::DlpackStream { .. }
        | LoaderError::LauncherEnv { .. }
        | LoaderError::EmptyDataset) => PyValueError::new_err(e.to_string()),
        e if e.is_short_of_memory() => PyMemoryError::new_err(e.to_string()),
        e => StokerError::new_err(e.to_string()),
    }
}

/// `warnings.warn(text, UserWarning)`, pointing at the caller's line: for a note the
/// caller should act on, which a log record on a logger nobody watches would hide.
pub(crate) fn warn(py: Python<'_>, text: String) -> PyResult<()> {
    let text = std::ffi::CString::new(text).unwrap_or_default();
    PyErr::warn(py, &py.get_type::<PyUserWarning>(), &text, 1)
}
