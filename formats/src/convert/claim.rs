//! Claiming an output directory before anything is written into it: the directory made
//! (noting which directories were created, for a clean-up) and locked; and for one part of
//! a partitioned conversion or of a writing from several processes, the output root locked
//! shared while the part directory gets ready.
//!
//! `convert --part` and a [`super::SampleWriter`] with a part both start here, so that they
//! keep out of a `merge` of their root in one way: the merge locks the root alone, the
//! start of each part locks it shared (any number of parts at once, none while a merge
//! runs), and a merge that starts once a part is under way finds the part's directory,
//! unfinished until its manifest.

use std::fs::File;
use std::path::Path;

use super::lock::{same_dir, OutputLock};
use super::part::parse_dir_name;
use super::strict_stop::Made;
use crate::manifest::MANIFEST_FILE;
use crate::source_map::SOURCES_FILE;
use crate::FormatError;

/// An output directory made and locked; for a part, with its root locked shared until
/// [`Claim::ready`].
#[derive(Debug)]
pub(super) struct Claim {
    /// The directories created for the output, for a clean-up to remove.
    pub(super) made: Made,
    /// The output directory's own lock, for as long as it is written.
    pub(super) lock: OutputLock,
    /// For a part: its output root, locked shared. `None` for a whole dataset.
    root: Option<OutputLock>,
}

impl Claim {
    /// Makes `out` and locks it; for a part (`out` is `ROOT/part-IIIII-of-NNNNN`), locks
    /// ROOT shared too and refuses it when it holds a finished dataset (checked under the
    /// lock, so a merge that finished meanwhile is seen). A refused ROOT leaves none of the
    /// directories this call created.
    ///
    /// # Errors
    ///
    /// [`FormatError::OutputLocked`] while another conversion or writer holds `out`, or,
    /// for a part, a merge or a whole conversion holds ROOT;
    /// [`FormatError::OutputExists`] for an `out` that is no directory, or a ROOT that
    /// holds a finished dataset or parts of another number of parts; I/O errors.
    pub(super) fn new(out: &Path, part: bool) -> Result<Claim, FormatError> {
        if !part {
            let made = Made::create(out)?;
            let lock = OutputLock::acquire(out)?;
            return Ok(Claim {
                made,
                lock,
                root: None,
            });
        }
        // `parent` of a relative `part-...` alone is the empty path: the current directory.
        let root = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // The root first, locked shared, and only then the part directory in it: a merge
        // holds the root alone while it looks for parts, so it never finds a part directory
        // of a start it is about to refuse (and then refuses the merge for that part).
        let (root_made, root_lock) = lock_root(root)?;
        let part = check_root(out, root).and_then(|()| claim_part_dir(out, &root_lock));
        match part {
            Ok((made, lock)) => Ok(Claim {
                made: made.with_ancestors(root_made),
                lock,
                root: Some(root_lock),
            }),
            Err(e) => {
                // A part directory this call found and could not lock stays: it is another
                // start's (of the same part), and so does the root.
                give_up_root(root_made, root_lock);
                Err(e)
            }
        }
    }

    /// The output directory is ready (checked, or cleaned for a resumed conversion): a merge
    /// that starts from now on finds it, so the root is unlocked. Held for the whole part, a
    /// merge started early would only say the root is locked, not which parts are still
    /// unfinished.
    pub(super) fn ready(self) -> (Made, OutputLock) {
        let Claim { made, lock, root } = self;
        drop(root);
        (made, lock)
    }

    /// Gives the output up before anything was written into it: the directories this call
    /// created are taken away while empty (a part's root only once no other part holds it).
    pub(super) fn abandon(self) {
        let Claim { made, lock, root } = self;
        // Our own shared lock on the root would keep it from ever looking unused.
        drop(root);
        made.take_away(lock.dir(), &[]);
    }
}

/// Makes the part directory `out` in `root` (which exists, locked shared) and locks it, or
/// locks the one there.
///
/// Made in place, the directory would be visible before its lock: another start of the
/// same part (a requeue while the first still runs) could lock it first, as a directory it
/// found, and this one would have to leave it as that start's; that start, stopped by
/// `--strict`, takes away only what it made, and the empty part directory stayed. So it is
/// made under a hidden name, locked, and renamed into place only if nothing is there
/// (`RENAME_NOREPLACE`): whoever made the directory at `out` holds its lock, and the start
/// that loses the rename removes the hidden directory it made, leaving nothing.
fn claim_part_dir(out: &Path, root: &OutputLock) -> Result<(Made, OutputLock), FormatError> {
    super::out_path::refuse_non_directory(out)?;
    let missing =
        std::fs::symlink_metadata(out).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    if let (true, Some(name)) = (missing, out.file_name()) {
        if let Some(claimed) = make_locked(out, root.dir(), name)? {
            return Ok(claimed);
        }
    }
    // There already (found, or another start's that won the rename), or on a file system
    // that cannot rename without replacing: as any output directory.
    let made = Made::create(out)?;
    let lock = OutputLock::acquire(out)?;
    Ok((made, lock))
}

/// How many hidden names [`make_locked`] tries: one left by a start that died between its
/// `mkdir` and its rename may hold the first (a container's process is often pid 1 each
/// time).
const CLAIM_NAME_TRIES: u32 = 16;

/// [`claim_part_dir`]'s making of `out` (named `name`, in the root, `root` open and locked
/// shared) under a hidden name, locked, then renamed into place; `None` when something is
/// at `out` by then, or the file system has no `RENAME_NOREPLACE`, the hidden directory
/// removed again. Each step is named in the root held, so that a root swapped meanwhile
/// (moved away and made again) gets no part directory of a start it never locked.
fn make_locked(
    out: &Path,
    root: &File,
    name: &std::ffi::OsStr,
) -> Result<Option<(Made, OutputLock)>, FormatError> {
    let parent = out.parent().unwrap_or(Path::new("."));
    let Some(hidden) = make_hidden(root, parent, name)? else {
        return Ok(None);
    };
    let remove_hidden = || rustix::fs::unlinkat(root, &hidden, rustix::fs::AtFlags::REMOVEDIR);
    let lock = match OutputLock::acquire_in(root, &hidden, &parent.join(&hidden)) {
        Ok(lock) => lock,
        Err(e) => {
            let _ = remove_hidden();
            return Err(e);
        }
    };
    #[cfg(test)]
    tests::before_part_rename();
    let flags = rustix::fs::RenameFlags::NOREPLACE;
    match rustix::fs::renameat_with(root, &hidden, root, name, flags) {
        Ok(()) => Ok(Some((Made::made_here(out), lock))),
        Err(_) => {
            // Ours alone (nobody else knows its name), empty, and locked only by us. On
            // EEXIST the part directory is there (another start's); on any other error
            // the file system cannot rename without replacing (EINVAL on NFS, 9p, FUSE
            // without rename2; a seccomp sandbox's EPERM or ENOSYS): made in place, as
            // before, with the race between two starts of one part left open there. A
            // real error comes back from that.
            let _ = remove_hidden();
            drop(lock);
            Ok(None)
        }
    }
}

/// Whether `name` in a parts' root is a hidden directory of [`make_hidden`]'s: left there
/// only by a start that died between making it and renaming it into place, once no start
/// holds the root (a merge, which holds it alone, removes such a one while it is empty).
pub(crate) fn is_claim_leftover(name: &str) -> bool {
    name.starts_with(".part-") && name.contains(CLAIM_MARK)
}

/// Whether `name` may lie in the root that parts are converted or written into and then
/// merged in place: a part, another start's claim (or its leftover), an interrupted
/// merge's leftover. Anything else would stay in the merged dataset's directory, so the
/// merge refuses it, and so does every part's start.
fn may_be_beside_parts(name: &str) -> bool {
    is_part_or_merge_leftover(name) || is_claim_leftover(name)
}

/// A part directory's name, or [`is_merge_leftover`]'s: what a merge takes for its own in
/// the root (it refuses a claim's leftover that is not empty).
pub(crate) fn is_part_or_merge_leftover(name: &str) -> bool {
    name.starts_with("part-") || is_merge_leftover(name)
}

/// What an interrupted merge leaves in the root besides the parts (the merge writes its
/// manifest last, so until then only these): shard links, the source map, the manifest's
/// temporary file. A rerun of the merge replaces them.
pub(crate) fn is_merge_leftover(name: &str) -> bool {
    ["manifest.json.tmp", SOURCES_FILE, "sources.bin.tmp"].contains(&name)
        || (name.starts_with("shard-") && name.ends_with(".lmdb"))
}

/// Why a parts' root that holds `name` (not [`may_be_beside_parts`]) cannot take the
/// merged dataset, and what to do, `otherwise` last.
pub(crate) fn stray_entry(name: &str, otherwise: &str) -> String {
    let journals = [super::JOURNAL_FILE, super::LEGACY_JOURNAL_FILE];
    if journals.contains(&name) {
        return format!(
            "holds {name}, the journal of a whole conversion (without --part) that stopped before it finished: finish it (`stoker convert --resume` without --part) or delete the directory, or {otherwise}"
        );
    }
    format!(
        "holds {name:?}, which is neither a part directory (part-IIIII-of-NNNNN) nor a merge's leftover, and the merge writes the dataset into this directory: move it out (a list file can be anywhere), or {otherwise}"
    )
}

/// What [`make_hidden`] puts after a part directory's name, before the pid.
const CLAIM_MARK: &str = ".claim-";

/// Makes a new hidden directory in the open `root` (at `root_path`) for the part
/// directory `name`, and returns its name: `.part-IIIII-of-NNNNN.claim-PID-K` (not
/// `part-*`, which a merge would take for a part); `None` when [`CLAIM_NAME_TRIES`] names
/// are all taken: leftovers of starts that died there (only a merge removes them, and it
/// waits for this part), so the part directory is made in place instead, as on a file
/// system that cannot rename without replacing.
fn make_hidden(
    root: &File,
    root_path: &Path,
    name: &std::ffi::OsStr,
) -> Result<Option<std::ffi::OsString>, FormatError> {
    let mut k = 0;
    loop {
        let mut hidden = std::ffi::OsString::from(".");
        hidden.push(name);
        hidden.push(format!("{CLAIM_MARK}{}-{k}", std::process::id()));
        let mode = rustix::fs::Mode::from_raw_mode(0o777);
        match rustix::fs::mkdirat(root, &hidden, mode) {
            Ok(()) => return Ok(Some(hidden)),
            Err(rustix::io::Errno::EXIST) => {
                k += 1;
                if k == CLAIM_NAME_TRIES {
                    return Ok(None);
                }
            }
            Err(e) => return Err(FormatError::io(root_path.join(&hidden), e.into())),
        }
    }
}

/// Refuses the part `out` in a `root` that a merge of the parts would refuse, at the start
/// of every task rather than after the last one:
/// - parts of a conversion into another number of parts. The usual way in is a rerun of
///   one failed task as a job of its own (Slurm's `sbatch --array=5` is an array of one
///   task, which makes it part 0 of 1: the whole dataset);
/// - anything else that is neither a part nor a merge's leftover ([`may_be_beside_parts`]):
///   the list file the README says to write once for every task, put beside the parts, or
///   a whole conversion stopped there. The merge writes the dataset into `root`.
fn check_root(out: &Path, root: &Path) -> Result<(), FormatError> {
    let Some((_, count)) = out
        .file_name()
        .and_then(|n| parse_dir_name(&n.to_string_lossy()))
    else {
        return Ok(());
    };
    for entry in std::fs::read_dir(root).map_err(|e| FormatError::io(root, e))? {
        let name = entry.map_err(|e| FormatError::io(root, e))?.file_name();
        let name = name.to_string_lossy();
        if !may_be_beside_parts(&name) {
            return Err(FormatError::OutputExists {
                path: root.to_path_buf(),
                reason: stray_entry(&name, "convert the parts into another directory"),
            });
        }
        match parse_dir_name(&name) {
            Some((_, other)) if other != count => {
                return Err(FormatError::OutputExists {
                    path: root.to_path_buf(),
                    reason: format!(
                        "holds {name}, a part of a conversion into {other} parts, and this is a part of {count}: a merge would refuse them together. To rerun one part, name its number and the count the others have (--part I --parts {other}, or part=/parts= in Python; a Slurm job of that one task, `--array=I`, counts as an array of 1); to convert into {count} parts, choose another output directory or remove the part-*-of-{other:05} directories"
                    ),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// How many times a part starts again when the root it locked was removed meanwhile.
const ROOT_TRIES: u32 = 3;

/// Makes a part's output root and locks it shared; refuses it when it holds a finished
/// dataset. A refused root leaves none of the directories this call created.
///
/// Another part that gives up in a root it made removes the root while it is empty and
/// nobody locks it ([`super::lock::remove_if_unused`]); this start may have made or opened
/// it just before, and would then hold a lock on a removed directory while its part
/// directory made a new root at the path, unguarded from a merge. So the lock counts only
/// while the path still leads to the directory locked; otherwise the start begins again.
fn lock_root(root: &Path) -> Result<(Made, OutputLock), FormatError> {
    let mut tries = 0;
    loop {
        tries += 1;
        let made = Made::create(root)?.shared();
        let locked = OutputLock::acquire_shared(root).and_then(|l| refuse_merged(root).map(|()| l));
        let gone = match locked {
            Ok(l) if same_dir(l.dir(), root) => return Ok((made, l)),
            Ok(_) => std::io::Error::other("the directory was removed while this part locked it"),
            Err(FormatError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                source
            }
            // A part giving up in an empty root it made locks it alone for a moment, to
            // see that nobody uses it; a merge holds it for the whole merge. A start that
            // meets the lock looks again a little later before it says so.
            Err(FormatError::OutputLocked { .. }) if tries < ROOT_TRIES => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                continue;
            }
            Err(e) => {
                // Only the directories this call created, and only while empty.
                if let Ok(dir) = File::open(root) {
                    made.take_away(&dir, &[]);
                }
                return Err(e);
            }
        };
        if tries == ROOT_TRIES {
            return Err(FormatError::io(root, gone));
        }
    }
}

/// After a part failed to claim its directory: unlocks the root and takes away the
/// directories `root_made` notes, the root only while it is empty and no other part holds
/// it.
fn give_up_root(root_made: Made, root_lock: OutputLock) {
    // The same open directory, unlocked with `root_lock`: what the path must still name.
    let held = root_lock.dir().try_clone();
    drop(root_lock);
    if let Ok(dir) = held {
        root_made.take_away(&dir, &[]);
    }
}

/// Refuses a part in an output root that holds a finished dataset: the parts there were
/// merged (and removed), and a part beside the merged dataset would never be merged.
pub(super) fn refuse_merged(root: &Path) -> Result<(), FormatError> {
    if root.join(MANIFEST_FILE).exists() {
        return Err(FormatError::OutputExists {
            path: root.to_path_buf(),
            reason: "already holds a finished dataset (manifest.json): its parts were merged, and a part written beside it would never be; to write the parts again, choose another output directory or delete it".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    /// The other start's move in a race, made deterministic.
    type Hook = Box<dyn FnOnce()>;

    thread_local! {
        /// Run once, on this thread, when a part's start has made and locked its hidden part
        /// directory, just before it renames it into place.
        static BEFORE_PART_RENAME: RefCell<Option<Hook>> = RefCell::new(None);
    }

    pub(super) fn before_part_rename() {
        // Taken before it runs: the other start it plays comes through here too.
        if let Some(f) = BEFORE_PART_RENAME.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    /// Two starts of one part under `--strict` (a requeue while the first still ran): this
    /// one made the part directory, and the other locked it first, as one it had found.
    /// This one gave the directory up as the other's; the other, stopped by `--strict`
    /// before writing anything, took away only what it had made, which was not the
    /// directory: an empty part directory stayed.
    #[test]
    fn two_starts_of_one_part_leave_no_empty_part_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("out");
        std::fs::create_dir(&root).unwrap();
        let part = root.join("part-00000-of-00002");
        let other: Rc<RefCell<Option<Claim>>> = Rc::default();
        let (slot, at) = (other.clone(), part.clone());
        BEFORE_PART_RENAME.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                *slot.borrow_mut() = Some(Claim::new(&at, true).unwrap());
            }))
        });
        let e = Claim::new(&part, true).unwrap_err();
        assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
        let other = other.borrow_mut().take().expect("the other start ran");
        // The other one stops (`--strict`, nothing written): it takes away what it made.
        let (made, lock) = other.ready();
        made.take_away(lock.dir(), &[]);
        drop(lock);
        assert!(!part.exists(), "an empty part directory stayed");
        let left: Vec<_> = std::fs::read_dir(&root).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// A part's start paused just before it renamed its hidden directory into place,
    /// while the root was moved away and another made under its name: by path, its part
    /// directory went into that other root, which it had never locked.
    #[test]
    fn a_part_directory_goes_into_the_root_locked_not_one_made_there_since() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("out");
        let moved = tmp.path().join("moved");
        std::fs::create_dir(&root).unwrap();
        let (from, to) = (root.clone(), moved.clone());
        BEFORE_PART_RENAME.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                std::fs::rename(&from, &to).unwrap();
                std::fs::create_dir(&from).unwrap();
            }))
        });
        let claim = Claim::new(&root.join("part-00000-of-00002"), true).unwrap();
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
        let names: Vec<_> = std::fs::read_dir(&moved)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["part-00000-of-00002"]);
        drop(claim);
    }

    /// The same, through a whole conversion, with a newcomer that finished its part 0
    /// meanwhile: the paused one called it "already holds a finished dataset" and said to
    /// delete it, where its own root had been moved away.
    #[test]
    fn a_part_whose_root_moved_while_it_started_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("out");
        let part = crate::Part::new(0, 2).unwrap();
        let (from, to) = (root.clone(), tmp.path().join("moved"));
        BEFORE_PART_RENAME.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                std::fs::rename(&from, &to).unwrap();
                let theirs = from.join("part-00000-of-00002");
                std::fs::create_dir_all(&theirs).unwrap();
                std::fs::write(theirs.join(MANIFEST_FILE), b"{}").unwrap();
            }))
        });
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");
        let mut o = crate::ConvertOptions::new(crate::Source::ImageFolder(src.into()), &root);
        o.check_decode = false;
        o.part = Some(part);
        let e = crate::convert(&o, &crate::NoProgress)
            .unwrap_err()
            .to_string();
        assert!(e.contains("moved away"), "{e}");
        let theirs = root.join("part-00000-of-00002");
        assert_eq!(std::fs::read(theirs.join(MANIFEST_FILE)).unwrap(), b"{}");
        assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 1);
    }

    /// Starts that died between making their hidden directory and renaming it (a
    /// container's process is pid 1 each time) took every hidden name this one tries: the
    /// part could never start again until someone removed them by hand.
    #[test]
    fn a_part_starts_when_every_hidden_name_is_a_leftover() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("out");
        std::fs::create_dir(&root).unwrap();
        for k in 0..CLAIM_NAME_TRIES {
            let leftover = format!(".part-00001-of-00002{CLAIM_MARK}{}-{k}", std::process::id());
            std::fs::create_dir(root.join(leftover)).unwrap();
        }
        let part = root.join("part-00001-of-00002");
        let claim = Claim::new(&part, true).unwrap();
        assert!(part.is_dir());
        drop(claim.ready());
    }

    #[test]
    fn a_part_is_claimed_beside_other_parts_not_during_a_merge() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("out");
        let part = |i: u32| root.join(format!("part-{i:05}-of-00002"));
        let first = Claim::new(&part(0), true).unwrap();
        // Another part starts while the first still holds the root.
        let second = Claim::new(&part(1), true).unwrap();
        // A merge (or a whole conversion) locks the root alone: not while a part starts.
        let e = OutputLock::acquire(&root).unwrap_err();
        assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
        drop((first.ready(), second.ready()));
        let merging = OutputLock::acquire(&root).unwrap();
        let e = Claim::new(&part(0), true).unwrap_err();
        assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
        // A part refused there leaves no directory for the merge's scan to find.
        let third = root.join("part-00002-of-00003");
        let e = Claim::new(&third, true).unwrap_err();
        assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
        assert!(!third.exists());
        drop(merging);

        // A root the refused part created is taken away with it.
        let new_root = tmp.path().join("new");
        let merged = |r: &Path| std::fs::write(r.join(MANIFEST_FILE), b"{}");
        std::fs::create_dir(&new_root).unwrap();
        merged(&new_root).unwrap();
        let e = Claim::new(&new_root.join("part-00000-of-00001"), true).unwrap_err();
        assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");
        assert!(!new_root.join("part-00000-of-00001").exists());
        let deep = tmp.path().join("a/b");
        let claim = Claim::new(&deep.join("part-00000-of-00001"), true).unwrap();
        let (made, lock) = claim.ready();
        assert!(made.take_away(lock.dir(), &[]));
        assert!(
            !tmp.path().join("a").exists(),
            "the root and its parent, made here, go too"
        );
    }
}
