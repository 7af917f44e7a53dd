//! The loader's configuration vocabulary: where batches are produced ([`Device`]), their
//! layout and element type ([`Output`], [`DType`]), the bad-record policy ([`OnError`]), and
//! the settings a backend is built from ([`LoaderConfig`]). Plain data, read by the builder
//! and every backend.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use stoker_formats::Dataset;

use crate::error::LoaderError;
use crate::launcher::Placement;
use crate::sampler::Shuffle;
use crate::transform::Transform;

/// Where batches are produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Device {
    /// Host memory, CPU decode and transforms.
    Cpu,
    /// CUDA device `n`: nvJPEG decode and GPU transforms (the GPU path). The
    /// ordinal counts the devices this process can see (`CUDA_VISIBLE_DEVICES`
    /// applies, the driver numbers the devices it lists from 0).
    Cuda(usize),
    /// The local rank's GPU (device `local_rank mod visible devices`, see
    /// [`crate::launcher::choose_device`]; device 0 for a single process) if a usable GPU
    /// is present, else the CPU.
    Auto,
}

impl std::str::FromStr for Device {
    type Err = String;

    /// `auto`, `cpu`, `cuda` (device 0) or `cuda:N`, as the CLI, the Python `device=` and
    /// the examples take them; `cpu:0` too, which is how `torch.device("cpu", 0)` prints.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::Device;
    /// assert_eq!("cuda:1".parse::<Device>(), Ok(Device::Cuda(1)));
    /// assert_eq!("cpu:0".parse::<Device>(), Ok(Device::Cpu));
    /// assert!("gpu".parse::<Device>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" | "cpu:0" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("`{s}`: expected auto, cpu, cuda or cuda:N")),
        }
    }
}

/// Layout and element type of the batch images.
///
/// The planar outputs (`…Nchw`) are what a model in PyTorch's default memory format
/// takes. The interleaved float outputs (`F16Nhwc`, `Bf16Nhwc`, `F32Nhwc`) are for models in
/// channels-last format (`torch.channels_last`, the faster one for convolutions on tensor
/// cores): `batch.permute(0, 3, 1, 2)` of an `[n, h, w, 3]` batch is an `[n, 3, h, w]`
/// tensor already in that format, so no copy is made to convert it.
///
/// # Examples
/// ```
/// use stoker_loader::Output;
/// assert_eq!(Output::F32Nhwc.shape(8, 224), [8, 224, 224, 3]);
/// assert_eq!(Output::F16Nchw.shape(8, 224), [8, 3, 224, 224]);
/// assert!(Output::F16Nchw.is_planar() && !Output::U8Nhwc.is_planar());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Output {
    /// `[n, h, w, 3]` raw `u8` pixels (no normalization).
    U8Nhwc,
    /// `[n, 3, h, w]` normalized IEEE half.
    F16Nchw,
    /// `[n, 3, h, w]` normalized `f32`.
    F32Nchw,
    /// `[n, h, w, 3]` normalized IEEE half (channels last).
    F16Nhwc,
    /// `[n, h, w, 3]` normalized `f32` (channels last).
    F32Nhwc,
    /// `[n, 3, h, w]` normalized bfloat16 (the 8-bit exponent of `f32`, 8 bits of
    /// mantissa): the input of a model trained in bfloat16, without a cast kernel.
    Bf16Nchw,
    /// `[n, h, w, 3]` normalized bfloat16 (channels last).
    Bf16Nhwc,
}

impl Output {
    /// Bytes of one pixel channel value in a batch of this output.
    pub(crate) fn value_bytes(self) -> u64 {
        self.dtype().size() as u64
    }

    /// The element type of this output.
    pub fn dtype(self) -> DType {
        match self {
            Output::U8Nhwc => DType::U8,
            Output::F16Nchw | Output::F16Nhwc => DType::F16,
            Output::Bf16Nchw | Output::Bf16Nhwc => DType::Bf16,
            Output::F32Nchw | Output::F32Nhwc => DType::F32,
        }
    }

    /// Whether the channels are planes (`[n, 3, h, w]`) rather than interleaved (`[n, h, w, 3]`).
    pub fn is_planar(self) -> bool {
        matches!(self, Output::F16Nchw | Output::Bf16Nchw | Output::F32Nchw)
    }

    /// The shape of a batch of `n` images of `side × side`.
    pub fn shape(self, n: usize, side: usize) -> [usize; 4] {
        if self.is_planar() {
            [n, 3, side, side]
        } else {
            [n, side, side, 3]
        }
    }
}

/// The refusal of a batch of `images` images of `side`×`side`×3 values of `output` that
/// `what` (does not fit in 64 bits, needs more memory than there is...).
pub(crate) fn batch_too_big(images: u64, side: u64, output: Output, what: &str) -> LoaderError {
    LoaderError::InvalidConfig {
        field: "batch_size",
        reason: format!(
            "a batch of {images} images of {side}x{side}x3 ({} bytes each) {what}; lower batch_size or the output size",
            3 * output.value_bytes()
        ),
    }
}

/// What to do with a record that cannot be read or decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum OnError {
    /// Replace it by another sample of this rank's share of the epoch, drawn at random from
    /// the epoch's seed and the position, or failing that by the next usable record of the
    /// dataset (the batch stays full; it fails only when every record is bad), count it in [`crate::Stats::bad_records`] with its index,
    /// and log it once.
    Replace,
    /// Return the batch as an `Err` naming the record; iteration can continue.
    Error,
}

/// Everything a backend needs to build its pipeline (read by the GPU path in `gpu::build`).
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    pub(crate) dataset: Dataset,
    pub(crate) batch_size: u64,
    /// Its seed is `seed` for [`Shuffle::Global`] and [`Shuffle::Quasi`].
    pub(crate) shuffle: Shuffle,
    /// The loader's seed: the order's (through `shuffle`), and every random draw's (crops,
    /// flips, replacements of bad records), whatever the order mode
    /// ([`crate::LoaderBuilder::seed`]).
    pub(crate) seed: u64,
    pub(crate) drop_last: bool,
    /// Each rank's short last batch dropped; `None`: as `drop_last`.
    pub(crate) drop_partial_batch: Option<bool>,
    pub(crate) transform: Transform,
    pub(crate) output: Output,
    pub(crate) device: Device,
    pub(crate) rank: u64,
    pub(crate) world: u64,
    /// Whether `rank` and `world` were given ([`crate::LoaderBuilder::distributed`]): a
    /// world of 1 there is the caller's choice, not an oversight to warn of.
    pub(crate) ranks_given: bool,
    /// Where this process runs in its job, as the launcher says (rank, world,
    /// local rank and world): `Device::Auto` and the defaults below follow it.
    pub(crate) placement: Placement,
    /// Batches in flight at most (≥ 1).
    pub(crate) prefetch: u64,
    /// Whether `prefetch` was set by the user (not the default from `workers`).
    pub(crate) prefetch_explicit: bool,
    /// CPU worker threads (≥ 1).
    pub(crate) workers: usize,
    /// This process's share of the node's cores ([`crate::launcher::NodeShare::cores`]): what
    /// the GPU decoder's CPU-share pool is sized from unless its options say.
    pub(crate) node_cores: usize,
    /// GPU path: the most page-locked host memory the staging ring may take.
    pub(crate) pinned_memory: u64,
    pub(crate) on_error: OnError,
    /// `Device::Cuda` with JPEG records: share of each batch decoded on the CPU
    /// beside the JPEG engines (`None`: the decoder's default).
    pub(crate) gpu_cpu_share: Option<f32>,
    /// `Device::Cuda` with JPEG records: the nvJPEG decoder's options (`None`:
    /// its defaults); `gpu_cpu_share` still applies on top.
    pub(crate) gpu_decoder: Option<stoker_decode::GpuDecoderOptions>,
    /// GPU path: how the host waits on the GPU, the loader's own waits and the
    /// decoder's (`Auto`: the decoder's options decide).
    pub(crate) gpu_waits: stoker_decode::WaitMode,
    /// GPU path: every batch is handed out already waited on this stream.
    pub(crate) cuda_stream: Option<Arc<CudaStream>>,
    /// GPU path: allocate the pinned staging write-combined.
    pub(crate) write_combined: bool,
    /// GPU path: stage raw records with non-temporal stores.
    pub(crate) streaming_stores: bool,
    /// GPU path: copy raw records straight from the page-locked dataset map.
    pub(crate) zero_copy: bool,
    /// GPU path: the most of the dataset's map page-locked at once (`None`: half
    /// the machine's memory).
    pub(crate) page_lock_limit: Option<u64>,
    /// Start epoch e+1's pipeline when epoch e's last batch is handed out.
    pub(crate) prefetch_next_epoch: bool,
    /// Batches in this rank's epoch, as the sampler counts them (set at build): no more
    /// are ever in flight, so the CPU ring holds no more (`u64::MAX` until known).
    pub(crate) epoch_batches: u64,
    /// [`crate::Loader::gpu_fallback_note`], set at build.
    pub(crate) gpu_fallback: Option<String>,
}

/// Element type of a batch tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum DType {
    /// `u8` pixels.
    U8,
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
    /// bfloat16: the upper half of an IEEE single, rounded to nearest even.
    Bf16,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::Bf16 => 2,
            DType::F32 => 4,
        }
    }
}
