//! A dataset written from samples a caller hands over one at a time (encoded image bytes
//! and a label), for images that are not files: a Hugging Face dataset's parquet column, a
//! TFRecord, a database. Each sample gets exactly the processing `convert` gives a file
//! (`pipeline::process_bytes`, then `pipeline::write_one`), so the records are the ones a
//! conversion of the same images in the same order writes.
//!
//! Samples are buffered in chunks; a full chunk is transcoded on a thread pool while the
//! caller fills the next, and its results are written in the order the samples came. At
//! most two chunks are held, the one being filled and the one being transcoded, each of at
//! most [`CHUNK_BYTES`] of samples plus the one that filled it (and of raw records, whose
//! size does not follow the input's, at most about [`CHUNK_BYTES`] too).
//!
//! The output is never visible as complete before [`SampleWriter::finish`] returns: the
//! manifest is written last and atomically, and a writer dropped unfinished (an error, a
//! Python exception, Ctrl-C) or stopped by an error takes away everything it wrote.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use rayon::prelude::*;

use super::chunk_done::{ChunkDone, SetOnDrop};
use super::claim::Claim;
use super::journal::Totals;
use super::lock::OutputLock;
use super::options::ConvertOptions;
use super::pipeline::{self, Sink};
use super::report::{ConvertReport, NoProgress};
use super::sample_options::SampleOptions;
use super::strict_stop::{written_names, Made};
use super::transcode::{Outcome, Processed};
use crate::input_file::refusal_reason;
use crate::manifest::{PartInfo, Provenance, MANIFEST_FILE};
use crate::outside_fault::FaultStage;
use crate::record::{Encoding, HEADER_LEN};
use crate::source_map::SOURCES_FILE;
use crate::source_spool::SourceSpool;
use crate::writer::DatasetWriter;
use crate::FormatError;

/// A chunk is transcoded once it holds this many input bytes, so that a chunk of large
/// images is not held many times over (the converter's read-ahead bound).
const CHUNK_BYTES: usize = 8 << 20;
/// ... or this many samples, so that small images are transcoded in chunks large enough
/// to keep every thread busy, yet a failure is reported soon after its sample.
const CHUNK_SAMPLES: usize = 1024;

/// A sample waiting to be transcoded.
struct Pending {
    /// The bytes, empty for a sample over the size limit given without them.
    data: Vec<u8>,
    /// The sample's size.
    len: u64,
    label: u32,
}

/// A chunk on the thread pool: its samples' names (in order) and where its results come.
struct InFlight {
    names: Vec<PathBuf>,
    results: mpsc::Receiver<Vec<Processed>>,
    /// Set once the results are sent.
    done: ChunkDone,
}

/// Writes a dataset from samples: encoded images (JPEG, PNG, or any format `convert`
/// reads) with their labels, in the order given.
///
/// The result is laid out as a conversion's is (shards, then a manifest with the class
/// names, the output flags, the audit and `provenance.source` as given), so
/// [`crate::Dataset::open`], `stoker verify`, `stoker inspect` and the loader read it.
///
/// # Examples
///
/// ```
/// use stoker_formats::{Dataset, SampleOptions, SampleWriter};
/// let photo = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample/caer/tent.jpg");
/// let out = tempfile::tempdir()?;
/// let classes = vec!["tent".to_string(), "other".to_string()];
/// let mut w = SampleWriter::create(out.path().join("ds"), SampleOptions::new("example"), Some(classes))?;
/// w.write(std::fs::read(photo)?, 0, "tent.jpg")?;
/// w.write(b"not an image".as_slice(), 1, "bad")?; // skipped and reported, like a bad file
/// let report = w.finish()?;
/// assert_eq!((report.written, report.skipped.len()), (1, 1));
/// assert_eq!(Dataset::open(out.path().join("ds"))?.manifest().classes, ["tent", "other"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SampleWriter {
    /// The processing options, as a conversion's; `out` is the output directory.
    options: Arc<ConvertOptions>,
    /// Class names as given; `None`: `"0"` to the largest label, as for a list file.
    classes: Option<Vec<String>>,
    /// The largest label given (which names the classes when `classes` is `None`).
    max_label: Option<u32>,
    source: String,
    pool: Arc<rayon::ThreadPool>,
    /// Samples given since the last chunk went to the pool, and their names and bytes.
    pending: Vec<Pending>,
    pending_names: Vec<PathBuf>,
    pending_bytes: usize,
    /// Samples in a chunk are at most this many (fewer for large raw records).
    chunk_samples: usize,
    in_flight: Option<InFlight>,
    /// Set when the writer stops: the chunk on the pool skips its samples not yet begun
    /// instead of transcoding them for nobody, after `abort` or a drop has returned.
    cancel: Arc<AtomicBool>,
    /// `None` once the writer has finished, or stopped on an error.
    writer: Option<DatasetWriter>,
    /// The names of the records written so far, for the source map (`None` once taken).
    spool: Option<SourceSpool>,
    totals: Totals,
    /// Samples given to `write` (each becomes a record or a skip).
    samples: u64,
    /// Records per label, for the classes that got none.
    per_label: Vec<u64>,
    warnings: Vec<String>,
    /// What this writer created (the directories) and holds (the lock, until dropped).
    made: Made,
    lock: OutputLock,
    /// The error that stopped the writer, once one has.
    stopped: Option<String>,
    /// Names of the files written, kept for the clean-up when `writer` is gone.
    written: Vec<String>,
    /// The manifest is written: nothing is taken away on drop.
    finished: bool,
    /// The process that made the writer: a forked child's copy never touches the output.
    pid: u32,
    /// The part this writer writes (`options.out` is its part directory), with the
    /// fingerprint of what every part of the writing must agree on.
    part: Option<(super::Part, u32)>,
    t0: Instant,
}

impl std::fmt::Debug for SampleWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleWriter")
            .field("out", &self.options.out)
            .field("samples", &self.samples)
            .field("finished", &self.finished)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl SampleWriter {
    /// Starts a dataset in `out` (created if missing; an existing one must be empty), or,
    /// with [`SampleOptions::part`], a part of one in `out/part-IIIII-of-NNNNN/` (the part
    /// directory must be new or empty, and `out` hold no finished dataset). `classes` names
    /// the labels (label `i` is `classes[i]`); without them the dataset's
    /// classes are `"0"` to the largest label written, as for a list file.
    ///
    /// # Errors
    ///
    /// [`FormatError::InvalidOptions`] for bad options, an empty `classes` or one that
    /// names two labels alike, a part without `classes`;
    /// [`FormatError::PartSelection`] for a part whose index is not below its count;
    /// [`FormatError::OutputExists`] when `out` holds a dataset or anything else;
    /// [`FormatError::OutputLocked`] while another writer or conversion writes into it (for
    /// a part: into its part directory, or a merge or whole conversion into `out`);
    /// I/O errors.
    pub fn create(
        out: impl Into<PathBuf>,
        options: SampleOptions,
        classes: Option<Vec<String>>,
    ) -> Result<SampleWriter, FormatError> {
        let source = options.source.clone();
        let part = options.part;
        // Absolute from the start: the writer lives on across the caller's `chdir` (a
        // notebook's `%cd`), and a relative `out` then wrote into, and on failure left
        // its shards in, the directory of that name under the new working directory (a
        // finished dataset there was replaced without a word), while the lock and the
        // clean-up stayed on the old one.
        let root: PathBuf = out.into();
        // Before `absolute`, which would make it the working directory.
        super::options::refuse_empty_output(&root)?;
        let root = std::path::absolute(&root).map_err(|e| FormatError::io(&root, e))?;
        // A part is written like a whole dataset into its own directory, as `convert
        // --part` writes one: the lock, the refusals and the clean-up are that directory's.
        let dir = match part {
            Some(p) => root.join(p.dir_name()),
            None => root.clone(),
        };
        let options = options.as_convert(dir);
        options.validate()?;
        if let Some(p) = part {
            check_part(p, classes.as_deref())?;
        }
        if classes.as_ref().is_some_and(Vec::is_empty) {
            return Err(FormatError::InvalidOptions(
                "classes is empty: give one name per label, or none for classes named by their label".into(),
            ));
        }
        if let Some(c) = &classes {
            crate::record_check::refuse_duplicate_classes(c)?;
        }
        let (pool, jobs) = pipeline::thread_pool(&options, "stoker-write")?;
        let out = options.out.clone();
        // `out` locked until the writer is dropped: a second writer or a conversion into
        // it is refused instead of interleaving its shards with ours. A part's root is
        // locked shared until its directory is ready, as a converted part's is.
        let claim = Claim::new(&out, part.is_some())?;
        let writer = refuse_nonempty(&out, part.is_some()).and_then(|()| {
            (claim.lock.held_dir(&out))
                .and_then(|dir| DatasetWriter::create_unlocked(options.writer_options(None), dir))
        });
        let writer = writer.and_then(|w| Ok((SourceSpool::new(w.dir())?, w)));
        let (spool, writer) = match writer {
            Ok(w) => w,
            Err(e) => {
                // Only the directories this call created, and only when empty.
                claim.abandon();
                return Err(in_writer_words(e.escalate(FaultStage::Writing)));
            }
        };
        let (mut made, lock) = claim.ready();
        // The directory was empty: everything in it from now on is this writer's.
        made.begins_afresh(true);
        // A raw record is its pixels whatever the input's size: a chunk holds at most
        // `CHUNK_BYTES` of them, but always one per thread (as `convert` holds one record
        // per worker).
        let chunk_samples = match options.raw_size {
            Some((w, h)) if options.encoding == Encoding::Raw => {
                let record = (w as usize) * (h as usize) * 3 + HEADER_LEN;
                (CHUNK_BYTES / record).max(jobs).min(CHUNK_SAMPLES)
            }
            _ => CHUNK_SAMPLES,
        };
        let part = part.map(|p| (p, written_fingerprint(&options, classes.as_deref())));
        Ok(SampleWriter {
            warnings: options.ignored_flags(),
            options: Arc::new(options),
            per_label: vec![0; classes.as_ref().map_or(0, Vec::len)],
            classes,
            max_label: None,
            source,
            pool: Arc::new(pool),
            pending: Vec::new(),
            pending_names: Vec::new(),
            pending_bytes: 0,
            chunk_samples,
            in_flight: None,
            cancel: Arc::new(AtomicBool::new(false)),
            writer: Some(writer),
            spool: Some(spool),
            totals: Totals::default(),
            samples: 0,
            made,
            lock,
            stopped: None,
            written: Vec::new(),
            finished: false,
            pid: std::process::id(),
            part,
            t0: Instant::now(),
        })
    }

    /// The output directory (a part's own directory, for a writer with a part).
    pub fn out(&self) -> &Path {
        &self.options.out
    }

    /// Notes on options that have no effect (as [`ConvertReport::warnings`] has them).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Samples given to [`SampleWriter::write`] so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Adds a sample: `image` is an encoded image (JPEG, PNG, ...), `label` its class, and
    /// `name` where it came from (empty: `sample N`, `N` counting the samples from 0;
    /// `part I sample N` for a writer of part `I`): what
    /// reports call it if it is skipped, and its record's name in the source map
    /// ([`crate::Dataset::source_of`]). The sample is transcoded later, with others, so a
    /// sample that cannot be converted is skipped (or, with `strict`, stops the writer) at
    /// a later call or at [`SampleWriter::finish`].
    ///
    /// # Errors
    ///
    /// [`FormatError::LabelOutOfRange`] for a label without a class (the writer goes on;
    /// the sample is not taken). Otherwise an error stops the writer and takes its output
    /// away: [`FormatError::StrictSample`], I/O errors, and [`FormatError::WriterStopped`]
    /// for every call after such an error.
    pub fn write(
        &mut self,
        image: impl Into<Vec<u8>>,
        label: u32,
        name: &str,
    ) -> Result<(), FormatError> {
        self.usable()?;
        let data = image.into();
        let len = data.len() as u64;
        self.take(data, len, label, name)
    }

    /// Adds a sample of `bytes` bytes, over [`SampleOptions::max_file_size`], without its
    /// bytes: it is skipped as too large, as [`SampleWriter::write`] would skip it, and the
    /// caller need not copy it first (a 2 GB sample would take 2 GB more).
    ///
    /// # Errors
    ///
    /// [`FormatError::InvalidOptions`] when `bytes` is not over the limit (give the bytes to
    /// `write`); otherwise as [`SampleWriter::write`].
    pub fn write_too_large(
        &mut self,
        bytes: u64,
        label: u32,
        name: &str,
    ) -> Result<(), FormatError> {
        self.usable()?;
        if bytes <= self.options.max_file_size {
            return Err(FormatError::InvalidOptions(format!(
                "a sample of {bytes} bytes is not over the input size limit of {} bytes: write its bytes",
                self.options.max_file_size
            )));
        }
        self.take(Vec::new(), bytes, label, name)
    }

    /// Takes a sample of `len` bytes (`data`, or nothing for one over the size limit).
    fn take(&mut self, data: Vec<u8>, len: u64, label: u32, name: &str) -> Result<(), FormatError> {
        let name = match name {
            // A part's names say which part: each part counts its samples from 0, and
            // the merged dataset's source map named two samples alike.
            "" => match &self.part {
                Some((p, _)) => PathBuf::from(format!("part {} sample {}", p.index, self.samples)),
                None => PathBuf::from(format!("sample {}", self.samples)),
            },
            name => PathBuf::from(name),
        };
        let classes = self
            .classes
            .as_ref()
            .map_or(super::list_file::MAX_CLASSES, |c| c.len() as u32);
        if label >= classes {
            return Err(FormatError::LabelOutOfRange {
                sample: name,
                label,
                classes,
            });
        }
        self.max_label = Some(self.max_label.map_or(label, |m| m.max(label)));
        self.samples += 1;
        self.pending_bytes += data.len();
        self.pending.push(Pending { data, len, label });
        self.pending_names.push(name);
        if self.makes_a_chunk(self.pending.len(), self.pending_bytes as u64) {
            self.submit().map_err(|e| self.stop(e))?;
        }
        Ok(())
    }

    /// Transcodes and writes the samples still held, then writes the manifest: the dataset
    /// is complete only now. Returns the report `convert` would give (`inputs` counts the
    /// samples, `ignored` is empty).
    ///
    /// # Errors
    ///
    /// [`FormatError::NoSamples`] when no record was written (a part may be empty); the
    /// errors of
    /// [`SampleWriter::write`]. On error nothing is left in the output directory.
    pub fn finish(mut self) -> Result<ConvertReport, FormatError> {
        self.usable()?;
        let done = self
            .submit()
            .and_then(|()| self.drain())
            .and_then(|()| self.write_manifest());
        done.map_err(|e| self.stop(e))
    }

    /// What [`SampleWriter::write`] of a sample of `bytes` bytes (`Some`), or
    /// [`SampleWriter::finish`] and [`SampleWriter::flush`] (`None`), would wait for before
    /// doing anything else: the chunk still being transcoded on the thread pool, which the
    /// samples held cannot follow there until its results are written. `None` when the
    /// call would not wait for the pool (it may still write records, and `finish` waits for
    /// the samples it hands over itself; [`SampleWriter::flush`] first, then wait here,
    /// avoids that).
    ///
    /// For a caller that must stay responsive while the pool works (in Python, Ctrl-C is
    /// only a flag until the calling thread looks): it waits on the [`ChunkDone`] in steps,
    /// without holding the writer, then makes the call.
    pub fn waits_for(&self, bytes: Option<u64>) -> Option<ChunkDone> {
        let chunk = self.in_flight.as_ref()?;
        let submits = bytes.is_none_or(|b| {
            let held = (self.pending_bytes as u64).saturating_add(b);
            self.makes_a_chunk(self.pending.len() + 1, held)
        });
        (submits && !chunk.done.is_done()).then(|| chunk.done.clone())
    }

    /// Whether `samples` samples of `bytes` bytes held make a chunk for the pool.
    fn makes_a_chunk(&self, samples: usize, bytes: u64) -> bool {
        samples >= self.chunk_samples || bytes >= CHUNK_BYTES as u64
    }

    /// Hands the samples held to the thread pool now, after writing the results of the
    /// chunk there (waiting for them: [`SampleWriter::waits_for`]), so that
    /// [`SampleWriter::finish`] has only their results to wait for.
    ///
    /// # Errors
    ///
    /// As [`SampleWriter::write`].
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.usable()?;
        self.submit().map_err(|e| self.stop(e))
    }

    /// Refuses a stopped writer, or its copy in a forked child (the thread pool is not
    /// there, and the output is the parent's).
    fn usable(&self) -> Result<(), FormatError> {
        let reason = match &self.stopped {
            Some(reason) => reason.clone(),
            None if std::process::id() != self.pid => "it was created in another process: a writer cannot be used in a fork of the process that made it".into(),
            None => return Ok(()),
        };
        Err(FormatError::WriterStopped {
            out: self.options.out.clone(),
            reason,
        })
    }

    /// Writes the chunk on the pool, then hands the samples held to the pool.
    fn submit(&mut self) -> Result<(), FormatError> {
        self.drain()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::take(&mut self.pending);
        let names = std::mem::take(&mut self.pending_names);
        self.pending_bytes = 0;
        let options = Arc::clone(&self.options);
        let cancel = Arc::clone(&self.cancel);
        let (tx, results) = mpsc::channel();
        let done = ChunkDone::default();
        let done_there = SetOnDrop(done.clone());
        self.pool.spawn(move || {
            let _done = done_there;
            let processed = chunk
                .into_par_iter()
                .map(|s| match cancel.load(Ordering::Relaxed) {
                    true => pipeline::skipped("the writer stopped".into()),
                    false => process(s, &options),
                })
                .collect::<Vec<_>>();
            // The writer may have been dropped meanwhile: nobody wants the results.
            let _ = tx.send(processed);
        });
        self.in_flight = Some(InFlight {
            names,
            results,
            done,
        });
        Ok(())
    }

    /// Waits for the chunk on the pool, if any, and writes its results in order.
    fn drain(&mut self) -> Result<(), FormatError> {
        let Some(chunk) = self.in_flight.take() else {
            return Ok(());
        };
        let results = chunk
            .results
            .recv()
            .map_err(|_| FormatError::WriterStopped {
                out: self.options.out.clone(),
                reason: "a transcoding thread stopped without a result".into(),
            })?;
        let lens: Vec<Option<u64>> = results.iter().map(value_len).collect();
        let writer = self
            .writer
            .as_mut()
            .expect("a usable writer has its writer");
        for (i, (p, name)) in results.into_iter().zip(&chunk.names).enumerate() {
            let label = match &p.outcome {
                Outcome::Record { meta, .. } => Some(meta.label as usize),
                Outcome::Skip(_) | Outcome::Stop(_) | Outcome::ShortOfMemory(_) => None,
            };
            let sink = Sink {
                writer: &mut *writer,
                totals: &mut self.totals,
                progress: &NoProgress,
                log: None,
            };
            let rest = &lens[i + 1..];
            let before = sink.writer.next_index();
            pipeline::write_one(&self.options, name, p, sink, || {
                rest.iter().map_while(|&l| l)
            })?;
            if writer.next_index() > before {
                use std::os::unix::ffi::OsStrExt;
                let spool = self.spool.as_mut().expect("a usable writer has its spool");
                // A full disk is said as for a shard: what was written, what is left.
                spool
                    .push(name.as_os_str().as_bytes())
                    .map_err(|e| writer.space_error(e))?;
            }
            if let Some(n) = label.and_then(|l| self.per_label.get_mut(l)) {
                *n += 1;
            }
        }
        Ok(())
    }

    /// Finishes the last shard and writes the manifest.
    fn write_manifest(&mut self) -> Result<ConvertReport, FormatError> {
        let writer = self
            .writer
            .as_ref()
            .expect("a usable writer has its writer");
        let written = writer.next_index();
        let skipped = &self.totals.skipped;
        // One part may be empty, as a converted part may; `merge` refuses a writing with
        // no record at all.
        if written == 0 && self.part.is_none() {
            return Err(FormatError::NoSamples {
                out: self.options.out.clone(),
                reason: nothing_written(self.samples, skipped),
            });
        }
        if written + skipped.len() as u64 != self.samples {
            return Err(FormatError::InvalidManifest {
                path: self.options.out.join(MANIFEST_FILE),
                reason: format!(
                    "not written: {written} records and {} skipped samples do not account for the {} samples given",
                    skipped.len(),
                    self.samples
                ),
            });
        }
        let classes = match &self.classes {
            Some(c) => c.clone(),
            None => (0..=self.max_label.unwrap_or(0))
                .map(|l| l.to_string())
                .collect(),
        };
        let mut provenance = Provenance::stoker(self.source.clone());
        provenance.flags = self.options.output_flags();
        provenance
            .flags
            .insert(super::ORDER_FLAG.into(), super::WRITTEN_ORDER.into());
        let mut writer = self.writer.take().expect("checked above");
        if let Some((p, fingerprint)) = self.part {
            writer.set_part(PartInfo {
                index: p.index,
                count: p.count,
                inputs: 0,
                first_input: 0,
                end_input: self.samples,
                listing: super::listing_text(fingerprint),
                written: true,
                records: Some(format!("{:016x}", writer.records_sum())),
            });
        }
        // From here the writer is gone: a failure takes away the files by these names.
        self.written = written_names(&writer);
        // Before the manifest, which names it; taken away with the shards on failure.
        let spool = self.spool.take().expect("a usable writer has its spool");
        if spool.records() != written {
            return Err(FormatError::InvalidManifest {
                path: self.options.out.join(MANIFEST_FILE),
                reason: format!(
                    "not written: {} names for {written} records",
                    spool.records()
                ),
            });
        }
        let sources = spool.finish(writer.dir());
        writer.set_sources(sources.map_err(|e| writer.space_error(e))?);
        let audit = self.totals.audit.clone();
        let held = writer.dir().clone();
        let manifest = writer.finish_with_audit(classes, provenance, Some(audit))?;
        self.finished = true;
        if held.check().is_err() {
            self.warnings.push(super::moved_at_finish(held.path()));
        }
        let empty_classes = match &self.classes {
            Some(c) => c
                .iter()
                .zip(&self.per_label)
                .filter(|(_, &n)| n == 0)
                .map(|(c, _)| c.clone())
                .collect(),
            None => Vec::new(),
        };
        let totals = std::mem::take(&mut self.totals);
        Ok(ConvertReport {
            inputs: self.samples,
            written,
            skipped: totals.skipped,
            ignored: Vec::new(),
            flat: false,
            webdataset: false,
            warnings: std::mem::take(&mut self.warnings),
            empty_classes,
            shards: manifest.shards.len() as u64,
            bytes: manifest.bytes,
            input_bytes: totals.input_bytes,
            seconds: self.t0.elapsed().as_secs_f64(),
            stored: totals.stored,
            transcoded: totals.transcoded,
            resumed: 0,
            audit: totals.audit,
            out: self.options.out.clone(),
            already_done: false,
        })
    }

    /// Stops the writer after `e`: takes away everything it wrote (the manifest first, if
    /// finishing got that far) and the directories it created, and returns `e` (a strict
    /// stop saying that nothing is left, a full disk as [`FormatError::WriterOutOfSpace`]).
    fn stop(&mut self, e: FormatError) -> FormatError {
        let e = in_writer_words(e);
        self.stopped = Some(e.to_string());
        self.cancel.store(true, Ordering::Relaxed);
        self.pending.clear();
        self.in_flight = None;
        let mut names = vec![
            MANIFEST_FILE.to_string(),
            format!("{MANIFEST_FILE}.tmp"),
            SOURCES_FILE.to_string(),
            format!("{SOURCES_FILE}.tmp"),
        ];
        match self.writer.take() {
            Some(w) => names.extend(written_names(&w)),
            None => names.append(&mut self.written),
        }
        let all = self.made.take_away(self.lock.dir(), &names);
        match e {
            FormatError::StrictInput { path, reason, .. } => FormatError::StrictSample {
                sample: path,
                reason,
                removed: all,
            },
            e => e,
        }
    }
}

impl Drop for SampleWriter {
    /// Unfinished, the output is taken away: a writer dropped on an error, an exception or
    /// Ctrl-C leaves no dataset, complete-looking or not. A forked child's copy leaves the
    /// parent's output alone.
    fn drop(&mut self) {
        if !self.finished && self.stopped.is_none() && std::process::id() == self.pid {
            self.stop(FormatError::Cancelled { resumable: false });
        }
    }
}

/// Transcodes one sample as `convert` transcodes a file of the same bytes (a sample over
/// `max_file_size` is skipped as such a file is).
fn process(s: Pending, options: &ConvertOptions) -> Processed {
    let len = s.len;
    if len > options.max_file_size {
        return pipeline::skipped(refusal_reason(&FormatError::FileTooLarge {
            path: PathBuf::new(),
            bytes: len,
            limit: options.max_file_size,
        }));
    }
    pipeline::process_bytes(s.data, s.label, options)
}

/// The value length a result's record has (header and payload), `None` for a skip.
fn value_len(p: &Processed) -> Option<u64> {
    match &p.outcome {
        Outcome::Record { payload, .. } => Some((HEADER_LEN + payload.len()) as u64),
        Outcome::Skip(_) | Outcome::Stop(_) | Outcome::ShortOfMemory(_) => None,
    }
}

/// Why a writer that wrote no record has no dataset: how many samples it was given, and
/// why the first few were skipped.
fn nothing_written(samples: u64, skipped: &[super::report::Skipped]) -> String {
    if samples == 0 {
        return "no sample was written".into();
    }
    format!(
        "none of the {samples} samples could be converted; the first skipped: {}",
        super::report::first_skipped(skipped)
    )
}

/// Refuses a part that cannot join the others: out of range, or without classes. (An
/// output root that holds a finished dataset is refused once it is locked: see `claim`.)
fn check_part(part: super::Part, classes: Option<&[String]>) -> Result<(), FormatError> {
    part.validate()?;
    if classes.is_none() {
        return Err(FormatError::InvalidOptions(format!(
            "part {} of {}: a writer with a part needs classes (one name per label): the parts of one dataset must name the same classes, and a part cannot know the largest label the others write",
            part.index, part.count
        )));
    }
    Ok(())
}

/// The fingerprint of what the parts of one writing must agree on, so that `merge` refuses
/// parts written with other classes or output options: the classes and the output flags
/// that a conversion's listing fingerprint covers, after a tag that no conversion's
/// listing (paths and labels first) hashes alike by design.
fn written_fingerprint(options: &ConvertOptions, classes: Option<&[String]>) -> u32 {
    let tag = crc32c::crc32c(b"stoker.Writer part\0");
    super::with_classes_and_flags(tag, classes.unwrap_or_default(), options)
}

/// `e` in a writer's own words: a conversion's `OutOfSpace`, `OutputMoved` and outside
/// faults say that `--resume` continues, and a writer cannot.
fn in_writer_words(e: FormatError) -> FormatError {
    match e {
        FormatError::OutOfSpace {
            shard,
            cause,
            records,
            bytes,
            errno,
        } => FormatError::WriterOutOfSpace {
            shard,
            cause,
            records,
            bytes,
            errno,
        },
        FormatError::OutputMoved { path } => FormatError::OutputExists {
            path,
            reason: "the output directory was removed or moved away under the writer (its path names another directory now, or none): the writer stopped, and nothing it wrote stays there; write the samples again with a new writer".into(),
        },
        // A conversion's words would say that --resume continues.
        FormatError::OutsideFault {
            path,
            source,
            fault,
            stage: FaultStage::Converting | FaultStage::Starting,
        } => FormatError::OutsideFault {
            path,
            source,
            fault,
            stage: FaultStage::Writing,
        },
        e => e,
    }
}

/// Refuses an output directory that holds anything: a dataset, a conversion's leftovers or
/// unrelated files (which a failed writer's clean-up must never have to tell from its own).
/// For a part (`part`), what is there is most likely what a writer of the same part left
/// when it was killed: no writer continues one, so the way on is to delete it.
fn refuse_nonempty(out: &Path, part: bool) -> Result<(), FormatError> {
    let exists = |reason: String| FormatError::OutputExists {
        path: out.to_path_buf(),
        reason,
    };
    let mut entries = std::fs::read_dir(out).map_err(|e| FormatError::io(out, e))?;
    let first = entries.next();
    if first.is_none() {
        return Ok(());
    }
    // After the listing: a dataset another writer finished meanwhile is called that, not
    // the shards of one that stopped.
    crate::out_dir::refuse_finished(out)?;
    let what_to_do = match part {
        // The part directory is locked, so no writer runs there now.
        true => format!("a writer of this part was killed before it finished; {REWRITE_PART}"),
        // Locked too: shards without a manifest are a writer's that did not finish.
        false if crate::out_dir::unfinished_shards(out) > 0 => "it holds the shards of a writer that stopped before it finished (killed?), and no writer continues one: delete the directory and write the samples again, or write into a new or empty directory".into(),
        false => "write into a new or empty directory".into(),
    };
    match first {
        None => Ok(()),
        Some(Ok(e)) => Err(exists(format!(
            "is not empty (found {:?}); {what_to_do}",
            e.file_name()
        ))),
        Some(Err(e)) => Err(FormatError::io(out, e)),
    }
}

/// How a written part that has no manifest is finished: a writer killed before `finish`
/// left its directory (one that failed or was dropped takes its files away), and a writer
/// starts only in an empty directory.
pub(crate) const REWRITE_PART: &str = "a writer cannot continue a part: delete this part directory and write the part again with a new writer (Python: stoker.Writer(out, classes, part=I, parts=N)), giving it all of the part's samples";
