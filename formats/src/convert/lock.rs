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
use std::time::{Duration, Instant};

use crate::held_dir::HeldDir;
use crate::out_dir::DirIdentity;
use crate::text::Lossless;
use crate::FormatError;

/// How long a lock found held is tried again before it counts as another writer's. The
/// kernel closes a killed process's files, and so drops its lock, a little after the
/// process is reaped (the last close in an exiting process is deferred): a `--resume`
/// that a retry wrapper started as soon as `timeout -s KILL` returned was refused as
/// "another stoker is writing" in about 3 of 100 tries, with no stoker process left.
const LOCK_SETTLE: Duration = Duration::from_secs(1);
/// The pause between those tries.
const LOCK_RETRY: Duration = Duration::from_millis(20);

/// Holds the lock until dropped.
#[derive(Debug)]
pub(crate) struct OutputLock {
    /// The open directory; unlocking or closing it releases the lock.
    dir: File,
    /// The process that took the lock. A `flock` belongs to the open file description,
    /// which a forked child (a PyTorch DataLoader worker, a `multiprocessing` fork) shares:
    /// closing only the taker's descriptor would leave the directory locked until every
    /// such child has exited, refusing the next writer into it. So the taker unlocks
    /// before it closes, and a child's copy only closes (unlocking there would free the
    /// directory while the taker still writes it).
    pid: u32,
}

impl OutputLock {
    /// Takes the lock of the existing directory `out`, or says who holds it.
    pub(crate) fn acquire(out: &Path) -> Result<OutputLock, FormatError> {
        Self::acquire_with(out, File::open(out), fs4::FileExt::try_lock)
    }

    /// [`OutputLock::acquire`] of the directory `name` in the open directory `parent`
    /// (`out`, its path, in messages), never following a symlink there.
    pub(crate) fn acquire_in(
        parent: &File,
        name: &std::ffi::OsStr,
        out: &Path,
    ) -> Result<OutputLock, FormatError> {
        use rustix::fs::{Mode, OFlags};
        let flags = crate::out_dir::dir_flags() | OFlags::NOFOLLOW;
        let dir = rustix::fs::openat(parent, name, flags, Mode::empty());
        let dir = dir.map(File::from).map_err(std::io::Error::from);
        Self::acquire_with(out, dir, fs4::FileExt::try_lock)
    }

    /// Takes a shared lock of the existing directory `out`, as each part's writer takes on
    /// the output root while it starts: any number of them at once, but none while
    /// [`OutputLock::acquire`] holds it (a merge into the root), nor that while they do.
    pub(crate) fn acquire_shared(out: &Path) -> Result<OutputLock, FormatError> {
        Self::acquire_with(out, File::open(out), fs4::FileExt::try_lock_shared)
    }

    /// [`OutputLock::acquire`] of `dir`, `out` opened, with the locking call given, so that
    /// tests can play a file system without locks.
    ///
    /// A file system whose directory locks fail as unsupported (`ENOLCK`, `ENOSYS`,
    /// `EOPNOTSUPP`: one that passes a directory's `flock` to its server and cannot take
    /// it there) used to refuse every conversion and merge into it with a bare "No locks
    /// available". NFS, Lustre, FUSE and SMB mounts are not among them: Linux locks their
    /// directories locally, on one machine. The lock only keeps a second stoker from
    /// writing the same directory, so there the work goes on unlocked, with a warning
    /// saying so.
    fn acquire_with(
        out: &Path,
        dir: std::io::Result<File>,
        try_lock: impl Fn(&File) -> Result<(), fs4::TryLockError>,
    ) -> Result<OutputLock, FormatError> {
        let dir = dir.map_err(|e| FormatError::io(out, e))?;
        let settled = Instant::now() + LOCK_SETTLE;
        let mut tried = try_lock(&dir);
        while matches!(tried, Err(fs4::TryLockError::WouldBlock)) && Instant::now() < settled {
            std::thread::sleep(LOCK_RETRY);
            tried = try_lock(&dir);
        }
        match tried {
            Ok(()) => Ok(OutputLock::held(dir)),
            Err(fs4::TryLockError::WouldBlock) => Err(FormatError::OutputLocked {
                path: out.to_path_buf(),
            }),
            Err(fs4::TryLockError::Error(e)) if no_locks_here(&e) => {
                tracing::warn!(
                    "cannot lock {} ({e}): its file system has no file locks, so nothing stops a second `stoker convert` or `merge` from writing into it at the same time; make sure only one does",
                    out.lossless()
                );
                Ok(OutputLock::held(dir))
            }
            Err(fs4::TryLockError::Error(e)) => Err(FormatError::io(out, e)),
        }
    }

    fn held(dir: File) -> OutputLock {
        OutputLock {
            dir,
            pid: std::process::id(),
        }
    }

    /// The locked directory, open: the one this conversion writes, wherever its path leads
    /// now (what a `--strict` stop removes is removed from it).
    pub(crate) fn dir(&self) -> &File {
        &self.dir
    }

    /// The locked directory, open for a writer (known as `out`, its path): it makes and
    /// deletes its files there by name, and checks that `out` still leads there.
    pub(crate) fn held_dir(&self, out: &Path) -> Result<HeldDir, FormatError> {
        HeldDir::of_locked(&self.dir, out)
    }
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            // An error leaves the lock to the close that follows, as before.
            let _ = fs4::FileExt::unlock(&self.dir);
        }
    }
}

/// Removes `root`, a part's output root that this process made, when it is empty and
/// provably nobody else uses it: locked alone (no other part is starting in it, holding it
/// shared, and no merge or conversion holds it), and still the directory at its path.
/// A start that made or opened it just before and locks it once it is gone sees so and
/// begins again (`claim::lock_root`). False when it stays.
pub(crate) fn remove_if_unused(root: &Path) -> bool {
    let Ok(dir) = File::open(root) else {
        return false;
    };
    // Looked at before the lock: a root with anything in it stays, and taking its lock
    // alone even for a moment would refuse a part starting there.
    if std::fs::read_dir(root).map_or(true, |mut d| d.next().is_some()) {
        return false;
    }
    // Not `OutputLock`, which goes on unlocked on a file system without locks: there
    // nothing proves the root unused, so it stays. The lock goes with `dir`.
    if fs4::FileExt::try_lock(&dir).is_err() {
        return false;
    }
    DirIdentity::of_file(&dir).is_ok_and(|held| crate::out_dir::remove_empty_dir(root, held))
}

/// Whether a running process holds the lock of the directory `dir` exclusively, as a
/// conversion or writer holds its output directory: so that a reader finding a journal and
/// no manifest says "a conversion is writing it", not "rerun `--resume`" (which the lock
/// would refuse). A shared lock is tried and let go at once: it conflicts only with an
/// exclusive holder, and keeps another shared holder (a part starting) out of nothing.
/// False when it cannot be told (no such directory, a file system without locks).
pub(crate) fn is_held(dir: &Path) -> bool {
    let Ok(d) = File::open(dir) else {
        return false;
    };
    // The probe's lock, if taken, goes when `d` is closed (nothing else shares it).
    matches!(
        fs4::FileExt::try_lock_shared(&d),
        Err(fs4::TryLockError::WouldBlock)
    )
}

/// Whether `path` still leads to the open directory `dir` (same device and inode),
/// through a symbolic link too: an output root may be one (`out -> /scratch/out`). A
/// directory taken away is never the link ([`crate::out_dir::remove_empty_dir`]).
pub(crate) fn same_dir(dir: &File, path: &Path) -> bool {
    DirIdentity::of_file(dir).is_ok_and(|held| held.check(path).is_ok())
}

/// Whether a failed `flock` means that the file system has no locks at all, rather than
/// that this lock could not be had.
fn no_locks_here(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOLCK | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_held_while_a_conversion_holds_the_lock_and_not_after() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_held(dir.path()));
        let lock = OutputLock::acquire(dir.path()).unwrap();
        assert!(is_held(dir.path()));
        drop(lock);
        assert!(!is_held(dir.path()));
        // Parts starting hold the root shared: not a conversion writing it.
        let _shared = OutputLock::acquire_shared(dir.path()).unwrap();
        assert!(!is_held(dir.path()));
        assert!(!is_held(&dir.path().join("missing")));
    }

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

    #[test]
    fn dropping_one_of_two_shared_locks_in_one_process_keeps_the_other() {
        // Two parts' writers in one process lock their root shared, each through its own
        // open of it: the first one's unlock must not free the root from under the second
        // (as it would if the lock were the process's, like an fcntl lock).
        let dir = tempfile::tempdir().unwrap();
        let first = OutputLock::acquire_shared(dir.path()).unwrap();
        let second = OutputLock::acquire_shared(dir.path()).unwrap();
        drop(first);
        let e = OutputLock::acquire(dir.path()).unwrap_err();
        assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
        drop(second);
        OutputLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn a_shared_copy_of_the_locked_directory_keeps_no_lock_after_the_taker_drops_it() {
        // A forked child shares the lock's open file description; a second descriptor to
        // it in this process plays that child's copy.
        let dir = tempfile::tempdir().unwrap();
        let lock = OutputLock::acquire(dir.path()).unwrap();
        let childs_copy = lock.dir().try_clone().unwrap();
        drop(lock);
        let again = OutputLock::acquire(dir.path()).expect("the copy still held the lock");
        drop(childs_copy);

        // The child dropping its copy (of a lock taken by another process) closes it
        // without unlocking: the taker's lock holds.
        let childs_copy = OutputLock {
            dir: again.dir().try_clone().unwrap(),
            pid: std::process::id().wrapping_add(1),
        };
        drop(childs_copy);
        let e = OutputLock::acquire(dir.path()).unwrap_err();
        assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
    }

    #[test]
    fn a_lock_the_kernel_releases_late_is_waited_for_a_held_one_refused() {
        // A killed writer's lock goes a moment after the process was reaped.
        let dir = tempfile::tempdir().unwrap();
        let calls = std::cell::Cell::new(0);
        let releasing = |_: &File| {
            calls.set(calls.get() + 1);
            match calls.get() {
                1..=3 => Err(fs4::TryLockError::WouldBlock),
                _ => Ok(()),
            }
        };
        OutputLock::acquire_with(dir.path(), File::open(dir.path()), releasing).unwrap();
        assert_eq!(calls.get(), 4);
        let start = Instant::now();
        let held = |_: &File| Err(fs4::TryLockError::WouldBlock);
        let e = OutputLock::acquire_with(dir.path(), File::open(dir.path()), held).unwrap_err();
        assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
        assert!(start.elapsed() >= LOCK_SETTLE);
    }

    #[test]
    fn a_file_system_without_locks_converts_unlocked_other_errors_still_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let failing = |errno| {
            move |_: &File| {
                Err(fs4::TryLockError::Error(std::io::Error::from_raw_os_error(
                    errno,
                )))
            }
        };
        // NFSv3 without its lock daemon, FUSE/SMB without lock support.
        for errno in [libc::ENOLCK, libc::ENOSYS, libc::EOPNOTSUPP] {
            OutputLock::acquire_with(dir.path(), File::open(dir.path()), failing(errno))
                .unwrap_or_else(|e| panic!("errno {errno}: {e}"));
        }
        let e = OutputLock::acquire_with(dir.path(), File::open(dir.path()), failing(libc::EIO))
            .unwrap_err();
        assert!(e.to_string().contains("os error 5"), "{e}");
    }

    #[test]
    fn a_root_is_removed_only_while_empty_and_nobody_locks_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("out");
        std::fs::create_dir(&root).unwrap();
        // Another part is starting in it: it holds the root shared, its directory not yet
        // made.
        let other = OutputLock::acquire_shared(&root).unwrap();
        assert!(!remove_if_unused(&root));
        assert!(root.is_dir());
        drop(other);
        // Its directory made (and the root unlocked, as once it is ready).
        std::fs::create_dir(root.join("part-00001-of-00002")).unwrap();
        assert!(!remove_if_unused(&root));
        std::fs::remove_dir(root.join("part-00001-of-00002")).unwrap();
        // A merge holds it.
        let merging = OutputLock::acquire(&root).unwrap();
        assert!(!remove_if_unused(&root));
        drop(merging);
        assert!(remove_if_unused(&root));
        assert!(!root.exists());
    }
}
