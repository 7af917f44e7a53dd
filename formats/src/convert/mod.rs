//! The converter: an image folder or list file in, LMDB shards and `manifest.json` out.
//!
//! Inputs are listed in a sorted order, processed in parallel in chunks (rayon), and written
//! strictly in input order by one writer, so the output never depends on thread timing.
//! After every finished shard a journal (`.stoker-convert.json`) records how far the
//! conversion got, so `resume` can continue a killed run and still produce the same bytes.

pub mod audit;
pub(crate) mod lock;
mod markers;
mod part;
mod pipeline;
mod source;
mod transcode;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::manifest::{PartInfo, Provenance, RawSize, ShardEntry, MANIFEST_FILE};
use crate::record::Encoding;
use crate::writer::{write_atomically, DatasetWriter, WriterOptions, DEFAULT_SHARD_BYTES};
use crate::FormatError;
use audit::Audit;
pub use part::{Part, MAX_PARTS};
pub use source::{Layout, Source};

/// True when `data` is a JPEG whose primary image is complete: its end-of-image marker
/// comes before the data ends. The decoders fill missing scan data in without an error, so
/// this is how the converter (and `stoker decode`) tell a cut-off file.
///
/// # Examples
///
/// ```
/// let jpeg = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample/caer/tent.jpg"))?;
/// assert!(stoker_formats::jpeg_is_complete(&jpeg));
/// assert!(!stoker_formats::jpeg_is_complete(&jpeg[..jpeg.len() / 2]));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn jpeg_is_complete(data: &[u8]) -> bool {
    markers::primary_image_end(data).is_some()
}

/// File name of the conversion journal (present only while a conversion is unfinished).
pub const JOURNAL_FILE: &str = ".stoker-convert.json";
/// The journal's temporary name while it is replaced (see `write_atomically`).
const JOURNAL_TMP: &str = ".stoker-convert.json.tmp";

/// Most worker threads a conversion starts.
pub const MAX_JOBS: usize = 1024;

/// How `raw` encoding fits images to the fixed size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResizeMode {
    /// Scale so the shorter side fits, then crop the center.
    #[default]
    ShorterSide,
    /// Scale each axis independently to the target size.
    Stretch,
}

/// What to convert and how.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// The images.
    pub source: Source,
    /// The output directory (created if missing; must not hold a dataset).
    pub out: PathBuf,
    /// `Jpeg` stores JPEG bytes (original when possible); `Raw` stores decoded pixels.
    pub encoding: Encoding,
    /// JPEG encoding: images whose long side exceeds this are resized and re-encoded.
    pub max_side: Option<u32>,
    /// Quality of re-encoded JPEGs (1..=100).
    pub quality: u8,
    /// Raw encoding: the fixed `(width, height)` every image is resized to.
    pub raw_size: Option<(u32, u32)>,
    /// Raw encoding: how images are fitted to `raw_size`.
    pub resize: ResizeMode,
    /// Worker threads (default: all cores).
    pub jobs: Option<usize>,
    /// Target shard size in bytes.
    pub shard_bytes: u64,
    /// If set, split into this many shards by count instead (fewer if inputs are skipped).
    pub shards: Option<u64>,
    /// Continue a killed conversion in `out` instead of refusing.
    pub resume: bool,
    /// Fail on the first bad input (no manifest) instead of skipping it.
    pub strict: bool,
    /// Images with more pixels are rejected as bad input without being decoded.
    pub max_pixels: u64,
    /// Input files larger than this are skipped without being read
    /// (default [`crate::DEFAULT_MAX_FILE_SIZE`]).
    pub max_file_size: u64,
    /// Re-encode JPEGs the GPU hardware decoder cannot take as baseline 4:2:0.
    pub gpu_friendly: bool,
    /// Decode every JPEG that is stored unchanged, to skip corrupt ones now rather than at
    /// training time (default on; off trusts any file whose headers parse).
    pub check_decode: bool,
    /// How an ImageFolder source is read: class subdirectories, or one class of unlabelled
    /// images (`Auto`: flat exactly when the folder has no subdirectory).
    pub layout: Layout,
    /// Convert only this part of the sorted listing, into `out/part-IIIII-of-NNNNN/` with a
    /// part manifest, for `merge` to join (see [`Part`]); `None` converts everything
    /// into `out`.
    pub part: Option<Part>,
    /// Test hook: fail (as if killed) once this many records have been written.
    #[doc(hidden)]
    pub fail_after: Option<u64>,
}

impl ConvertOptions {
    /// Options with the CLI's defaults for `source` → `out`.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::{ConvertOptions, Source};
    /// let o = ConvertOptions::new(Source::ImageFolder("photos".into()), "out");
    /// assert_eq!(o.quality, 90);
    /// assert_eq!(o.shard_bytes, 1 << 30);
    /// ```
    pub fn new(source: Source, out: impl Into<PathBuf>) -> Self {
        ConvertOptions {
            source,
            out: out.into(),
            encoding: Encoding::Jpeg,
            max_side: None,
            quality: 90,
            raw_size: None,
            resize: ResizeMode::ShorterSide,
            jobs: None,
            shard_bytes: DEFAULT_SHARD_BYTES,
            shards: None,
            resume: false,
            strict: false,
            max_pixels: 100_000_000,
            max_file_size: crate::DEFAULT_MAX_FILE_SIZE,
            gpu_friendly: false,
            check_decode: true,
            layout: Layout::Auto,
            part: None,
            fail_after: None,
        }
    }

    fn validate(&self) -> Result<(), FormatError> {
        let bad = |s: &str| Err(FormatError::InvalidOptions(s.into()));
        if !(1..=100).contains(&self.quality) {
            return bad("quality must be in 1..=100");
        }
        match (self.encoding, self.raw_size) {
            (Encoding::Raw, None) => return bad("raw encoding needs a size (--size WxH)"),
            (Encoding::Raw, Some((w, h))) if w == 0 || h == 0 || w > 65535 || h > 65535 => {
                return bad("raw size must be between 1x1 and 65535x65535")
            }
            (Encoding::Jpeg, Some(_)) => return bad("--size applies to raw encoding only"),
            _ => {}
        }
        if self.max_side == Some(0) {
            return bad("max side must be positive");
        }
        if self.max_side.is_some_and(|m| m > 65535) {
            return bad("max side must be at most 65535 (the JPEG limit)");
        }
        if self.shards == Some(0) || self.shard_bytes == 0 {
            return bad("shard size and shard count must be positive");
        }
        if self.jobs == Some(0) {
            return bad("jobs must be positive");
        }
        // Each job holds a chunk of decoded images in memory: the count is bounded before
        // any thread or buffer exists.
        if let Some(j) = self.jobs.filter(|&j| j > MAX_JOBS) {
            return Err(FormatError::InvalidOptions(format!(
                "jobs {j} is more than {MAX_JOBS}"
            )));
        }
        if self.max_pixels == 0 {
            return bad("max pixels must be positive");
        }
        if self.max_file_size == 0 {
            return bad("max file size must be positive");
        }
        Ok(())
    }

    /// The options that shape the output, recorded in the manifest (not jobs or resume).
    fn output_flags(&self) -> BTreeMap<String, String> {
        let mut f = BTreeMap::new();
        f.insert("encoding".into(), self.encoding.to_string());
        if let Some(m) = self.max_side {
            f.insert("max_side".into(), m.to_string());
        }
        f.insert("quality".into(), self.quality.to_string());
        if let Some((w, h)) = self.raw_size {
            f.insert("size".into(), format!("{w}x{h}"));
            let r = match self.resize {
                ResizeMode::ShorterSide => "shorter-side",
                ResizeMode::Stretch => "stretch",
            };
            f.insert("resize".into(), r.into());
        }
        match self.shards {
            Some(n) => f.insert("shards".into(), n.to_string()),
            None => f.insert("shard_size".into(), self.shard_bytes.to_string()),
        };
        f.insert("max_pixels".into(), self.max_pixels.to_string());
        f.insert("max_file_size".into(), self.max_file_size.to_string());
        f.insert("gpu_friendly".into(), self.gpu_friendly.to_string());
        f.insert("check_decode".into(), self.check_decode.to_string());
        f.insert("strict".into(), self.strict.to_string());
        if self.layout != Layout::Auto {
            f.insert("layout".into(), self.layout.to_string());
        }
        f
    }
}

/// Receives progress while converting. All methods have empty defaults.
pub trait Progress: Sync {
    /// Called once with the number of inputs.
    fn start(&self, _inputs: u64) {}
    /// Called as inputs are finished (in input order): how many, and their source bytes.
    fn advance(&self, _inputs: u64, _bytes: u64) {}
    /// Called for each skipped input.
    fn skipped(&self, _path: &Path, _reason: &str) {}
    /// Called once when done (also on failure).
    fn finish(&self) {}
}

/// A [`Progress`] that reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// An input that was not converted, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The input file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: String,
}

/// The outcome of a conversion; `written + skipped.len() == inputs` holds for every
/// conversion that ran (not for a part found `already_done`, whose skips are not recorded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConvertReport {
    /// Input files found.
    pub inputs: u64,
    /// Records written.
    pub written: u64,
    /// Inputs not converted, with reasons, in input order.
    pub skipped: Vec<Skipped>,
    /// Files directly in an ImageFolder root: in no class folder, so not inputs (not counted).
    pub ignored: Vec<PathBuf>,
    /// The ImageFolder source was converted as one class of unlabelled images (label 0).
    #[serde(default)]
    pub flat: bool,
    /// Shard files written.
    pub shards: u64,
    /// Bytes of all shard files.
    pub bytes: u64,
    /// Bytes of the source files read.
    pub input_bytes: u64,
    /// Wall time of this run in seconds.
    pub seconds: f64,
    /// Records that are the original JPEG bytes.
    pub stored: u64,
    /// Records that were decoded and re-encoded (or stored raw).
    pub transcoded: u64,
    /// Records carried over from an interrupted run (`--resume`).
    pub resumed: u64,
    /// JPEG compatibility audit.
    pub audit: Audit,
    /// The output directory.
    pub out: PathBuf,
    /// With `resume` and a part: the part was already finished by an earlier run (a task
    /// retried after it completed), so nothing was converted; `written` and `resumed` are
    /// its record count.
    #[serde(default)]
    pub already_done: bool,
}

/// State saved after each finished shard, enough to resume byte-identically.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Journal {
    fingerprint: u32,
    next_input: u64,
    done: Vec<ShardEntry>,
    skipped: Vec<Skipped>,
    audit: Audit,
    payload_bytes: u64,
    raw_size: Option<RawSize>,
    stored: u64,
    transcoded: u64,
    input_bytes: u64,
}

/// Totals accumulated in input order.
#[derive(Debug, Default)]
struct Totals {
    skipped: Vec<Skipped>,
    audit: Audit,
    stored: u64,
    transcoded: u64,
    input_bytes: u64,
}

/// Converts `options.source` into a dataset in `options.out`.
///
/// # Errors
///
/// [`FormatError::OutputExists`] if `out` holds a dataset, a partial conversion (without
/// `resume`) or unrelated files; [`FormatError::BadSource`]; [`FormatError::StrictInput`] with
/// `strict`; [`FormatError::InvalidOptions`]; I/O and LMDB errors. On error no manifest is
/// written; finished shards and the journal stay for `resume`.
///
/// # Examples
///
/// ```
/// use stoker_formats::{convert, ConvertOptions, Dataset, NoProgress, Source};
/// let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/imagefolder");
/// let out = tempfile::tempdir()?;
/// let mut opts = ConvertOptions::new(Source::ImageFolder(src.into()), out.path().join("ds"));
/// opts.max_side = Some(64); // small re-encoded copies keep this example quick
/// let report = convert(&opts, &NoProgress)?;
/// assert_eq!(report.written + report.skipped.len() as u64, report.inputs);
/// assert_eq!(Dataset::open(out.path().join("ds"))?.len(), report.written);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn convert(
    options: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<ConvertReport, FormatError> {
    let t0 = Instant::now();
    options.validate()?;
    let listing = options.source.list_as(options.layout)?;
    let listing_fingerprint = fingerprint(options, &listing);
    let total = listing.inputs.len() as u64;
    // A part is converted like a whole dataset into its own directory, from its slice of
    // the listing; only its journal fingerprint and manifest say which part it is.
    let part_options;
    let (options, range, fingerprint) = match options.part {
        None => (options, 0..total, listing_fingerprint),
        Some(p) => {
            part_options = ConvertOptions {
                out: options.out.join(p.dir_name()),
                ..options.clone()
            };
            let mut fp = crc32c::crc32c_append(listing_fingerprint, &p.index.to_le_bytes());
            fp = crc32c::crc32c_append(fp, &p.count.to_le_bytes());
            (&part_options, p.slice(total), fp)
        }
    };
    let inputs = &listing.inputs[range.start as usize..range.end as usize];
    let out = &options.out;
    if let (Some(p), true) = (options.part, options.resume) {
        let want = PartInfo {
            index: p.index,
            count: p.count,
            inputs: total,
            first_input: range.start,
            end_input: range.end,
            listing: format!("{listing_fingerprint:08x}"),
        };
        if let Some(m) = finished_part(out, &want)? {
            return Ok(ConvertReport {
                inputs: inputs.len() as u64,
                written: m.samples,
                skipped: Vec::new(),
                ignored: listing.ignored,
                flat: listing.flat,
                shards: m.shards.len() as u64,
                bytes: m.bytes,
                input_bytes: 0,
                seconds: t0.elapsed().as_secs_f64(),
                stored: 0,
                transcoded: 0,
                resumed: m.samples,
                audit: m.audit.unwrap_or_default(),
                out: out.clone(),
                already_done: true,
            });
        }
    }
    if !out.join(MANIFEST_FILE).exists() {
        std::fs::create_dir_all(out).map_err(|e| FormatError::io(out, e))?;
    }
    // Held until this function returns: a second conversion into `out` (fresh or
    // `--resume`) is refused instead of interleaving its shards with ours.
    let _lock = lock::OutputLock::acquire(out)?;
    let journal = prepare_output(out, options.resume, fingerprint)?;

    let writer_opts = WriterOptions {
        shard_bytes: options.shard_bytes,
        records_per_shard: options
            .shards
            .map(|n| (listing.inputs.len() as u64).div_ceil(n).max(1)),
        encoding: Some(options.encoding),
    };
    let (mut writer, mut totals, start_input) = match journal {
        Some(j) => {
            let mut w = DatasetWriter::resume_from(out.clone(), writer_opts, j.done)?;
            w.restore_totals(j.payload_bytes, j.raw_size);
            let t = Totals {
                skipped: j.skipped,
                audit: j.audit,
                stored: j.stored,
                transcoded: j.transcoded,
                input_bytes: j.input_bytes,
            };
            (w, t, j.next_input as usize)
        }
        None => (
            DatasetWriter::resume_from(out.clone(), writer_opts, Vec::new())?,
            Totals::default(),
            0,
        ),
    };
    let resumed = writer.next_index();

    progress.start(inputs.len() as u64);
    if start_input > 0 {
        progress.advance(start_input as u64, totals.input_bytes);
    }
    let result = pipeline::run(
        options,
        &inputs[start_input..],
        start_input,
        fingerprint,
        &mut writer,
        &mut totals,
        progress,
    );
    progress.finish();
    result?;

    let written = writer.next_index();
    let mut provenance = Provenance::stoker(options.source.describe());
    provenance.flags = options.output_flags();
    if let Some(p) = options.part {
        writer.set_part(PartInfo {
            index: p.index,
            count: p.count,
            inputs: total,
            first_input: range.start,
            end_input: range.end,
            listing: format!("{listing_fingerprint:08x}"),
        });
    }
    let manifest =
        writer.finish_with_audit(listing.classes, provenance, Some(totals.audit.clone()))?;
    let _ = std::fs::remove_file(out.join(JOURNAL_FILE));
    let report = ConvertReport {
        inputs: inputs.len() as u64,
        written,
        skipped: totals.skipped,
        ignored: listing.ignored,
        flat: listing.flat,
        shards: manifest.shards.len() as u64,
        bytes: manifest.bytes,
        input_bytes: totals.input_bytes,
        seconds: t0.elapsed().as_secs_f64(),
        stored: totals.stored,
        transcoded: totals.transcoded,
        resumed,
        audit: totals.audit,
        out: out.clone(),
        already_done: false,
    };
    debug_assert_eq!(report.written + report.skipped.len() as u64, report.inputs);
    Ok(report)
}

/// The manifest of the part in `out` when it is finished and is exactly part `want` (same
/// listing, flags and slice); `None` when `out` holds no finished dataset. A finished
/// dataset of anything else stays for `prepare_output` to refuse.
fn finished_part(
    out: &Path,
    want: &PartInfo,
) -> Result<Option<crate::manifest::Manifest>, FormatError> {
    if !out.join(MANIFEST_FILE).exists() {
        return Ok(None);
    }
    let m = crate::manifest::Manifest::read(out)?;
    Ok((m.part.as_ref() == Some(want)).then_some(m))
}

fn save_journal(
    out: &Path,
    fingerprint: u32,
    next_input: usize,
    writer: &DatasetWriter,
    totals: &Totals,
) -> Result<(), FormatError> {
    let j = Journal {
        fingerprint,
        next_input: next_input as u64,
        done: writer.finished_shards().to_vec(),
        skipped: totals.skipped.clone(),
        audit: totals.audit.clone(),
        payload_bytes: writer.payload_bytes(),
        raw_size: writer.raw_size(),
        stored: totals.stored,
        transcoded: totals.transcoded,
        input_bytes: totals.input_bytes,
    };
    let text = serde_json::to_vec_pretty(&j).expect("journal serializes");
    write_atomically(out, JOURNAL_FILE, &text).map_err(|e| writer.space_error(e))
}

/// A checksum of everything that determines the output: the input list and the output flags.
fn fingerprint(options: &ConvertOptions, listing: &source::Listing) -> u32 {
    let mut crc = 0u32;
    for input in &listing.inputs {
        crc = crc32c::crc32c_append(crc, input.path.as_os_str().as_encoded_bytes());
        crc = crc32c::crc32c_append(crc, &input.label.to_le_bytes());
    }
    for c in &listing.classes {
        crc = crc32c::crc32c_append(crc, c.as_bytes());
        crc = crc32c::crc32c_append(crc, b"\0");
    }
    let flags = serde_json::to_string(&options.output_flags()).expect("flags serialize");
    crc32c::crc32c_append(crc, flags.as_bytes())
}

/// Files a conversion leaves behind while unfinished: shards, LMDB's lock files, and the
/// temporary files of `write_atomically` (a crash while the journal or manifest is being
/// replaced leaves `NAME.tmp`).
fn is_ours(name: &str) -> bool {
    name == JOURNAL_FILE
        || name == JOURNAL_TMP
        || name == "manifest.json.tmp"
        || (name.starts_with("shard-")
            && (name.ends_with(".lmdb") || name.ends_with(".tmp") || name.ends_with("-lock")))
}

/// Checks what `out` holds; returns the journal to resume from, if any.
fn prepare_output(
    out: &Path,
    resume: bool,
    fingerprint: u32,
) -> Result<Option<Journal>, FormatError> {
    let exists = |reason: String| FormatError::OutputExists {
        path: out.to_path_buf(),
        reason,
    };
    if out.join(MANIFEST_FILE).exists() {
        return Err(exists(
            "already holds a finished dataset (manifest.json); choose another output directory or delete it"
                .into(),
        ));
    }
    let entries = match std::fs::read_dir(out) {
        Ok(rd) => rd
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| FormatError::io(out, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FormatError::io(out, e)),
    };
    if let Some(other) = entries.iter().find(|n| !is_ours(n)) {
        return Err(exists(format!(
            "is not empty (found {other:?}); convert into a new or empty directory"
        )));
    }
    if entries.is_empty() {
        return Ok(None);
    }
    if !resume {
        return Err(exists(
            "holds a partial conversion (no manifest.json); rerun with --resume to continue it, or delete the directory"
                .into(),
        ));
    }
    let jpath = out.join(JOURNAL_FILE);
    let journal: Option<Journal> = match std::fs::read(&jpath) {
        Ok(b) => Some(
            serde_json::from_slice(&b).map_err(|e| FormatError::InvalidManifest {
                path: jpath.clone(),
                reason: format!("unreadable conversion journal: {e}"),
            })?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(FormatError::io(&jpath, e)),
    };
    if let Some(j) = &journal {
        if j.fingerprint != fingerprint {
            return Err(exists(
                "holds a partial conversion of different inputs or flags; --resume needs the same source and flags (or delete the directory)"
                    .into(),
            ));
        }
        for s in &j.done {
            let p = out.join(&s.file);
            let Some(want) = s.xxh3 else {
                return Err(exists(
                    "holds a partial conversion journaled by an older stoker (no xxh3 digests); delete the directory and convert again"
                        .into(),
                ));
            };
            let (len, got) = crate::digest::xxh3_of(&p)?;
            if len != s.bytes {
                return Err(FormatError::ShardSizeMismatch {
                    shard: p,
                    got: len,
                    want: s.bytes,
                });
            }
            if got != want {
                return Err(FormatError::ShardDigestMismatch {
                    shard: p,
                    got,
                    want,
                });
            }
        }
    }
    // Shards finished after the last journal entry (or with no journal) are redone.
    let keep: Vec<String> = journal
        .as_ref()
        .map(|j| j.done.iter().map(|s| s.file.clone()).collect())
        .unwrap_or_default();
    for name in &entries {
        let leftover = name == JOURNAL_TMP || name == "manifest.json.tmp";
        if leftover || (name.starts_with("shard-") && !keep.contains(name)) {
            let p = out.join(name);
            std::fs::remove_file(&p).map_err(|e| FormatError::io(&p, e))?;
        }
    }
    Ok(journal)
}
