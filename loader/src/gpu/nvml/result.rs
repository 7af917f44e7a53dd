//! NVML calls with status codes turned into `Option`s (a failed sample is
//! simply missing).

use super::sys::{NvmlDevice, NvmlUtilization, Table, NVML_SUCCESS};

/// # Safety
/// `t` was loaded by `sys::load`.
pub(super) unsafe fn init(t: &Table) -> Option<()> {
    // SAFETY: no arguments; NVML counts init/shutdown pairs itself.
    (unsafe { (t.init)() } == NVML_SUCCESS).then_some(())
}

/// # Safety
/// NVML was initialized with [`init`].
pub(super) unsafe fn device(t: &Table, index: u32) -> Option<NvmlDevice> {
    let mut dev: NvmlDevice = std::ptr::null_mut();
    // SAFETY: `dev` is a valid out-pointer.
    (unsafe { (t.handle_by_index)(index, &mut dev) } == NVML_SUCCESS).then_some(dev)
}

/// # Safety
/// NVML was initialized with [`init`].
pub(super) unsafe fn device_by_pci_bus_id(
    t: &Table,
    bus_id: &std::ffi::CStr,
) -> Option<NvmlDevice> {
    let f = t.handle_by_pci_bus_id?;
    let mut dev: NvmlDevice = std::ptr::null_mut();
    // SAFETY: `bus_id` is NUL-terminated; `dev` is a valid out-pointer.
    (unsafe { f(bus_id.as_ptr(), &mut dev) } == NVML_SUCCESS).then_some(dev)
}

/// # Safety
/// `dev` came from [`device`] or [`device_by_pci_bus_id`].
pub(super) unsafe fn gpu_percent(t: &Table, dev: NvmlDevice) -> Option<u32> {
    let mut u = NvmlUtilization::default();
    // SAFETY: `u` is a valid out-pointer of the declared layout.
    (unsafe { (t.utilization)(dev, &mut u) } == NVML_SUCCESS).then_some(u.gpu)
}

/// # Safety
/// `dev` came from [`device`].
pub(super) unsafe fn jpeg_percent(t: &Table, dev: NvmlDevice) -> Option<u32> {
    let f = t.jpg_utilization?;
    let (mut u, mut period) = (0u32, 0u32);
    // SAFETY: valid out-pointers.
    (unsafe { f(dev, &mut u, &mut period) } == NVML_SUCCESS).then_some(u)
}
