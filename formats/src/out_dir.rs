//! What an output directory already holds, checked before anything writes into it: a
//! finished dataset (nothing writes over one) or the shards of a writer that did not
//! finish (a new dataset there would take them in).

use std::path::Path;

use crate::manifest::MANIFEST_FILE;
use crate::text::Lossless;
use crate::FormatError;

/// Refuses an output directory `out` that holds a finished dataset (a manifest): nothing
/// writes over one.
pub(crate) fn refuse_finished(out: &Path) -> Result<(), FormatError> {
    if out.join(MANIFEST_FILE).exists() {
        return Err(FormatError::OutputExists {
            path: out.to_path_buf(),
            reason: "already holds a finished dataset (manifest.json); choose another output directory or delete it".into(),
        });
    }
    Ok(())
}

/// Refuses an output directory that holds the finished shards of a writer that stopped
/// before its manifest: a [`crate::DatasetWriter`] started there would rename its own
/// shards over the first of them and leave the rest inside its dataset.
pub(crate) fn refuse_unfinished_writer(out: &Path) -> Result<(), FormatError> {
    if unfinished_shards(out) > 0 {
        return Err(FormatError::OutputExists {
            path: out.to_path_buf(),
            reason: "holds the shards of a writer that did not finish (no manifest.json), which a new dataset there would take in: delete them or write into a new or empty directory".into(),
        });
    }
    Ok(())
}

/// How many shard files (`shard-*.lmdb`) `root` holds, looking at its first 100,000
/// entries: in a directory without a manifest or a journal, what a writer killed before
/// it finished leaves.
pub(crate) fn unfinished_shards(root: &Path) -> usize {
    entries_named(root, is_shard_file)
}

/// Whether a directory entry's `name` is a finished shard's (`shard-*.lmdb`).
pub(crate) fn is_shard_file(name: &[u8]) -> bool {
    name.starts_with(b"shard-") && name.ends_with(b".lmdb")
}

/// How many of the first 100,000 entries of `root` have a name for which `named` holds.
pub(crate) fn entries_named(root: &Path, named: impl Fn(&[u8]) -> bool) -> usize {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .take(100_000)
        .filter(|e| named(e.file_name().as_encoded_bytes()))
        .count()
}

/// The directory a writer locked, told by its device and inode: a path names another
/// directory once this one is moved or removed and a new one made under its name (a run
/// paused by Ctrl-Z or a frozen container while another run started there). The writer
/// makes its files in the directory it holds open ([`crate::held_dir::HeldDir`]); this
/// check stops it once its path leads elsewhere, where nobody would find what it writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirIdentity {
    dev: u64,
    ino: u64,
}

impl DirIdentity {
    /// The identity of the open directory `dir`: the one a writer's lock holds, wherever
    /// its path leads now.
    pub(crate) fn of_file(dir: &std::fs::File) -> std::io::Result<DirIdentity> {
        use std::os::unix::fs::MetadataExt;
        let m = dir.metadata()?;
        Ok(DirIdentity {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// Refuses to go on when `dir` no longer names this directory
    /// ([`FormatError::OutputMoved`]): checked before a writer deletes a leftover, begins
    /// or renames a shard, and writes the manifest. A `dir` that cannot be looked at for
    /// another reason (permissions, I/O) is that error.
    pub(crate) fn check(&self, dir: &Path) -> Result<(), FormatError> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(dir) {
            Ok(m) if (m.dev(), m.ino()) == (self.dev, self.ino) => Ok(()),
            Ok(_) => Err(FormatError::OutputMoved {
                path: dir.to_path_buf(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(FormatError::OutputMoved {
                path: dir.to_path_buf(),
            }),
            Err(e) => Err(FormatError::io(dir, e)),
        }
    }
}

/// How a directory handle is opened: read-only (enough for every `*at` call), never
/// inherited by a child process.
pub(crate) fn dir_flags() -> rustix::fs::OFlags {
    use rustix::fs::OFlags;
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// Removes the empty directory at `path` if it is `held` (a run's own output directory,
/// which the run made and now takes away), and nothing else; false when it stays.
///
/// Removed by its name alone, whatever directory is at that name when the call lands would
/// go: a run paused right before it, while its directory was moved away and another run
/// made a new one under the name (empty, about to be locked), removed the newcomer's. So
/// once the name is seen to lead to `held`, the directory is renamed aside, in its parent,
/// to a name of this process's (`.stoker-removing-PID-K`), looked at there, and
/// removed only if it is `held`; anything else is renamed back at once. Where the file
/// system cannot rename without replacing, it is removed by its name once seen to be
/// `held`.
pub(crate) fn remove_empty_dir(path: &Path, held: DirIdentity) -> bool {
    use rustix::fs::{AtFlags, Mode, RenameFlags};
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        // `/`, or a path ending in `..`: never a directory a run made.
        return false;
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let flags = dir_flags();
    let Ok(p) = rustix::fs::openat(rustix::fs::CWD, parent, flags, Mode::empty()) else {
        return false;
    };
    let is_held = |at: &std::ffi::OsStr| {
        rustix::fs::statat(&p, at, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| (st.st_dev, st.st_ino) == (held.dev, held.ino))
    };
    // Nothing that is not ours is moved even for a moment.
    if !is_held(name) {
        return false;
    }
    #[cfg(test)]
    tests::before_removal();
    let aside = match rename_aside(&p, name) {
        Aside::Renamed(aside) => aside,
        // No rename without replacing here (NFS, 9p, some FUSE): looked at just above.
        Aside::Unsupported => return rustix::fs::unlinkat(&p, name, AtFlags::REMOVEDIR).is_ok(),
        Aside::Failed => return false,
    };
    if is_held(aside.as_ref())
        && rustix::fs::unlinkat(&p, aside.as_str(), AtFlags::REMOVEDIR).is_ok()
    {
        return true;
    }
    // Another run's, or ours with something put in it since: back under its name.
    if let Err(e) = rustix::fs::renameat_with(&p, aside.as_str(), &p, name, RenameFlags::NOREPLACE)
    {
        tracing::warn!(
            "{}: renamed aside to be removed, and not put back ({}); it is {}",
            path.lossless(),
            std::io::Error::from(e),
            parent.join(&aside).lossless()
        );
    }
    false
}

/// How many aside names [`rename_aside`] tries: one left by a process that died between
/// its rename and its removal may hold the first (a container's process is often pid 1).
const ASIDE_TRIES: u32 = 16;

/// What [`rename_aside`] did.
enum Aside {
    /// Renamed to this name.
    Renamed(String),
    /// The file system cannot rename without replacing.
    Unsupported,
    /// Not renamed: the name gone, every hidden name taken, another error.
    Failed,
}

/// Renames `name` in the open directory `parent` to a new hidden name of this process's,
/// `.stoker-removing-PID-K` (short, whatever the length of `name`).
fn rename_aside(parent: &rustix::fd::OwnedFd, name: &std::ffi::OsStr) -> Aside {
    use rustix::io::Errno;
    for k in 0..ASIDE_TRIES {
        let aside = format!(".stoker-removing-{}-{k}", std::process::id());
        let flags = rustix::fs::RenameFlags::NOREPLACE;
        match rustix::fs::renameat_with(parent, name, parent, aside.as_str(), flags) {
            Ok(()) => return Aside::Renamed(aside),
            Err(Errno::EXIST) => continue,
            Err(Errno::INVAL | Errno::NOSYS | Errno::PERM) => return Aside::Unsupported,
            Err(_) => return Aside::Failed,
        }
    }
    Aside::Failed
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::{DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};

    thread_local! {
        /// Run once, on this thread, when [`remove_empty_dir`] has seen its name lead to
        /// the directory held, just before it renames it aside.
        static BEFORE_REMOVAL: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    pub(super) fn before_removal() {
        if let Some(f) = BEFORE_REMOVAL.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    const META: RecordMeta = RecordMeta {
        encoding: Encoding::Jpeg,
        height: 4,
        width: 4,
        channels: 3,
        label: 0,
    };

    use crate::held_dir::replace;

    fn moved(e: FormatError) -> bool {
        matches!(e, FormatError::OutputMoved { .. })
    }

    #[test]
    fn each_write_checks_that_the_path_still_names_the_locked_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let one = WriterOptions {
            records_per_shard: Some(1),
            ..WriterOptions::default()
        };
        // The first shard is not begun in a directory made under the name since.
        let out = tmp.path().join("begin");
        let mut w = DatasetWriter::create(&out, one.clone()).unwrap();
        replace(&out);
        assert!(moved(w.push(META, b"x").unwrap_err()));
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);

        // Nor the manifest written, every shard finished while the directory was its own.
        let out = tmp.path().join("manifest");
        let mut w = DatasetWriter::create(&out, one.clone()).unwrap();
        w.push(META, b"x").unwrap();
        assert!(w.roll_if_needed(1).unwrap().is_some());
        replace(&out);
        let e = w.finish(vec!["a".into()], Provenance::stoker("t"));
        assert!(moved(e.unwrap_err()));
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);

        // A writer continued from a lock taken before the name was given to another
        // directory deletes none of that one's files as its own leftovers.
        let out = tmp.path().join("resume");
        std::fs::create_dir(&out).unwrap();
        let locked = crate::held_dir::HeldDir::open(&out).unwrap();
        replace(&out);
        std::fs::write(out.join("shard-00000.lmdb.tmp"), b"another run's").unwrap();
        let e = DatasetWriter::resume_from(one, Vec::new(), locked).unwrap_err();
        assert!(moved(e));
        assert!(out.join("shard-00000.lmdb.tmp").exists());
    }

    /// A writer stopped in the moment between a check and the call it guards (forced with
    /// `strace -e inject=…:delay_enter`) while its directory was moved away and another run
    /// made a new one under the name: by path, it deleted the newcomer's leftovers as its
    /// own, and renamed its shards and its manifest over the newcomer's files.
    #[test]
    fn a_writer_acts_in_the_directory_it_holds_even_where_no_check_sees_the_move() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("shard-00000.lmdb.tmp"), b"our leftover").unwrap();
        let held = crate::held_dir::HeldDir::open(&out).unwrap().blind();
        let moved = replace(&out);
        let theirs = [
            "shard-00000.lmdb.tmp",
            "shard-00000.lmdb",
            "shard-00001.lmdb",
        ];
        for name in theirs.iter().chain([&MANIFEST_FILE]) {
            std::fs::write(out.join(name), b"the newcomer's").unwrap();
        }
        let two = WriterOptions {
            records_per_shard: Some(2),
            ..WriterOptions::default()
        };
        let mut w = DatasetWriter::resume_from(two, Vec::new(), held).unwrap();
        for label in 0..5 {
            w.push(RecordMeta { label, ..META }, b"x").unwrap();
        }
        let classes = (0..5).map(|c| format!("c{c}")).collect();
        w.finish(classes, Provenance::stoker("t")).unwrap();

        for name in theirs.iter().chain([&MANIFEST_FILE]) {
            assert_eq!(std::fs::read(out.join(name)).unwrap(), b"the newcomer's");
        }
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 4);
        let ds = crate::Dataset::open(&moved).unwrap().reader().unwrap();
        let labels: Vec<u32> = (0..5).map(|i| ds.get(i).unwrap().header.label).collect();
        assert_eq!(labels, [0, 1, 2, 3, 4]);
        assert!(!moved.join("shard-00000.lmdb.tmp").exists());
    }

    /// A run paused just before it took away the output directory it had made (a
    /// `--strict` stop, a writer's abort) while the directory was moved away and another
    /// run made a new, empty one under the name: by path, the newcomer's went.
    #[test]
    fn only_the_directory_held_is_removed_never_one_made_under_its_name_since() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let held = DirIdentity::of_file(&std::fs::File::open(&out).unwrap()).unwrap();
        // Swapped in the moment after the name was seen to be ours: the newcomer is
        // renamed aside, seen not to be ours, and put back, not removed.
        let (from, newcomer) = (out.clone(), Rc::new(RefCell::new(None)));
        let made = newcomer.clone();
        BEFORE_REMOVAL.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                let _ = replace(&from);
                *made.borrow_mut() =
                    DirIdentity::of_file(&std::fs::File::open(&from).unwrap()).ok();
            }))
        });
        assert!(!remove_empty_dir(&out, held));
        let now = DirIdentity::of_file(&std::fs::File::open(&out).unwrap()).unwrap();
        let newcomer = newcomer.borrow().expect("the swap ran");
        assert_eq!((now.dev, now.ino), (newcomer.dev, newcomer.ino));
        let moved = out.with_extension("moved");
        // Swapped before: seen not to be ours, it is not even moved aside.
        BEFORE_REMOVAL.with(|h| *h.borrow_mut() = Some(Box::new(|| panic!("moved aside"))));
        assert!(!remove_empty_dir(&out, held));
        BEFORE_REMOVAL.with(|h| *h.borrow_mut() = None);
        // Nothing of the attempts is left beside it.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2);
        // Its own: kept while something is in it, removed once empty.
        std::fs::write(moved.join("f"), b"").unwrap();
        assert!(!remove_empty_dir(&moved, held));
        assert!(moved.join("f").exists());
        std::fs::remove_file(moved.join("f")).unwrap();
        assert!(remove_empty_dir(&moved, held));
        assert!(!moved.exists());
        // A symlink to it is never removed as it.
        std::fs::create_dir(&moved).unwrap();
        let held = DirIdentity::of_file(&std::fs::File::open(&moved).unwrap()).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&moved, &link).unwrap();
        assert!(!remove_empty_dir(&link, held));
        assert!(link.is_symlink() && moved.is_dir());
    }

    #[test]
    fn a_directory_that_cannot_be_looked_at_is_that_error_not_a_move() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let id = DirIdentity::of_file(&std::fs::File::open(&out).unwrap()).unwrap();
        assert!(id.check(&out).is_ok());
        // A path through a file: ENOTDIR, not "moved".
        let file = tmp.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let e = id.check(&file.join("out")).unwrap_err();
        assert!(matches!(e, FormatError::Io { .. }), "{e}");
    }
}
