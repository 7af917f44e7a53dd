//! What a `strict` stop, or a run that converted nothing, leaves in the output directory.
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
//!
//! The files are removed from the directory the run holds open (and locked), by their
//! names in it (`unlinkat`), never by a path: were the output directory renamed away and
//! another put at its path during the run, a path would lead into that other directory,
//! and its files of the same names would go. The directories are removed only while their
//! path still names the directory the run holds, the output directory itself only once
//! renamed aside and seen to be it ([`crate::out_dir::remove_empty_dir`]).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::journal::JOURNAL_FILE;
use crate::manifest::MANIFEST_FILE;
use crate::outside_fault::FaultStage;
use crate::text::Lossless;
use crate::writer::{shard_file_name, DatasetWriter};
use crate::FormatError;

/// The names of the files `writer` has written so far in its directory: its finished
/// shards, and the shard it is writing under its temporary name and under the name it gets
/// once finished (a writer that failed while finishing it may have renamed it).
pub(super) fn written_names(writer: &DatasetWriter) -> Vec<String> {
    let done = writer.finished_shards();
    let mut names: Vec<String> = done.iter().map(|s| s.file.clone()).collect();
    let next = shard_file_name(done.len());
    names.push(format!("{next}.tmp"));
    names.push(next);
    names
}

/// The files a run that began afresh made in its directory: `writer`'s
/// ([`written_names`]) and the journal.
fn run_files(writer: &DatasetWriter) -> Vec<String> {
    let mut names = written_names(writer);
    names.push(JOURNAL_FILE.to_string());
    names
}

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
    /// Of `dirs`, the output root of a part, which other parts lock shared while they
    /// start in it: removed only while nobody holds it (see
    /// [`super::lock::remove_if_unused`]), where an empty directory may still be one
    /// that another part is about to write into.
    shared_root: Option<PathBuf>,
}

impl Made {
    /// Creates `out` and its missing ancestors (unless it holds a finished dataset, which
    /// the conversion then refuses or takes as done), noting which it created.
    ///
    /// # Errors
    ///
    /// When a directory cannot be created.
    pub(super) fn create(out: &Path) -> Result<Made, FormatError> {
        super::out_path::refuse_non_directory(out)?;
        // A finished dataset is not made again (a `--resume` of it says so later).
        let dirs = if out.join(MANIFEST_FILE).exists() {
            Vec::new()
        } else {
            super::out_path::make_dirs(out)?
        };
        Ok(Made {
            out: out.to_path_buf(),
            dirs,
            fresh: false,
            shared_root: None,
        })
    }

    /// `out`, which this run has just made itself (its parent existed).
    pub(super) fn made_here(out: &Path) -> Made {
        Made {
            out: out.to_path_buf(),
            dirs: vec![out.to_path_buf()],
            fresh: false,
            shared_root: None,
        }
    }

    /// Marks the output directory as a part's output root, which other parts share.
    pub(super) fn shared(mut self) -> Made {
        self.shared_root = Some(self.out.clone());
        self
    }

    /// Adds the directories `ancestors` created (those of a directory above this output,
    /// made first), to be taken away after this output's own.
    pub(super) fn with_ancestors(mut self, ancestors: Made) -> Made {
        self.dirs.extend(ancestors.dirs);
        self.shared_root = self.shared_root.or(ancestors.shared_root);
        self
    }

    /// Records whether the run begins afresh (no journal to continue).
    pub(super) fn begins_afresh(&mut self, fresh: bool) {
        self.fresh = fresh;
    }

    /// After the conversion failed with `e`: for a [`FormatError::StrictInput`] of a run
    /// that began afresh, removes what it made (`writer`'s shards, the shard it was
    /// writing, the journal, the directories it created) from `dir`, the output directory
    /// the run holds open; says in the error what was left. Any other error is returned as
    /// it is, everything left for `resume`, unless nothing was converted yet (the threads
    /// could not start, the first input met an [`crate::OutsideFault`], Ctrl-C at once):
    /// then, as after [`Made::after_nothing_converted`], no empty directory is left.
    pub(super) fn after_failure(
        &self,
        e: FormatError,
        writer: &DatasetWriter,
        dir: &File,
    ) -> FormatError {
        let FormatError::StrictInput { path, reason, .. } = e else {
            return self.after_nothing_converted(e, writer, dir);
        };
        FormatError::StrictInput {
            path,
            reason,
            resumable: !(self.fresh && self.take_away(dir, &run_files(writer))),
        }
    }

    /// After a run that began afresh converted nothing and failed with `e` (every input
    /// skipped): takes away what it made, as after a `strict` stop, so that no empty
    /// output directory is left behind (a rerun once the source is fixed begins afresh
    /// either way). `e` is returned as it is.
    pub(super) fn after_nothing_converted(
        &self,
        e: FormatError,
        writer: &DatasetWriter,
        dir: &File,
    ) -> FormatError {
        if !self.fresh || writer.next_index() > 0 || !self.take_away(dir, &run_files(writer)) {
            return e;
        }
        // Nothing is left to resume: the error must not say there is.
        match e {
            FormatError::OutsideFault {
                path,
                source,
                fault,
                stage: FaultStage::Converting,
            } => FormatError::OutsideFault {
                path,
                source,
                fault,
                stage: FaultStage::Starting,
            },
            FormatError::Cancelled { .. } => FormatError::Cancelled { resumable: false },
            e => e,
        }
    }

    /// Removes the files `names` from `dir` (the output directory, open), then the
    /// directories this run created, while empty and while `out` still names `dir`; false
    /// when a file could not be removed.
    pub(super) fn take_away(&self, dir: &File, names: &[String]) -> bool {
        let mut all = true;
        for name in names {
            match rustix::fs::unlinkat(dir, name.as_str(), rustix::fs::AtFlags::empty()) {
                Err(e) if e != rustix::io::Errno::NOENT => {
                    let file = self.out.join(name);
                    let error = std::io::Error::from(e);
                    tracing::warn!(file = %file.lossless(), %error, "--strict stop: not removed");
                    all = false;
                }
                _ => {}
            }
        }
        if !self.names_dir(dir) {
            return all;
        }
        let Ok(held) = crate::out_dir::DirIdentity::of_file(dir) else {
            return all;
        };
        // Empty directories only: anything else put there stays, and so does its directory.
        for d in &self.dirs {
            let removed = if self.shared_root.as_ref() == Some(d) {
                super::lock::remove_if_unused(d)
            } else if *d == self.out {
                crate::out_dir::remove_empty_dir(d, held)
            } else {
                std::fs::remove_dir(d).is_ok()
            };
            if !removed {
                break;
            }
        }
        all
    }

    /// Whether the path of the output directory still leads to `dir` (same device and
    /// inode): the directories are taken away only then.
    fn names_dir(&self, dir: &File) -> bool {
        let id = |m: std::fs::Metadata| (m.dev(), m.ino());
        match (dir.metadata(), std::fs::symlink_metadata(&self.out)) {
            (Ok(held), Ok(now)) => id(held) == id(now),
            _ => false,
        }
    }
}
