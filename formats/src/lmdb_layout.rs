//! The numbers of LMDB's file format (LMDB 0.9 `mdb.c`, 64-bit build, little-endian) that
//! stoker's writer ([`crate::lmdb_write`]) and its readers of raw files ([`crate::lmdb_meta`],
//! [`crate::lmdb_walk`], [`crate::lmdb_lookup`]) share, and the checked reading of a tree
//! page's nodes, which the walk (pages read with `pread`) and the lookup (pages of a map)
//! both do: every offset and size is checked against the page before it is used.

/// Bytes of a page header: `pgno` u64, `pad` u16, `flags` u16, `lower` u16, `upper` u16 (an
/// overflow page has a u32 page count in place of `lower` and `upper`).
pub(crate) const PAGE_HEADER: usize = 16;
/// Bytes of a node header: `lo` u16, `hi` u16, `flags` u16, `ksize` u16.
pub(crate) const NODE_HEADER: usize = 8;
/// Page flags.
pub(crate) const P_BRANCH: u16 = 0x01;
pub(crate) const P_LEAF: u16 = 0x02;
pub(crate) const P_OVERFLOW: u16 = 0x04;
pub(crate) const P_META: u16 = 0x08;
/// Leaf node flag: the value is on overflow pages, the node holds their first page number.
pub(crate) const F_BIGDATA: u16 = 0x01;
pub(crate) const MDB_MAGIC: u32 = 0xBEEF_C0DE;
pub(crate) const MDB_DATA_VERSION: u32 = 1;
/// No page (the root of an empty tree).
pub(crate) const P_INVALID: u64 = u64::MAX;
/// The free-page tree always has integer keys.
pub(crate) const MDB_INTEGERKEY: u16 = 0x08;
/// The only environment flag a stoker shard persists (a single-file environment).
pub(crate) const MDB_NOSUBDIR: u16 = 0x4000;

pub(crate) fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

pub(crate) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

pub(crate) fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// `Ok` when `pgno` is a page of a tree whose last page is `last_pg` (pages 0 and 1 are
/// the meta pages).
pub(crate) fn check_pgno(pgno: u64, last_pg: u64) -> Result<(), String> {
    if pgno < 2 || pgno > last_pg {
        return Err(format!("page number {pgno} is outside the tree"));
    }
    Ok(())
}

/// `Ok` when `page`, read as page `pgno`, names itself so.
pub(crate) fn check_named(pgno: u64, page: &[u8]) -> Result<(), String> {
    if u64_at(page, 0) != pgno {
        return Err(format!("page {pgno} names itself differently"));
    }
    Ok(())
}

/// The end of the node pointers of branch or leaf page `pgno` (`lower`) and its node count.
pub(crate) fn node_count(pgno: u64, page: &[u8]) -> Result<(usize, usize), String> {
    let lower = usize::from(u16_at(page, 12));
    if lower < PAGE_HEADER || lower > page.len() || (lower - PAGE_HEADER) % 2 != 0 {
        return Err(format!("page {pgno}: bad node count"));
    }
    Ok((lower, (lower - PAGE_HEADER) / 2))
}

/// The offset of node `i` of page `pgno`, whose node pointers end at `lower`: after the
/// pointers, with room for the node header.
pub(crate) fn node_offset(pgno: u64, page: &[u8], lower: usize, i: usize) -> Result<usize, String> {
    let off = usize::from(u16_at(page, PAGE_HEADER + 2 * i));
    if off < lower || off + NODE_HEADER > page.len() {
        return Err(format!("page {pgno}: node {i} lies outside the page"));
    }
    Ok(off)
}

/// The key of the node at `off` (a [`node_offset`]) of page `pgno`.
pub(crate) fn node_key(pgno: u64, page: &[u8], off: usize) -> Result<&[u8], String> {
    let ksize = usize::from(u16_at(page, off + 6));
    page.get(off + NODE_HEADER..off + NODE_HEADER + ksize)
        .ok_or_else(|| format!("page {pgno}: a key runs past the page"))
}

/// The child page of the branch node at `off` (`lo | hi << 16 | flags << 32`).
pub(crate) fn node_child(page: &[u8], off: usize) -> u64 {
    u64::from(u16_at(page, off))
        | u64::from(u16_at(page, off + 2)) << 16
        | u64::from(u16_at(page, off + 4)) << 32
}

/// Where the value of a leaf node is.
pub(crate) enum LeafValue<'p> {
    /// In the node itself.
    Inline(&'p [u8]),
    /// `size` bytes from 16 bytes into overflow page `pgno` (not yet checked).
    Overflow { pgno: u64, size: usize },
}

/// The value of the leaf node at `off` of page `pgno`, whose key has `ksize` bytes.
pub(crate) fn leaf_value(
    pgno: u64,
    page: &[u8],
    off: usize,
    ksize: usize,
) -> Result<LeafValue<'_>, String> {
    let size = usize::from(u16_at(page, off)) | usize::from(u16_at(page, off + 2)) << 16;
    let data = off + NODE_HEADER + ksize;
    match u16_at(page, off + 4) {
        0 => page
            .get(data..data + size)
            .map(LeafValue::Inline)
            .ok_or_else(|| format!("page {pgno}: a value runs past the page")),
        F_BIGDATA => {
            let at = page.get(data..data + 8).ok_or_else(|| {
                format!("page {pgno}: an overflow page number runs past the page")
            })?;
            Ok(LeafValue::Overflow {
                pgno: u64::from_le_bytes(at.try_into().expect("8 bytes")),
                size,
            })
        }
        flags => Err(format!(
            "page {pgno}: node flags {flags:#x} (stoker writes none)"
        )),
    }
}
