//! GPU and JPEG-engine utilization through NVML, loaded at run time with our own
//! small function table (no NVML crate): `sys` (types and the table), `result`
//! (status codes to `Result`), and [`Utilization`] / [`Sampler`], the safe side.
//!
//! Optional by design: without `libnvidia-ml.so.1` (or a driver too old for the
//! JPEG counter) the figures are simply absent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::metrics::{Metrics, UtilizationSums};

mod result;
mod sys;

/// NVML, loaded and initialized once per process (`None` when unavailable).
fn table() -> Option<&'static sys::Table> {
    static TABLE: OnceLock<Option<sys::Table>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let t = sys::load()?;
            // SAFETY: `t` was just loaded.
            unsafe { result::init(&t) }?;
            Some(t)
        })
        .as_ref()
}

/// Loads and initializes NVML now (once per process) rather than in the first
/// sampler's thread: `nvmlInit` can take hundreds of milliseconds, and a
/// sampler is joined when its epoch ends, so a short first epoch would wait
/// for it. Returns whether NVML is available.
pub(crate) fn preload() -> bool {
    table().is_some()
}

pub use crate::metrics::Utilization;

/// Samples utilization every 100 ms on its own thread until dropped.
pub struct Sampler {
    /// Dropped to stop the thread: its wait between samples ends at once, so
    /// ending an epoch never waits out a sampling interval.
    stop: Option<crossbeam_channel::Sender<()>>,
    sums: Arc<Mutex<UtilizationSums>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling device `ordinal` (NVML's index, which ignores
    /// `CUDA_VISIBLE_DEVICES`: prefer [`Sampler::start_for`] with a CUDA
    /// context), or returns `None` if the thread cannot start. Its samples are
    /// also added to `metrics` (the loader's [`crate::Stats::utilization`]) while
    /// no other sampler running on the same `metrics` does so: when an epoch
    /// started early overlaps the one ending, the overlap counts once.
    pub fn start(ordinal: u32, metrics: Option<Arc<Metrics>>) -> Option<Sampler> {
        Self::spawn(Target::Index(ordinal), metrics)
    }

    /// Starts sampling the GPU of `ctx`, found in NVML by its PCI bus id (so the
    /// right one under `CUDA_VISIBLE_DEVICES`, e.g. one visible GPU per rank),
    /// falling back to NVML index = CUDA ordinal if the id cannot be had.
    ///
    /// # Examples
    /// ```no_run
    /// // An error, not cudarc's panic, where no driver library is present.
    /// let ctx = stoker_decode::cuda_context(0)?;
    /// let sampler = stoker_loader::gpu::nvml::Sampler::start_for(&ctx, None);
    /// # Ok::<(), stoker_decode::DecodeError>(())
    /// ```
    pub fn start_for(
        ctx: &cudarc::driver::CudaContext,
        metrics: Option<Arc<Metrics>>,
    ) -> Option<Sampler> {
        let ordinal = ctx.ordinal() as u32;
        let target = match pci_bus_id(ctx) {
            Some(id) => Target::PciBusId(id, ordinal),
            None => Target::Index(ordinal),
        };
        Self::spawn(target, metrics)
    }

    fn spawn(target: Target, metrics: Option<Arc<Metrics>>) -> Option<Sampler> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let sums = Arc::new(Mutex::new(UtilizationSums::default()));
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let thread = {
            let sums = Arc::clone(&sums);
            std::thread::Builder::new()
                .name("stoker-gpu-nvml".into())
                .spawn(move || {
                    let metrics = metrics.as_deref();
                    // Gives the stats' place up however the thread ends.
                    let _release = ReleaseOnExit(metrics, id);
                    sample(&target, &stopped, &sums, metrics.map(|m| (m, id)));
                })
                .ok()?
        };
        Some(Sampler {
            stop: Some(stop),
            sums,
            thread: Some(thread),
        })
    }

    /// Means so far (all `None`, 0 samples, before the first sample).
    pub fn utilization(&self) -> Utilization {
        self.sums
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .mean()
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // Disconnects the channel: the thread's `recv_timeout` returns at once.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Releases sampler `.1`'s place in the stats (`Metrics::claim_utilization`)
/// when dropped.
struct ReleaseOnExit<'a>(Option<&'a Metrics>, u64);

impl Drop for ReleaseOnExit<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.0 {
            m.release_utilization(self.1);
        }
    }
}

/// Which device a sampler reads.
enum Target {
    /// NVML's own index.
    Index(u32),
    /// A PCI bus id (`cuDeviceGetPCIBusId`), with the index to fall back on.
    PciBusId(std::ffi::CString, u32),
}

/// The PCI bus id of `ctx`'s device ("0000:3B:00.0"), as NVML takes it.
fn pci_bus_id(ctx: &cudarc::driver::CudaContext) -> Option<std::ffi::CString> {
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: the driver is loaded (a context exists); `buf` holds `len` bytes
    // and the call writes a NUL-terminated string of at most that many.
    let r = unsafe {
        cudarc::driver::sys::cuDeviceGetPCIBusId(
            buf.as_mut_ptr(),
            buf.len() as i32,
            ctx.cu_device(),
        )
    };
    if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        return None;
    }
    // SAFETY: on success the buffer holds a NUL-terminated string.
    let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    (!id.is_empty()).then(|| id.to_owned())
}

fn sample(
    target: &Target,
    stopped: &crossbeam_channel::Receiver<()>,
    sums: &Mutex<UtilizationSums>,
    metrics: Option<(&Metrics, u64)>,
) {
    let nvml = table();
    // SAFETY: NVML initialized by `table()`.
    let dev = nvml.and_then(|t| unsafe {
        match target {
            Target::Index(i) => result::device(t, *i),
            Target::PciBusId(id, i) => {
                result::device_by_pci_bus_id(t, id).or_else(|| result::device(t, *i))
            }
        }
    });
    let mut cpu_prev = crate::metrics::cpu_busy_reading();
    // Every 100 ms until the sender is dropped (then `Disconnected`, at once).
    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
        stopped.recv_timeout(Duration::from_millis(100))
    {
        let cpu_now = crate::metrics::cpu_busy_reading();
        let cpu = match (cpu_prev, cpu_now) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                // A cgroup may hold more than this process: at most all its CPUs.
                Some((100.0 * b1.saturating_sub(b0) as f64 / (t1 - t0) as f64).min(100.0))
            }
            _ => None,
        };
        cpu_prev = cpu_now;
        let (gpu, jpeg) = match (nvml, dev) {
            // SAFETY: `dev` came from `result::device` on this table.
            (Some(t), Some(d)) => unsafe {
                (result::gpu_percent(t, d), result::jpeg_percent(t, d))
            },
            _ => (None, None),
        };
        let (gpu, jpeg) = (gpu.map(f64::from), jpeg.map(f64::from));
        // Into the loader's stats only while this sampler is the one that counts there.
        if let Some((m, id)) = metrics {
            if m.claim_utilization(id) {
                m.record_utilization(gpu, jpeg, cpu);
            }
        }
        sums.lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(gpu, jpeg, cpu);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_measures_the_cpu_without_nvml() {
        let metrics = Arc::new(Metrics::default());
        let s = Sampler::start(0, Some(Arc::clone(&metrics))).expect("sampler thread");
        // Poll rather than sleep a fixed time: with NVML present a sample takes longer
        // (hundreds of milliseconds on some machines), and this checks what is sampled.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut u = s.utilization();
        while u.samples < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            u = s.utilization();
        }
        drop(s);
        assert!(u.samples >= 2, "{u:?}");
        // The loader's stats see the same samples (at least those taken before the
        // reading above).
        let in_stats = metrics
            .snapshot()
            .utilization
            .expect("samples reached the stats");
        assert!(in_stats.samples >= u.samples, "{in_stats:?} vs {u:?}");
        assert!(in_stats.cpu.is_some());
        let cpu = u.cpu.expect("/proc/stat is readable on Linux");
        assert!((0.0..=100.0).contains(&cpu), "{cpu}");
        if table().is_none() {
            assert_eq!(u.gpu, None, "no NVML here, so no GPU figure");
            eprintln!("NVML not present: GPU/JPEG utilization absent as designed");
        }
    }

    /// Polls until `s` has taken `n` samples (10 s at most).
    fn wait_for_samples(s: &Sampler, n: u64) -> u64 {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = s.utilization().samples;
            if got >= n || std::time::Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn samples_in(metrics: &Metrics) -> u64 {
        metrics.snapshot().utilization.map_or(0, |u| u.samples)
    }

    #[test]
    fn overlapping_samplers_count_once_in_the_stats() {
        // An epoch started early runs its sampler beside the ending epoch's.
        let metrics = Arc::new(Metrics::default());
        let first = Sampler::start(0, Some(Arc::clone(&metrics))).expect("sampler thread");
        assert!(wait_for_samples(&first, 1) >= 1);
        let second = Sampler::start(0, Some(Arc::clone(&metrics))).expect("sampler thread");
        let overlap = wait_for_samples(&second, 4);
        assert!(overlap >= 4, "the second sampler took {overlap} samples");
        drop(second);
        // `first` keeps sampling: read the stats between two readings of it.
        let before = first.utilization().samples;
        let in_stats = samples_in(&metrics);
        let after = first.utilization().samples;
        assert!(
            (before..=after + 1).contains(&in_stats),
            "the stats hold {in_stats} samples, the first sampler took {before}..{after} \
             (the second's {overlap} must not count)"
        );
        // Once the first stops, a sampler started after it counts in its place.
        drop(first);
        let stopped = samples_in(&metrics);
        let third = Sampler::start(0, Some(Arc::clone(&metrics))).expect("sampler thread");
        assert!(wait_for_samples(&third, 2) >= 2);
        drop(third);
        assert!(
            samples_in(&metrics) > stopped,
            "the third sampler's samples count"
        );
    }
}
