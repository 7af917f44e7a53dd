//! The numbers of LMDB's file format (LMDB 0.9 `mdb.c`, 64-bit build, little-endian) that
//! stoker's writer ([`crate::lmdb_write`]) and its readers of raw files ([`crate::lmdb_meta`],
//! [`crate::lmdb_walk`], [`crate::lmdb_lookup`]) share, and the readers' field accessors.

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

/// The little-endian u16 at byte `o` of `b` (a page, the file's head): the readers of raw
/// files check the bounds before they read, so a short slice is a bug and panics.
pub(crate) fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

/// The little-endian u32 at byte `o` of `b` (see [`u16_at`]).
pub(crate) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

/// The little-endian u64 at byte `o` of `b` (see [`u16_at`]).
pub(crate) fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}
