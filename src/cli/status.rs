//! Exit statuses the commands share, and the status of a command's error. Their own
//! module: the commands and the dispatch above them both name them.

use crate::bottleneck::BenchError;
use crate::decode::DecodeError;
use crate::formats::{FormatError, OutsideFault};
use crate::loader::LoaderError;

/// Exit status of a command that did what it was asked.
pub const SUCCESS: u8 = 0;
/// Exit status of a command that failed, or found a problem (a damaged dataset, an image
/// that does not decode).
pub const FAILURE: u8 = 1;
/// Exit status of a command that stopped for no fault of its inputs: the process ran out
/// of memory, file descriptors or threads, the storage stopped answering, or the output's
/// disk (its quota, the file size limit) was full. Nothing is known
/// against the inputs: run it again once that is fixed (`convert --resume` goes on where
/// it stopped). With 1 for it, as for damage, a script that restores a dataset when
/// `verify` fails threw away a sound copy whenever the machine was short. 2 is clap's,
/// for a usage error.
pub const OUTSIDE_FAULT: u8 = 3;
/// Exit status of a command asked for something it cannot do, before it did anything:
/// clap's status for a usage error, also given to a part selection that names no part
/// (`--part 5 --parts 3`, or a job array's variables that disagree), which clap cannot
/// check since the variables are read later.
pub const USAGE: u8 = 2;

/// `reason` as clap prints a usage error of `stoker NAME` (whose arguments are `A`), and
/// clap's status for one: for what only shows once the arguments are read together with
/// the machine (a terminal, the launcher's variables).
pub(super) fn usage_error<A: clap::Args>(name: &'static str, reason: String) -> u8 {
    let mut cmd = A::augment_args(clap::Command::new(name)).bin_name(format!("stoker {name}"));
    let e = cmd.error(clap::error::ErrorKind::ArgumentConflict, reason);
    // A failed write to stderr is ignored: there is nowhere left to say it.
    let _ = e.print();
    u8::try_from(e.exit_code()).unwrap_or(USAGE)
}

/// `cause` as a [`FormatError`], also inside a bench error, which is transparent: its
/// own chain skips it.
fn format_of<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a FormatError> {
    match cause.downcast_ref::<BenchError>() {
        Some(BenchError::Format(f)) => Some(f),
        _ => cause.downcast_ref::<FormatError>(),
    }
}

/// The status of a command that ended with `e`: [`OUTSIDE_FAULT`] when it, or an error
/// it wraps, is such a stop, [`USAGE`] for a part selection that names no part, else
/// [`FAILURE`].
pub(super) fn of_error(e: &anyhow::Error) -> u8 {
    let usage = e.chain().any(|cause| {
        matches!(
            format_of(cause),
            Some(FormatError::PartSelection { .. } | FormatError::InvalidOptions(_))
        ) || matches!(
            cause.downcast_ref::<BenchError>(),
            Some(BenchError::Launcher(_) | BenchError::InvalidOption { .. })
        )
    });
    if usage {
        return USAGE;
    }
    let outside = e.chain().any(|cause| {
        format_of(cause).is_some_and(|f| f.outside().is_some())
            // A full disk: "make room, then run again", as the message says; threads that
            // could not start (a process or memory limit).
            || matches!(
                format_of(cause),
                Some(
                    FormatError::OutOfSpace { .. }
                        | FormatError::MergeOutOfSpace { .. }
                        | FormatError::Threads { .. }
                )
            )
            // A loader's FormatError is transparent: its own chain skips it.
            || cause
                .downcast_ref::<LoaderError>()
                .is_some_and(LoaderError::is_no_fault_of_the_data)
            || matches!(
                cause.downcast_ref::<DecodeError>(),
                Some(DecodeError::OutOfMemory { .. })
            )
            // An I/O error anywhere in the chain: the bench's own reads (the storage stage,
            // `BenchError::Io`'s source), and the command's own output (stdout, `decode -o`)
            // on a full disk, where 1 told a script that the dataset was damaged, and it
            // restored a sound copy.
            || cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(no_room_or_outside)
    });
    if outside {
        OUTSIDE_FAULT
    } else {
        FAILURE
    }
}

/// Whether `e` is a write that found no room (a full disk, a quota, the file size limit),
/// or an error of no file's fault ([`OutsideFault`]).
fn no_room_or_outside(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{FileTooLarge, QuotaExceeded, StorageFull};
    matches!(e.kind(), StorageFull | QuotaExceeded | FileTooLarge) || OutsideFault::of(e).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::FaultStage;

    fn outside() -> FormatError {
        FormatError::OutsideFault {
            path: "shard-00000.lmdb".into(),
            source: std::io::Error::from_raw_os_error(24),
            fault: OutsideFault::Descriptors,
            stage: FaultStage::Verifying,
        }
    }

    #[test]
    fn a_stop_for_no_fault_of_the_inputs_is_told_apart_from_a_failure() {
        assert_eq!(of_error(&outside().into()), OUTSIDE_FAULT);
        // Under context a command adds, and inside the loader's error.
        let wrapped = anyhow::Error::from(outside()).context("reading the dataset");
        assert_eq!(of_error(&wrapped), OUTSIDE_FAULT);
        assert_eq!(
            of_error(&LoaderError::Format(outside()).into()),
            OUTSIDE_FAULT
        );
        let short = LoaderError::OutOfMemory {
            index: 3,
            bytes: 1 << 30,
            what: "its pixels",
        };
        assert_eq!(of_error(&short.into()), OUTSIDE_FAULT);
        // A plain I/O error whose errno is no file's fault (opening a dataset's manifest).
        let io = |errno| FormatError::Io {
            path: "ds/manifest.json".into(),
            source: std::io::Error::from_raw_os_error(errno),
        };
        assert_eq!(of_error(&io(libc::EMFILE).into()), OUTSIDE_FAULT);
        assert_eq!(of_error(&io(libc::EACCES).into()), FAILURE);
        let full = FormatError::OutOfSpace {
            shard: "ds/shard-00000.lmdb.tmp".into(),
            cause: "disk full".into(),
            records: 30,
            bytes: 0,
            errno: libc::ENOSPC,
        };
        assert_eq!(of_error(&full.into()), OUTSIDE_FAULT);
        // The command's own output, as `output::stdout` and `write_file_atomically` say it.
        let stdout =
            super::super::output::on_stdout(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(of_error(&stdout.into()), OUTSIDE_FAULT);
        let file = anyhow::Error::from(std::io::Error::from_raw_os_error(libc::EDQUOT))
            .context("writing out.png");
        assert_eq!(of_error(&file), OUTSIDE_FAULT);
        let stdout = super::super::output::on_stdout(std::io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(of_error(&stdout.into()), FAILURE);
        let threads = FormatError::Threads {
            what: "2 conversion threads".into(),
            reason: "Resource temporarily unavailable (os error 11)".into(),
        };
        assert_eq!(of_error(&threads.into()), OUTSIDE_FAULT);

        let damaged = FormatError::NotADataset {
            dir: "ds".into(),
            hint: String::new(),
        };
        assert_eq!(of_error(&damaged.into()), FAILURE);
        assert_eq!(of_error(&LoaderError::EmptyDataset.into()), FAILURE);
        assert_eq!(of_error(&anyhow::anyhow!("no such file")), FAILURE);
        // Inside a bench error, whose FormatError is transparent; and the bench's own reads.
        let bench = crate::bottleneck::BenchError::Format(outside());
        assert_eq!(
            of_error(&anyhow::Error::from(bench).context("benchmarking")),
            OUTSIDE_FAULT
        );
        let read = crate::bottleneck::BenchError::Io {
            path: "ds/shard-00000.lmdb".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        };
        assert_eq!(of_error(&read.into()), OUTSIDE_FAULT);
        let read = crate::bottleneck::BenchError::Io {
            path: "ds/shard-00000.lmdb".into(),
            source: std::io::Error::from_raw_os_error(libc::EIO),
        };
        assert_eq!(of_error(&read.into()), FAILURE);
        // Options that cannot go together: usage errors, as clap's own.
        let options = FormatError::InvalidOptions("--encoding raw needs --size".into());
        assert_eq!(of_error(&options.into()), USAGE);
        let bench = crate::bottleneck::BenchError::InvalidOption {
            option: "batch",
            reason: "must be at least 1".into(),
        };
        assert_eq!(of_error(&bench.into()), USAGE);
        let no_part = FormatError::PartSelection {
            given: "--part=5, --parts=3".into(),
            reason: "part index 5 is not below the number of parts 3".into(),
        };
        assert_eq!(
            of_error(&anyhow::Error::from(no_part).context("which part")),
            USAGE
        );
    }
}
