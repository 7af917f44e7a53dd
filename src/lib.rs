//! # Overview
//!
//! stoker keeps training GPUs fed: datasets are converted once into LMDB shards
//! ([`formats`]), JPEG is decoded on the GPU with nvJPEG or on the CPU
//! ([`decode`]), and a loader ([`loader`]) streams batches into a training loop
//! while counting where the time goes.
//!
//! This crate re-exports the three library crates and ships the `stoker` CLI.

pub use stoker_decode as decode;
pub use stoker_formats as formats;
pub use stoker_loader as loader;

pub mod bottleneck;
pub mod exit;
pub mod stop_cleanup;
