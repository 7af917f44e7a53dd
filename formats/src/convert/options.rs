//! What a conversion is asked to do: its options, their checks, and the flags recorded in
//! the manifest.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::part::Part;
use super::source::{Layout, Source};
use crate::record::{Encoding, HEADER_LEN};
use crate::writer::{WriterOptions, DEFAULT_SHARD_BYTES};
use crate::FormatError;

/// Most worker threads a conversion starts.
pub const MAX_JOBS: usize = 1024;

/// The longest side a stored image may have, raw or re-encoded: JPEG's limit (its frame
/// header's 16-bit width and height).
pub const MAX_SIDE: u32 = 65_535;

/// The largest record (header and payload) a shard can store: LMDB's values are at most
/// `u32::MAX` bytes.
const MAX_VALUE_LEN: u64 = u32::MAX as u64;

/// The smallest shard a conversion makes (record bytes; the last shard may hold less).
/// Every shard costs about 140 KiB of its own whatever it holds (33 zero pages after the
/// last used page, which keep a damaged node's read inside the file, and LMDB's two meta
/// pages) and about 20 ms (four fsyncs: shard, directory, journal, directory). Below this
/// floor the overhead is more than twice the data: `--shard-size 1000` (meant as MB) turned
/// 1.3 MB of images into 295 MB, and `--shards 10000` on 100k small images took 100 times
/// as long as one shard. Small enough that a few test photos still make several shards.
pub const MIN_SHARD_BYTES: u64 = 64 << 10;

/// Bytes of a raw record of `w × h` RGB pixels, header included.
fn raw_value_len(w: u32, h: u32) -> u64 {
    u64::from(w) * u64::from(h) * 3 + HEADER_LEN as u64
}

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
    /// Target shard size in bytes of records (headers and payloads), at least
    /// [`MIN_SHARD_BYTES`]; LMDB's pages make the file larger (up to twice for records of
    /// 2 to 4 KB, which take a 4 KiB page each). `resume` continues from the last finished
    /// shard.
    pub shard_bytes: u64,
    /// If set, split into this many shards by count instead (fewer if inputs are skipped,
    /// or if shards would hold under [`MIN_SHARD_BYTES`]: each then takes records until it
    /// holds that much, and the report's warnings say so).
    pub shards: Option<u64>,
    /// Continue a killed conversion in `out` instead of refusing.
    pub resume: bool,
    /// Fail on the first bad input (no manifest) instead of skipping it. A run that began
    /// in a new or empty `out` takes away what it made there; one that continued a partial
    /// conversion (`resume`) leaves it for `resume`.
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
    /// images (`Auto`: flat exactly when the folder has no subdirectory but hidden ones, any
    /// name starting with `.` such as `.ipynb_checkpoints`, `__MACOSX` and `out` itself). A
    /// list source ignores it (with a warning): its file gives the labels.
    pub layout: Layout,
    /// Convert only this part of the listing (sorted, or shuffled with `shuffle`), into `out/part-IIIII-of-NNNNN/` with a
    /// part manifest, for `merge` to join (see [`Part`]); `None` converts everything
    /// into `out`.
    pub part: Option<Part>,
    /// Store the records in a random order drawn from this seed instead of the listing's
    /// (which for an ImageFolder source is class by class). Readers that keep to a few
    /// shards at a time (the loader's quasi-random order, a sequential pass) then still see
    /// every class mixed; a whole-dataset shuffle does not need it. The same seed gives the
    /// same order on every machine, so parts of a partitioned conversion and `resume` agree.
    pub shuffle: Option<u64>,
    /// The class names (`--classes`): label `i` is `classes[i]`. A list row's label may
    /// then be a class name as well as an index (without them, a list's labels are
    /// integers and its classes `"0"` up to the largest); a class folder is labelled by its
    /// name, and a folder not among them is refused. Giving the train set's classes to its
    /// validation list or tree makes their labels agree even where a class has no
    /// validation image. Refused with a flat or WebDataset source.
    pub classes: Option<Vec<String>>,
    /// Test hook: fail (as if killed) once this many records have been written.
    #[doc(hidden)]
    pub fail_after: Option<u64>,
    /// Test hook: a decode that has its memory waits (at most two seconds) until this many
    /// have theirs, so that their memory checks all come before their allocations.
    #[doc(hidden)]
    pub decode_rendezvous: Option<u32>,
}

/// Refuses an empty output path, as `open("")` refuses one: it names no directory. (A
/// writer took it for the working directory, and a conversion said "No such file or
/// directory" of a path printed as nothing.) For [`ConvertOptions::validate`], and for a
/// writer, which makes its output path absolute before it validates.
pub(super) fn refuse_empty_output(out: &std::path::Path) -> Result<(), FormatError> {
    if out.as_os_str().is_empty() {
        return Err(FormatError::InvalidOptions(
            "the output path is empty: give the directory to write the dataset into (`.` for \
             the current one)"
                .into(),
        ));
    }
    Ok(())
}

impl ConvertOptions {
    /// The quality of re-encoded JPEGs unless told otherwise.
    pub const DEFAULT_QUALITY: u8 = 90;

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
            quality: ConvertOptions::DEFAULT_QUALITY,
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
            shuffle: None,
            classes: None,
            fail_after: None,
            decode_rendezvous: None,
        }
    }

    /// Whether JPEG inputs are stored byte for byte, so that a record's size is its file's
    /// size plus the header (unless the file changes, or is not a JPEG).
    pub(super) fn stores_originals(&self) -> bool {
        self.encoding == Encoding::Jpeg && self.max_side.is_none() && !self.gpu_friendly
    }

    pub(super) fn validate(&self) -> Result<(), FormatError> {
        let bad = |s: &str| Err(FormatError::InvalidOptions(s.into()));
        refuse_empty_output(&self.out)?;
        if !(1..=100).contains(&self.quality) {
            return bad("quality must be in 1..=100");
        }
        match (self.encoding, self.raw_size) {
            (Encoding::Raw, None) => {
                return bad("raw encoding needs a size (--size WxH, Python size=(W, H))")
            }
            (Encoding::Raw, Some((w, h))) if w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE => {
                return bad("raw size must be between 1x1 and 65535x65535")
            }
            // Refused before any image is decoded: every record would fail to be written,
            // after a buffer of that size was allocated for each worker.
            (Encoding::Raw, Some((w, h))) if raw_value_len(w, h) > MAX_VALUE_LEN => {
                return Err(FormatError::InvalidOptions(format!(
                    "raw size {w}x{h} makes records of {} bytes ({w}x{h}x3 pixels + \
                     {HEADER_LEN}-byte header), over the record limit of {MAX_VALUE_LEN} bytes \
                     (4 GiB, LMDB's largest value); choose a smaller --size",
                    raw_value_len(w, h)
                )))
            }
            (Encoding::Jpeg, Some(_)) => {
                return bad("a size (--size, Python size=) applies to raw encoding only")
            }
            _ => {}
        }
        if self.max_side == Some(0) {
            return bad("max side must be positive");
        }
        if self.max_side.is_some_and(|m| m > MAX_SIDE) {
            return bad("max side must be at most 65535 (the JPEG limit)");
        }
        if self.shards == Some(0) {
            return bad("the shard count (--shards, Python shards=) must be at least 1");
        }
        if self.shard_bytes == 0 {
            return bad("the shard size (--shard-size, Python shard_size=) must be positive");
        }
        if self.shards.is_none() && self.shard_bytes < MIN_SHARD_BYTES {
            return Err(FormatError::InvalidOptions(format!(
                "shard size {} bytes is below the minimum of {MIN_SHARD_BYTES} bytes (64 KiB): \
                 each shard costs about 140 KiB of LMDB pages and four fsyncs whatever it \
                 holds; the size is in bytes (--shard-size 512M or 1G; Python shard_size= takes an int, e.g. 512 << 20)",
                self.shard_bytes
            )));
        }
        if let Some(part) = &self.part {
            part.validate()?;
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
        if let Some(classes) = &self.classes {
            super::list_file::check_classes(classes)?;
        }
        Ok(())
    }

    /// Notes for the options that the conversion ignores (each was accepted silently).
    /// Warned of, not refused: they are recorded in the manifest's flags, which a resumed
    /// run and the parts of a merge must share, so a conversion begun with one (before
    /// this note, or on another machine) must still be able to finish with it.
    pub(super) fn ignored_flags(&self) -> Vec<String> {
        let note = |s: &str| format!("{s}; it is ignored (but recorded in the manifest's flags)");
        let mut notes = Vec::new();
        // `max_side` keeps the aspect ratio whatever `resize` says.
        if self.encoding == Encoding::Jpeg && self.resize != ResizeMode::ShorterSide {
            notes.push(note(
                "--resize (Python resize=) applies to raw encoding only (with a size)",
            ));
        }
        if self.encoding == Encoding::Raw && self.max_side.is_some() {
            notes.push(note(
                "--max-side (Python max_side=) applies to jpeg encoding only (raw records take the size of --size, Python size=)",
            ));
        }
        if self.encoding == Encoding::Raw && self.gpu_friendly {
            notes.push(note(
                "--gpu-friendly (Python gpu_friendly=) applies to jpeg encoding only (raw records hold pixels, not JPEGs)",
            ));
        }
        // Raw records are decoded pixels: nothing is encoded, and every image is decoded.
        if self.encoding == Encoding::Raw && self.quality != ConvertOptions::DEFAULT_QUALITY {
            notes.push(note(
                "--quality (Python quality=) applies to jpeg encoding only (re-encoded JPEGs; raw records hold pixels)",
            ));
        }
        if self.encoding == Encoding::Raw && !self.check_decode {
            notes.push(note(
                "--no-check (Python check=False) applies to jpeg encoding only (raw encoding decodes every image)",
            ));
        }
        if self.layout != Layout::Auto && matches!(self.source, Source::List { .. }) {
            notes.push(note(
                "--layout (Python layout=) applies to an image folder only (with a list file, it gives each image its label)",
            ));
        }
        notes
    }

    /// With `shards`: the records each shard is asked to hold, out of `inputs` listed.
    pub(super) fn records_per_shard(&self, inputs: usize) -> Option<u64> {
        self.shards.map(|n| (inputs as u64).div_ceil(n).max(1))
    }

    /// The writer's options for shards of `records_per_shard` records (with `shards`) or
    /// of the shard size.
    pub(super) fn writer_options(&self, records_per_shard: Option<u64>) -> WriterOptions {
        WriterOptions {
            shard_bytes: self.shard_bytes,
            records_per_shard,
            encoding: Some(self.encoding),
        }
    }

    /// The note for the report when `--shards` asked for shards smaller than
    /// [`MIN_SHARD_BYTES`] (of `per_shard` records each), so that `written` of the shards
    /// hold more records than asked; `None` when every shard is as asked.
    pub(super) fn shard_floor_note(
        &self,
        per_shard: u64,
        written: &[crate::manifest::ShardEntry],
    ) -> Option<String> {
        let n = self.shards?;
        let held = written.iter().any(|s| s.count > per_shard);
        held.then(|| {
            format!(
                "{n} shards (--shards, Python shards=) would make shards of {per_shard} records, smaller than \
                 {MIN_SHARD_BYTES} bytes (64 KiB), which cost more in LMDB pages and fsyncs \
                 than they hold; each shard took records until it held 64 KiB: {} shards \
                 written",
                written.len()
            )
        })
    }

    /// The options that shape the output, recorded in the manifest (not jobs or resume).
    /// They are hashed into the conversion's fingerprint, so a flag added here is written
    /// only where it is not at its default: otherwise every conversion's fingerprint would
    /// change, and `--resume` and `merge` would refuse what older builds began.
    pub(super) fn output_flags(&self) -> BTreeMap<String, String> {
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
        if let Some(seed) = self.shuffle {
            f.insert("shuffle".into(), seed.to_string());
        }
        f
    }
}

/// The first output flag (of those not in `derived`) that `there` and `here` give
/// differently: its name and both values, quoted (`absent` where one lacks it).
pub(crate) fn other_flag(
    there: &BTreeMap<String, String>,
    here: &BTreeMap<String, String>,
    derived: &[&str],
) -> Option<(String, String, String)> {
    let shown = |v: Option<&String>| v.map_or_else(|| "absent".into(), |v| format!("{v:?}"));
    let mut names: Vec<&String> = there.keys().chain(here.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|name| !derived.contains(&name.as_str()))
        .find(|name| there.get(*name) != here.get(*name))
        .map(|name| (name.clone(), shown(there.get(name)), shown(here.get(name))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_shard_count_or_size_names_the_one_given() {
        let mut o = ConvertOptions::new(Source::ImageFolder("src".into()), "out");
        o.shards = Some(0);
        let e = o.validate().unwrap_err().to_string();
        assert!(
            e.contains("shard count (--shards") && !e.contains("size"),
            "{e}"
        );
        o.shards = None;
        o.shard_bytes = 0;
        let e = o.validate().unwrap_err().to_string();
        assert!(e.contains("shard size (--shard-size"), "{e}");
    }

    #[test]
    fn options_that_are_ignored_are_noted() {
        // Each was accepted with no effect and no word.
        let noted = |o: &ConvertOptions| {
            o.validate().unwrap();
            let notes = o.ignored_flags();
            assert_eq!(notes.len(), 1, "{notes:?}");
            notes[0].clone()
        };
        let folder = ConvertOptions::new(Source::ImageFolder("src".into()), "out");
        let mut raw = folder.clone();
        raw.encoding = Encoding::Raw;
        raw.raw_size = Some((32, 32));
        raw.resize = ResizeMode::Stretch;
        assert!(raw.ignored_flags().is_empty() && folder.ignored_flags().is_empty());

        let mut o = folder.clone();
        o.resize = ResizeMode::Stretch;
        assert!(noted(&o).starts_with("--resize (Python resize=) applies to raw encoding only"));
        let mut o = raw.clone();
        o.max_side = Some(100);
        assert!(
            noted(&o).starts_with("--max-side (Python max_side=) applies to jpeg encoding only")
        );
        let mut o = raw.clone();
        o.gpu_friendly = true;
        assert!(noted(&o)
            .starts_with("--gpu-friendly (Python gpu_friendly=) applies to jpeg encoding only"));

        let list = ConvertOptions::new(
            Source::List {
                root: "src".into(),
                list: "files.csv".into(),
            },
            "out",
        );
        assert!(list.ignored_flags().is_empty());
        for layout in [Layout::Flat, Layout::Classes] {
            let mut o = list.clone();
            o.layout = layout;
            assert!(
                noted(&o).starts_with("--layout (Python layout=) applies to an image folder only")
            );
            let mut o = folder.clone();
            o.layout = layout;
            assert!(o.ignored_flags().is_empty());
        }
    }

    #[test]
    fn a_part_built_from_its_fields_is_checked_not_a_panic() {
        // `Part`'s fields are public: these reached `convert` and panicked there (a slice
        // out of range, a division by zero).
        for (index, count) in [(5, 2), (2, 2), (0, 0), (0, u32::MAX)] {
            let mut o = ConvertOptions::new(Source::ImageFolder("src".into()), "out");
            o.part = Some(Part { index, count });
            let err = o.validate().unwrap_err();
            assert!(
                matches!(err, FormatError::PartSelection { .. }),
                "{index}/{count}: {err}"
            );
            assert_eq!(Part { index, count }.slice(15), 0..0);
        }
        let mut o = ConvertOptions::new(Source::ImageFolder("src".into()), "out");
        o.part = Some(Part { index: 1, count: 2 });
        o.validate().unwrap();
    }
}
