//! Looking one record up in a shard's memory map without LMDB.
//!
//! LMDB trusts its pages: one damaged byte (a page's `lower`, a node's flags or offset)
//! sent `mdb_get` outside the map, and `inspect`, `bench` and the loader died of SIGSEGV.
//! This descent reads the same B+tree (layout in [`crate::lmdb_walk`]) as plain slices of
//! the map: every page number, node offset, key and value is checked against its page and
//! the map, and the tree's depth bounds the descent, so a damaged page is an error in
//! words. It costs what `mdb_get` did: one page per level and a binary search in each.

use std::cmp::Ordering;

use crate::lmdb_layout::{
    u16_at, u64_at, F_BIGDATA, NODE_HEADER, PAGE_HEADER, P_BRANCH, P_LEAF, P_OVERFLOW,
};
use crate::lmdb_meta::RecordTree;

/// A checked view of the pages of one shard's map.
struct Pages<'m> {
    map: &'m [u8],
    tree: &'m RecordTree,
}

impl<'m> Pages<'m> {
    /// Page `pgno`, which must be a page of the tree that names itself `pgno`.
    fn page(&self, pgno: u64) -> Result<&'m [u8], String> {
        let psize = self.tree.psize as usize;
        let start = (pgno >= 2 && pgno <= self.tree.last_pg)
            .then(|| usize::try_from(pgno).ok()?.checked_mul(psize))
            .flatten()
            .ok_or_else(|| format!("page number {pgno} is outside the tree"))?;
        let page = self
            .map
            .get(start..start + psize)
            .ok_or_else(|| format!("page {pgno} lies past the end of the file"))?;
        if u64_at(page, 0) != pgno {
            return Err(format!("page {pgno} names itself differently"));
        }
        Ok(page)
    }

    /// The offset of node `i` of a page with `count` nodes and pointer array end `lower`.
    fn node(pgno: u64, page: &[u8], lower: usize, i: usize) -> Result<(usize, &[u8]), String> {
        let off = usize::from(u16_at(page, PAGE_HEADER + 2 * i));
        if off < lower || off + NODE_HEADER > page.len() {
            return Err(format!("page {pgno}: node {i} lies outside the page"));
        }
        let ksize = usize::from(u16_at(page, off + 6));
        let key = page
            .get(off + NODE_HEADER..off + NODE_HEADER + ksize)
            .ok_or_else(|| format!("page {pgno}: the key of node {i} runs past the page"))?;
        Ok((off, key))
    }

    /// The value stored in `node`: checked to lie in its leaf page, or, for an overflow
    /// value, to start on an overflow page and end in the map.
    fn value(&self, node: &LeafNode<'m>) -> Result<&'m [u8], String> {
        match node.place()? {
            Place::Leaf(bytes) => node
                .page
                .get(bytes)
                .ok_or_else(|| format!("page {}: a value runs past the page", node.pgno)),
            Place::Overflow { opg, size } => {
                let first = self.page(opg)?;
                if u16_at(first, 10) != P_OVERFLOW {
                    return Err(format!("page {opg}: not an overflow page"));
                }
                // `page` checked that the first page lies in the map; the value's end must too.
                let start = opg as usize * self.tree.psize as usize + PAGE_HEADER;
                self.map.get(start..start + size).ok_or_else(|| {
                    format!("page {opg}: a value of {size} bytes runs past the file")
                })
            }
        }
    }
}

/// Where a leaf node's value lies, as its node says.
enum Place {
    /// These bytes of the leaf page itself.
    Leaf(std::ops::Range<usize>),
    /// `size` bytes from the start of overflow page `opg`'s data.
    Overflow { opg: u64, size: usize },
}

impl LeafNode<'_> {
    /// Where the value lies, read from the node alone (nothing checked beyond its page).
    fn place(&self) -> Result<Place, String> {
        let (page, off, pgno) = (self.page, self.off, self.pgno);
        let size = usize::from(u16_at(page, off)) | usize::from(u16_at(page, off + 2)) << 16;
        let data = off + NODE_HEADER + self.ksize;
        match u16_at(page, off + 4) {
            0 => Ok(Place::Leaf(data..data + size)),
            F_BIGDATA => {
                let at = page.get(data..data + 8).ok_or_else(|| {
                    format!("page {pgno}: an overflow page number runs past the page")
                })?;
                let opg = u64::from_le_bytes(at.try_into().expect("8 bytes"));
                Ok(Place::Overflow { opg, size })
            }
            flags => Err(format!(
                "page {pgno}: node flags {flags:#x} (stoker writes none)"
            )),
        }
    }
}

/// The value stored under `key` in the record tree `tree` of the shard mapped as `map`:
/// `Ok(None)` when the tree has no such key, `Err` (what is wrong, and where) when a page
/// on the way is damaged.
pub(crate) fn get<'m>(
    map: &'m [u8],
    tree: &'m RecordTree,
    key: &[u8],
) -> Result<Option<&'m [u8]>, String> {
    let pages = Pages { map, tree };
    match leaf_node(&pages, key)? {
        Some(node) => pages.value(&node).map(Some),
        None => Ok(None),
    }
}

/// Where in `map` the value stored under `key` lies, found as [`get`] finds it but without
/// reading the value's own pages: for read-ahead ([`crate::read_ahead`]), which must not
/// wait for the pages it is about to ask for. An overflow value's first page is not
/// checked here; reading the value ([`get`]) checks it.
pub(crate) fn span(
    map: &[u8],
    tree: &RecordTree,
    key: &[u8],
) -> Result<Option<std::ops::Range<usize>>, String> {
    let pages = Pages { map, tree };
    let Some(node) = leaf_node(&pages, key)? else {
        return Ok(None);
    };
    let psize = tree.psize as usize;
    let (start, size) = match node.place()? {
        // In the leaf page itself, which the lookup has just read.
        Place::Leaf(bytes) if bytes.end <= node.page.len() => {
            (node.pgno as usize * psize + bytes.start, bytes.len())
        }
        Place::Leaf(_) => return Err(format!("page {}: a value runs past the page", node.pgno)),
        Place::Overflow { opg, size } => {
            let start = usize::try_from(opg)
                .ok()
                .and_then(|p| p.checked_mul(psize))
                .and_then(|p| p.checked_add(PAGE_HEADER))
                .ok_or_else(|| format!("page {opg}: outside the map"))?;
            (start, size)
        }
    };
    let end = start
        .checked_add(size)
        .filter(|&end| end <= map.len())
        .ok_or_else(|| format!("a value of {size} bytes at {start} runs past the file"))?;
    Ok(Some(start..end))
}

/// The leaf node holding `key`: its page (number and bytes), offset in the page and key
/// length.
struct LeafNode<'m> {
    pgno: u64,
    page: &'m [u8],
    off: usize,
    ksize: usize,
}

/// Descends the tree of `pages` to the leaf node of `key`; `None` when there is none.
fn leaf_node<'m>(pages: &Pages<'m>, key: &[u8]) -> Result<Option<LeafNode<'m>>, String> {
    let tree = pages.tree;
    let Some(mut pgno) = tree.root else {
        return Ok(None);
    };
    for level in 1..=tree.depth {
        let page = pages.page(pgno)?;
        let lower = usize::from(u16_at(page, 12));
        if lower < PAGE_HEADER || lower > page.len() || !(lower - PAGE_HEADER).is_multiple_of(2) {
            return Err(format!("page {pgno}: bad node count"));
        }
        let count = (lower - PAGE_HEADER) / 2;
        let want = if level < tree.depth { P_BRANCH } else { P_LEAF };
        let flags = u16_at(page, 10);
        if flags != want || count == 0 {
            return Err(format!(
                "page {pgno} (level {level} of {}): flags {flags:#x}, {count} nodes",
                tree.depth
            ));
        }
        if want == P_BRANCH {
            // The child whose range holds `key`: the last node with a key ≤ `key`, node 0
            // standing for everything below node 1 (its key is not read, as in LMDB).
            let (mut lo, mut hi) = (1, count);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if Pages::node(pgno, page, lower, mid)?.1 <= key {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            let (off, _) = Pages::node(pgno, page, lower, lo - 1)?;
            pgno = u64::from(u16_at(page, off))
                | u64::from(u16_at(page, off + 2)) << 16
                | u64::from(u16_at(page, off + 4)) << 32;
            continue;
        }
        let (mut lo, mut hi) = (0, count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (off, k) = Pages::node(pgno, page, lower, mid)?;
            match k.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => {
                    return Ok(Some(LeafNode {
                        pgno,
                        page,
                        off,
                        ksize: k.len(),
                    }))
                }
            }
        }
        return Ok(None);
    }
    Err(format!("the tree's depth is {}", tree.depth))
}
