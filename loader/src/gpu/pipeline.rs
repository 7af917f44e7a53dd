//! The GPU backend's epoch: one producer thread walks the epoch's batches in
//! order; for each it takes a free slot of the staging ring. Raw records: the
//! reader pool copies every record straight into the slot's pinned buffer and
//! the H2D copy goes on the copy stream. JPEG records: a read-ahead thread reads
//! and checks the batch, and nvJPEG decodes it into the slot's device arena on
//! decode stream `k % 2`. Then the fused transform runs on the compute stream,
//! and the batch is handed over with its ready event. Nothing waits for the GPU
//! on the way: while the consumer trains on batch i, batch i+1 is being
//! transformed, i+2 copied or decoded and i+3 read, bounded by the ring.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use cudarc::driver::CudaViewMut;
use rayon::prelude::*;
use stoker_decode::{BatchUse, CpuDecoder, GpuDecoder, Limits, Region};
use stoker_formats::{DatasetReader, Encoding};

use super::driver_err;
use super::handoff::CudaImages;
use super::kernel::{ImageParams, KernelDtype, LaunchBuffers, TransformArgs};
use super::nvml::Sampler;
use super::staging::Slot;
use super::Shared;
use crate::batch::{Batch, Images};
use crate::builder::Output;
use crate::error::LoaderError;
use crate::metrics::Stage;
use crate::pipeline::{
    cpu_decode_counted, panic_message, raw_payload_len, read_checked, reader_unavailable,
    EpochPlan, EpochStream, Next,
};
use crate::transform::resize::CropResizer;
use crate::transform::SampleParams;

/// How often blocked producer calls look at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// The consumer side of one GPU epoch.
pub(crate) struct GpuEpoch {
    results: Receiver<Result<Batch, LoaderError>>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    /// GPU / JPEG-engine / CPU utilization over the epoch (NVML where available).
    sampler: Option<Sampler>,
    producer: Option<JoinHandle<()>>,
    next: u64,
    end: u64,
}

impl GpuEpoch {
    pub(crate) fn start(shared: Arc<Shared>, plan: EpochPlan) -> Result<GpuEpoch, LoaderError> {
        let (tx, rx) = crossbeam_channel::bounded(shared.prefetch.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        let next = plan.start_batch;
        let end = plan.num_batches;
        let producer = {
            let stop = Arc::clone(&stop);
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("stoker-gpu".into())
                .spawn(move || produce(&shared, &plan, &tx, &stop))
                .map_err(|e| LoaderError::Thread {
                    thread: "stoker-gpu".into(),
                    reason: e.to_string(),
                })?
        };
        let sampler = Sampler::start_for(&shared.ctx, Some(Arc::clone(&shared.metrics)));
        Ok(GpuEpoch {
            results: rx,
            shared,
            stop,
            sampler,
            producer: Some(producer),
            next,
            end,
        })
    }
}

impl EpochStream for GpuEpoch {
    fn next_batch(&mut self, deadline: Option<Instant>) -> Next {
        if self.next >= self.end {
            return Next::Done;
        }
        let received = match deadline {
            None => self.results.recv().map_err(|_| false),
            Some(d) => self.results.recv_deadline(d).map_err(|e| e.is_timeout()),
        };
        match received {
            Err(true) => Next::Pending,
            Ok(item) => {
                self.next += 1;
                Next::Ready(match (item, &self.shared.consumer_stream) {
                    (Ok(batch), Some(stream)) => match &batch.images {
                        // GPU-side wait on the user's stream (`LoaderBuilder::cuda_stream`).
                        Images::Cuda(images) => images.wait(stream).map(|()| batch),
                        Images::Host(_) => Ok(batch),
                    },
                    (item, _) => item,
                })
            }
            Err(false) => {
                // The producer is gone before the end: report it once, then end.
                self.next = self.end;
                Next::Ready(Err(LoaderError::Thread {
                    thread: "stoker-gpu".into(),
                    reason: "the GPU producer stopped before the end of the epoch".into(),
                }))
            }
        }
    }

    fn ready(&self) -> u64 {
        self.results.len() as u64
    }
}

impl Drop for GpuEpoch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Unblock a producer waiting to send: drop our receiver first.
        let (_, dead) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.results, dead));
        if let Some(handle) = self.producer.take() {
            let _ = handle.join();
        }
        account_finished(&self.shared);
        if let Some(sampler) = self.sampler.take() {
            let u = sampler.utilization();
            tracing::info!(verdict = %u.verdict(), "GPU loader epoch utilization");
        }
    }
}

/// Accounts the GPU time of returned slots whose work has completed, without
/// blocking (the producer accounts the others when it reuses them).
fn account_finished(shared: &Shared) {
    let mut back = Vec::new();
    while let Ok(mut slot) = shared.free_rx.try_recv() {
        if slot.in_flight.is_some() && slot.ready.try_is_complete().unwrap_or(false) {
            if let Ok(Some((prev, h2d_ms, kernel_ms))) = slot.begin_host_writes() {
                account_gpu(shared, prev, h2d_ms, kernel_ms);
            }
        }
        back.push(slot);
    }
    for slot in back {
        let _ = shared.free_tx.try_send(slot);
    }
}

/// The producer thread: every batch of the plan, in order.
///
/// On the nvJPEG route a second thread (`stoker-gpu-read`) reads, CRC-checks and
/// probes the records of batch k+1 while this one decodes batch k (bounded to one
/// batch ahead); the payloads stay borrowed from that thread's memory-mapped
/// reader, which outlives both threads.
fn produce(
    shared: &Shared,
    plan: &EpochPlan,
    tx: &Sender<Result<Batch, LoaderError>>,
    stop: &AtomicBool,
) {
    if let Err(e) = shared.ctx.bind_to_thread() {
        let _ = tx.send(Err(driver_err("cuCtxSetCurrent (producer)", e)));
        return;
    }
    // The producer's own reader and CPU decoder (nvJPEG route: records that the
    // read-ahead did not check, and replacements, are read here, their bytes
    // borrowed from the memory map while nvJPEG parses them).
    let mut state = ReaderState::new(shared);
    // Without a reader for the read-ahead, the producer reads every record itself.
    let mut ahead_reader = shared
        .nvjpeg
        .as_ref()
        .and_then(|_| shared.dataset.reader().ok());
    std::thread::scope(|scope| {
        let ahead = ahead_reader.as_mut().and_then(|reader| {
            let (ahead_tx, ahead_rx) = crossbeam_channel::bounded(1);
            std::thread::Builder::new()
                .name("stoker-gpu-read".into())
                .spawn_scoped(scope, move || {
                    // `&mut` moved in (the reader is Send, not Sync), used shared
                    // here for the whole scope: the payloads live as long.
                    let reader: &DatasetReader = reader;
                    read_ahead(shared, plan, reader, stop, &ahead_tx);
                })
                .ok()
                .map(|_| ahead_rx)
        });
        produce_batches(shared, plan, tx, stop, &mut state, ahead.as_ref());
        // Dropping `ahead` here ends a read-ahead blocked on its send.
    });
}

/// The batches of the plan, in order (see [`produce`]).
fn produce_batches<'r>(
    shared: &Shared,
    plan: &EpochPlan,
    tx: &Sender<Result<Batch, LoaderError>>,
    stop: &AtomicBool,
    state: &mut ReaderState,
    ahead: Option<&Receiver<(u64, Prepared<'r>)>>,
) {
    for k in plan.start_batch..plan.num_batches {
        // Taken before the slot so that the read-ahead of k+1 starts at once.
        let prepared = match ahead {
            Some(rx) if shared.nvjpeg.is_some() => match next_prepared(rx, k, stop) {
                Prepared::Stopped => return,
                p => Some(p),
            },
            _ => None,
        };
        let slot = match take_slot(shared, stop, tx) {
            Some(Ok(slot)) => slot,
            Some(Err(e)) => {
                let _ = tx.send(Err(e));
                return;
            }
            None => return,
        };
        let built = catch_unwind(AssertUnwindSafe(|| match &shared.nvjpeg {
            Some(decoder) => {
                build_batch_nvjpeg(shared, plan, k, slot, state, decoder, stop, prepared)
            }
            None => build_batch(shared, plan, k, slot, stop),
        }));
        let item = match built {
            Ok(Some(item)) => item,
            Ok(None) => return, // stopped
            Err(panic) => {
                // The slot went down with the panic (its `Drop` waited for the
                // device while unwinding): count it out, so that the reported
                // memory stays true and `take_slot` can grow the ring back if the
                // consumer needs it.
                let total = shared
                    .slots
                    .fetch_sub(1, Ordering::AcqRel)
                    .saturating_sub(1);
                report_slot_memory(shared, total);
                Err(LoaderError::Thread {
                    thread: "stoker-gpu".into(),
                    reason: panic_message(&panic),
                })
            }
        };
        let mut item = item;
        loop {
            match tx.send_timeout(item, POLL) {
                Ok(()) => break,
                Err(SendTimeoutError::Timeout(back)) => {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    item = back;
                }
                Err(SendTimeoutError::Disconnected(_)) => return,
            }
        }
    }
}

/// A record read, CRC-checked and probed (by the read-ahead or the producer).
struct Checked<'r> {
    payload: &'r [u8],
    label: u32,
    info: stoker_decode::ImageInfo,
}

/// What the read-ahead prepared for one batch.
enum Prepared<'r> {
    /// One entry per position of the batch, in order.
    Records(Vec<Result<Checked<'r>, LoaderError>>),
    /// The read-ahead is gone (or out of step): the producer reads the batch itself.
    Missing,
    /// The epoch is being stopped.
    Stopped,
}

/// The read-ahead's batch `k`: waits for it, watching the stop flag.
fn next_prepared<'r>(
    rx: &Receiver<(u64, Prepared<'r>)>,
    k: u64,
    stop: &AtomicBool,
) -> Prepared<'r> {
    loop {
        match rx.recv_timeout(POLL) {
            Ok((got, p)) if got == k => return p,
            // Cannot happen (both walk the same batches in order); read it here.
            Ok(_) => return Prepared::Missing,
            Err(RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Acquire) {
                    return Prepared::Stopped;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return Prepared::Missing,
        }
    }
}

/// The read-ahead thread of the nvJPEG route: checks the records of each batch
/// of the plan in order and hands them over, one batch ahead at most.
fn read_ahead<'r>(
    shared: &Shared,
    plan: &EpochPlan,
    reader: &'r DatasetReader,
    stop: &AtomicBool,
    out: &Sender<(u64, Prepared<'r>)>,
) {
    let limits = shared.limits;
    for k in plan.start_batch..plan.num_batches {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let records = plan
            .batch_range(k)
            .map(|pos| check_record(shared, reader, plan.order[pos], &limits))
            .collect();
        // Fails once the producer is done (its receiver dropped).
        if out.send((k, Prepared::Records(records))).is_err() {
            return;
        }
    }
}

/// Reads record `index`, checks its CRC, that it is a JPEG, and its header.
fn check_record<'r>(
    shared: &Shared,
    reader: &'r DatasetReader,
    index: u64,
    limits: &Limits,
) -> Result<Checked<'r>, LoaderError> {
    let r = read_checked(reader, index, &shared.metrics)?;
    if r.header.encoding != Encoding::Jpeg {
        return Err(LoaderError::UnusableRecord {
            index,
            reason: "a raw record in a JPEG dataset".into(),
        });
    }
    let info = stoker_decode::probe(r.payload, limits)
        .map_err(|source| LoaderError::Decode { index, source })?;
    Ok(Checked {
        payload: r.payload,
        label: r.header.label,
        info,
    })
}

/// A free slot, or `None` once stopped.
///
/// When the consumer holds every slot (it keeps batches alive instead of dropping
/// them) and nothing is waiting in the queue, waiting would never end: the ring
/// grows by one slot instead (logged once per growth; reported in the stats'
/// pinned/device bytes), as the CPU path allocates a buffer in that case.
fn take_slot(
    shared: &Shared,
    stop: &AtomicBool,
    queued: &Sender<Result<Batch, LoaderError>>,
) -> Option<Result<Box<Slot>, LoaderError>> {
    loop {
        match shared.free_rx.recv_timeout(POLL) {
            Ok(slot) => return Some(Ok(slot)),
            Err(RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Acquire) {
                    return None;
                }
                if queued.is_empty() && shared.free_rx.is_empty() {
                    return Some(grow(shared));
                }
            }
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// Allocates one more slot (see [`take_slot`]).
fn grow(shared: &Shared) -> Result<Box<Slot>, LoaderError> {
    let slot = Slot::new(
        &shared.ctx,
        &shared.compute,
        shared.sizes,
        shared.write_combined,
    )?;
    let total = shared.slots.fetch_add(1, Ordering::AcqRel) + 1;
    tracing::warn!(
        slots = total,
        "the consumer holds every GPU batch slot: adding one (drop batches to keep memory fixed)"
    );
    report_slot_memory(shared, total);
    Ok(Box::new(slot))
}

/// Reports the pinned and device memory of `slots` batch slots.
fn report_slot_memory(shared: &Shared, slots: usize) {
    shared
        .metrics
        .set_pinned_bytes((slots * shared.sizes.pinned_bytes()) as u64);
    shared
        .metrics
        .set_device_bytes((slots * shared.sizes.device_bytes()) as u64);
}

/// One image staged in a slot.
#[derive(Clone, Copy, Debug)]
struct Staged {
    index: u64,
    label: u32,
    width: u32,
    height: u32,
    channels: u32,
    crop: (u32, u32, u32, u32),
    flip: bool,
    /// Bytes of the staged image (`width * height * channels`).
    bytes: usize,
    /// Host address of the record's pixels in the registered dataset map, when
    /// they are copied to the device from there (`Shared::direct`) instead of
    /// from the slot's pinned staging.
    source: Option<usize>,
}

/// Per-reader-thread state, made once per rayon split.
struct ReaderState {
    reader: Result<DatasetReader, String>,
    decoder: CpuDecoder,
    /// Decoded pixels of images larger than a staging stride.
    scratch: Vec<u8>,
    resizer: CropResizer,
}

impl ReaderState {
    fn new(shared: &Shared) -> ReaderState {
        ReaderState {
            reader: shared.dataset.reader().map_err(|e| e.to_string()),
            decoder: CpuDecoder::new(shared.limits),
            scratch: Vec::new(),
            resizer: CropResizer::new(shared.size),
        }
    }
}

/// How the pixels of a batch reach the device arena.
#[derive(Clone, Copy, Debug)]
enum Copies<'a> {
    /// Raw records on the copy stream, `bytes` in all: staged in pinned memory by
    /// the reader pool and copied in one piece, or, `by_record` (some are in the
    /// registered dataset map), copied record by record into the arena.
    Staged { bytes: usize, by_record: bool },
    /// Decoded into the arena by nvJPEG on a decode stream (joined by the compute
    /// stream); only these `(pinned offset, arena offset, len)` regions (CPU-resized
    /// oversize images) come from pinned memory.
    Decoded {
        regions: &'a [(usize, usize, usize)],
    },
}

/// Builds batch `k` into `slot`; `None` if stopped meanwhile (the slot goes back).
fn build_batch(
    shared: &Shared,
    plan: &EpochPlan,
    k: u64,
    mut slot: Box<Slot>,
    stop: &AtomicBool,
) -> Option<Result<Batch, LoaderError>> {
    let give_back = |slot: Box<Slot>| {
        let _ = shared.free_tx.try_send(slot);
    };
    // Counters of the previous use of this slot, and the pinned-reuse wait.
    match slot.begin_host_writes() {
        Ok(Some((prev, h2d_ms, kernel_ms))) => account_gpu(shared, prev, h2d_ms, kernel_ms),
        Ok(None) => {}
        Err(e) => {
            give_back(slot);
            return Some(Err(e));
        }
    }
    let range = plan.batch_range(k);
    let n = range.len();
    let stride = slot.sizes.stride;
    // The host stages every image here: pinned and arena share one layout.
    debug_assert_eq!(slot.sizes.pinned_stride, stride);
    let staged: Vec<Result<Staged, LoaderError>> = {
        let pinned = match slot.pinned.as_mut_slice() {
            Ok(p) => p,
            Err(e) => {
                give_back(slot);
                return Some(Err(driver_err("pinned staging access", e)));
            }
        };
        let positions: Vec<usize> = range.collect();
        shared.pool.install(|| {
            pinned[..n * stride]
                .par_chunks_mut(stride)
                .zip(positions.par_iter())
                .map_init(
                    || ReaderState::new(shared),
                    |state, (dst, &pos)| {
                        if stop.load(Ordering::Relaxed) {
                            return Err(LoaderError::Thread {
                                thread: "stoker-gpu".into(),
                                reason: "stopped".into(),
                            });
                        }
                        stage_position(shared, plan, pos, state, dst)
                    },
                )
                .collect()
        })
    };
    if stop.load(Ordering::Acquire) {
        give_back(slot);
        return None;
    }
    let mut images = Vec::with_capacity(n);
    for s in staged {
        match s {
            Ok(s) => images.push(s),
            Err(e) => {
                give_back(slot);
                return Some(Err(e));
            }
        }
    }
    // One copy of the staging prefix, or (records in the registered map) one per
    // record, of its own bytes.
    let by_record = images.iter().any(|s| s.source.is_some());
    let bytes = if by_record {
        images.iter().map(|s| s.bytes).sum()
    } else {
        match images.last() {
            Some(last) => (n - 1) * stride + last.bytes,
            None => 0,
        }
    };
    Some(enqueue(
        shared,
        plan,
        k,
        slot,
        &images,
        Copies::Staged { bytes, by_record },
    ))
}

/// Builds batch `k` through nvJPEG: the records are read and checked on the
/// producer thread (bytes borrowed from the memory map) and decoded by `decoder`
/// straight into the slot's arena on decode stream `k % 2` (hardware engines, the
/// CUDA decoder or the CPU, per image). A record that fails is replaced as on the
/// CPU path; an image larger than a staging stride is decoded, cropped and resized
/// on the CPU and copied. `None` if stopped meanwhile (the slot goes back).
// The producer's pieces of state, passed as they are (bundling them would only
// move the borrows into a struct built once per batch).
#[allow(clippy::too_many_arguments)]
fn build_batch_nvjpeg(
    shared: &Shared,
    plan: &EpochPlan,
    k: u64,
    mut slot: Box<Slot>,
    state: &mut ReaderState,
    decoder: &Mutex<GpuDecoder>,
    stop: &AtomicBool,
    prepared: Option<Prepared<'_>>,
) -> Option<Result<Batch, LoaderError>> {
    // This batch decodes on its own stream of the pair (see `Shared::decode`).
    let decode_stream = &shared.decode[(k % 2) as usize];
    // A slot given back without its batch may have decodes in flight into its
    // arena, which nothing else orders before the slot's next decode (on either
    // stream of the pair): let them finish first. Error and stop paths only.
    let give_back = |slot: Box<Slot>| {
        if let Err(e) = decode_stream.synchronize() {
            tracing::warn!("decode stream synchronize failed: {e}");
        }
        let _ = shared.free_tx.try_send(slot);
    };
    // The read-ahead's checks of the first pass, taken one by one; replacements
    // (and everything, without a read-ahead) are read here.
    let mut prepared: Vec<Option<Result<Checked<'_>, LoaderError>>> = match prepared {
        Some(Prepared::Records(records)) => records.into_iter().map(Some).collect(),
        _ => Vec::new(),
    };
    match slot.begin_host_writes() {
        Ok(Some((prev, h2d_ms, kernel_ms))) => account_gpu(shared, prev, h2d_ms, kernel_ms),
        Ok(None) => {}
        Err(e) => {
            give_back(slot);
            return Some(Err(e));
        }
    }
    let positions: Vec<usize> = plan.batch_range(k).collect();
    let n = positions.len();
    let stride = slot.sizes.stride;
    let mut current: Vec<u64> = positions.iter().map(|&p| plan.order[p]).collect();
    let mut attempts = vec![0u32; n];
    let mut done: Vec<Option<Staged>> = vec![None; n];
    let mut regions: Vec<(usize, usize, usize)> = Vec::new();
    let pinned_stride = slot.sizes.pinned_stride;
    // The decode waits for the kernel that last read this slot's arena (a
    // never-recorded event: no wait), not for the previous batch.
    if let Err(e) = decode_stream.wait(&slot.ready) {
        give_back(slot);
        return Some(Err(driver_err(
            "cuStreamWaitEvent (arena reuse, decode)",
            e,
        )));
    }
    // The hardware engines write the arena when they are called, not in stream
    // order, so its last reader (the transform of this slot's previous batch; for
    // a new slot, its allocation) must be done on the host's clock. Usually it
    // is: `begin_host_writes` waited for it. With that, the first decode below
    // need not wait for everything queued on the decode stream (the batch
    // before last), which keeps running meanwhile. Timed as the decoder's
    // `stream_wait_s`.
    let waiting = Instant::now();
    if let Err(e) = slot.ready.synchronize() {
        give_back(slot);
        return Some(Err(driver_err("cuEventSynchronize (arena reuse)", e)));
    }
    shared
        .metrics
        .add_gpu_decode_timings(&stoker_decode::DecodeTimings {
            stream_wait_s: waiting.elapsed().as_secs_f64(),
            ..Default::default()
        });
    let mut first_round = true;
    let mut dec = decoder.lock().unwrap_or_else(|p| p.into_inner());
    while done.iter().any(Option::is_none) {
        if stop.load(Ordering::Acquire) {
            give_back(slot);
            return None;
        }
        let reader = match state.reader.as_ref() {
            Ok(r) => r,
            Err(reason) => {
                give_back(slot);
                return Some(Err(reader_unavailable("stoker-gpu", reason)));
            }
        };
        // 1. Read and check what is left; oversize images go through the CPU.
        // Each image with its crop, drawn from the header: the decoder needs
        // only the crop (the kernel's taps stay inside the crop box).
        let mut todo: Vec<(usize, &[u8], u32, SampleParams)> = Vec::new();
        for i in 0..n {
            if done[i].is_some() {
                continue;
            }
            let index = current[i];
            let checked = match prepared.get_mut(i).and_then(Option::take) {
                Some(c) => c,
                None => check_record(shared, reader, index, state.decoder.limits()),
            };
            let outcome = match checked {
                Ok(Checked {
                    payload,
                    label,
                    info,
                }) => {
                    if info.rgb_len() <= stride {
                        let p = shared.transform.params(
                            plan.seed,
                            plan.epoch,
                            index,
                            info.width,
                            info.height,
                        );
                        todo.push((i, payload, label, p));
                        Ok(())
                    } else {
                        let staged = match slot.pinned.as_mut_slice() {
                            Ok(pinned) => stage_oversize(
                                shared,
                                plan,
                                index,
                                label,
                                payload,
                                (&state.decoder, &mut state.scratch, &mut state.resizer),
                                &mut pinned[i * pinned_stride..(i + 1) * pinned_stride],
                            ),
                            Err(e) => Err(driver_err("pinned staging access", e)),
                        };
                        staged.map(|s| {
                            regions.push((i * pinned_stride, i * stride, s.bytes));
                            done[i] = Some(s);
                        })
                    }
                }
                Err(e) => Err(e),
            };
            if let Err(error) = outcome {
                if let Err(fatal) =
                    plan.replace_failed(positions[i], error, &mut attempts[i], &mut current[i])
                {
                    give_back(slot);
                    return Some(Err(fatal));
                }
            }
        }
        if todo.is_empty() {
            continue;
        }
        // 2. Decode straight into the arena (one output view per image).
        let t_decode = Instant::now();
        let results = {
            let mut views: Vec<Option<CudaViewMut<'_, u8>>> = slot
                .arena
                .as_view_mut()
                .chunks_exact_mut(stride)
                .map(Some)
                .collect();
            let mut outs: Vec<CudaViewMut<'_, u8>> = todo
                .iter()
                .filter_map(|(i, ..)| views.get_mut(*i).and_then(Option::take))
                .collect();
            let inputs: Vec<&[u8]> = todo.iter().map(|t| t.1).collect();
            let regions: Vec<Region> = todo.iter().map(|t| t.3.region()).collect();
            // Replacements (later rounds) go where an image of an earlier round
            // failed: those wait for the stream, earlier rounds included.
            let usage = BatchUse {
                outputs_idle: std::mem::take(&mut first_round),
                regions: Some(&regions),
            };
            let r = dec.decode_batch_for(&inputs, &mut outs, decode_stream, usage);
            // The decoder's phase times move into the loader's stats.
            shared.metrics.add_gpu_decode_timings(&dec.timings());
            dec.reset_timings();
            r
        };
        let bytes: usize = todo.iter().map(|t| t.1.len()).sum();
        shared.metrics.record(
            Stage::Decode,
            todo.len() as u64,
            bytes as u64,
            t_decode.elapsed(),
        );
        for (&(i, _, label, p), result) in todo.iter().zip(results) {
            let index = current[i];
            match result {
                Ok((info, route)) => {
                    shared.metrics.count_route(route.name());
                    done[i] = Some(Staged {
                        index,
                        label,
                        width: info.width,
                        height: info.height,
                        channels: 3,
                        crop: p.crop,
                        flip: p.flip,
                        bytes: info.rgb_len(),
                        source: None,
                    });
                }
                Err(source) => {
                    let error = LoaderError::Decode { index, source };
                    if let Err(fatal) =
                        plan.replace_failed(positions[i], error, &mut attempts[i], &mut current[i])
                    {
                        give_back(slot);
                        return Some(Err(fatal));
                    }
                }
            }
        }
    }
    drop(dec);
    // The transform (and the oversize copies into the arena) follow the decode.
    if let Err(e) = shared.compute.join(decode_stream) {
        // `give_back` lets the decode finish before the slot is reused.
        give_back(slot);
        return Some(Err(driver_err("cuStreamWaitEvent (decode done)", e)));
    }
    let images: Vec<Staged> = done.into_iter().flatten().collect();
    Some(enqueue(
        shared,
        plan,
        k,
        slot,
        &images,
        Copies::Decoded { regions: &regions },
    ))
}

/// Decodes an image too large for a staging stride on the CPU, crops and resizes
/// it (same filter as the CPU path) and stages the `size × size` result in `dst`.
fn stage_oversize(
    shared: &Shared,
    plan: &EpochPlan,
    index: u64,
    label: u32,
    payload: &[u8],
    (decoder, scratch, resizer): (&CpuDecoder, &mut Vec<u8>, &mut CropResizer),
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let t_decode = Instant::now();
    let info = stoker_decode::probe(payload, decoder.limits())
        .map_err(|source| LoaderError::Decode { index, source })?;
    if scratch.len() < info.rgb_len() {
        scratch.resize(info.rgb_len(), 0);
    }
    // The crop comes from the header, so the decode can skip what lies outside
    // it (as on the CPU path: the resizer reads only the crop).
    let p = shared
        .transform
        .params(plan.seed, plan.epoch, index, info.width, info.height);
    let info = cpu_decode_counted(
        decoder,
        payload,
        scratch,
        Some(p.region()),
        index,
        &shared.metrics,
        t_decode,
    )?;
    let resized = resizer
        .apply(scratch, info.width, info.height, p.crop)
        .map_err(|reason| LoaderError::UnusableRecord { index, reason })?;
    let bytes = resized.len();
    dst[..bytes].copy_from_slice(resized);
    shared.metrics.count_route("cpu_resize_oversize");
    let s = shared.size;
    Ok(Staged {
        index,
        label,
        width: s,
        height: s,
        channels: 3,
        crop: (0, 0, s, s),
        flip: p.flip,
        bytes,
        source: None,
    })
}

/// Resolves sample position `pos` (with replacements) and stages it into `dst`.
fn stage_position(
    shared: &Shared,
    plan: &EpochPlan,
    pos: usize,
    state: &mut ReaderState,
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let mut index = plan.order[pos];
    let mut attempt = 0;
    loop {
        match stage_one(shared, plan, index, state, dst) {
            Ok(s) => return Ok(s),
            Err(error) => plan.replace_failed(pos, error, &mut attempt, &mut index)?,
        }
    }
}

/// Reads record `index`, checks it, and writes its pixels (HWC, 1 or 3 channels)
/// at the start of `dst`. Images larger than `dst` are cropped and resized on the
/// CPU first (then the kernel only flips, normalizes and lays them out).
fn stage_one(
    shared: &Shared,
    plan: &EpochPlan,
    index: u64,
    state: &mut ReaderState,
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let metrics = &*shared.metrics;
    let reader = state
        .reader
        .as_ref()
        .map_err(|reason| reader_unavailable("stoker-gpu-reader", reason))?;
    let record = read_checked(reader, index, metrics)?;
    let header = record.header;

    let t_decode = Instant::now();
    let params = |w: u32, h: u32| shared.transform.params(plan.seed, plan.epoch, index, w, h);
    // Raw records inside the registered dataset map are copied from there.
    let mut source = None;
    let (width, height, channels, in_scratch, params) = match header.encoding {
        Encoding::Jpeg => {
            let info = stoker_decode::probe(record.payload, state.decoder.limits())
                .map_err(|source| LoaderError::Decode { index, source })?;
            // The crop is drawn from the header, so that the decode can skip what
            // lies outside it (the kernel and the CPU resizer read only the crop).
            let p = params(info.width, info.height);
            let need = info.rgb_len();
            let in_scratch = need > dst.len();
            let out: &mut [u8] = if in_scratch {
                if state.scratch.len() < need {
                    state.scratch.resize(need, 0);
                }
                &mut state.scratch
            } else {
                dst
            };
            let info = cpu_decode_counted(
                &state.decoder,
                record.payload,
                out,
                Some(p.region()),
                index,
                metrics,
                t_decode,
            )?;
            (info.width, info.height, 3u32, in_scratch, p)
        }
        Encoding::Raw => {
            let (w, h, c) = (header.width, header.height, header.channels);
            let want = raw_payload_len(index, &header, record.payload.len())?;
            let in_scratch = want > dst.len();
            if in_scratch {
                // Expand to RGB for the CPU resizer.
                let rgb = w as usize * h as usize * 3;
                if state.scratch.len() < rgb {
                    state.scratch.resize(rgb, 0);
                }
                if c == 3 {
                    state.scratch[..rgb].copy_from_slice(record.payload);
                } else {
                    for (px, &g) in state.scratch.chunks_exact_mut(3).zip(record.payload) {
                        px.fill(g);
                    }
                }
            } else if shared
                .direct
                .as_ref()
                .is_some_and(|maps| maps.contains(&record.payload[..want]))
            {
                // The CRC was checked above (read_checked): the device copies
                // exactly these bytes, which nobody writes.
                source = Some(record.payload.as_ptr() as usize);
            } else if shared.streaming_stores {
                super::copy_streaming(&mut dst[..want], record.payload);
            } else {
                dst[..want].copy_from_slice(record.payload);
            }
            metrics.count_route("raw");
            let channels = if in_scratch { 3 } else { u32::from(c) };
            (w, h, channels, in_scratch, params(w, h))
        }
    };
    if width == 0 || height == 0 {
        return Err(LoaderError::UnusableRecord {
            index,
            reason: "0-pixel image".into(),
        });
    }
    if in_scratch {
        // Too large to stage: crop + resize here (same filter as the CPU path),
        // stage the `size × size` result; the kernel then samples it 1:1.
        let resized = state
            .resizer
            .apply(&state.scratch, width, height, params.crop)
            .map_err(|reason| LoaderError::UnusableRecord { index, reason })?;
        let s = shared.size;
        let bytes = resized.len();
        dst[..bytes].copy_from_slice(resized);
        metrics.count_route("cpu_resize_oversize");
        return Ok(Staged {
            index,
            label: header.label,
            width: s,
            height: s,
            channels: 3,
            crop: (0, 0, s, s),
            flip: params.flip,
            bytes,
            source: None,
        });
    }
    Ok(Staged {
        index,
        label: header.label,
        width,
        height,
        channels,
        crop: params.crop,
        flip: params.flip,
        bytes: width as usize * height as usize * channels as usize,
        source,
    })
}

/// Enqueues H2D + transform for the staged images and wraps the slot in a batch.
fn enqueue(
    shared: &Shared,
    plan: &EpochPlan,
    k: u64,
    mut slot: Box<Slot>,
    images: &[Staged],
    copies: Copies<'_>,
) -> Result<Batch, LoaderError> {
    let n = images.len();
    let stride = slot.sizes.stride;
    {
        let params = match slot.pinned_params.as_mut_slice() {
            Ok(p) => p,
            Err(e) => {
                // This batch's decodes may still be writing the arena.
                return_failed_slot(shared, slot);
                return Err(driver_err("pinned parameters access", e));
            }
        };
        for (i, s) in images.iter().enumerate() {
            params[i] = ImageParams {
                src_offset: (i * stride) as u64,
                src_width: s.width,
                src_height: s.height,
                src_pitch: s.width * s.channels,
                src_channels: s.channels,
                crop_x: s.crop.0 as f32,
                crop_y: s.crop.1 as f32,
                crop_w: s.crop.2 as f32,
                crop_h: s.crop.3 as f32,
                flip: u32::from(s.flip),
                out_index: i as u32,
            };
        }
    }
    let h2d_bytes = match copies {
        Copies::Staged { bytes, .. } => bytes,
        Copies::Decoded { regions } => regions.iter().map(|r| r.2).sum(),
    };
    debug_assert!(n <= slot.params.len() && slot.sizes.batch * stride <= slot.arena.len());
    let result = (|| -> Result<(), LoaderError> {
        let copy = &shared.copy;
        let compute = &shared.compute;
        let pinned = slot
            .pinned
            .as_slice()
            .map_err(|e| driver_err("pinned staging access", e))?;
        let pinned_params = slot
            .pinned_params
            .as_slice()
            .map_err(|e| driver_err("pinned parameters access", e))?;
        match copies {
            Copies::Staged { bytes, by_record } => {
                // The previous kernel of this slot read `arena` and `params` (a wait
                // on a never-recorded event is a no-op).
                copy.wait(&slot.ready)
                    .map_err(|e| driver_err("cuStreamWaitEvent (arena reuse)", e))?;
                slot.h2d_start
                    .record(copy)
                    .map_err(|e| driver_err("cuEventRecord", e))?;
                if by_record {
                    copy_records(shared, &slot, images, pinned)?;
                } else {
                    // SAFETY: the destination is this slot's arena, at least as large
                    // as the source (`arena` = batch * stride ≥ bytes); the pinned
                    // source is not written by the host again before `h2d_end`
                    // completes (`Slot::begin_host_writes`); the copy stream waited
                    // for the previous reader of the arena.
                    unsafe {
                        cudarc::driver::result::memcpy_htod_async(
                            slot.arena_ptr,
                            &pinned[..bytes],
                            copy.cu_stream(),
                        )
                    }
                    .map_err(|e| driver_err("cuMemcpyHtoDAsync (pixels)", e))?;
                }
                // SAFETY: as above, for `params` (batch entries ≥ n) and its pinned source.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        slot.params_ptr,
                        &pinned_params[..n],
                        copy.cu_stream(),
                    )
                }
                .map_err(|e| driver_err("cuMemcpyHtoDAsync (params)", e))?;
                slot.h2d_end
                    .record(copy)
                    .map_err(|e| driver_err("cuEventRecord", e))?;
                compute
                    .wait(&slot.h2d_end)
                    .map_err(|e| driver_err("cuStreamWaitEvent (h2d done)", e))?;
            }
            Copies::Decoded { regions } => {
                // nvJPEG wrote the arena on a decode stream, which the compute stream
                // joined: the parameters and the CPU-resized oversize images follow
                // on the compute stream.
                slot.h2d_start
                    .record(compute)
                    .map_err(|e| driver_err("cuEventRecord", e))?;
                // SAFETY: as above; every region lies inside the slot's staging
                // (`from + len ≤ batch * pinned_stride`) and arena (`to + len ≤
                // batch * stride`); ordering is the compute stream's.
                unsafe {
                    for &(from, to, len) in regions {
                        cudarc::driver::result::memcpy_htod_async(
                            slot.arena_ptr + to as u64,
                            &pinned[from..from + len],
                            compute.cu_stream(),
                        )
                        .map_err(|e| driver_err("cuMemcpyHtoDAsync (oversize pixels)", e))?;
                    }
                    cudarc::driver::result::memcpy_htod_async(
                        slot.params_ptr,
                        &pinned_params[..n],
                        compute.cu_stream(),
                    )
                    .map_err(|e| driver_err("cuMemcpyHtoDAsync (params)", e))?;
                }
                slot.h2d_end
                    .record(compute)
                    .map_err(|e| driver_err("cuEventRecord", e))?;
            }
        }
        // The release events are cleared only once every wait is queued: on an
        // error they stay, and the error path below waits for them on the host.
        for ev in &slot.release {
            compute
                .wait(ev)
                .map_err(|e| driver_err("cuStreamWaitEvent (consumer released)", e))?;
        }
        slot.release.clear();
        slot.kernel_start
            .record(compute)
            .map_err(|e| driver_err("cuEventRecord", e))?;
        // SAFETY: `arena` holds the n staged images at `i * stride` with the sizes
        // in `params` (written above, copied before the kernel by the wait on
        // `h2d_end`); crop boxes come from `Transform::params` and lie inside their
        // images; `out_index < n ≤ batch` and `out` holds `batch` images of the
        // configured size and dtype; the compute stream waited for every consumer
        // of the previous batch in this slot; all buffers belong to `slot`, which
        // lives until after the kernel (it is handed to the batch, and freed only
        // after its release events).
        unsafe {
            shared.kernel.launch(
                compute,
                shared.dtype,
                &LaunchBuffers {
                    arena: slot.arena_ptr,
                    params: slot.params_ptr,
                    images: n as u32,
                    out: slot.out_ptr,
                },
                &shared.args,
            )?;
        }
        slot.ready
            .record(compute)
            .map_err(|e| driver_err("cuEventRecord", e))?;
        Ok(())
    })();
    if let Err(e) = result {
        return_failed_slot(shared, slot);
        return Err(e);
    }
    let s = shared.size as usize;
    let out_bytes = n * 3 * s * s * shared.dtype.size();
    slot.in_flight = Some(super::staging::InFlight {
        images: n as u64,
        h2d_bytes: h2d_bytes as u64 + (n * std::mem::size_of::<ImageParams>()) as u64,
        out_bytes: out_bytes as u64,
    });
    let shape = match shared.output {
        Output::U8Nhwc => [n, s, s, 3],
        _ => [n, 3, s, s],
    };
    let dtype = match shared.dtype {
        KernelDtype::U8 => crate::batch::DType::U8,
        KernelDtype::F16 => crate::batch::DType::F16,
        KernelDtype::F32 => crate::batch::DType::F32,
    };
    Ok(Batch {
        images: Images::Cuda(CudaImages::new(slot, shared.free_tx.clone(), shape, dtype)),
        labels: images.iter().map(|s| s.label).collect(),
        indices: images.iter().map(|s| s.index).collect(),
        epoch: plan.epoch,
        index: k,
    })
}

/// Enqueues the pixel copies of a batch whose records are (partly) in the
/// registered dataset map, record by record into their places in the arena, after
/// `h2d_start` on the copy stream: one batched call where the driver has it, else
/// one copy per record (more streams do not make those faster: `examples/h2d_probe`,
/// docs/BENCHMARKS.md run 6). Images without a `source` come from this slot's
/// staging.
fn copy_records(
    shared: &Shared,
    slot: &Slot,
    images: &[Staged],
    pinned: &[u8],
) -> Result<(), LoaderError> {
    let copy = &shared.copy;
    let stride = slot.sizes.stride;
    // SAFETY (of every copy below): destinations are image i's place in this
    // slot's arena (`bytes ≤ stride`), which the copy stream waited for before
    // `h2d_start`. Sources are record payloads inside `Shared::direct` (a
    // page-locked, read-only map of a finished shard that nobody writes,
    // registered until `Shared` drops, after its streams are synchronized) or this
    // slot's pinned staging, not written again before `h2d_end` completes
    // (`Slot::begin_host_writes`).
    let source = |i: usize, s: &Staged| -> &[u8] {
        match s.source {
            // SAFETY: `stage_one` took `addr..addr + bytes` from a record payload
            // that `Shared::direct` contains (see above).
            Some(addr) => unsafe { std::slice::from_raw_parts(addr as *const u8, s.bytes) },
            None => &pinned[i * stride..i * stride + s.bytes],
        }
    };
    if shared.batch_copies.load(Ordering::Relaxed) {
        let n = images.len();
        let mut dsts: Vec<u64> = (0..n)
            .map(|i| slot.arena_ptr + (i * stride) as u64)
            .collect();
        let mut srcs: Vec<u64> = images
            .iter()
            .enumerate()
            .map(|(i, s)| source(i, s).as_ptr() as u64)
            .collect();
        let mut sizes: Vec<usize> = images.iter().map(|s| s.bytes).collect();
        // SAFETY: `batch_copies` is set only where `batch_copy::supported`; one
        // entry per image in each array; sources and destinations as above.
        match unsafe {
            super::batch_copy::memcpy_batch_htod_async(
                &mut dsts,
                &mut srcs,
                &mut sizes,
                copy.cu_stream(),
            )
        } {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::warn!("cuMemcpyBatchAsync failed ({e}): one copy per record from now on");
                shared.batch_copies.store(false, Ordering::Relaxed);
            }
        }
    }
    for (i, s) in images.iter().enumerate() {
        // SAFETY: as above.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(
                slot.arena_ptr + (i * stride) as u64,
                source(i, s),
                copy.cu_stream(),
            )
        }
        .map_err(|e| driver_err("cuMemcpyHtoDAsync (record)", e))?;
    }
    Ok(())
}

/// Returns the slot of a batch that failed in [`enqueue`] to the free list,
/// clean. Part of its work may be enqueued (decodes still writing the arena,
/// a copy still reading the pinned buffers): the copy, decode and compute
/// streams are drained before the slot can be rewritten. The consumer may still
/// read the slot's output until its release events complete: those are waited
/// for too. Error path only, on the producer thread.
fn return_failed_slot(shared: &Shared, mut slot: Box<Slot>) {
    shared.synchronize_streams("after a failed batch");
    for ev in slot.release.drain(..) {
        if let Err(err) = ev.synchronize() {
            tracing::warn!("after a failed batch, a release event failed: {err}");
        }
    }
    let _ = shared.free_tx.try_send(slot);
}

/// Adds a finished slot use to the H2D and transform counters (GPU time from events).
fn account_gpu(shared: &Shared, prev: super::staging::InFlight, h2d_ms: f32, kernel_ms: f32) {
    let ms = |v: f32| Duration::from_secs_f64(f64::from(v.max(0.0)) / 1e3);
    shared
        .metrics
        .record(Stage::H2d, prev.images, prev.h2d_bytes, ms(h2d_ms));
    shared
        .metrics
        .record(Stage::Transform, prev.images, prev.out_bytes, ms(kernel_ms));
}

/// Kernel launch arguments for the configured transform and output.
pub(crate) fn transform_args(
    size: u32,
    output: Output,
    mean: [f32; 3],
    std: [f32; 3],
) -> (KernelDtype, TransformArgs) {
    let (dtype, chw) = match output {
        Output::U8Nhwc => (KernelDtype::U8, 0),
        Output::F16Nchw => (KernelDtype::F16, 1),
        _ => (KernelDtype::F32, 1),
    };
    (
        dtype,
        TransformArgs {
            out_width: size,
            out_height: size,
            layout_chw: chw,
            normalize: 1,
            mean,
            std,
        },
    )
}
