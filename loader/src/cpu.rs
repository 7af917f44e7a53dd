//! The CPU backend: a pool of worker threads, each owning a shard reader (zero-copy mmap
//! reads), a [`CpuDecoder`] and a resizer, builds whole batches into a ring of batch buffers
//! allocated once at build.
//!
//! # Flow
//!
//! [`CpuPipeline::start_epoch`] publishes a [`Job`] (the epoch plan plus its result channel)
//! to the workers. Each worker claims the next batch number (`next_claim`), waits until it is
//! inside the prefetch window (`claimed < handed + prefetch`), then reads, decodes and
//! transforms each of its samples straight into the slot of a ring buffer, and sends the
//! finished batch. The consumer side ([`CpuEpoch`]) puts batches back in order. Threads stay
//! alive across epochs.
//!
//! # Epoch boundaries
//!
//! A worker that finds nothing left to claim tells the consumer ([`Message::AllClaimed`]),
//! which starts the next epoch then ([`crate::LoaderBuilder::prefetch_next_epoch`]) rather
//! than when it takes the last batch: the board keeps both jobs, the older one first, and
//! the idle workers start on the new one while the last batches of the old one are built.
//! Without that, each epoch ended with every worker but one waiting for the slowest batch;
//! an epoch of a few batches per worker lost up to half its time so. The two jobs share one
//! prefetch window: the new one counts the batches of the old one not yet handed out.
//!
//! # Why whole batches per worker
//!
//! The order of claims is the batch order, so the reorder buffer never holds more than
//! `prefetch` batches and the batch the consumer needs next is always being built; per-batch
//! work needs no locking on the hot path.
//!
//! # Shutdown
//!
//! Dropping a [`CpuEpoch`] sets the job's `stop` flag and wakes waiters; workers check it
//! between samples, so they are free within one image's work. Dropping the [`CpuPipeline`]
//! sets `shutdown` and joins the threads.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use stoker_decode::{CpuDecoder, Limits};
use stoker_formats::{Dataset, DatasetReader};

use crate::batch::{Batch, HostBuffer, HostImages, HostValues, Images};
use crate::config::{DType, LoaderConfig, Output};
use crate::error::LoaderError;
use crate::metrics::{Metrics, Stage};
use crate::pipeline::{panic_message, reader_unavailable, EpochPlan, EpochStream, Next, Pipeline};
use crate::pixels::{load_record, still_readable, Dest, Draw, Place};
use crate::scratch_memory::{large_image_turn, retry_short_of_memory, Scratch};
use crate::transform::layout::{self, Normalized, Normalizer};
use crate::transform::{DrawKey, Transform};

/// What every worker needs to know, fixed at build.
struct Settings {
    dataset: Dataset,
    transform: Transform,
    output: Output,
    /// Images a batch buffer holds: the batch size, or the dataset's length if smaller
    /// (no batch holds more).
    buffer_images: usize,
    prefetch: u64,
    limits: Limits,
}

/// What the workers send the consumer of a job.
enum Message {
    /// Batch `k`, built (or its error).
    Built(u64, Result<Batch, LoaderError>),
    /// Every batch is claimed: only those in flight are left (sent once, by the worker
    /// whose claim found none).
    AllClaimed,
}

/// One epoch's work.
struct Job {
    plan: EpochPlan,
    /// The job that was still running when this one was posted (the epoch before, while
    /// its last batches are built): its batches not yet handed out count against this
    /// one's prefetch window. Weak, or each epoch would keep every one before it.
    before: Weak<Job>,
    /// Next batch number to claim; claims past `num_batches` mean "done".
    next_claim: AtomicU64,
    /// Set when the consumer is gone: workers abandon the job.
    stop: AtomicBool,
    /// Batches handed to the consumer so far (absolute batch number of the next one).
    handed: Mutex<u64>,
    /// Signalled when `handed` grows or `stop` is set.
    window: Condvar,
    results: Sender<Message>,
}

impl Job {
    /// Blocks until batch `k` may be built (inside the prefetch window); `false` if stopped.
    fn wait_for_window(&self, k: u64, prefetch: u64) -> bool {
        if let Some(before) = self.before.upgrade() {
            // Both jobs together keep no more than `prefetch` batches in flight, as one
            // does: `k` waits until the batches of `before` still to hand out and this
            // job's batches ahead of `k` leave room for it.
            let ahead = k.saturating_sub(self.plan.start_batch);
            let end = before.plan.num_batches;
            let mut handed = before.handed.lock().unwrap_or_else(|p| p.into_inner());
            while end.saturating_sub(*handed).saturating_add(ahead) >= prefetch
                && !before.stop.load(Ordering::Acquire)
                && !self.stop.load(Ordering::Acquire)
            {
                handed = before
                    .window
                    .wait(handed)
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
        let mut handed = self.handed.lock().unwrap_or_else(|p| p.into_inner());
        // Saturating: a prefetch near u64::MAX (allowed, and capped by the ring) must not
        // overflow here, where a panic would end the worker outside its unwind guard.
        while k >= handed.saturating_add(prefetch) && !self.stop.load(Ordering::Acquire) {
            handed = self.window.wait(handed).unwrap_or_else(|p| p.into_inner());
        }
        !self.stop.load(Ordering::Acquire)
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        // Take the lock so a worker between its check and its wait cannot miss the wake-up;
        // and the lock of the job before, whose window a worker of this one may wait on.
        for job in std::iter::once(self).chain(self.before.upgrade().as_deref()) {
            let _guard = job.handed.lock().unwrap_or_else(|p| p.into_inner());
            job.window.notify_all();
        }
    }

    /// Whether a worker may still find a batch of this job to claim.
    fn claimable(&self) -> bool {
        !self.stop.load(Ordering::Acquire)
            && self.next_claim.load(Ordering::Acquire) < self.plan.num_batches
    }
}

/// The job board the workers watch.
#[derive(Default)]
struct Board {
    /// The jobs posted and not yet stopped, oldest first: workers claim from the first
    /// that has batches left. Two at most in practice: an epoch, and the next one started
    /// while its last batches are built.
    jobs: Vec<Arc<Job>>,
    shutdown: bool,
}

struct Shared {
    settings: Settings,
    metrics: Arc<Metrics>,
    board: Mutex<Board>,
    board_changed: Condvar,
    /// The ring: free batch buffers. Bounded; buffers come back when a batch is dropped.
    free_tx: Sender<HostBuffer>,
    free_rx: Receiver<HostBuffer>,
}

impl Drop for Shared {
    /// Frees the ring's idle buffers now. A bounded crossbeam channel keeps what it holds
    /// until its last sender goes, and every batch handed out holds a sender (to come
    /// back): one batch kept past its loader held the whole ring.
    fn drop(&mut self) {
        while self.free_rx.try_recv().is_ok() {}
        crate::scratch_memory::give_back_freed();
    }
}

/// The CPU backend (see the module docs).
pub(crate) struct CpuPipeline {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl CpuPipeline {
    /// Starts `config.workers` threads and allocates the batch ring (`prefetch + workers` full
    /// batches).
    pub(crate) fn build(
        config: &LoaderConfig,
        metrics: Arc<Metrics>,
    ) -> Result<CpuPipeline, LoaderError> {
        // Fail early, on the caller's thread, if the shards cannot be read at all.
        drop(config.dataset.reader()?);
        let workers = config.workers.max(1);
        // The ring is sized by what an epoch can use, not by the settings alone: the
        // builder gives the sampler's largest batch as `batch_size` and its batches per
        // epoch as `epoch_batches` (`buffer_config`: a share of the ranks, of `indices`,
        // which may name a record more than once and so make batches larger than the
        // dataset), and no more batches than that are ever in flight, so an oversized
        // batch size or prefetch (a typo, a script's 10**9) costs nothing instead of
        // exhausting memory.
        let buffer_images = config.batch_size.max(1);
        let epoch_batches = config.epoch_batches.max(1);
        let slots = config.prefetch.min(epoch_batches) as usize + workers;
        let settings = Settings {
            dataset: config.dataset.clone(),
            transform: config.transform,
            output: config.output,
            buffer_images: buffer_images as usize,
            prefetch: config.prefetch,
            // What the conversion accepted: a record it took as larger than the
            // default limit (`--max-pixels`) decodes here too.
            limits: config.dataset.manifest().decode_limits(),
        };
        // Written as it is allocated, so resident from the start.
        ring_fits_beside_held(&settings, slots as u64)?;
        let (free_tx, free_rx) = crossbeam_channel::bounded(slots);
        for _ in 0..slots {
            let buffer =
                new_buffer(&settings, &metrics).map_err(|b| ring_too_large(&settings, b))?;
            // Cannot fail: the channel has exactly `slots` places.
            let _ = free_tx.try_send(buffer);
        }
        metrics.set_queue_capacity(config.prefetch);
        for stage in [Stage::Read, Stage::Decode, Stage::Transform] {
            metrics.set_threads(stage, workers as u64);
        }
        metrics.set_threads(Stage::Handoff, 1);
        metrics.set_shared_workers(workers as u64);
        let shared = Arc::new(Shared {
            settings,
            metrics,
            board: Mutex::new(Board::default()),
            board_changed: Condvar::new(),
            free_tx,
            free_rx,
        });
        let mut pipeline = CpuPipeline {
            shared: Arc::clone(&shared),
            workers: Vec::with_capacity(workers),
        };
        for id in 0..workers {
            let shared = Arc::clone(&shared);
            let name = format!("stoker-cpu-{id}");
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || Worker::run(shared))
                .map_err(|e| LoaderError::thread_start(name, e))?;
            // On error above, `pipeline` drops and joins the threads already started.
            pipeline.workers.push(handle);
        }
        Ok(pipeline)
    }
}

/// Refuses a ring of `slots` batch buffers that fits the memory this process may use only
/// without the anonymous memory it already holds (`RssAnon`): the buffers are zeroed as
/// they are allocated, and the OOM killer would then end the process with no message.
/// Checked here, where the ring is allocated: the GPU path has no such ring.
///
/// # Errors
///
/// [`LoaderError::InvalidConfig`] (`batch_size`).
fn ring_fits_beside_held(settings: &Settings, slots: u64) -> Result<(), LoaderError> {
    let Some(total) = crate::launcher::memory_total() else {
        return Ok(());
    };
    let s = u64::from(settings.transform.out_size());
    let images = settings.buffer_images as u64;
    let image = s
        .saturating_mul(s)
        .saturating_mul(3 * settings.output.value_bytes());
    let ring = images.saturating_mul(image).saturating_mul(slots);
    let held = crate::launcher::memory_in_use();
    if ring.saturating_add(held) <= total {
        return Ok(());
    }
    Err(crate::config::batch_too_big(images, s, settings.output, &format!(
        "times {slots} batches in flight (prefetch, at most an epoch's batches, + workers) needs {ring} bytes, which with the {held} bytes this process already holds is more than the {total} bytes of memory this process may use (the machine's, or its cgroup's limit)"
    )))
}

/// A full-batch buffer of the configured output: an error, not an abort, when it cannot be
/// allocated.
///
/// # Errors
///
/// The buffer's size in bytes (`None`: more than the address space).
fn new_buffer(settings: &Settings, metrics: &Arc<Metrics>) -> Result<HostBuffer, Option<usize>> {
    let s = settings.transform.out_size() as usize;
    let n = settings.buffer_images.checked_mul(s * s * 3).ok_or(None)?;
    let bytes = n.checked_mul(settings.output.value_bytes() as usize);
    match settings.output.dtype() {
        DType::U8 => zeroed(n, 0u8).map(HostValues::U8),
        DType::F16 => zeroed(n, half::f16::ZERO).map(HostValues::F16),
        DType::Bf16 => zeroed(n, half::bf16::ZERO).map(HostValues::Bf16),
        DType::F32 => zeroed(n, 0.0f32).map(HostValues::F32),
    }
    .map(|values| HostBuffer::counted(values, metrics))
    .ok_or(bytes)
}

/// The error of a ring buffer that [`new_buffer`] could not allocate (of `bytes`) while the
/// loader was built: batch size × output size too large for this machine.
fn ring_too_large(settings: &Settings, bytes: Option<usize>) -> LoaderError {
    let s = settings.transform.out_size();
    LoaderError::InvalidConfig {
        field: "batch_size",
        reason: format!(
            "a batch buffer of {} images of {s}×{s}×3 ({}) cannot be allocated: this process \
             is out of memory or at its limit (ulimit -v, a container's); a smaller batch_size \
             (or size, or a uint8 output) needs less",
            settings.buffer_images,
            bytes.map_or("more than the address space".into(), |b| format!(
                "{b} bytes"
            )),
        ),
    }
}

/// `n` zeros, or `None` if they cannot be allocated.
fn zeroed<T: Clone>(n: usize, zero: T) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize(n, zero);
    Some(v)
}

impl Pipeline for CpuPipeline {
    fn start_epoch(&self, plan: EpochPlan) -> Result<Box<dyn EpochStream + Send>, LoaderError> {
        let (results_tx, results_rx) = crossbeam_channel::unbounded();
        let next = plan.start_batch;
        let end = plan.num_batches;
        let job = {
            let mut board = self.shared.board.lock().unwrap_or_else(|p| p.into_inner());
            // A job whose consumer is gone is stopped; one still running is the epoch
            // before this one (its stream lives until its last batch is taken), which goes
            // on: this one starts early, beside its last batches.
            board.jobs.retain(|j| !j.stop.load(Ordering::Acquire));
            let job = Arc::new(Job {
                next_claim: AtomicU64::new(plan.start_batch),
                handed: Mutex::new(plan.start_batch),
                before: board.jobs.last().map_or_else(Weak::new, Arc::downgrade),
                plan,
                stop: AtomicBool::new(false),
                window: Condvar::new(),
                results: results_tx,
            });
            board.jobs.push(Arc::clone(&job));
            job
        };
        self.shared.board_changed.notify_all();
        Ok(Box::new(CpuEpoch {
            job,
            results: results_rx,
            reorder: BTreeMap::new(),
            next,
            end,
            all_claimed: false,
        }))
    }
}

impl Drop for CpuPipeline {
    fn drop(&mut self) {
        {
            let mut board = self.shared.board.lock().unwrap_or_else(|p| p.into_inner());
            board.shutdown = true;
            for job in board.jobs.drain(..) {
                job.stop();
            }
        }
        self.shared.board_changed.notify_all();
        for handle in self.workers.drain(..) {
            // A worker that panicked outside `catch_unwind` has nothing left to clean up.
            let _ = handle.join();
        }
    }
}

/// The consumer side of one epoch on the CPU backend.
struct CpuEpoch {
    job: Arc<Job>,
    results: Receiver<Message>,
    /// Finished batches that arrived ahead of `next`.
    reorder: BTreeMap<u64, Result<Batch, LoaderError>>,
    /// Next batch number to hand out.
    next: u64,
    /// One past the last batch.
    end: u64,
    /// Whether a worker found no batch left to claim ([`Message::AllClaimed`]).
    all_claimed: bool,
}

impl EpochStream for CpuEpoch {
    fn next_batch(&mut self, deadline: Option<Instant>) -> Next {
        if self.next >= self.end {
            return Next::Done;
        }
        let item = loop {
            if let Some(item) = self.reorder.remove(&self.next) {
                break item;
            }
            let received = match deadline {
                None => self.results.recv().map_err(|_| None),
                Some(d) => self.results.recv_deadline(d).map_err(|e| match e {
                    RecvTimeoutError::Timeout => Some(()),
                    RecvTimeoutError::Disconnected => None,
                }),
            };
            match received {
                Ok(Message::Built(k, item)) => {
                    self.reorder.insert(k, item);
                }
                // Answered at once, so that the consumer can start the next epoch now.
                Ok(Message::AllClaimed) => {
                    self.all_claimed = true;
                    return Next::Pending;
                }
                Err(Some(())) => return Next::Pending,
                // Unreachable while `job` (which owns the sender) lives; kept as a clean error.
                Err(None) => {
                    return Next::Ready(Err(LoaderError::Thread {
                        thread: "stoker-cpu".into(),
                        reason: "all workers exited".into(),
                    }))
                }
            }
        };
        self.next += 1;
        {
            let mut handed = self.job.handed.lock().unwrap_or_else(|p| p.into_inner());
            *handed = self.next;
        }
        self.job.window.notify_all();
        Next::Ready(item)
    }

    fn ready(&self) -> u64 {
        (self.reorder.len() + self.results.len()) as u64
    }

    fn all_claimed(&self) -> bool {
        self.all_claimed
    }
}

impl Drop for CpuEpoch {
    fn drop(&mut self) {
        self.job.stop();
    }
}

/// Per-thread state: everything a worker reuses from image to image.
struct Worker {
    shared: Arc<Shared>,
    reader: Result<DatasetReader, String>,
    decoder: CpuDecoder,
    /// Decoded RGB pixels of the current image and the resizer (each grows to the largest
    /// image seen, then stays).
    scratch: Scratch,
    normalizer: Normalizer,
}

impl Worker {
    fn run(shared: Arc<Shared>) {
        let settings = &shared.settings;
        let (mean, std) = settings.transform.mean_std();
        let mut worker = Worker {
            reader: settings.dataset.reader().map_err(|e| e.to_string()),
            decoder: CpuDecoder::new(settings.limits),
            scratch: Scratch::new(settings.transform.out_size()),
            normalizer: Normalizer::new(mean, std),
            shared: Arc::clone(&shared),
        };
        loop {
            let job = {
                let mut board = shared.board.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if board.shutdown {
                        return;
                    }
                    // The oldest job with batches left: an epoch's batches before the next
                    // epoch's. A fully claimed job stays on the board (for `before`) until
                    // a newer job is posted or it stops.
                    if let Some(job) = board.jobs.iter().find(|j| j.claimable()) {
                        break Arc::clone(job);
                    }
                    board = shared
                        .board_changed
                        .wait(board)
                        .unwrap_or_else(|p| p.into_inner());
                }
            };
            // A reader that could not be opened (a shard away for a moment, as when a
            // dataset is renamed into place) is tried again for each epoch, so that one
            // failed open does not fail this worker's batches for the loader's lifetime.
            if worker.reader.is_err() {
                worker.reader = settings.dataset.reader().map_err(|e| e.to_string());
            }
            worker.work(&job);
        }
    }

    /// Claims and builds batches of `job` until it is exhausted or stopped.
    fn work(&mut self, job: &Job) {
        let prefetch = self.shared.settings.prefetch;
        loop {
            let k = job.next_claim.fetch_add(1, Ordering::AcqRel);
            if k >= job.plan.num_batches {
                if k == job.plan.num_batches {
                    // The first claim past the end: the consumer may start the next epoch.
                    let _ = job.results.send(Message::AllClaimed);
                }
                return;
            }
            if !job.wait_for_window(k, prefetch) {
                return;
            }
            let built = catch_unwind(AssertUnwindSafe(|| self.build_batch(job, k)));
            let result = match built {
                Ok(Some(result)) => result,
                Ok(None) => return, // stopped mid-batch
                Err(panic) => Err(LoaderError::Thread {
                    thread: std::thread::current()
                        .name()
                        .unwrap_or("stoker-cpu")
                        .to_owned(),
                    reason: panic_message(&panic),
                }),
            };
            if job.results.send(Message::Built(k, result)).is_err() {
                return;
            }
        }
    }

    /// A buffer for batch `k` when every buffer of the ring is held by the consumer (it
    /// keeps batches): a new one, freed rather than kept if the ring is full when it comes
    /// back. Short of memory, it is tried again as a record is ([`retry_short_of_memory`]),
    /// also taking a buffer of the ring that came back meanwhile.
    fn spare_buffer(&mut self, k: u64) -> Result<HostBuffer, LoaderError> {
        retry_short_of_memory(
            self,
            false,
            |w| w.scratch.release(),
            |w| {
                if let Ok(buffer) = w.shared.free_rx.try_recv() {
                    return Ok(buffer);
                }
                new_buffer(&w.shared.settings, &w.shared.metrics).map_err(|bytes| {
                    LoaderError::BatchOutOfMemory {
                        batch: k,
                        bytes: bytes.map_or(u64::MAX, |b| b as u64),
                    }
                })
            },
        )
    }

    /// Builds batch `k`; `None` if the job was stopped meanwhile.
    fn build_batch(&mut self, job: &Job, k: u64) -> Option<Result<Batch, LoaderError>> {
        let plan = &job.plan;
        if let Err(reason) = &self.reader {
            // Not a bad record: this worker cannot read at all. Fail the batch, count nothing.
            return Some(Err(reader_unavailable(&worker_name(), reason)));
        }
        let range = plan.batch_range(k);
        let n = range.len();
        let mut buffer = match self.shared.free_rx.try_recv() {
            Ok(buffer) => buffer,
            Err(_) => match self.spare_buffer(k) {
                Ok(buffer) => buffer,
                Err(e) => return Some(Err(e)),
            },
        };
        let mut labels = Vec::with_capacity(n);
        let mut indices = Vec::with_capacity(n);
        for (slot, pos) in range.enumerate() {
            if job.stop.load(Ordering::Acquire) {
                let _ = self.shared.free_tx.try_send(buffer);
                return None;
            }
            let mut index = plan.order[pos];
            let mut attempt = 0;
            let label = loop {
                let key = plan.draw_key(pos, attempt);
                match self.load_one(plan, (index, key), slot, &mut buffer) {
                    Ok(label) => break label,
                    Err(error) => {
                        if let Err(fatal) =
                            plan.replace_failed(pos, error, &mut attempt, &mut index)
                        {
                            let _ = self.shared.free_tx.try_send(buffer);
                            return Some(Err(fatal));
                        }
                    }
                }
            };
            labels.push(label);
            indices.push(index);
        }
        let s = self.shared.settings.transform.out_size() as usize;
        let shape = self.shared.settings.output.shape(n, s);
        Some(Ok(Batch {
            images: Images::Host(HostImages::new(
                buffer,
                shape,
                Some(self.shared.free_tx.clone()),
            )),
            labels,
            indices,
            epoch: plan.epoch,
            index: k,
        }))
    }

    /// Reads, decodes and transforms record `index` into image `slot` of `buffer`, with the
    /// crop and flip drawn at `key`; returns its label. A large image takes its turn for
    /// this and leaves no scratch behind ([`crate::scratch_memory::LARGE_IMAGE_BYTES`]);
    /// one short of memory is tried again ([`retry_short_of_memory`]).
    fn load_one(
        &mut self,
        plan: &EpochPlan,
        (index, key): (u64, DrawKey),
        slot: usize,
        buffer: &mut HostBuffer,
    ) -> Result<u32, LoaderError> {
        let large = self
            .reader
            .as_ref()
            .ok()
            .and_then(|reader| large_image_turn(reader, index));
        let label = retry_short_of_memory(
            self,
            large.is_some(),
            |w| w.scratch.release(),
            |worker| worker.load_and_transform(plan, (index, key), slot, buffer),
        );
        self.scratch.trim_if_asked();
        if large.is_some() {
            self.scratch.pixels = Vec::new();
        }
        label
    }

    /// [`Self::load_one`]'s work.
    fn load_and_transform(
        &mut self,
        plan: &EpochPlan,
        (index, key): (u64, DrawKey),
        slot: usize,
        buffer: &mut HostBuffer,
    ) -> Result<u32, LoaderError> {
        let metrics = &*self.shared.metrics;
        let settings = &self.shared.settings;
        let reader = self
            .reader
            .as_ref()
            .map_err(|reason| reader_unavailable(&worker_name(), reason))?;
        let draw = Draw {
            transform: &settings.transform,
            seed: plan.seed,
            epoch: plan.epoch,
            key,
        };
        let loaded = load_record(
            reader,
            index,
            draw,
            (&self.decoder, &mut self.scratch.pixels),
            Dest::Scratch,
            metrics,
        )?;

        let t_transform = Instant::now();
        let src: &[u8] = match loaded.place {
            Place::Scratch | Place::Slot => &self.scratch.pixels,
            Place::Payload => loaded.payload,
        };
        let params = loaded.params;
        let resized = self
            .scratch
            .resizer
            .apply(src, loaded.width, loaded.height, params.crop)
            .map_err(|e| e.for_record(index))?;
        if loaded.place == Place::Payload {
            // Resized straight from the shard's map: its pages were still the file's.
            still_readable(reader, index)?;
        }
        let s = settings.transform.out_size() as usize;
        let per_image = s * s * 3;
        let (norm, how) = (
            &self.normalizer,
            (s, settings.output.is_planar(), params.flip),
        );
        let out_bytes = match &mut buffer.values {
            HostValues::U8(v) => {
                layout::write_u8_hwc(
                    resized,
                    s,
                    params.flip,
                    &mut v[slot * per_image..(slot + 1) * per_image],
                );
                per_image
            }
            HostValues::F16(v) => write_slot(norm, resized, how, slot, v),
            HostValues::Bf16(v) => write_slot(norm, resized, how, slot, v),
            HostValues::F32(v) => write_slot(norm, resized, how, slot, v),
        };
        metrics.record(Stage::Transform, 1, out_bytes as u64, t_transform.elapsed());
        Ok(loaded.label)
    }
}

/// Writes `resized` normalized by `norm` into image `slot` of the batch `buffer`; returns
/// the bytes written.
fn write_slot<T: Normalized>(
    norm: &Normalizer,
    resized: &[u8],
    (size, planar, flip): (usize, bool, bool),
    slot: usize,
    buffer: &mut [T],
) -> usize {
    let per_image = size * size * 3;
    let dst = &mut buffer[slot * per_image..(slot + 1) * per_image];
    layout::write_normalized(resized, (size, planar), flip, norm, dst);
    std::mem::size_of_val(dst)
}

/// This worker thread's name, for errors.
fn worker_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("stoker-cpu")
        .to_owned()
}
