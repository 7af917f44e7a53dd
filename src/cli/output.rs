//! Where results leave the process: stdout, stderr and files the user names. The
//! standard macros (`println!`, `eprintln!`) panic when a write fails, and a file
//! created at its final name is visible half-written; this module is the one place
//! that does neither (and writes through a symlink or to `/dev/stdout` as `>` would).

use std::ffi::{OsStr, OsString};
use std::fs::{File, Permissions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;

/// Writes one line to stderr, ignoring failure: when stderr itself cannot be written
/// (closed, full) there is nowhere left to report to, and a panic would only replace
/// the exit status the caller chose.
pub fn note(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// Whether writing `path` reaches this process's stdout: `path` (its links followed) is the
/// file, pipe or terminal open as fd 1, as `/dev/stdout`, `/proc/self/fd/1` and
/// `/dev/fd/1` are, or as a file is that stdout was redirected to. What goes to stdout
/// besides must then go elsewhere, or it is mixed into the file's bytes. `/dev/null` is no
/// such file: nothing written there is read back.
pub fn is_stdout(path: &Path) -> bool {
    let Ok(out) = rustix::fs::fstat(std::io::stdout()) else {
        // fd 1 is closed: nothing the path names can be it.
        return false;
    };
    let same = |st: &rustix::fs::Stat| st.st_dev == out.st_dev && st.st_ino == out.st_ino;
    let null = rustix::fs::stat("/dev/null").is_ok_and(|st| same(&st));
    rustix::fs::stat(path).is_ok_and(|st| same(&st)) && !null
}

/// Stdout for a command's results, locked. A failed write says that stdout failed: a bare
/// "No space left on device" after a conversion that succeeded read as if the dataset's
/// own disk were full. The error keeps its kind, so a closed pipe still ends quietly.
pub fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

/// See [`stdout`].
pub struct Stdout(std::io::StdoutLock<'static>);

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf).map_err(on_stdout)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush().map_err(on_stdout)
    }
}

/// `e`, said to be stdout's.
pub fn on_stdout(e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("writing to stdout: {e}"))
}

/// `text` for a terminal or a line-based log: control characters (a newline, ESC) written
/// `\xNN`, as bytes that are not UTF-8 are. A file named `a.jpg: not an image\n  b.jpg`
/// forged a second line in the skip list, and one holding ESC sequences drove the terminal.
pub fn shown(text: &str) -> String {
    stoker_formats::one_line(text)
}

/// [`shown`] of a path, its bytes that are not UTF-8 written `\xNN`.
pub fn shown_path(path: &Path) -> String {
    shown(&stoker_formats::lossless_text(path.as_os_str()))
}

/// [`shown_path`] as a method, for the many places that print a path: `.shown()` writes
/// U+FFFD for a byte that is not UTF-8 (two folders that differ only there look alike) and
/// passes a newline through, which forges a line of output (`output: out` then `X`).
pub trait Shown {
    /// See [`shown_path`].
    fn shown(&self) -> String;
}

impl Shown for Path {
    fn shown(&self) -> String {
        shown_path(self)
    }
}

/// `path` as text without loss, for JSON, which holds no bytes that are not UTF-8 (serde
/// refuses such a path, and `json!` panicked): as the conversion report writes its paths.
pub fn path_text(path: &Path) -> String {
    stoker_formats::lossless_text(path.as_os_str())
}

/// Writes to stdout through `fill` (buffered, flushed before returning), for a file the
/// user asked for on stdout (`-o -`).
///
/// # Errors
///
/// When `fill` fails or stdout cannot be written (a closed pipe, a full disk).
pub fn write_stdout(
    fill: impl FnOnce(&mut BufWriter<std::io::StdoutLock<'static>>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut w = BufWriter::new(std::io::stdout().lock());
    fill(&mut w).context("writing stdout")?;
    // Stdout keeps a line buffer of its own, behind this one.
    w.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|mut lock| lock.flush())
        .context("writing stdout")
}

/// Writes `path` through `fill`.
///
/// A new path or a regular file appears only complete: the bytes go to a temporary file in
/// the same directory (same file system, so the rename cannot copy; `tempfile` names it
/// and removes it on every early return or panic), which is flushed, synced and renamed
/// over `path` only when `fill` and every write succeeded; on any failure an existing
/// `path` is left as it was. The result has the mode a plain `create` would give (0666
/// less the umask), or the replaced file's permission bits, so that whoever could read
/// the old file can read the new one.
///
/// A symlink to a regular file keeps the link: the file it names is the one replaced, the
/// same way. Anything that is not a regular file (`/dev/stdout`, a FIFO, a terminal, a link
/// to one) is written through instead, as a shell's `>` would: renaming over it would
/// replace the link or device node itself (as root, `-o /dev/stdout` turned the system's
/// `/dev/stdout` into a PNG file) and the bytes would never reach the reader.
///
/// # Errors
///
/// When `path` names no file, the file cannot be created, opened or written (a full disk,
/// a file-size limit), `fill` fails, or the rename fails (`path` is a directory).
pub fn write_file_atomically(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        // A link to a regular file: the file it names is replaced whole, and the link
        // stays (writing through it left the old file cut short on a failed write).
        Ok(m) if m.is_symlink() => match link_target(path) {
            // A file (or none yet) in a directory we may write: replaced (or created) whole.
            Some((target, mode)) if dir_writable(&target) => replace(&target, mode, fill),
            // A device or pipe, or a file in a directory we may not write (where `>`
            // still works): written through.
            _ => write_through(path, fill),
        },
        Ok(m) if !m.is_file() && !m.is_dir() => write_through(path, fill),
        Ok(m) => replace(path, Some(m.permissions().mode() & 0o777), fill),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => replace(path, None, fill),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.shown())),
    }
}

/// Where the symlink `path` leads, when that is a regular file (with its permission bits)
/// or nothing yet (a dangling link: `None` bits); `None` for a device, a pipe, a directory
/// or a loop.
fn link_target(path: &Path) -> Option<(std::path::PathBuf, Option<u32>)> {
    match std::fs::metadata(path) {
        // (A link to a pipe, such as /proc/self/fd/1, is a FIFO here.)
        Ok(meta) if meta.is_file() => {
            let target = std::fs::canonicalize(path).ok()?;
            return Some((target, Some(meta.permissions().mode() & 0o777)));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        _ => return None,
    }
    // Dangling: follow the links by hand to the name that does not exist yet.
    let mut at = path.to_path_buf();
    for _ in 0..40 {
        let next = std::fs::read_link(&at).ok()?;
        at = at.parent()?.join(next);
        match std::fs::symlink_metadata(&at) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some((at, None)),
            Ok(m) if m.is_symlink() => continue,
            _ => return None,
        }
    }
    None
}

/// Whether a temporary file can be made beside `file`, as [`replace`] makes it.
fn dir_writable(file: &Path) -> bool {
    rustix::fs::access(
        dir_of(file),
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .is_ok()
}

/// The directory holding `path` (`.` for a bare file name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Opens `path` (following a symlink) and writes into it, no temporary file, no rename.
fn write_through(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("opening {}", path.shown()))?;
    let file = fill_and_flush(path, file, fill)?;
    // A pipe or a terminal cannot be synced (EINVAL); a file behind a symlink can.
    if file.metadata().is_ok_and(|m| m.is_file()) {
        file.sync_all()
            .with_context(|| format!("syncing {}", path.shown()))?;
    }
    Ok(())
}

/// Writes a temporary file beside `path` and renames it over `path`; `mode` is the
/// replaced file's permission bits, `None` for a new file.
fn replace(
    path: &Path,
    mode: Option<u32>,
    fill: impl FnOnce(&mut BufWriter<File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file name", path.shown()))?;
    let dir = dir_of(path);
    let (file, tmp_path) = create_temporary(dir, name).with_context(|| {
        format!(
            "creating a temporary file for {} in {}",
            path.shown(),
            dir.shown()
        )
    })?;
    if let Some(mode) = mode {
        // Set explicitly: the umask would otherwise narrow the replaced file's bits.
        file.set_permissions(Permissions::from_mode(mode))
            .with_context(|| format!("setting the mode of {}", tmp_path.shown()))?;
    }
    let file = fill_and_flush(path, file, fill)?;
    file.sync_all()
        .with_context(|| format!("syncing {}", path.shown()))?;
    drop(file);
    let persisted = tmp_path.persist(path);
    crate::stop_cleanup::forget();
    persisted
        .map_err(|e| e.error)
        .with_context(|| format!("renaming into {}", path.shown()))?;
    // Best effort: makes the rename durable where a directory can be synced.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Creates `.NAME.PID.RANDOM.stoker.tmp` in `dir`, registered with
/// [`crate::stop_cleanup`] before it exists: a stop (Ctrl-C, `timeout`) skips the
/// destructor that would remove it, and registered after its creation, a stop in between
/// would leave it. The name is registered before the exclusive create, so it must be
/// nobody else's: 64 random bits beside the process id, a new draw if it exists.
fn create_temporary(dir: &Path, name: &OsStr) -> std::io::Result<(File, tempfile::TempPath)> {
    use std::hash::{BuildHasher, Hasher};
    use std::os::unix::fs::OpenOptionsExt;
    let mut last = None;
    for _ in 0..16 {
        // Seeded from the OS's randomness for each state: a draw no other run repeats.
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let mut file_name = OsString::from(".");
        file_name.push(name);
        file_name.push(format!(".{}.{random:016x}.stoker.tmp", std::process::id()));
        let path = dir.join(file_name);
        crate::stop_cleanup::remove_on_stop(&path);
        // 0666 is created as 0666 & !umask, the mode any other new file of this user gets.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&path)
        {
            Ok(file) => {
                // Owns the name from here: removed when dropped, renamed by `persist`.
                return match tempfile::TempPath::try_from_path(&path) {
                    Ok(owner) => Ok((file, owner)),
                    Err(e) => {
                        let _ = std::fs::remove_file(&path);
                        crate::stop_cleanup::forget();
                        Err(e)
                    }
                };
            }
            Err(e) => {
                crate::stop_cleanup::forget();
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
                last = Some(e);
            }
        }
    }
    Err(last.expect("16 tries"))
}

fn fill_and_flush(
    path: &Path,
    file: File,
    fill: impl FnOnce(&mut BufWriter<File>) -> anyhow::Result<()>,
) -> anyhow::Result<File> {
    let mut w = BufWriter::new(file);
    fill(&mut w).with_context(|| format!("writing {}", path.shown()))?;
    // `into_inner` flushes and reports the error that dropping a BufWriter would swallow.
    w.into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", path.shown()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    #[test]
    fn an_anyhow_context_and_a_format_error_print_their_cause_once() {
        let io = std::io::Error::from(ErrorKind::NotFound);
        let e = anyhow::Error::new(stoker_formats::FormatError::Io {
            path: "x/manifest.json".into(),
            source: io,
        })
        .context("opening x");
        assert_eq!(
            crate::exit::message(e.as_ref()),
            format!(
                "opening x: x/manifest.json: {}",
                std::io::Error::from(ErrorKind::NotFound)
            )
        );
    }

    #[test]
    fn a_failed_fill_leaves_the_old_file_and_no_temporary() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("out.png");
        std::fs::write(&path, b"old").unwrap();
        let r = write_file_atomically(&path, |w| {
            w.write_all(b"partial")?;
            anyhow::bail!("cut off")
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1);
        write_file_atomically(&path, |w| Ok(w.write_all(b"new")?)).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1);
    }
}
