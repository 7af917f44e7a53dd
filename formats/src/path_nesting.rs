//! Where one directory lies relative to another, decided on the paths the file system
//! resolves to rather than on their spelling: `out`, `./out/../out` and a symlink to it are
//! one directory to `remove_dir_all`, so merge and convert must see them as one too.

use std::path::{Component, Path, PathBuf};

/// `path` with every symlink, `.` and `..` resolved, also when it does not exist yet (an
/// output directory about to be created): its nearest existing ancestor is canonicalized
/// and the missing rest appended, `..` in that rest taken lexically (nothing there can be a
/// symlink, since nothing there exists). Also returns how many trailing components do not
/// exist.
pub(crate) fn resolve(path: &Path) -> std::io::Result<(PathBuf, usize)> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut missing = Vec::new();
    let mut existing = abs.as_path();
    let base = loop {
        match std::fs::canonicalize(existing) {
            Ok(p) => break p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) =
                    (existing.parent(), existing.components().next_back())
                else {
                    return Err(e);
                };
                missing.push(name);
                existing = parent;
            }
            Err(e) => return Err(e),
        }
    };
    let mut resolved = base;
    let mut created = 0usize;
    for c in missing.into_iter().rev() {
        match c {
            Component::ParentDir => {
                resolved.pop();
                created = created.saturating_sub(1);
            }
            Component::Normal(name) => {
                resolved.push(name);
                created += 1;
            }
            _ => {}
        }
    }
    Ok((resolved, created))
}

/// True when `inner` is `outer` or lies below it (both resolved by [`resolve`]).
pub(crate) fn is_within(inner: &Path, outer: &Path) -> bool {
    inner.starts_with(outer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_paths_resolve_through_their_existing_ancestor() {
        let tmp = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir(real.join("a")).unwrap();
        std::os::unix::fs::symlink(real.join("a"), real.join("link")).unwrap();
        let (p, n) = resolve(&real.join("link/x/../y/z")).unwrap();
        assert_eq!((p, n), (real.join("a/y/z"), 2));
        let (p, n) = resolve(&real.join("link")).unwrap();
        assert_eq!((p, n), (real.join("a"), 0));
        assert!(is_within(&real.join("a/y"), &real.join("a")));
        assert!(is_within(&real.join("a"), &real.join("a")));
        assert!(!is_within(&real.join("ab"), &real.join("a")));
    }
}
