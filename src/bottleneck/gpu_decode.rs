//! GPU decode stage alone: [`stoker_decode::GpuDecoder`] on batches of payloads
//! already in host memory, into device buffers allocated once, per route —
//! the hardware JPEG engines where the files allow them, then the CUDA
//! (hybrid) decoder alone for contrast. The CPU fallback's capacity is the
//! `cpu_decode` row. The row also says how much CPU time this process spent
//! meanwhile (user + system: the host's waits, spinning or blocking as
//! [`WaitMode`] says, and nvJPEG's host work).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaSlice};
use stoker_decode::{probe, GpuDecoder, GpuDecoderOptions, Limits, Route, WaitMode};

use super::host::process_cpu_time;
use super::report::StageReport;

/// One timed run of a decoder configuration.
#[derive(Debug, Clone, PartialEq)]
struct RouteRun {
    img_per_s: f64,
    routes: String,
    failed: u64,
    /// Seconds of the timed loop.
    secs: f64,
    /// This process's CPU seconds (user + system) over the timed loop.
    cpu_s: Option<f64>,
    /// How the host waited, resolved.
    waits: WaitMode,
}

/// Decodes for about `budget`: the first half with the hardware engines enabled
/// (the default decoder), the second half with the CUDA decoder only; the host
/// waits as `waits` says. `limits` are the dataset's, as the loader's.
pub fn measure(
    ctx: &Arc<CudaContext>,
    payloads: &[Vec<u8>],
    limits: Limits,
    batch: usize,
    budget: Duration,
    waits: WaitMode,
    tick: &(dyn Fn(f64) + Sync),
) -> StageReport {
    if payloads.is_empty() {
        return StageReport::skipped("no JPEG record to decode");
    }
    let max_len = match payloads
        .iter()
        .filter_map(|p| probe(p, &limits).ok())
        .map(|i| i.rgb_len())
        .max()
    {
        Some(n) => n,
        None => return StageReport::skipped("no sampled record has a readable JPEG header"),
    };
    let half = budget / 2;
    let base = GpuDecoderOptions {
        limits,
        waits,
        ..GpuDecoderOptions::default()
    };
    let hw = run(ctx, payloads, batch, max_len, half, &base, true);
    tick(0.5);
    let cuda = run(ctx, payloads, batch, max_len, half, &base, false);
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
            note.push_str(&format!("; host waits {}", hw.waits));
            if let Some(cpu) = hw.cpu_s {
                let busy = cpu / hw.secs;
                note.push_str(&format!(
                    ", host CPU {cpu:.2} s user+sys in {:.2} s, {busy:.2} cores busy on average",
                    hw.secs
                ));
                row = row
                    .with("cpu_s", cpu)
                    .with("cores_busy", busy)
                    .with("seconds", hw.secs);
            }
            row.note = note;
            row.with("failed", hw.failed as f64).with(
                "blocking_waits",
                f64::from(u8::from(hw.waits == WaitMode::Block)),
            )
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
    base: &GpuDecoderOptions,
    hardware: bool,
) -> Result<(RouteRun, Engines), String> {
    let options = GpuDecoderOptions {
        hardware,
        // The CUDA-decoder run measures that route alone: none of its images
        // offloaded to the CPUs.
        cpu_offload: hardware,
        ..base.clone()
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
        dec.wait_mode()
            .synchronize(&stream)
            .map_err(|e| e.to_string())?;
        let ok = results.iter().filter(|r| r.is_ok()).count() as u64;
        Ok((ok, results.len() as u64 - ok))
    };
    one_batch(&mut dec)?; // warm-up: lazy allocations inside nvJPEG
    let before = dec.route_counts();
    let cpu0 = process_cpu_time();
    let start = Instant::now();
    let (mut ok, mut failed) = (0u64, 0u64);
    while start.elapsed() < budget {
        let (o, f) = one_batch(&mut dec)?;
        ok += o;
        failed += f;
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let cpu_s = match (cpu0, process_cpu_time()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64()),
        _ => None,
    };
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
            secs,
            cpu_s,
            waits: dec.wait_mode(),
        },
        engines,
    ))
}
