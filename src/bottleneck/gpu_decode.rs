//! GPU decode stage alone: [`stoker_decode::GpuDecoder`] on batches of payloads
//! already in host memory, into device buffers allocated once, per route —
//! the hardware JPEG engines where the files allow them, then the CUDA
//! (hybrid) decoder alone for contrast. The CPU fallback's capacity is the
//! `cpu_decode` row.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaSlice};
use stoker_decode::{probe, GpuDecoder, GpuDecoderOptions, Limits, Route};

use super::report::StageReport;

/// One timed run of a decoder configuration.
#[derive(Debug, Clone, PartialEq)]
struct RouteRun {
    img_per_s: f64,
    routes: String,
    failed: u64,
}

/// Decodes for about `budget`: the first half with the hardware engines enabled
/// (the default decoder), the second half with the CUDA decoder only.
pub fn measure(
    ctx: &Arc<CudaContext>,
    payloads: &[Vec<u8>],
    batch: usize,
    budget: Duration,
    tick: &(dyn Fn(f64) + Sync),
) -> StageReport {
    if payloads.is_empty() {
        return StageReport::skipped("no JPEG record to decode");
    }
    let max_len = match payloads
        .iter()
        .filter_map(|p| probe(p, &Limits::default()).ok())
        .map(|i| i.rgb_len())
        .max()
    {
        Some(n) => n,
        None => return StageReport::skipped("no sampled record has a readable JPEG header"),
    };
    let half = budget / 2;
    let hw = run(ctx, payloads, batch, max_len, half, true);
    tick(0.5);
    let cuda = run(ctx, payloads, batch, max_len, half, false);
    tick(1.0);
    match (hw, cuda) {
        (Ok((hw, engines)), cuda) => {
            let mut note = format!(
                "nvJPEG batches of {batch}{}: routes {}",
                match engines {
                    Some((e, c)) => format!(", {e} hardware engines × {c} cores"),
                    None => String::new(),
                },
                hw.routes
            );
            let mut row = StageReport::measured(hw.img_per_s, String::new());
            match &cuda {
                Ok((c, _)) => {
                    note.push_str(&format!(
                        "; CUDA decoder alone {} img/s",
                        super::verdict::fmt_rate(c.img_per_s)
                    ));
                    row = row.with("cuda_route_img_per_s", c.img_per_s);
                }
                Err(e) => note.push_str(&format!("; CUDA decoder alone failed: {e}")),
            }
            if hw.failed > 0 {
                note.push_str(&format!(", {} failed", hw.failed));
            }
            row.note = note;
            row.with("failed", hw.failed as f64)
        }
        (Err(e), _) => StageReport::skipped(format!("the nvJPEG decoder is unavailable: {e}")),
    }
}

type Engines = Option<(u32, u32)>;

fn run(
    ctx: &Arc<CudaContext>,
    payloads: &[Vec<u8>],
    batch: usize,
    max_len: usize,
    budget: Duration,
    hardware: bool,
) -> Result<(RouteRun, Engines), String> {
    let options = GpuDecoderOptions {
        hardware,
        ..GpuDecoderOptions::default()
    };
    let mut dec = GpuDecoder::new(ctx, options).map_err(|e| e.to_string())?;
    let engines = dec.hardware_engines();
    let stream = ctx.new_stream().map_err(|e| e.to_string())?;
    let mut outs: Vec<CudaSlice<u8>> = (0..batch)
        .map(|_| stream.alloc_zeros::<u8>(max_len))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("allocating {batch} × {max_len} B of device memory: {e}"))?;
    let mut next = 0usize;
    let mut one_batch = |dec: &mut GpuDecoder| -> Result<(u64, u64), String> {
        let inputs: Vec<&[u8]> = (0..batch)
            .map(|k| payloads[(next + k) % payloads.len()].as_slice())
            .collect();
        next = (next + batch) % payloads.len();
        let results = dec.decode_batch(&inputs, outs.as_mut_slice(), &stream);
        stream.synchronize().map_err(|e| e.to_string())?;
        let ok = results.iter().filter(|r| r.is_ok()).count() as u64;
        Ok((ok, results.len() as u64 - ok))
    };
    one_batch(&mut dec)?; // warm-up: lazy allocations inside nvJPEG
    let before = dec.route_counts();
    let start = Instant::now();
    let (mut ok, mut failed) = (0u64, 0u64);
    while start.elapsed() < budget {
        let (o, f) = one_batch(&mut dec)?;
        ok += o;
        failed += f;
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let after = dec.route_counts();
    let routes = Route::ALL
        .iter()
        .map(|r| format!("{}={}", r.name(), after.get(*r) - before.get(*r)))
        .collect::<Vec<_>>()
        .join(" ");
    if ok == 0 {
        return Err(format!("no image decoded ({failed} failed)"));
    }
    Ok((
        RouteRun {
            img_per_s: ok as f64 / secs,
            routes,
            failed,
        },
        engines,
    ))
}
