//! The output directory's lock: one conversion writes into a directory at a time.
//!
//! An advisory `flock` on the directory itself (no lock file to clean up or to mistake for
//! output), held from before the directory is inspected until the manifest is written. The
//! kernel drops it when the process ends, however it ends, so a killed conversion never
//! leaves a stale lock for `--resume` to trip over. `flock` comes from `fs4` (maintained,
//! used widely, no `unsafe` here); `std::fs::File::try_lock` would do the same but needs a
//! newer Rust than this workspace's minimum.

use std::fs::File;
use std::path::Path;

use crate::FormatError;

/// Holds the lock until dropped.
#[derive(Debug)]
pub(crate) struct OutputLock {
    /// The open directory; closing it releases the lock.
    dir: File,
}

impl OutputLock {
    /// Takes the lock of the existing directory `out`, or says who holds it.
    pub(crate) fn acquire(out: &Path) -> Result<OutputLock, FormatError> {
        let dir = File::open(out).map_err(|e| FormatError::io(out, e))?;
        match fs4::FileExt::try_lock(&dir) {
            Ok(()) => Ok(OutputLock { dir }),
            Err(fs4::TryLockError::WouldBlock) => Err(FormatError::OutputLocked {
                path: out.to_path_buf(),
            }),
            Err(fs4::TryLockError::Error(e)) => Err(FormatError::io(out, e)),
        }
    }

    /// The locked directory, open: the one this conversion writes, wherever its path leads
    /// now (what a `--strict` stop removes is removed from it).
    pub(crate) fn dir(&self) -> &File {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_on_the_same_directory_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = OutputLock::acquire(dir.path()).unwrap();
        // flock locks belong to the open file description: a second open in the same
        // process conflicts just as another process would.
        let e = OutputLock::acquire(dir.path()).unwrap_err();
        assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
        assert!(e.to_string().contains("another `stoker convert`"), "{e}");
        drop(first);
        OutputLock::acquire(dir.path()).unwrap();
    }
}
