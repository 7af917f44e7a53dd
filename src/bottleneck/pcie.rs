//! The GPU probe and the PCIe stage: host-to-device copies of one batch worth of
//! bytes from pinned (page-locked) memory, and from ordinary pageable memory for
//! contrast, through the CUDA driver API (cudarc).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaStream};

use super::error::BenchError;

/// Opens device `ordinal`, or says why it cannot: the decode crate's
/// [`stoker_decode::cuda_context`] (which checks for the driver library before
/// any cudarc call, so it never panics), plus the device's name.
///
/// # Errors
///
/// [`BenchError::NoGpu`] with the reason (no driver library, no device, init failure).
pub fn open_gpu(ordinal: usize) -> Result<(Arc<CudaContext>, String), BenchError> {
    let ctx = stoker_decode::cuda_context(ordinal).map_err(|e| BenchError::NoGpu {
        reason: match e {
            stoker_decode::DecodeError::NoGpu { reason } => reason,
            other => other.to_string(),
        },
    })?;
    let name = ctx.name().unwrap_or_else(|_| format!("cuda:{ordinal}"));
    Ok((ctx, name))
}

/// Pinned and pageable H2D bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct H2dFigures {
    /// Pinned GB/s (10^9 bytes).
    pub pinned_gb_per_s: f64,
    /// Pageable GB/s.
    pub pageable_gb_per_s: f64,
    /// Bytes per copy (one batch).
    pub copy_bytes: usize,
}

/// Copies `copy_bytes` host→device repeatedly for about `budget` (half pinned, half pageable).
///
/// # Errors
///
/// [`BenchError::Cuda`] for a failed allocation or copy.
pub fn measure_h2d(
    ctx: &Arc<CudaContext>,
    copy_bytes: usize,
    budget: Duration,
    tick: &(dyn Fn(f64) + Sync),
) -> Result<H2dFigures, BenchError> {
    let copy_bytes = copy_bytes.max(1 << 20);
    let cuda = |what: &'static str| {
        move |e: cudarc::driver::DriverError| BenchError::Cuda {
            what,
            reason: e.to_string(),
        }
    };
    let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
    let mut dev = stream
        .alloc_zeros::<u8>(copy_bytes)
        .map_err(cuda("cuMemAlloc"))?;
    // SAFETY: the pinned slice is written in full (filled with a pattern) right
    // below, before any read of it.
    let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<u8>(copy_bytes, 0) }
        .map_err(cuda("cuMemHostAlloc"))?;
    for (i, b) in pinned
        .as_mut_slice()
        .map_err(cuda("pinned slice"))?
        .iter_mut()
        .enumerate()
    {
        *b = i as u8;
    }
    let pageable: Vec<u8> = (0..copy_bytes).map(|i| i as u8).collect();
    let half = budget / 2;

    let pinned_gb = timed_copies(&stream, half, copy_bytes, |s| {
        s.memcpy_htod(&pinned, &mut dev)
    })
    .map_err(cuda("cuMemcpyHtoDAsync (pinned)"))?;
    tick(0.5);
    let pageable_gb = timed_copies(&stream, half, copy_bytes, |s| {
        s.memcpy_htod(&pageable, &mut dev)
    })
    .map_err(cuda("cuMemcpyHtoDAsync (pageable)"))?;
    tick(1.0);
    Ok(H2dFigures {
        pinned_gb_per_s: pinned_gb,
        pageable_gb_per_s: pageable_gb,
        copy_bytes,
    })
}

/// Runs `copy` in groups of 8 then synchronizes, until `budget`; returns GB/s.
fn timed_copies(
    stream: &Arc<CudaStream>,
    budget: Duration,
    bytes: usize,
    mut copy: impl FnMut(&Arc<CudaStream>) -> Result<(), cudarc::driver::DriverError>,
) -> Result<f64, cudarc::driver::DriverError> {
    // Warm-up: first copies pay for lazy mappings.
    copy(stream)?;
    stream.synchronize()?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for _ in 0..8 {
            copy(stream)?;
        }
        stream.synchronize()?;
        n += 8;
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    Ok(n as f64 * bytes as f64 / 1e9 / secs)
}
