//! Which device the bench runs on: `--device cpu`, an explicit GPU, or for
//! `auto` the local rank's GPU with the CPU as the fallback, the reason kept
//! for the table.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use stoker_loader::{AutoChoice, Placement};

use super::error::BenchError;
use super::options::DeviceChoice;
use super::pcie;

/// The device a run measures, and how it was chosen.
pub(crate) struct ChosenDevice {
    /// The opened GPU and its name; `None` when the run stays on the CPU.
    pub gpu: Option<(Arc<CudaContext>, String)>,
    /// The GPU's ordinal: `--device cuda:N`'s, or the one Auto picked (0 on the CPU).
    pub ordinal: usize,
    /// Why there is no GPU; empty when there is one.
    pub no_gpu_reason: String,
    /// `cpu` or `cuda:N`, for the run information.
    pub name: String,
    /// Why this device: the flag, the Auto rule, or the CPU fallback's reason.
    pub choice: String,
}

/// Opens the GPU `device` asks for. Auto takes the local rank's among those
/// visible, and falls back to the CPU with the reason kept for the table.
///
/// # Errors
///
/// [`BenchError::NoGpu`] when `--device cuda:N` names an unusable GPU; other
/// errors of [`pcie::open_gpu`] as they come.
pub(crate) fn choose(
    device: DeviceChoice,
    placement: &Placement,
) -> Result<ChosenDevice, BenchError> {
    let n = match device {
        DeviceChoice::Cpu => {
            return Ok(ChosenDevice {
                gpu: None,
                ordinal: 0,
                no_gpu_reason: "--device cpu".to_string(),
                name: "cpu".to_string(),
                choice: "--device cpu".to_string(),
            })
        }
        DeviceChoice::Cuda(n) => {
            return Ok(ChosenDevice {
                gpu: Some(pcie::open_gpu(n)?),
                ordinal: n,
                no_gpu_reason: String::new(),
                name: format!("cuda:{n}"),
                choice: "--device".to_string(),
            })
        }
        DeviceChoice::Auto => placement.local_rank,
    };
    // Auto is resolved by the loader's one rule, as `Device::Auto` and `stoker decode
    // --backend auto` are; a chosen GPU that cannot be opened becomes its CPU fallback.
    let mut auto = AutoChoice::for_local_rank(n);
    let mut gpu = None;
    if let AutoChoice::Gpu { ordinal, .. } = auto {
        match pcie::open_gpu(ordinal) {
            Ok(g) => gpu = Some(g),
            Err(BenchError::NoGpu { reason }) => auto = AutoChoice::unavailable(reason),
            Err(e) => return Err(e),
        }
    }
    Ok(match (gpu, auto.fallback_note()) {
        (Some(gpu), _) => {
            let ordinal = match auto {
                AutoChoice::Gpu { ordinal, .. } => ordinal,
                _ => 0,
            };
            // `describe` is "cuda:N (device auto: …)": the name, then why.
            let text = auto.describe();
            let why = text
                .split_once(" (")
                .map_or(text.as_str(), |(_, why)| why.trim_end_matches(')'));
            ChosenDevice {
                gpu: Some(gpu),
                ordinal,
                no_gpu_reason: String::new(),
                name: format!("cuda:{ordinal}"),
                choice: why.to_string(),
            }
        }
        (None, note) => ChosenDevice {
            gpu: None,
            ordinal: 0,
            no_gpu_reason: match &auto {
                AutoChoice::Cpu { reason } => reason.clone(),
                _ => String::new(),
            },
            name: "cpu".to_string(),
            choice: note.unwrap_or_default(),
        },
    })
}
