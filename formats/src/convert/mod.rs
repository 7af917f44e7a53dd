//! The converter: an image folder, list file or WebDataset tar shards in, LMDB shards and
//! `manifest.json` out; and [`SampleWriter`], the same out of samples a caller hands over.
//!
//! Inputs are listed in a sorted order, processed in parallel in chunks (rayon), and written
//! strictly in input order by one writer, so the output never depends on thread timing.
//! After every finished shard a line appended to a journal (`.stoker-convert.journal`)
//! records how far the conversion got, so `resume` can continue a killed run and still
//! produce the same bytes.

pub mod audit;
#[cfg(feature = "progress-bar")]
mod bar;
mod chunk_done;
pub(crate) mod claim;
mod image_kinds;
mod journal;
mod list_file;
mod listing;
pub(crate) mod lock;
mod options;
pub(crate) mod out_path;
mod own_output;
mod part;
mod pipeline;
mod record_sources;
mod report;
mod resize;
mod resume_check;
mod sample_options;
mod samples;
mod source;
mod source_root;
use source_root::SourceRoot;
mod strict_stop;
mod tar_index;
mod tiff_ifd;
mod transcode;
pub(crate) mod walk;
pub use crate::text::lossless_text;
pub use list_file::class_names;
mod webdataset;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use crate::held_dir::HeldDir;
use crate::manifest::{PartInfo, Provenance, MANIFEST_FILE};
use crate::outside_fault::FaultStage;
use crate::text::Lossless;
use crate::FormatError;
#[cfg(feature = "progress-bar")]
pub use bar::TerminalBar;
pub use chunk_done::ChunkDone;
use journal::prepare_output;
pub use journal::JOURNAL_FILE;
pub(crate) use journal::LEGACY_FILE as LEGACY_JOURNAL_FILE;
pub(crate) use options::other_flag;
pub use options::{ConvertOptions, ResizeMode, MAX_JOBS, MAX_SIDE, MIN_SHARD_BYTES};
pub(crate) use out_path::refuse_non_directory;
pub use part::{Part, MAX_PARTS};
pub(crate) use report::{path_as_text, paths_as_text};
pub use report::{ConvertReport, NoProgress, Progress, Skipped};
pub use sample_options::SampleOptions;
pub use samples::SampleWriter;
pub(crate) use samples::REWRITE_PART;
pub use source::{Layout, Source};

/// True when `data` is a JPEG whose primary image is complete: its end-of-image marker
/// comes before the data ends. The CPU decoder refuses a cut-off file as corrupt, but a
/// conversion without `check_decode` does not decode, and nvJPEG may fill the rest in, so
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
    stoker_decode::primary_image_end(data).is_some()
}

/// An empty source path names nothing to convert (as `open("")` refuses one); it was
/// reported as "No such file or directory" of a path printed as nothing.
fn refuse_empty_source(source: &Source) -> Result<(), FormatError> {
    let path = match source {
        Source::ImageFolder(root) => root,
        Source::List { list, .. } => list,
    };
    if path.as_os_str().is_empty() {
        return Err(FormatError::InvalidOptions(
            "the source path is empty: give the image folder, list file or tar shards to convert"
                .into(),
        ));
    }
    Ok(())
}

/// Converts `options.source` into a dataset in `options.out`.
///
/// # Errors
///
/// [`FormatError::OutputExists`] if `out` holds a dataset, a partial conversion (without
/// `resume`) or unrelated files, or, for a [`Part`], when `out` (the output root) holds a
/// finished dataset; [`FormatError::OutputLocked`] while another conversion writes into
/// `out`, or, for a part, into its part directory, or a merge into `out`;
/// [`FormatError::BadSource`], also when a conversion that is
/// not a [`Part`] skips every input (a part may be empty); [`FormatError::StrictInput`] with
/// `strict`; [`FormatError::InvalidOptions`]; I/O and LMDB errors. On error no manifest is
/// written; finished shards and the journal stay for `resume`, except after a `strict` stop
/// of a run that began in a new or empty directory, or such a run that converted nothing:
/// it takes away what it made there, so that once the input is fixed a plain rerun
/// converts.
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
    let root = SourceRoot::of(options.source.root());
    // Listing writes nothing: a read of the source that fails for no fault of its own
    // (the first `read_dir` of the root out of descriptors) says so, as the walk's do.
    let listing = listed(options, progress).map_err(|e| e.escalate(FaultStage::Listing))?;
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
            let fp = part_fingerprint(listing_fingerprint, p);
            (&part_options, p.slice(total), fp)
        }
    };
    let inputs = &listing.inputs[range.start as usize..range.end as usize];
    let out = &options.out;
    let part_info = |p: Part| PartInfo {
        index: p.index,
        count: p.count,
        inputs: total,
        first_input: range.start,
        end_input: range.end,
        listing: listing_text(listing_fingerprint),
        written: false,
        records: None,
    };
    if options.resume {
        let want = options.part.map(part_info);
        if let Some(m) = finished(options, want.as_ref(), listing_fingerprint)? {
            shards_still_there(out, &m)?;
            let n = inputs.len() as u64;
            let empty = source::empty_classes(&options.source, &listing);
            return Ok(already_done(m, n, listing, empty, t0, out));
        }
    }
    // `out` locked until this returns: a second conversion into it is refused (fresh or resumed).
    let claim = claim::Claim::new(out, options.part.is_some())?;
    let held = (claim.lock.held_dir(out)).map_err(|e| e.escalate(FaultStage::Converting))?;
    // Out of descriptors, or the directory moved, said as in the run.
    let outside = |e: FormatError| run_error(e, &held);
    let size = (listing.inputs.len(), listing.path_bytes());
    let check = |j: &journal::Journal| resume_check::check_journal(out, j, inputs, options);
    let journal = prepare_output(&held, options, fingerprint, size, check).map_err(outside)?;
    let (mut made, output_lock) = claim.ready();
    made.begins_afresh(journal.is_none());
    let per_shard = options.records_per_shard(listing.inputs.len());
    let writer_opts = options.writer_options(per_shard);
    let (mut writer, mut totals, start_input, mut log) =
        journal::resume(options, fingerprint, (writer_opts, &held), journal).map_err(outside)?;
    // `--shard-size` below the floor is refused; `--shards N` cannot know its shards' bytes
    // until they are written, so the writer holds each until it reaches the floor.
    writer.set_min_shard_bytes(MIN_SHARD_BYTES);
    let resumed = writer.next_index();

    progress.start(inputs.len() as u64);
    if start_input > 0 {
        progress.advance(start_input as u64, totals.input_bytes);
    }
    let result = pipeline::run(
        options,
        (&inputs[start_input..], start_input, &root),
        &mut log,
        &mut writer,
        &mut totals,
        progress,
    );
    progress.finish();
    let dir = output_lock.dir();
    result.map_err(|e| made.after_failure(run_error(e, &held), &writer, dir))?;
    let written = writer.next_index();
    let accounted = account_for_inputs(options, listing.webdataset, inputs, &totals, &mut writer);
    let no_map = accounted.map_err(|e| made.after_nothing_converted(e, &writer, dir))?;
    let provenance = provenance(options, &listing, listing_fingerprint);
    let (empty_classes, all_skipped_note) =
        source::classes_without_samples(&options.source, options.part, &listing, &totals.skipped);
    if let Some(p) = options.part {
        writer.set_part(part_info(p));
    }
    let manifest = writer
        .finish_with_audit(listing.classes, provenance, Some(totals.audit.clone()))
        .map_err(|e| run_error(e, &held))?;
    journal::remove(&held);
    let mut warnings = listing.warnings;
    warnings.extend(all_skipped_note);
    warnings.extend(no_map);
    warnings.extend(per_shard.and_then(|k| options.shard_floor_note(k, &manifest.shards)));
    warnings.extend(held.check().err().map(|_| moved_at_finish(out)));
    Ok(ConvertReport {
        inputs: inputs.len() as u64,
        written,
        skipped: totals.skipped,
        ignored: listing.ignored,
        flat: listing.flat,
        webdataset: listing.webdataset,
        warnings,
        empty_classes,
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
    })
}

/// The warning of a conversion whose output directory was moved away (or removed) after
/// its last check: it finished there, not under the name it was given.
pub(crate) fn moved_at_finish(out: &Path) -> String {
    format!(
        "the output directory {} was moved away or removed while the conversion finished: the dataset is whole in the directory it was moved to (or went with it), and that path names another directory now, or none",
        out.lossless()
    )
}

/// The error `e` of a run into `held`, the output directory, as the user should read it: one
/// of the output's files that failed for no fault of its own (out of descriptors, a mount
/// gone) said to be an [`crate::OutsideFault`], with what is left; a file not found
/// because the directory went away said so ([`output_gone`]).
fn run_error(e: FormatError, held: &HeldDir) -> FormatError {
    output_gone(e, held).escalate(FaultStage::Converting)
}

/// `e`, a file of the output directory not found, saying that the directory itself was
/// removed or moved away mid-run (`held` is the one the run holds open): the bare
/// "out/shard-00014.lmdb.tmp: No such file or directory" did not say so.
fn output_gone(e: FormatError, held: &HeldDir) -> FormatError {
    let out = held.path();
    let moved = "if it was moved, `--resume` with the directory it went to as OUT continues it (for a part, the root it went to, with the same --part and --parts)";
    match &e {
        FormatError::OutputMoved { .. } => FormatError::OutputExists {
            path: out.to_path_buf(),
            reason: format!(
                "the output directory was removed or moved away during the conversion (its path names another directory now, or none), so nothing more is written under that name; {moved}"
            ),
        },
        FormatError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound && held.check().is_err() =>
        {
            FormatError::OutputExists {
                path: out.to_path_buf(),
                reason: format!(
                    "the output directory was removed or moved away during the conversion ({e}); {moved}"
                ),
            }
        }
        _ => e,
    }
}

/// Refuses to call a finished output "already converted" when a shard of its manifest is
/// gone or has another size: a dataset damaged after it was finished (a shard deleted by
/// hand, a copy cut short), which `--resume` cannot repair, said "nothing to do".
fn shards_still_there(out: &Path, m: &crate::manifest::Manifest) -> Result<(), FormatError> {
    for s in &m.shards {
        let path = out.join(&s.file);
        let problem = match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.len() == s.bytes => continue,
            Ok(meta) if meta.is_file() => {
                format!("is {} bytes, the manifest says {}", meta.len(), s.bytes)
            }
            Ok(_) => "is not a regular file".to_string(),
            Err(e) => format!("cannot be read ({e})"),
        };
        return Err(FormatError::OutputExists {
            path: out.to_path_buf(),
            reason: format!(
                "a finished dataset, but its {} {problem}: it was damaged after the conversion finished, which --resume cannot repair; `stoker verify {}` names the records lost (convert again into a new directory for a whole dataset)",
                s.file,
                out.lossless()
            ),
        });
    }
    Ok(())
}

/// The report of a part that an earlier run finished: its manifest's counts, nothing
/// converted now.
fn already_done(
    m: crate::manifest::Manifest,
    inputs: u64,
    listing: source::Listing,
    empty_classes: Vec<String>,
    t0: Instant,
    out: &Path,
) -> ConvertReport {
    ConvertReport {
        inputs,
        written: m.samples,
        skipped: Vec::new(),
        empty_classes,
        ignored: listing.ignored,
        flat: listing.flat,
        webdataset: listing.webdataset,
        warnings: listing.warnings,
        shards: m.shards.len() as u64,
        bytes: m.bytes,
        input_bytes: 0,
        seconds: t0.elapsed().as_secs_f64(),
        stored: 0,
        transcoded: 0,
        resumed: m.samples,
        audit: m.audit.unwrap_or_default(),
        out: out.to_path_buf(),
        already_done: true,
    }
}

/// Tag of the stored-order draw, so a `--shuffle` seed and a loader seed of the same value
/// give unrelated orders.
const STREAM_STORED_ORDER: u64 = 0x7374_6f72_6500_0003;

/// The manifest flag saying how the records are ordered: `classes` (an ImageFolder listing,
/// one class after another), `list` (a list file's order), `flat` (one class),
/// `webdataset` (the shards' order) or `shuffled` (`--shuffle`).
pub const ORDER_FLAG: &str = "order";

/// The [`ORDER_FLAG`] of a dataset written from samples ([`SampleWriter`]): the order they
/// were written in.
pub const WRITTEN_ORDER: &str = "written";

/// [`checked_listing`], its warnings handed to `progress`, unless the caller cancelled
/// meanwhile.
fn listed(
    options: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<source::Listing, FormatError> {
    refuse_empty_source(&options.source)?;
    let listing = checked_listing(options)?;
    progress.warnings(&listing.warnings);
    if progress.cancelled() {
        // Nothing of this run was written; a partial conversion it was to resume stays.
        return Err(FormatError::Cancelled {
            resumable: options.resume,
        });
    }
    Ok(listing)
}

/// [`ordered_listing`] with the ignored flags' warnings, once the output is known to be
/// possible. Refused before the source is listed (minutes, for millions of files): an
/// output that cannot be a directory, a part's root that was merged. Both are checked
/// again where the output is claimed, under its lock.
fn checked_listing(options: &ConvertOptions) -> Result<source::Listing, FormatError> {
    out_path::refuse_non_directory(&options.out)?;
    if options.part.is_some() {
        claim::refuse_merged(&options.out)?;
    }
    let mut listing = ordered_listing(options)?;
    listing.warnings.splice(0..0, options.ignored_flags());
    Ok(listing)
}

/// The inputs in the order their records are stored: the source's, or shuffled.
fn ordered_listing(options: &ConvertOptions) -> Result<source::Listing, FormatError> {
    // The whole output root (a part's directory is below it): none of it is ever input.
    let own = match &options.source {
        Source::ImageFolder(root) => own_output::OwnOutput::in_tree(root, &options.out)?,
        Source::List { root, .. } => own_output::OwnOutput::for_list(root, &options.out)?,
    };
    let mut listing =
        options
            .source
            .list_without(options.layout, &own, options.classes.as_deref())?;
    if let Some(seed) = options.shuffle {
        crate::seeded::Rng::new(&[seed, STREAM_STORED_ORDER]).shuffle(&mut listing.inputs);
    }
    Ok(listing)
}

fn provenance(options: &ConvertOptions, listing: &source::Listing, fingerprint: u32) -> Provenance {
    let mut provenance = Provenance::stoker(options.source.describe());
    provenance.flags = options.output_flags();
    // Not options, so not in the fingerprint: what order the records are in, for the
    // loader to tell whether a few shards at a time still mix the classes; and the
    // fingerprint itself, for `--resume` to tell a finished conversion of the same
    // listing (killed between its manifest and its exit) from another dataset.
    provenance
        .flags
        .insert(ORDER_FLAG.into(), stored_order(options, listing).into());
    provenance
        .flags
        .insert(LISTING_FLAG.into(), listing_text(fingerprint));
    provenance
}

/// The journal fingerprint of part `p` of the conversion of listing `listing`: a part's
/// journal is resumed only by the same part.
fn part_fingerprint(listing: u32, p: Part) -> u32 {
    let fp = crc32c::crc32c_append(listing, &p.index.to_le_bytes());
    crc32c::crc32c_append(fp, &p.count.to_le_bytes())
}

/// A listing fingerprint as the manifest writes it (part info and flag): 8 hex digits.
pub(crate) fn listing_text(fingerprint: u32) -> String {
    format!("{fingerprint:08x}")
}

/// The manifest flag holding the CRC32C of the listing and the output flags.
pub const LISTING_FLAG: &str = "listing";

fn stored_order(options: &ConvertOptions, listing: &source::Listing) -> &'static str {
    match (&options.source, options.shuffle) {
        (_, Some(_)) => "shuffled",
        (Source::List { .. }, None) => "list",
        (Source::ImageFolder(_), None) if listing.webdataset => "webdataset",
        (Source::ImageFolder(_), None) if listing.flat => "flat",
        (Source::ImageFolder(_), None) => "classes",
    }
}

/// The checks of a conversion whose inputs are all converted or skipped ([`check_accounting`],
/// [`check_written`]), then its source map, which names record `i` after the `i`-th input
/// not skipped and so is written only once every input is accounted for. Returns the
/// warning of a conversion that could not write one.
fn account_for_inputs(
    options: &ConvertOptions,
    webdataset: bool,
    inputs: &[source::Input],
    totals: &journal::Totals,
    writer: &mut crate::writer::DatasetWriter,
) -> Result<Option<String>, FormatError> {
    let written = writer.next_index();
    check_accounting(&options.out, written, totals.skipped.len(), inputs.len())?;
    check_written(options, webdataset, written, &totals.skipped)?;
    record_sources::write_into(writer, options, inputs, totals)
}

/// Every input is a record or a skip; anything else (a journal that slipped through, a bug
/// in the pipeline) would be a dataset that loses or repeats images yet verifies, so it is
/// refused before the manifest makes it look finished.
fn check_accounting(
    out: &Path,
    written: u64,
    skipped: usize,
    inputs: usize,
) -> Result<(), FormatError> {
    if written.checked_add(skipped as u64) == Some(inputs as u64) {
        return Ok(());
    }
    Err(FormatError::InvalidManifest {
        path: out.join(MANIFEST_FILE),
        reason: format!(
            "not written: {written} records and {skipped} skipped inputs do not account for \
             the {inputs} inputs; delete the directory and convert again"
        ),
    })
}

/// Refuses a whole conversion that wrote no record, naming how many inputs there were and
/// why the first few were skipped: a dataset of nothing is a wrong source or a tree of
/// unsupported files, not a result. A part may be empty (more parts than inputs).
fn check_written(
    options: &ConvertOptions,
    webdataset: bool,
    written: u64,
    skipped: &[report::Skipped],
) -> Result<(), FormatError> {
    if options.part.is_some() || written > 0 {
        return Ok(());
    }
    // A hint to read them as shards only when they were not (a damaged shard's path ends
    // in .tar under --layout webdataset too).
    let shown = || {
        skipped
            .iter()
            .take(report::SKIPS_SHOWN)
            .filter_map(|s| s.path.file_name())
    };
    let hint = (!webdataset)
        .then(|| {
            let tars = shown().any(webdataset::is_tar_name);
            webdataset::shards_as_images_hint(tars, shown().any(webdataset::is_compressed_tar))
        })
        .flatten();
    let (path, hint) = match &options.source {
        Source::ImageFolder(root) => (
            root,
            hint.map(str::to_string)
                .or_else(|| earlier_dataset_hint(root, skipped))
                .map(|h| format!(" ({h})")),
        ),
        Source::List { root, .. } => (
            root,
            Some(" (listed paths are read relative to SRC: is it the directory the list's paths start from?)".into()),
        ),
    };
    let hint = hint.unwrap_or_default();
    // No input at all: class folders with nothing in them (an ImageFolder reads no file
    // beside them, such as tar shards next to a folder whose name ends in .tar).
    let reason = if skipped.is_empty() {
        match options.source {
            Source::ImageFolder(_) => {
                "holds no file to convert: its class folders are empty \
                 (files beside them are not read; for WebDataset shards, --layout webdataset)"
            }
            Source::List { .. } => "the list names no file to convert",
        }
        .to_string()
    } else {
        format!(
            "none of the {} inputs could be converted, so no dataset was written{hint}; the first skipped: {}",
            skipped.len(),
            report::first_skipped(skipped),
        )
    };
    Err(FormatError::BadSource {
        path: path.clone(),
        reason,
    })
}

/// What to do when the inputs skipped include a stoker dataset's manifest: the image
/// folder `root` is such a dataset, or holds one converted into it earlier, which as a
/// folder made the files beside it unread (a flat folder became a tree of classes).
fn earlier_dataset_hint(root: &Path, skipped: &[report::Skipped]) -> Option<String> {
    let manifest = skipped
        .iter()
        .find(|s| s.path.file_name() == Some(MANIFEST_FILE.as_ref()))?;
    let dir = manifest.path.parent()?;
    Some(if dir == root {
        format!(
            "{} is a stoker dataset already: give the folder of images it was converted from",
            root.lossless()
        )
    } else if dir.parent() != Some(root) {
        format!(
            "{} is a stoker dataset converted into the source earlier, whose files are no \
             images: move it out of {}",
            dir.lossless(),
            root.lossless()
        )
    } else {
        format!(
            "{dir} is a stoker dataset converted into {root} earlier: a folder there makes \
             {root} a tree of class folders, and files beside the folders are not read; \
             move it out of {root}, or convert into a directory outside it",
            dir = dir.lossless(),
            root = root.lossless()
        )
    })
}

/// The manifest in `options.out` when it is a finished conversion of this listing (same
/// inputs and flags; for a part, exactly part `part`); `None` when it holds no finished
/// dataset.
///
/// # Errors
///
/// [`FormatError::OutputExists`] for a finished dataset of anything else, saying why.
fn finished(
    options: &ConvertOptions,
    part: Option<&PartInfo>,
    listing: u32,
) -> Result<Option<crate::manifest::Manifest>, FormatError> {
    let out = &options.out;
    if !out.join(MANIFEST_FILE).exists() {
        return Ok(None);
    }
    let m = crate::manifest::Manifest::read(out)?;
    // A part's `PartInfo` already names its listing (and parts finished by a release
    // without the flag must still count as done for a job array upgraded mid-way).
    let same = match part {
        Some(_) => m.part.as_ref() == part,
        None => {
            m.part.is_none() && m.provenance.flags.get(LISTING_FLAG) == Some(&listing_text(listing))
        }
    };
    if !same {
        return Err(FormatError::OutputExists {
            path: out.to_path_buf(),
            reason: not_this_conversion(&m, part, &options.output_flags()),
        });
    }
    // Killed after its manifest: the journal may still be there, and is done with. Taken
    // from the directory found holding a manifest when opened, whatever its path names
    // since (a journal beside a manifest is always done with).
    if let Ok(dir) = crate::held_dir::HeldDir::open(out) {
        if dir.exists(MANIFEST_FILE) {
            journal::remove(&dir);
        }
    }
    Ok(Some(m))
}

/// Why the finished dataset `m` is not the conversion `--resume` was asked to finish
/// (`part`, or a whole dataset, with the output flags `flags`), and what to do.
fn not_this_conversion(
    m: &crate::manifest::Manifest,
    part: Option<&PartInfo>,
    flags: &BTreeMap<String, String>,
) -> String {
    match (part, &m.part) {
        (None, Some(_)) => return "already holds one part of a partitioned conversion (manifest.json with `part`), not a whole dataset; choose another output directory or delete it".into(),
        (Some(_), None) => return "already holds a finished dataset that is not a part of a partitioned conversion (manifest.json without `part`); choose another output directory or delete it".into(),
        _ => {}
    }
    // Written from samples, it has no listing either, and is no older build's work.
    if m.provenance.flags.get(ORDER_FLAG).map(String::as_str) == Some(WRITTEN_ORDER) {
        return "already holds a dataset written from samples (SampleWriter, Python's stoker.Writer), not a conversion that --resume could finish; choose another output directory or delete it".into();
    }
    // The listing's fingerprint covers the flags: a run with another flag is told which,
    // not only that two checksums differ.
    let derived = [LISTING_FLAG, ORDER_FLAG];
    if let Some((name, there, here)) = other_flag(&m.provenance.flags, flags, &derived) {
        return format!(
            "already holds a finished conversion made with other flags: its manifest.json has \
             `{name}` {there}, this run {here}; --resume continues only the same conversion: \
             rerun with its flags, or convert into a new directory (or delete this one)"
        );
    }
    // A plain dataset finished by a build before 2b78cbc has no listing flag. Taking it as
    // done, as a part of such a build is (its `part.listing` is there to compare), would
    // take any dataset made from the same source string and flags as this listing, though
    // its files may have changed since: so it is refused, saying so.
    if part.is_none() && !m.provenance.flags.contains_key(LISTING_FLAG) {
        return "already holds a finished dataset made by an older stoker, which did not record which inputs it converted (no `listing` flag in manifest.json), so --resume cannot tell whether it is this conversion: if that run converted this same source with these flags, it is finished and there is nothing to do; otherwise convert into a new directory (or delete this one)".into();
    }
    "already holds a finished conversion of other inputs or flags (manifest.json: its listing fingerprint differs from this one's, because the source, its files or the flags differ, or because the stoker that made it listed them differently; --resume continues only the same source, spelled the same way, with the same flags); choose another output directory or delete it".into()
}

/// A checksum of everything that determines the output: the input list and the output flags.
///
/// Part of the format: journals, manifests (`listing`) and parts (`part.listing`) carry
/// it, and `--resume` and `merge` compare it across builds. A build that computes it
/// differently for the same inputs makes older work look like another conversion; so an
/// output flag is added to `output_flags` only where it is not at its default (as `layout`
/// and `shuffle` are), and a change to what is hashed raises the journal version.
fn fingerprint(options: &ConvertOptions, listing: &source::Listing) -> u32 {
    let mut crc = 0u32;
    for input in &listing.inputs {
        crc = crc32c::crc32c_append(crc, input.path.as_os_str().as_encoded_bytes());
        crc = crc32c::crc32c_append(crc, &input.label.to_le_bytes());
    }
    with_classes_and_flags(crc, &listing.classes, options)
}

/// `crc` continued over the class names (each ended by a NUL) and the output flags as
/// JSON: the tail of a conversion's [`fingerprint`] and of a written part's.
pub(super) fn with_classes_and_flags(
    mut crc: u32,
    classes: &[String],
    options: &ConvertOptions,
) -> u32 {
    for c in classes {
        crc = crc32c::crc32c_append(crc, c.as_bytes());
        crc = crc32c::crc32c_append(crc, b"\0");
    }
    let flags = serde_json::to_string(&options.output_flags()).expect("flags serialize");
    crc32c::crc32c_append(crc, flags.as_bytes())
}
