//! Reading a shard's records without LMDB, for `verify` on a shard whose digest differs from
//! the manifest: LMDB trusts its pages and could crash on a damaged one, so the record tree is
//! walked here instead, every page read with `pread` and every offset, size and page number
//! checked against the page and the file. A damaged page gives a problem in words, never a
//! read outside the file.
//!
//! Layout (LMDB 0.9 `mdb.c`, 64-bit, little-endian; see [`crate::lmdb_meta`] for the meta
//! pages): a page starts with `pgno` u64, `pad` u16, `flags` u16 (branch 0x01, leaf 0x02,
//! overflow 0x04), `lower` u16, `upper` u16, then `(lower - 16) / 2` node offsets (u16, from
//! the page start). A node is `lo` u16, `hi` u16, `flags` u16, `ksize` u16, then the key and,
//! in a leaf, the data: inline (`lo | hi << 16` bytes), or with node flag 0x01 a u64 page
//! number of an overflow run whose data starts 16 bytes into its first page. A branch node's
//! child page is `lo | hi << 16 | flags << 32`.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::lmdb_layout::{F_BIGDATA, NODE_HEADER, PAGE_HEADER, P_BRANCH, P_LEAF, P_OVERFLOW};
use crate::lmdb_meta::RecordTree;

/// One key and its value, or what was wrong where one was expected.
pub(crate) type Item = Result<(Vec<u8>, Vec<u8>), String>;

struct Walker<'f> {
    file: &'f File,
    len: u64,
    tree: RecordTree,
    seen: HashSet<u64>,
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

impl Walker<'_> {
    fn page(&mut self, pgno: u64) -> Result<Vec<u8>, String> {
        if pgno < 2 || pgno > self.tree.last_pg {
            return Err(format!("page number {pgno} is outside the tree"));
        }
        if !self.seen.insert(pgno) {
            return Err(format!("page {pgno} is reached twice (a cycle)"));
        }
        let mut buf = vec![0u8; self.tree.psize as usize];
        self.file
            .read_exact_at(&mut buf, pgno * self.tree.psize)
            .map_err(|e| format!("page {pgno}: {e}"))?;
        if u64::from_le_bytes(buf[..8].try_into().expect("8 bytes")) != pgno {
            return Err(format!("page {pgno} names itself differently"));
        }
        Ok(buf)
    }

    /// The node offsets of a branch or leaf page.
    fn nodes(&self, pgno: u64, page: &[u8]) -> Result<Vec<usize>, String> {
        let lower = usize::from(u16_at(page, 12));
        if lower < PAGE_HEADER || lower > page.len() || !(lower - PAGE_HEADER).is_multiple_of(2) {
            return Err(format!("page {pgno}: bad node count"));
        }
        (0..(lower - PAGE_HEADER) / 2)
            .map(|i| {
                let off = usize::from(u16_at(page, PAGE_HEADER + 2 * i));
                if off < lower || off + NODE_HEADER > page.len() {
                    Err(format!("page {pgno}: node {i} lies outside the page"))
                } else {
                    Ok(off)
                }
            })
            .collect()
    }

    fn walk(&mut self, pgno: u64, level: u16, out: &mut dyn FnMut(Item)) {
        if level > self.tree.depth {
            return out(Err(format!("page {pgno}: deeper than the tree's depth")));
        }
        let page = match self
            .page(pgno)
            .and_then(|p| self.nodes(pgno, &p).map(|n| (p, n)))
        {
            Ok(pn) => pn,
            Err(e) => return out(Err(e)),
        };
        let (page, nodes) = page;
        match u16_at(&page, 10) {
            P_BRANCH => {
                for off in nodes {
                    let n = &page[off..];
                    let child = u64::from(u16_at(n, 0))
                        | u64::from(u16_at(n, 2)) << 16
                        | u64::from(u16_at(n, 4)) << 32;
                    self.walk(child, level + 1, out);
                }
            }
            P_LEAF => {
                for off in nodes {
                    out(self.leaf_node(pgno, &page, off));
                }
            }
            flags => out(Err(format!(
                "page {pgno}: flags {flags:#x} are not a tree page"
            ))),
        }
    }

    fn leaf_node(&mut self, pgno: u64, page: &[u8], off: usize) -> Item {
        let n = &page[off..];
        let size = usize::from(u16_at(n, 0)) | usize::from(u16_at(n, 2)) << 16;
        let (flags, ksize) = (u16_at(n, 4), usize::from(u16_at(n, 6)));
        let key_end = NODE_HEADER + ksize;
        let key = n
            .get(NODE_HEADER..key_end)
            .ok_or_else(|| format!("page {pgno}: a key runs past the page"))?
            .to_vec();
        let value = if flags == F_BIGDATA {
            let at = n.get(key_end..key_end + 8).ok_or_else(|| {
                format!("page {pgno}: an overflow page number runs past the page")
            })?;
            let opg = u64::from_le_bytes(at.try_into().expect("8 bytes"));
            let first = self.page(opg)?;
            if u16_at(&first, 10) != P_OVERFLOW {
                return Err(format!("page {opg}: not an overflow page"));
            }
            let start = opg * self.tree.psize + PAGE_HEADER as u64;
            if start + size as u64 > self.len {
                return Err(format!(
                    "page {opg}: a value of {size} bytes runs past the file"
                ));
            }
            let mut v = vec![0u8; size];
            self.file
                .read_exact_at(&mut v, start)
                .map_err(|e| format!("page {opg}: {e}"))?;
            v
        } else if flags == 0 {
            n.get(key_end..key_end + size)
                .ok_or_else(|| format!("page {pgno}: a value runs past the page"))?
                .to_vec()
        } else {
            return Err(format!(
                "page {pgno}: node flags {flags:#x} (stoker writes none)"
            ));
        };
        Ok((key, value))
    }
}

/// Walks the record tree of the shard open as `file` (`len` bytes) in key order, handing
/// each record (or each problem) to `out`. Fails only when the meta pages themselves are
/// unusable.
pub(crate) fn walk_records(file: &File, len: u64, out: &mut dyn FnMut(Item)) -> Result<(), String> {
    let tree = crate::lmdb_meta::record_tree(file, len)?;
    let mut w = Walker {
        file,
        len,
        tree,
        seen: HashSet::new(),
    };
    if let Some(root) = tree.root {
        w.walk(root, 1, out);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};

    /// The walk sees what LMDB sees on an intact shard: every key in order, the same values,
    /// small records inline and large ones on overflow pages, over several leaf pages.
    #[test]
    fn walk_of_an_intact_shard_equals_lmdb() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
        for i in 0..300u32 {
            let meta = RecordMeta {
                encoding: Encoding::Jpeg,
                height: 8,
                width: 8,
                channels: 3,
                label: 0,
            };
            let len = if i % 7 == 0 { 5000 } else { 20 };
            w.push(meta, &vec![(i % 251) as u8; len]).unwrap();
        }
        w.finish(vec!["c".into()], Provenance::stoker("t")).unwrap();
        let ds = Dataset::open(dir.path()).unwrap();
        let r = ds.reader().unwrap();
        let f = std::fs::File::open(dir.path().join("shard-00000.lmdb")).unwrap();
        let len = f.metadata().unwrap().len();
        let mut got = Vec::new();
        super::walk_records(&f, len, &mut |item| got.push(item.unwrap())).unwrap();
        assert_eq!(got.len(), 300);
        for (i, (key, value)) in got.iter().enumerate() {
            assert_eq!(key.as_slice(), (i as u64).to_be_bytes());
            let rec = r.get(i as u64).unwrap();
            assert_eq!(&value[crate::HEADER_LEN..], rec.payload, "record {i}");
        }
    }
}
