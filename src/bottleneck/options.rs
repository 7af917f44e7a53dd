//! What a bench run is asked to do: the device, batch, output size, time per
//! stage, simulated step and threads; and the progress callback it reports to.

use stoker_decode::WaitMode;

use super::error::BenchError;

/// Most threads `--threads` may ask for.
const MAX_THREADS: usize = 1024;

/// Where the pipeline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// The local rank's GPU (GPU 0 for a single process; the loader's
    /// [`stoker_loader::launcher::choose_device`]) when one is usable, else the CPU.
    #[default]
    Auto,
    /// CPU only; GPU stages are reported as not measured.
    Cpu,
    /// This GPU; an error when it cannot be used.
    Cuda(usize),
}

impl std::str::FromStr for DeviceChoice {
    type Err = String;

    /// Parses `auto`, `cpu`, `cuda`, `cuda:N`.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker::bottleneck::DeviceChoice;
    /// assert_eq!("cuda:1".parse::<DeviceChoice>(), Ok(DeviceChoice::Cuda(1)));
    /// assert!("gpu".parse::<DeviceChoice>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceChoice::Cuda)
                .ok_or_else(|| format!("`{s}`: expected auto, cpu, cuda or cuda:N")),
        }
    }
}

/// Settings of a bench run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOptions {
    /// Where the pipeline runs.
    pub device: DeviceChoice,
    /// Images per batch (loader, H2D copy size, GPU decode batch).
    pub batch: usize,
    /// Output side of the transforms.
    pub size: u32,
    /// Seconds per stage.
    pub seconds: f64,
    /// Simulated training step per batch, milliseconds (0 = no step).
    pub consumer_ms: f64,
    /// Threads for CPU stages; 0 = this process's share of the node (every core
    /// for a single process, [`stoker_loader::launcher::NodeShare`]).
    pub threads: usize,
    /// How the GPU stages' host threads wait for the GPU (the decoder's and
    /// the loader's setting, [`stoker_loader::LoaderBuilder::gpu_waits`]):
    /// compare `spin` and `block` by the `cpu_s` of the `gpu_decode` and
    /// `end_to_end` rows.
    pub waits: WaitMode,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            device: DeviceChoice::Auto,
            batch: 256,
            size: 224,
            seconds: 2.0,
            consumer_ms: 0.0,
            threads: 0,
            waits: WaitMode::Auto,
        }
    }
}

impl BenchOptions {
    /// Refuses options no stage can run with.
    pub(crate) fn check(&self) -> Result<(), BenchError> {
        if self.batch == 0 {
            return Err(BenchError::InvalidOption {
                option: "batch",
                reason: "must be at least 1".into(),
            });
        }
        if !(self.seconds.is_finite() && self.seconds > 0.0) {
            return Err(BenchError::InvalidOption {
                option: "seconds",
                reason: format!("{} is not a positive number of seconds", self.seconds),
            });
        }
        if !(self.consumer_ms.is_finite() && self.consumer_ms >= 0.0) {
            return Err(BenchError::InvalidOption {
                option: "consumer-ms",
                reason: format!(
                    "{} is not a non-negative number of milliseconds",
                    self.consumer_ms
                ),
            });
        }
        if self.size == 0 {
            return Err(BenchError::InvalidOption {
                option: "size",
                reason: "must be at least 1".into(),
            });
        }
        // Every decode thread holds a buffer of the largest image.
        if self.threads > MAX_THREADS {
            return Err(BenchError::InvalidOption {
                option: "threads",
                reason: format!("{} is more than {MAX_THREADS}", self.threads),
            });
        }
        Ok(())
    }
}

/// Told what is running, for a progress indicator.
pub trait Progress: Sync {
    /// A stage starts (`read`, `cpu_decode`, …).
    fn stage(&self, name: &str);
    /// Fraction of the current stage done, `0..=1`.
    fn advance(&self, fraction: f64);
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _name: &str) {}
    fn advance(&self, _fraction: f64) {}
}
