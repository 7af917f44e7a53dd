//! Reading a directory tree in the order torchvision's `ImageFolder` reads it, so that an
//! ImageFolder tree converted by stoker has the same labels, and the same image at each
//! index, as `torchvision.datasets.ImageFolder` over the same tree.
//!
//! Python sees a file name as text: the bytes decoded as UTF-8, each byte that is not part
//! of valid UTF-8 becoming the code point U+DC00 + byte (`surrogateescape`). Its `sorted`
//! orders such names by code point, which differs from the order of the raw bytes once a
//! name is not UTF-8 (U+DCE9 sorts before U+FF26, byte 0xE9 after 0xEF). [`name_key`] is a
//! byte string whose byte order is that code point order, and [`lossless_text`](crate::lossless_text) spells such a
//! name readably and without loss (`caf\xe9`, Python's `backslashreplace`).
//!
//! Within a class, torchvision walks `sorted(os.walk(class_dir, followlinks=True))`: every
//! directory under the class by its full path string, a directory's own files (sorted)
//! before the directories under it. [`walk`] visits directories from a queue ordered by
//! that path, so it lists the same files in the same order without holding the tree.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::listing::Input;
use super::own_output::OwnOutput;
use crate::outside_fault::FaultStage;
use crate::FormatError;

/// Directories nested deeper than this under a class folder are skipped (and reported).
const MAX_DEPTH: u32 = 64;

/// A byte string whose byte order is Python's order of `name` (decoded as UTF-8 with
/// `surrogateescape`): valid UTF-8 is kept, and each other byte `b` becomes the UTF-8
/// form of U+DC00 + `b` (the generalized UTF-8 form of a code point keeps code point
/// order, surrogates included).
pub(crate) fn name_key(name: OsString) -> Vec<u8> {
    let bytes = name.into_vec();
    if std::str::from_utf8(&bytes).is_ok() {
        return bytes;
    }
    let mut key = Vec::with_capacity(bytes.len() * 3);
    for chunk in bytes.utf8_chunks() {
        key.extend_from_slice(chunk.valid().as_bytes());
        for &b in chunk.invalid() {
            let cp = 0xDC00 | u32::from(b);
            key.extend_from_slice(&[
                0xE0 | (cp >> 12) as u8,
                0x80 | ((cp >> 6) & 0x3F) as u8,
                0x80 | (cp & 0x3F) as u8,
            ]);
        }
    }
    key
}

/// The entries of `dir` in Python's order of their names.
pub(crate) fn sorted_entries(dir: &Path) -> Result<Vec<std::fs::DirEntry>, std::io::Error> {
    let mut v = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| (name_key(e.file_name()), e)))
        .collect::<Result<Vec<_>, _>>()?;
    v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(v.into_iter().map(|(_, e)| e).collect())
}

/// A directory's identity, to walk each directory once however many links lead to it.
pub(crate) fn dir_id(meta: &std::fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

/// [`dir_id`] of what `path` leads to (links followed), `None` when it cannot be read.
pub(crate) fn path_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| dir_id(&m))
}

/// A directory found under the walked one and not yet listed.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    /// [`name_key`] of its path below the walked directory, `/` before each name: the
    /// queue's order (unique: two directories cannot have the same path).
    key: Vec<u8>,
    path: PathBuf,
    /// 1 for a directory directly in the walked one.
    depth: u32,
    id: (u64, u64),
}

/// Appends every file under `top` to `out` with `label`, in torchvision's order (see the
/// module doc), following symlinks.
///
/// A directory whose identity is in `seen` (a symlink back to the root or the class, or a
/// second link to a directory already listed: the first in that order is listed) is not
/// listed again, nor one nested more than [`MAX_DEPTH`] deep: each becomes a refused
/// input at its place in the order, so a tree of links cannot multiply the walk. So do an
/// unreadable directory and a broken symlink (the latter among its directory's files, where
/// `os.walk` puts it). The conversion's output directory (`own`) is left out, with all
/// below it, as if it were not there.
///
/// # Errors
///
/// [`FormatError::OutsideFault`] when a directory or link cannot be read for no fault of
/// its own (no file descriptor left, storage gone): skipped, it would drop its files.
pub(crate) fn walk(
    top: &Path,
    label: u32,
    out: &mut Vec<Input>,
    seen: &mut HashSet<(u64, u64)>,
    own: &OwnOutput,
) -> Result<(), FormatError> {
    let mut queue = BinaryHeap::new();
    list_dir(top, &[], 0, label, out, &mut queue, own)?;
    // Every directory pushed while listing one has a longer path with that one's as its
    // prefix, so it sorts after it: popping the smallest visits all in sorted path order.
    while let Some(Reverse(d)) = queue.pop() {
        if !seen.insert(d.id) {
            refuse(
                out,
                d.path,
                label,
                "directory already listed under this class (a symlink loop or a second link to it)"
                    .into(),
            );
        } else if d.depth > MAX_DEPTH {
            refuse(
                out,
                d.path,
                label,
                format!("directory nested more than {MAX_DEPTH} deep"),
            );
        } else {
            list_dir(&d.path, &d.key, d.depth, label, out, &mut queue, own)?;
        }
    }
    Ok(())
}

fn refuse(out: &mut Vec<Input>, path: PathBuf, label: u32, reason: String) {
    out.push(Input::refused(path, label, reason));
}

/// The reason a directory the walk cannot read is skipped for: it counts as one input,
/// whatever it holds, so the reason says so.
fn unreadable_dir(e: std::io::Error) -> String {
    format!("unreadable directory: {e}; nothing under it was listed or converted")
}

/// Appends the files of `dir` (sorted) to `out` and queues its subdirectories.
fn list_dir(
    dir: &Path,
    key: &[u8],
    depth: u32,
    label: u32,
    out: &mut Vec<Input>,
    queue: &mut BinaryHeap<Reverse<Pending>>,
    own: &OwnOutput,
) -> Result<(), FormatError> {
    let entries = match sorted_entries(dir) {
        Ok(v) => v,
        Err(e) => {
            let e = listing_fault(dir, e)?;
            refuse(out, dir.to_path_buf(), label, unreadable_dir(e));
            return Ok(());
        }
    };
    let file = |path| Input::file(path, label);
    for entry in entries {
        let path = entry.path();
        let kind = entry.file_type().ok();
        if kind.is_some_and(|t| t.is_file()) {
            // The directory entry's type, read with the listing, already says it is a plain
            // file (not a link, not a directory): no `stat` per image.
            out.push(file(path));
            continue;
        }
        // `metadata` follows symlinks; a loop of links or a dangling one fails here.
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if kind.is_some_and(|t| t.is_symlink()) => {
                refuse(
                    out,
                    path,
                    label,
                    format!("unreadable (broken symlink): {e}"),
                );
                continue;
            }
            Err(e) => {
                let e = listing_fault(&path, e)?;
                // The listing's entry type, where the file system gives one: a directory
                // whose path is too long, say, hides every image under it.
                let reason = if kind.is_some_and(|t| t.is_dir()) {
                    unreadable_dir(e)
                } else {
                    format!("unreadable: {e}")
                };
                refuse(out, path, label, reason);
                continue;
            }
        };
        if meta.is_dir() && own.is(&path, &meta) {
            continue;
        }
        if meta.is_dir() {
            let mut child = Vec::with_capacity(key.len() + 1 + entry.file_name().len());
            child.extend_from_slice(key);
            child.push(b'/');
            child.extend_from_slice(&name_key(entry.file_name()));
            queue.push(Reverse(Pending {
                key: child,
                path,
                depth: depth + 1,
                id: dir_id(&meta),
            }));
        } else {
            // Every other entry is an input, image or not: non-images (and non-regular
            // files) are skipped with a reason when read, never silently dropped.
            out.push(file(path));
        }
    }
    Ok(())
}

/// `e`, met listing `path`, handed back to be reported as the entry's; or, when it is no
/// fault of the entry's, the error that stops the listing.
pub(crate) fn listing_fault(path: &Path, e: std::io::Error) -> Result<std::io::Error, FormatError> {
    match FormatError::outside_fault(path, e, FaultStage::Listing) {
        Ok(stop) => Err(stop),
        Err(e) => Ok(e),
    }
}

/// True for an entry that tools and systems leave beside the data (`.ipynb_checkpoints`,
/// `.git`, macOS's `__MACOSX`): hidden, or that one.
pub(crate) fn is_hidden(name: &std::ffi::OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    name.as_bytes().starts_with(b".") || name == "__MACOSX"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: &[u8]) -> Vec<u8> {
        name_key(OsString::from_vec(b.to_vec()))
    }

    #[test]
    fn names_sort_by_code_point_with_invalid_bytes_as_surrogates() {
        // Python puts "\udcf1and" (from b"\xf1and") after U+4E2D and before U+FF26; raw
        // bytes would put 0xF1 after 0xEF, the first byte of U+FF26.
        let mut names: Vec<&[u8]> = vec!["Ｆull".as_bytes(), b"\xf1and", "中文".as_bytes(), b"z"];
        names.sort_by_key(|n| key(n));
        assert_eq!(
            names,
            [
                b"z".as_slice(),
                "中文".as_bytes(),
                b"\xf1and",
                "Ｆull".as_bytes()
            ]
        );
        assert!(key(b"caf\xe9") < key(b"caf\xe9x"));
        assert!(key(b"caf\x80") < key(b"caf\xff"));
        assert_eq!(key(b"plain"), b"plain");
    }
}
