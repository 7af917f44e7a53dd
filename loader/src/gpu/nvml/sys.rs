//! Raw NVML types and the function table (only what the sampler uses).

use std::ffi::{c_char, c_int, c_uint};

pub(super) type NvmlReturn = c_int;
pub(super) const NVML_SUCCESS: NvmlReturn = 0;
/// `nvmlDevice_t`, an opaque handle.
pub(super) type NvmlDevice = *mut std::ffi::c_void;

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Default)]
pub(super) struct NvmlUtilization {
    pub(super) gpu: c_uint,
    pub(super) memory: c_uint,
}

pub(super) struct Table {
    pub(super) init: unsafe extern "C" fn() -> NvmlReturn,
    pub(super) handle_by_index: unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn,
    /// `nvmlDeviceGetHandleByPciBusId_v2`: NVML numbers devices its own way
    /// (it ignores `CUDA_VISIBLE_DEVICES`), the PCI bus id names one for sure.
    pub(super) handle_by_pci_bus_id:
        Option<unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn>,
    pub(super) utilization: unsafe extern "C" fn(NvmlDevice, *mut NvmlUtilization) -> NvmlReturn,
    /// `nvmlDeviceGetJpgUtilization` (drivers ≥ 520); absent on older ones.
    pub(super) jpg_utilization:
        Option<unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut c_uint) -> NvmlReturn>,
    /// Keeps the library mapped while the function pointers are used.
    pub(super) _lib: libloading::Library,
}

/// Loads the table; `None` if the library or a required symbol is missing.
pub(super) fn load() -> Option<Table> {
    // The driver package installs the versioned name; the unversioned one
    // comes with development packages only.
    for name in ["libnvidia-ml.so.1", "libnvidia-ml.so"] {
        // SAFETY: NVML's initializers have no preconditions; the library stays
        // loaded for as long as the table (a process-wide static) lives.
        let Ok(lib) = (unsafe { libloading::Library::new(name) }) else {
            continue;
        };
        // SAFETY: the symbol types are those of nvml.h for these entry points.
        unsafe {
            let init = *lib
                .get::<unsafe extern "C" fn() -> NvmlReturn>(b"nvmlInit_v2\0")
                .ok()?;
            let handle_by_index = *lib
                .get::<unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn>(
                    b"nvmlDeviceGetHandleByIndex_v2\0",
                )
                .ok()?;
            let handle_by_pci_bus_id = lib
                .get::<unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn>(
                    b"nvmlDeviceGetHandleByPciBusId_v2\0",
                )
                .ok()
                .map(|s| *s);
            let utilization = *lib
                .get::<unsafe extern "C" fn(NvmlDevice, *mut NvmlUtilization) -> NvmlReturn>(
                    b"nvmlDeviceGetUtilizationRates\0",
                )
                .ok()?;
            let jpg_utilization = lib
                .get::<unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut c_uint) -> NvmlReturn>(
                    b"nvmlDeviceGetJpgUtilization\0",
                )
                .ok()
                .map(|s| *s);
            return Some(Table {
                init,
                handle_by_index,
                handle_by_pci_bus_id,
                utilization,
                jpg_utilization,
                _lib: lib,
            });
        }
    }
    None
}
