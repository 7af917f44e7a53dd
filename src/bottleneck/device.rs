//! Which device the bench runs on: `--device cpu`, an explicit GPU, or for
//! `auto` the local rank's GPU with the CPU as the fallback, the reason kept
//! for the table.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use stoker_loader::launcher::choose_device;
use stoker_loader::{Device, Placement};

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
    let (auto_ordinal, auto_reason) = match device {
        DeviceChoice::Auto => match stoker_loader::gpu::visible_devices() {
            Ok(n) => match choose_device(Device::Auto, placement.local_rank, || n) {
                Device::Cuda(k) => (
                    k,
                    format!(
                        "Device::Auto: local rank {} mod {n} visible device{}",
                        placement.local_rank,
                        if n == 1 { "" } else { "s" }
                    ),
                ),
                _ => (0, "the CUDA driver reports no device".to_string()),
            },
            Err(reason) => (0, reason),
        },
        _ => (0, String::new()),
    };
    let (gpu, no_gpu_reason) = match device {
        DeviceChoice::Cpu => (None, "--device cpu".to_string()),
        DeviceChoice::Auto => match pcie::open_gpu(auto_ordinal) {
            Ok(g) => (Some(g), String::new()),
            Err(BenchError::NoGpu { reason }) => (None, reason),
            Err(e) => return Err(e),
        },
        DeviceChoice::Cuda(n) => (Some(pcie::open_gpu(n)?), String::new()),
    };
    let ordinal = match device {
        DeviceChoice::Cuda(n) => n,
        _ => auto_ordinal,
    };
    let name = match (device, &gpu) {
        (DeviceChoice::Cuda(n), _) => format!("cuda:{n}"),
        (_, Some(_)) => format!("cuda:{ordinal}"),
        _ => "cpu".to_string(),
    };
    let choice = match (device, &gpu) {
        (DeviceChoice::Cuda(_), _) => "--device".to_string(),
        (DeviceChoice::Cpu, _) => "--device cpu".to_string(),
        (DeviceChoice::Auto, Some(_)) => auto_reason,
        (DeviceChoice::Auto, None) => format!("Device::Auto fell back to the CPU: {no_gpu_reason}"),
    };
    Ok(ChosenDevice {
        gpu,
        ordinal,
        no_gpu_reason,
        name,
        choice,
    })
}
