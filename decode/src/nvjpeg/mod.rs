//! nvJPEG, loaded at run time, in three layers: `sys` (raw types and the
//! function table), `result` (status codes to `Result`) and `safe` (one owner
//! per nvJPEG object). Only the owners are used outside this module.
//!
//! Nothing is linked at build time: [`NvJpeg::load`] opens the first library
//! found in the documented search order and resolves every symbol once.

mod error;
mod library;
mod result;
mod safe;
mod status;
mod sys;

pub use error::LoadError;
pub use library::NvJpeg;
pub(crate) use safe::{
    Backend, BatchedState, DecodeParams, Decoder, DecoderState, DeviceBuffer, Handle, JpegStream,
    OutputImage, PinnedBuffer,
};
pub use status::NvjpegStatus;
