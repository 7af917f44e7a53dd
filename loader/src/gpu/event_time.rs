//! The GPU time between two CUDA events, through whichever of the driver's two entry
//! points this driver has.
//!
//! cudarc, built for CUDA 13 (`cuda-13000`), times events with `cuEventElapsedTime_v2`,
//! which drivers before CUDA 12.8 (R570) do not export, and it panics on a missing
//! symbol: on a cluster still on an R535 or R550 driver every GPU batch after the first
//! few (the first reuse of a staging slot) failed with "Missing symbol
//! cuEventElapsedTime_v2". So the symbol is looked up here, `_v2` first and the
//! original `cuEventElapsedTime` (every driver has it, and CUDA 13 drivers still
//! export it) otherwise; no code of ours calls cudarc's `CudaEvent::elapsed_ms`.

use std::sync::OnceLock;

use cudarc::driver::{sys, CudaEvent, DriverError};

type ElapsedFn = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;

/// The driver's names for "elapsed time between two events", preferred first.
const NAMES: [&str; 2] = ["cuEventElapsedTime_v2", "cuEventElapsedTime"];

/// The first of `names` that `present` finds.
fn first_present<'a>(names: &[&'a str], present: impl Fn(&str) -> bool) -> Option<&'a str> {
    names.iter().copied().find(|n| present(n))
}

/// The driver's elapsed-time function, resolved once; `None` when the driver library
/// has neither name.
fn elapsed_fn() -> Option<ElapsedFn> {
    static FUNCTION: OnceLock<Option<ElapsedFn>> = OnceLock::new();
    *FUNCTION.get_or_init(|| {
        // SAFETY: only called with events, so the driver library is present (an event
        // came from a context); `culib` opens it, `get` looks a name up, and both names
        // have the C signature of `ElapsedFn` in every CUDA release that has them.
        let lib = unsafe { sys::culib() };
        let present = |name: &str| unsafe { lib.get::<ElapsedFn>(name.as_bytes()) }.is_ok();
        let name = first_present(&NAMES, present)?;
        unsafe { lib.get::<ElapsedFn>(name.as_bytes()) }
            .ok()
            .map(|f| *f)
    })
}

/// Milliseconds of GPU time from `start` to `end` (both created with timing enabled and
/// recorded), after waiting for both: what cudarc's `CudaEvent::elapsed_ms` returns,
/// on any driver.
///
/// # Errors
/// `CUDA_ERROR_INVALID_CONTEXT` when the events belong to different contexts,
/// `CUDA_ERROR_NOT_FOUND` when the driver has no elapsed-time function, or the
/// driver's error.
///
/// # Examples
///
/// ```no_run
/// let ctx = stoker_decode::cuda_context(0)?;
/// let stream = ctx.default_stream();
/// let timed = Some(stoker_loader::gpu::cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
/// let (start, end) = (stream.record_event(timed)?, stream.record_event(timed)?);
/// println!("{} ms", stoker_loader::gpu::event_elapsed_ms(&start, &end)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Result<f32, DriverError> {
    if start.context() != end.context() {
        return Err(DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_CONTEXT));
    }
    start.context().bind_to_thread()?;
    start.synchronize()?;
    end.synchronize()?;
    let f = elapsed_fn().ok_or(DriverError(sys::cudaError_enum::CUDA_ERROR_NOT_FOUND))?;
    let mut ms = 0f32;
    // SAFETY: `f` is the driver's elapsed-time function; both events are live (borrowed)
    // and of the context bound above; `ms` is a valid place for one float.
    unsafe { f(&mut ms, start.cu_event(), end.cu_event()) }.result()?;
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v2_name_is_preferred_and_the_original_serves_older_drivers() {
        let all = |_: &str| true;
        assert_eq!(first_present(&NAMES, all), Some("cuEventElapsedTime_v2"));
        // An R535/R550 driver (CUDA 12.2/12.4) exports only the original.
        let r550 = |n: &str| n == "cuEventElapsedTime";
        assert_eq!(first_present(&NAMES, r550), Some("cuEventElapsedTime"));
        assert_eq!(first_present(&NAMES, |_| false), None);
    }

    /// cudarc's `CudaEvent::elapsed_ms` calls `cuEventElapsedTime_v2` (CUDA 12.8+) and
    /// panics on older drivers: every caller goes through [`elapsed_ms`] instead.
    #[test]
    fn no_code_calls_cudarcs_elapsed_ms() {
        let dirs = [
            "loader/src",
            "decode/src",
            "src",
            "python/src",
            "formats/src",
            "examples",
            "benches",
        ];
        let offenders: Vec<_> = (super::super::source_scan::rust_sources(&dirs).into_iter())
            .filter(|(_, text)| text.contains(concat!(".elapsed", "_ms(&")))
            .map(|(path, _)| path)
            .collect();
        assert!(
            offenders.is_empty(),
            "cudarc's elapsed_ms needs a CUDA 12.8 driver; use gpu::event_time::elapsed_ms: {offenders:?}"
        );
    }
}
