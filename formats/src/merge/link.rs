//! Linking a part's shards into the merged dataset: the one step of a merge that touches
//! the parts' files, so the one that must not lose them.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::digest::DigestKind;
use crate::held_dir::HeldDir;
use crate::text::Lossless;
use crate::{FormatError, ShardEntry};

/// What to do about a part damaged since it was finished: nothing of it can be trusted.
pub(super) const REDO_PART: &str =
    "convert or write this part again (delete its directory and rerun its task), then merge";

/// Refuses a shard of the part `part` whose file is not the size its manifest entry `s`
/// gives.
pub(super) fn check_size(part: &HeldDir, s: &ShardEntry) -> Result<(), FormatError> {
    let len = part.len_of(&s.file)?;
    if len != s.bytes {
        return Err(FormatError::ShardSizeMismatch {
            shard: part.join(&s.file),
            got: len,
            want: s.bytes,
        });
    }
    Ok(())
}

pub(super) fn link_error(from: &Path, to: &Path, e: std::io::Error) -> FormatError {
    let refused = |reason: String| FormatError::MergeRefused {
        path: from.to_path_buf(),
        reason,
    };
    match e.raw_os_error() {
        Some(libc::EXDEV) => refused(format!(
            "on another file system than {}; merge links shards instead of copying them, so give an output root on the parts' file system",
            to.lossless()
        )),
        // A bare "Operation not permitted" naming the link, not the shard, left the
        // operator to guess: a merge run as another user than the conversion tasks (a
        // separate Job's securityContext, an interactive shell) meets the kernel's
        // fs.protected_hardlinks, which forbids linking other users' files.
        Some(libc::EPERM) => refused(format!(
            "cannot be hard-linked as {} ({e}): the shard belongs to another user and the kernel (fs.protected_hardlinks) forbids linking other users' files, or the file system has no hard links; run merge as the user that converted the parts",
            to.lossless()
        )),
        // Object-storage FUSE mounts and some others have no hard links at all. (EMLINK,
        // a shard already at its file system's link limit, stays the I/O error it is.)
        Some(libc::ENOSYS | libc::EOPNOTSUPP) => refused(format!(
            "cannot be hard-linked as {} ({e}): merge links shards instead of copying them, which this file system does not allow; convert onto a file system with hard links (or in one part)",
            to.lossless()
        )),
        _ => FormatError::io(to, e),
    }
}

/// Each linked shard's whole-file xxh3 against its part's manifest (`(part's shard, merged
/// name, digest)`), hashed through the merged name in `root`, which is the file the dataset
/// keeps;
/// a shard that differs refuses the merge, naming it.
/// Size, record count and keys do not tell the shards of two parts of one conversion
/// apart (each part numbers its records from 0, and raw records of one size make shards of
/// one size): swapped between parts, they merged, and the merged dataset read each
/// record with the other part's label, and nothing was left to compare once the parts
/// were removed. Hashed on all cores: the merge's one read of every byte.
///
/// On a pool of its own, one thread per available CPU (rayon's global pool panicked where
/// threads could not start, a `pids.max` or `ulimit -u` below the CPUs, and took any
/// `RAYON_NUM_THREADS`, 100,000 threads included); on this thread where none can start.
pub(super) fn check_digests(
    root: &HeldDir,
    linked: &[(PathBuf, String, Option<u64>)],
) -> Result<(), FormatError> {
    let check = |(from, to, want): &(PathBuf, String, Option<u64>)| {
        let Some(want) = *want else {
            return Ok(());
        };
        let mut file = root.open_read(to)?;
        let (_, got) = crate::digest::digest_file(&root.join(to), &mut file, DigestKind::Xxh3)?;
        match got == want {
            true => Ok(()),
            false => Err(FormatError::MergeRefused {
                path: from.clone(),
                reason: format!(
                    "its xxh3-64 is {got:016x}, its part's manifest says {want:016x}: the shard was altered, or swapped with another's, after its part was finished; {}",
                    REDO_PART
                ),
            }),
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cores.min(linked.len()).max(1))
        .thread_name(|i| format!("stoker-merge-{i}"))
        .build();
    match pool {
        Ok(pool) => pool.install(|| linked.par_iter().try_for_each(check)),
        Err(e) => {
            tracing::warn!("cannot start threads to check the shards on ({e}): checking on one");
            linked.iter().try_for_each(check)
        }
    }
}
