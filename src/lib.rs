//! # Overview
//!
//! stoker keeps training GPUs fed: datasets are converted once into LMDB shards
//! ([`formats`]), JPEG is decoded on the GPU with nvJPEG or on the CPU
//! ([`decode`]), and a loader ([`loader`]) streams batches into a training loop
//! while counting where the time goes.
//!
//! This crate re-exports the three library crates, and the versions of [`cudarc`] and
//! [`half`] that their public types use (device buffers and streams, `f16` batches); it
//! ships the `stoker` CLI.

pub use stoker_decode as decode;
pub use stoker_formats as formats;
pub use stoker_loader as loader;
/// The `cudarc` that stoker's CUDA types (`loader::CudaImages`, `decode::GpuDecoder`) are
/// built on: name its types through this path to get the same version.
pub use stoker_loader::gpu::cudarc;
/// The `half` whose `f16` the loader hands out (`loader::HostImages::as_f16`).
pub use stoker_loader::half;

pub mod bottleneck;
pub mod exit;
pub mod stop_cleanup;
