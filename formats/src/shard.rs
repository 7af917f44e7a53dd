//! Opening one shard file (an LMDB environment in a single file) read-only, and sharing it
//! within the process.
//!
//! Open shards are kept in a process-wide table of weak references: a second
//! [`crate::Dataset::open`] of the same files (another loader, a Python `Dataset` per
//! worker) reuses the mapping of the first instead of mapping the files again.
//!
//! Records are looked up in a map of our own ([`crate::lmdb_lookup`], every offset
//! checked), never through LMDB, which trusts its pages; `verify` walks them with
//! [`crate::lmdb_walk`]. An open shard holds that map and no file descriptor (a dataset of
//! thousands of shards must open under `ulimit -n 1024`).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use stoker_decode::PerProcess;

use crate::lmdb_meta::RecordTree;
use crate::map_guard::GuardedMap;
use crate::FormatError;

/// The identity of a file on disk, to tell a replaced shard from the one already mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
}

/// An open, read-only shard.
#[derive(Debug)]
pub(crate) struct OpenShard {
    /// The canonical path of the file.
    pub path: PathBuf,
    id: FileId,
    /// The file, mapped read-only: record payloads are slices of it. A page that cannot be
    /// read (the file cut short under the map, an I/O error) reads as zeros and marks the
    /// map, instead of ending the process ([`crate::map_guard`]).
    map: GuardedMap,
    /// The record tree of the current meta page (checked when the shard was opened).
    pub tree: RecordTree,
}

impl OpenShard {
    /// The whole shard file as mapped: record payloads handed out by readers are slices of
    /// these bytes.
    pub(crate) fn mapped(&self) -> &[u8] {
        self.map.bytes()
    }

    /// Asks the kernel to read `bytes` of the map into the page cache ahead of their use
    /// ([`crate::read_ahead`]).
    ///
    /// # Errors
    ///
    /// The refused `madvise`'s.
    pub(crate) fn will_need(&self, bytes: std::ops::Range<usize>) -> std::io::Result<()> {
        self.map.will_need(bytes)
    }

    /// Fails when a read of the map has failed since it was made (see [`OpenShard::map`]):
    /// bytes read from it, before or after, may be zeros rather than the file's.
    pub(crate) fn check_readable(&self) -> Result<(), FormatError> {
        if self.map.faulted() {
            return Err(FormatError::ShardUnreadable {
                shard: self.path.clone(),
            });
        }
        Ok(())
    }
}

/// The identity of the file the path names now.
fn file_id(path: &Path) -> Result<FileId, FormatError> {
    let meta = std::fs::metadata(path).map_err(|e| FormatError::io(path, e))?;
    Ok(FileId {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
    })
}

impl OpenShard {
    /// Fails when a read of the map has failed ([`OpenShard::check_readable`]), or when the
    /// file at the shard's path is no longer the one mapped: replaced (a new inode, as `cp`
    /// onto a new name and `mv` give), truncated or grown in place. One `stat`; it runs
    /// whenever a reader is made, so that a change between epochs fails the whole epoch.
    pub(crate) fn check_unchanged(&self) -> Result<(), FormatError> {
        self.check_readable()?;
        let now = file_id(&self.path)?;
        if now == self.id {
            return Ok(());
        }
        let what = if (now.dev, now.ino) != (self.id.dev, self.id.ino) {
            "replaced by another file".to_string()
        } else {
            format!("size {} bytes, was {}", now.len, self.id.len)
        };
        Err(FormatError::ShardChanged {
            shard: self.path.clone(),
            what,
        })
    }
}

/// The shards this process has open, by path, so that datasets opened twice share maps.
///
/// One per process: a child of `fork` inherits its parent's map as it was at the fork,
/// locked if a parent thread was opening a shard then, with no thread to unlock it (a
/// PyTorch `DataLoader` forking its workers while another thread opens a dataset left
/// workers hung at their first open), so a child makes a fresh one and leaves the
/// inherited one (and what it holds) unused.
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<OpenShard>>> {
    static REGISTRY: PerProcess<Mutex<HashMap<PathBuf, Weak<OpenShard>>>> = PerProcess::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// How an error names the shard at `path`, whose links lead to `canonical`: by its own
/// path when it is a link (the manifest's name, which is what is wrong), else by the
/// canonical one. Named by the target, a `shard-00006.lmdb` linked to `shard-00005.lmdb`
/// by mistake was reported as the sound `shard-00005.lmdb`.
fn named(path: &Path, canonical: &Path) -> PathBuf {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link { path } else { canonical }.to_path_buf()
}

/// Opens (or reuses) the shard at `path`, which the manifest says holds `records` records
/// in `bytes` bytes.
///
/// Before the file is mapped, its size must be `bytes` and its meta pages must pass
/// [`crate::lmdb_meta::check`]; a shard already open under the same path is shared only
/// while it is still the same file (dev, inode, size), so a file replaced meanwhile is not
/// mistaken for the one checked: the new file is opened beside the old one, which lives
/// on for whoever still holds it (a loader over the dataset that was `mv`ed away).
pub(crate) fn open_shard(
    path: &Path,
    records: u64,
    bytes: u64,
) -> Result<Arc<OpenShard>, FormatError> {
    let canonical = std::fs::canonicalize(path).map_err(|e| FormatError::io(path, e))?;
    let not_a_file = |shard: PathBuf| FormatError::DamagedShard {
        shard,
        reason: "not a regular file".into(),
    };
    // Checked before opening: opening a FIFO for reading would block.
    if !std::fs::metadata(&canonical)
        .map_err(|e| FormatError::io(path, e))?
        .is_file()
    {
        return Err(not_a_file(named(path, &canonical)));
    }
    let file = std::fs::File::open(&canonical).map_err(|e| FormatError::io(path, e))?;
    let meta = file.metadata().map_err(|e| FormatError::io(path, e))?;
    let id = FileId {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
    };
    if !meta.is_file() {
        return Err(not_a_file(named(path, &canonical)));
    }
    if id.len != bytes {
        return Err(FormatError::ShardSizeMismatch {
            shard: named(path, &canonical),
            got: id.len,
            want: bytes,
        });
    }
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(existing) = reg.get(&canonical).and_then(Weak::upgrade) {
        // A map with pages lost to a failed read is not shared either: this open maps
        // the file afresh (and takes its place here), so that opening again is how to
        // recover.
        if existing.id == id && existing.check_readable().is_ok() {
            return Ok(existing);
        }
    }
    let tree = crate::lmdb_meta::check(&file, id.len, records).map_err(|reason| {
        FormatError::DamagedShard {
            shard: named(path, &canonical),
            reason,
        }
    })?;
    // SAFETY: a read-only map of a finished shard, which nobody writes (shards are
    // written under a temporary name and renamed into place only when complete): its bytes do not change while borrowed. A file replaced on disk has a
    // new inode (`check_unchanged`). One truncated in place (or a page the storage cannot
    // deliver) would raise SIGBUS on read: the guard turns that into zeros and a mark
    // that readers check after reading (`check_readable`).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| map_error(&canonical, id.len, e))?;
    let map = GuardedMap::new(map);
    let shard = Arc::new(OpenShard {
        path: canonical.clone(),
        id,
        map,
        tree,
    });
    reg.retain(|_, w| w.strong_count() > 0);
    reg.insert(canonical, Arc::downgrade(&shard));
    Ok(shard)
}

/// The error of a failed map of the shard at `path` (`len` bytes). Every shard of an open
/// dataset stays mapped, so a dataset needs address space for all of it and one map per
/// shard: under `ulimit -v` (RLIMIT_AS, set on some clusters' login and batch nodes) or
/// past `vm.max_map_count` the map fails with a bare "Cannot allocate memory" naming one
/// shard, which read like a lack of RAM. `ENOMEM` gets the limits and what to change.
fn map_error(path: &Path, len: u64, e: std::io::Error) -> FormatError {
    if e.raw_os_error() != Some(libc::ENOMEM) {
        return FormatError::io(path, e);
    }
    let address_space = rustix::process::getrlimit(rustix::process::Resource::As).current;
    let maps = std::fs::read_to_string("/proc/self/maps").map(|m| m.lines().count());
    let max_maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|t| t.trim().parse().ok());
    let reason = map_refusal(len, address_space, maps.ok().zip(max_maps));
    FormatError::io(
        path,
        std::io::Error::new(e.kind(), format!("{e}: {reason}")),
    )
}

/// Why mapping `len` more bytes may have been refused, given the address-space limit and
/// `(maps, vm.max_map_count)` where known.
fn map_refusal(len: u64, address_space: Option<u64>, maps: Option<(usize, usize)>) -> String {
    let mut why = format!(
        "mapping this shard ({len} bytes) was refused; an open dataset keeps every shard mapped, so it needs address space for all its bytes and one map per shard"
    );
    if let Some(limit) = address_space {
        why.push_str(&format!(
            "; this process's address space is limited to {limit} bytes (ulimit -v, RLIMIT_AS): raise or remove that limit"
        ));
    }
    if let Some((maps, max)) = maps {
        if maps + 64 >= max {
            why.push_str(&format!(
                "; the process holds {maps} maps of vm.max_map_count {max}: raise that sysctl or convert with fewer, larger shards (--shard-size, Python shard_size=)"
            ));
        }
    }
    why
}

/// Key of dataset index `index`: u64 big-endian, so LMDB's byte order is index order.
pub(crate) fn key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_refused_map_names_the_limit_that_refused_it() {
        use super::{map_error, map_refusal};
        use std::path::Path;
        let path = Path::new("/data/ds/shard-00722.lmdb");
        let e = map_error(path, 4096, std::io::Error::from_raw_os_error(libc::ENOMEM)).to_string();
        assert!(e.starts_with("/data/ds/shard-00722.lmdb: "), "{e}");
        assert!(e.contains("every shard mapped"), "{e}");
        let why = map_refusal(1 << 30, Some(200 << 20), Some((65_500, 65_530)));
        assert!(
            why.contains("limited to 209715200 bytes (ulimit -v"),
            "{why}"
        );
        assert!(why.contains("vm.max_map_count 65530"), "{why}");
        // Far from the map limit, no word of it; without an address-space limit, none.
        let why = map_refusal(1 << 30, None, Some((100, 65_530)));
        assert!(
            !why.contains("ulimit") && !why.contains("max_map_count"),
            "{why}"
        );
        // Other errors are passed on as they are.
        let e = map_error(path, 4096, std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(!e.to_string().contains("mapped"), "{e}");
    }
}
