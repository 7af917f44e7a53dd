//! [`LoaderBuilder`]: the loader's settings, checked and completed at build from this
//! process's placement and node share, then turned into a running [`Loader`] over the
//! backend they choose.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use stoker_formats::Dataset;

use crate::backend::build_backend;
use crate::config::OnError;
use crate::error::LoaderError;
use crate::launcher::{NodeShare, Placement};
use crate::loader::Loader;
use crate::metrics::Metrics;
use crate::resume::{check_resume, DatasetFingerprint, LoaderState};
use crate::sampler::{Sampler, Shuffle};

/// The most worker threads a loader takes ([`LoaderBuilder::workers`]): far above any
/// machine's useful count, far below what would exhaust memory in thread stacks and
/// per-worker batch buffers.
pub const MAX_WORKERS: usize = 1024;
use crate::transform::Transform;

use crate::config::{DType, Device, LoaderConfig, Output};

/// Settings for a [`Loader`]; see [`Loader::builder`]. A clone builds another loader of
/// the same settings over the same open dataset (one per rank in a test, say).
#[derive(Debug, Clone)]
pub struct LoaderBuilder {
    config: LoaderConfig,
    resume: Option<LoaderState>,
    /// Where rank and world come from.
    ranks: Ranks,
    /// A placement given by the caller; `None`: read from the environment at build.
    placement: Option<Placement>,
    /// Settings whose defaults come from this process's share of the node, known at build.
    workers: Option<usize>,
    prefetch: Option<usize>,
    pinned_memory: Option<u64>,
    /// [`LoaderBuilder::seed`]; `None`: the shuffle's seed.
    seed: Option<u64>,
    /// [`LoaderBuilder::indices`]; `None`: every record.
    indices: Option<Vec<u64>>,
}

/// Where a loader's rank and world come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ranks {
    /// Rank 0 of 1: the whole dataset.
    Single,
    /// [`LoaderBuilder::distributed`].
    Given,
    /// [`LoaderBuilder::distributed_from_env`]: the placement's.
    Launcher,
}

impl LoaderBuilder {
    /// Draws each epoch from the records `indices` of the dataset instead of from all of
    /// them, as PyTorch's `Subset` or FFCV's `indices`: a train/validation split, or
    /// classes kept out, of one converted dataset; a quick run on a fraction. Everything
    /// else counts in them: shuffling, the split over ranks, `drop_last`, the batches per
    /// epoch, the records that stand in for bad ones, and [`LoaderState`]. An index given
    /// twice is drawn twice an epoch; a sequential order yields them in the order given.
    /// Batches report the records' own indices. See [`Sampler::with_indices`].
    ///
    /// [`LoaderBuilder::build`] fails with [`LoaderError::InvalidConfig`] (`indices`) for an
    /// empty list or an index past the dataset's last record.
    pub fn indices(mut self, indices: Vec<u64>) -> Self {
        self.indices = Some(indices);
        self
    }

    /// Images per batch (default 256).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.config.batch_size = n as u64;
        self
    }

    /// Epoch order (default [`Shuffle::Global`] with seed 0). Its seed is the loader's
    /// seed unless [`LoaderBuilder::seed`] gives one.
    pub fn shuffle(mut self, shuffle: Shuffle) -> Self {
        self.config.shuffle = shuffle;
        self
    }

    /// The loader's seed: the one seed of every random choice it makes, the order of
    /// [`Shuffle::Global`] and [`Shuffle::Quasi`] (it replaces the seed inside the
    /// [`Shuffle`], whichever of `seed` and `shuffle` is called first) and the crops, flips
    /// and bad-record replacements of any order, [`Shuffle::Sequential`] included. Without
    /// it, the loader's seed is the shuffle's ([`Shuffle::seed`]: 0 for `Sequential`). It is
    /// recorded in [`Loader::state`] and checked on resume.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Loader, Shuffle, Transform};
    /// // A dataset shuffled when it was written, read in order with seeded random crops.
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?)
    ///     .shuffle(Shuffle::Sequential)
    ///     .seed(1234)
    ///     .transform(Transform::random_resized_crop(224).hflip(0.5))
    ///     .build()?;
    /// assert_eq!(loader.seed(), 1234);
    /// # Ok(()) }
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Drop the last partial batch (and, when distributed, the tail that does not divide
    /// evenly); default `false`. [`LoaderBuilder::drop_partial_batch`] sets the first apart.
    pub fn drop_last(mut self, drop: bool) -> Self {
        self.config.drop_last = drop;
        self
    }

    /// Drop each rank's short last batch or keep it, whatever `drop_last` (default: as
    /// `drop_last`): `.drop_last(true).drop_partial_batch(false)` cuts the uneven tail, so no
    /// sample is seen twice, and keeps the partial batch ([`Sampler::with_drop_partial_batch`]).
    pub fn drop_partial_batch(mut self, drop: bool) -> Self {
        self.config.drop_partial_batch = Some(drop);
        self
    }

    /// Per-image transform (default: eval, `center_crop(224, 256)`).
    pub fn transform(mut self, transform: Transform) -> Self {
        self.config.transform = transform;
        self
    }

    /// Batch layout and dtype (default [`Output::F32Nchw`]).
    pub fn output(mut self, output: Output) -> Self {
        self.config.output = output;
        self
    }

    /// Where batches are produced (default [`Device::Cpu`]).
    pub fn device(mut self, device: Device) -> Self {
        self.config.device = device;
        self
    }

    /// This process is `rank` of `world`; each rank gets a disjoint slice of every epoch.
    pub fn distributed(mut self, rank: usize, world: usize) -> Self {
        self.config.rank = rank as u64;
        self.config.world = world as u64;
        self.ranks = Ranks::Given;
        self
    }

    /// Like [`LoaderBuilder::distributed`] with the rank and world the launcher set:
    /// torchrun's `RANK` / `WORLD_SIZE`, else Horovod's, Open MPI's, MPICH's, else a
    /// Slurm step's `SLURM_PROCID` / `SLURM_NTASKS` (the order and every variable:
    /// [`crate::launcher::Placement::from_vars`]); a single process when none is there.
    /// The variables are read by [`LoaderBuilder::build`] (or given with
    /// [`LoaderBuilder::placement`]), which reports inconsistent ones.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Device, Loader};
    /// // The same line under `torchrun --nproc-per-node 8` and `srun --ntasks-per-node 8`.
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?)
    ///     .device(Device::Auto) // the local rank's GPU
    ///     .distributed_from_env() // this rank's slice of every epoch
    ///     .build()?;
    /// println!("{}", loader.stats().placement.expect("set at build").describe());
    /// # Ok(()) }
    /// ```
    pub fn distributed_from_env(mut self) -> Self {
        self.ranks = Ranks::Launcher;
        self
    }

    /// Where this process runs in its job, instead of reading the launcher's
    /// variables at build ([`crate::launcher::Placement::from_env`]): for a caller that knows
    /// better (an embedding with its own launcher, a test). [`Device::Auto`] and the
    /// node-share defaults ([`LoaderBuilder::workers`], [`LoaderBuilder::pinned_memory`])
    /// follow it; rank and world are used with [`LoaderBuilder::distributed_from_env`].
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = Some(placement);
        self
    }

    /// Batches in flight ahead of the consumer (default `2 × workers`, at least 2).
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = Some(batches);
        self
    }

    /// CPU worker threads: the CPU path's workers, the GPU path's reader threads
    /// (default: this process's share of the node, [`crate::launcher::NodeShare::cores`]:
    /// the available cores divided by the processes on the node, at least 1; all
    /// of them for a single process).
    ///
    /// At most [`MAX_WORKERS`]. The same advice as PyTorch's
    /// `DataLoader(num_workers=...)`: the workers of
    /// all processes on a node should not exceed its cores, which the training
    /// processes need too; raise it when [`Loader::stats`] says the loader is
    /// starved on read, decode or transform and the cores are not all busy.
    pub fn workers(mut self, threads: usize) -> Self {
        self.workers = Some(threads);
        self
    }

    /// GPU path: the most page-locked (pinned) host memory the staging ring may
    /// take, in bytes (default: half the machine's memory divided by the processes
    /// on the node, [`crate::launcher::NodeShare::pinned_bytes`]). A ring of
    /// `prefetch + 2` slots that does not fit is built with fewer slots (a lower
    /// prefetch, at least one batch in flight); when even that does not fit,
    /// [`LoaderBuilder::build`] fails naming this setting. It bounds this
    /// loader's ring: loaders of one process each size theirs against their own
    /// setting. The dataset map page-locked for raw records
    /// ([`LoaderBuilder::page_lock_limit`]) is not counted: every process on the
    /// node locks the same page-cache pages. Ignored by the CPU path.
    pub fn pinned_memory(mut self, bytes: u64) -> Self {
        self.pinned_memory = Some(bytes);
        self
    }

    /// [`Device::Cuda`] with JPEG records: the fraction (0.0 to 1.0, clamped) of
    /// each batch's hardware-decodable images decoded on the CPUs beside the JPEG
    /// engines ([`stoker_decode::GpuDecoderOptions::cpu_share`]; default: the
    /// decoder's, 0.0). Worth it when the engines, not the CPUs, bound throughput.
    /// Ignored by the CPU path and for raw records.
    pub fn gpu_cpu_share(mut self, share: f32) -> Self {
        self.config.gpu_cpu_share = Some(share);
        self
    }

    /// [`Device::Cuda`] with JPEG records: every option of the nvJPEG decoder
    /// ([`stoker_decode::GpuDecoderOptions`]: hardware lanes, preallocation, the
    /// GPU-Huffman and CPU shares beside the engines, ...; default:
    /// [`crate::gpu::decoder_defaults`], the decoder's defaults with two states
    /// per hardware lane: start from those to change one option).
    /// [`LoaderBuilder::gpu_cpu_share`], when also set, overrides `cpu_share`.
    /// Used only by the GPU path with JPEG records, but checked
    /// ([`stoker_decode::GpuDecoderOptions::validate`]) by every build but
    /// [`Device::Cpu`]'s, so that a program refused on a GPU machine is refused on a
    /// machine without one too.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_decode::GpuDecoderOptions;
    /// use stoker_loader::{gpu, Device, Loader};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?)
    ///     .device(Device::Cuda(0))
    ///     .gpu_decoder(GpuDecoderOptions { gpu_huffman_share: 0.4, ..gpu::decoder_defaults() })
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn gpu_decoder(mut self, options: stoker_decode::GpuDecoderOptions) -> Self {
        self.config.gpu_decoder = Some(options);
        self
    }

    /// GPU path: how the host threads that wait for the GPU (the producer
    /// waiting for a staging slot or a batch's arena, the decoder's waits on
    /// its staging and engine states) spend the wait
    /// ([`stoker_decode::WaitMode`]): spinning on a core, or asleep until the
    /// driver wakes them so the core serves the reader threads and the
    /// decoder's CPU share meanwhile. Default [`WaitMode::Auto`]: spinning, even
    /// beside a CPU share, where blocking was measured to save no CPU time and to
    /// cost throughput (docs/BENCHMARKS.md); the environment variable
    /// `STOKER_GPU_WAITS=spin|block`, read when the loader is built, decides `Auto`
    /// instead (a diagnostic).
    /// Overrides the `waits` of [`LoaderBuilder::gpu_decoder`]'s options unless
    /// `Auto`. Ignored by the CPU path.
    ///
    /// [`WaitMode::Auto`]: stoker_decode::WaitMode::Auto
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_decode::WaitMode;
    /// use stoker_loader::{Device, Loader};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?)
    ///     .device(Device::Cuda(0))
    ///     .gpu_waits(WaitMode::Block) // free the cores while the GPU works
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn gpu_waits(mut self, mode: stoker_decode::WaitMode) -> Self {
        self.config.gpu_waits = mode;
        self
    }

    /// The configuration as set so far, before `build` fills in the node's
    /// defaults: for tests of where a setting lands.
    #[cfg(test)]
    pub(crate) fn into_config(self) -> LoaderConfig {
        self.config
    }

    /// GPU path: the stream your training step runs on. Every batch is handed out
    /// already made to wait for its data on `stream` (a GPU-side wait, no host
    /// synchronization), so [`crate::gpu::CudaImages`]' views are readable at once
    /// and no [`crate::gpu::CudaImages::wait`] call is needed; the batch's slot is
    /// reused only after `stream` has passed the point where the batch was dropped.
    /// The stream must belong to the device's primary context (any
    /// context of the same device `n`, as [`stoker_decode::cuda_context`] returns).
    /// Rejected with [`Device::Cpu`]; unused when [`Device::Auto`] falls back to the
    /// CPU. Make the stream through `stoker_decode::cuda_context`, which returns an error
    /// where no GPU can be used: cudarc's `CudaContext::new` panics where the driver
    /// library is missing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Device, Images, Loader};
    /// // The training step's stream, where there is a GPU (`Device::Auto` may run on the CPU).
    /// let stream = match stoker_decode::cuda_context(0) {
    ///     Ok(ctx) => Some(ctx.new_stream()?),
    ///     Err(no_gpu) => {
    ///         println!("{no_gpu}");
    ///         None
    ///     }
    /// };
    /// let mut builder = Loader::builder(stoker_formats::Dataset::open("data/train")?)
    ///     .device(Device::Auto);
    /// if let Some(stream) = &stream {
    ///     builder = builder.cuda_stream(stream.clone());
    /// }
    /// let loader = builder.build()?;
    /// for batch in loader.epoch(0) {
    ///     if let Images::Cuda(images) = &batch?.images {
    ///         let x = images.as_f32().expect("already waited on `stream`");
    ///         // ... launch the step on `stream` reading `x` ...
    ///         let _ = x;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn cuda_stream(mut self, stream: Arc<CudaStream>) -> Self {
        self.config.cuda_stream = Some(stream);
        self
    }

    /// GPU path: allocate the pinned staging buffers write-combined
    /// (`CU_MEMHOSTALLOC_WRITECOMBINED`; default `false`). Write-combined memory
    /// bypasses the CPU caches: the readers' copies into it do not evict other
    /// data, and the device may read it faster over PCIe, but CPU *reads* of it
    /// are very slow. The loader only writes its staging (raw pixels, CPU-resized
    /// oversize images); a JPEG record inside a raw dataset is the exception (it is
    /// CPU-decoded in place: correct, slower). Measure before turning it on.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Device, Loader};
    /// // A pre-decoded (raw) dataset: the loader only writes its staging.
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train-raw")?)
    ///     .device(Device::Cuda(0))
    ///     .write_combined_staging(true)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn write_combined_staging(mut self, on: bool) -> Self {
        self.config.write_combined = on;
        self
    }

    /// GPU path, raw records: the reader threads copy each record into pinned
    /// staging with non-temporal (streaming) stores ([`crate::gpu::copy_streaming`])
    /// instead of `memcpy` (default `true`). A record is below glibc's
    /// non-temporal threshold, so `memcpy` first reads every destination line into
    /// the cache and writes it back later: memory traffic that competes with the
    /// device reading the previous slot. Streaming stores write each line once
    /// (measured in docs/BENCHMARKS.md).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Device, Loader};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train-raw")?)
    ///     .device(Device::Cuda(0))
    ///     .streaming_staging_stores(false) // plain memcpy, to compare
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn streaming_staging_stores(mut self, on: bool) -> Self {
        self.config.streaming_stores = on;
        self
    }

    /// GPU path, raw records: page-lock the dataset's memory map
    /// (`cuMemHostRegister`, read-only) and copy each record to the device straight
    /// from it, with no host copy into pinned staging (default `true`).
    ///
    /// When the shards together fit in [`LoaderBuilder::page_lock_limit`] (half the
    /// machine's memory by default; a limit for the whole process, so what its
    /// other loaders keep locked is taken off it) they are locked whole at build
    /// and stay resident while the loader lives (registering reads them into the
    /// page cache). A larger dataset is locked as a moving window: each epoch's
    /// batches are cut into runs whose records lie in shards taking at most half
    /// of what is left of the limit,
    /// and a thread locks the next run's shards while the current one is read and
    /// unlocks each run's once its copies are done. That needs an order that stays
    /// in a few shards at a time ([`crate::Shuffle::Sequential`], or
    /// [`crate::Shuffle::Quasi`] with blocks of about a shard or less); an epoch
    /// whose batches each read more than a window holds is staged, and says so in
    /// the log. A whole-dataset shuffle ([`crate::Shuffle::Global`]), whose every
    /// batch reads most shards, locks a part instead: as many shards as fit in what
    /// is left of the limit, at build and for good; the other shards' records are
    /// staged (the diagnostic environment variable `STOKER_RAW_OVER_LIMIT=window`
    /// or `part`, read at build, forces either).
    ///
    /// Records the map cannot give (the driver refused a registration, a
    /// replacement for a bad record outside the window, images larger than a
    /// staging stride, which are resized on the CPU) go through pinned staging,
    /// which is then allocated on first use: a loader whose every record comes
    /// from the map allocates none. With `false`, the reader threads stage every
    /// record in pinned memory. `stats().backend` says which is in use. Each
    /// batch's records go in one `cuMemcpyBatchAsync` (CUDA 13 drivers; one copy
    /// per record on older drivers, or with the diagnostic environment variable
    /// `STOKER_H2D_PER_RECORD=1` set when the loader is built).
    ///
    /// Why: the device reads pinned memory more slowly while the host writes to
    /// memory at the same time, and staging writes every byte once; reads (the
    /// record CRC) do not slow it (docs/BENCHMARKS.md, `examples/h2d_probe`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Device, Loader};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train-raw")?)
    ///     .device(Device::Cuda(0))
    ///     .zero_copy_h2d(false) // always stage through pinned buffers
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn zero_copy_h2d(mut self, on: bool) -> Self {
        self.config.zero_copy = on;
        self
    }

    /// GPU path, raw records: the most bytes of dataset maps this process may
    /// keep page-locked at once, all its loaders together, in bytes (default: half
    /// the machine's memory). A loader locks only what keeps the process's total
    /// within its own limit: a dataset that fits in what the process's other
    /// loaders leave is locked whole; a larger one as a moving window of half of
    /// what is left, two windows at a time, or, shuffled whole, as a part of its
    /// shards locked for good ([`LoaderBuilder::zero_copy_h2d`]); with
    /// nothing left its records are staged in pinned memory. The log says which,
    /// naming the bytes the other loaders hold. Shards another loader over the
    /// same files has locked are shared and count once (a [`Dataset`] opened again
    /// while open shares its maps). So a training and a validation loader, or a
    /// loader over a dataset replaced on disk beside the old loader still reading
    /// the old files, never lock more than the limit together.
    ///
    /// A window is checked against the limit when it is locked: a loader built
    /// later may have taken what was left, and the window's records are then
    /// staged (warned). Not divided among the processes on the node: they map the
    /// same shard files, so their registrations lock the same page-cache pages. The
    /// staging ring's pinned buffers are not counted here
    /// ([`LoaderBuilder::pinned_memory`]). `0` stages every record in pinned
    /// memory. Ignored by the CPU path and by JPEG datasets.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Device, Loader, Shuffle};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train-raw")?)
    ///     .device(Device::Cuda(0))
    ///     // a shard-local order, so that an epoch moves through windows of shards
    ///     .shuffle(Shuffle::Quasi { seed: 0, block: 4096 })
    ///     .page_lock_limit(32 << 30)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn page_lock_limit(mut self, bytes: u64) -> Self {
        self.config.page_lock_limit = Some(bytes);
        self
    }

    /// Start producing epoch `e + 1` as soon as epoch `e`'s last batch is handed out
    /// (default `true`), so that its first batches are ready when the consumer,
    /// done with that last batch, asks for [`Loader::epoch`]`(e + 1)`: without it
    /// every epoch starts with an empty pipeline and the consumer waits for one
    /// batch's read and decode. On the CPU path it starts earlier, once the workers have
    /// taken up epoch `e`'s last batch, so that the workers with nothing left of epoch `e`
    /// do not wait for the others' last batches. Asking for any other epoch discards the early start
    /// (its batches are dropped, nothing is counted twice); so does a pending
    /// [`LoaderBuilder::resume`]. Counted in [`crate::Stats::epochs_started_early`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::Loader;
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?;
    /// for epoch in 0..3 {
    ///     for batch in loader.epoch(epoch) {
    ///         let _batch = batch?; // epoch + 1 starts loading once this is the last one
    ///     }
    /// }
    /// assert_eq!(loader.stats().epochs_started_early, 2);
    /// # Ok(()) }
    /// ```
    pub fn prefetch_next_epoch(mut self, on: bool) -> Self {
        self.config.prefetch_next_epoch = on;
        self
    }

    /// Bad record policy (default [`OnError::Replace`]).
    pub fn on_error(mut self, policy: OnError) -> Self {
        self.config.on_error = policy;
        self
    }

    /// Continue from a saved [`Loader::state`]: the first call to [`Loader::epoch`] with
    /// `state.epoch` skips the `state.position` batches already consumed; for a state past
    /// its epoch's first batch, the epoch after it starts from its first batch (as after a
    /// loop that left `state.epoch` early). Until then, any other epoch fails with
    /// [`LoaderError::ResumeEpoch`]: start the training loop at `state.epoch`.
    pub fn resume(mut self, state: LoaderState) -> Self {
        self.resume = Some(state);
        self
    }

    /// Checks the settings, allocates the batch ring and starts the pipeline threads.
    ///
    /// # Errors
    ///
    /// [`LoaderError::InvalidConfig`] for out-of-range settings,
    /// [`LoaderError::EmptyDataset`], [`LoaderError::ResumeMismatch`] when the resume state
    /// belongs to another seed, dataset or layout of the epoch, or lies past the epoch,
    /// [`LoaderError::Format`] when the shards cannot be read, [`LoaderError::GpuUnavailable`] for [`Device::Cuda`] without a usable
    /// GPU (or in a build without the GPU path), [`LoaderError::Thread`] if a thread cannot be
    /// started, [`LoaderError::LauncherEnv`] when the launcher's variables (read unless
    /// [`LoaderBuilder::placement`] gave one) are inconsistent: with
    /// [`LoaderBuilder::distributed_from_env`] all of them, otherwise only the local
    /// figures, which choose the device and the node share
    /// ([`crate::launcher::Placement::with_ranks_from_vars`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use stoker_loader::{Loader, Shuffle};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?)
    ///     .batch_size(64)
    ///     .shuffle(Shuffle::Quasi { seed: 1, block: 512 })
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn build(self) -> Result<Loader, LoaderError> {
        let LoaderBuilder {
            mut config,
            resume,
            ranks,
            placement,
            workers,
            prefetch,
            pinned_memory,
            seed,
            indices,
        } = self;
        if let Some(seed) = seed {
            config.shuffle = config.shuffle.with_seed(seed);
        }
        config.seed = seed.unwrap_or(config.shuffle.seed());
        let placement = match placement {
            Some(p) => p,
            None if ranks == Ranks::Launcher => Placement::from_env()?,
            // Rank and world were given (or are 0 of 1): the launcher's local figures
            // still choose the device and the node share; its rank and world, when
            // missing or broken, give way to the caller's (said in the note).
            None => Placement::with_ranks_from_env(config.rank, config.world)?,
        };
        if let Some(note) = &placement.note {
            tracing::warn!(placement = %placement.describe(), "launcher variables: {note}");
        }
        if ranks == Ranks::Launcher {
            config.rank = placement.rank;
            config.world = placement.world;
        }
        config.ranks_given = ranks == Ranks::Given;
        let share = NodeShare::of_this_machine(&placement);
        config.placement = placement;
        config.node_cores = share.cores;
        config.workers = workers.unwrap_or(share.cores);
        let invalid = |field, reason: &str| {
            Err(LoaderError::InvalidConfig {
                field,
                reason: reason.to_owned(),
            })
        };
        if config.workers == 0 {
            return invalid("workers", "must be at least 1 thread");
        }
        // Each worker is a thread with a batch buffer of its own: a typo like 10**6
        // would take the machine's memory before the first batch.
        if config.workers > MAX_WORKERS {
            return invalid(
                "workers",
                &format!(
                    "{} threads is more than the {MAX_WORKERS} allowed (this machine has {} cores)",
                    config.workers, share.cores
                ),
            );
        }
        config.prefetch_explicit = prefetch.is_some();
        config.prefetch = prefetch.map_or((2 * config.workers as u64).max(2), |p| p as u64);
        config.pinned_memory = pinned_memory.unwrap_or(share.pinned_bytes);
        if config.prefetch == 0 {
            return invalid("prefetch", "must be at least 1 batch");
        }
        if config.batch_size > u64::from(u32::MAX) {
            return invalid("batch_size", "too large");
        }
        if config.cuda_stream.is_some() && config.device == Device::Cpu {
            return invalid(
                "cuda_stream",
                "a CUDA stream is only used with Device::Cuda or Device::Auto",
            );
        }
        config.transform.validate()?;
        check_output_range(&config)?;
        let sampler = Sampler::new(
            config.dataset.len(),
            config.shuffle,
            config.rank,
            config.world,
            config.batch_size,
            config.drop_last,
        )?
        .with_drop_partial_batch(config.drop_partial_batch.unwrap_or(config.drop_last));
        let sampler = match indices {
            Some(indices) => sampler.with_indices(indices, config.dataset.len())?,
            None => sampler,
        };
        let dataset = DatasetFingerprint::of(config.dataset.manifest());
        let resume = resume
            .map(|state| check_resume(&state, config.seed, &sampler, dataset))
            .transpose()?;
        let metrics = Arc::new(Metrics::default());
        metrics.set_placement(config.placement.clone(), config.rank, config.world);
        let (backend, gpu_fallback) = build_backend(&buffer_config(&config, &sampler)?, &metrics)?;
        config.gpu_fallback = gpu_fallback;
        let loader = Loader::new(backend, sampler, metrics, config, resume);
        for note in [
            loader.mixing_note(),
            loader.workers_note(),
            loader.ranks_note(),
            loader.empty_epochs_note(),
            loader.memory_note(),
            loader.gpu_fallback_note(),
        ]
        .into_iter()
        .flatten()
        {
            tracing::warn!("{note}");
        }
        Ok(loader)
    }
}

/// Refuses a normalization that maps pixels past the largest finite value of a 2-byte
/// output (a half's 65504, bfloat16's ~3.39e38): the batch would hold infinities, not an
/// error.
fn check_output_range(config: &LoaderConfig) -> Result<(), LoaderError> {
    let largest = config.transform.largest_normalized();
    let range = match config.output.dtype() {
        DType::F16 => half::f16::MAX.to_f32(),
        DType::Bf16 => half::bf16::MAX.to_f32(),
        _ => return Ok(()),
    };
    if largest <= range {
        return Ok(());
    }
    Err(LoaderError::InvalidConfig {
        field: "transform",
        reason: format!(
            "normalize mean / std maps pixels to {largest}, past the {:?} range ({range}); \
             widen std or use a float32 output",
            config.output
        ),
    })
}

/// The configuration the backends size their buffers from: `batch_size` no larger than the
/// largest batch the sampler hands out (a batch size above the dataset's share gives one
/// batch of the share; its buffers need not be any larger), after checking that one batch
/// buffer can exist at all.
fn buffer_config(config: &LoaderConfig, sampler: &Sampler) -> Result<LoaderConfig, LoaderError> {
    let largest = sampler.batch_len(0).max(1);
    let side = u64::from(config.transform.out_size());
    let (bytes, batches) = cpu_ring(config, sampler);
    let too_big = |what: String| crate::config::batch_too_big(largest, side, config.output, &what);
    let Some(ring) = bytes.and_then(|b| b.checked_mul(batches)) else {
        return Err(too_big("does not fit in 64 bits".into()));
    };
    // The anonymous memory this process already holds is counted where the ring is
    // allocated (`CpuPipeline::build`): the GPU path, also `Device::Auto` on a GPU, has no
    // such ring, and a training process holding most of the memory must still build one.
    if let Some(total) = crate::launcher::memory_total() {
        if ring > total {
            return Err(too_big(format!(
                "times {batches} batches in flight (prefetch, at most an epoch's batches, + workers) needs {ring} bytes, more than the {total} bytes of memory this process may use (the machine's, or its cgroup's limit)"
            )));
        }
    }
    let mut sized = config.clone();
    sized.batch_size = largest;
    sized.epoch_batches = sampler.num_batches().max(1);
    Ok(sized)
}

/// The bytes of one batch buffer (`None` past 64 bits) and the batches the CPU path keeps
/// in its ring: `prefetch + workers`, prefetch capped by the batches an epoch has
/// (CpuPipeline::build).
pub(crate) fn cpu_ring(config: &LoaderConfig, sampler: &Sampler) -> (Option<u64>, u64) {
    let side = u64::from(config.transform.out_size());
    let bytes = side
        .checked_mul(side)
        .and_then(|px| px.checked_mul(3 * config.output.value_bytes()))
        .and_then(|img| img.checked_mul(sampler.batch_len(0).max(1)));
    let batches = config.prefetch.min(sampler.num_batches().max(1));
    (bytes, batches.saturating_add(config.workers as u64))
}

impl Loader {
    /// Starts building a loader over `dataset`.
    ///
    /// # Examples
    ///
    /// See the crate overview.
    pub fn builder(dataset: Dataset) -> LoaderBuilder {
        LoaderBuilder {
            config: LoaderConfig {
                dataset,
                batch_size: 256,
                shuffle: Shuffle::Global { seed: 0 },
                seed: 0,
                drop_last: false,
                drop_partial_batch: None,
                transform: Transform::center_crop(224, 256),
                output: Output::F32Nchw,
                device: Device::Cpu,
                rank: 0,
                world: 1,
                ranks_given: false,
                placement: Placement::single(),
                // The next five are set by `build` from this process's node share.
                prefetch: 2,
                prefetch_explicit: false,
                workers: 1,
                node_cores: 1,
                pinned_memory: u64::MAX,
                on_error: OnError::Replace,
                gpu_cpu_share: None,
                gpu_decoder: None,
                gpu_waits: stoker_decode::WaitMode::Auto,
                cuda_stream: None,
                write_combined: false,
                streaming_stores: true,
                zero_copy: true,
                page_lock_limit: None,
                prefetch_next_epoch: true,
                epoch_batches: u64::MAX,
                gpu_fallback: None,
            },
            resume: None,
            ranks: Ranks::Single,
            placement: None,
            workers: None,
            prefetch: None,
            pinned_memory: None,
            seed: None,
            indices: None,
        }
    }
}
