//! Read-ahead for records about to be read: the pages of their values, asked of the kernel
//! (`madvise(MADV_WILLNEED)`) before anyone touches them.
//!
//! A record read cold through a shard's map is read one page fault at a time: the reader
//! stops at each fault until the storage delivers, and the kernel's own read-ahead of a
//! map follows faults, not a sampler's order. Asked ahead for the records of the next
//! batches, the kernel has their reads in flight together, and the reader then finds them
//! in the page cache (docs/BENCHMARKS.md, "Cold reads with read-ahead").
//!
//! Only a hint: a record whose way cannot be found (a damaged page, an index out of
//! range) is skipped here and fails where it is read, and a refused `madvise` changes
//! nothing but the pace, so it is logged once and otherwise ignored.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::dataset::DatasetReader;
use crate::shard;

/// Spans of one shard nearer than this are advised as one: for records stored in order
/// (a sequential epoch) the leaf pages between their values are read with them, in one
/// call instead of one per record. 64 KiB: the few pages between neighbours; when two
/// records of a shuffled order happen to lie that close, at most that much is read that
/// nobody asked for.
const JOIN_GAP: usize = 64 << 10;

/// Page-aligned byte ranges of shard maps to advise, in the order they were asked for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Spans {
    /// `(shard, bytes)`: a range of shard `shard`'s map, aligned to its pages and inside it.
    spans: Vec<(usize, Range<usize>)>,
}

impl Spans {
    /// Adds the pages of shard `shard` (pages of `psize` bytes, a map of `map_len` bytes)
    /// that hold the bytes `value`: from the page holding its first byte to the end of the
    /// page holding its last, cut at the map's end. Joined to the span before when that is
    /// of the same shard and ends at most [`JOIN_GAP`] before this one starts, or overlaps it.
    pub(crate) fn push(&mut self, shard: usize, value: Range<usize>, psize: usize, map_len: usize) {
        if value.start >= value.end || value.start >= map_len {
            return;
        }
        let psize = psize.max(1);
        let start = value.start / psize * psize;
        let end = value.end.div_ceil(psize).saturating_mul(psize).min(map_len);
        if start >= end {
            return;
        }
        if let Some((last_shard, last)) = self.spans.last_mut() {
            if *last_shard == shard && start >= last.start && start <= last.end + JOIN_GAP {
                last.end = last.end.max(end);
                return;
            }
        }
        self.spans.push((shard, start..end));
    }

    /// The spans, as `(shard, bytes)`.
    pub(crate) fn as_slice(&self) -> &[(usize, Range<usize>)] {
        &self.spans
    }
}

impl DatasetReader {
    /// Asks the kernel to start reading the records `indices` into the page cache, without
    /// waiting for them: `madvise(MADV_WILLNEED)` on the pages of each record's value in
    /// its shard's map (neighbouring records in one call). For a reader of records in a
    /// known order (a loader's next batches), so that many reads are in flight at once
    /// instead of one page fault at a time. Returns the bytes advised.
    ///
    /// Finding a record reads the pages on its way (its shard's branch and leaf pages), not
    /// its value. Never fails: a record that cannot be found is skipped (reading it gives
    /// the error), and a refused advice is logged once.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
    /// let dir = tempfile::tempdir()?;
    /// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
    /// for i in 0..4u8 {
    ///     w.push(RecordMeta { encoding: Encoding::Raw, height: 64, width: 64, channels: 3, label: 0 }, &[i; 64 * 64 * 3])?;
    /// }
    /// w.finish(vec!["only".into()], Provenance::stoker("doc example"))?;
    /// let reader = Dataset::open(dir.path())?.reader()?;
    /// assert!(reader.will_need(&[3, 1, 99]) >= 2 * 64 * 64 * 3);
    /// assert_eq!(reader.get(3)?.payload[0], 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn will_need(&self, indices: &[u64]) -> u64 {
        let dataset = self.dataset();
        let mut spans = Spans::default();
        for &index in indices {
            let Some(si) = dataset.shard_of(index) else {
                continue;
            };
            let shard = dataset.open_shard(si);
            let key = dataset.manifest().shards[si].key_of(index);
            let map = shard.mapped();
            if let Ok(Some(value)) = crate::lmdb_lookup::span(map, &shard.tree, &shard::key(key)) {
                spans.push(si, value, shard.tree.psize as usize, map.len());
            }
        }
        let mut advised = 0;
        for (si, bytes) in spans.as_slice() {
            match dataset.open_shard(*si).will_need(bytes.clone()) {
                Ok(()) => advised += bytes.len() as u64,
                Err(e) => refused(&e),
            }
        }
        advised
    }
}

/// Logs a refused advice, the first time only: the reads it was for still work.
fn refused(e: &std::io::Error) {
    static LOGGED: AtomicBool = AtomicBool::new(false);
    if !LOGGED.swap(true, Ordering::Relaxed) {
        tracing::warn!(error = %e, "madvise(MADV_WILLNEED) on a shard map was refused; records are read without read-ahead (not logged again)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};

    #[test]
    fn a_records_span_is_where_its_value_lies_in_the_map() {
        // Values in the leaf page (3 bytes), and in overflow pages (20 kB).
        for len in [3usize, 20_000] {
            let dir = tempfile::tempdir().unwrap();
            let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
            for i in 0..5u8 {
                let meta = RecordMeta {
                    encoding: Encoding::Raw,
                    height: 1,
                    width: len as u32,
                    channels: 1,
                    label: 0,
                };
                w.push(meta, &vec![i; len]).unwrap();
            }
            w.finish(vec!["only".into()], Provenance::stoker("test"))
                .unwrap();
            let ds = Dataset::open(dir.path()).unwrap();
            let reader = ds.reader().unwrap();
            let shard = ds.open_shard(0);
            let map = shard.mapped();
            for index in 0..5 {
                let key = ds.manifest().shards[0].key_of(index);
                let span = crate::lmdb_lookup::span(map, &shard.tree, &shard::key(key))
                    .unwrap()
                    .unwrap();
                let payload = reader.get(index).unwrap().payload.as_ptr_range();
                let base = map.as_ptr() as usize;
                // The value is the record's header and then its payload.
                assert_eq!(span.end, payload.end as usize - base, "record {index}");
                assert_eq!(
                    span.start + crate::HEADER_LEN,
                    payload.start as usize - base,
                    "record {index}"
                );
            }
            assert_eq!(
                crate::lmdb_lookup::span(map, &shard.tree, &shard::key(99)).unwrap(),
                None
            );
            // Every record's pages advised; an index past the end skipped.
            let advised = reader.will_need(&[4, 1, 2, 99]);
            assert!(advised >= 3 * len as u64, "{advised}");
        }
    }

    #[test]
    fn a_shard_cut_short_under_read_ahead_fails_its_reads_and_not_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
        for i in 0..1024u32 {
            let meta = RecordMeta {
                encoding: Encoding::Raw,
                height: 8,
                width: 8,
                channels: 3,
                label: 0,
            };
            w.push(meta, &[i as u8; 8 * 8 * 3]).unwrap();
        }
        w.finish(vec!["only".into()], Provenance::stoker("test"))
            .unwrap();
        let ds = Dataset::open(dir.path()).unwrap();
        let reader = ds.reader().unwrap();
        let shard = dir.path().join("shard-00000.lmdb");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&shard)
            .unwrap()
            .set_len(8192)
            .unwrap();
        // The lookups fault on the pages cut away (SIGBUS): the guard's zeros, no value found.
        let all: Vec<u64> = (0..1024).collect();
        assert_eq!(reader.will_need(&all), 0);
        // The fault was the read-ahead's (nothing else has read since the cut), and marked
        // the map for the readers that come after it.
        assert!(matches!(
            reader.check_read(0),
            Err(crate::FormatError::ShardUnreadable { .. })
        ));
    }

    fn spans(pushes: &[(usize, Range<usize>)], map_len: usize) -> Vec<(usize, Range<usize>)> {
        let mut s = Spans::default();
        for (shard, value) in pushes {
            s.push(*shard, value.clone(), 4096, map_len);
        }
        s.spans
    }

    #[test]
    fn a_value_is_advised_as_the_whole_pages_that_hold_it() {
        // An overflow value starts 16 bytes into its first page (the page header).
        assert_eq!(
            spans(&[(0, 40_976..140_000)], 1 << 20),
            [(0, 40_960..143_360)]
        );
        // Exactly page-aligned: no page more.
        assert_eq!(spans(&[(0, 8192..12_288)], 1 << 20), [(0, 8192..12_288)]);
    }

    #[test]
    fn spans_stop_at_the_maps_end_and_nothing_past_it_is_advised() {
        // A value whose last page is cut short by the map's end (a damaged record's
        // length): advised up to the end only.
        assert_eq!(
            spans(&[(0, 90_000..200_000)], 100_000),
            [(0, 86_016..100_000)]
        );
        // Starting at or past the end: nothing.
        assert_eq!(
            spans(
                &[(0, 100_000..100_100), (0, 1 << 30..(1 << 30) + 5)],
                100_000
            ),
            []
        );
        assert_eq!(spans(&[(0, 10..10)], 100_000), []);
    }

    #[test]
    fn neighbours_in_a_shard_join_and_others_stay_apart() {
        let got = spans(
            &[
                (0, 4112..100_000),
                // One leaf page further on: joined.
                (0, 106_512..200_000),
                // Far on: its own span.
                (0, 600_016..700_000),
                // Another shard, same offsets: its own span.
                (1, 600_016..700_000),
                // Behind the last span (a shuffled order going back): its own span.
                (1, 4112..5000),
            ],
            1 << 20,
        );
        assert_eq!(
            got,
            [
                (0, 4096..200_704),
                (0, 598_016..700_416),
                (1, 598_016..700_416),
                (1, 4096..8192)
            ]
        );
    }
}
