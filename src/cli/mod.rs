//! The `stoker` command: flag parsing and dispatch. Each subcommand lives in its own file
//! with an `Args` struct (clap) and a `run(args) -> anyhow::Result<u8>`, the exit status.
//!
//! The binary is [`main`]. A front end that embeds the command (the Python package's
//! `stoker` console script, which gives pip users the command without a Rust toolchain)
//! calls [`run`] with its arguments, and routes the `tracing` events to
//! [`log_subscriber`] itself. Only [`main`] exits; [`run`] returns the status.
#![forbid(unsafe_code)]

use std::ffi::OsString;

use clap::{Parser, Subcommand};

mod bench;
mod convert;
mod decode;
mod inspect;
mod merge;
mod output;
mod status;
mod verify;

pub use status::{FAILURE, OUTSIDE_FAULT, SUCCESS, USAGE};

/// stoker: keeps training GPUs fed.
#[derive(Debug, Parser)]
#[command(
    name = "stoker",
    version,
    about,
    long_about = None,
    after_help = "Logging: warnings and errors go to stderr; STOKER_LOG=info (or debug, or a \
                  filter such as stoker_loader=debug) shows more, NO_COLOR=1 turns colour off.\n\
                  Exit status: 0 done; 1 failed, or found a problem; 2 a usage error; 3 stopped \
                  for no fault of the inputs (memory, file descriptors, threads, storage, a \
                  full disk): run again; 141 the reader of stdout went away (`| head`), \
                  as for a tool that SIGPIPE ends. \
                  With --json, a command that fails before it has a report prints no JSON: \
                  the error is one line on stderr, and the status says which kind."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Convert an image folder, list file or WebDataset tar shards into LMDB shards.
    ///
    /// Exit status: 0 when the dataset was written; 1 when the conversion failed (no
    /// manifest); 2 for a usage error, also options that cannot go together and flags or
    /// job variables that name no part; 3
    /// when it stopped for no fault of the inputs (out of memory, of file descriptors,
    /// storage that stopped answering): --resume goes on once that is fixed.
    Convert(convert::Args),
    /// Join the parts of a partitioned conversion (convert --part), or of a writing from
    /// several processes (stoker.Writer(part=, parts=)), into one dataset; this moves the
    /// parts' shards into OUT and removes the part directories.
    ///
    /// Each part's shards are hard-linked into OUT (not copied) and read once, to check each
    /// against its part's digest (a shard moved from another part is refused), the manifest is written,
    /// and then every part directory merged is deleted with everything in it, also a part
    /// given outside OUT: its shards live on in OUT, so the part directory holds only
    /// second names for them. Each directory removed is named on stderr. Until the
    /// manifest is written nothing is removed, and a refused merge leaves the parts whole.
    ///
    /// Exit status: 0 when the dataset was merged; 1 when the merge was refused (a part
    /// missing, unfinished, damaged or of another conversion; OUT holding other files), with
    /// the parts whole; 2 for a usage error; 3 when it stopped for no fault of the parts
    /// (out of memory, of file descriptors, a full disk): merge again once that is fixed.
    Merge(merge::Args),
    /// Summarize a converted dataset.
    ///
    /// Exit status: 0 when every record could be read (with --record, that record is sound
    /// and its source named); 1 when records could not be read (with --record: the record
    /// is damaged, or the source map cannot name it), or the manifest cannot be read; 2 for a usage
    /// error, also --record past the end; 3 when it stopped for no fault of the dataset's.
    Inspect(inspect::Args),
    /// Check every record of a converted dataset (header, length, CRC, optionally decode).
    ///
    /// Exit status: 0 when every record is sound; 1 when the report names a problem, or the
    /// manifest cannot be read; 3 when the check stopped for no fault of the dataset's (out
    /// of memory, of file descriptors, storage that stopped answering), which says nothing
    /// about it: run it again once that is fixed. Every command exits 3 for such a stop.
    Verify(verify::Args),
    /// Decode one JPEG file and report its properties and the route taken.
    Decode(decode::Args),
    /// Measure each stage (storage, decode, PCIe, GPU) and name the bound.
    Bench(bench::Args),
}

/// The `stoker` binary: the process's arguments, log lines on stderr ([`log_subscriber`]),
/// and the command's status as the process's.
pub fn main() -> std::process::ExitCode {
    // Fails only where a subscriber is set already, which a binary's `main` rules out.
    let _ = tracing_subscriber::util::SubscriberInitExt::try_init(log_subscriber());
    std::process::ExitCode::from(run(std::env::args_os()))
}

/// Runs the command that `args` give (the first is the program's name, as in
/// `std::env::args_os`) and returns its exit status, after writing its output and any
/// error. Installs the command's signal handling (Ctrl-C and SIGTERM remove what a write
/// left half-done, then end the process; SIGXFSZ ignored), which is the process's from
/// then on: meant for a process that runs the command and then exits with the status.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    crate::exit::ignore_file_size_signal();
    // As process 1 of a container, SIGTERM and Ctrl-C would otherwise be dropped.
    crate::stop_cleanup::install();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return flag_error(&e),
    };
    let result = match cli.command {
        Command::Convert(a) => convert::run(a),
        Command::Merge(a) => merge::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Decode(a) => decode::run(a),
        Command::Bench(a) => bench::run(a),
    };
    match result {
        Ok(code) => code,
        // A closed stdout (`| head`) ends quietly with 141, as tools killed by SIGPIPE do,
        // not with success, since the output was cut short.
        Err(e) => crate::exit::report("stoker", e.as_ref(), status::of_error(&e)),
    }
}

/// The command's log output: warnings and errors on stderr, more with `STOKER_LOG` (a
/// level, or a filter such as `stoker_loader=debug`), coloured only on a terminal and
/// never with `NO_COLOR` set (no-color.org: a log file or CI capture got escape codes).
pub fn log_subscriber() -> impl tracing::Subscriber + Send + Sync + 'static {
    let filter = log_filter(&std::env::var("STOKER_LOG").unwrap_or_default());
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .finish()
}

/// The filter of `STOKER_LOG`'s `spec`, which keeps warnings and errors unless it sets a
/// level for every crate itself (`error`, `off`): the bare filter took an empty value, a
/// misspelt level (`inof`, read as a crate's name) or one crate's level
/// (`stoker_loader=debug`) as "nothing else", and the warnings `--help` promises vanished.
fn log_filter(spec: &str) -> tracing_subscriber::EnvFilter {
    use tracing_subscriber::filter::LevelFilter;
    let sets_level = spec
        .split(',')
        .map(str::trim)
        // `LevelFilter` reads "" as a level: an empty piece (`STOKER_LOG=`) sets none.
        .any(|d| !d.is_empty() && !d.contains('=') && d.parse::<LevelFilter>().is_ok());
    let spec = match (sets_level, spec.trim().trim_matches(',').is_empty()) {
        (true, _) => spec.to_string(),
        (false, true) => "warn".to_string(),
        (false, false) => format!("{spec},warn"),
    };
    tracing_subscriber::EnvFilter::builder().parse_lossy(spec)
}

/// Prints clap's message for flags it did not run with (a usage error on stderr, or
/// `--help` / `--version` on stdout) and gives its status. `Cli::parse` exits 0 after
/// `--help` also when stdout could not be written (`stoker --help > /dev/full`).
fn flag_error(e: &clap::Error) -> u8 {
    let printed = e
        .print()
        .and_then(|()| std::io::Write::flush(&mut std::io::stdout()));
    match printed {
        Err(io) if !e.use_stderr() => {
            let io = anyhow::Error::from(output::on_stdout(io));
            let status = status::of_error(&io);
            crate::exit::report("stoker", io.as_ref(), status)
        }
        // Clap's statuses: 0 for help and version, 2 for a usage error.
        _ => u8::try_from(e.exit_code()).unwrap_or(2),
    }
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn stoker_log_keeps_the_warnings_unless_it_sets_every_crates_level() {
        let shown = |spec: &str| log_filter(spec).to_string();
        assert_eq!(shown(""), "warn");
        assert_eq!(shown("info"), "info");
        assert_eq!(shown("OFF"), "off");
        assert_eq!(
            shown("error,stoker_loader=debug"),
            "stoker_loader=debug,error"
        );
        for spec in ["inof", "stoker_loader=debug", " ", ","] {
            let text = shown(spec);
            assert!(text.split(',').any(|d| d == "warn"), "{spec:?} gave {text}");
        }
    }
}
