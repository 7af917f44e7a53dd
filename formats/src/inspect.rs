//! `inspect`: what a dataset holds, from the manifest and every record header.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::convert::audit::Audit;
use crate::manifest::{Provenance, RawSize, ShardEntry};
use crate::{Dataset, Encoding, FormatError};

/// Summary statistics of one quantity over all records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Distribution {
    /// Smallest value.
    pub min: u64,
    /// Median (for payload sizes from 256 bytes, rounded down by less than 1/64 of itself).
    pub p50: u64,
    /// 90th percentile (rounded as the median).
    pub p90: u64,
    /// Largest value.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

/// Counts of values in buckets, in memory that does not grow with the number of records
/// (keeping every value, as before, held 8 bytes per record per quantity: 2.3 GB for 100M
/// records). Sizes: exact below 256, then 64 buckets per power of two, so a percentile is
/// the lower bound of its bucket, within 1/64 of the exact value. Widths and heights: one
/// bucket per value (an image side has at most 65,535 values in JPEG), all exact. Min,
/// max and mean are always exact.
#[derive(Debug, Clone)]
struct Histogram {
    /// One bucket per value ([`Histogram::exact`]).
    exact: bool,
    counts: BTreeMap<u64, u64>,
    n: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            exact: false,
            counts: BTreeMap::new(),
            n: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Histogram {
    fn exact() -> Self {
        Histogram {
            exact: true,
            ..Histogram::default()
        }
    }

    /// The lower bound of `v`'s bucket.
    fn bucket(v: u64) -> u64 {
        if v < 256 {
            return v;
        }
        // Keep the top 7 bits (the leading one and 6 below it): 64 buckets per octave.
        let shift = 63 - v.leading_zeros() - 6;
        (v >> shift) << shift
    }

    fn add(&mut self, v: u64) {
        let bucket = if self.exact { v } else { Self::bucket(v) };
        *self.counts.entry(bucket).or_insert(0) += 1;
        self.n += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// The value at rank `round((n - 1) · q)` in sorted order, as its bucket's lower bound
    /// (clamped to the exact minimum and maximum).
    fn at(&self, q: f64) -> u64 {
        let rank = ((self.n - 1) as f64 * q).round() as u64;
        let mut seen = 0u64;
        for (&value, &count) in &self.counts {
            seen += count;
            if seen > rank {
                return value.clamp(self.min, self.max);
            }
        }
        self.max
    }

    fn distribution(&self) -> Distribution {
        if self.n == 0 {
            return Distribution::default();
        }
        Distribution {
            min: self.min,
            p50: self.at(0.5),
            p90: self.at(0.9),
            max: self.max,
            mean: self.sum as f64 / self.n as f64,
        }
    }
}

/// How many records have one label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassCount {
    /// The label.
    pub label: u32,
    /// The class name of the label; `None` for a label past the manifest's class list.
    pub name: Option<String>,
    /// Records with this label.
    pub count: u64,
}

/// What [`inspect`] reports.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct InspectReport {
    /// The manifest's format version (1: CRC32C shard digests; 2: xxh3-64).
    pub format_version: u32,
    /// Number of samples.
    pub samples: u64,
    /// Number of shards.
    pub shards: u64,
    /// Number of classes.
    pub classes: u64,
    /// Bytes of all shard files.
    pub bytes: u64,
    /// Bytes of all payloads.
    pub payload_bytes: u64,
    /// The dataset's encoding.
    pub encoding: Encoding,
    /// Fixed size of a raw dataset.
    pub raw_size: Option<RawSize>,
    /// Records per encoding, from the record headers.
    pub encodings: BTreeMap<String, u64>,
    /// Class names.
    pub class_names: Vec<String>,
    /// Records per label, one entry for every class of the manifest (in label order, those
    /// with no record too), then one for each label that has records but no class name.
    /// Keyed by label, not name: two classes can share a name.
    pub per_class: Vec<ClassCount>,
    /// Image widths.
    pub width: Distribution,
    /// Image heights.
    pub height: Distribution,
    /// Payload sizes in bytes.
    pub payload_size: Distribution,
    /// The shard files.
    pub shard_files: Vec<ShardEntry>,
    /// The conversion's JPEG audit, if the dataset was made by the converter.
    pub audit: Option<Audit>,
    /// How the dataset was made.
    pub provenance: Provenance,
    /// Records that could not be read (a damaged page or record header): left out of the
    /// counts and distributions above. [`crate::verify()`] names each.
    pub unreadable: u64,
    /// The first of them (`record N: why`).
    pub first_unreadable: Option<String>,
    /// The source map's file (`sources.bin`), `None` when the dataset has none (made by a
    /// stoker before source maps, or written record by record with `DatasetWriter`).
    pub source_map: Option<String>,
    /// Why the source map cannot be used (missing, not a file, a damaged header or table;
    /// [`crate::verify()`] also checks its digest); `None` when it opens.
    pub source_map_problem: Option<String>,
}

/// Summarizes `ds`, reading every record header (not the payloads). A record that cannot
/// be read is counted in [`InspectReport::unreadable`] (use [`crate::verify()`] to list
/// every problem): one damaged page need not hide what the rest of the dataset holds.
///
/// # Errors
///
/// A shard file replaced or cut since `ds` was opened ([`FormatError::ShardChanged`]);
/// an error of no file's fault ([`FormatError::outside`]) opening the source map.
///
/// # Examples
///
/// ```
/// use stoker_formats::{inspect, Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
/// let dir = tempfile::tempdir()?;
/// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
/// for label in [0, 1, 1] {
///     w.push(RecordMeta { encoding: Encoding::Raw, height: 2, width: 2, channels: 1, label }, &[0; 4])?;
/// }
/// w.finish(vec!["cat".into(), "dog".into(), "cow".into()], Provenance::stoker("doc"))?;
/// let r = inspect(&Dataset::open(dir.path())?)?;
/// assert_eq!((r.samples, r.classes), (3, 3));
/// assert_eq!((r.per_class[1].name.as_deref(), r.per_class[1].count), (Some("dog"), 2));
/// assert_eq!(r.per_class[2].count, 0); // a class with no record is listed too
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn inspect(ds: &Dataset) -> Result<InspectReport, FormatError> {
    let m = ds.manifest();
    let reader = ds.reader()?;
    let (mut w, mut h, mut sizes) = (Histogram::exact(), Histogram::exact(), Histogram::default());
    let mut encodings = BTreeMap::new();
    let mut per_label: BTreeMap<u32, u64> = BTreeMap::new();
    let (mut unreadable, mut first_unreadable) = (0, None);
    for i in 0..m.samples {
        let r = match reader.get(i) {
            Ok(r) => r,
            Err(e @ FormatError::ShardChanged { .. }) => return Err(e),
            Err(e) => {
                unreadable += 1;
                first_unreadable.get_or_insert_with(|| format!("record {i}: {e}"));
                continue;
            }
        };
        w.add(u64::from(r.header.width));
        h.add(u64::from(r.header.height));
        sizes.add(u64::from(r.header.payload_len));
        *encodings.entry(r.header.encoding.to_string()).or_insert(0) += 1;
        *per_label.entry(r.header.label).or_insert(0) += 1;
    }
    let per_class = per_class(&m.classes, per_label);
    let source_map_problem = crate::source_map::damage_as_text(ds.source_map())?.err();
    Ok(InspectReport {
        format_version: m.format_version,
        samples: m.samples,
        shards: m.shards.len() as u64,
        classes: m.classes.len() as u64,
        bytes: m.bytes,
        payload_bytes: m.payload_bytes,
        encoding: m.encoding,
        raw_size: m.raw_size,
        encodings,
        class_names: m.classes.clone(),
        per_class,
        width: w.distribution(),
        height: h.distribution(),
        payload_size: sizes.distribution(),
        shard_files: m.shards.clone(),
        audit: m.audit.clone(),
        provenance: m.provenance.clone(),
        unreadable,
        first_unreadable,
        source_map: m.sources.as_ref().map(|s| s.file.clone()),
        source_map_problem,
    })
}

/// Every class's count in label order (zero for a class without records), then the labels
/// with records past the class list.
fn per_class(classes: &[String], mut per_label: BTreeMap<u32, u64>) -> Vec<ClassCount> {
    let mut out: Vec<ClassCount> = (0u32..)
        .zip(classes)
        .map(|(label, name)| ClassCount {
            label,
            name: Some(name.clone()),
            count: per_label.remove(&label).unwrap_or(0),
        })
        .collect();
    out.extend(per_label.into_iter().map(|(label, count)| ClassCount {
        label,
        name: None,
        count,
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sorted-vector percentiles inspect gave before, for comparison.
    fn exact(mut v: Vec<u64>, q: f64) -> u64 {
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q).round() as usize]
    }

    #[test]
    fn histogram_percentiles_are_within_a_64th_below_the_exact_ones() {
        let mut rng = crate::seeded::Rng::new(&[5]);
        for spread in [200u64, 4_000, 3_000_000, u64::from(u32::MAX)] {
            let v: Vec<u64> = (0..20_001).map(|_| rng.below(spread) + 1).collect();
            let mut h = Histogram::default();
            v.iter().for_each(|&x| h.add(x));
            let d = h.distribution();
            assert_eq!(
                (d.min, d.max),
                (*v.iter().min().unwrap(), *v.iter().max().unwrap())
            );
            let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
            assert!((d.mean - mean).abs() < 1e-6 * mean);
            for (got, q) in [(d.p50, 0.5), (d.p90, 0.9)] {
                let want = exact(v.clone(), q);
                assert!(
                    got <= want && want - got <= want / 64,
                    "{spread}: {got} vs {want}"
                );
                if want < 256 {
                    assert_eq!(got, want);
                }
            }
        }
        // Widths and heights: exact.
        let sides: Vec<u64> = (0..5001).map(|_| rng.below(4000) + 1).collect();
        let mut h = Histogram::exact();
        sides.iter().for_each(|&x| h.add(x));
        let d = h.distribution();
        assert_eq!(
            (d.p50, d.p90),
            (exact(sides.clone(), 0.5), exact(sides, 0.9))
        );
        assert_eq!(Histogram::default().distribution(), Distribution::default());
    }

    #[test]
    fn classes_with_one_name_are_counted_apart_and_empty_ones_listed() {
        // Two folders whose names once read the same (`caf\u{fffd}`), an empty class, and
        // a label past the class list.
        let classes = [
            "caf\u{fffd}".to_string(),
            "caf\u{fffd}".into(),
            "empty".into(),
        ];
        let got = per_class(&classes, BTreeMap::from([(0, 2), (1, 3), (7, 1)]));
        let want = [
            (0, Some("caf\u{fffd}"), 2),
            (1, Some("caf\u{fffd}"), 3),
            (2, Some("empty"), 0),
            (7, None, 1),
        ];
        let got: Vec<_> = got
            .iter()
            .map(|c| (c.label, c.name.as_deref(), c.count))
            .collect();
        assert_eq!(got, want);
    }
}
