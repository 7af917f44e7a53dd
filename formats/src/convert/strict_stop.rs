//! What a `strict` stop leaves in the output directory.
//!
//! A conversion that began in a new or empty directory takes away everything it made
//! there, the directory included when it made that too: the user fixes the bad input
//! (repairs, replaces or deletes it) and converts again, with or without `resume`. Kept
//! for `resume`, its shards would be refused once the input was deleted (the listing
//! changed), and a plain rerun would be refused as a partial conversion. A conversion that
//! continued a partial one (`resume` found a journal) leaves everything for `resume`: what
//! an earlier run made is not its to delete.
//!
//! Only names this run wrote are removed (its shards by the writer's own list, the shard
//! it was writing, the journal it started), and directories only when empty, so a file
//! someone else put in the directory meanwhile stays, and with it the directory.

use std::path::{Path, PathBuf};

use super::journal::JOURNAL_FILE;
use crate::manifest::MANIFEST_FILE;
use crate::writer::{shard_file_name, DatasetWriter};
use crate::FormatError;

/// The directories a conversion is about to create for its output, and whether it then
/// began afresh in it.
#[derive(Debug)]
pub(super) struct Made {
    /// The output directory.
    out: PathBuf,
    /// The output directory and its ancestors that did not exist before this run, deepest
    /// first.
    dirs: Vec<PathBuf>,
    /// Whether this run began in a directory holding no conversion (no journal to
    /// continue), so that every shard and the journal in it are its own.
    fresh: bool,
}

impl Made {
    /// Creates `out` and its missing ancestors (unless it holds a finished dataset, which
    /// the conversion then refuses or takes as done), noting which it created.
    ///
    /// # Errors
    ///
    /// When a directory cannot be created.
    pub(super) fn create(out: &Path) -> Result<Made, FormatError> {
        let mut dirs = Vec::new();
        let mut at = Some(out);
        while let Some(d) = at.filter(|d| !d.as_os_str().is_empty()) {
            match std::fs::symlink_metadata(d) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => dirs.push(d.to_path_buf()),
                _ => break,
            }
            at = d.parent();
        }
        if !out.join(MANIFEST_FILE).exists() {
            std::fs::create_dir_all(out).map_err(|e| FormatError::io(out, e))?;
        }
        Ok(Made {
            out: out.to_path_buf(),
            dirs,
            fresh: false,
        })
    }

    /// Records whether the run begins afresh (no journal to continue).
    pub(super) fn begins_afresh(&mut self, fresh: bool) {
        self.fresh = fresh;
    }

    /// After the conversion failed with `e`: for a [`FormatError::StrictInput`] of a run
    /// that began afresh, removes what it made (`writer`'s shards, the shard it was
    /// writing, the journal, the directories it created); says in the error what was left.
    /// Any other error is returned as it is, everything left for `resume`.
    pub(super) fn after_failure(&self, e: FormatError, writer: &DatasetWriter) -> FormatError {
        let FormatError::StrictInput { path, reason, .. } = e else {
            return e;
        };
        FormatError::StrictInput {
            path,
            reason,
            resumable: !(self.fresh && self.take_away(writer)),
        }
    }

    /// Removes what this run made; false when something could not be removed.
    fn take_away(&self, writer: &DatasetWriter) -> bool {
        let done = writer.finished_shards();
        let mut files: Vec<PathBuf> = done.iter().map(|s| self.out.join(&s.file)).collect();
        files.push(
            self.out
                .join(format!("{}.tmp", shard_file_name(done.len()))),
        );
        files.push(self.out.join(JOURNAL_FILE));
        let mut all = true;
        for f in files {
            match std::fs::remove_file(&f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(file = %f.display(), error = %e, "--strict stop: not removed");
                    all = false;
                }
                _ => {}
            }
        }
        // Empty directories only: anything else put there stays, and so does its directory.
        for d in &self.dirs {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
        all
    }
}
