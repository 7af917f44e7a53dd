//! What a caller sets: the decoder's options ([`GpuDecoderOptions`]) and, per
//! batch, how the outputs will be used ([`BatchUse`]).

use std::ops::Range;

use crate::{DecodeError, ImageInfo, Limits, Region};

/// How a caller of [`GpuDecoder::decode_batch_for`](crate::GpuDecoder::decode_batch_for) will use a batch's outputs,
/// so the decoder can skip work the caller does not need.
///
/// # Examples
/// ```
/// use stoker_decode::{BatchUse, Region};
/// // A loader that waited for its outputs and reads one crop of each image.
/// let crops = [
///     Region { x: 40, y: 12, width: 300, height: 168 },
///     Region { x: 0, y: 50, width: 96, height: 46 },
/// ];
/// let usage = BatchUse { outputs_idle: true, regions: Some(&crops) };
/// assert_eq!(BatchUse::default().regions, None);
/// # let _ = usage;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchUse<'a> {
    /// The caller has already waited on the host for every earlier use of the
    /// outputs: see [`GpuDecoder::decode_batch_idle_outputs`](crate::GpuDecoder::decode_batch_idle_outputs). Default false.
    pub outputs_idle: bool,
    /// Per input, the region of its output the caller reads (a crop); the
    /// bytes of the output outside it are unspecified afterwards (left as
    /// they were, or, in the region's rows, other bytes). The CPU routes
    /// decode the region with [`CpuDecoder::decode_region_into_routed`](crate::CpuDecoder::decode_region_into_routed) (the
    /// decode skips work outside it and stops below it) and copy only the
    /// rows it spans; the nvJPEG routes decode whole images. `None` (the
    /// default): the whole of every image.
    pub regions: Option<&'a [Region]>,
}

/// Options of a [`GpuDecoder`](crate::GpuDecoder).
///
/// # Examples
/// ```
/// use stoker_decode::GpuDecoderOptions;
/// let o = GpuDecoderOptions { hardware_lanes: 8, ..GpuDecoderOptions::default() };
/// assert!(o.hardware);
/// assert!(o.hardware_preallocate && !o.hardware_handle_per_lane);
/// ```
#[derive(Debug, Clone)]
pub struct GpuDecoderOptions {
    /// Pixel limit enforced from each header before anything is queued.
    pub limits: Limits,
    /// Use the hardware JPEG engines when `nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE)` succeeds.
    pub hardware: bool,
    /// Hardware decoder states in flight per batch, each parsing on its own
    /// thread and decoding on its own stream (host-side parsing is what keeps
    /// the engines idle with a single state). Default 4.
    pub hardware_lanes: usize,
    /// CUDA-decoder states whose host phase (Huffman decoding on the CPU) runs
    /// in parallel. Default 4.
    pub cuda_states: usize,
    /// Fraction (0.0 to 1.0) of each batch's hardware-decodable images —
    /// those at the end of the batch — decoded on the CPU (rayon) into pinned
    /// staging while the engines decode the rest, then copied to their
    /// outputs asynchronously on the caller's stream. Counted as
    /// [`Route::CpuShare`](crate::Route::CpuShare). Use it when the engines, not the CPUs, bound
    /// throughput. Default 0.0 (off); values outside 0..=1 are clamped, NaN is 0.
    /// With [`GpuDecoderOptions::cpu_share_auto`], the starting share.
    pub cpu_share: f32,
    /// Threads that decode the CPU share, in a pool of the decoder's own (made
    /// with the decoder when a share or the offload is configured). 0 (the default): the machine's cores minus
    /// `hardware_lanes` minus 2 (the calling thread and one more), at least 1,
    /// so that the lanes' host-side parsing, which feeds the engines, keeps
    /// cores of its own instead of being time-sliced with CPU decoding; with
    /// the offload alone (no CPU share), minus `cuda_states` too, the CUDA
    /// decoder's threads, busy whenever the pool is.
    pub cpu_share_threads: usize,
    /// Adjust the CPU share after every batch instead of keeping `cpu_share`
    /// fixed: the share moves toward the fraction at which the CPUs take as
    /// long over it as the calling thread takes over the engines' part
    /// (parsing and submitting, and waiting for engines still busy with
    /// earlier batches), within 0.02..=0.5, starting from `cpu_share` (0:
    /// 0.1). It is switched off (0) while batches with it, balanced, are not
    /// at least 1 % faster than batches without it (the CPUs too slow to
    /// matter, or their work slowing the engines' part more than they add);
    /// one probe batch the other way, every 16 batches and less often (up to
    /// every 256) while the choice holds, keeps both rates measured.
    /// [`GpuDecoder::cpu_share_now`](crate::GpuDecoder::cpu_share_now) says where it stands. Default false.
    pub cpu_share_auto: bool,
    /// Decode some of each batch's CUDA-decoder images (progressive files, and
    /// others the hardware engines refuse) on the CPU share's threads instead
    /// of on the CUDA decoder, which runs beside the engines but several times
    /// slower per image ([`Route::CpuOffload`](crate::Route::CpuOffload)). How
    /// many is chosen from what each batch measured: the count moves until the
    /// GPU side's time (the longer of the engines' part and the CUDA
    /// decoder's) and the share threads' time match, and drops to none when
    /// even one image would lengthen the batch (then one image every 16 to 256
    /// batches keeps the CPUs' cost measured). Makes the share's thread pool (`cpu_share_threads`) even
    /// without a CPU share. Batches without such images are not affected.
    /// [`GpuDecoder::cpu_offload_now`](crate::GpuDecoder::cpu_offload_now)
    /// says where it stands. Default true.
    pub cpu_offload: bool,
    /// Call `nvjpegDecodeBatchedPreAllocate` on each hardware lane's state
    /// when it is created, so the engines' device memory comes from a pool
    /// sized up front instead of being allocated while decoding (NVIDIA's
    /// nvImageCodec always does this and reports a large gain). The hint is
    /// the lane's share of a 256-image batch (rounded up to whole engine
    /// cores), 640×480, 4:2:0, interleaved RGB: nvJPEG treats it as a starting
    /// size and grows the buffers for larger images. Skipped, with one `info`
    /// log, when the library lacks the function or refuses. Default true.
    pub hardware_preallocate: bool,
    /// Give each hardware lane its own `nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE)`
    /// handle (its state is created from it) instead of sharing one: tests
    /// whether one handle serializes the lanes' host-side work. Default false.
    pub hardware_handle_per_lane: bool,
    /// Decoder states per hardware lane, used in turn, one per call (values
    /// below 1 mean 1): with 2, a lane's next batch is parsed and submitted on
    /// one state while the previous batch's work on the other may still be in
    /// flight, in case nvJPEG waits for a state's previous work before reusing
    /// it (nvImageCodec waits on an event before reusing its single state).
    /// Default 1.
    pub hardware_states_per_lane: usize,
    /// Fraction (0.0 to 1.0) of each batch's hardware-decodable images — those
    /// just before the CPU share's, at the end of the batch — decoded by
    /// nvJPEG's GPU-hybrid backend (`NVJPEG_BACKEND_GPU_HYBRID`, batched:
    /// Huffman decoding on the GPU's SMs) on its own thread and stream while
    /// the engines decode the rest ([`Route::NvjpegGpuHuffman`](crate::Route::NvjpegGpuHuffman)). For when the
    /// engines are the bound and the SMs have room; nvjpeg.h documents the GPU
    /// Huffman path for batched baseline files in batches of more than 100
    /// images, so a share of 100 images or fewer stays on the engines
    /// (otherwise it would be Huffman-decoded on one CPU thread). Default 0.0 (off);
    /// out-of-range values are clamped, NaN is 0. When the backend cannot be
    /// created the images stay on the engines (logged once).
    pub gpu_huffman_share: f32,
    /// How the host waits for the GPU ([`WaitMode`]): spinning on a core, or
    /// asleep until the driver wakes it. Default [`WaitMode::Auto`], which
    /// spins: blocking waits were measured to save no CPU time per image and to
    /// cost throughput beside a CPU share (see [`WaitMode`]).
    pub waits: WaitMode,
    /// Where nvJPEG's own states and buffers get their memory
    /// ([`NvjpegMemory`]): from nvJPEG's allocators, or from caches that keep
    /// freed blocks for reuse instead of freeing them while decoding. Default
    /// [`NvjpegMemory::Auto`].
    pub nvjpeg_memory: NvjpegMemory,
    /// Create the decoder's own streams (hardware lanes, CUDA decoder, CPU share,
    /// GPU-Huffman lane) at the device's highest stream priority. nvJPEG's kernels
    /// (the CUDA decoder's IDCT and color conversion, and whatever the hardware path
    /// runs on the SMs) are queued on them: at the default priority, beside a training
    /// step that fills every SM, they can wait behind every kernel the step has queued,
    /// and the next batch with them; at the highest, their blocks are scheduled first
    /// as SMs free up. The loader's own streams run at that priority too. Default true.
    pub high_priority_streams: bool,
}

/// Where nvJPEG's states and buffers get their device and pinned memory.
///
/// nvJPEG allocates with `cudaMalloc`/`cudaHostAlloc` and frees with
/// `cudaFree`/`cudaFreeHost` whenever a state or buffer must grow, and those
/// frees wait for the whole device: beside a training step, for the step's
/// queued kernels. With [`NvjpegMemory::Cached`] a decoder gives nvJPEG
/// allocators of its own (`nvjpegCreateExV2`) that keep each freed block for
/// reuse once the stream that used it has passed the free, so that decoding
/// frees nothing once the buffers have reached their working size; blocks
/// idle beyond the peak in use are given back. What the caches did:
/// [`GpuDecoder::nvjpeg_memory_stats`](crate::GpuDecoder::nvjpeg_memory_stats).
///
/// [`NvjpegMemory::Auto`] is resolved when the decoder is made
/// ([`NvjpegMemory::resolve`]): to what the environment variable
/// `STOKER_NVJPEG_MEMORY` says (`library` or `cached`), else to `Library`
/// until the caches are measured on the GPU machine beside the library's
/// allocators (docs/BENCHMARKS.md).
///
/// # Examples
/// ```
/// use stoker_decode::{GpuDecoderOptions, NvjpegMemory};
/// let o = GpuDecoderOptions { nvjpeg_memory: NvjpegMemory::Cached, ..Default::default() };
/// assert_eq!(o.nvjpeg_memory.resolve(), NvjpegMemory::Cached);
/// assert_eq!("library".parse::<NvjpegMemory>(), Ok(NvjpegMemory::Library));
/// # if std::env::var_os("STOKER_NVJPEG_MEMORY").is_none() {
/// assert_eq!(NvjpegMemory::Auto.resolve(), NvjpegMemory::Library);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NvjpegMemory {
    /// `STOKER_NVJPEG_MEMORY`, else `Library`.
    #[default]
    Auto,
    /// nvJPEG's own allocators.
    Library,
    /// Stoker's caches (nvJPEG's own where the library lacks `nvjpegCreateExV2`).
    Cached,
}

/// What the environment variable `name` chooses for an `Auto` setting: a value other than
/// `auto` it parses to, or `None` when it is unset or says something else (logged, with
/// the `expected` values).
fn from_env<T: std::str::FromStr + PartialEq>(name: &str, auto: T, expected: &str) -> Option<T> {
    let v = std::env::var_os(name)?;
    match v.to_str().map(str::parse::<T>) {
        Some(Ok(m)) if m != auto => Some(m),
        _ => {
            tracing::warn!("{name}={v:?} ignored: expected {expected}");
            None
        }
    }
}

/// The environment variable that decides [`NvjpegMemory::Auto`] when set.
const MEMORY_ENV: &str = "STOKER_NVJPEG_MEMORY";

impl NvjpegMemory {
    /// `Library` or `Cached`: `self` unless it is `Auto`, which becomes what
    /// `STOKER_NVJPEG_MEMORY` says (anything but `library` or `cached` is
    /// logged and ignored), else `Library`.
    pub fn resolve(self) -> NvjpegMemory {
        if self != NvjpegMemory::Auto {
            return self;
        }
        from_env(MEMORY_ENV, NvjpegMemory::Auto, "library or cached")
            .unwrap_or(NvjpegMemory::Library)
    }

    /// The name [`FromStr`](std::str::FromStr) reads: `auto`, `library`, `cached`.
    pub fn name(self) -> &'static str {
        match self {
            NvjpegMemory::Auto => "auto",
            NvjpegMemory::Library => "library",
            NvjpegMemory::Cached => "cached",
        }
    }
}

impl std::fmt::Display for NvjpegMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for NvjpegMemory {
    type Err = String;

    /// Parses `auto`, `library`, `cached`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(NvjpegMemory::Auto),
            "library" => Ok(NvjpegMemory::Library),
            "cached" => Ok(NvjpegMemory::Cached),
            _ => Err(format!("`{s}`: expected auto, library or cached")),
        }
    }
}

/// How a thread that waits on the host for the GPU (a staging buffer's or a
/// lane state's event, the outputs of a batch) spends the wait.
///
/// CUDA's default scheduling (`CU_CTX_SCHED_AUTO`, which is a spin when the
/// process has fewer contexts than cores) spins: the waiting thread keeps a
/// core busy polling, and answers within microseconds. A blocking wait puts
/// the thread to sleep on an event created with `CU_EVENT_BLOCKING_SYNC`, and
/// the core is free for other work (the CPU share's decodes, a loader's
/// readers) until the driver wakes it, a little later than a spin would have
/// noticed.
///
/// Only stoker's own waits change: events created with the blocking flag (and
/// a stream wait done as a wait on such an event). The context's scheduling
/// flag is left alone because the primary context is shared with everything
/// else in the process (a training framework's own synchronizations would
/// change with it), and the flag is only sure to apply when set before the
/// context is first made active, which a library cannot arrange. Waits
/// inside nvJPEG, if any, follow the context's policy, which the application
/// sets (`cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync)` before its first
/// CUDA call).
///
/// [`WaitMode::Auto`] is resolved once, when the decoder (or loader) is built
/// ([`WaitMode::resolve`]): to `Spin`, or to what the environment variable
/// `STOKER_GPU_WAITS` (`spin` or `block`, a diagnostic) says. Blocking was
/// measured where it should pay, beside a CPU share's threads, and did not:
/// the waits are short (a batch's engines or copies), and a woken thread
/// answers late enough to cost more than the core it freed gave (the same CPU
/// time per image, fewer images per second; figures in docs/BENCHMARKS.md).
/// `Block` stays for machines where cores are scarcer.
///
/// # Examples
/// ```
/// use stoker_decode::{GpuDecoderOptions, WaitMode};
/// let o = GpuDecoderOptions { waits: WaitMode::Block, ..GpuDecoderOptions::default() };
/// assert_eq!(o.wait_mode(), WaitMode::Block);
/// assert_eq!("spin".parse::<WaitMode>(), Ok(WaitMode::Spin));
/// // Auto spins, with or without a CPU share (unless STOKER_GPU_WAITS says otherwise).
/// # if std::env::var_os("STOKER_GPU_WAITS").is_none() {
/// assert_eq!(GpuDecoderOptions::default().wait_mode(), WaitMode::Spin);
/// let shared = GpuDecoderOptions { cpu_share: 0.25, ..GpuDecoderOptions::default() };
/// assert_eq!(shared.wait_mode(), WaitMode::Spin);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WaitMode {
    /// What stoker finds best: spin today (see above), or `STOKER_GPU_WAITS`.
    #[default]
    Auto,
    /// Spin on a core until the GPU is done (CUDA's default).
    Spin,
    /// Sleep until the driver signals the event.
    Block,
}

/// The environment variable that decides [`WaitMode::Auto`] when set.
const WAITS_ENV: &str = "STOKER_GPU_WAITS";

impl WaitMode {
    /// `Spin` or `Block`: `self` unless it is [`WaitMode::Auto`], which becomes
    /// what `STOKER_GPU_WAITS` says (`spin` or `block`; anything else is
    /// logged and ignored), else `Spin`.
    ///
    /// # Examples
    /// ```
    /// use stoker_decode::WaitMode;
    /// assert_eq!(WaitMode::Block.resolve(), WaitMode::Block);
    /// # if std::env::var_os("STOKER_GPU_WAITS").is_none() {
    /// assert_eq!(WaitMode::Auto.resolve(), WaitMode::Spin);
    /// # }
    /// ```
    pub fn resolve(self) -> WaitMode {
        if self != WaitMode::Auto {
            return self;
        }
        from_env(WAITS_ENV, WaitMode::Auto, "spin or block").unwrap_or(WaitMode::Spin)
    }

    /// The name [`FromStr`](std::str::FromStr) reads: `auto`, `spin`, `block`.
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Auto => "auto",
            WaitMode::Spin => "spin",
            WaitMode::Block => "block",
        }
    }
}

impl std::fmt::Display for WaitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for WaitMode {
    type Err = String;

    /// Parses `auto`, `spin`, `block`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(WaitMode::Auto),
            "spin" => Ok(WaitMode::Spin),
            "block" => Ok(WaitMode::Block),
            _ => Err(format!("`{s}`: expected auto, spin or block")),
        }
    }
}

impl Default for GpuDecoderOptions {
    fn default() -> Self {
        GpuDecoderOptions {
            limits: Limits::default(),
            hardware: true,
            hardware_lanes: 4,
            cuda_states: 4,
            cpu_share: 0.0,
            cpu_share_threads: 0,
            cpu_share_auto: false,
            cpu_offload: true,
            hardware_preallocate: true,
            hardware_handle_per_lane: false,
            hardware_states_per_lane: 1,
            gpu_huffman_share: 0.0,
            waits: WaitMode::Auto,
            nvjpeg_memory: NvjpegMemory::Auto,
            high_priority_streams: true,
        }
    }
}

/// The most hardware lanes, CUDA-decoder states or hardware states per lane a
/// [`GpuDecoder`](crate::GpuDecoder) creates: each holds nvJPEG state and device buffers
/// (a lane also a thread), and a few per engine already keep the engines busy; far
/// above that is a typo that would take the GPU's memory one state at a time.
pub const MAX_DECODER_STATES: usize = 256;

/// The most threads the CPU share's pool starts ([`GpuDecoderOptions::cpu_share_threads`]),
/// as the loader's `MAX_WORKERS`: far above any machine's cores, far below what would
/// exhaust memory in thread stacks.
pub const MAX_SHARE_THREADS: usize = 1024;

impl GpuDecoderOptions {
    /// Checks the counts a caller may set to anything through the public fields:
    /// [`GpuDecoder::new`](crate::GpuDecoder::new) calls it before it creates anything.
    ///
    /// # Errors
    ///
    /// [`DecodeError::InvalidOptions`] for `hardware_lanes`, `cuda_states` or
    /// `hardware_states_per_lane` above [`MAX_DECODER_STATES`], or `cpu_share_threads`
    /// above [`MAX_SHARE_THREADS`]. Zero is taken as one (or, for `cpu_share_threads`,
    /// as "from the cores"), as before.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_decode::GpuDecoderOptions;
    /// assert!(GpuDecoderOptions::default().validate().is_ok());
    /// let typo = GpuDecoderOptions { cuda_states: 1_000_000, ..Default::default() };
    /// assert!(typo.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), DecodeError> {
        let counts = [
            ("hardware_lanes", self.hardware_lanes, MAX_DECODER_STATES),
            ("cuda_states", self.cuda_states, MAX_DECODER_STATES),
            (
                "hardware_states_per_lane",
                self.hardware_states_per_lane,
                MAX_DECODER_STATES,
            ),
            (
                "cpu_share_threads",
                self.cpu_share_threads,
                MAX_SHARE_THREADS,
            ),
        ];
        for (field, value, max) in counts {
            if value > max {
                return Err(DecodeError::InvalidOptions {
                    field,
                    reason: format!("{value} is more than the {max} allowed"),
                });
            }
        }
        // Each lane preallocates its states: the product is what takes GPU memory.
        let states = self.hardware_lanes * self.hardware_states_per_lane;
        if states > MAX_DECODER_STATES {
            return Err(DecodeError::InvalidOptions {
                field: "hardware_states_per_lane",
                reason: format!(
                    "{} per lane on {} hardware lanes is {states} decoder states, more than the {MAX_DECODER_STATES} allowed",
                    self.hardware_states_per_lane, self.hardware_lanes
                ),
            });
        }
        Ok(())
    }

    /// How a decoder built with these options waits: [`waits`](Self::waits)
    /// resolved ([`WaitMode::resolve`]).
    pub fn wait_mode(&self) -> WaitMode {
        self.waits.resolve()
    }

    /// Whether a CPU share of the engines' images is configured (a fixed one
    /// above 0, or the automatic one).
    pub(super) fn has_cpu_share(&self) -> bool {
        share_fraction(self.cpu_share) > 0.0 || self.cpu_share_auto
    }
}

impl BatchUse<'_> {
    /// The region of output `i` the caller reads, if not the whole image.
    pub(super) fn region(&self, i: usize) -> Option<Region> {
        self.regions.map(|r| r[i])
    }

    /// The bytes of output `i` that are copied: the rows of its region.
    pub(super) fn needed(&self, i: usize, info: &ImageInfo) -> Range<usize> {
        match self.region(i) {
            Some(r) => {
                let row = info.width as usize * 3;
                let bottom = r.bottom().min(info.height) as usize;
                r.y.min(info.height) as usize * row..bottom * row
            }
            None => 0..info.rgb_len(),
        }
    }
}

/// A share option as a fraction in 0..=1 (NaN is 0).
pub(super) fn share_fraction(v: f32) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        f64::from(v.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_default_to_preallocation_and_a_shared_handle() {
        let o = GpuDecoderOptions::default();
        assert!(o.hardware_preallocate);
        assert!(!o.hardware_handle_per_lane);
        assert_eq!(o.hardware_lanes, 4);
        assert_eq!(o.waits, WaitMode::Auto);
        assert!(o.high_priority_streams);
    }

    #[test]
    fn counts_set_through_public_fields_past_their_limit_are_refused() {
        assert!(GpuDecoderOptions::default().validate().is_ok());
        let at_limit = GpuDecoderOptions {
            hardware_lanes: 16,
            cuda_states: MAX_DECODER_STATES,
            hardware_states_per_lane: MAX_DECODER_STATES / 16,
            cpu_share_threads: MAX_SHARE_THREADS,
            ..GpuDecoderOptions::default()
        };
        assert!(at_limit.validate().is_ok());
        // `cuda_states: usize::MAX` made GpuDecoder::new create states until the GPU's
        // memory ran out; `hardware_states_per_lane` reserved a Vec past the address space.
        for set in [
            |o: &mut GpuDecoderOptions| o.hardware_lanes = usize::MAX,
            |o: &mut GpuDecoderOptions| o.cuda_states = MAX_DECODER_STATES + 1,
            |o: &mut GpuDecoderOptions| o.hardware_states_per_lane = usize::MAX,
            |o: &mut GpuDecoderOptions| o.cpu_share_threads = 1 << 40,
            // Each count within its limit, their product (the lanes' states) past it.
            |o: &mut GpuDecoderOptions| {
                o.hardware_lanes = MAX_DECODER_STATES;
                o.hardware_states_per_lane = MAX_DECODER_STATES;
            },
        ] {
            let mut o = GpuDecoderOptions::default();
            set(&mut o);
            let e = o.validate().unwrap_err();
            assert!(
                matches!(e, DecodeError::InvalidOptions { .. }),
                "{o:?}: {e}"
            );
        }
    }

    #[test]
    fn wait_modes_parse_and_print_their_names() {
        for m in [WaitMode::Auto, WaitMode::Spin, WaitMode::Block] {
            assert_eq!(m.to_string().parse::<WaitMode>(), Ok(m));
        }
        assert!("yield".parse::<WaitMode>().is_err());
    }

    #[test]
    fn nvjpeg_memory_kinds_parse_print_and_resolve() {
        for m in [
            NvjpegMemory::Auto,
            NvjpegMemory::Library,
            NvjpegMemory::Cached,
        ] {
            assert_eq!(m.to_string().parse::<NvjpegMemory>(), Ok(m));
        }
        assert!("pool".parse::<NvjpegMemory>().is_err());
        assert_eq!(
            GpuDecoderOptions::default().nvjpeg_memory,
            NvjpegMemory::Auto
        );
        assert_eq!(NvjpegMemory::Cached.resolve(), NvjpegMemory::Cached);
        assert_eq!(NvjpegMemory::Library.resolve(), NvjpegMemory::Library);
        if std::env::var_os(MEMORY_ENV).is_none() {
            assert_eq!(NvjpegMemory::Auto.resolve(), NvjpegMemory::Library);
        }
    }

    #[test]
    fn an_explicit_wait_mode_is_kept_and_auto_spins_even_with_a_cpu_share() {
        let with = |waits, cpu_share, cpu_share_auto| GpuDecoderOptions {
            waits,
            cpu_share,
            cpu_share_auto,
            ..GpuDecoderOptions::default()
        };
        assert_eq!(with(WaitMode::Spin, 0.3, false).wait_mode(), WaitMode::Spin);
        assert_eq!(
            with(WaitMode::Block, 0.0, false).wait_mode(),
            WaitMode::Block
        );
        // The environment override decides Auto on a machine that sets it.
        if std::env::var_os(WAITS_ENV).is_none() {
            assert_eq!(with(WaitMode::Auto, 0.0, false).wait_mode(), WaitMode::Spin);
            // Blocking beside a CPU share saved no CPU and cost throughput: Auto spins.
            assert_eq!(
                with(WaitMode::Auto, 0.25, false).wait_mode(),
                WaitMode::Spin
            );
            assert_eq!(with(WaitMode::Auto, 0.0, true).wait_mode(), WaitMode::Spin);
            assert_eq!(
                with(WaitMode::Auto, f32::NAN, false).wait_mode(),
                WaitMode::Spin
            );
        }
    }
}
