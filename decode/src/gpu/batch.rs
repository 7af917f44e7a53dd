//! One `decode_batch_for` call as its stages see it: the inputs, their
//! headers and outputs ([`Batch`], read-only once step 1 is done), and what
//! each image has become so far and which stage takes it next ([`Plan`]).

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::CudaStream;

use super::options::BatchUse;
use crate::{DecodeError, ImageInfo, Route};

/// One image's outcome: its header and the route that decoded it.
pub(super) type Decoded = Result<(ImageInfo, Route), DecodeError>;

/// The batch every stage reads.
#[derive(Clone, Copy)]
pub(super) struct Batch<'a> {
    /// The JPEG bitstreams, one per output.
    pub(super) inputs: &'a [&'a [u8]],
    /// The header of every image step 1 accepted (`None`: it failed there).
    pub(super) infos: &'a [Option<ImageInfo>],
    /// The device address of every output (the guards that order the
    /// caller's stream around them live in `decode_batch_for`).
    pub(super) dst: &'a [CUdeviceptr],
    /// The caller's stream.
    pub(super) stream: &'a CudaStream,
    /// How the caller reads the outputs (the regions the CPU routes decode).
    pub(super) usage: BatchUse<'a>,
}

impl Batch<'_> {
    /// The header of image `i`, which step 1 accepted.
    pub(super) fn info(&self, i: usize) -> &ImageInfo {
        self.infos[i].as_ref().expect("probed")
    }
}

/// Each image's result once known, and the lists of the stages still to run.
pub(super) struct Plan {
    /// `None` until a stage decides the image.
    pub(super) results: Vec<Option<Decoded>>,
    /// For the hardware engines (step 3).
    pub(super) hw: Vec<usize>,
    /// For the CUDA decoder (step 4).
    pub(super) cuda: Vec<usize>,
    /// For the CPU (step 5).
    pub(super) cpu: Vec<usize>,
}
