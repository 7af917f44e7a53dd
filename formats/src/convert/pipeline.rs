//! The conversion's data flow: worker threads read and transcode inputs in parallel, taking
//! them one at a time in listing order, and one writer takes their results in input order,
//! so the output never depends on which thread finished first.
//!
//! Memory is bounded by bytes, not by a count of files: a worker takes its next input only
//! while the results waiting for the writer hold at most [`READ_AHEAD_BYTES`]. So at most
//! that plus one record per worker is held, whether a record is a 40 kB JPEG or 100 MB of
//! raw pixels.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use super::journal::{JournalLog, Totals};
use super::options::ConvertOptions;
use super::report::{Progress, Skipped};
use super::source;
use super::source_root::SourceRoot;
use super::transcode::{self, Outcome, Processed};
use super::Source;
use crate::buffer_pool::BufferPool;
use crate::input_file::refusal_reason;
use crate::outside_fault::FaultStage;
use crate::record::HEADER_LEN;
use crate::writer::DatasetWriter;
use crate::FormatError;

/// Inputs stat'ed ahead for one shard's layout at most (about 0.1 s on a local disk).
const EXPECTED_MAX: usize = 1 << 16;

/// How far the workers may get ahead of the writer, in payload bytes. Enough to keep them
/// busy while the writer writes; more only makes stored JPEGs pass through more memory than
/// the CPU caches hold (and fault more fresh pages in), which slows a store-mode conversion.
const READ_AHEAD_BYTES: usize = 8 << 20;

/// A worker sends its results to the writer once it has this many, or this many payload
/// bytes (so a large record is sent at once), or before it waits.
const BATCH_INPUTS: usize = 16;
const BATCH_BYTES: usize = 1 << 20;

/// How often a writer waiting for results asks [`Progress::cancelled`].
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// Processes `inputs` (the tail of the listing from `first`) and writes them in order;
/// stops when the source `root` went away ([`SourceRoot::gone`]).
pub(super) fn run(
    options: &ConvertOptions,
    (inputs, first, root): (&[source::Input], usize, &SourceRoot),
    log: &mut JournalLog,
    writer: &mut DatasetWriter,
    totals: &mut Totals,
    progress: &dyn Progress,
) -> Result<(), FormatError> {
    let (pool, jobs) = thread_pool(options, "stoker-convert")?;
    // Input buffers come back from the writer once written, so the pages of the read-ahead
    // window are faulted in once, not once per file.
    let buffers = Arc::new(BufferPool::new(2 * READ_AHEAD_BYTES));
    writer.set_buffer_pool(buffers.clone());
    let buffers = &buffers;
    // Results of skipped inputs hold no payload, so a count bounds them too.
    let ahead = &ReadAhead::new(READ_AHEAD_BYTES, (jobs * 64).max(1024));
    let (tx, rx) = mpsc::channel::<Vec<(usize, Processed)>>();
    // The pool's threads work, this thread writes: `jobs` threads besides the caller's,
    // none started per run. The job (and `tx` with it) is dropped once every worker has
    // returned, which the writer sees as the channel closing.
    pool.in_place_scope(|scope| {
        scope.spawn_broadcast(move |_, _| {
            worker(ahead, || work(inputs, options, buffers, ahead, &tx));
        });
        // Stops the workers when the writer returns, or panics: a worker waiting for room
        // would otherwise wait for ever, and the scope's end with it.
        let _stop = StopWorkers(ahead);
        let result = (|| {
            // Results that arrived before the one the writer needs next.
            let mut early = BTreeMap::new();
            for pos in 0..inputs.len() {
                let p = loop {
                    if progress.cancelled() {
                        return Err(FormatError::Cancelled { resumable: true });
                    }
                    if let Some(p) = early.remove(&pos) {
                        break p;
                    }
                    match rx.recv_timeout(CANCEL_POLL) {
                        Ok(batch) => early.extend(batch),
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        // The workers stopped early: `convert` finds inputs unaccounted for.
                        Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
                    }
                };
                if matches!(p.outcome, Outcome::Skip(_)) {
                    if let Some(e) = root.gone(first + pos, first + inputs.len()) {
                        return Err(e);
                    }
                }
                let bytes = held_bytes(&p);
                let sink = Sink {
                    writer: &mut *writer,
                    totals: &mut *totals,
                    progress,
                    log: Some((&mut *log, first + pos)),
                };
                let rest = &inputs[pos + 1..];
                write_one(options, &inputs[pos].path, p, sink, || {
                    expected_value_lens(rest)
                })?;
                ahead.taken(bytes);
            }
            Ok(())
        })();
        // With `_stop`, stops the workers, which the scope then waits for.
        drop(rx);
        result
    })
}

/// Runs one worker's loop `work`. A worker that panics (decoders' panics are already caught
/// per input) stops the others: the input it held never reaches the writer, which would
/// wait for it while the others fill the read-ahead window and then wait for room, for
/// ever. Stopped, they return, the channel closes, and `convert` finds inputs unaccounted
/// for, an error. Not caught, the panic would end `run`'s scope in a panic.
fn worker(ahead: &ReadAhead, work: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(work)).is_err() {
        ahead.close();
    }
}

/// Closes the read-ahead when dropped: the writer has stopped, however it stopped.
struct StopWorkers<'a>(&'a ReadAhead);

impl Drop for StopWorkers<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// One worker: takes inputs from `ahead` until none is left or the writer stops, and sends
/// their results to the writer in small batches (one wake-up of the writer per batch, not
/// per input, which is most of the pipeline's cost for small stored JPEGs).
fn work(
    inputs: &[source::Input],
    options: &ConvertOptions,
    buffers: &BufferPool,
    ahead: &ReadAhead,
    tx: &mpsc::Sender<Vec<(usize, Processed)>>,
) {
    let mut batch = Vec::new();
    let mut batch_bytes = 0;
    // False when the writer has stopped on an error.
    let send = |batch: &mut Vec<_>| batch.is_empty() || tx.send(std::mem::take(batch)).is_ok();
    loop {
        let i = match ahead.next(inputs.len(), false) {
            Next::Input(i) => i,
            Next::Done => break,
            // Results kept here while waiting could be the ones the writer needs before it
            // makes room: they go first.
            Next::Full => {
                batch_bytes = 0;
                if !send(&mut batch) {
                    return;
                }
                match ahead.next(inputs.len(), true) {
                    Next::Input(i) => i,
                    Next::Done | Next::Full => break,
                }
            }
        };
        let p = process(&inputs[i], options, buffers);
        let bytes = held_bytes(&p);
        ahead.add(bytes);
        batch.push((i, p));
        batch_bytes += bytes;
        if batch.len() >= BATCH_INPUTS || batch_bytes >= BATCH_BYTES {
            batch_bytes = 0;
            if !send(&mut batch) {
                return;
            }
        }
    }
    send(&mut batch);
}

/// The threads that transcode inputs (`options.jobs`, else one per available CPU), named
/// `name-N`, and how many they are.
pub(super) fn thread_pool(
    options: &ConvertOptions,
    name: &'static str,
) -> Result<(rayon::ThreadPool, usize), FormatError> {
    let jobs = options
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(move |i| format!("{name}-{i}"))
        .build()
        .map_err(|e| FormatError::Threads {
            what: format!("{jobs} threads"),
            reason: e.to_string(),
        })?;
    Ok((pool, jobs))
}

/// Whether `--strict` skips `input` (transcoded as `p`) instead of failing on it: a file
/// of an image folder (not a listed file, a tar member or a written sample, which the user
/// gave as an image) that is no image and hidden or not named as one: `.DS_Store`,
/// `._IMG_0001.jpg`, `.gitkeep`, `Thumbs.db`, `README.txt`, which torchvision's
/// `ImageFolder` does not read either (or fails on, inside PIL). A tree copied from macOS
/// could not be converted under `--strict` until cleaned.
fn strict_skips(options: &ConvertOptions, input: &source::Input, p: &Processed) -> bool {
    p.not_image
        && matches!(input.bytes, super::listing::InputBytes::File)
        && strict_skips_unnamed(options, &input.path)
}

/// Whether `--strict` skips a file called `path` that is no image: it is one of an image
/// folder, and its name does not say image or it is hidden (macOS's `._IMG_0001.jpg`). A
/// resumed strict conversion checks its journal's skips with this too.
pub(super) fn strict_skips_unnamed(options: &ConvertOptions, path: &Path) -> bool {
    let hidden = path.file_name().is_some_and(super::walk::is_hidden);
    matches!(options.source, Source::ImageFolder(_))
        && (hidden || !super::image_kinds::named_as_image(path))
}

/// Reads and transcodes one input; never panics (a panic in a decoder makes the input a
/// skip that says so, instead of stopping the other workers' inputs from being written).
fn process(input: &source::Input, options: &ConvertOptions, buffers: &BufferPool) -> Processed {
    if let Some(reason) = &input.refused {
        return skipped(reason.clone());
    }
    match input.read_into(options.max_file_size, buffers.take()) {
        Ok(data) => {
            let mut p = process_bytes(data, input.label, options);
            p.strict_skips = strict_skips(options, input, &p);
            p
        }
        Err(e) if e.is_outside_fault() => Processed {
            outcome: Outcome::Stop(e.escalate(FaultStage::Converting)),
            ..skipped(String::new())
        },
        Err(e) => skipped(refusal_reason(&e)),
    }
}

/// Transcodes one input's bytes, however they were got (a file, a tar member, a sample a
/// caller handed to [`super::SampleWriter`]); never panics.
pub(super) fn process_bytes(data: Vec<u8>, label: u32, options: &ConvertOptions) -> Processed {
    catch_unwind(AssertUnwindSafe(|| {
        transcode::process(data, label, options)
    }))
    .unwrap_or_else(|_| skipped("stoker failed on this file (a panic, printed above)".into()))
}

/// The result of an input skipped before it was transcoded.
pub(super) fn skipped(reason: String) -> Processed {
    Processed {
        outcome: Outcome::Skip(reason),
        jpeg: None,
        other_image: false,
        not_image: false,
        strict_skips: false,
        input_bytes: 0,
    }
}

/// Where a written result goes: the writer, the totals, the progress, and for a
/// conversion the journal, saved (with the position of the input) when a shard is finished.
pub(super) struct Sink<'a> {
    pub writer: &'a mut DatasetWriter,
    pub totals: &'a mut Totals,
    pub progress: &'a dyn Progress,
    pub log: Option<(&'a mut JournalLog, usize)>,
}

/// Writes the result `p` of the input called `name`. `expected` gives, when asked, the
/// value lengths that it and the inputs after it are expected to have (see
/// [`DatasetWriter::expect_next_shard`]).
pub(super) fn write_one<I: Iterator<Item = u64>>(
    options: &ConvertOptions,
    name: &Path,
    p: Processed,
    sink: Sink<'_>,
    expected: impl FnOnce() -> I,
) -> Result<(), FormatError> {
    let Sink {
        writer,
        totals,
        progress,
        log,
    } = sink;
    match p.outcome {
        // Before the strict check: the input is not to blame, and the run can be resumed.
        Outcome::Stop(e) => return Err(e),
        Outcome::ShortOfMemory(reason) => {
            return Err(FormatError::OutsideFault {
                path: name.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::OutOfMemory, reason),
                fault: crate::OutsideFault::Memory,
                stage: FaultStage::Converting,
            })
        }
        Outcome::Skip(reason) => {
            let reason = super::report::capped_reason(reason);
            if options.strict && !p.strict_skips {
                // As a kill leaves it, until `convert` takes a fresh run's output away.
                return Err(FormatError::StrictInput {
                    path: name.to_path_buf(),
                    reason,
                    resumable: true,
                });
            }
            progress.skipped(name, &reason);
            // Where it was, so that the source map names the records around it right.
            if let (Some((_, pos)), Some(at)) = (&log, &mut totals.skipped_at) {
                at.push(*pos as u64);
            }
            totals.skipped.push(Skipped {
                path: name.to_path_buf(),
                reason,
            });
        }
        Outcome::Record {
            meta,
            payload,
            crc32c,
            stored,
            for_gpu,
        } => {
            if let Some(n) = options.fail_after {
                if writer.next_index() >= n {
                    return Err(FormatError::Injected {
                        written: writer.next_index(),
                    });
                }
            }
            let value_len = (HEADER_LEN + payload.len()) as u64;
            if writer.roll_if_needed(value_len)?.is_some() {
                // A shard was finished before this input: save how far we got.
                if let Some((log, pos)) = log {
                    log.save(pos, writer, totals)?;
                }
            }
            if !writer.shard_open() && options.stores_originals() {
                writer.expect_next_shard(std::iter::once(value_len).chain(expected()));
            }
            writer.push_owned(meta, payload, crc32c)?;
            if stored {
                totals.stored += 1;
            } else {
                totals.transcoded += 1;
            }
            totals.audit.reencoded_for_gpu += u64::from(for_gpu);
        }
    }
    if let Some(c) = &p.jpeg {
        totals.audit.add_jpeg(c);
    }
    totals.audit.other_images += u64::from(p.other_image);
    totals.input_bytes += p.input_bytes;
    progress.advance(1, p.input_bytes);
    Ok(())
}

/// The value lengths the inputs will have as records when stored unchanged: each input's
/// size (a file's at the time of asking) plus the record header; refused inputs make no
/// record. Lazy: the writer asks for as many as its next shard holds, up to
/// [`EXPECTED_MAX`] (a `stat` per file, on the writer's thread; a shard of more records is
/// hashed after it is written).
fn expected_value_lens(inputs: &[source::Input]) -> impl Iterator<Item = u64> + '_ {
    inputs
        .iter()
        .take(EXPECTED_MAX)
        .filter(|i| i.refused.is_none())
        .map_while(|i| i.size_now())
        .map(|len| len + HEADER_LEN as u64)
}

/// Payload bytes a worker's result holds.
pub(super) fn held_bytes(p: &Processed) -> usize {
    match &p.outcome {
        Outcome::Record { payload, .. } => payload.len(),
        Outcome::Skip(_) | Outcome::Stop(_) | Outcome::ShortOfMemory(_) => 0,
    }
}

/// The inputs handed to workers and the bytes of their results the writer has not yet
/// taken.
///
/// A worker takes the next input only while those bytes are at most `max` and fewer than
/// `window` inputs are between the writer and the next input. Held memory only grows when a
/// worker takes an input, and each worker works on one input at a time, so results and work
/// in progress together hold at most `max` plus one record per worker. The input the writer
/// waits for has always been taken, so waiting here never stops the writer.
struct ReadAhead {
    state: Mutex<AheadState>,
    room: Condvar,
    max: usize,
    window: usize,
}

/// What [`ReadAhead::next`] hands a worker.
enum Next {
    /// This input is the worker's.
    Input(usize),
    /// No room now.
    Full,
    /// Every input is handed out, or the writer has stopped.
    Done,
}

struct AheadState {
    /// The next input to hand out (an index into the inputs `run` was given).
    next: usize,
    /// Inputs the writer has taken (written or skipped).
    taken: usize,
    /// Payload bytes of results not yet taken.
    held: usize,
    /// The writer has stopped: nobody waits, nothing more is handed out.
    closed: bool,
    /// Workers waiting for room.
    waiting: usize,
}

impl ReadAhead {
    fn new(max: usize, window: usize) -> ReadAhead {
        ReadAhead {
            state: Mutex::new(AheadState {
                next: 0,
                taken: 0,
                held: 0,
                closed: false,
                waiting: 0,
            }),
            room: Condvar::new(),
            max,
            window,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AheadState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands out the next of `end` inputs when there is room; waits for room if `wait`,
    /// else says that there is none.
    ///
    /// A worker that found no room waits until the writer has taken half of what is held,
    /// not just one result: woken for every result written, the workers would each take
    /// one input at a time and take turns with the writer for the CPU.
    fn next(&self, end: usize, wait: bool) -> Next {
        let mut s = self.lock();
        if wait && !self.room_for(&s, 1) {
            s.waiting += 1;
            while !s.closed && s.next < end && !self.room_for(&s, 2) {
                s = self.room.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            s.waiting -= 1;
        }
        if s.closed || s.next >= end {
            return Next::Done;
        }
        if !wait && !self.room_for(&s, 1) {
            return Next::Full;
        }
        s.next += 1;
        Next::Input(s.next - 1)
    }

    /// Whether results and inputs ahead of the writer are at most `1 / part` of the bounds.
    fn room_for(&self, s: &AheadState, part: usize) -> bool {
        s.held <= self.max / part && s.next - s.taken < self.window / part
    }

    /// A worker finished an input whose result holds `bytes`.
    fn add(&self, bytes: usize) {
        self.lock().held += bytes;
    }

    /// The writer took the next input's result, which held `bytes`.
    fn taken(&self, bytes: usize) {
        let mut s = self.lock();
        s.held = s.held.saturating_sub(bytes);
        s.taken += 1;
        if s.waiting > 0 && self.room_for(&s, 2) {
            self.room.notify_all();
        }
    }

    /// The writer stopped: wake and release any waiting worker.
    fn close(&self) {
        self.lock().closed = true;
        self.room.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `ReadAhead` with no room left, and a thread waiting for room in it: what it
    /// is handed is sent on the receiver returned (nothing while it still waits).
    fn full_with_a_waiting_worker() -> (&'static ReadAhead, mpsc::Receiver<bool>) {
        // Leaked: a worker that never stops outlives the test.
        let ahead: &'static ReadAhead = Box::leak(Box::new(ReadAhead::new(0, 2)));
        assert!(matches!(ahead.next(10, false), Next::Input(0)));
        assert!(matches!(ahead.next(10, false), Next::Input(1)));
        assert!(matches!(ahead.next(10, false), Next::Full));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(matches!(ahead.next(10, true), Next::Done)));
        // It waits: the writer has taken nothing.
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        (ahead, rx)
    }

    #[test]
    fn a_panicking_worker_releases_the_workers_waiting_for_room() {
        let (ahead, released) = full_with_a_waiting_worker();
        // Holding input 0, which the writer waits for, this worker panics.
        worker(ahead, || panic!("a worker's bug, injected"));
        assert_eq!(released.recv_timeout(Duration::from_secs(10)), Ok(true));
    }

    #[test]
    fn a_panicking_writer_releases_the_workers_waiting_for_room() {
        let (ahead, released) = full_with_a_waiting_worker();
        let _ = catch_unwind(|| {
            let _stop = StopWorkers(ahead);
            panic!("a writer's bug, injected");
        });
        assert_eq!(released.recv_timeout(Duration::from_secs(10)), Ok(true));
    }
}
