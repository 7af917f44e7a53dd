//! The GPU stages and the whole pipeline: GPU decode, GPU transforms, and end
//! to end through [`stoker_loader::Loader`] with a simulated training step.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaContext;
use stoker_formats::Dataset;
use stoker_loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
use stoker_loader::{Device, Loader, Output, Shuffle, Stage, Stats, Transform};

use stoker_loader::metrics::cpu_busy_reading;

use super::consumer::Step;
use super::host::process_cpu_time;
use super::options::BenchOptions;
use super::report::StageReport;

/// The end-to-end figures the verdict needs besides the stage row.
#[derive(Debug, Clone, PartialEq)]
pub struct EndToEnd {
    /// The table row.
    pub stage: StageReport,
    /// Consumer busy time / wall time; `None` without a step.
    pub fed_ratio: Option<f64>,
    /// Busy fraction of the CPUs this process may use during the timed window
    /// (`stoker_loader::metrics::cpu_busy_reading`: the machine's, or in a container
    /// with fewer CPUs its cgroup's): what the input-bound rule reads; falls back to
    /// this process's share.
    pub cpu_util: Option<f64>,
    /// GPU busy fraction, when the step runs on the GPU.
    pub gpu_util: Option<f64>,
    /// Images per CPU-second of this process over the timed window.
    pub img_per_cpu_s: Option<f64>,
    /// The run could not be measured for no fault of the dataset: the loader ran out of
    /// memory or file descriptors (the CLI's exit status 3, as every command's).
    pub outside_fault: bool,
    /// Batches in one of this rank's epochs.
    pub epoch_batches: Option<u64>,
    /// Records the loader replaced because they could not be read or decoded, each
    /// counted once (a bad record is met again in every epoch of the run).
    pub bad_records: u64,
}

/// Per-stage capacities the loader's own counters report for the timed part of the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoaderCapacities {
    /// Decode stage, img/s (`items · threads / busy`).
    pub decode: Option<f64>,
    /// Transform stage, img/s.
    pub transform: Option<f64>,
    /// Threads the transform stage ran on.
    pub transform_threads: u64,
    /// H2D stage, img/s (GPU path).
    pub h2d: Option<f64>,
    /// Images per decode route (`nvjpeg-hw`, `cpu-zune`, …).
    pub routes: String,
    /// True when the loader ran its GPU path.
    pub gpu_path: bool,
    /// Why the GPU path did not run when a GPU was given.
    pub gpu_path_reason: Option<String>,
}

/// Builds the bench's loader: RandomResizedCrop(size) + flip + normalize to f32 NCHW. On
/// the CPU path its workers are the `cores` the CPU stages use (`--threads`), so that its
/// decode and transforms run on the cores the verdict names. Under a launcher it reads
/// this rank's share, as a training process would (built without it, it warned of every
/// process reading the whole dataset, in the Rust API's words).
fn build_loader(
    ds: &Dataset,
    opts: &BenchOptions,
    device: Device,
    cores: usize,
) -> Result<Loader, stoker_loader::LoaderError> {
    // Under a process limit below the cores (a container's pids.max, `ulimit -u`), the CPU
    // path runs on the workers that can start, as the other stages do, halving down to
    // one (a warning says how many).
    let mut workers = cores.max(1);
    loop {
        match build_loader_on(ds, opts, device, workers) {
            Err(e @ stoker_loader::LoaderError::ThreadStart { .. })
                if device == Device::Cpu && workers > 1 =>
            {
                workers /= 2;
                tracing::warn!("{e}: running the loader on {workers} worker(s)");
                // The stages before this one joined their threads, but a joined thread
                // leaves the process count a moment after its join returns.
                std::thread::sleep(Duration::from_millis(50));
            }
            built => return built,
        }
    }
}

/// [`build_loader`] with `workers` workers on the CPU path.
fn build_loader_on(
    ds: &Dataset,
    opts: &BenchOptions,
    device: Device,
    cores: usize,
) -> Result<Loader, stoker_loader::LoaderError> {
    let builder = Loader::builder(ds.clone());
    let builder = if device == Device::Cpu {
        builder.workers(cores)
    } else {
        builder
    };
    builder
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
        .gpu_waits(opts.waits)
        .distributed_from_env()
        .build()
}

/// Runs the loader for about `budget` (after one warm-up batch) and consumes each
/// batch with a step of `opts.consumer_ms` ([`Step`]).
///
/// With `gpu`, the loader is asked for its GPU path on that device; if the GPU
/// path cannot be built the CPU path runs and the row says why. The fed ratio is
/// the step's busy time over the wall time after the warm-up batch — what the
/// loader's `1 − wait / elapsed` means for a loop that only waits or steps — and
/// the per-stage capacities are the loader's own counters
/// ([`stoker_loader::Stats::stages`]) over the same window. A loader that
/// cannot be built or fails mid-run gives a row with the reason.
pub fn end_to_end(
    ds: &Dataset,
    opts: &BenchOptions,
    gpu: Option<(&Arc<CudaContext>, usize)>,
    cores: usize,
    budget: Duration,
    tick: &(dyn Fn(f64) + Sync),
) -> (EndToEnd, LoaderCapacities) {
    // A row with the reason; the capacities still say which path was built, so that the
    // transform row and the verdict speak of that path when it fails mid-run.
    let skipped = |(reason, outside_fault): (String, bool), built: Option<&BuiltLoader>| {
        (
            EndToEnd {
                stage: StageReport::skipped(reason),
                fed_ratio: None,
                cpu_util: None,
                gpu_util: None,
                img_per_cpu_s: None,
                outside_fault,
                epoch_batches: None,
                bad_records: 0,
            },
            LoaderCapacities {
                gpu_path: built.is_some_and(|b| b.gpu_path),
                gpu_path_reason: built.and_then(|b| b.gpu_path_reason.clone()),
                ..LoaderCapacities::default()
            },
        )
    };
    let built = match open_loader(ds, opts, gpu, cores) {
        Ok(b) => b,
        Err(reason) => return skipped(reason, None),
    };
    let (mut step, step_note) = Step::new(
        opts.consumer_ms,
        if built.gpu_path {
            gpu.map(|(c, _)| c)
        } else {
            None
        },
    );
    let window = match timed_window(&built.loader, &mut step, budget, tick) {
        Ok(w) => w,
        Err(reason) => return skipped(reason, Some(&built)),
    };
    summarize(&built, &step, &step_note, &window, opts, cores)
}

/// The loader that runs end to end, and which path it took.
struct BuiltLoader {
    loader: Loader,
    /// True when the loader runs its GPU path.
    gpu_path: bool,
    /// Appended to the row's note when the GPU path was asked for and not built.
    path_note: String,
    /// Why the GPU path was not built, when it was asked for.
    gpu_path_reason: Option<String>,
}

/// The loader on `gpu`'s device, falling back to the CPU path when the GPU
/// path cannot be built; or why no loader could be built.
fn open_loader(
    ds: &Dataset,
    opts: &BenchOptions,
    gpu: Option<(&Arc<CudaContext>, usize)>,
    cores: usize,
) -> Result<BuiltLoader, (String, bool)> {
    let mut path_note = String::new();
    let mut gpu_path_reason = None;
    let (loader, gpu_path) = match gpu {
        Some((_, ordinal)) => match build_loader(ds, opts, Device::Cuda(ordinal), cores) {
            Ok(l) => (l, true),
            Err(e) => {
                path_note = format!("; GPU path unavailable ({e}), ran the CPU path");
                gpu_path_reason = Some(e.to_string());
                match build_loader(ds, opts, Device::Cpu, cores) {
                    Ok(l) => (l, false),
                    Err(e) => return Err(not_built(&e)),
                }
            }
        },
        None => match build_loader(ds, opts, Device::Cpu, cores) {
            Ok(l) => (l, false),
            Err(e) => return Err(not_built(&e)),
        },
    };
    Ok(BuiltLoader {
        loader,
        gpu_path,
        path_note,
        gpu_path_reason,
    })
}

/// Why no loader could be built, and whether for no fault of the dataset.
fn not_built(e: &stoker_loader::LoaderError) -> (String, bool) {
    (
        format!("the loader could not be built: {e}"),
        e.is_no_fault_of_the_data(),
    )
}

/// What the timed window (after the warm-up batch) measured.
struct Window {
    /// Images consumed.
    images: u64,
    /// Batches consumed.
    batches: u64,
    /// Time the step was busy.
    busy: Duration,
    /// Wall time of the window.
    wall: Duration,
    /// Process CPU time at the window's start and end.
    cpu0: Option<Duration>,
    cpu1: Option<Duration>,
    /// Machine-wide (busy, total) CPU jiffies at the window's start and end.
    sys0: Option<(u64, u64)>,
    sys1: Option<(u64, u64)>,
}

/// Consumes batches, epoch after epoch, until `budget` has passed after the
/// first batch (which fills the pipeline and is kept out of every figure); or
/// why the loader or the step failed.
fn timed_window(
    loader: &Loader,
    step: &mut Step,
    budget: Duration,
    tick: &(dyn Fn(f64) + Sync),
) -> Result<Window, (String, bool)> {
    let mut images = 0u64;
    let mut batches = 0u64;
    let mut busy = Duration::ZERO;
    let mut warmed = false;
    let mut start = Instant::now();
    let mut cpu0 = process_cpu_time();
    let mut sys0 = cpu_busy_reading();
    let mut epoch = 0u64;
    // Read when the budget is spent, before the epoch is dropped: dropping it
    // stops the loader (joining its producer), which is not the window's.
    let (wall, cpu1, sys1) = 'run: loop {
        let mut any = false;
        for batch in loader.epoch(epoch) {
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    let reason = format!("the loader failed in epoch {epoch}: {e}");
                    return Err((reason, e.is_no_fault_of_the_data()));
                }
            };
            any = true;
            let took = match step.run(Some(&batch.images)) {
                Ok(d) => d,
                Err(e) => return Err((format!("the simulated step failed: {e}"), false)),
            };
            if !warmed {
                // The first batch fills the pipeline: keep it out of every figure.
                warmed = true;
                loader.reset_stats();
                start = Instant::now();
                cpu0 = process_cpu_time();
                sys0 = cpu_busy_reading();
                continue;
            }
            busy += took;
            images += batch.labels.len() as u64;
            batches += 1;
            let el = start.elapsed();
            tick((el.as_secs_f64() / budget.as_secs_f64()).min(1.0));
            if el >= budget {
                break 'run (el, process_cpu_time(), cpu_busy_reading());
            }
        }
        if !any {
            return Err((
                format!("the loader produced no batch in epoch {epoch}"),
                false,
            ));
        }
        epoch += 1;
    };
    Ok(Window {
        images,
        batches,
        busy,
        wall,
        cpu0,
        cpu1,
        sys0,
        sys1,
    })
}

/// The row and the loader's capacities from the window and the loader's counters.
fn summarize(
    built: &BuiltLoader,
    step: &Step,
    step_note: &str,
    w: &Window,
    opts: &BenchOptions,
    cores: usize,
) -> (EndToEnd, LoaderCapacities) {
    let (images, busy) = (w.images, w.busy);
    let secs = w.wall.as_secs_f64().max(1e-9);
    let stats = built.loader.stats();
    let cpu_secs = match (w.cpu0, w.cpu1) {
        (Some(a), Some(b)) => Some((b - a).as_secs_f64()).filter(|s| *s > 0.0),
        _ => None,
    };
    // This process's share of the cores, and how busy the CPUs it may use are.
    let proc_util = cpu_secs.map(|c| (c / (secs * cores.max(1) as f64)).min(1.0));
    let sys_util = match (w.sys0, w.sys1) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
            Some((b1.saturating_sub(b0) as f64 / (t1 - t0) as f64).clamp(0.0, 1.0))
        }
        _ => None,
    };
    let cpu_util = sys_util.or(proc_util);
    let has_step = !matches!(step, Step::None);
    // Busy / wall over the timed window, as the step's loop sees it; the loader's
    // own figure (`Stats::fed_ratio`: 1 − the consumer's wait in `next` / elapsed
    // since the reset) is given beside it as `loader_fed_ratio`.
    let fed_ratio = has_step.then(|| (busy.as_secs_f64() / secs).min(1.0));
    let gpu_util = step.on_gpu().then(|| (busy.as_secs_f64() / secs).min(1.0));
    let img_per_s = images as f64 / secs;
    let img_per_cpu_s = cpu_secs.map(|c| images as f64 / c);
    let caps = loader_capacities(&stats, built);

    let mut note = format!(
        "loader {} path, {} batches of {} ({}² f32 NCHW, RandomResizedCrop+flip+normalize), this process {:.0}% of {} cores, CPUs {:.0}% busy, {step_note}",
        if built.gpu_path { "GPU" } else { "CPU" },
        w.batches,
        opts.batch,
        opts.size,
        proc_util.unwrap_or(0.0) * 100.0,
        cores,
        sys_util.unwrap_or(0.0) * 100.0,
    );
    if let Some(fed) = fed_ratio {
        note.push_str(&format!(", fed {:.0}%", fed * 100.0));
    }
    if let Some(g) = gpu_util {
        note.push_str(&format!(", GPU busy {:.0}%", g * 100.0));
    }
    note.push_str(&built.path_note);
    let mut stage = StageReport::measured(img_per_s, note)
        .with("batches", w.batches as f64)
        .with("seconds", secs)
        .with("loader_img_per_s", stats.images_per_s);
    for (key, v) in [
        ("cpu_util", cpu_util),
        ("process_cpu_util", proc_util),
        ("system_cpu_util", sys_util),
        ("img_per_cpu_s", img_per_cpu_s),
        ("cpu_s", cpu_secs),
        ("cores_busy", cpu_secs.map(|c| c / secs)),
        ("fed_ratio", fed_ratio),
        ("loader_fed_ratio", has_step.then_some(stats.fed_ratio)),
        ("gpu_util", gpu_util),
        ("loader_decode_capacity", caps.decode),
        ("loader_transform_capacity", caps.transform),
        ("loader_h2d_capacity", caps.h2d),
    ] {
        if let Some(v) = v {
            stage = stage.with(key, v);
        }
    }
    tracing::debug!(%stats, "loader stats after the end-to-end run");
    (
        EndToEnd {
            stage,
            fed_ratio,
            cpu_util,
            gpu_util,
            img_per_cpu_s,
            outside_fault: false,
            epoch_batches: Some(built.loader.num_batches()),
            bad_records: stats.bad_distinct,
        },
        caps,
    )
}

/// The loader's own per-stage capacities and decode routes over the window.
fn loader_capacities(stats: &Stats, built: &BuiltLoader) -> LoaderCapacities {
    let capacity = |stage: Stage| {
        stats
            .stage(stage)
            .map(|s| s.capacity_per_s)
            .filter(|c| c.is_finite() && *c > 0.0)
    };
    let routes = stats
        .decode_routes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    LoaderCapacities {
        decode: capacity(Stage::Decode),
        transform: capacity(Stage::Transform),
        transform_threads: stats.stage(Stage::Transform).map_or(0, |s| s.threads),
        h2d: capacity(Stage::H2d),
        routes,
        gpu_path: built.gpu_path,
        gpu_path_reason: built.gpu_path_reason.clone(),
    }
}

/// The GPU decode row, from the loader's decode counters on its GPU path
/// (nvJPEG batches: `items · threads / busy`), with the images per route.
pub fn gpu_decode_from_loader(caps: &LoaderCapacities) -> StageReport {
    if !caps.gpu_path {
        return not_on_gpu(caps);
    }
    match caps.decode {
        Some(v) => StageReport::measured(
            v,
            format!(
                "loader GPU path decode counters during end to end, routes {}",
                caps.routes
            ),
        ),
        None => StageReport::skipped("the loader's GPU path recorded no decode time"),
    }
}

/// The GPU transform row, from the loader's transform counters on its GPU path
/// (the fused crop/resize/flip/normalize kernel, event-timed).
pub fn gpu_transform_from_loader(caps: &LoaderCapacities) -> StageReport {
    if !caps.gpu_path {
        return not_on_gpu(caps);
    }
    match caps.transform {
        Some(v) => StageReport::measured(
            v,
            "loader GPU path transform kernel counters during end to end",
        ),
        None => StageReport::skipped("the loader's GPU path recorded no transform time"),
    }
}

/// The transform row of the CPU path, from the loader's transform counters there: the
/// crop, resize, flip and normalize that bound raw records, which have nothing to decode.
pub fn cpu_transform_from_loader(caps: &LoaderCapacities) -> StageReport {
    match caps.transform {
        Some(v) if !caps.gpu_path => StageReport::measured(
            v,
            format!(
                "loader CPU path transform counters during end to end, {} threads (CPU transforms: no GPU transforms on this path)",
                caps.transform_threads
            ),
        )
        .with("threads", caps.transform_threads as f64),
        _ => StageReport::skipped(
            "the loader's CPU path recorded no transform time (see the end_to_end row)",
        ),
    }
}

fn not_on_gpu(caps: &LoaderCapacities) -> StageReport {
    StageReport::skipped(match &caps.gpu_path_reason {
        Some(r) => format!("the loader's GPU path is unavailable: {r}"),
        None => "the loader's GPU path did not run".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_loader::LoaderError;

    #[test]
    fn a_loader_short_of_memory_or_descriptors_is_no_fault_of_the_data() {
        // The bench exits 3 for these, as every command does; it exited 1.
        let short = LoaderError::OutOfMemory {
            index: 3,
            bytes: 1 << 30,
            what: "its pixels",
        };
        let (reason, outside) = not_built(&short);
        assert!(outside && reason.starts_with("the loader could not be built: "));
        let io = |errno| {
            LoaderError::Format(stoker_formats::FormatError::Io {
                path: "ds/manifest.json".into(),
                source: std::io::Error::from_raw_os_error(errno),
            })
        };
        assert!(not_built(&io(libc::EMFILE)).1);
        assert!(!not_built(&io(libc::EACCES)).1);
        assert!(!not_built(&LoaderError::EmptyDataset).1);
    }
}
