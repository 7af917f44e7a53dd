//! GPU backend: nvJPEG hardware engines (batched) for single-scan baseline
//! files, the nvJPEG CUDA decoder (hybrid backend, decoupled API) for the rest
//! of what nvJPEG takes, and the CPU backend for whatever nvJPEG rejects — per
//! image, never failing the whole batch.
//!
//! One file per stage, in the order a batch passes them: `options` (what
//! the caller sets), `routing` (step 1: probe and route), `share` and
//! `huffman` (the CPU and GPU-Huffman shares, split off in steps 1b/1c and
//! run on threads of their own), `hardware` (step 3: the engines' lanes),
//! `cuda` (step 4: the CUDA decoder), `fallback` (step 5: the CPU);
//! `decoder` holds [`GpuDecoder`] and runs the stages in order over a `batch`
//! view, with `staging` (pinned buffers) and `device` (context, stream waits)
//! beneath them.

mod batch;
mod cuda;
mod decoder;
mod device;
mod driver_library;
mod fallback;
mod hardware;
mod huffman;
mod offload;
mod options;
mod routing;
mod share;
mod staging;

pub use decoder::GpuDecoder;
pub use device::{bind_context, cuda_context, highest_stream_priority};
pub use driver_library::{driver_library_problem, DRIVER_ENTRY_POINTS};
pub use options::{
    BatchUse, GpuDecoderOptions, NvjpegMemory, WaitMode, MAX_DECODER_STATES, MAX_SHARE_THREADS,
};
