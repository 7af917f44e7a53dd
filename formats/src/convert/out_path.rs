//! What an output path must be before anything is made at it: a directory, or a path
//! that can become one.

use std::path::{Path, PathBuf};

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
                out.display()
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

/// Makes the directory `out` and its missing ancestors, one `mkdir` each from the nearest
/// that exists down, and returns those this call created, deepest first: what a refused
/// or abandoned output may take away again.
///
/// Only a `mkdir` that succeeded counts: a path that was merely missing may still lead to
/// a directory once its ancestors exist (`new/../x` is the user's `x` once `new` is made),
/// and another process may make the same directory first.
///
/// # Errors
///
/// I/O errors making a directory (the ones made before it stay, and are not returned).
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
    let missing = prefixes
        .iter()
        .rev()
        .take_while(|a| {
            std::fs::symlink_metadata(a).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        })
        .count();
    let mut made: Vec<PathBuf> = Vec::new();
    let made_all = prefixes[prefixes.len() - missing..]
        .iter()
        .try_for_each(|dir| {
            match std::fs::create_dir(dir) {
                Ok(()) => made.push(dir.clone()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(FormatError::io(dir, e)),
            }
            Ok(())
        });
    made.reverse();
    // `out` itself is a directory from here on, whatever the path's form.
    let made_all =
        made_all.and_then(|()| std::fs::create_dir_all(out).map_err(|e| FormatError::io(out, e)));
    if let Err(e) = made_all {
        // What this call made is taken away again, deepest first, while empty.
        for dir in &made {
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
        return Err(e);
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

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
