//! # Overview
//!
//! stoker keeps training GPUs fed: datasets are converted once into LMDB shards
//! ([`formats`]), JPEG is decoded on the GPU with nvJPEG or on the CPU
//! ([`decode`]), and a loader ([`loader`]) streams batches into a training loop
//! while counting where the time goes.
//!
//! This crate re-exports the three library crates, the versions of
//! [`cudarc`](https://docs.rs/cudarc/0.19) and [`half`] that their public types use
//! (device buffers and streams, `f16` batches), and [`exit`], how a program built on
//! stoker ends on an error. It also ships the `stoker` CLI.
//!
//! ```no_run
//! use stoker::formats::Dataset;
//! use stoker::loader::{Loader, Output, Transform};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let loader = Loader::builder(Dataset::open("data/train")?)
//!     .transform(Transform::random_resized_crop(224).hflip(0.5))
//!     .output(Output::F16Nchw)
//!     .build()?;
//! for batch in loader.epoch(0) {
//!     let batch = batch?;
//!     let pixels: Option<&[stoker::half::f16]> = batch.images.as_f16(); // None on the GPU path
//!     let _ = (pixels, &batch.labels);
//! }
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! - `cli` (on by default): the `stoker` binary, `cli`, the command it runs (which the
//!   Python package's `stoker` console script runs too), and `bottleneck`, the stage
//!   benchmark behind `stoker bench`, whose advice names the CLI's flags. A crate that uses the
//!   library alone turns it off, which leaves out the CLI's dependencies (clap, indicatif,
//!   tracing-subscriber and the crates below them):
//!
//! ```toml
//! [dependencies]
//! stoker = { git = "<stoker's repository>", default-features = false }
//! ```
//!
//! - `progress-bar`: `formats::convert::TerminalBar`, a conversion progress bar on stderr
//!   (on with `cli`; alone, it brings indicatif without the CLI's other crates).
//!
//! # The crates' own pages
//!
//! The API is documented on the pages of `stoker_formats`, `stoker_decode` and
//! `stoker_loader`, whose examples name those crates: with this crate alone, write
//! `stoker::formats::Dataset`, `stoker::decode::CpuDecoder` and `stoker::loader::Loader`
//! where they write `stoker_formats::Dataset`, and so on.

pub use stoker_decode as decode;
pub use stoker_formats as formats;
pub use stoker_loader as loader;
/// The `cudarc` that stoker's CUDA types (`loader::CudaImages`, `decode::GpuDecoder`) are
/// built on: name its types through this path to get the same version.
pub use stoker_loader::gpu::cudarc;
/// The `half` whose `f16` the loader hands out (`loader::HostImages::as_f16`).
pub use stoker_loader::half;

// The allocator of the `stoker` binary and the Python extension: in the `stoker` command, a
// failed allocation that Rust would abort on ends the process with exit status 3 instead.
#[cfg(feature = "cli")]
pub mod alloc_failure;
#[cfg(feature = "cli")]
pub mod bottleneck;
#[cfg(feature = "cli")]
pub mod cli;
pub mod exit;
// The CLI's signal handlers (SIGINT, SIGTERM and SIGHUP end the process at once): not for
// a library user's program, which has stops of its own to handle.
#[cfg(feature = "cli")]
pub mod stop_cleanup;

/// The README's Rust code, compiled by `cargo test` as a doctest (its blocks are
/// `no_run`: they need a dataset), so that what a new user copies from it builds.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeRustCode;
