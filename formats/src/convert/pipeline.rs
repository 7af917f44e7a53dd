//! The conversion's data flow: worker threads read and check inputs in chunks, in parallel,
//! and one writer takes their results in input order, so the output never depends on which
//! thread finished first.

use std::sync::{mpsc, Arc, Condvar, Mutex};

use rayon::prelude::*;

use super::journal::{save_journal, Totals};
use super::options::ConvertOptions;
use super::report::{Progress, Skipped};
use super::source;
use super::transcode::{self, Outcome, Processed};
use crate::buffer_pool::BufferPool;
use crate::input_file::{read_input_into, refusal_reason};
use crate::record::HEADER_LEN;
use crate::writer::DatasetWriter;
use crate::FormatError;

/// Inputs stat'ed ahead for one shard's layout at most (about 0.1 s on a local disk).
const EXPECTED_MAX: usize = 1 << 16;

/// How far the readers may get ahead of the writer, in payload bytes.
const READ_AHEAD_BYTES: usize = 32 << 20;

/// Processes `inputs` (the tail of the listing from `first`) and writes them in order.
pub(super) fn run(
    options: &ConvertOptions,
    inputs: &[source::Input],
    first: usize,
    fingerprint: u32,
    writer: &mut DatasetWriter,
    totals: &mut Totals,
    progress: &dyn Progress,
) -> Result<(), FormatError> {
    let jobs = options
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(|i| format!("stoker-convert-{i}"))
        .build()
        .map_err(|e| FormatError::InvalidOptions(format!("cannot start {jobs} threads: {e}")))?;
    let chunk = (jobs * 16).max(16);
    // Input buffers come back from the writer once written, so the pages of the read-ahead
    // window are faulted in once, not once per file.
    let buffers = Arc::new(BufferPool::new(2 * READ_AHEAD_BYTES));
    writer.set_buffer_pool(buffers.clone());
    let buffers = &buffers;
    // The workers read on while the writer writes, up to this many bytes.
    let ahead = &ReadAhead::new(READ_AHEAD_BYTES);
    let (tx, rx) = mpsc::sync_channel::<Vec<Processed>>(64);
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || {
            for part in inputs.chunks(chunk) {
                if !ahead.wait_for_room() {
                    break; // the writer stopped on an error
                }
                let done: Vec<Processed> = pool.install(|| {
                    part.par_iter()
                        .map(|input| {
                            let read = match &input.refused {
                                Some(reason) => Err(reason.clone()),
                                None => read_input_into(
                                    &input.path,
                                    options.max_file_size,
                                    buffers.take(),
                                )
                                .map_err(|e| refusal_reason(&e)),
                            };
                            match read {
                                Ok(data) => transcode::process(data, input.label, options),
                                Err(reason) => Processed {
                                    outcome: Outcome::Skip(reason),
                                    jpeg: None,
                                    other_image: false,
                                    input_bytes: 0,
                                },
                            }
                        })
                        .collect()
                });
                ahead.add(done.iter().map(held_bytes).sum());
                if tx.send(done).is_err() {
                    break; // the writer stopped on an error
                }
            }
        });
        let mut pos = first;
        let result = (|| {
            for batch in rx.iter() {
                ahead.taken(batch.iter().map(held_bytes).sum());
                for p in batch {
                    write_one(
                        options,
                        &inputs[pos - first..],
                        p,
                        pos,
                        fingerprint,
                        writer,
                        totals,
                        progress,
                    )?;
                    pos += 1;
                }
            }
            Ok(())
        })();
        ahead.close();
        drop(rx);
        let _ = producer.join();
        result
    })
}

/// Writes the result of `inputs[0]` (the inputs from it to the end of the listing).
#[allow(clippy::too_many_arguments)]
fn write_one(
    options: &ConvertOptions,
    inputs: &[source::Input],
    p: Processed,
    pos: usize,
    fingerprint: u32,
    writer: &mut DatasetWriter,
    totals: &mut Totals,
    progress: &dyn Progress,
) -> Result<(), FormatError> {
    let input = &inputs[0];
    match p.outcome {
        Outcome::Skip(reason) => {
            if options.strict {
                return Err(FormatError::StrictInput {
                    path: input.path.clone(),
                    reason,
                });
            }
            progress.skipped(&input.path, &reason);
            totals.skipped.push(Skipped {
                path: input.path.clone(),
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
                save_journal(&options.out, fingerprint, pos, writer, totals)?;
            }
            if !writer.shard_open() && options.stores_originals() {
                writer.expect_next_shard(
                    std::iter::once(value_len).chain(expected_value_lens(&inputs[1..])),
                );
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

/// The value lengths the inputs will have as records when stored unchanged: each file's
/// size (at the time of asking) plus the record header; refused inputs make no record. Lazy:
/// the writer asks for as many as its next shard holds, up to [`EXPECTED_MAX`] (a `stat`
/// each, on the writer's thread; a shard of more records is hashed after it is written).
fn expected_value_lens(inputs: &[source::Input]) -> impl Iterator<Item = u64> + '_ {
    inputs
        .iter()
        .take(EXPECTED_MAX)
        .filter(|i| i.refused.is_none())
        .map_while(|i| std::fs::metadata(&i.path).ok())
        .map(|m| m.len() + HEADER_LEN as u64)
}

/// Payload bytes a worker's result holds.
fn held_bytes(p: &Processed) -> usize {
    match &p.outcome {
        Outcome::Record { payload, .. } => payload.len(),
        Outcome::Skip(_) => 0,
    }
}

/// Bytes the workers have read that the writer has not yet taken.
///
/// The workers start a chunk only while this is at most `max`, so they keep reading while
/// the writer is busy writing, and hold at most `max` plus one chunk.
struct ReadAhead {
    /// Bytes waiting, and whether the writer has stopped (then nobody waits any more).
    state: Mutex<(usize, bool)>,
    room: Condvar,
    max: usize,
}

impl ReadAhead {
    fn new(max: usize) -> ReadAhead {
        ReadAhead {
            state: Mutex::new((0, false)),
            room: Condvar::new(),
            max,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, bool)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until there is room for another chunk; false when the writer has stopped.
    fn wait_for_room(&self) -> bool {
        let mut s = self.lock();
        while s.0 > self.max && !s.1 {
            s = self.room.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        !s.1
    }

    fn add(&self, bytes: usize) {
        self.lock().0 += bytes;
    }

    fn taken(&self, bytes: usize) {
        let mut s = self.lock();
        s.0 = s.0.saturating_sub(bytes);
        self.room.notify_all();
    }

    /// The writer stopped: wake and release any waiting worker.
    fn close(&self) {
        self.lock().1 = true;
        self.room.notify_all();
    }
}
