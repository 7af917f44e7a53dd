//! `verify` of a shard cut short (an interrupted `cp`, a disk full while copying): it
//! counted every record of the shard lost, though the records in the pages before the cut
//! could be read. Now those are checked and counted as usual, and only the others are lost,
//! as exact ranges, for `LostCause::CutShort`.
//!
//! What is lost is computed here from the intact shard's bytes as docs/FORMAT.md lays them
//! out ("The shard file, byte by byte"): a record survives a cut at byte `c` when its leaf
//! page, and its value on an overflow run if it has one, lie before `c`.

use std::path::{Path, PathBuf};

use stoker_formats::convert::MIN_SHARD_BYTES;
use stoker_formats::{
    convert, verify, verify_dir, ConvertOptions, Dataset, LostCause, Manifest, NoProgress, Source,
    VerifyReport,
};

/// The bundled photos re-encoded to at most 56 pixels a side, in shards of 64 KiB: records
/// of 1–3 KB, so each shard has many leaf pages, some values inline and some on overflow
/// runs, and a branch page as its root.
fn small_photos(dir: &Path) -> PathBuf {
    let out = dir.join("ds");
    let mut o = ConvertOptions::new(
        Source::ImageFolder(stoker_testdata::dir().join("imagefolder")),
        &out,
    );
    o.max_side = Some(56);
    o.shard_bytes = MIN_SHARD_BYTES;
    o.jobs = Some(2);
    convert(&o, &NoProgress).unwrap();
    out
}

/// Where one record of a shard lies.
#[derive(Debug, Clone, Copy)]
struct Placed {
    key: u64,
    /// Its leaf page.
    leaf: u64,
    /// The byte after its value: the end of its leaf page for an inline value, else the end
    /// of the value on its overflow run.
    value_end: u64,
}

/// The page size, the last page of the tree, and every record of the shard `bytes`, found by
/// reading its pages in order as docs/FORMAT.md lays them out.
fn placement(bytes: &[u8]) -> (u64, u64, Vec<Placed>) {
    let u16_at = |o: usize| u64::from(u16::from_le_bytes([bytes[o], bytes[o + 1]]));
    let u32_at = |o: usize| u64::from(u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()));
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let psize = u32_at(40);
    let last_pg = u64_at(psize as usize + 136);
    let mut placed = Vec::new();
    let mut pgno = 2;
    while pgno <= last_pg {
        let at = (pgno * psize) as usize;
        assert_eq!(u64_at(at), pgno, "page {pgno}");
        match u16_at(at + 10) {
            0x02 => {
                let lower = u16_at(at + 12) as usize;
                for i in 0..(lower - 16) / 2 {
                    let node = at + u16_at(at + 16 + 2 * i) as usize;
                    let size = u16_at(node) | u16_at(node + 2) << 16;
                    let ksize = u16_at(node + 6) as usize;
                    let key = u64::from_be_bytes(bytes[node + 8..node + 16].try_into().unwrap());
                    let value_end = if u16_at(node + 4) == 0x01 {
                        u64_at(node + 8 + ksize) * psize + 16 + size
                    } else {
                        (pgno + 1) * psize
                    };
                    placed.push(Placed {
                        key,
                        leaf: pgno,
                        value_end,
                    });
                }
                pgno += 1;
            }
            0x04 => pgno += u32_at(at + 12),
            _ => pgno += 1,
        }
    }
    placed.sort_by_key(|p| p.key);
    (psize, last_pg, placed)
}

/// The records of shard `si` of `ds` a cut at byte `cut` loses, as `(first, count)` ranges
/// of dataset indices.
fn lost_by_cut(
    m: &Manifest,
    si: usize,
    placed: &[Placed],
    psize: u64,
    cut: u64,
) -> Vec<(u64, u64)> {
    let s = &m.shards[si];
    assert_eq!(placed.len() as u64, s.count);
    let mut lost: Vec<(u64, u64)> = Vec::new();
    for p in placed {
        if (p.leaf + 1) * psize <= cut && p.value_end <= cut {
            continue;
        }
        let index = s.first_index + (p.key - s.first_key());
        match lost.last_mut() {
            Some((first, count)) if *first + *count == index => *count += 1,
            _ => lost.push((index, 1)),
        }
    }
    lost
}

/// Asserts that `r`, the report on `ds` with shard `si` cut at byte `cut` (`zeros`: its
/// tail zeroed from there instead), counts every record once, the records before the cut
/// ok, and names exactly the others lost, for the cut.
fn assert_exact(r: &VerifyReport, m: &Manifest, si: usize, bytes: &[u8], cut: u64, zeros: bool) {
    let (psize, _, placed) = placement(bytes);
    let want = lost_by_cut(m, si, &placed, psize, cut);
    let s = &m.shards[si];
    let lost: u64 = want.iter().map(|(_, n)| n).sum();
    let ctx = format!("cut at {cut} of {}: {r:#?}", s.bytes);
    assert_eq!(
        r.ok_records + r.bad_records + r.lost_records,
        r.samples,
        "{ctx}"
    );
    assert_eq!(
        (r.ok_records, r.bad_records, r.lost_records),
        (m.samples - lost, 0, lost),
        "{ctx}"
    );
    let got: Vec<(u64, u64)> = r.lost.iter().map(|l| (l.first_index, l.count)).collect();
    assert_eq!(got, want, "{ctx}");
    // No record is bad, so no problem names one: the records lost were once also named
    // (`BAD shard-00001.lmdb record 41: records 41..82 are missing`) beside "0 bad".
    assert!(r.bad.iter().all(|b| b.index.is_none()), "{ctx}");
    let at = if zeros {
        format!("holds only zeros from byte {cut} of {}", s.bytes)
    } else {
        format!("cut short at byte {cut} of {}", s.bytes)
    };
    for l in &r.lost {
        assert_eq!(
            (l.shard.as_str(), l.cause),
            (s.file.as_str(), LostCause::CutShort),
            "{ctx}"
        );
        assert!(l.reason.contains(&at), "{ctx}");
    }
    // Read in part once its meta pages are whole, not "not opened" (as a cut shard was
    // counted, though every record of it was read); one whose tail is zeros opened as any
    // other.
    if zeros {
        assert_eq!((r.opened, r.read_in_part), (r.shards, 0), "{ctx}");
    } else {
        assert_eq!(r.opened, r.shards - 1, "{ctx}");
        if cut >= 2 * psize {
            assert_eq!(r.read_in_part, 1, "{ctx}");
        }
    }
    // Not OK, even when no record was lost: the shard must be restored before a loader
    // opens the dataset.
    assert!(!r.ok(), "{ctx}");
    assert!(
        r.bad
            .iter()
            .any(|b| b.index.is_none() && b.problem.contains(&at)),
        "{ctx}"
    );
}

/// Shard `si` of `ds`, cut at byte `cut` (the intact bytes are `bytes`).
fn cut_shard(ds: &Path, m: &Manifest, si: usize, bytes: &[u8], cut: u64) {
    std::fs::write(ds.join(&m.shards[si].file), &bytes[..cut as usize]).unwrap();
}

/// The first page at or after `from` whose flags are `flags`.
fn page_with_flags(bytes: &[u8], psize: u64, from: u64, flags: u16) -> u64 {
    (from..bytes.len() as u64 / psize)
        .find(|&p| {
            let at = (p * psize) as usize;
            bytes[at..at + 8] == p.to_le_bytes()
                && u16::from_le_bytes([bytes[at + 10], bytes[at + 11]]) == flags
        })
        .unwrap_or_else(|| panic!("no page with flags {flags:#x} from page {from}"))
}

#[test]
fn a_shard_cut_short_loses_only_the_records_past_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let ds = small_photos(dir.path());
    let m = Manifest::read(&ds).unwrap();
    let si = 1;
    let bytes = std::fs::read(ds.join(&m.shards[si].file)).unwrap();
    let (psize, last_pg, placed) = placement(&bytes);
    let leaves = {
        let mut l: Vec<u64> = placed.iter().map(|p| p.leaf).collect();
        l.dedup();
        l
    };
    assert!(
        leaves.len() >= 4,
        "too few leaves to cut between: {leaves:?}"
    );
    let on_runs = placed
        .iter()
        .filter(|p| p.value_end != (p.leaf + 1) * psize);
    assert!(
        on_runs.count() >= 2,
        "too few values on overflow runs: {placed:?}"
    );
    let mid_leaf = leaves[leaves.len() / 2];
    let run = page_with_flags(&bytes, psize, mid_leaf, 0x04);
    let cuts = [
        // Inside a leaf page in the middle of the shard.
        ("inside a leaf", mid_leaf * psize + psize / 2),
        // Inside the value of an overflow run (its page header is before the cut).
        ("inside an overflow run", run * psize + 100),
        // Just after the meta pages: no tree page is left.
        ("after the meta pages", 2 * psize),
        // Inside the meta pages: nothing can be read.
        ("inside the meta pages", psize + 50),
        // Just before the root, the last page of the tree: every leaf is there.
        ("before the root", last_pg * psize),
        // After the tree, in the zero pages that end the file: every record is there.
        ("after the tree", (last_pg + 2) * psize),
    ];
    for (what, cut) in cuts {
        cut_shard(&ds, &m, si, &bytes, cut);
        assert!(
            Dataset::open(&ds).is_err(),
            "{what}: the loader must refuse the shard"
        );
        let r = verify_dir(&ds, true).unwrap();
        assert_exact(&r, &m, si, &bytes, cut, false);
        let lost = r.lost_records;
        match what {
            "after the meta pages" | "inside the meta pages" => {
                assert_eq!(lost, m.shards[si].count, "{what}")
            }
            "before the root" | "after the tree" => assert_eq!(lost, 0, "{what}"),
            _ => assert!(lost > 0 && lost < m.shards[si].count, "{what}: {r:#?}"),
        }
        // The records read were decoded too, those of the other shards as before.
        assert_eq!(r.decoded, r.ok_records, "{what}");
    }
}

/// Every page boundary and the middle of every page: the counts add up and match the
/// pages before the cut, for a cut anywhere.
#[test]
fn a_cut_anywhere_counts_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let ds = small_photos(dir.path());
    let m = Manifest::read(&ds).unwrap();
    let si = 0;
    let bytes = std::fs::read(ds.join(&m.shards[si].file)).unwrap();
    let (psize, _, _) = placement(&bytes);
    let mut cuts: Vec<u64> = (0..bytes.len() as u64 / psize)
        .flat_map(|p| [p * psize, p * psize + 1, p * psize + psize / 2])
        .collect();
    cuts.push(bytes.len() as u64 - 1);
    for cut in cuts {
        cut_shard(&ds, &m, si, &bytes, cut);
        let r = verify_dir(&ds, false).unwrap();
        assert_exact(&r, &m, si, &bytes, cut, false);
    }
}

/// A copy into a file allocated ahead, or a crash before the data reached the disk, leaves
/// the shard's size and zeros in place of its tail: read like a cut where the zeros begin,
/// through both entry points (the shard passes `Dataset::open`). Zeros elsewhere, with the
/// tree's last page intact, are damage of another kind: the shard stays wholly lost.
#[test]
fn a_shard_whose_tail_is_zeros_is_read_up_to_them() {
    let dir = tempfile::tempdir().unwrap();
    let ds = small_photos(dir.path());
    let m = Manifest::read(&ds).unwrap();
    let si = 2;
    let path = ds.join(&m.shards[si].file);
    let bytes = std::fs::read(&path).unwrap();
    let (psize, last_pg, placed) = placement(&bytes);
    let leaf = placed[placed.len() / 2].leaf;
    let mut zeroed = bytes.clone();
    zeroed[(leaf * psize + psize / 2) as usize..].fill(0);
    // Where the zeros begin: a byte or so before where they were written, if those were 0.
    let from = zeroed.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    std::fs::write(&path, &zeroed).unwrap();
    let by_dir = verify_dir(&ds, false).unwrap();
    assert_exact(&by_dir, &m, si, &bytes, from, true);
    let opened = verify(&Dataset::open(&ds).unwrap(), false).unwrap();
    assert_eq!(
        (opened.ok_records, &opened.lost),
        (by_dir.ok_records, &by_dir.lost)
    );
    assert!(
        by_dir.bad.iter().any(|b| b.problem.contains("xxh3-64")),
        "{by_dir:#?}"
    );

    // The same zeros, but the tree's last page kept: not a copy cut short.
    zeroed[(last_pg * psize) as usize..((last_pg + 1) * psize) as usize]
        .copy_from_slice(&bytes[(last_pg * psize) as usize..((last_pg + 1) * psize) as usize]);
    std::fs::write(&path, &zeroed).unwrap();
    let r = verify_dir(&ds, false).unwrap();
    // Every record of the shard lost, but for those that fail their own checks (counted
    // bad, where they are named).
    assert!(!r.lost.is_empty(), "{r:#?}");
    assert!(
        r.lost
            .iter()
            .all(|l| l.cause == LostCause::Altered && l.shard == m.shards[si].file),
        "{r:#?}"
    );
    assert_eq!(r.lost_records + r.bad_records, m.shards[si].count, "{r:#?}");
}

/// Damage before the cut: an overflow run whose page count is absurd, a leaf whose node
/// count runs past the page, a page that names another. The scan of a shard cut short
/// steps over them without a loop, a panic or an allocation the size of a page count, and
/// still counts every record once.
#[test]
fn damage_before_the_cut_never_hangs_and_every_record_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let ds = small_photos(dir.path());
    let m = Manifest::read(&ds).unwrap();
    let si = 0;
    let bytes = std::fs::read(ds.join(&m.shards[si].file)).unwrap();
    let (psize, last_pg, _) = placement(&bytes);
    let cut = last_pg * psize;
    let run = page_with_flags(&bytes, psize, 2, 0x04) as usize * psize as usize;
    let leaf = page_with_flags(&bytes, psize, 4, 0x02) as usize * psize as usize;
    let damages: [(&str, usize, &[u8]); 4] = [
        ("run count u32::MAX", run + 12, &[0xff; 4]),
        ("run count 0", run + 12, &[0; 4]),
        ("leaf lower past the page", leaf + 12, &[0xff, 0xff]),
        ("leaf names page 0", leaf, &[0; 8]),
    ];
    let mut seed = 0x5eed_u64;
    for (what, at, with) in damages {
        let mut damaged = bytes.clone();
        damaged[at..at + with.len()].copy_from_slice(with);
        std::fs::write(ds.join(&m.shards[si].file), &damaged[..cut as usize]).unwrap();
        let r = verify_dir(&ds, false).unwrap();
        assert_eq!(
            r.ok_records + r.bad_records + r.lost_records,
            r.samples,
            "{what}: {r:#?}"
        );
        if what == "run count 0" {
            // Stepped over as one page; its value is read by its size, from its leaf.
            assert_eq!(r.lost_records, 0, "{what}: {r:#?}");
        } else {
            assert!(r.lost_records > 0, "{what}: {r:#?}");
        }
        // Only the records after the last one found are the cut's; a gap before it is
        // damage in the pages before the cut, not something a fresh copy of the tail mends.
        let end = m.shards[si].first_index + m.shards[si].count;
        for lost in &r.lost {
            let cut_short = matches!(lost.cause, LostCause::CutShort);
            assert_eq!(
                cut_short,
                lost.first_index + lost.count == end,
                "{what}: {lost:?}"
            );
        }
    }
    // And bytes flipped at random in the tree pages before a cut.
    for _ in 0..60 {
        let mut damaged = bytes.clone();
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let cut = 2 * psize + next() % ((last_pg - 1) * psize);
        for _ in 0..4 {
            let at = (2 * psize + next() % (cut - 2 * psize)) as usize;
            damaged[at] ^= 1 << (next() % 8);
        }
        std::fs::write(ds.join(&m.shards[si].file), &damaged[..cut as usize]).unwrap();
        let r = verify_dir(&ds, false).unwrap();
        assert_eq!(
            r.ok_records + r.bad_records + r.lost_records,
            r.samples,
            "cut {cut}: {r:#?}"
        );
        assert!(!r.ok());
    }
}
