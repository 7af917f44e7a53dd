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
    check_named, check_pgno, leaf_value, node_child, node_count, node_key, node_offset, u16_at,
    LeafValue, PAGE_HEADER, P_BRANCH, P_LEAF, P_OVERFLOW,
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
        check_pgno(pgno, self.tree.last_pg)?;
        let psize = self.tree.psize as usize;
        let page = usize::try_from(pgno)
            .ok()
            .and_then(|p| p.checked_mul(psize))
            .and_then(|start| self.map.get(start..start + psize))
            .ok_or_else(|| format!("page {pgno} lies past the end of the file"))?;
        check_named(pgno, page)?;
        Ok(page)
    }

    /// Node `i` of page `pgno` (pointers ending at `lower`): its offset and key.
    fn node(pgno: u64, page: &[u8], lower: usize, i: usize) -> Result<(usize, &[u8]), String> {
        let off = node_offset(pgno, page, lower, i)?;
        Ok((off, node_key(pgno, page, off)?))
    }

    /// The value stored in the leaf node at `off` of page `pgno`, whose key has `ksize` bytes.
    fn value(
        &self,
        pgno: u64,
        page: &'m [u8],
        off: usize,
        ksize: usize,
    ) -> Result<&'m [u8], String> {
        match leaf_value(pgno, page, off, ksize)? {
            LeafValue::Inline(v) => Ok(v),
            LeafValue::Overflow { pgno: opg, size } => {
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

/// The value stored under `key` in the record tree `tree` of the shard mapped as `map`:
/// `Ok(None)` when the tree has no such key, `Err` (what is wrong, and where) when a page
/// on the way is damaged.
pub(crate) fn get<'m>(
    map: &'m [u8],
    tree: &'m RecordTree,
    key: &[u8],
) -> Result<Option<&'m [u8]>, String> {
    let pages = Pages { map, tree };
    let Some(mut pgno) = tree.root else {
        return Ok(None);
    };
    for level in 1..=tree.depth {
        let page = pages.page(pgno)?;
        let (lower, count) = node_count(pgno, page)?;
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
            pgno = node_child(page, off);
            continue;
        }
        let (mut lo, mut hi) = (0, count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (off, k) = Pages::node(pgno, page, lower, mid)?;
            match k.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return pages.value(pgno, page, off, k.len()).map(Some),
            }
        }
        return Ok(None);
    }
    Err(format!("the tree's depth is {}", tree.depth))
}
