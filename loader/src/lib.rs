//! # Overview
//!
//! `stoker-loader` is the drop-in iterator a Rust training loop uses: it reads records from a
//! [`stoker_formats::Dataset`] in a deterministic order, decodes them (CPU: `stoker-decode`),
//! applies the training transforms (random resized crop, flip, normalize, layout, dtype) into a
//! ring of batch buffers allocated once, and hands whole batches to the consumer while counting
//! where the time goes, so that "is the GPU fed?" has a measured answer ([`Loader::stats`]).
//!
//! Through the `stoker` crate alone, this crate is `stoker::loader` and `stoker-formats` is
//! `stoker::formats`: write `stoker::loader::Loader` where these pages write
//! `stoker_loader::Loader`.
//!
//! ```no_run
//! use stoker_formats::Dataset;
//! use stoker_loader::{Device, Loader, Output, Shuffle, Transform};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let loader = Loader::builder(Dataset::open("data/imagenet")?)
//!     .batch_size(256)
//!     .shuffle(Shuffle::Global { seed: 0 })
//!     .drop_last(true)
//!     .transform(Transform::random_resized_crop(224).hflip(0.5).normalize(
//!         [0.485, 0.456, 0.406],
//!         [0.229, 0.224, 0.225],
//!     ))
//!     .output(Output::F32Nchw)
//!     .device(Device::Cpu)
//!     .prefetch(3)
//!     .build()?;
//! for epoch in 0..2 {
//!     for batch in loader.epoch(epoch) {
//!         let batch = batch?;
//!         let pixels: &[f32] = batch.images.as_f32().expect("F32Nchw output");
//!         let _ = (pixels, &batch.labels, &batch.indices);
//!     }
//!     println!("{}", loader.stats());
//! }
//! # Ok(()) }
//! ```
//!
//! # Other frameworks
//!
//! A batch's images (and labels) export as DLPack tensors that own the batch
//! ([`dlpack`]): [`HostImages::into_dlpack`], [`CudaImages::to_dlpack`] (which first makes
//! the consumer's stream wait for the batch). The consumer's deleter hands the buffer (host
//! ring) or slot (GPU ring) back, so a tensor kept alive is never overwritten. DLPack
//! consumers take them without a copy: in Python `torch.from_dlpack` and `numpy.from_dlpack`
//! through the `stoker` package, in C or C++ anything with a DLPack import (libtorch's
//! `at::fromDLPack` takes [`dlpack::ManagedTensor::into_raw`]'s pointer).
//!
//! tch-rs has no DLPack import. Its `Tensor::from_blob` (unsafe) makes a writable tensor
//! over memory it does not own: give it [`dlpack::ManagedTensor::data_ptr`],
//! [`dlpack::ManagedTensor::shape`] and [`dlpack::ManagedTensor::strides`] (in elements,
//! as `from_blob` takes them), the `Kind` of the batch's [`DType`] and the `Device` the
//! memory is on. Take a host batch with [`HostImages::into_dlpack`], whose memory no other
//! export shares; for a GPU batch, [`CudaImages::to_dlpack`] makes the stream it is given
//! wait for the batch: give it the stream tch reads on. Keep the [`dlpack::ManagedTensor`]
//! alive as long as the tch tensor or any view of it: dropping it hands the memory back to
//! the loader, which overwrites it.
//!
//! candle builds its tensors from slices it copies (candle tensors own their storage), so
//! a CPU batch goes in with one copy, on the `Device::Cpu` path:
//!
//! ```ignore
//! // candle-core = "0.9" (not a dependency of stoker)
//! use candle_core::{Device as CandleDevice, Tensor};
//! for batch in loader.epoch(epoch) {
//!     let batch = batch?;
//!     let host = batch.images.host().expect("Device::Cpu batch");
//!     let x = match host.as_f32() {
//!         Some(v) => Tensor::from_slice(v, &host.shape()[..], &CandleDevice::Cpu)?, // F32Nchw
//!         None => Tensor::from_slice(host.as_f16().expect("F16Nchw"), &host.shape()[..], &CandleDevice::Cpu)?,
//!     };
//!     let y = Tensor::new(batch.labels.as_slice(), &CandleDevice::Cpu)?; // u32 labels
//!     // ... model.forward(&x)?, loss with y ...
//! }
//! ```
//!
//! On CUDA, candle has no public constructor over device memory it did not allocate: copy a
//! [`CudaImages`] batch into a candle CUDA tensor (a device-to-device copy from
//! [`CudaImages::device_ptr`] after [`CudaImages::wait`]), or to the host and through
//! `Tensor::from_slice` as above.
//!
//! # Modules
//!
//! Public:
//!
//! - [`sampler`]: the per-rank order of sample indices for an epoch, from
//!   `(shuffle, seed, epoch, rank, world, drop_last, drop_partial_batch, batch_size)` and
//!   the records drawn from (all, or [`LoaderBuilder::indices`]) alone.
//! - [`resume`]: what a saved [`LoaderState`] records (its dataset's
//!   [`DatasetFingerprint`] among the rest) and the check that refuses a state that would
//!   mean other samples.
//! - [`transform`]: the transform description and the per-sample parameter draw
//!   ([`transform::Transform::params`], keyed by the sample's [`DrawKey`]) shared by the
//!   CPU and GPU paths.
//! - [`pixels`]: record → pixels, the step both backends run for every sample (read, check,
//!   draw the crop, decode only the crop); [`pixels::sample_pixels`] runs it for one record.
//! - [`dlpack`]: batches as DLPack tensors for other frameworks.
//! - [`launcher`]: which process of which job this is (torchrun, MPI launchers, Slurm, or
//!   alone), the GPU
//!   [`Device::Auto`] takes for it, and its share of the node's cores and memory (the
//!   defaults of [`LoaderBuilder::workers`] and [`LoaderBuilder::pinned_memory`]).
//! - [`metrics`]: stage counters (read, decode, transform, h2d, handoff), consumer wait, fed
//!   ratio, queue occupancy; [`Stats`] is the snapshot (Display, JSON, Prometheus).
//! - [`gpu`]: the GPU backend (pinned staging, nvJPEG, CUDA transform) and [`CudaImages`].

// For contributors (not in the API docs, which are for users):
//
// Internal, in the order a loader is made and runs:
//
// - `config`: the settings vocabulary (`Device`, `Output`, `DType`, `OnError`,
//   `LoaderConfig`); plain data every other module reads.
// - `builder`: `LoaderBuilder`, which completes the settings from the placement and the
//   node share and checks them.
// - `backend`: which backend runs (`AutoChoice` decides `Device::Auto`) and building it.
// - `pipeline`: the contract between the `Loader` and a backend (see below).
// - `cpu`: the CPU backend (worker threads: read → decode → transform into the batch ring).
// - `batch`: what a backend hands out (`Batch`, `Images`, `HostImages`).
// - `loader`: the `Loader` and its `Epoch` iterators (consumer-side accounting, resume,
//   the next epoch's early start).
//
// # Contract between the loader and its backends
//
// A backend (`cpu`, `gpu`) imports `pipeline`, `pixels`, `config`, `metrics`, `batch` and
// `transform`, never `builder` or `loader`. They meet at these items (all `pub(crate)`
// unless noted):
//
// 1. **Backend trait** `pipeline::Pipeline`:
//    `fn start_epoch(&self, plan: EpochPlan) -> Result<Box<dyn EpochStream + Send>, LoaderError>`.
//    `pipeline::EpochPlan` carries the epoch, this rank's sample order (`Arc<[u64]>`, from the
//    sampler), the batch size, the first batch to produce (resume) and the replacement rule for
//    bad records (`EpochPlan::replace_failed`: it notes the failed record, which the
//    `Loader` counts when its batch is handed out, and picks the replacement: random
//    picks over the rank's share, none twice in a batch nor one of the batch's own, then a
//    scan of the whole dataset).
//    `EpochStream::next_batch(deadline)`
//    blocks (until `deadline`, if any: then `Next::Pending`) and returns batches **in
//    order**; dropping the stream must stop production promptly.
//    The `Loader` wraps the stream: it measures consumer wait, the handoff stage, the resume
//    position and the fed ratio, so a backend never does that itself.
// 2. **Entry point**: `crate::gpu::build(config: &LoaderConfig, metrics: Arc<Metrics>)
//    -> Result<gpu::GpuPipeline, LoaderError>` with `gpu::GpuPipeline: Pipeline`, called by
//    `backend::build_backend` for `Device::Cuda` (and for `Device::Auto` when a GPU is
//    present, falling back to the CPU backend when `gpu::build` returns
//    `LoaderError::GpuUnavailable`). `LoaderConfig` has `pub(crate)` fields:
//    dataset, batch_size, shuffle, drop_last, drop_partial_batch, transform, output, device,
//    rank, world, prefetch, workers, on_error, and the GPU path's options.
// 3. **Batches**: `Batch` is one struct for both paths; `Images` is an enum:
//    `Images::Host(HostImages)` (CPU path) and `Images::Cuda(gpu::CudaImages)` (GPU path).
//    `Batch { images, labels: Vec<u32>, indices: Vec<u64>, epoch, index }`.
// 4. **Same crops on both paths**: every record goes through `pixels::load_record` (read,
//    CRC, `transform::Transform::params``(seed, epoch, key, src_w, src_h)` drawn from the
//    image size, with `key = EpochPlan::draw_key(pos, attempt)`, the sample's place in the
//    epoch; crop-only CPU decode), so both backends resize the same rectangle
//    (`SampleParams``{ crop: (x, y, w, h), flip }` in source pixels, torchvision
//    `RandomResizedCrop` parameterization; eval: resize + center crop).
//    `transform::Transform::out_size`, `transform::Transform::mean_std` give the rest.
// 5. **Counters**: `metrics::Metrics` (`Arc`, all atomics): `record(Stage, items, bytes, busy)`
//    for `Stage::{Read, Decode, Transform, H2d, Handoff}`, `count_route(&str)` for per-route
//    decode counts (`"cpu-zune"`, `"nvjpeg-hw"`... as `Route::name` spells them; `"raw"`),
//    `set_pinned_bytes`,
//    `set_device_bytes`.
// 6. **Wiring**: the GPU path is always compiled (it needs no CUDA at build time: the driver,
//    NVRTC and nvJPEG are loaded at run time), and `gpu::build` says with
//    `LoaderError::GpuUnavailable` what is missing on a machine without them.

#![warn(missing_docs)]

mod backend;
mod batch;
mod builder;
mod cache_ahead;
mod config;
mod cpu;
pub mod dlpack;
mod error;
mod fork;
pub mod launcher;
mod loader;
pub mod metrics;
mod mixing;
mod order_ahead;
pub(crate) mod pipeline;
pub mod pixels;
pub mod resume;
pub mod sampler;
mod scratch_memory;
pub mod transform;

// The GPU path (its own docs are in gpu/mod.rs): public so users can name `CudaImages` and the
// `cudarc` types it hands out.
pub mod gpu;

pub use backend::AutoChoice;
pub use batch::{Batch, HostImages, Images};
pub use builder::{LoaderBuilder, MAX_WORKERS};
pub use config::{DType, Device, LoaderConfig, OnError, Output};
pub use error::LoaderError;
pub use fork::Owner;
pub use gpu::CudaImages;
/// The `half` crate whose [`half::f16`] and [`half::bf16`] [`HostImages::as_f16`],
/// [`HostImages::as_bf16`] and [`Images::as_f16`] hand out: through this path, a caller
/// names the same version without guessing one.
pub use half;
pub use launcher::{Launcher, Placement};
pub use loader::{Epoch, Loader};
pub use metrics::{Stage, Stats};
pub use mixing::mixing_note;
pub use pipeline::Next;
pub use resume::{DatasetFingerprint, LoaderState, DRAWS_VERSION};
pub use sampler::{Order, Sampler, Selection, Shuffle};
pub use transform::{DrawKey, SampleParams, Transform};
