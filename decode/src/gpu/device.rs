//! The CUDA side every stage shares: opening a context, and the two ways this
//! backend waits for a stream (an event recorded now, or a wait while a
//! thread unwinds).

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};

use super::options::{GpuDecoderOptions, WaitMode};
use crate::DecodeError;

/// The greatest (numerically lowest) stream priority of `ctx`'s device, or 0 (the
/// default priority) when the range cannot be read or the device has none.
///
/// # Examples
/// ```no_run
/// let ctx = stoker_decode::cuda_context(0)?;
/// let stream = ctx.new_stream_with_priority(stoker_decode::highest_stream_priority(&ctx))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn highest_stream_priority(ctx: &Arc<CudaContext>) -> i32 {
    if let Err(e) = bind_context(ctx) {
        tracing::warn!("cannot bind the CUDA context to read stream priorities: {e}");
        return 0;
    }
    match cudarc::driver::result::stream::get_priority_range() {
        // `(least, greatest)`: smaller is higher; both 0 without priority support.
        Ok((least, greatest)) => {
            tracing::debug!(least, greatest, "CUDA stream priority range");
            greatest.min(least)
        }
        Err(e) => {
            tracing::warn!("cuCtxGetStreamPriorityRange failed ({e}): default stream priority");
            0
        }
    }
}

/// The priority of the decoder's own streams: the device's highest with
/// [`GpuDecoderOptions::high_priority_streams`], else the default (0).
pub(super) fn decoder_stream_priority(ctx: &Arc<CudaContext>, options: &GpuDecoderOptions) -> i32 {
    if options.high_priority_streams {
        highest_stream_priority(ctx)
    } else {
        0
    }
}

/// Binds `ctx` to the calling thread. cudarc's `bind_to_thread` first returns
/// (once, and clears) any error an earlier drop recorded on the context, which
/// says nothing of this bind: that error is logged and the bind tried once
/// more, so that a thread does not give up its work over another's failure.
///
/// # Examples
/// ```no_run
/// let ctx = stoker_decode::cuda_context(0)?;
/// std::thread::spawn(move || stoker_decode::bind_context(&ctx)).join().unwrap()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// The driver's error when the second bind fails too.
pub fn bind_context(ctx: &CudaContext) -> Result<(), DriverError> {
    ctx.bind_to_thread().or_else(|e| {
        tracing::debug!("binding the CUDA context: {e}; again");
        ctx.bind_to_thread()
    })
}

/// Returns a CUDA context on device `ordinal`, or [`DecodeError::NoGpu`] saying
/// why not (no driver library, no device, driver error). Never panics.
///
/// # Examples
/// ```no_run
/// let ctx = stoker_decode::cuda_context(0)?;
/// # Ok::<(), stoker_decode::DecodeError>(())
/// ```
///
/// # Errors
/// [`DecodeError::NoGpu`].
pub fn cuda_context(ordinal: usize) -> Result<Arc<CudaContext>, DecodeError> {
    // Before any cudarc call: cudarc panics on a missing library or entry point.
    if let Some(reason) = super::driver_library_problem() {
        return Err(DecodeError::NoGpu { reason });
    }
    // `device_count` initializes the driver first (`cuInit`), which is where a machine
    // without a usable GPU usually fails: the stub library, no device.
    let count = CudaContext::device_count().map_err(|e| DecodeError::NoGpu {
        reason: format!("the CUDA driver failed to initialize or count its devices: {e}"),
    })?;
    if ordinal >= count.max(0) as usize {
        return Err(DecodeError::NoGpu {
            reason: format!("device {ordinal} requested, {count} present"),
        });
    }
    CudaContext::new(ordinal).map_err(|e| DecodeError::NoGpu {
        reason: format!("creating a context on device {ordinal}: {e}"),
    })
}

impl WaitMode {
    /// The flags of an event the host may wait on. cudarc takes one flag, so
    /// a blocking event keeps timing (a timestamp per record, no other cost);
    /// spinning ones disable it, as cudarc's default does.
    pub fn event_flags(self) -> CUevent_flags {
        match self {
            WaitMode::Block => CUevent_flags::CU_EVENT_BLOCKING_SYNC,
            _ => CUevent_flags::CU_EVENT_DISABLE_TIMING,
        }
    }

    /// Waits on the host until the work queued on `stream` so far is done:
    /// with [`WaitMode::Block`], on a blocking event recorded now (a stream
    /// synchronize spins or blocks as the context says, see [`WaitMode`]),
    /// falling back to the stream synchronize when the event cannot be
    /// made or waited on; otherwise the stream synchronize. `Auto` here
    /// spins: resolve it first ([`WaitMode::resolve`]).
    ///
    /// # Examples
    /// ```no_run
    /// use stoker_decode::{cuda_context, WaitMode};
    /// let ctx = cuda_context(0)?;
    /// let stream = ctx.new_stream()?;
    /// // ... queue work on `stream` ...
    /// WaitMode::Block.synchronize(&stream)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The driver's error from the wait (an earlier asynchronous failure on
    /// the stream shows here).
    pub fn synchronize(self, stream: &CudaStream) -> Result<(), DriverError> {
        if self == WaitMode::Block {
            match stream
                .record_event(Some(self.event_flags()))
                .and_then(|ev| ev.synchronize())
            {
                Ok(()) => return Ok(()),
                Err(e) => tracing::debug!("blocking wait on an event failed ({e}); synchronizing"),
            }
        }
        stream.synchronize()
    }
}

/// An event recorded on `stream` now, made for `wait`, or, when it cannot be
/// recorded, `None` after waiting for the stream on the host instead (logged
/// as `what`): either way the caller can tell when the work queued so far is
/// done.
pub(super) fn record_or_synchronize(
    stream: &CudaStream,
    wait: WaitMode,
    what: &str,
) -> Result<Option<CudaEvent>, DriverError> {
    match stream.record_event(Some(wait.event_flags())) {
        Ok(ev) => Ok(Some(ev)),
        Err(e) => {
            tracing::warn!("recording {what} failed ({e}); synchronizing");
            stream.synchronize().map(|()| None)
        }
    }
}

/// Waits for a stream when dropped during a panic, so that buffers dropped
/// after it are not freed under work still queued on it.
pub(super) struct SyncOnPanic(pub(super) Arc<CudaStream>);

impl Drop for SyncOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Err(e) = self.0.synchronize() {
                tracing::warn!("stream synchronize while unwinding failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_gpu_is_an_error_not_a_panic() {
        match cuda_context(0) {
            Ok(ctx) => assert_eq!(ctx.ordinal(), 0),
            Err(DecodeError::NoGpu { reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("want NoGpu, got {e}"),
        }
        // A device that no machine has: the same typed error with or without a GPU.
        match cuda_context(4096) {
            Err(DecodeError::NoGpu { reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("want NoGpu, got {e}"),
            Ok(_) => panic!("device 4096 opened"),
        }
    }
}
