//! Which backend produces the batches: [`Device::Auto`]'s resolution for this process
//! ([`AutoChoice`], the one place that decides when Auto falls back to the CPU and says
//! why), and building the chosen backend (`build_backend`).

use std::sync::Arc;

use crate::config::{Device, LoaderConfig};
use crate::cpu::CpuPipeline;
use crate::error::LoaderError;
use crate::launcher::choose_device;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;

/// What [`Device::Auto`] comes to for one process: the local rank's GPU, or the CPU and the
/// reason. The loader ([`crate::LoaderBuilder::build`]) and `stoker decode --backend auto`
/// both decide with it, so they fall back in the same cases and say so in the same words.
///
/// # Examples
///
/// ```
/// use stoker_loader::AutoChoice;
/// // On a machine without a GPU driver: the CPU, and why.
/// match AutoChoice::for_local_rank(0) {
///     AutoChoice::Gpu { ordinal, .. } => println!("cuda:{ordinal}"),
///     choice => println!("{}", choice.fallback_note().expect("a CPU choice says why")),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AutoChoice {
    /// CUDA device `ordinal`: `local_rank mod visible` ([`choose_device`]).
    Gpu {
        /// The device ordinal among the visible devices.
        ordinal: usize,
        /// The process's local rank the device was chosen for.
        local_rank: u64,
        /// Devices the driver reports (`CUDA_VISIBLE_DEVICES` applies).
        visible: usize,
    },
    /// No usable GPU: load on the CPU.
    Cpu {
        /// Why (no driver, no device, or the chosen device could not be opened).
        reason: String,
    },
}

impl AutoChoice {
    /// Resolves [`Device::Auto`] for the process of local rank `local_rank`: the GPU
    /// [`choose_device`] picks when the CUDA driver loads and reports a device, else the
    /// CPU with the driver's reason. Never panics without CUDA.
    pub fn for_local_rank(local_rank: u64) -> AutoChoice {
        let visible = match crate::gpu::visible_devices() {
            Ok(0) => return AutoChoice::unavailable("the CUDA driver reports no device"),
            Ok(n) => n,
            Err(reason) => return AutoChoice::unavailable(reason),
        };
        match choose_device(Device::Auto, local_rank, || visible) {
            Device::Cuda(ordinal) => AutoChoice::Gpu {
                ordinal,
                local_rank,
                visible,
            },
            _ => AutoChoice::unavailable("no CUDA device chosen"),
        }
    }

    /// The CPU, because the chosen GPU cannot be used for `reason`: what a
    /// [`AutoChoice::Gpu`] becomes when opening its device fails as unavailable
    /// ([`LoaderError::GpuUnavailable`] in the loader, any failure to open nvJPEG in
    /// `stoker decode`).
    pub fn unavailable(reason: impl Into<String>) -> AutoChoice {
        AutoChoice::Cpu {
            reason: reason.into(),
        }
    }

    /// The device as the loader reports it ([`crate::Stats::device`]):
    /// `cuda:3 (device auto: local rank 3 mod 8 visible devices)`, or
    /// `cpu (device auto: <reason>)`: "device auto" rather than the Rust name, since the CLI
    /// (`--device auto`) and Python (`device="auto"`) print it too.
    pub fn describe(&self) -> String {
        match self {
            AutoChoice::Gpu {
                ordinal,
                local_rank,
                visible,
            } => format!(
                "cuda:{ordinal} (device auto: local rank {local_rank} mod {visible} visible device{})",
                if *visible == 1 { "" } else { "s" }
            ),
            AutoChoice::Cpu { reason } => format!("cpu (device auto: {reason})"),
        }
    }

    /// For a CPU choice, the line that says the fallback happened and why:
    /// `device auto fell back to the CPU: <reason>`; `None` for a GPU.
    pub fn fallback_note(&self) -> Option<String> {
        match self {
            AutoChoice::Gpu { .. } => None,
            AutoChoice::Cpu { reason } => {
                Some(format!("device auto fell back to the CPU: {reason}"))
            }
        }
    }
}

/// Picks the backend for `config.device`; [`Device::Auto`] takes the local rank's
/// GPU ([`AutoChoice::for_local_rank`]) and falls back to the CPU, saying why, when
/// there is none or it cannot be used. With the backend, the warning that a GPU the
/// driver reports could not be used (a machine without one falls back as expected, and
/// only logs it).
pub(crate) fn build_backend(
    config: &LoaderConfig,
    metrics: &Arc<Metrics>,
) -> Result<(Box<dyn Pipeline>, Option<String>), LoaderError> {
    let cpu = |why: &str| -> Result<Box<dyn Pipeline>, LoaderError> {
        let pipeline = CpuPipeline::build(config, Arc::clone(metrics))?;
        let workers = match config.workers {
            1 => "1 worker".to_string(),
            n => format!("{n} workers"),
        };
        metrics.set_backend(format!("cpu, {workers}{why}"));
        Ok(Box::new(pipeline))
    };
    // `unusable`: the GPU the driver reported, which could not be used.
    let fall_back = |choice: AutoChoice, unusable: Option<usize>| {
        let note = choice.fallback_note().unwrap_or_default();
        // Said once, here; `Stats::backend` keeps saying it.
        let mut warning = None;
        if let AutoChoice::Cpu { reason } = &choice {
            match unusable {
                None => tracing::info!(%reason, "device auto: no usable GPU, loading on the CPU"),
                Some(ordinal) => {
                    warning = Some(format!(
                        "device auto: cuda:{ordinal} is there but cannot be used, so batches are \
                         loaded on the CPU: {reason}; device=\"cuda\" (Rust Device::Cuda) \
                         makes this an error"
                    ))
                }
            }
        }
        metrics.set_device(choice.describe());
        Ok((cpu(&format!(" ({note})"))?, warning))
    };
    if let Some(options) = config
        .gpu_decoder
        .as_ref()
        .filter(|_| config.device != Device::Cpu)
    {
        // Public fields, so any count: refused here for Auto too, whether or not a GPU
        // takes them, as the same program would fail on the GPU machine (or take its
        // memory one nvJPEG state at a time).
        options.validate().map_err(|e| LoaderError::InvalidConfig {
            field: "gpu_decoder",
            reason: e.to_string(),
        })?;
    }
    match config.device {
        Device::Cpu => {
            metrics.set_device("cpu".to_owned());
            Ok((cpu("")?, None))
        }
        Device::Cuda(n) => {
            metrics.set_device(format!("cuda:{n}"));
            Ok((
                Box::new(crate::gpu::build(config, Arc::clone(metrics))?),
                None,
            ))
        }
        Device::Auto => {
            let choice = AutoChoice::for_local_rank(config.placement.local_rank);
            let AutoChoice::Gpu { ordinal, .. } = choice else {
                return fall_back(choice, None);
            };
            let mut gpu_config = config.clone();
            gpu_config.device = Device::Cuda(ordinal);
            metrics.set_device(choice.describe());
            match crate::gpu::build(&gpu_config, Arc::clone(metrics)) {
                Ok(gpu) => Ok((Box::new(gpu), None)),
                Err(LoaderError::GpuUnavailable { reason }) => {
                    fall_back(AutoChoice::unavailable(reason), Some(ordinal))
                }
                Err(e) => Err(e),
            }
        }
    }
}
