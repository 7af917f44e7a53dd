//! The source map: which input each record came from, in a file beside the manifest
//! (`sources.bin`, docs/FORMAT.md "Source map").
//!
//! Records carry no name, so without it a record the loader skips as corrupt, or an image
//! a user finds wrong, cannot be traced back to its file. The map is written by `convert`
//! (and joined by `merge`) before the manifest, through a temporary file, fsync and
//! rename, so a dataset whose manifest names it has all of it.
//!
//! The file is an offset table and the names after it, so one name is found with two
//! positioned reads whatever the dataset's size, and nothing read is sized by the file's
//! own claims before they are checked against its length.

use std::borrow::Cow;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::held_dir::HeldDir;
use crate::manifest::SourcesEntry;
use crate::text::Lossless;
use crate::writer::write_atomically_with;
use crate::FormatError;

/// File name of the source map at the dataset root.
pub const SOURCES_FILE: &str = "sources.bin";
/// The file's first four bytes.
const MAGIC: &[u8; 4] = b"STKS";
/// The layout version in bytes 4..6.
const VERSION: u16 = 1;
/// Magic, version, a reserved u16 and the u64 record count.
const HEADER_LEN: u64 = 16;
/// The longest name kept: a longer one is cut to this many bytes when written, and a map
/// that claims a longer one is refused, so that a damaged offset cannot make a reader
/// allocate gigabytes. Far above PATH_MAX, the most an input's path can be.
pub const MAX_SOURCE_NAME: usize = 64 << 10;
/// Offsets copied at a time when maps are joined.
const TABLE_CHUNK: usize = 8192;

/// A dataset's source map, open: record `i`'s source is [`SourceMap::get`]`(i)`.
///
/// Holds the file open (one descriptor) and reads nothing until asked; each lookup is two
/// positioned reads, checked against the file's length. Made by [`crate::Dataset::source_map`].
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
/// let map = ds.source_map()?.expect("convert writes a source map");
/// assert_eq!(map.len(), ds.len());
/// // Names are relative to the source folder: class folder, then file.
/// assert_eq!(map.get(0)?, std::path::Path::new("caer/black_cat.jpg"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SourceMap {
    path: PathBuf,
    file: File,
    /// Records named; equal to the dataset's `samples` (checked when opened).
    records: u64,
    /// Where the names start: after the header and `records + 1` offsets.
    names_at: u64,
    /// Bytes of names, the file's length less `names_at` (checked when opened).
    names_len: u64,
}

impl SourceMap {
    /// Opens the map that `entry` (a manifest's `sources`) names under `root`, for a dataset
    /// of `samples` records.
    pub(crate) fn open(
        root: &Path,
        entry: &SourcesEntry,
        samples: u64,
    ) -> Result<SourceMap, FormatError> {
        let path = root.join(&entry.file);
        let damaged = |reason: String| FormatError::DamagedSourceMap {
            path: path.clone(),
            reason,
        };
        if entry.file.is_empty() || entry.file.contains('/') || entry.file.starts_with('.') {
            return Err(damaged(format!(
                "the manifest names it {:?}, not a plain file name",
                entry.file
            )));
        }
        if entry.records != samples {
            return Err(damaged(format!(
                "the manifest says it names {} records, the dataset has {samples}",
                entry.records
            )));
        }
        let (file, meta) = match crate::input_file::open_regular(&path) {
            Ok(f) => f,
            Err(FormatError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(damaged(
                    "missing, though the manifest names it (copied without it?)".into(),
                ))
            }
            Err(e) => return Err(e),
        };
        let len = meta.len();
        if len != entry.bytes {
            return Err(damaged(format!(
                "{len} bytes, the manifest says {}",
                entry.bytes
            )));
        }
        let mut header = [0u8; HEADER_LEN as usize];
        read_at(&file, &path, &mut header, 0, len)?;
        if &header[..4] != MAGIC || header[4..6] != VERSION.to_le_bytes() || header[6..8] != [0; 2]
        {
            return Err(damaged(format!(
                "its header is not a version {VERSION} source map's (bytes {:02x?})",
                &header[..8]
            )));
        }
        let records = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        if records != samples {
            return Err(damaged(format!(
                "it names {records} records, the dataset has {samples}"
            )));
        }
        let names_at = records
            .checked_add(1)
            .and_then(|n| n.checked_mul(8))
            .and_then(|t| t.checked_add(HEADER_LEN))
            .filter(|&at| at <= len)
            .ok_or_else(|| {
                damaged(format!(
                    "{len} bytes cannot hold the offsets of {records} records"
                ))
            })?;
        let map = SourceMap {
            path: path.clone(),
            file,
            records,
            names_at,
            names_len: len - names_at,
        };
        let (first, last) = (map.offset(0)?, map.offset(records)?);
        if first != 0 || last != map.names_len {
            return Err(damaged(format!(
                "its offsets run from {first} to {last}, not from 0 to its {} bytes of names",
                map.names_len
            )));
        }
        Ok(map)
    }

    /// Number of records named (the dataset's length).
    pub fn len(&self) -> u64 {
        self.records
    }

    /// True when the dataset has no records.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The source of record `index`: the input's path relative to the folder converted
    /// (`class/file.jpg`; a list's row as written; `SHARD.tar:MEMBER` for a member of a
    /// WebDataset shard), its bytes exactly as on disk, whether UTF-8 or not.
    ///
    /// # Errors
    ///
    /// [`FormatError::IndexOutOfRange`]; [`FormatError::DamagedSourceMap`] when the offsets
    /// of the record are out of order or past the file, or the file was cut short since it
    /// was opened; I/O errors.
    ///
    /// # Examples
    ///
    /// See [`SourceMap`].
    pub fn get(&self, index: u64) -> Result<PathBuf, FormatError> {
        use std::os::unix::ffi::OsStringExt;
        Ok(PathBuf::from(std::ffi::OsString::from_vec(
            self.name_bytes(index)?,
        )))
    }

    /// The raw bytes of record `index`'s name (see [`SourceMap::get`]).
    fn name_bytes(&self, index: u64) -> Result<Vec<u8>, FormatError> {
        if index >= self.records {
            return Err(FormatError::IndexOutOfRange {
                index,
                len: self.records,
            });
        }
        let mut pair = [0u8; 16];
        let at = HEADER_LEN + index * 8;
        read_at(&self.file, &self.path, &mut pair, at, self.names_at)?;
        let start = u64::from_le_bytes(pair[..8].try_into().expect("8 bytes"));
        let end = u64::from_le_bytes(pair[8..].try_into().expect("8 bytes"));
        if start > end || end > self.names_len || end - start > MAX_SOURCE_NAME as u64 {
            return Err(self.damaged(format!(
                "record {index}'s name runs from {start} to {end} of {} bytes of names (at most {MAX_SOURCE_NAME} bytes each)",
                self.names_len
            )));
        }
        let mut name = vec![0u8; (end - start) as usize];
        let file_end = self.names_at + self.names_len;
        read_at(
            &self.file,
            &self.path,
            &mut name,
            self.names_at + start,
            file_end,
        )?;
        Ok(name)
    }

    /// Checks the whole file against the manifest's xxh3-64 `want` (nothing to compare
    /// when the manifest has none): a name altered in place keeps every offset sound,
    /// and only the digest tells.
    pub(crate) fn check_digest(&self, want: Option<u64>) -> Result<(), FormatError> {
        let Some(want) = want else {
            return Ok(());
        };
        let (_, got) = crate::digest::xxh3_of(&self.path)?;
        if got != want {
            return Err(self.damaged(format!(
                "its xxh3-64 is {got:016x}, the manifest says {want:016x}: the file was altered"
            )));
        }
        Ok(())
    }

    /// Offset `i` of the table (`0..=records`).
    fn offset(&self, i: u64) -> Result<u64, FormatError> {
        let mut b = [0u8; 8];
        read_at(
            &self.file,
            &self.path,
            &mut b,
            HEADER_LEN + i * 8,
            self.names_at,
        )?;
        Ok(u64::from_le_bytes(b))
    }

    fn damaged(&self, reason: String) -> FormatError {
        FormatError::DamagedSourceMap {
            path: self.path.clone(),
            reason,
        }
    }
}

/// Reads `buf.len()` bytes at `at`, which must end by `end` (checked by the caller's
/// bounds); a file cut short since it was measured is damage, not an I/O error.
fn read_at(file: &File, path: &Path, buf: &mut [u8], at: u64, end: u64) -> Result<(), FormatError> {
    let damaged = |reason: String| FormatError::DamagedSourceMap {
        path: path.to_path_buf(),
        reason,
    };
    if at.checked_add(buf.len() as u64).is_none_or(|e| e > end) {
        return Err(damaged(format!(
            "{} bytes at {at} would run past byte {end}",
            buf.len()
        )));
    }
    match file.read_exact_at(buf, at) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(damaged(format!(
            "cut short: it ends before byte {}",
            at + buf.len() as u64
        ))),
        Err(e) => Err(FormatError::io(path, e)),
    }
}

/// Counts the bytes written through it and hashes them: the manifest's `bytes` and `xxh3`.
struct Hashing<'a, W: Write> {
    inner: &'a mut W,
    hash: xxhash_rust::xxh3::Xxh3,
    len: u64,
}

impl<W: Write> Write for Hashing<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes `dir/sources.bin` atomically, `file` filling it through a [`Hashing`] writer;
/// returns its manifest entry.
fn write_map(
    dir: &HeldDir,
    records: u64,
    file: impl FnOnce(&mut dyn Write, &Path) -> Result<(), FormatError>,
) -> Result<SourcesEntry, FormatError> {
    let mut entry = SourcesEntry {
        file: SOURCES_FILE.into(),
        records,
        bytes: 0,
        xxh3: None,
    };
    write_atomically_with(dir, SOURCES_FILE, |w, tmp| {
        let mut h = Hashing {
            inner: w,
            hash: xxhash_rust::xxh3::Xxh3::new(),
            len: 0,
        };
        let mut header = [0u8; HEADER_LEN as usize];
        header[..4].copy_from_slice(MAGIC);
        header[4..6].copy_from_slice(&VERSION.to_le_bytes());
        header[8..].copy_from_slice(&records.to_le_bytes());
        h.write_all(&header).map_err(|e| FormatError::io(tmp, e))?;
        file(&mut h, tmp)?;
        entry.bytes = h.len;
        entry.xxh3 = Some(h.hash.digest());
        Ok(())
    })?;
    Ok(entry)
}

/// Writes the source map of `names` (record 0's first) into `dir`. `names` is called
/// twice (offsets, then names), and must give the same names each time. A name over
/// [`MAX_SOURCE_NAME`] bytes keeps its first that many.
pub(crate) fn write<'a, I>(
    dir: &HeldDir,
    names: impl Fn() -> I,
) -> Result<SourcesEntry, FormatError>
where
    I: Iterator<Item = Cow<'a, [u8]>>,
{
    let kept = |n: &[u8]| n.len().min(MAX_SOURCE_NAME) as u64;
    let records = names().count() as u64;
    write_map(dir, records, |w, tmp| {
        let io = |e| FormatError::io(tmp, e);
        let mut at = 0u64;
        w.write_all(&at.to_le_bytes()).map_err(io)?;
        for n in names() {
            at += kept(&n);
            w.write_all(&at.to_le_bytes()).map_err(io)?;
        }
        for n in names() {
            w.write_all(&n[..kept(&n) as usize]).map_err(io)?;
        }
        Ok(())
    })
}

/// Writes into `dir` the source map of `records` records from a spooled offset table
/// (each record's end, without the leading 0) and the names it indexes
/// (`crate::source_spool`), copied as they are: the spool wrote them as [`write()`] would.
pub(crate) fn write_copied(
    dir: &HeldDir,
    records: u64,
    offsets: &mut dyn std::io::Read,
    names: &mut dyn std::io::Read,
) -> Result<SourcesEntry, FormatError> {
    write_map(dir, records, |w, tmp| {
        let io = |e| FormatError::io(tmp, e);
        w.write_all(&0u64.to_le_bytes()).map_err(io)?;
        std::io::copy(offsets, w).map_err(io)?;
        std::io::copy(names, w).map_err(io)?;
        Ok(())
    })
}

/// A part's source map as the merge finds it: the part's directory, the manifest's entry
/// for the map, and the part's record count.
pub(crate) type PartMap<'a> = (&'a Path, &'a SourcesEntry, u64);

/// Writes into `dir` the source map of the maps `parts`, one after another: the merged
/// dataset's records are the parts' records in order, so each part's offsets move on by
/// the names before it. Each part's map is checked against its manifest's digest, and
/// every offset as it is copied.
///
/// One part's map is open at a time (each is opened once for its offsets, once for its
/// names): a merge of the thousands of parts of a large job array must not need a file
/// descriptor per part.
pub(crate) fn join(dir: &HeldDir, parts: &[PartMap<'_>]) -> Result<SourcesEntry, FormatError> {
    let open = |&(root, entry, samples): &PartMap<'_>| SourceMap::open(root, entry, samples);
    let records = parts.iter().try_fold(0u64, |a, p| a.checked_add(p.2));
    let records = records.ok_or_else(|| FormatError::DamagedSourceMap {
        path: parts[0].0.join(&parts[0].1.file),
        reason: "the parts' maps name more than 2^64 records".into(),
    })?;
    write_map(dir, records, |w, tmp| {
        let io = |e| FormatError::io(tmp, e);
        let mut base = 0u64;
        w.write_all(&base.to_le_bytes()).map_err(io)?;
        let mut names_lens = Vec::with_capacity(parts.len());
        for p in parts {
            let map = open(p)?;
            // A name altered in place keeps every offset sound, and the merged map's own
            // digest would then vouch for it: only the part's digest tells.
            map.check_digest(p.1.xxh3)?;
            base = map.copy_offsets(w, base, tmp)?;
            names_lens.push(map.names_len);
        }
        for (p, names_len) in parts.iter().zip(names_lens) {
            let map = open(p)?;
            // The offsets already written hold only for the names they were read with.
            if map.names_len != names_len {
                return Err(map.damaged(format!(
                    "its names went from {names_len} to {} bytes during the merge",
                    map.names_len
                )));
            }
            map.copy_names(w, tmp)?;
        }
        Ok(())
    })
}

/// The source map of the merge of `parts` (part directories and their manifests, in
/// order), written into `out`; `None` when a part has none (written by hand, or finished
/// by a build before source maps), since the records after it could not be named.
///
/// # Errors
///
/// [`FormatError::DamagedSourceMap`] for a part's map that is not what its manifest says:
/// the merge is refused rather than made with records named wrong.
pub(crate) fn merged(
    out: &HeldDir,
    parts: &[(PathBuf, crate::Manifest)],
) -> Result<Option<SourcesEntry>, FormatError> {
    let mut maps = Vec::with_capacity(parts.len());
    for (dir, m) in parts {
        let Some(entry) = &m.sources else {
            tracing::warn!(
                "{}: no source map (finished by a stoker before source maps), so the merged dataset has none",
                dir.lossless()
            );
            return Ok(None);
        };
        maps.push((dir.as_path(), entry, m.samples));
    }
    join(out, &maps).map(Some)
}

impl SourceMap {
    /// Writes this map's offsets 1..=records, each plus `base`, checking each against the
    /// one before and the names' length; returns `base` plus the names' length.
    fn copy_offsets(&self, w: &mut dyn Write, base: u64, tmp: &Path) -> Result<u64, FormatError> {
        let mut prev = 0u64;
        let mut buf = vec![0u8; TABLE_CHUNK * 8];
        let mut i = 1u64;
        while i <= self.records {
            let n = (self.records + 1 - i).min(TABLE_CHUNK as u64) as usize;
            let chunk = &mut buf[..n * 8];
            read_at(
                &self.file,
                &self.path,
                chunk,
                HEADER_LEN + i * 8,
                self.names_at,
            )?;
            for (k, b) in chunk.chunks_exact_mut(8).enumerate() {
                let at = u64::from_le_bytes((&*b).try_into().expect("8 bytes"));
                if at < prev || at > self.names_len || at - prev > MAX_SOURCE_NAME as u64 {
                    return Err(self.damaged(format!(
                        "offset {} is {at}, after {prev}, of {} bytes of names",
                        i + k as u64,
                        self.names_len
                    )));
                }
                prev = at;
                b.copy_from_slice(&(base + at).to_le_bytes());
            }
            w.write_all(chunk).map_err(|e| FormatError::io(tmp, e))?;
            i += n as u64;
        }
        Ok(base + self.names_len)
    }

    /// Copies this map's names.
    fn copy_names(&self, w: &mut dyn Write, tmp: &Path) -> Result<(), FormatError> {
        let mut buf = vec![0u8; 1 << 20];
        let mut at = self.names_at;
        let end = self.names_at + self.names_len;
        while at < end {
            let n = (end - at).min(buf.len() as u64) as usize;
            read_at(&self.file, &self.path, &mut buf[..n], at, end)?;
            w.write_all(&buf[..n])
                .map_err(|e| FormatError::io(tmp, e))?;
            at += n as u64;
        }
        Ok(())
    }
}

/// `r`, a use of the source map, with its damage (missing, not a file, a damaged header,
/// table or name) as the text of `Err`, for a report that goes on past the map: the
/// records read all the same. An error of no file's fault ([`FormatError::outside`]) is
/// the outer error: it says nothing of the map, and a run again may not meet it.
pub(crate) fn damage_as_text<T>(
    r: Result<T, FormatError>,
) -> Result<Result<T, String>, FormatError> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) if e.outside().is_some() => Err(e),
        Err(e) => Ok(Err(e.to_string())),
    }
}

/// `input` (an input's path as listed: SRC joined with its path, or `TAR:MEMBER`) as the
/// map names it: relative to `root`, the folder, tar or list root converted. A member of a
/// tar that is `root` itself keeps the tar's file name (`shard.tar:x.jpg`); a path that
/// is not under `root` (a list's absolute row) stays as it is.
pub(crate) fn relative_name<'a>(root: &Path, input: &'a Path) -> Cow<'a, [u8]> {
    use std::os::unix::ffi::OsStrExt;
    let full = input.as_os_str().as_bytes();
    let mut r = root.as_os_str().as_bytes();
    while r.len() > 1 && r.ends_with(b"/") {
        r = &r[..r.len() - 1];
    }
    let Some(rest) = full.strip_prefix(r) else {
        return Cow::Borrowed(full);
    };
    match rest.first() {
        Some(b'/') => {
            let start = rest.iter().position(|&b| b != b'/').unwrap_or(rest.len());
            Cow::Borrowed(&rest[start..])
        }
        // `r` is "/": every absolute path is under it.
        Some(_) if r == b"/" => Cow::Borrowed(rest),
        Some(b':') => {
            let tar = root.file_name().map_or(&b""[..], |n| n.as_bytes());
            Cow::Owned([tar, rest].concat())
        }
        _ => Cow::Borrowed(full),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(root: &str, input: &str) -> String {
        String::from_utf8(relative_name(Path::new(root), Path::new(input)).into_owned()).unwrap()
    }

    #[test]
    fn names_are_relative_to_the_root_converted() {
        assert_eq!(name("/d/src", "/d/src/cat/x.jpg"), "cat/x.jpg");
        assert_eq!(name("/d/src/", "/d/src/cat/x.jpg"), "cat/x.jpg");
        assert_eq!(name("src", "src/../up.jpg"), "../up.jpg");
        assert_eq!(
            name("/d/wds", "/d/wds/s-01.tar:a/0.jpg"),
            "s-01.tar:a/0.jpg"
        );
        assert_eq!(name("/d/one.tar", "/d/one.tar:0.jpg"), "one.tar:0.jpg");
        assert_eq!(name("/d/src", "/elsewhere/x.jpg"), "/elsewhere/x.jpg");
        assert_eq!(name("/d/src", "/d/srcx/y.jpg"), "/d/srcx/y.jpg");
        assert_eq!(name("/", "/x.jpg"), "x.jpg");
    }

    fn written(names: &[&[u8]]) -> (tempfile::TempDir, SourcesEntry) {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldDir::open(dir.path()).unwrap();
        let entry = write(&held, || names.iter().map(|n| Cow::Borrowed(*n))).unwrap();
        (dir, entry)
    }

    #[test]
    fn a_map_gives_back_each_name_exactly() {
        let names: [&[u8]; 4] = [b"a/1.jpg", b"", b"caf\xe9/2.jpg", b"s.tar:k/3.png"];
        let (dir, entry) = written(&names);
        let map = SourceMap::open(dir.path(), &entry, 4).unwrap();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(map.name_bytes(i as u64).unwrap(), *n);
        }
        assert!(matches!(
            map.get(4),
            Err(FormatError::IndexOutOfRange { index: 4, len: 4 })
        ));
        let (_, again) = written(&names);
        assert_eq!(again, entry, "the same names, the same bytes");
    }

    #[test]
    fn maps_join_with_their_offsets_moved_on() {
        let (a, ea) = written(&[b"p0/a.jpg", b"p0/b.jpg"]);
        let (b, eb) = written(&[]);
        let (c, ec) = written(&[b"p2/c.jpg"]);
        let parts = [(a.path(), &ea, 2), (b.path(), &eb, 0), (c.path(), &ec, 1)];
        let out = tempfile::tempdir().unwrap();
        let entry = join(&HeldDir::open(out.path()).unwrap(), &parts).unwrap();
        let (_, direct) = written(&[b"p0/a.jpg", b"p0/b.jpg", b"p2/c.jpg"]);
        assert_eq!(entry, direct, "joined as if written at once");
    }

    #[test]
    fn an_offset_past_the_names_is_damage_not_a_huge_read() {
        let (dir, entry) = written(&[b"a.jpg", b"b.jpg"]);
        let path = dir.path().join(SOURCES_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        // Offset 1 (record 0's end, record 1's start) claims 4 GiB.
        bytes[24..32].copy_from_slice(&(1u64 << 32).to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let map = SourceMap::open(dir.path(), &entry, 2).unwrap();
        for i in 0..2 {
            let e = map.get(i).unwrap_err();
            assert!(
                matches!(e, FormatError::DamagedSourceMap { .. }),
                "{i}: {e}"
            );
        }
    }
}
