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
    // Before any cudarc call: cudarc panics on a missing library or entry point.
    if let Some(reason) = stoker_decode::driver_library_problem() {
        return Err(reason);
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

    /// cudarc panics on the first call of a driver function the library lacks: each one
    /// our code calls directly (`sys::cu…`) is either looked up before the first driver
    /// call (`stoker_decode::DRIVER_ENTRY_POINTS`) or looked up where it is used.
    #[test]
    fn each_driver_function_the_code_calls_is_looked_up_before_use() {
        // Newer than some drivers stoker runs on: checked by the code that calls them.
        const LOOKED_UP_WHERE_USED: [&str; 1] = ["cuMemcpyBatchAsync_v2"];
        let dirs = ["loader/src", "decode/src", "src", "python/src"];
        let mut named = std::collections::BTreeMap::new();
        for (path, text) in super::super::source_scan::rust_sources(&dirs) {
            for name in driver_functions_named(&text) {
                named.entry(name).or_insert_with(|| path.clone());
            }
        }
        assert!(
            named.contains_key("cuMemHostRegister_v2"),
            "the scan finds nothing: {named:?}"
        );
        let unchecked: Vec<_> = named
            .iter()
            .filter(|(name, _)| {
                !stoker_decode::DRIVER_ENTRY_POINTS.contains(&name.as_str())
                    && !LOOKED_UP_WHERE_USED.contains(&name.as_str())
            })
            .collect();
        assert!(
            unchecked.is_empty(),
            "driver functions called without a look-up first (add them to \
             stoker_decode::DRIVER_ENTRY_POINTS, or look them up where used): {unchecked:?}"
        );
    }

    /// Each driver function named after `sys::` (`cu` and an upper-case letter) in `text`.
    fn driver_functions_named(text: &str) -> Vec<String> {
        (text.match_indices("sys::cu"))
            .map(|(at, _)| {
                (text[at + "sys::".len()..].chars())
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .filter(|name| name[2..].starts_with(|c: char| c.is_ascii_uppercase()))
            .collect()
    }
}
