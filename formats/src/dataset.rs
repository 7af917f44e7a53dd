//! Reading a converted dataset: [`Dataset`] (shared, cheap to clone) and [`DatasetReader`]
//! (one per thread, hands out records borrowed from the memory map).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::convert::walk::path_id;
use crate::manifest::{Manifest, MANIFEST_FILE};
use crate::record::{Record, RecordHeader};
use crate::shard::{self, OpenShard};
use crate::text::Lossless;
use crate::FormatError;

/// A converted dataset: its manifest and its open shards.
///
/// Cloning is cheap (an `Arc`); clones share the memory maps.
///
/// # Examples
///
/// ```
/// use stoker_formats::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
/// let dir = tempfile::tempdir()?;
/// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
/// w.push(RecordMeta { encoding: Encoding::Raw, height: 1, width: 2, channels: 1, label: 0 }, &[7, 9])?;
/// w.finish(vec!["only".into()], Provenance::stoker("doc example"))?;
///
/// let ds = Dataset::open(dir.path())?;
/// let reader = ds.reader()?;
/// let rec = reader.get(0)?;
/// assert_eq!(rec.payload, &[7, 9]);
/// rec.check_crc()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Dataset {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    /// The root directory's identity when the dataset was opened (see [`Dataset::moved`]).
    root_id: Option<(u64, u64)>,
    manifest: Manifest,
    /// `shards[i]` holds the records of `manifest.shards[i]`.
    shards: Vec<Arc<OpenShard>>,
}

impl Dataset {
    /// Opens the dataset whose root directory (holding `manifest.json`) is `path`.
    ///
    /// Every shard is opened read-only without a lock file, so datasets on read-only or shared
    /// filesystems work. Before a shard is mapped, its size is compared with the manifest and
    /// its two LMDB meta pages are checked (page size, last page, tree roots and flags,
    /// record count), a few hundred bytes per shard; records are then found by stoker's own
    /// bounds-checked lookup, never through LMDB;
    /// [`crate::verify()`] checks every byte against the manifest's digest.
    ///
    /// It installs stoker's SIGBUS handler for the process, in front of any other
    /// (the crate's docs, "The process's SIGBUS handler", say why and what it passes on).
    ///
    /// # Errors
    ///
    /// Missing or invalid manifest, [`FormatError::MissingShard`], [`FormatError::ShardSizeMismatch`],
    /// [`FormatError::DamagedShard`], [`FormatError::UnfinishedConversion`] (or
    /// [`FormatError::ConversionInProgress`] while the conversion still runs), or an I/O
    /// error.
    pub fn open(path: impl AsRef<Path>) -> Result<Dataset, FormatError> {
        // Also when the shards' maps are shared with an earlier open: a handler installed
        // since (a DataLoader worker's, faulthandler's) must not take over their faults.
        crate::map_guard::install();
        let root = path.as_ref().to_path_buf();
        if root.as_os_str().is_empty() {
            // Read as the current directory by nothing: the error named no path at all.
            return Err(FormatError::InvalidOptions(
                "the dataset path is empty: give the dataset's directory (`.` for the current \
                 one)"
                    .into(),
            ));
        }
        // Before the manifest: a dataset swapped in meanwhile is then read whole from the
        // new directory, and taken as moved (so not checked by path) from then on.
        let root_id = path_id(&root);
        let manifest = read_manifest(&root)?;
        let shards = (0..manifest.shards.len())
            .map(|i| open_shard_of(&root, &manifest, i).map_err(|e| refused(e, &root)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Dataset {
            inner: Arc::new(Inner {
                root,
                root_id,
                manifest,
                shards,
            }),
        })
    }

    /// Number of samples (indices are `0..len()`).
    pub fn len(&self) -> u64 {
        self.inner.manifest.samples
    }

    /// True when the dataset holds no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parsed `manifest.json`.
    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// The dataset root directory as given to [`Dataset::open`].
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The dataset's source map, which input each record came from, opened now (one file
    /// descriptor, held by the map); `None` when the dataset has none: made before stoker
    /// wrote source maps (a [`crate::SampleWriter`] writes one, naming each record by the
    /// name given with its sample, or `sample N`), written by hand (a [`crate::DatasetWriter`] given none),
    /// or the merge of parts one of which has none.
    ///
    /// # Errors
    ///
    /// [`FormatError::DamagedSourceMap`] when the manifest names a map that is missing, of
    /// another size, or whose header or offsets do not fit it; I/O errors. The dataset's
    /// records read all the same.
    ///
    /// # Examples
    ///
    /// See [`crate::SourceMap`].
    pub fn source_map(&self) -> Result<Option<crate::SourceMap>, FormatError> {
        let Some(entry) = &self.inner.manifest.sources else {
            return Ok(None);
        };
        crate::SourceMap::open(&self.inner.root, entry, self.len()).map(Some)
    }

    /// Which input record `index` came from: its path relative to the folder converted
    /// (`class/file.jpg`, a list's row, `SHARD.tar:MEMBER`), exactly; `None` when the
    /// dataset has no source map (see [`Dataset::source_map`]). Opens the map for this one
    /// lookup; for many, keep a [`crate::SourceMap`].
    ///
    /// # Errors
    ///
    /// [`FormatError::IndexOutOfRange`], whether or not there is a map;
    /// [`FormatError::DamagedSourceMap`]; I/O errors.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::{convert, ConvertOptions, Dataset, NoProgress, Source};
    /// let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");
    /// let out = tempfile::tempdir()?;
    /// let mut opts = ConvertOptions::new(Source::ImageFolder(src.into()), out.path().join("ds"));
    /// opts.check_decode = false;
    /// convert(&opts, &NoProgress)?;
    /// let ds = Dataset::open(out.path().join("ds"))?;
    /// let source = ds.source_of(0)?.expect("convert writes a source map");
    /// let original = std::path::Path::new(src).join(&source);
    /// // JPEGs are stored as they are: record 0 is its source's bytes.
    /// assert_eq!(ds.reader()?.get(0)?.payload, std::fs::read(original)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn source_of(&self, index: u64) -> Result<Option<PathBuf>, FormatError> {
        if index >= self.len() {
            return Err(FormatError::IndexOutOfRange {
                index,
                len: self.len(),
            });
        }
        self.source_map()?.map(|m| m.get(index)).transpose()
    }

    /// Checks that every shard file is still the one [`Dataset::open`] mapped: same device,
    /// inode and size (one `stat` per shard), and that no read of its map has failed (see
    /// [`DatasetReader::check_read`]). A loader calls this before each epoch, so that a
    /// change made between epochs is an error for the whole epoch. When the whole dataset
    /// was moved or replaced (its root path names another directory now, as after
    /// `mv new live`), only the reads are checked: the files it mapped are its own, and it
    /// goes on reading them.
    ///
    /// # Errors
    ///
    /// [`FormatError::ShardChanged`], or an I/O error when a shard file is gone.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
    /// let dir = tempfile::tempdir()?;
    /// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
    /// w.push(RecordMeta { encoding: Encoding::Raw, height: 1, width: 1, channels: 1, label: 0 }, &[7])?;
    /// w.finish(vec!["only".into()], Provenance::stoker("doc example"))?;
    /// let ds = Dataset::open(dir.path())?;
    /// ds.check_unchanged()?;
    /// std::fs::OpenOptions::new().write(true).open(dir.path().join("shard-00000.lmdb"))?.set_len(4096)?;
    /// assert!(ds.check_unchanged().is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_unchanged(&self) -> Result<(), FormatError> {
        let mut moved = None;
        (self.inner.shards.iter()).try_for_each(|s| self.check_shard(s, &mut moved))
    }

    /// [`Dataset::check_unchanged`] for the one shard that holds record `index`: what a
    /// reader of single records checks before each (Python's `Dataset[i]`), one `stat`
    /// rather than one per shard.
    ///
    /// # Errors
    ///
    /// As [`Dataset::check_unchanged`], or [`FormatError::IndexOutOfRange`].
    pub fn check_unchanged_at(&self, index: u64) -> Result<(), FormatError> {
        self.check_shard(self.shard_holding(index)?.1, &mut None)
    }

    /// Checks `shard` by its path; when that fails, and the dataset `moved` (asked once,
    /// then kept there), only that its map read well: the files mapped are the dataset's
    /// own then. The root is looked at only on a failure, so that a check of an unchanged
    /// shard (Python's `Dataset[i]`, each item) stays one `stat`.
    fn check_shard(&self, shard: &OpenShard, moved: &mut Option<bool>) -> Result<(), FormatError> {
        let by_path = shard.check_unchanged();
        if by_path.is_err() && *moved.get_or_insert_with(|| self.moved()) {
            return shard.check_readable();
        }
        by_path
    }

    /// Whether the root path no longer names the directory this dataset was opened from:
    /// the whole dataset was moved away or replaced, so the shards it mapped are all of
    /// one dataset, whatever files the path leads to now.
    fn moved(&self) -> bool {
        self.inner.root_id.is_some() && path_id(&self.inner.root) != self.inner.root_id
    }

    /// Opens a reader. Make one per thread.
    ///
    /// Each shard file is first checked to be the one opened (same inode and size): a shard
    /// replaced or truncated since [`Dataset::open`] is an error here. One cut short while a
    /// reader reads is found by [`DatasetReader::check_read`]; see docs/FORMAT.md. When the
    /// whole dataset was moved or replaced (its root path names another directory now, as
    /// after `mv new live`), its shards are not checked by path: this dataset goes on
    /// reading the files it mapped, which are its own, and opening the path again opens
    /// the new one.
    ///
    /// # Errors
    ///
    /// [`FormatError::ShardChanged`], or an I/O error when a shard file is gone.
    pub fn reader(&self) -> Result<DatasetReader, FormatError> {
        crate::map_guard::install();
        self.check_unchanged()?;
        Ok(DatasetReader {
            dataset: self.clone(),
        })
    }

    /// The bytes of shard `shard` (a position in `manifest().shards`) as they are
    /// memory-mapped: every record payload a [`DatasetReader`] of this dataset hands
    /// out is a slice of one of these, valid as long as the dataset (any clone) lives.
    /// For callers that hand the mapping itself to a device, e.g. to page-lock it for
    /// DMA; `None` past the last shard.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
    /// let dir = tempfile::tempdir()?;
    /// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
    /// w.push(RecordMeta { encoding: Encoding::Raw, height: 1, width: 2, channels: 1, label: 0 }, &[7, 9])?;
    /// w.finish(vec!["only".into()], Provenance::stoker("doc example"))?;
    ///
    /// let ds = Dataset::open(dir.path())?;
    /// let map = ds.shard_bytes(0).unwrap();
    /// let reader = ds.reader()?;
    /// let payload = reader.get(0)?.payload.as_ptr_range();
    /// assert!(map.as_ptr_range().start <= payload.start && payload.end <= map.as_ptr_range().end);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shard_bytes(&self, shard: usize) -> Option<&[u8]> {
        self.inner.shards.get(shard).map(|s| s.mapped())
    }

    /// Open shard `i` (a position in `manifest().shards`).
    pub(crate) fn open_shard(&self, i: usize) -> &Arc<OpenShard> {
        &self.inner.shards[i]
    }

    /// The shard holding `index` (its position in `manifest().shards`, and the open shard).
    fn shard_holding(&self, index: u64) -> Result<(usize, &OpenShard), FormatError> {
        let si = self.shard_of(index).ok_or(FormatError::IndexOutOfRange {
            index,
            len: self.len(),
        })?;
        Ok((si, &self.inner.shards[si]))
    }

    /// Which shard holds `index`, as a position in `manifest().shards`.
    pub fn shard_of(&self, index: u64) -> Option<usize> {
        let shards = &self.inner.manifest.shards;
        let pos = shards.partition_point(|s| s.first_index <= index);
        if pos == 0 {
            return None;
        }
        let s = &shards[pos - 1];
        (index < s.first_index + s.count).then_some(pos - 1)
    }
}

/// Reads records of a [`Dataset`]; payloads are borrowed from the memory map (no copy).
///
/// Records are found by stoker's own checked lookup in the shards' maps, not through LMDB
/// transactions; create one reader per thread.
pub struct DatasetReader {
    dataset: Dataset,
}

impl std::fmt::Debug for DatasetReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatasetReader")
            .field("root", &self.dataset.root())
            .field("shards", &self.dataset.inner.shards.len())
            .finish()
    }
}

impl DatasetReader {
    /// The dataset this reader reads.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// Returns record `index`: header checked (magic, version, header CRC, length); the
    /// payload CRC is checked only by [`Record::check_crc`].
    ///
    /// # Errors
    ///
    /// [`FormatError::IndexOutOfRange`], [`FormatError::MissingRecord`],
    /// [`FormatError::BadHeader`], [`FormatError::TruncatedRecord`], or
    /// [`FormatError::DamagedShard`] when a page on the way to the record is damaged,
    /// [`FormatError::ShardUnreadable`] when a page of its shard could not be read.
    ///
    /// # Examples
    ///
    /// See [`Dataset`].
    pub fn get(&self, index: u64) -> Result<Record<'_>, FormatError> {
        let (si, shard) = self.dataset.shard_holding(index)?;
        shard.check_readable()?;
        let key = self.dataset.inner.manifest.shards[si].key_of(index);
        let found = crate::lmdb_lookup::get(shard.mapped(), &shard.tree, &shard::key(key));
        // A page of the way down that could not be read was zeros: that, not the damage
        // the lookup may report for it, is the error.
        shard.check_readable()?;
        let value = found
            .map_err(|reason| FormatError::DamagedShard {
                shard: shard.path.clone(),
                reason,
            })?
            .ok_or_else(|| FormatError::MissingRecord {
                shard: shard.path.clone(),
                index,
            })?;
        RecordHeader::parse_value(value, &shard.path, index)
    }

    /// Fails when the bytes of record `index` read so far may not be the file's: a page of
    /// its shard's map could not be read since the dataset was opened (the file was cut
    /// short or rewritten in place while in use, or the storage returned an I/O error).
    /// Such pages read as zeros instead of ending the process with SIGBUS; call this after
    /// using a record's payload (its CRC, a decode, a copy), as the loader does.
    ///
    /// # Errors
    ///
    /// [`FormatError::ShardUnreadable`], or [`FormatError::IndexOutOfRange`].
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::{Dataset, DatasetWriter, Encoding, FormatError, Provenance, RecordMeta, WriterOptions};
    /// let dir = tempfile::tempdir()?;
    /// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
    /// for i in 0..64u8 {
    ///     w.push(RecordMeta { encoding: Encoding::Raw, height: 64, width: 64, channels: 3, label: 0 }, &[i; 64 * 64 * 3])?;
    /// }
    /// w.finish(vec!["only".into()], Provenance::stoker("doc example"))?;
    /// let ds = Dataset::open(dir.path())?;
    /// let reader = ds.reader()?;
    /// // The shard is cut short while it is read (`cp` over a dataset in use).
    /// std::fs::OpenOptions::new().write(true).open(dir.path().join("shard-00000.lmdb"))?.set_len(8192)?;
    /// let outcome = reader.get(63).and_then(|r| r.check_crc().and_then(|()| reader.check_read(63)));
    /// assert!(matches!(outcome, Err(FormatError::ShardUnreadable { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_read(&self, index: u64) -> Result<(), FormatError> {
        self.dataset.shard_holding(index)?.1.check_readable()
    }
}

/// The manifest of the dataset at `root`, as [`Dataset::open`] reads it (a missing one beside
/// a conversion journal is [`FormatError::UnfinishedConversion`]). With [`open_shard_of`],
/// what `verify` uses to open what can be opened of a damaged dataset.
pub(crate) fn read_manifest(root: &Path) -> Result<Manifest, FormatError> {
    Manifest::read(root).map_err(|e| unfinished(root, e))
}

/// Opens shard `i` of `manifest` (read from `root`) with every check [`Dataset::open`]
/// makes: a regular file of the manifest's size whose LMDB meta pages are sound and count
/// the manifest's records.
pub(crate) fn open_shard_of(
    root: &Path,
    manifest: &Manifest,
    i: usize,
) -> Result<Arc<OpenShard>, FormatError> {
    let entry = &manifest.shards[i];
    shard::open_shard(&manifest.shard_path(root, i), entry.count, entry.bytes)
}

/// `e`, a shard's refusal by [`Dataset::open`], saying so and where to learn what the
/// dataset lost: one damaged shard keeps the whole dataset from opening, and the loader
/// from starting.
fn refused(e: FormatError, root: &Path) -> FormatError {
    match e {
        FormatError::DamagedShard { shard, reason } => FormatError::DamagedShard {
            shard,
            reason: format!(
                "{reason}; not opened, as LMDB would trust these bytes (`stoker verify {}`, \
                 Python `stoker.verify`, names the records of every damaged shard)",
                root.lossless()
            ),
        },
        FormatError::Io { path, source } if source.kind() == std::io::ErrorKind::NotFound => {
            FormatError::MissingShard {
                shard: path,
                dataset: root.to_path_buf(),
            }
        }
        e => e,
    }
}

/// `e` as [`FormatError::UnfinishedConversion`] when it says `root`'s manifest is missing
/// and the conversion journal is there: "manifest.json: No such file or directory" left
/// the user to guess that the conversion had stopped and how to finish it.
fn unfinished(root: &Path, e: FormatError) -> FormatError {
    // The journal of this release, or of one before the append-only journal.
    let journal = [
        crate::convert::JOURNAL_FILE,
        crate::convert::LEGACY_JOURNAL_FILE,
    ]
    .map(|name| root.join(name))
    .into_iter()
    .find(|j| j.exists());
    match (&e, journal) {
        // The converter holds its lock until the manifest is written: while it is held the
        // conversion is running, and `--resume` would be refused.
        (FormatError::Io { source, .. }, Some(journal))
            if source.kind() == std::io::ErrorKind::NotFound
                && crate::convert::lock::is_held(root) =>
        {
            FormatError::ConversionInProgress {
                dir: root.to_path_buf(),
                journal,
            }
        }
        (FormatError::Io { source, .. }, Some(journal))
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            FormatError::UnfinishedConversion {
                dir: root.to_path_buf(),
                journal,
            }
        }
        (FormatError::Io { source, .. }, None)
            if source.kind() == std::io::ErrorKind::NotFound && root.is_dir() =>
        {
            FormatError::NotADataset {
                dir: root.to_path_buf(),
                hint: not_a_dataset_hint(root),
            }
        }
        // "ds/manifest.json: No such file or directory" said that a manifest was missing
        // from a directory that is not there at all.
        (FormatError::Io { source, .. }, None)
            if source.kind() == std::io::ErrorKind::NotFound
                && std::fs::symlink_metadata(root).is_err() =>
        {
            FormatError::io(root, std::io::Error::from_raw_os_error(libc::ENOENT))
        }
        // "photo.jpg/manifest.json: Not a directory".
        (FormatError::Io { source, .. }, None)
            if source.raw_os_error() == Some(libc::ENOTDIR) && !root.is_dir() =>
        {
            FormatError::NotADataset {
                dir: root.to_path_buf(),
                hint: not_a_directory_hint(root),
            }
        }
        _ => e,
    }
}

/// What to do with `root`, a file given as a dataset: a dataset's own manifest names its
/// directory.
fn not_a_directory_hint(root: &Path) -> String {
    // `manifest.json` given from inside its dataset has the parent "": it is ".".
    let parent = root.parent().map(|p| match p.as_os_str().is_empty() {
        true => Path::new("."),
        false => p,
    });
    match parent {
        Some(dir) if root.file_name() == Some(MANIFEST_FILE.as_ref()) && dir.is_dir() => {
            let dir = match dir == Path::new(".") {
                true => "the current directory (.)".to_string(),
                false => dir.lossless().to_string(),
            };
            format!("it is the manifest file itself: give the dataset's directory, {dir}")
        }
        _ => "it is a file, not a directory: a dataset is the directory that holds \
              manifest.json and the shards (`stoker decode FILE` looks at one image)"
            .into(),
    }
}

/// What to do with a directory that has no manifest, from a look at its first entries:
/// part directories want a merge, anything else a conversion.
fn not_a_dataset_hint(root: &Path) -> String {
    let parts = crate::out_dir::entries_named(root, |name| name.starts_with(b"part-"));
    let shards = crate::out_dir::unfinished_shards(root);
    // The lock first, then the manifest: a writer or merge writes its manifest before it
    // lets the lock go, so one that finished meanwhile is seen by one or the other, and
    // no advice to delete is given for a finished dataset.
    let held = crate::convert::lock::is_held(root);
    if root.join(MANIFEST_FILE).exists() {
        return "it had no manifest.json a moment ago and has one now (a writer, conversion or \
                merge has just finished): open it again"
            .to_string();
    }
    if shards > 0 && held {
        format!(
            "it has no manifest.json yet and holds {shards} shard file(s): a writer or a \
             merge is writing it now (its lock is held); open it once it has finished"
        )
    } else if shards > 0 && parts > 0 {
        // Deleting the directory, as for a writer's leftovers, would delete every part.
        format!(
            "it has no manifest.json and holds {parts} part director{} of a partitioned \
             conversion beside {shards} shard link(s): a merge of them stopped before it \
             finished, and the parts are whole; run it again (`stoker merge {}`; Python: \
             `stoker.merge`; Rust: `stoker::formats::merge`)",
            if parts == 1 { "y" } else { "ies" },
            root.lossless()
        )
    } else if shards > 0 {
        format!(
            "it holds {shards} shard file(s) but no manifest.json and no conversion journal: \
             a writer (SampleWriter, Python stoker.Writer) stopped before it finished (killed, \
             or out of memory), or a conversion stopped before its first shard was journaled \
             (a one-shard conversion, at its manifest), or it is a copy that lost its \
             manifest.json; nothing in it is a dataset: delete the directory and write the \
             samples again, or rerun the conversion with --resume (a copy: copy it again)"
        )
    } else if parts > 0 {
        format!(
            "it has no manifest.json and holds {parts} part director{} of a partitioned \
             conversion: merge them into one dataset first (`stoker merge {}`; Python: `stoker.merge`; Rust: `stoker::formats::merge`)",
            if parts == 1 { "y" } else { "ies" },
            root.lossless()
        )
    } else {
        "it has no manifest.json: convert images into a dataset first (`stoker convert \
         SOURCE OUT`; Python: \
         `stoker.convert`; Rust: `stoker::formats::convert`) and open OUT"
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::lock::OutputLock;

    #[test]
    fn an_empty_path_is_refused_saying_so() {
        // It was ": No such file or directory (os error 2)", naming no path.
        let Err(e) = Dataset::open("") else {
            panic!("an empty path opened")
        };
        let e = e.to_string();
        assert!(e.contains("the dataset path is empty"), "{e}");
    }

    /// A killed writer's directory (shards, no manifest, no journal) said "convert images
    /// into a dataset first", which was no help to someone who had just written one.
    #[test]
    fn shards_without_a_manifest_or_journal_are_a_writer_that_did_not_finish() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("shard-00000.lmdb"), b"").unwrap();
        let message = |e: Option<FormatError>| e.expect("no manifest: refused").to_string();
        for e in [
            Dataset::open(dir.path()).err(),
            crate::verify_dir(dir.path(), false).err(),
        ] {
            let e = message(e);
            assert!(
                e.contains("holds 1 shard file(s) but no manifest.json")
                    && e.contains("stopped before it finished")
                    && e.contains("delete the directory")
                    && e.contains("rerun the conversion with --resume"),
                "{e}"
            );
        }
        let lock = OutputLock::acquire(dir.path()).unwrap();
        let e = message(Dataset::open(dir.path()).err());
        assert!(e.contains("a writer or a merge is writing it now"), "{e}");
        drop(lock);
        // Beside part directories, the shards are a stopped merge's links: deleting the
        // directory would delete the parts.
        std::fs::create_dir(dir.path().join("part-00000-of-00001")).unwrap();
        for e in [
            Dataset::open(dir.path()).err(),
            crate::verify_dir(dir.path(), false).err(),
        ] {
            let e = message(e);
            assert!(e.contains("a merge of them stopped"), "{e}");
            assert!(e.contains("stoker merge") && !e.contains("delete"), "{e}");
        }
        std::fs::remove_dir(dir.path().join("part-00000-of-00001")).unwrap();
        // A manifest written between the open's look and the advice (a merge finishing):
        // never the advice to delete.
        std::fs::write(dir.path().join(MANIFEST_FILE), b"{}").unwrap();
        let hint = not_a_dataset_hint(dir.path());
        assert!(
            hint.contains("has one now") && !hint.contains("delete"),
            "{hint}"
        );
    }

    /// `stoker verify` of a dataset being converted said "unfinished conversion ... rerun
    /// `stoker convert --resume`", which the running converter's lock would refuse.
    #[test]
    fn a_conversion_holding_its_lock_is_in_progress_not_unfinished() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(crate::convert::JOURNAL_FILE), b"").unwrap();
        let lock = OutputLock::acquire(dir.path()).unwrap();
        let errors = [
            Dataset::open(dir.path()).err(),
            crate::verify_dir(dir.path(), false).err(),
        ];
        for e in errors {
            let e = e.expect("no manifest: refused");
            assert!(
                matches!(e, FormatError::ConversionInProgress { .. })
                    && e.to_string().contains("a conversion is writing it now"),
                "{e}"
            );
        }
        drop(lock);
        let e = Dataset::open(dir.path()).unwrap_err();
        assert!(
            matches!(e, FormatError::UnfinishedConversion { .. })
                && e.to_string().contains("rerun `stoker convert --resume`"),
            "{e}"
        );
    }
}
