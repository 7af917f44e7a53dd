//! The output directory as the open handle its writer locked: every file a writer, a
//! conversion's journal or a merge creates, renames, links or deletes there is named
//! relative to that handle (`openat`, `renameat`, `linkat`, `unlinkat`), never by a path.
//!
//! A path is looked up anew at each call. A run paused (Ctrl-Z, a frozen container) while
//! its output directory is moved away and another made under the name would, by path, act
//! on the newcomer, even right after a check that the path still leads to the locked
//! directory ([`HeldDir::check`]): the check and the call are two steps. Named relative to
//! the handle, each step lands in the directory the run locked, wherever it is now. The
//! check stays, so that a moved run stops and says so instead of finishing where nobody
//! looks.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::out_dir::{dir_flags, DirIdentity};
use crate::FormatError;

/// Mode of every file a writer makes, less the umask (docs/FORMAT.md).
const FILE_MODE: u32 = 0o644;

/// An output directory, open; cloning shares the handle.
#[derive(Debug, Clone)]
pub(crate) struct HeldDir {
    /// The directory, open read-only: its own open file description, not the lock's, so
    /// that closing it never releases (or keeps) the lock.
    fd: Arc<File>,
    /// The path it was opened by: for messages, and for [`HeldDir::check`].
    path: PathBuf,
    /// Its device and inode, taken from `fd`.
    id: DirIdentity,
    /// Tests only: [`HeldDir::check`] passes whatever the path names, as if every step
    /// came in the moment between its check and its call.
    #[cfg(test)]
    blind: bool,
}

impl HeldDir {
    /// The directory `locked` (a lock's open directory), known as `path`.
    ///
    /// # Errors
    ///
    /// I/O errors of reopening or looking at it.
    pub(crate) fn of_locked(locked: &File, path: &Path) -> Result<HeldDir, FormatError> {
        let fd = rustix::fs::openat(locked, ".", dir_flags(), Mode::empty())
            .map_err(|e| FormatError::io(path, e.into()))?;
        Self::held(File::from(fd), path)
    }

    /// Opens the directory `path` (symlinks followed), for work that takes no lock (a
    /// finished dataset's journal removed) or for tests.
    pub(crate) fn open(path: &Path) -> Result<HeldDir, FormatError> {
        let fd = rustix::fs::openat(rustix::fs::CWD, path, dir_flags(), Mode::empty())
            .map_err(|e| FormatError::io(path, e.into()))?;
        Self::held(File::from(fd), path)
    }

    fn held(fd: File, path: &Path) -> Result<HeldDir, FormatError> {
        let id = DirIdentity::of_file(&fd).map_err(|e| FormatError::io(path, e))?;
        Ok(HeldDir {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
            id,
            #[cfg(test)]
            blind: false,
        })
    }

    /// Tests only: this handle with [`HeldDir::check`] always passing.
    #[cfg(test)]
    pub(crate) fn blind(self) -> HeldDir {
        HeldDir {
            blind: true,
            ..self
        }
    }

    /// The path it was opened by (where it was then).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in it, for messages.
    pub(crate) fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// Its identity (device and inode).
    pub(crate) fn identity(&self) -> DirIdentity {
        self.id
    }

    /// Refuses to go on once its path names another directory, or none
    /// ([`FormatError::OutputMoved`]): what the run writes next would be out of sight.
    pub(crate) fn check(&self) -> Result<(), FormatError> {
        #[cfg(test)]
        if self.blind {
            return Ok(());
        }
        self.id.check(&self.path)
    }

    /// Creates `name`, which must not exist, for writing.
    pub(crate) fn create_new(&self, name: &str) -> Result<File, FormatError> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
        self.open_with(name, flags)
    }

    /// Creates `name`, or empties it if it exists, for reading and writing.
    pub(crate) fn create(&self, name: &str) -> Result<File, FormatError> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC;
        self.open_with(name, flags)
    }

    /// Opens the existing `name` for appending; non-blocking, and never as a controlling
    /// terminal, whatever was put in its place.
    pub(crate) fn open_append(&self, name: &str) -> Result<File, FormatError> {
        let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::NONBLOCK | OFlags::NOCTTY;
        self.open_with(name, flags | OFlags::CLOEXEC)
    }

    /// Opens the existing `name` for reading.
    pub(crate) fn open_read(&self, name: &str) -> Result<File, FormatError> {
        self.open_with(name, OFlags::RDONLY | OFlags::CLOEXEC)
    }

    fn open_with(&self, name: &str, flags: OFlags) -> Result<File, FormatError> {
        let mode = Mode::from_raw_mode(FILE_MODE);
        rustix::fs::openat(&*self.fd, name, flags, mode)
            .map(File::from)
            .map_err(|e| FormatError::io(self.join(name), e.into()))
    }

    /// A new file in it with no name (nothing to leave behind, whatever ends the process),
    /// for reading and writing: `O_TMPFILE`, or where the file system has none, a new
    /// hidden file of this process's removed at once.
    pub(crate) fn unnamed_file(&self) -> Result<File, FormatError> {
        let mode = Mode::from_raw_mode(0o600);
        let flags = OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC;
        match rustix::fs::openat(&*self.fd, ".", flags, mode) {
            Ok(fd) => return Ok(File::from(fd)),
            // Not supported here (EOPNOTSUPP, or EISDIR/EINVAL from kernels and file
            // systems that do not know the flag): a named one, unlinked.
            Err(
                rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR | rustix::io::Errno::INVAL,
            ) => {}
            Err(e) => return Err(FormatError::io(&self.path, e.into())),
        }
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
        for k in 0..16 {
            let name = format!(".stoker-spool-{}-{k}", std::process::id());
            match rustix::fs::openat(&*self.fd, name.as_str(), flags, mode) {
                Ok(fd) => {
                    self.remove(&name)?;
                    return Ok(File::from(fd));
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(FormatError::io(self.join(&name), e.into())),
            }
        }
        let e = std::io::Error::other("every spool name of this process is taken");
        Err(FormatError::io(&self.path, e))
    }

    /// Reads `name` whole if it is a regular file of at most `limit` bytes, as
    /// [`crate::read_input_file`] reads a path; `None` if there is none.
    pub(crate) fn read(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, FormatError> {
        let path = self.join(name);
        // Looked at before it is opened: a device is never opened.
        let kind = match rustix::fs::statat(&*self.fd, name, AtFlags::empty()) {
            Ok(st) => rustix::fs::FileType::from_raw_mode(st.st_mode),
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(FormatError::io(&path, e.into())),
        };
        if kind != rustix::fs::FileType::RegularFile {
            return Err(FormatError::NotRegularFile {
                path,
                kind: crate::input_file::kind_named(kind),
            });
        }
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let file = match self.open_with(name, flags) {
            Err(FormatError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None)
            }
            opened => opened?,
        };
        crate::input_file::read_opened(&path, &file, limit).map(Some)
    }

    /// Whether `name` is there (a symlink counts as its target).
    pub(crate) fn exists(&self, name: &str) -> bool {
        rustix::fs::statat(&*self.fd, name, AtFlags::empty()).is_ok()
    }

    /// Renames `from` to `to`, both in it (replacing `to`).
    pub(crate) fn rename(&self, from: &str, to: &str) -> Result<(), FormatError> {
        rustix::fs::renameat(&*self.fd, from, &*self.fd, to)
            .map_err(|e| FormatError::io(self.join(to), e.into()))
    }

    /// Deletes the file `name`; false when there was none.
    pub(crate) fn remove(&self, name: impl AsRef<Path>) -> Result<bool, FormatError> {
        let name = name.as_ref();
        match rustix::fs::unlinkat(&*self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(FormatError::io(self.join(name), e.into())),
        }
    }

    /// Deletes the empty directory `name`; false when it is not there or not empty.
    pub(crate) fn remove_dir(&self, name: impl AsRef<Path>) -> bool {
        rustix::fs::unlinkat(&*self.fd, name.as_ref(), AtFlags::REMOVEDIR).is_ok()
    }

    /// Deletes the directory `name` and everything in it, each entry by its name in a
    /// directory held open (never following a symlink, which goes as a file): a merged
    /// part found in the root. At most [`MAX_TREE_DEPTH`] levels deep.
    pub(crate) fn remove_tree(&self, name: &Path) -> std::io::Result<()> {
        remove_tree_at(&self.fd, name, 0)
    }

    /// Makes `name` in it another name of the file `from_name` in `from`, following that
    /// if it is a symlink: `link(2)` would link the symlink itself.
    pub(crate) fn link_from(
        &self,
        from: &HeldDir,
        from_name: &str,
        name: &str,
    ) -> std::io::Result<()> {
        let flags = AtFlags::SYMLINK_FOLLOW;
        rustix::fs::linkat(&*from.fd, from_name, &*self.fd, name, flags).map_err(Into::into)
    }

    /// The directory `name` in it (a symlink there followed), open, known as `shown_as`.
    pub(crate) fn open_dir(&self, name: &Path, shown_as: &Path) -> Result<HeldDir, FormatError> {
        let fd = rustix::fs::openat(&*self.fd, name, dir_flags(), Mode::empty())
            .map_err(|e| FormatError::io(shown_as, e.into()))?;
        Self::held(File::from(fd), shown_as)
    }

    /// The size of the file `name` in it (a symlink followed).
    pub(crate) fn len_of(&self, name: &str) -> Result<u64, FormatError> {
        rustix::fs::statat(&*self.fd, name, AtFlags::empty())
            .map(|st| st.st_size as u64)
            .map_err(|e| FormatError::io(self.join(name), e.into()))
    }

    /// The names of its entries (not `.` and `..`), in directory order.
    pub(crate) fn names(&self) -> Result<Vec<OsString>, FormatError> {
        entry_names(&self.fd).map_err(|e| FormatError::io(&self.path, e.into()))
    }

    /// Makes what was renamed into it durable; best effort, as not every file system can
    /// sync a directory.
    pub(crate) fn sync(&self) {
        let _ = self.fd.sync_all();
    }
}

/// How deep [`HeldDir::remove_tree`] goes: a part directory holds files only, and a tree
/// deeper than this is not one a conversion made.
const MAX_TREE_DEPTH: usize = 64;

/// [`HeldDir::remove_tree`] of `name` in `parent`, `depth` levels down.
fn remove_tree_at(parent: &File, name: &Path, depth: usize) -> std::io::Result<()> {
    match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
        // A directory: `unlink` says EISDIR on Linux.
        Err(rustix::io::Errno::ISDIR) => {}
        done => return done.map_err(Into::into),
    }
    if depth >= MAX_TREE_DEPTH {
        let what = format!("more than {MAX_TREE_DEPTH} directories deep; not removed");
        return Err(std::io::Error::other(what));
    }
    let flags = dir_flags() | OFlags::NOFOLLOW;
    let dir = File::from(rustix::fs::openat(parent, name, flags, Mode::empty())?);
    // Listed before anything goes: entries removed while a directory is read may be
    // skipped by the read.
    for n in entry_names(&dir)? {
        remove_tree_at(&dir, Path::new(&n), depth + 1)?;
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(Into::into)
}

/// The names of the entries of the open directory `dir` (not `.` and `..`), in directory
/// order.
fn entry_names(dir: &File) -> rustix::io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
        }
    }
    Ok(names)
}

/// Tests only: `dir` moved to `dir.moved` (returned), and a new empty directory made
/// under its name, as another run does while a writer is paused.
#[cfg(test)]
pub(crate) fn replace(dir: &Path) -> PathBuf {
    let moved = dir.with_extension("moved");
    std::fs::rename(dir, &moved).unwrap();
    std::fs::create_dir(dir).unwrap();
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_lands_in_the_held_directory_wherever_it_went() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("old"), b"ours").unwrap();
        let held = HeldDir::open(&out).unwrap();
        assert!(held.check().is_ok());

        let moved = replace(&out);
        for name in ["old", "new", "gone"] {
            std::fs::write(out.join(name), b"the newcomer's").unwrap();
        }
        assert!(matches!(held.check(), Err(FormatError::OutputMoved { .. })));
        use std::io::Write;
        held.create_new("new.tmp")
            .unwrap()
            .write_all(b"ours")
            .unwrap();
        held.rename("new.tmp", "new").unwrap();
        assert!(held.remove("old").unwrap());
        assert!(!held.remove("gone").unwrap());
        let elsewhere = HeldDir::open(&moved).unwrap();
        held.link_from(&elsewhere, "new", "linked").unwrap();
        assert_eq!(held.read("new", 10).unwrap().unwrap(), b"ours");
        assert!(held.exists("linked") && !held.exists("old"));
        let mut names = held.names().unwrap();
        names.sort();
        assert_eq!(names, ["linked", "new"]);

        // The newcomer's files are as it left them.
        for name in ["old", "new", "gone"] {
            assert_eq!(std::fs::read(out.join(name)).unwrap(), b"the newcomer's");
        }
        assert!(!out.join("linked").exists());
    }

    #[test]
    fn a_tree_goes_from_the_held_directory_and_a_symlink_in_it_goes_as_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let part = out.join("part-0");
        std::fs::create_dir_all(part.join("deeper")).unwrap();
        std::fs::write(part.join("shard-00000.lmdb"), b"ours").unwrap();
        std::fs::write(part.join("deeper/x"), b"ours").unwrap();
        let kept = tmp.path().join("kept");
        std::fs::create_dir(&kept).unwrap();
        std::fs::write(kept.join("f"), b"someone's").unwrap();
        std::os::unix::fs::symlink(&kept, part.join("link")).unwrap();
        let held = HeldDir::open(&out).unwrap();
        let moved = replace(&out);
        std::fs::create_dir(out.join("part-0")).unwrap();
        std::fs::write(out.join("part-0/shard-00000.lmdb"), b"the newcomer's").unwrap();

        held.remove_tree(Path::new("part-0")).unwrap();
        assert!(!moved.join("part-0").exists());
        assert_eq!(std::fs::read(kept.join("f")).unwrap(), b"someone's");
        let newcomer = std::fs::read(out.join("part-0/shard-00000.lmdb")).unwrap();
        assert_eq!(newcomer, b"the newcomer's");
    }

    #[test]
    fn reads_refuse_what_is_not_a_small_regular_file() {
        let tmp = tempfile::tempdir().unwrap();
        let held = HeldDir::open(tmp.path()).unwrap();
        assert!(held.read("none", 10).unwrap().is_none());
        std::os::unix::fs::symlink("/dev/zero", tmp.path().join("zero")).unwrap();
        let e = held.read("zero", 10).unwrap_err();
        assert!(matches!(
            e,
            FormatError::NotRegularFile {
                kind: "a character device",
                ..
            }
        ));
        std::fs::write(tmp.path().join("big"), [0u8; 11]).unwrap();
        let e = held.read("big", 10).unwrap_err();
        assert!(
            matches!(e, FormatError::FileTooLarge { bytes: 11, .. }),
            "{e}"
        );
        // A FIFO is refused before it is opened, so nothing waits for a writer.
        rustix::fs::mkfifoat(&*held.fd, "fifo", Mode::from_raw_mode(0o600)).unwrap();
        let e = held.read("fifo", 10).unwrap_err();
        assert!(matches!(
            e,
            FormatError::NotRegularFile { kind: "a FIFO", .. }
        ));
    }

    #[test]
    fn a_held_lock_is_neither_kept_nor_released_by_the_handle() {
        let tmp = tempfile::tempdir().unwrap();
        let lock = crate::convert::lock::OutputLock::acquire(tmp.path()).unwrap();
        let held = HeldDir::of_locked(lock.dir(), tmp.path()).unwrap();
        // Another handle closed: the lock stays with the lock's own descriptor.
        drop(HeldDir::of_locked(lock.dir(), tmp.path()).unwrap());
        assert!(crate::convert::lock::is_held(tmp.path()));
        drop(lock);
        assert!(!crate::convert::lock::is_held(tmp.path()));
        drop(held);
    }

    #[test]
    fn an_unnamed_file_leaves_no_name_in_the_directory() {
        use std::io::{Read, Seek, Write};
        let tmp = tempfile::tempdir().unwrap();
        let held = HeldDir::open(tmp.path()).unwrap();
        let mut f = held.unnamed_file().unwrap();
        f.write_all(b"names").unwrap();
        f.rewind().unwrap();
        let mut back = String::new();
        f.read_to_string(&mut back).unwrap();
        assert_eq!(back, "names");
        assert_eq!(held.names().unwrap().len(), 0);
    }
}
