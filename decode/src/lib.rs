//! # Overview
//!
//! `stoker-decode` turns JPEG bytes into RGB interleaved u8 pixels (HWC), on
//! the CPU or on the GPU, and never fails a whole batch for one bad image.
//! Through the `stoker` crate alone it is `stoker::decode` (`stoker::decode::CpuDecoder`
//! where these pages write `stoker_decode::CpuDecoder`).
//!
//! - [`probe()`] reads the headers only (size, components, color space,
//!   subsampling, progressive/arithmetic/lossless, bit depth, EXIF
//!   orientation), bounded by [`Limits::max_pixels`].
//! - [`CpuDecoder`] routes each image by what `probe` finds: zune-jpeg for
//!   ordinary interleaved files ([`Route::CpuZune`]), jpeg-decoder for
//!   multi-scan sequential files, nonstandard sampling and what zune-jpeg
//!   rejects ([`Route::CpuFallback`]). Gray, CMYK and YCCK come out as RGB.
//!   Arithmetic coding, 12-bit and lossless give [`DecodeError::Unsupported`].
//! - [`GpuDecoder`] (nvJPEG, loaded at run time, see [`NvJpeg::load`]) decodes
//!   batches into device memory: hardware engines where they apply, the CUDA
//!   decoder for the rest, the CPU for what nvJPEG rejects; [`DecodeTimings`]
//!   says where its wall-clock time goes, phase by phase.
//!
//! ```
//! use stoker_decode::{probe, CpuDecoder, Limits};
//!
//! let data = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
//!     "/../testdata/conformance/core/go__video-001.q50.420.jpeg")).unwrap();
//! let limits = Limits::default();
//! let info = probe(&data, &limits)?;          // header only
//! let mut rgb = vec![0u8; info.rgb_len()];     // the caller owns the buffer
//! let dec = CpuDecoder::new(limits);
//! let (info, route) = dec.decode_into_routed(&data, &mut rgb)?;
//! println!("{}x{} via {route}", info.width, info.height);
//! # Ok::<(), stoker_decode::DecodeError>(())
//! ```

mod color;
mod cpu;
mod error;
mod gpu;
mod memory;
pub mod nvjpeg;
mod per_process;
mod probe;
mod progressive_scratch;
mod ran_out;
mod route;
mod slice_reader;
mod std_huffman;
mod threads;
mod timing;

pub use cpu::{CpuDecoder, Region};
/// The cudarc version this crate is built against (for device buffers and streams).
pub use cudarc;
pub use error::DecodeError;
pub use gpu::{
    bind_context, cuda_context, driver_library_problem, highest_stream_priority, BatchUse,
    GpuDecoder, GpuDecoderOptions, NvjpegMemory, WaitMode, DRIVER_ENTRY_POINTS, MAX_DECODER_STATES,
    MAX_SHARE_THREADS,
};
pub use memory::DecodeMemory;
pub use nvjpeg::{BlockStats, LoadError, NvJpeg, NvjpegMemoryStats, NvjpegStatus};
/// For stoker-formats' own per-process state; not part of the decode API.
#[doc(hidden)]
pub use per_process::PerProcess;
pub use probe::{
    can_allocate, could_ever_allocate, entropy_coded_end, primary_image_end, probe, ColorSpace,
    ImageInfo, Limits, Subsampling, MAX_SCANS,
};
pub use route::{Route, RouteCounters, RouteCounts};
pub use timing::DecodeTimings;
