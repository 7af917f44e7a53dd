//! How a program built on stoker ends on an error: quietly when the reader of its stdout
//! went away (`… | head`), else with the error and each of its causes once on stderr. The
//! `stoker` CLI and the examples end this way; a training binary can too.

use std::error::Error;
use std::io::{ErrorKind, Write};
use std::process::ExitCode;

/// Exit status when the reader of stdout went away (EPIPE): 128 + SIGPIPE, the status a
/// shell reports for a C tool that SIGPIPE ended, so `set -o pipefail` scripts see a Rust
/// program as they see `cat`. Rust ignores SIGPIPE, so the write fails instead of killing.
pub const BROKEN_PIPE_STATUS: u8 = 128 + 13;

/// True when `e` or one of its causes is a write to a pipe whose reader has gone: not
/// worth an error message, since whoever closed the pipe wanted no more.
pub fn is_broken_pipe(e: &(dyn Error + 'static)) -> bool {
    causes(e).any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
    })
}

/// `e` and its causes, joined by ": ", leaving out a cause whose text the message already
/// holds: stoker's errors print their source in their own message (so the Python
/// exceptions and `to_string` carry it), and walking the sources would repeat it ("No
/// such file or directory (os error 2): No such file or directory (os error 2)"). One
/// line: a control character (a newline or ESC in a file's name) is written `\xNN`.
pub fn message(e: &(dyn Error + 'static)) -> String {
    let mut text = String::new();
    for cause in causes(e) {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    stoker_formats::one_line(&text)
}

/// The exit code for `e`: [`BROKEN_PIPE_STATUS`] without a word for a closed pipe, else
/// `status` after `program: error: <message>` on stderr (a failed write to stderr is
/// ignored: there is nowhere left to say it, and a panic would only change the status).
pub fn failure(program: &str, e: &(dyn Error + 'static), status: u8) -> ExitCode {
    ExitCode::from(report(program, e, status))
}

/// [`failure`] as a number, for a caller that ends the process itself (`ExitCode` cannot
/// be read back): the `stoker` command embedded in the Python package returns it to
/// Python's `sys.exit`.
pub fn report(program: &str, e: &(dyn Error + 'static), status: u8) -> u8 {
    if is_broken_pipe(e) {
        return BROKEN_PIPE_STATUS;
    }
    let _ = writeln!(std::io::stderr().lock(), "{program}: error: {}", message(e));
    status
}

/// Makes a write past the process's file size limit (`ulimit -f`, RLIMIT_FSIZE, which
/// batch systems such as Slurm pass on from the submitting shell) fail with EFBIG instead
/// of killing the process with SIGXFSZ, so the library's "file size limit reached ...
/// rerun with --resume" error reaches the user instead of a bare signal death (status
/// 153). CPython ignores SIGXFSZ the same way, which is why the Python API already got
/// the message. Call it first thing in `main`; it affects the whole process.
pub fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler, so no code
    // runs in signal context; `signal` with a valid signal number and SIG_IGN has no
    // memory-safety preconditions. Its result (the previous disposition, or SIG_ERR) is
    // not needed: if it failed, the process only keeps the default, as before.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

fn causes<'a>(e: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(e), |&c| c.source())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose message holds its cause, followed by `.1`.
    #[derive(Debug)]
    struct Wrapped(std::io::Error, &'static str);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "reading x: {}{}", self.0, self.1)
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let e = Wrapped(std::io::Error::from(ErrorKind::NotFound), "");
        let io = std::io::Error::from(ErrorKind::NotFound);
        assert_eq!(message(&e), format!("reading x: {io}"));
        // Also where the message goes on after it (what to do about it).
        let e = Wrapped(
            std::io::Error::from(ErrorKind::NotFound),
            "; raise the limit",
        );
        assert_eq!(message(&e), format!("reading x: {io}; raise the limit"));
        assert!(!is_broken_pipe(&e));
    }

    #[test]
    fn a_broken_pipe_is_found_among_the_causes() {
        let e = Wrapped(std::io::Error::from(ErrorKind::BrokenPipe), "");
        assert!(is_broken_pipe(&e));
        assert_eq!(failure("t", &e, 1), ExitCode::from(BROKEN_PIPE_STATUS));
    }
}
