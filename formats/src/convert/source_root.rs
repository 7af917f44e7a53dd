//! The source's root as a conversion found it. An input that cannot be read is a skip; but
//! a source that went away mid-run (moved, deleted, its file system unmounted) makes every
//! input after it one, and a conversion that went on wrote a finished dataset of what it
//! had read by then, each lost input listed as "unreadable", and exited 0.

use std::path::{Path, PathBuf};

use super::walk::{dir_id, path_id};
use crate::FormatError;

/// The source root's path and identity (device, inode) when the conversion started.
pub(super) struct SourceRoot {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

impl SourceRoot {
    /// The root at `path` now: taken before the listing, so that a source moved away
    /// from then on stops the run.
    pub(super) fn of(path: &Path) -> SourceRoot {
        let id = path_id(path);
        SourceRoot {
            path: path.to_path_buf(),
            id,
        }
    }

    /// The error that stops the conversion at input `at` (of `total`) when the source is
    /// no longer the one found at the start; `None` while it is (one `stat`, asked only
    /// when an input is skipped).
    pub(super) fn gone(&self, at: usize, total: usize) -> Option<FormatError> {
        let id = self.id?;
        let why = match std::fs::metadata(&self.path) {
            Ok(m) if dir_id(&m) == id => return None,
            Ok(_) => "names another file or directory than when the conversion started (moved and replaced, or its file system unmounted)".to_string(),
            Err(e) => format!("cannot be found any more ({e}): moved, deleted or unmounted"),
        };
        Some(FormatError::BadSource {
            path: self.path.clone(),
            reason: format!(
                "the source {why}, at input {} of {total}; its inputs could no longer be read, so the conversion stopped, its finished shards kept: bring the source back, then rerun with --resume (Python: resume=True)",
                at + 1
            ),
        })
    }
}
