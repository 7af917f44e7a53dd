//! Whether a CUDA device can be used here, checked without a panic when the
//! driver is missing, and the stream priority the loader's streams run at.

use std::sync::Arc;

use cudarc::driver::CudaContext;

/// How many CUDA devices this process can see (`CUDA_VISIBLE_DEVICES` applies:
/// the driver counts only the devices it lists), or why none can be used. Never
/// panics: checks for the driver library before any cudarc call.
///
/// # Examples
///
/// ```
/// match stoker_loader::gpu::visible_devices() {
///     Ok(n) => println!("{n} CUDA device(s)"),
///     Err(reason) => println!("no GPU: {reason}"),
/// }
/// ```
pub fn visible_devices() -> Result<usize, String> {
    // SAFETY: only tries to dlopen the driver library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(
            "the NVIDIA driver library (libcuda.so) was not found: no GPU driver on this machine"
                .into(),
        );
    }
    CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .map_err(|e| format!("the CUDA driver failed to initialize ({e}): no usable GPU"))
}

/// Why the GPU path cannot run here, or `None` when a CUDA driver with at least
/// `ordinal + 1` devices is present. Never panics (checks the library before any
/// cudarc call).
pub fn unavailable_reason(ordinal: usize) -> Option<String> {
    match visible_devices() {
        Err(reason) => Some(reason),
        Ok(n) if n <= ordinal => Some(format!(
            "CUDA device {ordinal} requested but the driver reports {n} device(s)"
        )),
        Ok(_) => None,
    }
}

/// The greatest (numerically lowest) stream priority of `ctx`'s device, or 0
/// (the default priority) when the range cannot be read or the device has none:
/// the decoder's own streams run at the same one.
pub(super) fn stream_priority(ctx: &Arc<CudaContext>) -> i32 {
    stoker_decode::highest_stream_priority(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_is_a_reason_not_a_panic() {
        // On a machine without the driver this names it; with a GPU, device 4096
        // does not exist. Either way a reason, never a panic.
        let reason = unavailable_reason(4096).expect("no device 4096 anywhere");
        assert!(!reason.is_empty());
    }
}
