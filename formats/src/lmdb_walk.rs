//! Reading a shard's records without LMDB, for `verify`, which may meet damaged shards: LMDB
//! trusts its pages and could crash on a damaged one, so the record tree is walked here instead, every page read with `pread` and every offset, size and page number
//! checked against the page and the file. A damaged page gives a problem in words, never a
//! read outside the file. [`salvage_records`] reads what a shard cut short still holds, with
//! the same checks, never past the cut.
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
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;

use crate::lmdb_layout::{
    u16_at, u64_at, F_BIGDATA, NODE_HEADER, PAGE_HEADER, P_BRANCH, P_LEAF, P_OVERFLOW,
};
use crate::lmdb_meta::RecordTree;

/// One key and its value, or what was wrong where one was expected.
pub(crate) type Item = Result<(Vec<u8>, Vec<u8>), WalkError>;

/// What takes the items of a walk: it breaks the walk off when it wants no more (stopped,
/// or short of memory), so that the rest of the shard is not read for nothing.
pub(crate) type Taker<'a> = dyn FnMut(Item) -> ControlFlow<()> + 'a;

/// What was wrong where a record was expected.
#[derive(Debug)]
pub(crate) enum WalkError {
    /// A damaged page, in words.
    Damaged(String),
    /// The value at `page`, of `bytes` bytes, could not be allocated: not the shard's
    /// fault (the process is short of memory), so not to be counted as damage.
    Memory { page: u64, bytes: usize },
}

impl From<String> for WalkError {
    fn from(reason: String) -> Self {
        WalkError::Damaged(reason)
    }
}

struct Walker<'f> {
    file: &'f File,
    /// Bytes of the file that may be read: its length, or where a shard cut short (or
    /// zeros in the place of its tail) begins. Every read is checked against it, so a page
    /// past it is a problem, never a short read nor one of bytes that are not the shard's.
    len: u64,
    tree: RecordTree,
    /// Pages read by the descent and the overflow runs read, so that a cycle or two nodes
    /// sharing a run is a problem, and the walk ends.
    seen: HashSet<u64>,
}

/// The page count of the overflow run whose first page header is `head`: a u32 in place
/// of `lower` and `upper`.
fn overflow_pages(head: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(
        head[12..16].try_into().expect("4 bytes"),
    ))
}

impl Walker<'_> {
    /// The offset of page `pgno` in the file, when it is a page of the tree whose first
    /// `bytes` bytes lie before [`Walker::len`].
    fn locate(&self, pgno: u64, bytes: u64) -> Result<u64, String> {
        if pgno < 2 || pgno > self.tree.last_pg {
            return Err(format!("page number {pgno} is outside the tree"));
        }
        // `last_pg` lies inside the size the meta pages were checked against: no overflow.
        let start = pgno * self.tree.psize;
        if start.saturating_add(bytes) > self.len {
            return Err(format!(
                "page {pgno} lies past the end of the file ({} bytes)",
                self.len
            ));
        }
        Ok(start)
    }

    /// Page `pgno` of the descent, read once; it must name itself.
    fn page(&mut self, pgno: u64) -> Result<Vec<u8>, String> {
        let start = self.locate(pgno, self.tree.psize)?;
        if !self.seen.insert(pgno) {
            return Err(format!("page {pgno} is reached twice (a cycle)"));
        }
        let mut buf = vec![0u8; self.tree.psize as usize];
        self.file
            .read_exact_at(&mut buf, start)
            .map_err(|e| format!("page {pgno}: {e}"))?;
        if u64_at(&buf, 0) != pgno {
            return Err(format!("page {pgno} names itself differently"));
        }
        Ok(buf)
    }

    /// Where the value of the overflow run starting at page `opg` begins: the run's header
    /// must name itself and be an overflow page. Only the header is read (the value is read
    /// by its size), so a value that ends before the cut of a shard cut short is read
    /// although the zeros after it in its run's last page are not there.
    ///
    /// Also gives how many bytes the run holds ([`value_buffer`]).
    fn overflow_value(&mut self, opg: u64) -> Result<(u64, u64), String> {
        let start = self.locate(opg, PAGE_HEADER as u64)?;
        if !self.seen.insert(opg) {
            return Err(format!("page {opg} is reached twice"));
        }
        let mut head = [0u8; PAGE_HEADER];
        self.file
            .read_exact_at(&mut head, start)
            .map_err(|e| format!("page {opg}: {e}"))?;
        if u64_at(&head, 0) != opg {
            return Err(format!("page {opg} names itself differently"));
        }
        if u16_at(&head, 10) != P_OVERFLOW {
            return Err(format!("page {opg}: not an overflow page"));
        }
        let holds = (overflow_pages(&head) * self.tree.psize).saturating_sub(PAGE_HEADER as u64);
        Ok((start + PAGE_HEADER as u64, holds))
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

    /// Hands out the records under page `pgno`, whose keys its branch says lie in
    /// `range` (`[low, high)`, each end open when `None`).
    fn walk(
        &mut self,
        pgno: u64,
        level: u16,
        range: Range<'_>,
        out: &mut Taker<'_>,
    ) -> ControlFlow<()> {
        if level > self.tree.depth {
            return out(Err(
                format!("page {pgno}: deeper than the tree's depth").into()
            ));
        }
        let page = match self
            .page(pgno)
            .and_then(|p| self.nodes(pgno, &p).map(|n| (p, n)))
        {
            Ok(pn) => pn,
            Err(e) => return out(Err(e.into())),
        };
        let (page, nodes) = page;
        match u16_at(&page, 10) {
            P_BRANCH => {
                let keys = match node_keys(pgno, &page, &nodes) {
                    Ok(k) => k,
                    Err(e) => return out(Err(e.into())),
                };
                for (i, off) in nodes.iter().enumerate() {
                    let n = &page[*off..];
                    let child = u64::from(u16_at(n, 0))
                        | u64::from(u16_at(n, 2)) << 16
                        | u64::from(u16_at(n, 4)) << 32;
                    // A reader descends to child `i` for the keys from this node's to the
                    // next's (the first node's key is not compared: the range's low end).
                    let low = if i == 0 { range.0 } else { Some(keys[i]) };
                    let high = keys.get(i + 1).copied().or(range.1);
                    self.walk(child, level + 1, (low, high), out)?;
                }
                ControlFlow::Continue(())
            }
            P_LEAF => {
                let keys = match node_keys(pgno, &page, &nodes) {
                    Ok(k) => k,
                    Err(e) => return out(Err(e.into())),
                };
                for (i, off) in nodes.iter().enumerate() {
                    if !findable(&keys, i, range) {
                        out(Err(format!(
                            "page {pgno}: key {} is out of order, or outside the range its branch gives it: a reader looking it up finds another record or none",
                            hex(keys[i])
                        )
                        .into()))?;
                        continue;
                    }
                    out(self.leaf_node(pgno, &page, *off, keys[i]))?;
                }
                ControlFlow::Continue(())
            }
            flags => out(Err(format!(
                "page {pgno}: flags {flags:#x} are not a tree page"
            )
            .into())),
        }
    }

    /// The record of the leaf node at `off` of `page`, whose key ([`node_keys`]) is `key`.
    fn leaf_node(&mut self, pgno: u64, page: &[u8], off: usize, key: &[u8]) -> Item {
        let n = &page[off..];
        let size = usize::from(u16_at(n, 0)) | usize::from(u16_at(n, 2)) << 16;
        let flags = u16_at(n, 4);
        let key_end = NODE_HEADER + key.len();
        let value = if flags == F_BIGDATA {
            let at = n.get(key_end..key_end + 8).ok_or_else(|| {
                format!("page {pgno}: an overflow page number runs past the page")
            })?;
            let opg = u64::from_le_bytes(at.try_into().expect("8 bytes"));
            let (start, holds) = self.overflow_value(opg)?;
            if start + size as u64 > self.len {
                return Err(
                    format!("page {opg}: a value of {size} bytes runs past the file").into(),
                );
            }
            let mut v = value_buffer(size, (opg, holds), |v| v.try_reserve_exact(size).is_ok())?;
            self.file
                .read_exact_at(&mut v, start)
                .map_err(|e| format!("page {opg}: {e}"))?;
            v
        } else if flags == 0 {
            n.get(key_end..key_end + size)
                .ok_or_else(|| format!("page {pgno}: a value runs past the page"))?
                .to_vec()
        } else {
            return Err(format!("page {pgno}: node flags {flags:#x} (stoker writes none)").into());
        };
        Ok((key.to_vec(), value))
    }
}

/// A buffer of `size` bytes for the value of the overflow run at page `opg`, which holds
/// `holds` bytes, got by `reserve`. A value is up to 4 GiB and up to the file's size: under
/// a memory limit its allocation may fail, which must stop the check, not abort it
/// ([`WalkError::Memory`]). Unless the size is more than its run holds: then it is damage
/// (the node's size or the run's header), and so it is told. Read by its size where memory
/// allows, as LMDB and the loader read it, a value larger than its run fails its record's
/// checks, and one whose run header alone is damaged passes them.
fn value_buffer(
    size: usize,
    (opg, holds): (u64, u64),
    reserve: impl FnOnce(&mut Vec<u8>) -> bool,
) -> Result<Vec<u8>, WalkError> {
    let mut v = Vec::new();
    if !reserve(&mut v) {
        if size as u64 > holds {
            return Err(format!(
                "page {opg}: a value of {size} bytes runs past its overflow run ({holds} bytes), and that many cannot be allocated"
            )
            .into());
        }
        return Err(WalkError::Memory {
            page: opg,
            bytes: size,
        });
    }
    v.resize(size, 0);
    Ok(v)
}

/// Walks the record tree of the shard open as `file` (`len` bytes) in key order, handing
/// each record (or each problem) to `out`. Fails only when the meta pages themselves are
/// unusable.
pub(crate) fn walk_records(file: &File, len: u64, out: &mut Taker<'_>) -> Result<(), String> {
    let tree = crate::lmdb_meta::record_tree(file, len)?;
    let mut w = Walker {
        file,
        len,
        tree,
        seen: HashSet::new(),
    };
    if let Some(root) = tree.root {
        let _ = w.walk(root, 1, (None, None), out);
    }
    Ok(())
}

/// The keys a branch gives a page: `[low, high)`, an end open when `None`.
type Range<'k> = (Option<&'k [u8]>, Option<&'k [u8]>);

/// The keys of a page's nodes, in node order ([`node_key`]).
fn node_keys<'p>(pgno: u64, page: &'p [u8], nodes: &[usize]) -> Result<Vec<&'p [u8]>, String> {
    nodes.iter().map(|&off| node_key(pgno, page, off)).collect()
}

/// The key of the node at `off` of `page`, checked to lie in the page.
fn node_key(pgno: u64, page: &[u8], off: usize) -> Result<&[u8], String> {
    let ksize = usize::from(u16_at(&page[off..], 6));
    page.get(off + NODE_HEADER..off + NODE_HEADER + ksize)
        .ok_or_else(|| format!("page {pgno}: a key runs past the page"))
}

/// Whether a reader looking up leaf key `i` of `keys` finds it: it lies in the branch's
/// `range`, and its neighbours are below and above it (LMDB's binary search over a page
/// takes its keys for sorted; two alike, either may be found).
fn findable(keys: &[&[u8]], i: usize, (low, high): Range<'_>) -> bool {
    let k = keys[i];
    low.is_none_or(|l| l <= k)
        && high.is_none_or(|h| k < h)
        && (i == 0 || keys[i - 1] < k)
        && keys.get(i + 1).is_none_or(|next| k < *next)
}

/// `key` in hex, as a message shows it.
fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads what a shard cut short still holds: the records of the leaf pages that lie wholly
/// in its first `len` bytes and pass their checks, each with its value when that lies there
/// too, handed to `out` in key order (or what was wrong). `tree` is the record tree of the
/// meta pages, checked against the size the file should have; `len` is where the file ends,
/// or where the zeros that took the place of its tail begin.
///
/// The tree is descended from its root when the root page lies before `len` and is sound.
/// stoker's writer writes the branch pages last (docs/FORMAT.md, "Writing"), so a cut
/// anywhere before the end of the tree leaves no root: then the leaf pages are found by
/// reading the pages before the cut in order ([`Walker::scan`]), as they were written.
pub(crate) fn salvage_records(file: &File, len: u64, tree: RecordTree, out: &mut Taker<'_>) {
    let mut w = Walker {
        file,
        len,
        tree,
        seen: HashSet::new(),
    };
    let Some(root) = tree.root else {
        return;
    };
    let want = if tree.depth == 1 { P_LEAF } else { P_BRANCH };
    let _ = if w.peek(root).is_some_and(|p| u16_at(&p, 10) == want) {
        w.walk(root, 1, (None, None), out)
    } else {
        w.scan(out)
    };
}

impl Walker<'_> {
    /// Page `pgno` when it lies before [`Walker::len`] and names itself; not marked seen.
    fn peek(&self, pgno: u64) -> Option<Vec<u8>> {
        let start = self.locate(pgno, self.tree.psize).ok()?;
        let mut buf = vec![0u8; self.tree.psize as usize];
        self.file.read_exact_at(&mut buf, start).ok()?;
        (u64_at(&buf, 0) == pgno).then_some(buf)
    }

    /// The records of every leaf page among the pages before the cut, in page order: the
    /// order of their keys in a file stoker wrote (pages in ascending order, every page
    /// used once). An overflow run is stepped over by its page count, so the bytes of its
    /// values are never taken for pages; branch pages hold no records. Pages that are none
    /// of these (damaged) are named, a run of them at once. Each page is read once, so the
    /// scan ends after at most `len / page size` reads whatever the pages say.
    fn scan(&mut self, out: &mut Taker<'_>) -> ControlFlow<()> {
        let psize = self.tree.psize;
        let end = (self.tree.last_pg + 1).min(self.len / psize);
        // The pages since the last usable one that were not usable, first and last.
        let mut unusable: Option<(u64, u64)> = None;
        let mut pgno = 2;
        while pgno < end {
            let Some(page) = self.peek(pgno) else {
                unusable = Some((unusable.map_or(pgno, |(a, _)| a), pgno));
                pgno += 1;
                continue;
            };
            name_unusable(unusable.take(), out)?;
            match u16_at(&page, 10) {
                P_LEAF => match self.nodes(pgno, &page) {
                    Ok(nodes) => {
                        for off in nodes {
                            match node_key(pgno, &page, off) {
                                Ok(key) => out(self.leaf_node(pgno, &page, off, key))?,
                                Err(e) => out(Err(e.into()))?,
                            }
                        }
                    }
                    Err(e) => out(Err(e.into()))?,
                },
                P_OVERFLOW => {
                    pgno = pgno.saturating_add(overflow_pages(&page).max(1));
                    continue;
                }
                P_BRANCH => {}
                flags => out(Err(format!(
                    "page {pgno}: flags {flags:#x} are not a tree page"
                )
                .into()))?,
            }
            pgno += 1;
        }
        name_unusable(unusable, out)
    }
}

/// Names the pages `first..=last` that [`Walker::scan`] could not use, if any.
fn name_unusable(run: Option<(u64, u64)>, out: &mut Taker<'_>) -> ControlFlow<()> {
    match run {
        Some((first, last)) => out(Err(format!(
            "pages {first}..={last} do not name themselves (damaged, or not a tree page)"
        )
        .into())),
        None => ControlFlow::Continue(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};

    /// A dataset of 300 records in one shard in a new directory, record `i` `len(i)` bytes
    /// of `i % 251`.
    fn three_hundred_records(len: impl Fn(u32) -> usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
        let meta = RecordMeta {
            encoding: Encoding::Jpeg,
            height: 8,
            width: 8,
            channels: 3,
            label: 0,
        };
        for i in 0..300u32 {
            w.push(meta, &vec![(i % 251) as u8; len(i)]).unwrap();
        }
        w.finish(vec!["c".into()], Provenance::stoker("t")).unwrap();
        dir
    }

    /// The keys a reader cannot find are problems of the walk, not records: a branch's
    /// separator key changed (its child's keys lie outside the range the branch gives it)
    /// and a leaf key made like its neighbour's. verify counted them OK (exit 0 on the
    /// first) while lookups found another record or none.
    #[test]
    fn keys_a_lookup_cannot_find_are_not_records_of_the_walk() {
        let dir = three_hundred_records(|_| 20);
        let path = dir.path().join("shard-00000.lmdb");
        let clean = std::fs::read(&path).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let tree = crate::lmdb_meta::record_tree(&f, clean.len() as u64).unwrap();
        assert_eq!(tree.depth, 2);
        let node = |page: u64, i: usize| {
            let at = (page * tree.psize) as usize;
            let off = u16::from_le_bytes([clean[at + 16 + 2 * i], clean[at + 17 + 2 * i]]);
            at + usize::from(off)
        };
        let walk = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            let f = std::fs::File::open(&path).unwrap();
            let (mut keys, mut problems) = (Vec::new(), Vec::new());
            super::walk_records(&f, bytes.len() as u64, &mut |item| {
                match item {
                    Ok((k, _)) => keys.push(u64::from_be_bytes(k.try_into().unwrap())),
                    Err(e) => problems.push(format!("{e:?}")),
                }
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
            (keys, problems)
        };
        assert_eq!(walk(&clean).0, (0..300).collect::<Vec<_>>());

        // The root's second separator raised past every key: its child's records.
        let root = tree.root.unwrap();
        let second = node(root, 1);
        let first_of_child = u64::from_be_bytes(clean[second + 8..second + 16].try_into().unwrap());
        let mut bytes = clean.clone();
        bytes[second + 8..second + 16].fill(0xFF);
        let (keys, problems) = walk(&bytes);
        assert!(!keys.contains(&first_of_child), "{keys:?}");
        assert!(
            problems.iter().all(|p| p.contains("outside the range")),
            "{problems:?}"
        );
        assert_eq!(keys.len() + problems.len(), 300);

        // A leaf key made its predecessor's: neither is findable for sure.
        let leaf =
            u64::from_le_bytes(clean[node(root, 0)..][..8].try_into().unwrap()) & 0xFFFF_FFFF_FFFF;
        let (k1, k0) = (node(leaf, 1), node(leaf, 0));
        let mut bytes = clean.clone();
        bytes.copy_within(k0 + 8..k0 + 16, k1 + 8);
        let (keys, problems) = walk(&bytes);
        assert_eq!(keys.first(), Some(&2), "{keys:?}");
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    /// The walk sees what LMDB sees on an intact shard: every key in order, the same values,
    /// small records inline and large ones on overflow pages, over several leaf pages.
    #[test]
    fn walk_of_an_intact_shard_equals_lmdb() {
        let dir = three_hundred_records(|i| if i % 7 == 0 { 5000 } else { 20 });
        let ds = Dataset::open(dir.path()).unwrap();
        let r = ds.reader().unwrap();
        let f = std::fs::File::open(dir.path().join("shard-00000.lmdb")).unwrap();
        let len = f.metadata().unwrap().len();
        let mut got = Vec::new();
        super::walk_records(&f, len, &mut |item| {
            got.push(item.unwrap());
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(got.len(), 300);
        for (i, (key, value)) in got.iter().enumerate() {
            assert_eq!(key.as_slice(), (i as u64).to_be_bytes());
            let rec = r.get(i as u64).unwrap();
            assert_eq!(&value[crate::HEADER_LEN..], rec.payload, "record {i}");
        }

        // Cut before the root (the last page of the tree): the scan of the pages before it
        // finds every leaf the descent found, in the same order, with the same values.
        let tree = crate::lmdb_meta::record_tree(&f, len).unwrap();
        assert!(tree.depth > 1);
        let cut = tree.last_pg * tree.psize;
        let mut scanned = Vec::new();
        super::salvage_records(&f, cut, tree, &mut |item| {
            scanned.push(item.unwrap());
            std::ops::ControlFlow::Continue(())
        });
        assert_eq!(scanned, got);

        // A taker that wants no more (stopped, short of memory) ends the walk, and the scan:
        // the rest of the shard is not read.
        for salvage in [false, true] {
            let mut taken = 0;
            let mut take_five = |_item: super::Item| {
                taken += 1;
                if taken == 5 {
                    std::ops::ControlFlow::Break(())
                } else {
                    std::ops::ControlFlow::Continue(())
                }
            };
            if salvage {
                super::salvage_records(&f, cut, tree, &mut take_five);
            } else {
                super::walk_records(&f, len, &mut take_five).unwrap();
            }
            assert_eq!(taken, 5, "salvage: {salvage}");
        }
    }

    /// A value whose memory cannot be had is memory, unless its size is more than its
    /// overflow run holds: then it is the shard's damage (a node's size with a flipped high
    /// byte asked a process under a limit for up to the file's length, and was told as
    /// memory, clearing the dataset).
    #[test]
    fn a_value_that_cannot_be_allocated_is_memory_unless_past_its_run() {
        let refused = |_: &mut Vec<u8>| false;
        assert!(matches!(
            super::value_buffer(20_000, (9, 20_464), refused),
            Err(super::WalkError::Memory {
                page: 9,
                bytes: 20_000
            })
        ));
        match super::value_buffer(16_759_008, (9, 20_464), refused) {
            Err(super::WalkError::Damaged(why)) => {
                assert!(why.contains("runs past its overflow run"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        let v = super::value_buffer(300, (9, 20_464), |v| v.try_reserve_exact(300).is_ok());
        assert_eq!(v.unwrap(), vec![0u8; 300]);
    }
}
