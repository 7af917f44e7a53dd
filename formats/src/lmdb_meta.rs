//! Checking a shard's two LMDB meta pages before LMDB sees the file.
//!
//! LMDB trusts its file: the meta pages give the page size, the last page and each tree's
//! root, depth and flags, and a damaged value there makes LMDB read outside the map
//! (SIGSEGV, SIGBUS) or take the unnamed tree for a duplicate-key one. These few hundred
//! bytes are what every reader depends on first, so [`check`] compares them with what
//! stoker's writer produces and with the manifest's record count, reading them with
//! `pread` (no mapping). Damage elsewhere in the file is found by `verify`'s whole-file
//! digest; see docs/FORMAT.md, "What a reader checks".
//!
//! Layout (LMDB 0.9 `mdb.c`, 64-bit build, little-endian): a 16-byte page header
//! (`pgno` u64, `pad` u16, `flags` u16, `lower` u16, `upper` u16), then `MDB_meta`:
//! `magic` u32, `version` u32, `address` u64, `mapsize` u64, two 48-byte `MDB_db`
//! (free-page tree, main tree: `pad` u32, `flags` u16, `depth` u16, `branch_pages`,
//! `leaf_pages`, `overflow_pages`, `entries`, `root` as u64), `last_pg` u64, `txnid` u64.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::lmdb_layout::{
    u16_at, u32_at, u64_at, MDB_DATA_VERSION, MDB_INTEGERKEY, MDB_MAGIC, MDB_NOSUBDIR, P_INVALID,
    P_META,
};

/// Deeper B-trees would need more records than a file can hold.
const MAX_DEPTH: u16 = 32;
/// Bytes of one meta page that LMDB reads.
const META_END: usize = 152;

/// One `MDB_db`.
#[derive(Debug, Clone, Copy)]
struct Tree {
    pad: u32,
    flags: u16,
    depth: u16,
    pages: [u64; 3],
    entries: u64,
    root: u64,
}

/// One meta page.
#[derive(Debug, Clone, Copy)]
struct Meta {
    free: Tree,
    main: Tree,
    last_pg: u64,
    txnid: u64,
}

fn tree(b: &[u8], o: usize) -> Tree {
    Tree {
        pad: u32_at(b, o),
        flags: u16_at(b, o + 4),
        depth: u16_at(b, o + 6),
        pages: [u64_at(b, o + 8), u64_at(b, o + 16), u64_at(b, o + 24)],
        entries: u64_at(b, o + 32),
        root: u64_at(b, o + 40),
    }
}

/// Parses and checks meta page `i` (`b` is its first [`META_END`] bytes).
fn parse(b: &[u8], i: u64, file_pages: u64) -> Result<Meta, String> {
    let (pgno, pad, flags) = (u64_at(b, 0), u16_at(b, 8), u16_at(b, 10));
    if pgno != i || pad != 0 || flags != P_META || u16_at(b, 12) != 0 || u16_at(b, 14) != 0 {
        return Err(format!("meta page {i}: bad page header"));
    }
    if u32_at(b, 16) != MDB_MAGIC || u32_at(b, 20) != MDB_DATA_VERSION {
        return Err(format!("meta page {i}: bad magic or version"));
    }
    if u64_at(b, 24) != 0 {
        return Err(format!("meta page {i}: asks for a fixed map address"));
    }
    let m = Meta {
        free: tree(b, 40),
        main: tree(b, 88),
        last_pg: u64_at(b, 136),
        txnid: u64_at(b, 144),
    };
    if m.last_pg < 1 || m.last_pg >= file_pages {
        return Err(format!(
            "meta page {i}: last page {} but the file has {file_pages} pages",
            m.last_pg
        ));
    }
    if m.free.flags & !MDB_NOSUBDIR != MDB_INTEGERKEY {
        return Err(format!("meta page {i}: bad environment flags"));
    }
    if m.main.flags != 0 || m.main.pad != 0 {
        return Err(format!(
            "meta page {i}: the record tree has flags {:#x} (stoker writes none)",
            m.main.flags
        ));
    }
    for (name, t) in [("free-page", m.free), ("record", m.main)] {
        let pages = t.pages.iter().try_fold(0u64, |a, &p| a.checked_add(p));
        let sane = if t.root == P_INVALID {
            t.depth == 0 && t.entries == 0 && pages == Some(0)
        } else {
            (2..=m.last_pg).contains(&t.root)
                && (1..=MAX_DEPTH).contains(&t.depth)
                && pages.is_some_and(|p| p >= 1 && p < m.last_pg)
        };
        if !sane {
            return Err(format!(
                "meta page {i}: the {name} tree's root, depth or page counts are out of range"
            ));
        }
    }
    Ok(m)
}

/// The record tree as the current meta page describes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordTree {
    /// Page size in bytes.
    pub psize: u64,
    /// Root page of the record tree, `None` when it is empty.
    pub root: Option<u64>,
    /// Depth of the tree.
    pub depth: u16,
    /// Last page in use.
    pub last_pg: u64,
    /// Records in the tree.
    pub entries: u64,
}

/// Checks the meta pages of the shard open as `file` (`len` bytes), which should hold
/// `records` records, and returns its record tree; or what is wrong, in words.
pub(crate) fn check(file: &File, len: u64, records: u64) -> Result<RecordTree, String> {
    let tree = record_tree(file, len)?;
    if tree.entries != records {
        return Err(format!(
            "LMDB says {} records, the manifest {records}",
            tree.entries
        ));
    }
    Ok(tree)
}

/// Checks both meta pages of `file` (`len` bytes) and returns the record tree of the current
/// one (the one LMDB would use).
pub(crate) fn record_tree(file: &File, len: u64) -> Result<RecordTree, String> {
    let mut head = [0u8; META_END];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| format!("cannot read meta page 0: {e}"))?;
    let psize = tree(&head, 40).pad;
    if !psize.is_power_of_two() || !(512..=65536).contains(&psize) {
        return Err(format!(
            "meta page 0: page size {psize} is not a power of two in 512..=65536"
        ));
    }
    let psize = u64::from(psize);
    if !len.is_multiple_of(psize) || len < 3 * psize {
        return Err(format!(
            "file size {len} is not a whole number (at least 3) of {psize}-byte pages"
        ));
    }
    let pages = len / psize;
    let m0 = parse(&head, 0, pages)?;
    let mut second = [0u8; META_END];
    file.read_exact_at(&mut second, psize)
        .map_err(|e| format!("cannot read meta page 1: {e}"))?;
    let m1 = parse(&second, 1, pages)?;
    if u64::from(m1.free.pad) != psize {
        return Err("meta pages disagree on the page size".into());
    }
    // LMDB uses the meta page with the larger transaction id.
    let current = if m1.txnid > m0.txnid { m1 } else { m0 };
    Ok(RecordTree {
        psize,
        root: (current.main.root != P_INVALID).then_some(current.main.root),
        depth: current.main.depth,
        last_pg: current.last_pg,
        entries: current.main.entries,
    })
}
