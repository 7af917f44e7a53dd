//! Read errors that are no fault of the file being read: the process has no file
//! descriptor left, the kernel no memory, or the storage holding the files stopped
//! answering (a network or FUSE file system whose server or daemon went away).
//!
//! An unreadable input is skipped and counted, as a corrupt one is. Such an error is not
//! the input's, though, and it does not pass: every input after it fails the same way. A
//! conversion that skipped them would write a smaller dataset that looks complete (and
//! verifies), and a check that counted them as damage would call a sound dataset bad. So
//! wherever a read error would skip an input or blame a shard, one of these stops the run
//! instead, saying what ran out and that the file is not to blame.

use rustix::io::Errno;

/// What, besides the file, made a read fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutsideFault {
    /// The process (`EMFILE`, `ulimit -n`) or the system (`ENFILE`) has no file
    /// descriptor left.
    Descriptors,
    /// The kernel could not allocate memory for the call (`ENOMEM`), or a buffer of
    /// stoker's own could not be allocated (a record's value, a decode's pixels).
    Memory,
    /// The file system did not answer: a network or FUSE mount whose server or daemon is
    /// gone (`ENOTCONN`, `ETIMEDOUT`, `ESTALE`, a host or network unreachable...).
    Storage,
}

impl OutsideFault {
    /// The fault behind `e`, or `None` when the error may well be the file's own (a
    /// permission, a bad sector, a file that is not there) and the file is skipped. For a
    /// caller with I/O errors of its own to tell apart the same way.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::OutsideFault;
    /// let e = std::io::Error::from_raw_os_error(24); // EMFILE
    /// assert_eq!(OutsideFault::of(&e), Some(OutsideFault::Descriptors));
    /// assert_eq!(OutsideFault::of(&std::io::Error::from_raw_os_error(2)), None);
    /// ```
    pub fn of(e: &std::io::Error) -> Option<OutsideFault> {
        // `ENOMEM`, or a buffer of stoker's own that could not be allocated.
        if e.kind() == std::io::ErrorKind::OutOfMemory {
            return Some(OutsideFault::Memory);
        }
        match Errno::from_io_error(e)? {
            Errno::MFILE | Errno::NFILE => Some(OutsideFault::Descriptors),
            Errno::NOMEM => Some(OutsideFault::Memory),
            Errno::NOTCONN
            | Errno::TIMEDOUT
            | Errno::STALE
            | Errno::HOSTDOWN
            | Errno::HOSTUNREACH
            | Errno::NETDOWN
            | Errno::NETUNREACH
            | Errno::CONNRESET
            | Errno::CONNABORTED
            | Errno::CONNREFUSED
            | Errno::NOLINK
            | Errno::COMM => Some(OutsideFault::Storage),
            _ => None,
        }
    }

    /// What ran out or failed, and what to do about it, for the error's message.
    pub fn cause(self) -> &'static str {
        match self {
            OutsideFault::Descriptors => {
                "the process has no file descriptor left (raise the limit: `ulimit -n`), which \
                 says nothing about the file"
            }
            OutsideFault::Memory => {
                "memory could not be allocated (the system is short of it, or the process is at \
                 its limit: `ulimit -v`, a container's), which says nothing about the file"
            }
            OutsideFault::Storage => {
                "the file system holding it stopped answering (a network or FUSE mount that \
                 went away), which says nothing about the file"
            }
        }
    }
}

/// What an [`OutsideFault`] stopped, which says what is left and how to go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultStage {
    /// Listing a conversion's source: nothing was written.
    Listing,
    /// Converting: the finished shards and the journal stay, for `--resume`.
    Converting,
    /// Converting, before the first record: the run took away what it had made.
    Starting,
    /// Checking a dataset: nothing is said about it.
    Verifying,
    /// Writing samples handed over one at a time ([`crate::SampleWriter`]): the writer
    /// took its output away, having no `--resume`.
    Writing,
}

impl FaultStage {
    /// What the stop left, for the error's message.
    pub fn left(self) -> &'static str {
        match self {
            FaultStage::Listing => {
                "the conversion stopped while listing its source and wrote nothing: convert \
                 again once that is fixed"
            }
            FaultStage::Converting => {
                "the conversion stopped without writing a manifest; what it converted stays, \
                 and --resume (Python: resume=True) continues once that is fixed"
            }
            FaultStage::Starting => {
                "the conversion stopped before its first record and left nothing in the \
                 output directory: convert again once that is fixed"
            }
            FaultStage::Verifying => {
                "the check stopped, and says nothing about the dataset: run it again once \
                 that is fixed"
            }
            FaultStage::Writing => {
                "the writer stopped and removed what it had written: write the samples again \
                 with a new writer once that is fixed"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_that_are_not_the_files_own_are_faults() {
        let os = |errno: Errno| std::io::Error::from_raw_os_error(errno.raw_os_error());
        for (errno, fault) in [
            (Errno::MFILE, OutsideFault::Descriptors),
            (Errno::NFILE, OutsideFault::Descriptors),
            (Errno::NOMEM, OutsideFault::Memory),
            (Errno::NOTCONN, OutsideFault::Storage),
            (Errno::STALE, OutsideFault::Storage),
        ] {
            assert_eq!(OutsideFault::of(&os(errno)), Some(fault), "{errno:?}");
        }
        // The file's own: skipped and counted, the run goes on.
        for own in [
            Errno::ACCESS,
            Errno::IO,
            Errno::NOENT,
            Errno::ISDIR,
            Errno::LOOP,
        ] {
            assert_eq!(OutsideFault::of(&os(own)), None, "{own:?}");
        }
        assert_eq!(OutsideFault::of(&std::io::Error::other("x")), None);
        let buffer = std::io::Error::new(std::io::ErrorKind::OutOfMemory, "a buffer");
        assert_eq!(OutsideFault::of(&buffer), Some(OutsideFault::Memory));
    }
}
