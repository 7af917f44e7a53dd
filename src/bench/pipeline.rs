//! The GPU stages and the whole pipeline: GPU decode, GPU transforms, and end
//! to end through [`stoker_loader::Loader`] with a simulated training step.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaContext;
use stoker_formats::Dataset;
use stoker_loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
use stoker_loader::{Device, Loader, Output, Shuffle, Transform};

use super::report::StageReport;
use super::BenchOptions;

/// The end-to-end figures the verdict needs besides the stage row.
#[derive(Debug, Clone, PartialEq)]
pub struct EndToEnd {
    /// The table row.
    pub stage: StageReport,
    /// Consumer busy time / wall time; `None` without a step.
    pub fed_ratio: Option<f64>,
    /// Process CPU time / (wall × cores).
    pub cpu_util: Option<f64>,
    /// GPU busy fraction, when the step runs on the GPU.
    pub gpu_util: Option<f64>,
}

/// User + system CPU time of this process.
fn process_cpu_time() -> Option<Duration> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` points to writable memory of the size of `rusage`; getrusage
    // fills it completely on success (return 0), which is checked before use.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it initialized the struct.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Some(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// Runs the loader for about `budget` (after one warm-up batch) and consumes each
/// batch with a step of `opts.consumer_ms`.
///
/// The simulated step sleeps on the host: it occupies the consumer, not the CPU
/// cores, which is what a GPU training step looks like to the input pipeline.
/// A loader that cannot be built or fails mid-run gives a row with the reason.
pub fn end_to_end(
    ds: &Dataset,
    opts: &BenchOptions,
    gpu_present: bool,
    cores: usize,
    budget: Duration,
    tick: &(dyn Fn(f64) + Sync),
) -> EndToEnd {
    let skipped = |reason: String| EndToEnd {
        stage: StageReport::skipped(reason),
        fed_ratio: None,
        cpu_util: None,
        gpu_util: None,
    };
    let device = if gpu_present {
        Device::Auto
    } else {
        Device::Cpu
    };
    let loader = match Loader::builder(ds.clone())
        .batch_size(opts.batch)
        .shuffle(Shuffle::Global { seed: 0 })
        .drop_last(false)
        .transform(
            Transform::random_resized_crop(opts.size)
                .hflip(0.5)
                .normalize(IMAGENET_MEAN, IMAGENET_STD),
        )
        .output(Output::F32Nchw)
        .device(device)
        .build()
    {
        Ok(l) => l,
        Err(e) => return skipped(format!("the loader could not be built: {e}")),
    };
    let step = Duration::from_secs_f64(opts.consumer_ms / 1000.0);

    let mut images = 0u64;
    let mut batches = 0u64;
    let mut busy = Duration::ZERO;
    let mut warmed = false;
    let mut start = Instant::now();
    let mut cpu0 = process_cpu_time();
    let mut epoch = 0u64;
    'run: loop {
        let mut any = false;
        for batch in loader.epoch(epoch) {
            let batch = match batch {
                Ok(b) => b,
                Err(e) => return skipped(format!("the loader failed in epoch {epoch}: {e}")),
            };
            any = true;
            if !step.is_zero() {
                let t = Instant::now();
                std::thread::sleep(step);
                if warmed {
                    busy += t.elapsed();
                }
            }
            if !warmed {
                // The first batch fills the pipeline: keep it out of the rate.
                warmed = true;
                start = Instant::now();
                cpu0 = process_cpu_time();
                continue;
            }
            images += batch.labels.len() as u64;
            batches += 1;
            let el = start.elapsed();
            tick((el.as_secs_f64() / budget.as_secs_f64()).min(1.0));
            if el >= budget {
                break 'run;
            }
        }
        if !any {
            return skipped(format!("the loader produced no batch in epoch {epoch}"));
        }
        epoch += 1;
    }
    let wall = start.elapsed();
    let secs = wall.as_secs_f64().max(1e-9);
    let cpu_util = match (cpu0, process_cpu_time()) {
        (Some(a), Some(b)) => Some(((b - a).as_secs_f64() / (secs * cores.max(1) as f64)).min(1.0)),
        _ => None,
    };
    let fed_ratio = (!step.is_zero()).then(|| (busy.as_secs_f64() / secs).min(1.0));
    let img_per_s = images as f64 / secs;
    let stats = loader.stats();
    let mut note = format!(
        "loader {} batches of {} ({}² f32 NCHW, RandomResizedCrop+flip+normalize), CPU {:.0}% of {} cores",
        batches,
        opts.batch,
        opts.size,
        cpu_util.unwrap_or(0.0) * 100.0,
        cores
    );
    if let Some(fed) = fed_ratio {
        note.push_str(&format!(
            ", step {} ms sleeps on the host, fed {:.0}%",
            opts.consumer_ms,
            fed * 100.0
        ));
    }
    let mut stage = StageReport::measured(img_per_s, note)
        .with("batches", batches as f64)
        .with("seconds", secs);
    if let Some(c) = cpu_util {
        stage = stage.with("cpu_util", c);
    }
    if let Some(f) = fed_ratio {
        stage = stage.with("fed_ratio", f);
    }
    tracing::debug!(%stats, "loader stats after the end-to-end run");
    EndToEnd {
        stage,
        fed_ratio,
        cpu_util,
        gpu_util: None,
    }
}

/// GPU decode of `payloads` in batches of `batch`, per route.
pub fn gpu_decode(
    _ctx: &Arc<CudaContext>,
    _payloads: &[Vec<u8>],
    _batch: usize,
    _budget: Duration,
    _tick: &(dyn Fn(f64) + Sync),
) -> StageReport {
    StageReport::skipped("the nvJPEG batch decoder is not in this build yet")
}

/// GPU transforms alone.
pub fn gpu_transform() -> StageReport {
    StageReport::skipped("the GPU transform path is not in this build yet")
}
