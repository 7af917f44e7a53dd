//! Whether the CUDA driver library can be called at all: present, and holding every
//! entry point stoker calls.
//!
//! cudarc looks each driver function up on its first call and panics when the library
//! lacks it, wherever that call happens: at start-up, or in the middle of an epoch for a
//! function first used there. A `libcuda.so` that loads and lacks some of them is not
//! rare: a partial copy in a container image, a look-alike of another vendor's stack, a
//! driver older than the functions stoker calls. Every entry point is therefore looked up
//! once, before the first call into the driver, and a library that lacks any is a reason
//! for no GPU, like a missing library.

use std::sync::OnceLock;

/// The driver functions stoker calls: through cudarc's safe API (each method's calls,
/// as its `driver::result` layer makes them), and through its own FFI (`sys::` calls in
/// the loader). Every driver since CUDA 12.0 exports all of them.
///
/// Newer functions are not here: the loader looks them up where it uses them and does
/// without them on older drivers (`cuMemcpyBatchAsync_v2` after `cuDriverGetVersion`,
/// the elapsed-time functions by name). A test of the loader checks that each driver
/// function its code names is in one list or the other.
pub const DRIVER_ENTRY_POINTS: &[&str] = &[
    // Start-up and errors.
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    // Devices.
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDeviceTotalMem_v2",
    // Contexts.
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuCtxGetStreamPriorityRange",
    // Streams and events.
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventQuery",
    "cuEventRecord",
    "cuEventSynchronize",
    // Memory.
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuMemFree_v2",
    "cuMemFreeAsync",
    "cuMemGetInfo_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8Async",
    // Kernels (the transforms, compiled with NVRTC).
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
];

/// Why the CUDA driver cannot be called here, or `None` when its library loads and
/// holds every entry point in [`DRIVER_ENTRY_POINTS`]. Looked up once per process (the
/// library cudarc opens stays open). Never panics, and calls no driver function: what
/// it returns is the reason to give before the first call.
///
/// # Examples
///
/// ```
/// match stoker_decode::driver_library_problem() {
///     None => println!("the CUDA driver library is complete"),
///     Some(reason) => println!("no GPU: {reason}"),
/// }
/// ```
pub fn driver_library_problem() -> Option<String> {
    static PROBLEM: OnceLock<Option<String>> = OnceLock::new();
    PROBLEM.get_or_init(check).clone()
}

fn check() -> Option<String> {
    // SAFETY: `is_culib_present` only tries to open the library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Some("the CUDA driver library (libcuda.so) is not present".into());
    }
    // SAFETY: the library is present, so `culib` opens it (once, kept for the process);
    // `get` only looks a name up, and the address is never called or read here.
    let lib = unsafe { cudarc::driver::sys::culib() };
    let missing: Vec<&str> = DRIVER_ENTRY_POINTS
        .iter()
        .copied()
        .filter(|name| unsafe { lib.get::<*const ()>(name.as_bytes()) }.is_err())
        .collect();
    (!missing.is_empty()).then(|| missing_reason(&missing))
}

/// The reason for a library that lacks `missing` (some of [`DRIVER_ENTRY_POINTS`]).
fn missing_reason(missing: &[&str]) -> String {
    const SHOWN: usize = 6;
    let mut names = missing[..missing.len().min(SHOWN)].join(", ");
    if missing.len() > SHOWN {
        names.push_str(&format!(" and {} more", missing.len() - SHOWN));
    }
    format!(
        "the CUDA driver library (libcuda.so) lacks entry points stoker calls ({names}): \
         it is not NVIDIA's driver library, or a driver older than CUDA 12"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_names_what_is_missing_and_counts_the_rest() {
        let one = missing_reason(&["cuInit"]);
        assert!(
            one.contains("(cuInit)") && one.contains("lacks entry points"),
            "{one}"
        );
        let many = missing_reason(&DRIVER_ENTRY_POINTS[..10]);
        assert!(
            many.contains("(cuInit, cuDriverGetVersion,") && many.contains(" and 4 more)"),
            "{many}"
        );
    }

    #[test]
    fn names_are_unique_and_look_like_driver_functions() {
        let mut seen = std::collections::HashSet::new();
        for name in DRIVER_ENTRY_POINTS {
            assert!(name.starts_with("cu") && seen.insert(name), "{name}");
        }
    }

    #[test]
    fn this_machine_is_answered_without_a_panic() {
        // Without a driver: a reason; with NVIDIA's: none. Asked twice, the same answer.
        let first = driver_library_problem();
        assert_eq!(first, driver_library_problem());
        if let Some(reason) = first {
            assert!(reason.starts_with("the CUDA driver library"), "{reason}");
        }
    }
}
