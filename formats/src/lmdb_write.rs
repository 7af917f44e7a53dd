//! Writing a shard's LMDB file without LMDB: an append-only B-tree of ascending 8-byte keys,
//! in the file format LMDB reads (see [`crate::lmdb_meta`] and [`crate::lmdb_walk`] for the
//! layout).
//!
//! Why not LMDB's own write path, which earlier versions used: it copies every value into a
//! `malloc`ed page buffer and from there into the file at commit, and a transaction's map
//! space must be sized before its first put, so a whole transaction had to be read before it
//! could be written. Store-mode conversion ran at half the speed of `cp -r` of the same tree
//! (docs/BENCHMARKS.md, "Store path"). A shard is the one case LMDB's writer is most general
//! for and a file format needs least of: one writer, keys that only ascend, nothing ever
//! updated or deleted, no free pages. Written here, each value goes from the reader's buffer
//! to the file in one `writev` as soon as it arrives, pages are written once, in ascending
//! order, and the file is the same for the same records on every machine (fixed page size,
//! no uninitialised page space). LMDB (heed, py-lmdb) reads it like any other environment;
//! tests read every record back through LMDB and through [`crate::lmdb_walk`].
//!
//! What is written, page by page in ascending page numbers: a value whose leaf node would be
//! larger than LMDB's `me_nodemax` goes to a run of overflow pages written as soon as it
//! arrives, its node pointing there; smaller values go inline into the current leaf page;
//! a full leaf page is written when the next node does not fit; at the end the branch
//! levels are written bottom-up (children spread evenly, so every branch page has at least
//! two), then [`TAIL_PAGES`] zero pages, then the two meta pages: page 0 the empty
//! environment (transaction 0) and page 1 the tree (transaction 1), as LMDB leaves a new
//! environment after one commit.
//!
//! The shard's digest (xxh3-64 of the whole file, in file order) would need a second pass over
//! the file, because the meta pages come first and are known last. When the writer is told the
//! value sizes to come ([`predict_meta`]), it computes the meta pages from them first, writes
//! the file front to back and hashes it as it goes; at the end it checks that the meta pages
//! it wrote are the tree's. If they are not (an input changed size, or was skipped), it
//! rewrites them and the caller hashes the file afterwards.

use std::fs::File;
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use crate::lmdb_layout::{
    F_BIGDATA, MDB_DATA_VERSION, MDB_INTEGERKEY, MDB_MAGIC, MDB_NOSUBDIR, NODE_HEADER, PAGE_HEADER,
    P_BRANCH, P_INVALID, P_LEAF, P_META, P_OVERFLOW,
};

/// Page size of every shard stoker writes, on every machine (LMDB reads the page size from
/// the file).
pub(crate) const PAGE: usize = 4096;
const KEY: usize = 8;
/// LMDB's `me_nodemax` for this page size: a leaf node (header, key, value) larger than this
/// keeps its value on overflow pages.
const NODE_MAX: usize = (((PAGE - PAGE_HEADER) / 2) & !1) - 2;
/// The free-page tree's flags as LMDB persists them for a single-file environment.
const FREE_TREE_FLAGS: u16 = MDB_INTEGERKEY | MDB_NOSUBDIR;
static ZEROS: [u8; PAGE] = [0; PAGE];

/// Counts LMDB keeps for a tree (`MDB_db`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TreeStat {
    pub depth: u16,
    pub branch_pages: u64,
    pub leaf_pages: u64,
    pub overflow_pages: u64,
    pub entries: u64,
    /// Root page, `P_INVALID` for an empty tree.
    pub root: u64,
}

/// The meta pages of a shard file: page 0, then page 1.
pub(crate) type MetaPages = Box<[u8; 2 * PAGE]>;

/// Where a value goes, decided from its length alone (so that [`predict_meta`] and the
/// writer agree).
struct Placement {
    /// Its node does not fit in the current leaf: write the leaf first.
    new_leaf: bool,
    /// On overflow pages (this many), not inline.
    overflow_pages: Option<u64>,
    /// Bytes of its node in the leaf (even).
    node: usize,
}

/// The page arithmetic of the tree, without the bytes: what the writer and [`predict_meta`]
/// share.
#[derive(Debug, Clone)]
struct Layout {
    /// The page the next write starts at; pages are written in ascending order.
    next_pg: u64,
    /// Free space of the current leaf: node offsets end at `lower`, nodes start at `upper`.
    lower: usize,
    upper: usize,
    stat: TreeStat,
}

impl Layout {
    fn new() -> Layout {
        Layout {
            next_pg: 2,
            lower: PAGE_HEADER,
            upper: PAGE,
            stat: TreeStat::default(),
        }
    }

    /// Places a value of `len` bytes (at most `u32::MAX`) and advances the page counts.
    fn place(&mut self, len: usize) -> Placement {
        let big = NODE_HEADER + KEY + len > NODE_MAX;
        let node = NODE_HEADER + KEY + if big { 8 } else { len };
        let node = node + node % 2;
        let new_leaf = self.upper - self.lower < node + 2;
        if new_leaf {
            self.leaf_written();
        }
        let overflow_pages = big.then(|| (PAGE_HEADER + len).div_ceil(PAGE) as u64);
        if let Some(pages) = overflow_pages {
            self.next_pg += pages;
            self.stat.overflow_pages += pages;
        }
        self.lower += 2;
        self.upper -= node;
        self.stat.entries += 1;
        Placement {
            new_leaf,
            overflow_pages,
            node,
        }
    }

    fn leaf_written(&mut self) {
        self.next_pg += 1;
        self.stat.leaf_pages += 1;
        self.lower = PAGE_HEADER;
        self.upper = PAGE;
    }

    /// Counts the last leaf and the branch levels above `leaves` leaves; returns the meta
    /// pages of the finished tree.
    fn finish(mut self) -> (MetaPages, TreeStat) {
        if self.lower > PAGE_HEADER {
            self.leaf_written();
        }
        let mut level = self.stat.leaf_pages;
        self.stat.root = self.next_pg - 1;
        if level == 0 {
            self.stat.root = P_INVALID;
        } else {
            self.stat.depth = 1;
        }
        while level > 1 {
            level = level.div_ceil(BRANCH_CHILDREN as u64);
            self.next_pg += level;
            self.stat.branch_pages += level;
            self.stat.depth += 1;
            self.stat.root = self.next_pg - 1;
        }
        (meta_pages(self.next_pg, &self.stat), self.stat)
    }
}

/// The meta pages a shard of values of `lens` bytes gets, in order; `None` when a value is
/// longer than LMDB's 4 GiB.
pub(crate) fn predict_meta(lens: impl IntoIterator<Item = u64>) -> Option<MetaPages> {
    let mut layout = Layout::new();
    for len in lens {
        u32::try_from(len).ok()?;
        layout.place(len as usize);
    }
    Some(layout.finish().0)
}

/// Children of one branch page at most: the first node has no key (LMDB ignores it), the
/// others an 8-byte key; each needs a 2-byte offset.
const BRANCH_CHILDREN: usize =
    1 + (PAGE - PAGE_HEADER - (NODE_HEADER + 2)) / (NODE_HEADER + KEY + 2);

/// The two meta pages of a file of `pages` pages holding the record tree `main`.
/// `pages` counts the used pages (meta pages and tree); the file has [`TAIL_PAGES`] more.
fn meta_pages(pages: u64, main: &TreeStat) -> MetaPages {
    let mut metas: MetaPages = Box::new([0; 2 * PAGE]);
    let map_size = (pages + TAIL_PAGES) * PAGE as u64;
    let empty = TreeStat {
        root: P_INVALID,
        ..TreeStat::default()
    };
    meta_page(&mut metas[..PAGE], 0, map_size, &empty, 1, 0);
    meta_page(&mut metas[PAGE..], 1, map_size, main, pages - 1, 1);
    metas
}

impl TreeStat {
    /// Pages of a file holding this tree: the two meta pages, the tree's and the tail.
    pub(crate) fn file_pages(&self) -> u64 {
        2 + self.branch_pages + self.leaf_pages + self.overflow_pages + TAIL_PAGES
    }
}

/// Zero pages after the last used page. LMDB trusts the offsets in a tree page: a damaged
/// node offset, key size or count (16-bit each) can make it read up to about 128 KiB past
/// the page's start, and past the end of the file a mapped read is SIGBUS. The last leaf and
/// the branch pages are written last, so these pages keep every such read inside the file
/// (where the reader's own checks then refuse the record) at the cost of 132 KiB per shard.
const TAIL_PAGES: u64 = 33;

/// One shard file being written.
pub(crate) struct TreeWriter {
    file: File,
    layout: Layout,
    /// The meta pages written first (from predicted sizes), and the hash of everything
    /// written so far, in file order.
    streamed: Option<(MetaPages, xxhash_rust::xxh3::Xxh3)>,
    /// The leaf page being filled; its page number is given when it is written.
    leaf: Box<[u8; PAGE]>,
    leaf_first_key: [u8; KEY],
    /// First key and page number of every written leaf, in key order.
    leaves: Vec<([u8; KEY], u64)>,
    last_key: Option<[u8; KEY]>,
}

impl TreeWriter {
    /// Writes a shard into `file`, new and empty (opened for reading too, so that it can be
    /// hashed once finished). With `predicted` (from [`predict_meta`]), the meta pages are
    /// written first and the file is hashed as it is written.
    pub(crate) fn new(mut file: File, predicted: Option<MetaPages>) -> std::io::Result<TreeWriter> {
        let streamed = match predicted {
            Some(metas) => {
                file.write_all(&metas[..])?;
                let mut hash = xxhash_rust::xxh3::Xxh3::new();
                hash.update(&metas[..]);
                Some((metas, hash))
            }
            // The meta pages are written last, once the tree is known.
            None => {
                file.seek(SeekFrom::Start(2 * PAGE as u64))?;
                None
            }
        };
        Ok(TreeWriter {
            file,
            layout: Layout::new(),
            streamed,
            leaf: Box::new([0; PAGE]),
            leaf_first_key: [0; KEY],
            leaves: Vec::new(),
            last_key: None,
        })
    }

    /// Writes all of `parts` at the end of the file (and into the running hash).
    fn emit(&mut self, parts: &mut [IoSlice<'_>]) -> std::io::Result<()> {
        emit(&mut self.file, &mut self.streamed, parts)
    }

    /// Appends the value `head ++ body` under `key`, which must be larger than every key
    /// appended before.
    pub(crate) fn append(
        &mut self,
        key: [u8; KEY],
        head: &[u8],
        body: &[u8],
    ) -> std::io::Result<()> {
        if self.last_key.is_some_and(|last| last >= key) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "shard keys must ascend",
            ));
        }
        let len = head.len() + body.len();
        let size = u32::try_from(len).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a value of {len} bytes is larger than LMDB's 4 GiB"),
            )
        })?;
        let (lower, upper) = (self.layout.lower, self.layout.upper);
        let first_pg = self.layout.next_pg;
        let place = self.layout.place(len);
        let (lower, upper) = if place.new_leaf {
            self.write_leaf(first_pg, lower, upper)?;
            (PAGE_HEADER, PAGE)
        } else {
            (lower, upper)
        };
        let big = place.overflow_pages.is_some();
        let mut at_node = [0u8; NODE_HEADER + KEY + 8];
        at_node[..2].copy_from_slice(&(size as u16).to_le_bytes());
        at_node[2..4].copy_from_slice(&((size >> 16) as u16).to_le_bytes());
        at_node[4..6].copy_from_slice(&(if big { F_BIGDATA } else { 0 }).to_le_bytes());
        at_node[6..8].copy_from_slice(&(KEY as u16).to_le_bytes());
        at_node[8..16].copy_from_slice(&key);
        let start = upper - place.node;
        if let Some(pages) = place.overflow_pages {
            let pgno = first_pg + u64::from(place.new_leaf);
            self.write_overflow(pgno, pages, head, body)?;
            at_node[16..24].copy_from_slice(&pgno.to_le_bytes());
            self.leaf[start..start + 24].copy_from_slice(&at_node);
        } else {
            let v = start + NODE_HEADER + KEY;
            self.leaf[start..v].copy_from_slice(&at_node[..16]);
            self.leaf[v..v + head.len()].copy_from_slice(head);
            self.leaf[v + head.len()..v + len].copy_from_slice(body);
            self.leaf[v + len..start + place.node].fill(0);
        }
        if lower == PAGE_HEADER {
            self.leaf_first_key = key;
        }
        self.leaf[lower..lower + 2].copy_from_slice(&(start as u16).to_le_bytes());
        self.last_key = Some(key);
        Ok(())
    }

    /// Writes `head ++ body` on the run of `pages` overflow pages from `pgno`.
    fn write_overflow(
        &mut self,
        pgno: u64,
        pages: u64,
        head: &[u8],
        body: &[u8],
    ) -> std::io::Result<()> {
        let len = head.len() + body.len();
        let mut header = [0u8; PAGE_HEADER];
        header[..8].copy_from_slice(&pgno.to_le_bytes());
        header[10..12].copy_from_slice(&P_OVERFLOW.to_le_bytes());
        header[12..16].copy_from_slice(&(pages as u32).to_le_bytes());
        let pad = pages as usize * PAGE - PAGE_HEADER - len;
        let mut parts = [
            IoSlice::new(&header),
            IoSlice::new(head),
            IoSlice::new(body),
            IoSlice::new(&ZEROS[..pad]),
        ];
        self.emit(&mut parts)
    }

    /// Writes the current leaf page as page `pgno`; its nodes fill `lower..` and `upper..`.
    fn write_leaf(&mut self, pgno: u64, lower: usize, upper: usize) -> std::io::Result<()> {
        page_header(&mut self.leaf[..], pgno, P_LEAF, lower, upper);
        self.leaf[lower..upper].fill(0);
        emit(
            &mut self.file,
            &mut self.streamed,
            &mut [IoSlice::new(&self.leaf[..])],
        )?;
        self.leaves.push((self.leaf_first_key, pgno));
        Ok(())
    }

    /// Writes the last leaf, the branch pages and the meta pages. Returns the file (not
    /// synced), the tree's counts, and the file's xxh3-64 when it was hashed as written
    /// (the meta pages written first were the tree's).
    pub(crate) fn finish(mut self) -> std::io::Result<(File, TreeStat, Option<u64>)> {
        let (lower, upper) = (self.layout.lower, self.layout.upper);
        let last_leaf_pg = self.layout.next_pg;
        let (metas, stat) = self.layout.clone().finish();
        if lower > PAGE_HEADER {
            self.write_leaf(last_leaf_pg, lower, upper)?;
        }
        let mut level = std::mem::take(&mut self.leaves);
        let mut next_pg = last_leaf_pg + u64::from(lower > PAGE_HEADER);
        while level.len() > 1 {
            level = self.write_branch_level(&level, &mut next_pg)?;
        }
        debug_assert_eq!(level.first().map_or(P_INVALID, |l| l.1), stat.root);
        self.emit(&mut [IoSlice::new(&ZEROS); TAIL_PAGES as usize])?;
        let digest = match self.streamed.take() {
            Some((written, hash)) if written == metas => Some(hash.digest()),
            _ => {
                self.file.write_all_at(&metas[..], 0)?;
                None
            }
        };
        Ok((self.file, stat, digest))
    }

    /// Writes the branch pages above `children` (first key, page) from page `next_pg`,
    /// spread evenly; returns the level above.
    fn write_branch_level(
        &mut self,
        children: &[([u8; KEY], u64)],
        next_pg: &mut u64,
    ) -> std::io::Result<Vec<([u8; KEY], u64)>> {
        let pages = children.len().div_ceil(BRANCH_CHILDREN);
        let mut above = Vec::with_capacity(pages);
        let mut page = [0u8; PAGE];
        let mut rest = children;
        for p in 0..pages {
            let take = children.len() / pages + usize::from(p < children.len() % pages);
            let (group, tail) = rest.split_at(take);
            rest = tail;
            page.fill(0);
            let (mut lower, mut upper) = (PAGE_HEADER, PAGE);
            for (i, (key, child)) in group.iter().enumerate() {
                let ksize = if i == 0 { 0 } else { KEY };
                upper -= NODE_HEADER + ksize;
                let n = &mut page[upper..upper + NODE_HEADER + ksize];
                n[..2].copy_from_slice(&(*child as u16).to_le_bytes());
                n[2..4].copy_from_slice(&((*child >> 16) as u16).to_le_bytes());
                n[4..6].copy_from_slice(&((*child >> 32) as u16).to_le_bytes());
                n[6..8].copy_from_slice(&(ksize as u16).to_le_bytes());
                n[8..].copy_from_slice(&key[..ksize]);
                page[lower..lower + 2].copy_from_slice(&(upper as u16).to_le_bytes());
                lower += 2;
            }
            let pgno = *next_pg;
            page_header(&mut page, pgno, P_BRANCH, lower, upper);
            self.emit(&mut [IoSlice::new(&page)])?;
            *next_pg += 1;
            above.push((group[0].0, pgno));
        }
        Ok(above)
    }
}

fn page_header(page: &mut [u8], pgno: u64, flags: u16, lower: usize, upper: usize) {
    page[..8].copy_from_slice(&pgno.to_le_bytes());
    page[8..10].fill(0);
    page[10..12].copy_from_slice(&flags.to_le_bytes());
    page[12..14].copy_from_slice(&(lower as u16).to_le_bytes());
    page[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
}

/// Fills meta page `pgno` (`page` is zeroed): the environment, the empty free-page tree and
/// the record tree `main`.
fn meta_page(page: &mut [u8], pgno: u64, map_size: u64, main: &TreeStat, last_pg: u64, txnid: u64) {
    page_header(page, pgno, P_META, 0, 0);
    page[16..20].copy_from_slice(&MDB_MAGIC.to_le_bytes());
    page[20..24].copy_from_slice(&MDB_DATA_VERSION.to_le_bytes());
    page[32..40].copy_from_slice(&map_size.to_le_bytes());
    let free = TreeStat {
        root: P_INVALID,
        ..TreeStat::default()
    };
    tree(&mut page[40..88], PAGE as u32, FREE_TREE_FLAGS, &free);
    tree(&mut page[88..136], 0, 0, main);
    page[136..144].copy_from_slice(&last_pg.to_le_bytes());
    page[144..152].copy_from_slice(&txnid.to_le_bytes());
}

/// One `MDB_db`: `pad` (the page size in the free tree), flags, depth, page counts, entries,
/// root.
fn tree(b: &mut [u8], pad: u32, flags: u16, t: &TreeStat) {
    b[..4].copy_from_slice(&pad.to_le_bytes());
    b[4..6].copy_from_slice(&flags.to_le_bytes());
    b[6..8].copy_from_slice(&t.depth.to_le_bytes());
    for (i, v) in [
        t.branch_pages,
        t.leaf_pages,
        t.overflow_pages,
        t.entries,
        t.root,
    ]
    .into_iter()
    .enumerate()
    {
        b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes all of `parts` at the end of `file`, and into the running hash of a file hashed as
/// it is written (a free function, so that the leaf page can be written from `self`).
fn emit(
    file: &mut File,
    streamed: &mut Option<(MetaPages, xxhash_rust::xxh3::Xxh3)>,
    parts: &mut [IoSlice<'_>],
) -> std::io::Result<()> {
    if let Some((_, hash)) = streamed {
        for p in parts.iter() {
            hash.update(p);
        }
    }
    write_all_vectored(file, parts)
}

/// `Write::write_all_vectored`, which is not stable: writes every byte of `parts`.
fn write_all_vectored(file: &mut File, mut parts: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    IoSlice::advance_slices(&mut parts, 0);
    while !parts.is_empty() {
        match file.write_vectored(parts) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// stoker's own readers of the raw file (the meta check `Dataset::open` runs and the
    /// walk `verify` uses on a damaged shard) see the tree as written: its counts, root and
    /// depth, and every key and value in order.
    #[test]
    fn meta_check_and_walk_see_the_tree_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.lmdb");
        let value = |i: u64| -> Vec<u8> {
            let len = match i % 97 {
                0 => 9_000 + i as usize,
                1 => NODE_MAX - NODE_HEADER - KEY + 1,
                _ => (i % 50) as usize,
            };
            (0..len).map(|b| (b as u64 * 7 + i) as u8).collect()
        };
        let n = 40_000u64;
        let (_, stat, digest) = write(&path, None, (0..n).map(value));
        assert_eq!(digest, None, "not hashed without predicted sizes");
        let file = File::open(&path).unwrap();
        let len = file.metadata().unwrap().len();
        assert_eq!(len % PAGE as u64, 0);
        assert_eq!(stat.file_pages(), len / PAGE as u64);
        assert_eq!(stat.depth, 3);
        crate::lmdb_meta::check(&file, len, n).unwrap();
        let tree = crate::lmdb_meta::record_tree(&file, len).unwrap();
        assert_eq!(tree.root, Some(stat.root));
        assert_eq!((tree.depth, tree.entries), (stat.depth, n));
        let mut i = 0u64;
        crate::lmdb_walk::walk_records(&file, len, &mut |item| {
            let (key, v) = item.unwrap();
            assert_eq!(key, i.to_be_bytes());
            assert_eq!(v, value(i), "value {i}");
            i += 1;
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(i, n);
    }

    /// Every branch page has at least two children, however many leaves there are: LMDB's
    /// search through a branch page assumes it.
    #[test]
    fn branch_pages_never_hold_a_single_child() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut w = TreeWriter::new(rw(&path), None).unwrap();
        let per_page = BRANCH_CHILDREN;
        let mut next_pg = 2;
        for leaves in [2, per_page, per_page + 1, 2 * per_page + 1] {
            let children: Vec<([u8; KEY], u64)> = (0..leaves as u64)
                .map(|i| (i.to_be_bytes(), i + 2))
                .collect();
            let above = w.write_branch_level(&children, &mut next_pg).unwrap();
            assert_eq!(above.len(), leaves.div_ceil(per_page));
            assert!(above
                .iter()
                .all(|(k, _)| children.iter().any(|(c, _)| c == k)));
        }
        let mut spread = Vec::new();
        w.finish().unwrap();
        let file = File::open(&path).unwrap();
        for p in 2..file.metadata().unwrap().len() / PAGE as u64 {
            let mut page = [0u8; PAGE];
            file.read_exact_at(&mut page, p * PAGE as u64).unwrap();
            if u16::from_le_bytes([page[10], page[11]]) == P_BRANCH {
                spread.push((usize::from(u16::from_le_bytes([page[12], page[13]])) - 16) / 2);
            }
        }
        assert_eq!(spread.len(), 1 + 1 + 2 + 3);
        assert!(spread.iter().all(|&c| c >= 2), "{spread:?}");
    }

    /// A key that does not ascend is refused (the tree would be unsearchable), and the
    /// writer goes on.
    #[test]
    fn keys_that_do_not_ascend_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = TreeWriter::new(rw(&dir.path().join("t")), None).unwrap();
        w.append(5u64.to_be_bytes(), b"a", b"").unwrap();
        for key in [5u64, 4] {
            let e = w.append(key.to_be_bytes(), b"b", b"").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        }
        w.append(6u64.to_be_bytes(), b"c", b"").unwrap();
        assert_eq!(w.finish().unwrap().1.entries, 2);
    }

    /// `path`, new or emptied, open as a shard is written (for reading too).
    fn rw(path: &Path) -> std::fs::File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .unwrap()
    }

    /// Writes `values` under keys 0, 1, … into `path`.
    fn write(
        path: &Path,
        predicted: Option<MetaPages>,
        values: impl Iterator<Item = Vec<u8>>,
    ) -> (File, TreeStat, Option<u64>) {
        let mut w = TreeWriter::new(rw(path), predicted).unwrap();
        for (i, v) in values.enumerate() {
            let (head, body) = v.split_at(v.len().min(3));
            w.append((i as u64).to_be_bytes(), head, body).unwrap();
        }
        w.finish().unwrap()
    }

    /// Told the sizes to come, the writer hashes the file as it writes it: the digest is the
    /// file's, and the file is the one written without a prediction. A wrong prediction
    /// (one value longer, one fewer, one more) gives the same file and no digest, so the
    /// caller hashes the file instead.
    #[test]
    fn a_file_hashed_as_written_is_the_same_file_with_its_digest() {
        let dir = tempfile::tempdir().unwrap();
        let lens: Vec<usize> = (0..3_000)
            .map(|i| match i % 11 {
                0 => 20_000 + i,
                1 => NODE_MAX - NODE_HEADER - KEY,
                2 => NODE_MAX - NODE_HEADER - KEY + 1,
                _ => i % 300,
            })
            .collect();
        let values = || lens.iter().map(|&l| vec![(l % 251) as u8; l]);
        let plain = dir.path().join("plain");
        write(&plain, None, values());
        let want = std::fs::read(&plain).unwrap();
        let sizes = |lens: &[usize]| predict_meta(lens.iter().map(|&l| l as u64));

        let streamed = dir.path().join("streamed");
        let (_, _, digest) = write(&streamed, sizes(&lens), values());
        assert_eq!(digest, Some(xxhash_rust::xxh3::xxh3_64(&want)));
        assert!(std::fs::read(&streamed).unwrap() == want);

        let mut longer = lens.clone();
        longer[1_500] += 5_000;
        let (shorter, more) = (&lens[..lens.len() - 1], [&lens[..], &[10]].concat());
        for wrong in [sizes(&longer), sizes(shorter), sizes(&more)] {
            let (_, _, digest) = write(&streamed, wrong, values());
            assert_eq!(digest, None);
            assert!(std::fs::read(&streamed).unwrap() == want);
        }
        assert!(predict_meta([u64::from(u32::MAX) + 1]).is_none());
    }
}
