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
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, Weak};

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
struct Registry {
    /// The process that made it: a child of `fork` makes its own (below).
    pid: u32,
    open: Mutex<HashMap<PathBuf, Weak<OpenShard>>>,
}

/// The registry in use; null until the first open, and again in a child of `fork`.
static REG: AtomicPtr<Registry> = AtomicPtr::new(std::ptr::null_mut());

/// `pthread_atfork`'s child handler: the child starts without a registry.
extern "C" fn forget_registry() {
    REG.store(std::ptr::null_mut(), Ordering::Release);
}

/// This process's registry. A child of `fork` inherits its parent's registry as it was at
/// the fork, locked if a parent thread was opening a shard then, with no thread to unlock
/// it: a PyTorch `DataLoader` forking its workers while another thread opens a dataset left
/// workers hung at their first open. So a registry serves only the process that made it: a
/// child makes a fresh one and leaves the inherited one (and what it holds) unused. The
/// child learns it is one from the fork handler, or, where a fork skipped the handlers (a
/// raw `clone`, or a fork while the first open registers them), from the registry's
/// process id (which a reused id could fool).
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<OpenShard>>> {
    // Not a `Once`, for the same reason: a fork while another thread runs one leaves it
    // running for good in the child, which then waits for it at its first open.
    static AT_FORK: AtomicBool = AtomicBool::new(false);
    if !AT_FORK.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a child handler that only stores to an atomic, which is
        // async-signal-safe, as a handler run in the child of a threaded fork must be.
        unsafe { libc::pthread_atfork(None, None, Some(forget_registry)) };
        #[cfg(test)]
        tests::while_registering();
    }
    let pid = std::process::id();
    let mut current = REG.load(Ordering::Acquire);
    loop {
        // SAFETY: a registry, once published, is never freed (leaked below), so the
        // pointer stays valid for the process's life.
        if let Some(reg) = unsafe { current.as_ref() } {
            if reg.pid == pid {
                return &reg.open;
            }
        }
        let fresh = Box::into_raw(Box::new(Registry {
            pid,
            open: Mutex::new(HashMap::new()),
        }));
        match REG.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just published, and never freed.
            Ok(_) => return unsafe { &(*fresh).open },
            Err(now) => {
                // SAFETY: `fresh` was never published; this thread still owns it.
                drop(unsafe { Box::from_raw(fresh) });
                current = now;
            }
        }
    }
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
        return Err(not_a_file(canonical));
    }
    let file = std::fs::File::open(&canonical).map_err(|e| FormatError::io(path, e))?;
    let meta = file.metadata().map_err(|e| FormatError::io(path, e))?;
    let id = FileId {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
    };
    if !meta.is_file() {
        return Err(not_a_file(canonical));
    }
    if id.len != bytes {
        return Err(FormatError::ShardSizeMismatch {
            shard: canonical,
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
            shard: canonical.clone(),
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
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
    use std::time::Duration;

    use super::registry;

    /// Set by the child test below: another thread forks while this one registers the
    /// fork handler, at the first open.
    static ARMED: AtomicBool = AtomicBool::new(false);
    /// The process that fork made.
    static FORKED: AtomicI32 = AtomicI32::new(0);

    /// Called by the first open, once the fork handler is registered.
    pub(super) fn while_registering() {
        if !ARMED.swap(false, Ordering::Relaxed) {
            return;
        }
        let forker = std::thread::spawn(|| {
            // SAFETY: the child looks up the registry and leaves with _exit; what it
            // inherits from the first open, midway, is what is tested.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let _ = registry();
                // SAFETY: _exit ends the child without running the parent's exit code.
                unsafe { libc::_exit(0) };
            }
            pid
        });
        FORKED.store(forker.join().unwrap(), Ordering::Relaxed);
    }

    /// The child process's side of the test below: a no-op when run as a plain test.
    #[test]
    fn child() {
        if std::env::var("STOKER_SHARD_CHILD").is_err() {
            return;
        }
        ARMED.store(true, Ordering::Relaxed);
        let _ = registry();
        let pid = FORKED.load(Ordering::Relaxed);
        assert!(pid > 0, "no fork");
        match stoker_testdata::child::wait_forked(pid, Duration::from_secs(5)) {
            Some(status) => println!("child exited {status}"),
            None => println!("child hung"),
        }
    }

    /// The first open registered the fork handler in a `Once`: a child forked meanwhile
    /// found it still running, with no thread to finish it, and waited for it for ever at
    /// its own first open (in about 1 of 30 runs of tests/fork_open.rs).
    #[test]
    fn a_child_forked_while_the_first_open_registers_the_fork_handler_opens_too() {
        let (status, printed) = stoker_testdata::child::run_test(
            "shard::tests::child",
            ("STOKER_SHARD_CHILD", "fork while registering"),
            Duration::from_secs(60),
        );
        assert!(status.success(), "{status:?}: {printed}");
        assert!(printed.contains("child exited 0\n"), "{printed}");
    }
}
