//! Removing the part directories once the merged manifest is written: each from where it
//! was when the merge began, wherever paths lead by then.
//!
//! A part found in the root (`OUT/part-*`) is removed by its name in the root the merge
//! holds open and locked. By path, a merge paused after its last check while the root was
//! moved away and another made under its name removed that other run's parts, the only
//! copies of their records.

use std::path::{Path, PathBuf};

use crate::held_dir::HeldDir;
use crate::FormatError;

/// Where a part directory is.
#[derive(Debug)]
pub(super) enum PartPlace {
    /// A directory in the root, by its name there.
    InRoot(PathBuf),
    /// A symbolic link in the root, by its name there, and the directory it led to; where
    /// that lies inside the root, also its path from the root, by which it is removed.
    LinkInRoot {
        name: PathBuf,
        target: PathBuf,
        within: Option<PathBuf>,
    },
    /// A part outside the root: its path with the parent resolved ([`resolved_dir`]), and
    /// the directory it led to when it is a symbolic link.
    Elsewhere {
        path: PathBuf,
        target: Option<PathBuf>,
    },
}

/// Where the part `dir` is, seen from `root` (held open, its path checked afterwards: a
/// part looked up by path in a root swapped before that check is never removed).
pub(super) fn place_of(dir: &Path, root: &HeldDir) -> PartPlace {
    let path = resolved_dir(dir);
    let link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
    let target = link.then(|| std::fs::canonicalize(&path).ok()).flatten();
    // A bare name given is in the working directory.
    let parent = path.parent().map(|p| match p.as_os_str().is_empty() {
        true => Path::new("."),
        false => p,
    });
    let in_root = parent.is_some_and(|p| root.identity().check(p).is_ok());
    match (in_root, path.file_name(), target) {
        (true, Some(name), None) if !link => PartPlace::InRoot(name.into()),
        (true, Some(name), Some(target)) => {
            let root_real = std::fs::canonicalize(root.path());
            let within = root_real
                .ok()
                .and_then(|r| Some(target.strip_prefix(r).ok()?.into()));
            PartPlace::LinkInRoot {
                name: name.into(),
                target,
                within,
            }
        }
        (_, _, target) => PartPlace::Elsewhere { path, target },
    }
}

impl PartPlace {
    /// The part directory, open: one in the root opened by its name there (the root held),
    /// so that its shards linked are its own whatever the root's path names by then; `dir`,
    /// its path, in messages.
    pub(super) fn open(&self, root: &HeldDir, dir: &Path) -> Result<HeldDir, FormatError> {
        match self {
            PartPlace::InRoot(name) | PartPlace::LinkInRoot { name, .. } => {
                root.open_dir(name, dir)
            }
            PartPlace::Elsewhere { .. } => HeldDir::open(dir),
        }
    }
}

/// Removes the merged part at `place`; a symlink to a part directory goes with the
/// directory it leads to, which is returned. Removing the link alone, the merge said it
/// removed the part while the part stayed whole beside the dataset, its shards' space
/// still taken, ready to be merged or "resumed" once more.
pub(super) fn remove(place: &PartPlace, root: &HeldDir) -> std::io::Result<Option<PathBuf>> {
    match place {
        PartPlace::InRoot(name) => root.remove_tree(name).map(|()| None),
        PartPlace::LinkInRoot {
            name,
            target,
            within,
        } => {
            match within {
                Some(within) => root.remove_tree(within)?,
                None => std::fs::remove_dir_all(target)?,
            }
            // A link is removed as a file, never followed.
            root.remove_tree(name)?;
            Ok(Some(target.clone()))
        }
        PartPlace::Elsewhere { path, target: None } => std::fs::remove_dir_all(path).map(|()| None),
        PartPlace::Elsewhere {
            path,
            target: Some(target),
        } => {
            std::fs::remove_dir_all(target)?;
            std::fs::remove_file(path)?;
            Ok(Some(target.clone()))
        }
    }
}

/// `dir` with its parent resolved, for removing the part directories one after the
/// other: `OUT` given as `OUT/part-00000-of-00002/..` found `OUT/part-00000-of-00002/../
/// part-00001-of-00002`, a path through the first part, gone once it was removed, and the
/// second was left beside the merged dataset. The last component is kept as it is: a part
/// that is a symlink is the link.
fn resolved_dir(dir: &Path) -> PathBuf {
    let resolved = match (dir.parent(), dir.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => {
            std::fs::canonicalize(parent).map(|p| p.join(name))
        }
        (Some(_), Some(_)) => return dir.to_path_buf(),
        // Ends in `..` or `.`: no link to keep.
        _ => std::fs::canonicalize(dir),
    };
    resolved.unwrap_or_else(|_| dir.to_path_buf())
}
