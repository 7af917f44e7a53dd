//! Opening one shard file (an LMDB environment in a single file) read-only and without a lock
//! file, and sharing it within the process.
//!
//! heed refuses to open the same environment twice in one process, so open shards are kept
//! in a process-wide table of weak references: a second [`crate::Dataset::open`] of the same
//! files reuses the mapping of the first.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, WithoutTls};

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
    /// The environment; lives as long as any `Arc<OpenShard>`.
    pub env: Env<WithoutTls>,
    /// The unnamed database holding the records.
    pub db: Database<Bytes, Bytes>,
    id: FileId,
}

fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<OpenShard>>> {
    static REG: OnceLock<Mutex<HashMap<PathBuf, Weak<OpenShard>>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// Opens (or reuses) the shard at `path`.
pub(crate) fn open_shard(path: &Path) -> Result<Arc<OpenShard>, FormatError> {
    let canonical = std::fs::canonicalize(path).map_err(|e| FormatError::io(path, e))?;
    let meta = std::fs::metadata(&canonical).map_err(|e| FormatError::io(path, e))?;
    let id = FileId {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
    };
    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(existing) = reg.get(&canonical).and_then(Weak::upgrade) {
        if existing.id == id {
            return Ok(existing);
        }
        return Err(FormatError::ShardReplaced { shard: canonical });
    }
    // The map only needs to cover the file: LMDB raises it to the last used page if needed.
    let page = 1u64 << 16;
    let map_size = round_up(id.len.max(page), page) as usize;
    let mut opts = EnvOpenOptions::new().read_txn_without_tls();
    opts.map_size(map_size).max_dbs(0);
    // SAFETY: NO_LOCK is safe here because nobody writes a finished shard: shards are written
    // under a temporary name and renamed into place only when complete, after which stoker
    // never modifies them, so no reader can race a writer. READ_ONLY maps the file without
    // write permission, NO_SUB_DIR names the data file itself (single-file environment).
    unsafe {
        opts.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY | EnvFlags::NO_LOCK);
    }
    // SAFETY: the mapped file is an immutable, finished shard (see above); the caller that
    // replaces it on disk gets a new inode, which is detected by `FileId` above before reuse.
    let env = match unsafe { opts.open(&canonical) } {
        Err(heed::Error::EnvAlreadyOpened) => {
            // An earlier `OpenShard` for this file is being dropped on another thread: wait for
            // its environment to close, then open again.
            if let Some(closing) = heed::env_closing_event(&canonical) {
                closing.wait();
            }
            // SAFETY: as above.
            unsafe { opts.open(&canonical) }
        }
        other => other,
    }
    .map_err(|e| FormatError::lmdb(&canonical, e))?;
    let rtxn = env
        .read_txn()
        .map_err(|e| FormatError::lmdb(&canonical, e))?;
    let db = env
        .open_database::<Bytes, Bytes>(&rtxn, None)
        .map_err(|e| FormatError::lmdb(&canonical, e))?
        .ok_or_else(|| FormatError::lmdb(&canonical, heed::Error::Mdb(heed::MdbError::NotFound)))?;
    drop(rtxn);
    let shard = Arc::new(OpenShard {
        path: canonical.clone(),
        env,
        db,
        id,
    });
    reg.retain(|_, w| w.strong_count() > 0);
    reg.insert(canonical, Arc::downgrade(&shard));
    Ok(shard)
}

/// Key of dataset index `index`: u64 big-endian, so LMDB's byte order is index order.
pub(crate) fn key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}
