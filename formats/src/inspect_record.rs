//! `inspect --record N`: one record, and which input it came from.

use serde::Serialize;

use crate::convert::lossless_text;
use crate::{Dataset, DatasetReader, Encoding, FormatError};

/// What [`inspect_record`] reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordReport {
    /// The record's index.
    pub index: u64,
    /// The shard file that holds it.
    pub shard: String,
    /// The input it came from, relative to the folder converted (see
    /// [`Dataset::source_of`]; bytes that are not UTF-8 written `\xNN`); `None` when the
    /// dataset has no source map, or its map could not give it (`source_problem`).
    pub source: Option<String>,
    /// Why the source map could not name the input (damaged, missing, not a file): the
    /// record is reported all the same; `None` when it could, or there is no map.
    pub source_problem: Option<String>,
    /// Its header, when the record could be read.
    pub record: Option<RecordFields>,
    /// Why the record could not be read, or its payload does not match its CRC; `None`
    /// for a sound record.
    pub problem: Option<String>,
}

/// A record's header, as [`inspect_record`] reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordFields {
    /// The label.
    pub label: u32,
    /// The label's class name; `None` for a label past the manifest's classes.
    pub class: Option<String>,
    /// The payload's encoding.
    pub encoding: Encoding,
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
    /// Channels of the decoded image.
    pub channels: u8,
    /// Payload bytes.
    pub payload_bytes: u32,
    /// The payload matches the CRC-32C in its header.
    pub crc_ok: bool,
}

/// Record `index` of `ds`: which input it came from, its label and class, size and
/// whether its payload matches its CRC. A record that cannot be read is reported, not an
/// error: its source is what one wants to know of it; and a source map that cannot name
/// it ([`RecordReport::source_problem`]) leaves the record's own report whole.
///
/// # Errors
///
/// [`FormatError::IndexOutOfRange`]; [`FormatError::ShardChanged`] and I/O errors from
/// opening a reader; an error of no file's fault ([`FormatError::outside`]) reading the
/// source map.
///
/// # Examples
///
/// ```
/// use stoker_formats::{convert, inspect_record, ConvertOptions, Dataset, NoProgress, Source};
/// let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");
/// let out = tempfile::tempdir()?;
/// let mut opts = ConvertOptions::new(Source::ImageFolder(src.into()), out.path().join("ds"));
/// opts.check_decode = false;
/// convert(&opts, &NoProgress)?;
/// let r = inspect_record(&Dataset::open(out.path().join("ds"))?, 6)?;
/// assert_eq!(r.source.as_deref(), Some("leptonica/colorseg.jpg"));
/// let fields = r.record.expect("a sound record");
/// assert_eq!((fields.label, fields.class.as_deref(), fields.crc_ok), (1, Some("leptonica"), true));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn inspect_record(ds: &Dataset, index: u64) -> Result<RecordReport, FormatError> {
    let (source, shard) = located(ds, index)?;
    Ok(read(ds, &ds.reader()?, index, source, shard))
}

/// [`inspect_record`] through `reader`, a reader of `ds` kept across calls (opening one
/// checks every shard, which a caller inspecting record after record would pay each
/// time): only the shard that holds the record is checked to be the one opened
/// ([`Dataset::check_unchanged_at`]), as Python's `Dataset[i]` checks it.
///
/// # Errors
///
/// As [`inspect_record`].
pub fn inspect_record_with(
    ds: &Dataset,
    reader: &DatasetReader,
    index: u64,
) -> Result<RecordReport, FormatError> {
    let (source, shard) = located(ds, index)?;
    ds.check_unchanged_at(index)?;
    Ok(read(ds, reader, index, source, shard))
}

/// Record `index`'s source (from the source map) or why the map could not give it, and
/// the file of the shard that holds it.
fn located(ds: &Dataset, index: u64) -> Result<(Source, String), FormatError> {
    if index >= ds.len() {
        return Err(FormatError::IndexOutOfRange {
            index,
            len: ds.len(),
        });
    }
    // A sound record of a dataset whose map was lost or damaged: its label, size and CRC
    // are still what one asked for (`inspect` and `verify` go on past the map too).
    let source = match crate::source_map::damage_as_text(ds.source_of(index))? {
        Ok(p) => (p.map(|p| lossless_text(p.as_os_str())), None),
        Err(why) => (None, Some(why)),
    };
    let shard = ds
        .shard_of(index)
        .map(|i| ds.manifest().shards[i].file.clone())
        .unwrap_or_default();
    Ok((source, shard))
}

/// A record's source, or why the source map could not give it.
type Source = (Option<String>, Option<String>);

/// The report of record `index`, read with `reader`: a record that cannot be read is
/// reported, not an error.
fn read(
    ds: &Dataset,
    reader: &DatasetReader,
    index: u64,
    (source, source_problem): Source,
    shard: String,
) -> RecordReport {
    let read = reader.get(index).and_then(|r| {
        let crc = r.check_crc();
        reader.check_read(index)?;
        let h = r.header;
        let fields = RecordFields {
            label: h.label,
            class: ds.manifest().classes.get(h.label as usize).cloned(),
            encoding: h.encoding,
            width: h.width,
            height: h.height,
            channels: h.channels,
            payload_bytes: h.payload_len,
            crc_ok: crc.is_ok(),
        };
        // What the loader refuses such a record for (a manifest whose class list was cut).
        let unlabelled = crate::label_problem(h.label, ds.manifest().classes.len());
        // And a raw record's geometry, as verify judges it: a header rewritten with its
        // CRC passed here (exit 0) as `verify` called it bad.
        let raw = match h.encoding {
            Encoding::Raw => crate::raw_problems(
                crate::RawSize::of(&h),
                h.payload_len.into(),
                ds.manifest().raw_size,
            ),
            Encoding::Jpeg => Vec::new(),
        };
        let raw = (!raw.is_empty()).then(|| raw.join("; "));
        let problem = crc.err().map(|e| e.to_string()).or(unlabelled).or(raw);
        Ok((fields, problem))
    });
    let (record, problem) = match read {
        Ok((fields, problem)) => (Some(fields), problem),
        Err(e) => (None, Some(e.to_string())),
    };
    RecordReport {
        index,
        shard,
        source,
        source_problem,
        record,
        problem,
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        Dataset, DatasetWriter, Encoding, Provenance, RecordHeader, RecordMeta, WriterOptions,
    };

    /// A raw record rewritten to another shape of its bytes, CRC and all, was reported
    /// sound (exit 0 from `inspect --record`) while `verify` called it bad.
    #[test]
    fn a_raw_record_of_another_size_than_the_manifests_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
        let pixels = [9u8; 144];
        let meta = RecordMeta {
            encoding: Encoding::Raw,
            height: 6,
            width: 8,
            channels: 3,
            label: 0,
        };
        w.push(meta, &pixels).unwrap();
        let header = RecordHeader {
            encoding: Encoding::Raw,
            height: 1,
            width: 48,
            channels: 3,
            label: 0,
            payload_len: 144,
            crc32c: crc32c::crc32c(&pixels),
        };
        w.push_header_unchecked(header, &pixels).unwrap();
        w.finish(vec!["a".into()], Provenance::stoker("t")).unwrap();
        let ds = Dataset::open(dir.path()).unwrap();
        assert_eq!(super::inspect_record(&ds, 0).unwrap().problem, None);
        let r = super::inspect_record(&ds, 1).unwrap();
        assert_eq!(
            r.problem.as_deref(),
            Some("raw size 48x1x3 differs from the dataset's 8x6x3")
        );
    }
}
