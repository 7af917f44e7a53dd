//! nvJPEG, loaded at run time, in three layers: `sys` (raw types and the
//! function table), `result` (status codes to `Result`) and `safe` (one owner
//! per nvJPEG object). Only the owners are used outside this module, with
//! `allocator` (nvJPEG's memory through stoker's caches, `block_cache`).
//!
//! Nothing is linked at build time: [`NvJpeg::load`] opens the first library
//! found in the documented search order and resolves every symbol once.

mod allocator;
mod block_cache;
mod error;
mod library;
mod result;
mod safe;
mod status;
mod sys;

pub(crate) use allocator::CachedMemory;
pub use allocator::NvjpegMemoryStats;
pub use block_cache::BlockStats;
pub use error::LoadError;
pub use library::{NvJpeg, TOOLKIT_TARGET_DIRS};
pub(crate) use safe::{
    Backend, BatchedState, DecodeParams, Decoder, DecoderState, DeviceBuffer, Handle, JpegStream,
    OutputImage, PinnedBuffer,
};
pub use status::NvjpegStatus;
