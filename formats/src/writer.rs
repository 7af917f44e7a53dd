//! Writing a dataset: records go into `shard-NNNNN.lmdb.tmp`, each finished shard is synced and
//! renamed to `shard-NNNNN.lmdb`, and `manifest.json` is written last (also via rename).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::buffer_pool::BufferPool;
use crate::convert::audit::Audit;
use crate::convert::lock::OutputLock;
use crate::held_dir::HeldDir;
use crate::lmdb_write::{predict_meta, MetaPages, TreeWriter, PAGE};
use crate::manifest::{
    Manifest, PartInfo, Provenance, RawSize, ShardEntry, SourcesEntry, FORMAT_NAME, FORMAT_VERSION,
    MANIFEST_FILE,
};
use crate::out_dir::{refuse_finished, refuse_unfinished_writer};
use crate::out_of_space::out_of_space;
use crate::record::{Encoding, RecordHeader, HEADER_LEN};
use crate::shard;
use crate::FormatError;

/// Default target size of one shard: 1 GiB.
pub const DEFAULT_SHARD_BYTES: u64 = 1 << 30;

/// How [`DatasetWriter`] cuts shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterOptions {
    /// Start a new shard when the current one would grow past this many record bytes.
    pub shard_bytes: u64,
    /// If set, start a new shard every this many records instead (ignores `shard_bytes`).
    pub records_per_shard: Option<u64>,
    /// If set, every record must have this encoding (and the manifest says so even when empty).
    pub encoding: Option<Encoding>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            shard_bytes: DEFAULT_SHARD_BYTES,
            records_per_shard: None,
            encoding: None,
        }
    }
}

/// The header fields of a new record; the writer fills in payload length and CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMeta {
    /// Payload encoding.
    pub encoding: Encoding,
    /// Image height in pixels.
    pub height: u32,
    /// Image width in pixels.
    pub width: u32,
    /// Channels.
    pub channels: u8,
    /// Class label.
    pub label: u32,
}

/// The name of shard `i`: `shard-00000.lmdb`.
pub fn shard_file_name(i: usize) -> String {
    format!("shard-{i:05}.lmdb")
}

/// Writes a dataset record by record, in index order.
///
/// Nothing under `out_dir` looks finished until [`DatasetWriter::finish`] returns: shards are
/// written as `*.lmdb.tmp` and renamed when complete, and `manifest.json` comes last. Dropping
/// a writer without finishing leaves the temporary file and no manifest.
///
/// # Examples
///
/// Hand-made records, including a JPEG record whose bytes are not a JPEG (with a valid CRC),
/// the way other crates' tests build corrupt datasets:
///
/// ```
/// use stoker_formats::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
/// let dir = tempfile::tempdir()?;
/// let mut w = DatasetWriter::create(dir.path(), WriterOptions::default())?;
/// let meta = RecordMeta { encoding: Encoding::Jpeg, height: 8, width: 8, channels: 3, label: 1 };
/// assert_eq!(w.push(meta, b"definitely not a jpeg")?, 0);
/// let manifest = w.finish(vec!["a".into(), "b".into()], Provenance::stoker("doc"))?;
/// assert_eq!(manifest.samples, 1);
/// assert_eq!(Dataset::open(dir.path())?.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DatasetWriter {
    options: WriterOptions,
    /// Finished (renamed) shards, in order.
    done: Vec<ShardEntry>,
    /// The shard being written, if any record went into it.
    current: Option<ShardBuilder>,
    /// Index the next record gets.
    next_index: u64,
    encoding: Option<Encoding>,
    raw_size: Option<RawSize>,
    payload_bytes: u64,
    /// Recorded in the manifest of one part of a partitioned conversion.
    part: Option<PartInfo>,
    /// The source map written beside the shards, recorded in the manifest.
    sources: Option<SourcesEntry>,
    /// Where payload buffers go once written.
    pool: Option<Arc<BufferPool>>,
    /// Value lengths the records of the next shard are expected to have (see
    /// [`DatasetWriter::expect_next_shard`]).
    expected: Option<Vec<u64>>,
    /// Shards whose file was hashed as it was written (not read again).
    hashed_as_written: u64,
    /// With `records_per_shard`: a shard holding fewer record bytes than this takes more
    /// records (the converter's floor on shard size; 0, no floor, for other writers).
    min_shard_bytes: u64,
    /// The largest label pushed through the checked path and the first record that has
    /// it: checked against the classes given to [`DatasetWriter::finish`].
    max_label: Option<(u32, u64)>,
    /// [`DatasetWriter::records_sum`].
    records_sum: u64,
    /// `out_dir`'s lock, taken by [`DatasetWriter::create`] (a conversion or a
    /// [`crate::SampleWriter`] holds its own) and released once the writer is finished or
    /// dropped.
    lock: Option<OutputLock>,
    /// The directory the writer's caller locked, open: every file is made, renamed and
    /// deleted in it by name, and its path must still lead there at each such step.
    dir: HeldDir,
}

/// A record's term in a written part's `part.records`: its header's last 8 bytes (the
/// payload's CRC32C, then the header's own, which covers the encoding, size, label and
/// payload length), as a little-endian u64, mixed by splitmix64's finalizer so that the
/// sum of the terms tells multisets of records apart (docs/FORMAT.md, "Written parts").
pub(crate) fn record_term(header: &[u8; HEADER_LEN]) -> u64 {
    let crcs: [u8; 8] = header[24..32].try_into().expect("8 bytes");
    crate::seeded::mix(u64::from_le_bytes(crcs))
}

impl std::fmt::Debug for DatasetWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatasetWriter")
            .field("out_dir", &self.dir.path())
            .field("next_index", &self.next_index)
            .field("shards_done", &self.done.len())
            .finish()
    }
}

struct ShardBuilder {
    /// The directory it is written in.
    dir: HeldDir,
    /// Its temporary name there.
    tmp: String,
    file: String,
    tree: TreeWriter,
    first_index: u64,
    count: u64,
    /// Bytes of values (header + payload) pushed into this shard.
    value_bytes: u64,
    pool: Option<Arc<BufferPool>>,
}

impl DatasetWriter {
    /// Starts a dataset in `out_dir` (created if missing), which it locks until it is
    /// finished or dropped, as a conversion does: a second writer, a conversion or a merge
    /// into it is refused instead of writing its shards over this one's.
    ///
    /// # Errors
    ///
    /// [`FormatError::OutputExists`] if `out_dir` already has a `manifest.json` or the
    /// shards of a writer that did not finish (they would be taken into this dataset);
    /// [`FormatError::OutputLocked`] while another writer, conversion or merge writes into
    /// it; I/O errors.
    pub fn create(
        out_dir: impl AsRef<Path>,
        options: WriterOptions,
    ) -> Result<DatasetWriter, FormatError> {
        let out_dir = out_dir.as_ref().to_path_buf();
        refuse_finished(&out_dir)?;
        crate::convert::refuse_non_directory(&out_dir)?;
        std::fs::create_dir_all(&out_dir).map_err(|e| FormatError::io(&out_dir, e))?;
        let lock = OutputLock::acquire(&out_dir)?;
        let dir = lock.held_dir(&out_dir)?;
        dir.check()?;
        // Again under the lock: another writer may have finished since.
        refuse_finished(&out_dir)?;
        refuse_unfinished_writer(&out_dir)?;
        let mut writer = Self::resume_from(options, Vec::new(), dir)?;
        writer.lock = Some(lock);
        Ok(writer)
    }

    /// [`DatasetWriter::create`] in a directory the caller has locked (`dir`, the locked
    /// one, open); its path is checked to still name it.
    pub(crate) fn create_unlocked(
        options: WriterOptions,
        dir: HeldDir,
    ) -> Result<DatasetWriter, FormatError> {
        dir.check()?;
        refuse_finished(dir.path())?;
        Self::resume_from(options, Vec::new(), dir)
    }

    /// Continues a dataset whose first shards (`done`) are already finished on disk, in the
    /// directory the caller has locked (`dir`, open).
    pub(crate) fn resume_from(
        options: WriterOptions,
        done: Vec<ShardEntry>,
        dir: HeldDir,
    ) -> Result<DatasetWriter, FormatError> {
        if options.shard_bytes == 0 || options.records_per_shard == Some(0) {
            return Err(FormatError::InvalidOptions(
                "shard size and records per shard must be positive".into(),
            ));
        }
        dir.check()?;
        remove_temporaries(&dir)?;
        let next_index = done.last().map_or(0, |s| s.first_index + s.count);
        Ok(DatasetWriter {
            encoding: options.encoding,
            options,
            done,
            current: None,
            next_index,
            raw_size: None,
            payload_bytes: 0,
            part: None,
            sources: None,
            pool: None,
            expected: None,
            hashed_as_written: 0,
            min_shard_bytes: 0,
            max_label: None,
            records_sum: 0,
            lock: None,
            dir,
        })
    }

    /// The directory it writes, open.
    pub(crate) fn dir(&self) -> &HeldDir {
        &self.dir
    }

    /// The index the next pushed record will get (= records pushed so far).
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// The shards finished so far (renamed into place).
    pub fn finished_shards(&self) -> &[ShardEntry] {
        &self.done
    }

    /// Appends a record; the writer computes its payload length and CRC32C.
    /// Returns the record's dataset index.
    ///
    /// # Errors
    ///
    /// [`FormatError::InvalidRecord`] for a mixed encoding, a raw record with a zero
    /// dimension, with other than 1 or 3 channels ([`crate::RAW_CHANNELS`]) or with a
    /// payload whose length is not `height × width × channels`, a raw size differing from
    /// earlier records, or a payload over 4 GiB; I/O errors.
    pub fn push(&mut self, meta: RecordMeta, payload: &[u8]) -> Result<u64, FormatError> {
        let crc = crc32c::crc32c(payload);
        self.push_owned(meta, payload.to_vec(), crc)
    }

    /// [`DatasetWriter::push`] of a payload the writer takes over, with its CRC32C computed
    /// by the caller (the converter's workers, in parallel): the bytes go from `payload` to
    /// the shard file in one write, and the buffer to the writer's pool, if it has one.
    pub(crate) fn push_owned(
        &mut self,
        meta: RecordMeta,
        payload: Vec<u8>,
        crc32c: u32,
    ) -> Result<u64, FormatError> {
        let payload_len = u32::try_from(payload.len()).map_err(|_| FormatError::InvalidRecord {
            index: self.next_index,
            reason: format!("payload of {} bytes exceeds 4 GiB", payload.len()),
        })?;
        self.check_meta(&meta, payload.len())?;
        let header = RecordHeader {
            encoding: meta.encoding,
            height: meta.height,
            width: meta.width,
            channels: meta.channels,
            label: meta.label,
            payload_len,
            crc32c,
        };
        let index = self.push_record(header, payload)?;
        // Once written: a record refused or lost to an I/O error is not checked at finish.
        if self.max_label.is_none_or(|(m, _)| meta.label > m) {
            self.max_label = Some((meta.label, index));
        }
        Ok(index)
    }

    /// Appends a record with the header exactly as given: payload length and CRC are not
    /// recomputed, so a test can store a record whose CRC or length is wrong.
    ///
    /// # Errors
    ///
    /// I/O errors.
    pub fn push_header_unchecked(
        &mut self,
        header: RecordHeader,
        payload: &[u8],
    ) -> Result<u64, FormatError> {
        self.push_record(header, payload.to_vec())
    }

    fn push_record(&mut self, header: RecordHeader, payload: Vec<u8>) -> Result<u64, FormatError> {
        let payload_len = payload.len();
        let value_len = HEADER_LEN + payload_len;
        self.roll_if_needed(value_len as u64)?;
        if self.current.is_none() {
            self.dir.check()?;
            let started = ShardBuilder::start(
                &self.dir,
                self.done.len(),
                self.next_index,
                self.pool.clone(),
                self.expected.take().and_then(predict_meta),
            );
            self.current = Some(started.map_err(|e| self.space_error(e))?);
        }
        let index = self.next_index;
        let b = self.current.as_mut().expect("shard just started");
        let bytes = header.to_bytes();
        if let Err(e) = b.append(index, &bytes, payload) {
            return Err(self.space_error(e));
        }
        self.records_sum = self.records_sum.wrapping_add(record_term(&bytes));
        self.next_index += 1;
        self.payload_bytes += payload_len as u64;
        Ok(index)
    }

    /// Finishes the current shard if a record of `value_len` bytes would not belong in it.
    /// Returns the entry of the shard it finished, if any.
    pub(crate) fn roll_if_needed(
        &mut self,
        value_len: u64,
    ) -> Result<Option<ShardEntry>, FormatError> {
        let Some(b) = &self.current else {
            return Ok(None);
        };
        if self.fits(b.count, b.value_bytes, value_len) {
            return Ok(None);
        }
        let b = self.current.take().expect("checked above");
        let entry = self.finish_shard(b)?;
        self.done.push(entry.clone());
        Ok(Some(entry))
    }

    fn finish_shard(&mut self, b: ShardBuilder) -> Result<ShardEntry, FormatError> {
        self.dir.check()?;
        let (entry, hashed_as_written) = b.finish().map_err(|e| self.space_error(e))?;
        self.hashed_as_written += u64::from(hashed_as_written);
        tracing::debug!(shard = %entry.file, hashed_as_written, "shard finished");
        Ok(entry)
    }

    fn check_meta(&mut self, meta: &RecordMeta, len: usize) -> Result<(), FormatError> {
        let index = self.next_index;
        let bad = |reason: String| FormatError::InvalidRecord { index, reason };
        if let Some(e) = self.encoding.filter(|e| *e != meta.encoding) {
            return Err(bad(format!(
                "encoding {} differs from the dataset's {e}",
                meta.encoding
            )));
        }
        if meta.encoding == Encoding::Raw {
            // Accepted, such a record would be refused by every reader of pixels (the
            // loader: "unusable record") long after the writing: say so now.
            let size = RawSize {
                height: meta.height,
                width: meta.width,
                channels: meta.channels,
            };
            if let Some(problem) = crate::raw_problems(size, len as u64, self.raw_size)
                .into_iter()
                .next()
            {
                return Err(bad(problem));
            }
            self.raw_size = Some(size);
        }
        // Only once the record is accepted: a refused first record fixes nothing.
        self.encoding = Some(meta.encoding);
        Ok(())
    }

    /// Finishes the last shard and writes `manifest.json`; returns the manifest. Label `i`
    /// names `classes[i]`.
    ///
    /// # Errors
    ///
    /// [`FormatError::InvalidRecord`] when a record pushed with [`DatasetWriter::push`] has
    /// a label outside `classes` (the loader and `verify` would refuse it): no manifest is
    /// written, so the dataset never looks finished. [`DatasetWriter::check_classes`] makes
    /// the same check without giving the writer up. I/O errors.
    pub fn finish(
        self,
        classes: Vec<String>,
        provenance: Provenance,
    ) -> Result<Manifest, FormatError> {
        self.finish_with_audit(classes, provenance, None)
    }

    /// Whether `classes` names every label pushed with [`DatasetWriter::push`] so far, as
    /// [`DatasetWriter::finish`] requires; the writer stays usable either way.
    ///
    /// # Errors
    ///
    /// [`FormatError::InvalidRecord`] naming the first record with the largest label, when
    /// that label is `classes.len()` or more; [`FormatError::InvalidOptions`] for more than
    /// 2^20 classes, which no reader takes, or a class name given twice.
    pub fn check_classes(&self, classes: &[String]) -> Result<(), FormatError> {
        if classes.len() > crate::bounded::MAX_CLASSES {
            return Err(FormatError::InvalidOptions(format!(
                "{} class names is more than the {} a dataset may have",
                classes.len(),
                crate::bounded::MAX_CLASSES
            )));
        }
        crate::record_check::refuse_duplicate_classes(classes)?;
        match self.max_label {
            Some((label, index)) if label as usize >= classes.len() => {
                Err(FormatError::InvalidRecord {
                    index,
                    reason: format!(
                        "label {label} is outside the class list given to finish ({} classes): label i names classes[i], so give at least {} class names",
                        classes.len(),
                        u64::from(label) + 1
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn finish_with_audit(
        mut self,
        classes: Vec<String>,
        provenance: Provenance,
        audit: Option<Audit>,
    ) -> Result<Manifest, FormatError> {
        // Before the last shard is renamed: a dataset every epoch would refuse records of
        // is a mistake in the caller's classes or labels, best heard of now.
        self.check_classes(&classes)?;
        if let Some(b) = self.current.take() {
            let entry = self.finish_shard(b)?;
            self.done.push(entry);
        }
        let bytes = self.done.iter().map(|s| s.bytes).sum();
        let encoding = self.encoding.unwrap_or(Encoding::Jpeg);
        let manifest = Manifest {
            format: FORMAT_NAME.into(),
            format_version: FORMAT_VERSION,
            samples: self.next_index,
            encoding,
            raw_size: if encoding == Encoding::Raw {
                self.raw_size
            } else {
                None
            },
            classes,
            shards: self.done,
            bytes,
            payload_bytes: self.payload_bytes,
            provenance,
            audit,
            part: self.part,
            sources: self.sources,
        };
        manifest.validate(&self.dir.join(MANIFEST_FILE))?;
        self.dir.check()?;
        write_atomically(&self.dir, MANIFEST_FILE, manifest.to_json().as_bytes())
            .map_err(|e| out_of_space(e, self.dir.path(), manifest.samples, manifest.bytes))?;
        Ok(manifest)
    }

    /// Restores the payload byte count and raw size when resuming (they are not in `done`).
    pub(crate) fn restore_totals(&mut self, payload_bytes: u64, raw_size: Option<RawSize>) {
        self.payload_bytes = payload_bytes;
        self.raw_size = raw_size;
    }

    /// Turns a write failure that means "no room" into [`FormatError::OutOfSpace`], which says
    /// so, how much was written and that `--resume` continues; other errors pass through.
    pub(crate) fn space_error(&self, e: FormatError) -> FormatError {
        let bytes = self.done.iter().map(|s| s.bytes).sum();
        out_of_space(e, self.dir.path(), self.next_index, bytes)
    }

    /// Sends payload buffers to `pool` once written, for the converter's readers to fill
    /// again.
    pub(crate) fn set_buffer_pool(&mut self, pool: Arc<BufferPool>) {
        self.pool = Some(pool);
    }

    /// Whether a shard is open (the next record goes into it unless it is full).
    pub(crate) fn shard_open(&self) -> bool {
        self.current.is_some()
    }

    /// Before the record that starts a new shard: the value lengths (header + payload) that
    /// it and the records after it are expected to have. The writer keeps those that would
    /// go into the shard and lays its file out from them first, so that the file is hashed
    /// as it is written instead of read again at the end; when the records turn out
    /// otherwise, the shard is the same and the file is hashed afterwards.
    pub(crate) fn expect_next_shard(&mut self, lens: impl IntoIterator<Item = u64>) {
        let (mut count, mut bytes) = (0u64, 0u64);
        let mut kept = Vec::new();
        for len in lens {
            if !self.fits(count, bytes, len) {
                break;
            }
            kept.push(len);
            count += 1;
            bytes = bytes.saturating_add(len);
        }
        self.expected = Some(kept);
    }

    /// Whether a value of `len` bytes goes into a shard that holds `count` records of
    /// `bytes` bytes (else it starts the next shard).
    fn fits(&self, count: u64, bytes: u64, len: u64) -> bool {
        match self.options.records_per_shard {
            Some(n) => count < n || bytes < self.min_shard_bytes,
            None => count == 0 || bytes.saturating_add(len) <= self.options.shard_bytes,
        }
    }

    /// With `records_per_shard`: keeps adding records to a shard until it holds at least
    /// `bytes` of them, whatever the count.
    pub(crate) fn set_min_shard_bytes(&mut self, bytes: u64) {
        self.min_shard_bytes = bytes;
    }

    /// Names the source map written beside the shards, for the manifest.
    pub(crate) fn set_sources(&mut self, sources: SourcesEntry) {
        self.sources = Some(sources);
    }

    /// Marks the dataset as one part of a partitioned conversion.
    pub(crate) fn set_part(&mut self, part: PartInfo) {
        self.part = Some(part);
    }

    /// The sum of [`record_term`] over the records written so far: the same for the same
    /// records in any order and any shards (a written part's `part.records`).
    pub(crate) fn records_sum(&self) -> u64 {
        self.records_sum
    }

    pub(crate) fn payload_bytes(&self) -> u64 {
        self.payload_bytes
    }

    pub(crate) fn raw_size(&self) -> Option<RawSize> {
        self.raw_size
    }
}

/// Writes `name` in `dir` via `name.tmp`, fsync and rename, then syncs the directory. Mode
/// 0644 less the umask, as the shards (docs/FORMAT.md): a leftover `name.tmp` is removed
/// first, since an existing file keeps its mode.
pub(crate) fn write_atomically(dir: &HeldDir, name: &str, data: &[u8]) -> Result<(), FormatError> {
    write_atomically_with(dir, name, |f, tmp| {
        f.write_all(data).map_err(|e| FormatError::io(tmp, e))
    })
}

/// [`write_atomically`] for a file too large to hold in memory first: `fill` writes it
/// into the temporary file (buffered; given the temporary file's path for its errors).
/// Nothing is renamed into place unless `fill` succeeds (a failed `NAME.tmp` stays, as
/// [`write_atomically`] leaves one: a `--resume` or the next write removes it).
pub(crate) fn write_atomically_with(
    dir: &HeldDir,
    name: &str,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>, &Path) -> Result<(), FormatError>,
) -> Result<(), FormatError> {
    let tmp_name = format!("{name}.tmp");
    let tmp = dir.join(&tmp_name);
    dir.remove(&tmp_name)?;
    {
        let f = dir.create_new(&tmp_name)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        fill(&mut w, &tmp)?;
        let f = w
            .into_inner()
            .map_err(|e| FormatError::io(&tmp, e.into_error()))?;
        f.sync_all().map_err(|e| FormatError::io(&tmp, e))?;
    }
    dir.rename(&tmp_name, name)?;
    dir.sync();
    Ok(())
}

/// Deletes `shard-*.tmp` and LMDB `shard-*-lock` files left by an interrupted run.
fn remove_temporaries(dir: &HeldDir) -> Result<(), FormatError> {
    for name in dir.names()? {
        let text = name.to_string_lossy();
        if text.starts_with("shard-") && (text.ends_with(".tmp") || text.ends_with("-lock")) {
            dir.remove(&name)?;
        }
    }
    Ok(())
}

impl ShardBuilder {
    fn start(
        dir: &HeldDir,
        i: usize,
        first_index: u64,
        pool: Option<Arc<BufferPool>>,
        predicted: Option<MetaPages>,
    ) -> Result<ShardBuilder, FormatError> {
        let file = shard_file_name(i);
        let tmp = format!("{file}.tmp");
        let tree = TreeWriter::new(dir.create(&tmp)?, predicted)
            .map_err(|e| FormatError::io(dir.join(&tmp), e))?;
        Ok(ShardBuilder {
            dir: dir.clone(),
            tmp,
            file,
            tree,
            first_index,
            count: 0,
            value_bytes: 0,
            pool,
        })
    }

    /// Its temporary file's path, for messages.
    fn tmp_path(&self) -> PathBuf {
        self.dir.join(&self.tmp)
    }

    /// Writes the record `index` into the file and hands its payload buffer back to the
    /// pool, if any.
    fn append(&mut self, index: u64, header: &[u8], payload: Vec<u8>) -> Result<(), FormatError> {
        self.tree
            .append(shard::key(index), header, &payload)
            .map_err(|e| FormatError::io(self.tmp_path(), e))?;
        self.count += 1;
        self.value_bytes += (header.len() + payload.len()) as u64;
        if let Some(pool) = &self.pool {
            pool.give(payload);
        }
        Ok(())
    }

    /// Completes, syncs, closes and renames the shard; returns its manifest entry.
    fn finish(self) -> Result<(ShardEntry, bool), FormatError> {
        let tmp_path = self.tmp_path();
        let io = |e| FormatError::io(&tmp_path, e);
        let (file, stat, streamed) = self.tree.finish().map_err(io)?;
        file.sync_all().map_err(io)?;
        let (bytes, digest) = match streamed {
            Some(digest) => (stat.file_pages() * PAGE as u64, digest),
            None => crate::digest::xxh3_of_written(&file, &tmp_path)?,
        };
        drop(file);
        let hashed_as_written = streamed.is_some();
        let entry = ShardEntry {
            file: self.file.clone(),
            first_index: self.first_index,
            count: self.count,
            key_base: None,
            bytes,
            xxh3: Some(digest),
            crc32c: None,
        };
        self.dir.rename(&self.tmp, &self.file)?;
        self.dir.sync();
        Ok((entry, hashed_as_written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `lens` as records, shards cut every 3 MB; before each shard's first record
    /// `expect(i)` gives the value lengths expected from record `i` on, if any. Returns every
    /// file's bytes and the manifest.
    fn write(
        dir: &Path,
        lens: &[usize],
        expect: impl Fn(usize) -> Option<Vec<u64>>,
    ) -> (Vec<(String, Vec<u8>)>, Manifest, u64) {
        let opts = WriterOptions {
            shard_bytes: 1 << 20,
            ..WriterOptions::default()
        };
        let mut w = DatasetWriter::create(dir, opts).unwrap();
        let meta = RecordMeta {
            encoding: Encoding::Jpeg,
            height: 1,
            width: 1,
            channels: 3,
            label: 0,
        };
        for (i, &len) in lens.iter().enumerate() {
            w.roll_if_needed((HEADER_LEN + len) as u64).unwrap();
            if let Some(expected) = expect(i).filter(|_| !w.shard_open()) {
                w.expect_next_shard(expected);
            }
            w.push(meta, &vec![(i % 251) as u8; len]).unwrap();
        }
        // Finish the last shard first, to read the count.
        w.roll_if_needed((1 << 20) + 1).unwrap();
        let hashed = w.hashed_as_written;
        let m = w
            .finish(vec!["c".into()], Provenance::stoker("test"))
            .unwrap();
        let files = m
            .shards
            .iter()
            .map(|s| (s.file.clone(), std::fs::read(dir.join(&s.file)).unwrap()))
            .collect();
        (files, m, hashed)
    }

    /// Shards laid out from the expected sizes and hashed as written are the shards written
    /// without expectations, with the same digests; so are shards whose expectations were
    /// wrong (hashed afterwards).
    #[test]
    fn expected_sizes_change_how_a_shard_is_hashed_not_what_is_written() {
        let lens: Vec<usize> = (0..400)
            .map(|i| [40_000, 700, 2_100, 0][i % 4] + i)
            .collect();
        let value = |l: usize| (HEADER_LEN + l) as u64;
        let dir = tempfile::tempdir().unwrap();
        let (want, want_manifest, _) = write(&dir.path().join("plain"), &lens, |_| None);
        assert!(want.len() >= 3, "several shards");
        for (name, expect) in [
            (
                "right",
                Box::new(|i: usize| Some(lens[i..].iter().map(|&l| value(l)).collect()))
                    as Box<dyn Fn(usize) -> Option<Vec<u64>>>,
            ),
            (
                "one longer",
                Box::new(|i: usize| {
                    Some(
                        lens[i..]
                            .iter()
                            .enumerate()
                            .map(|(k, &l)| value(l) + 5_000 * u64::from(k == 5))
                            .collect(),
                    )
                }),
            ),
            (
                "cut short",
                Box::new(|i: usize| Some(lens[i..].iter().take(3).map(|&l| value(l)).collect())),
            ),
        ] {
            let (got, manifest, hashed) = write(&dir.path().join(name), &lens, expect);
            // Every shard when right; none when wrong (every shard's expectation is off
            // by whole pages). An expectation off by less than the layout notices is
            // harmless: the meta pages written first are checked, not the sizes.
            assert_eq!(
                hashed,
                if name == "right" {
                    want.len() as u64
                } else {
                    0
                },
                "{name}"
            );
            assert!(got == want, "{name}: different shard bytes");
            assert_eq!(manifest.to_json(), want_manifest.to_json(), "{name}");
        }
        for (s, (_, bytes)) in want_manifest.shards.iter().zip(&want) {
            assert_eq!(s.xxh3, Some(xxhash_rust::xxh3::xxh3_64(bytes)));
            assert_eq!(s.bytes, bytes.len() as u64);
        }
    }
}
