//! What an output directory already holds, checked before anything writes into it: a
//! finished dataset (nothing writes over one) or the shards of a writer that did not
//! finish (a new dataset there would take them in).

use std::path::Path;

use crate::manifest::MANIFEST_FILE;
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
    entries_named(root, |name| {
        name.starts_with(b"shard-") && name.ends_with(b".lmdb")
    })
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

/// The directory a writer began in, told by its device and inode: a path names another
/// directory once this one is moved or removed and a new one made under its name (a run
/// paused by Ctrl-Z or a frozen container while another run started there). Each shard
/// and the manifest are written by path, so without this check a writer carried on in
/// the newcomer, past its lock, over the other run's shards, and finished with a
/// manifest of records it never wrote there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirIdentity {
    dev: u64,
    ino: u64,
}

impl DirIdentity {
    /// The identity of the directory `dir` names now.
    pub(crate) fn of(dir: &Path) -> Result<DirIdentity, FormatError> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir).map_err(|e| FormatError::io(dir, e))?;
        Ok(DirIdentity {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// Refuses to go on when `dir` no longer names this directory; called before each
    /// shard is begun or renamed into place and before the manifest is written.
    pub(crate) fn check(&self, dir: &Path) -> Result<(), FormatError> {
        match DirIdentity::of(dir) {
            Ok(now) if (now.dev, now.ino) == (self.dev, self.ino) => Ok(()),
            _ => Err(FormatError::OutputExists {
                path: dir.to_path_buf(),
                reason: "the output directory was removed or moved away while it was written (the path names another directory now, or none): nothing more is written under its name; a conversion moved away continues with `--resume` and its new place as OUT".into(),
            }),
        }
    }
}
