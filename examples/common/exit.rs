//! How an example's `main` ends on an error: quietly when the reader of stdout went away
//! (`| head`), else with the error and every cause on stderr.

use std::error::Error;
use std::io::{ErrorKind, Write};
use std::process::ExitCode;

/// Exit status when stdout's reader went away (EPIPE): 128 + SIGPIPE, what a shell reports
/// for a C tool that SIGPIPE ended. Rust ignores SIGPIPE, so the write fails instead.
pub const BROKEN_PIPE_STATUS: u8 = 128 + 13;

/// True when `e` or one of its causes is a write to a pipe nobody reads any more.
pub fn is_broken_pipe(e: &(dyn Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The exit code for `e`: [`BROKEN_PIPE_STATUS`] without a word for a closed pipe, else
/// `status` after `program: error: cause: cause...` on stderr (ignored if stderr itself
/// fails: there is nowhere left to say it).
pub fn failure(program: &str, e: &(dyn Error + 'static), status: u8) -> ExitCode {
    if is_broken_pipe(e) {
        return ExitCode::from(BROKEN_PIPE_STATUS);
    }
    let mut text = format!("{program}: {e}");
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    let _ = writeln!(std::io::stderr().lock(), "{text}");
    ExitCode::from(status)
}
