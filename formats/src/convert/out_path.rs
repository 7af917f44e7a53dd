//! What an output path must be before anything is made at it: a directory, or a path
//! that can become one.

use std::path::{Path, PathBuf};

use crate::text::Lossless;
use crate::FormatError;

/// Refuses an output path that cannot be a directory: it, or the nearest of its
/// ancestors that exists, is a file or a symbolic link to nothing. Creating the directory
/// would say only "File exists" or "Not a directory", naming neither which path is wrong
/// nor what to do; said before the source is listed, it is also said at once.
///
/// # Errors
///
/// [`FormatError::OutputExists`] naming the path that is no directory; I/O errors reading
/// it. A path that cannot be read at all (a missing permission) is left to the creation
/// of the directory to report.
pub(crate) fn refuse_non_directory(out: &Path) -> Result<(), FormatError> {
    // By components: `dang/` (a trailing separator, or `/.`) follows a link to a missing
    // directory and reads as missing, where `dang` reads as the link it is.
    let out: PathBuf = out.components().collect();
    let out = out.as_path();
    for at in out.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        let link = match std::fs::symlink_metadata(at) {
            Ok(link) => link,
            // Missing, or below a file: the ancestor that exists says which.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => continue,
            Err(_) => return Ok(()),
        };
        let below = if at == out {
            String::new()
        } else {
            format!(
                ", so the output directory {} cannot be made in it",
                out.lossless()
            )
        };
        let reason = match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) if at == out => {
                "is a file, not a directory: the output is a directory (new or empty)".into()
            }
            Ok(_) => format!("is a file, not a directory{below}"),
            Err(_) if link.file_type().is_symlink() => format!(
                "is a symbolic link to a missing directory{below}: create its target, or choose another output directory"
            ),
            Err(e) => return Err(FormatError::io(at, e)),
        };
        return Err(FormatError::OutputExists {
            path: at.to_path_buf(),
            reason,
        });
    }
    Ok(())
}

/// How many times [`make_dirs`] starts over when a directory it was making in vanished
/// (another process that made it gave up and took it away). Each start remakes what is
/// missing, so the race has to be lost this many times in a row to fail.
const MAKE_ATTEMPTS: usize = 8;

/// Makes the directory `out` and its missing ancestors, one `mkdir` each from the nearest
/// that exists down, and returns those this call created, deepest first: what a refused
/// or abandoned output may take away again.
///
/// Only a `mkdir` that succeeded counts: a path that was merely missing may still lead to
/// a directory once its ancestors exist (`new/../x` is the user's `x` once `new` is made),
/// and another process may make the same directory first. That process may also take it
/// away again (a part start that gave up removes the root it made) between two `mkdir`s
/// here: the next one then finds no parent, and the call starts over from what exists,
/// up to [`MAKE_ATTEMPTS`] times; what vanished is no longer this call's.
///
/// # Errors
///
/// I/O errors making a directory (the ones made before it are taken away again, deepest
/// first, while empty, and are not returned).
pub(crate) fn make_dirs(out: &Path) -> Result<Vec<PathBuf>, FormatError> {
    // Its prefixes by components, shortest first: `Path::ancestors` of `x/.` starts with
    // `x/.` itself, which cannot be made while `x` is missing.
    let prefixes: Vec<PathBuf> = out
        .components()
        .scan(PathBuf::new(), |at, c| {
            at.push(c);
            Some(at.clone())
        })
        .collect();
    // Made by this call, in the order made.
    let mut made: Vec<PathBuf> = Vec::new();
    let mut attempt = 0;
    let result = loop {
        attempt += 1;
        // What vanished since an earlier attempt made it is someone else's to remake.
        made.retain(|d| std::fs::symlink_metadata(d).is_ok());
        match make_missing(&prefixes, out, &mut made) {
            Err(e) if vanished(&e) && attempt < MAKE_ATTEMPTS => continue,
            other => break other,
        }
    };
    made.reverse();
    if let Err(e) = result {
        // What this call made is taken away again, deepest first, while empty; one that
        // is gone already (taken by another process, or named twice) is passed over.
        for dir in &made {
            match std::fs::remove_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => break,
            }
        }
        return Err(e.into_format_error());
    }
    Ok(made)
}

/// A failed `mkdir` of [`make_missing`], with its path.
struct MakeError {
    path: PathBuf,
    source: std::io::Error,
}

impl MakeError {
    fn into_format_error(self) -> FormatError {
        FormatError::io(&self.path, self.source)
    }
}

/// True when a `mkdir` failed for want of its parent: the parent was there a moment before.
fn vanished(e: &MakeError) -> bool {
    e.source.kind() == std::io::ErrorKind::NotFound
}

/// One pass of [`make_dirs`]: `mkdir` of each missing prefix of `out` from the nearest that
/// exists down, pushing each one made onto `made`; then `out` must be a directory.
fn make_missing(
    prefixes: &[PathBuf],
    out: &Path,
    made: &mut Vec<PathBuf>,
) -> Result<(), MakeError> {
    let missing = prefixes
        .iter()
        .rev()
        .take_while(|a| {
            std::fs::symlink_metadata(a).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        })
        .count();
    for dir in &prefixes[prefixes.len() - missing..] {
        #[cfg(test)]
        tests::before_mkdir(dir);
        match std::fs::create_dir(dir) {
            Ok(()) => made.push(dir.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(MakeError {
                    path: dir.clone(),
                    source,
                })
            }
        }
    }
    // `out` itself is a directory from here on, whatever the path's form; as
    // `create_dir_all` checks it, but without making, unrecorded, a parent that vanished.
    #[cfg(test)]
    tests::before_mkdir(out);
    match std::fs::create_dir(out) {
        Ok(()) => {
            made.push(out.to_path_buf());
            Ok(())
        }
        Err(_) if out.is_dir() => Ok(()),
        Err(source) => Err(MakeError {
            path: out.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// The other process's move in a race, made deterministic.
    type Hook = Box<dyn FnMut(&Path)>;

    thread_local! {
        /// Run before each `mkdir` of [`make_missing`] on this thread.
        static BEFORE_MKDIR: RefCell<Option<Hook>> = RefCell::new(None);
    }

    pub(super) fn before_mkdir(dir: &Path) {
        BEFORE_MKDIR.with(|hook| {
            if let Some(f) = hook.borrow_mut().as_mut() {
                f(dir);
            }
        });
    }

    /// [`make_dirs`] of `out` with `hook` run before each `mkdir`.
    fn make_dirs_racing(
        out: &Path,
        hook: impl FnMut(&Path) + 'static,
    ) -> Result<Vec<PathBuf>, FormatError> {
        BEFORE_MKDIR.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
        let result = make_dirs(out);
        BEFORE_MKDIR.with(|h| *h.borrow_mut() = None);
        result
    }

    /// Another part start made `root` before this call looked, then gave up and took it
    /// away before this call's `mkdir` of `root/part-0`, which failed with "No such file or
    /// directory": the part did not start.
    #[test]
    fn a_parent_removed_between_mkdirs_is_made_again_and_counted_as_made() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let out = root.join("part-0");
        std::fs::create_dir(&root).unwrap();
        let race = || {
            let (r, o) = (root.clone(), out.clone());
            let mut once = true;
            make_dirs_racing(&out, move |dir| {
                if dir == o && std::mem::take(&mut once) {
                    std::fs::remove_dir(&r).unwrap();
                }
            })
            .unwrap()
        };
        let made = race();
        assert!(out.is_dir());
        // `root` is this call's now: it made it.
        assert_eq!(made, vec![out.clone(), root.clone()]);

        // One this call made and the other process took away: made again, named once.
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(race(), vec![out.clone(), root.clone()]);
    }

    /// A parent that vanishes every time: a bounded number of attempts, then the error,
    /// and nothing of this call's left behind.
    #[test]
    fn a_parent_that_keeps_vanishing_is_an_error_after_bounded_attempts() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let out = root.join("part-0");
        let (r, o) = (root.clone(), out.clone());
        let attempts = std::rc::Rc::new(std::cell::Cell::new(0));
        let seen = attempts.clone();
        let e = make_dirs_racing(&out, move |dir| {
            if dir == o {
                seen.set(seen.get() + 1);
                let _ = std::fs::remove_dir(&r);
            }
        })
        .unwrap_err();
        assert!(e.to_string().contains("part-0"), "{e}");
        assert_eq!(attempts.get(), MAKE_ATTEMPTS);
        assert!(!root.exists());
    }

    #[test]
    fn only_directories_this_call_made_are_returned() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        assert_eq!(
            make_dirs(&t.join("a/b")).unwrap(),
            vec![t.join("a/b"), t.join("a")]
        );
        assert!(make_dirs(&t.join("a/b")).unwrap().is_empty());
        // `new/../x` names the existing `x` once `new` is made: only `new` is this call's.
        std::fs::create_dir(t.join("x")).unwrap();
        let made = make_dirs(&t.join("new/../x")).unwrap();
        assert_eq!(made, vec![t.join("new")]);
        assert!(t.join("x").is_dir());
        // A trailing `/.`: its directories are made (it failed, "No such file or directory").
        assert_eq!(
            make_dirs(&t.join("n/x/.")).unwrap(),
            vec![t.join("n/x"), t.join("n")]
        );
        // A failure takes away what the call made: `f/d` cannot be made below a file.
        std::fs::write(t.join("file"), b"").unwrap();
        assert!(make_dirs(&t.join("m/file2/../../file/d")).is_err());
        assert!(
            !t.join("m").exists(),
            "the directories made before the failure stayed"
        );
    }

    #[test]
    fn a_link_to_nothing_is_named_with_or_without_a_trailing_separator() {
        let tmp = tempfile::tempdir().unwrap();
        let dang = tmp.path().join("dang");
        std::os::unix::fs::symlink(tmp.path().join("missing"), &dang).unwrap();
        for out in [dang.clone(), tmp.path().join("dang/")] {
            let e = refuse_non_directory(&out).unwrap_err().to_string();
            assert!(e.contains("symbolic link to a missing directory"), "{e}");
        }
    }
}
