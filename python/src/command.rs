//! `stoker._stoker._command(args)`: the `stoker` command in this process, for the
//! console script a pip install puts on `PATH` (`stoker/_command.py`) and for
//! `python -m stoker`. A user of the wheel has no Rust toolchain to build the binary, and
//! `stoker bench`, `inspect` and `decode` have no Python API; this gives them the very
//! command, flags, output and exit statuses of the binary (`stoker::cli::run`).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, IntoRawFd};

use pyo3::prelude::*;

/// Runs the command `args` give (the first is the program's name) and returns its exit
/// status, for `sys.exit`. Its log lines go to stderr as the binary's do, no longer to
/// `logging`; its signal handling becomes the process's (Ctrl-C removes what a write
/// left half-done, then ends the process; memory that runs out where Rust would abort
/// ends it with status 3, `stoker::alloc_failure`), so the script exits once this returns.
#[pyfunction]
#[pyo3(name = "_command")]
pub(crate) fn command(py: Python<'_>, args: Vec<OsString>) -> u8 {
    open_closed_standard_fds();
    stoker::alloc_failure::exit_on_failure();
    crate::logging::to_command(stoker::cli::log_subscriber());
    let status = py.detach(|| stoker::cli::run(args));
    // A Rust `main` flushes stdout on its way out; Python's exit does not know Rust's.
    let _ = std::io::stdout().flush();
    status
}

/// Opens `/dev/null` on each of descriptors 0, 1 and 2 that is closed (`stoker convert
/// ... >&-`), as a Rust binary's start does and Python's does not: else the command's own
/// files took those numbers, and a line printed to stdout or stderr could land in a
/// shard or the manifest being written. `open` gives the lowest free number, so each
/// opened below 3 fills a closed one and is kept; the first at 3 or above means none is
/// left.
fn open_closed_standard_fds() {
    let null = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
    };
    while let Ok(file) = null() {
        if file.as_raw_fd() > 2 {
            break;
        }
        // Kept open for the rest of the process, as the descriptor it stands in for.
        let _ = file.into_raw_fd();
    }
}
