//! The simulated training step of `--consumer-ms` per batch.
//!
//! On the GPU path the step is a busy kernel (one thread spinning on `clock64()`
//! for the calibrated number of cycles) on a stream of its own, and the host
//! waits for it as a training loop waits on its step: the GPU is occupied for
//! the step's duration and its busy time is measured with CUDA events. Without
//! a GPU, or without NVRTC to compile the kernel, the step sleeps on the host,
//! which occupies the consumer but no CPU core, like a GPU step seen from the
//! input pipeline.
//!
//! A GPU step first makes its stream wait on the batch's ready event (a device
//! batch from the loader's GPU path), as a training step would: the hand-off
//! stays on the GPU, with no host synchronization.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{
    sys::CUdevice_attribute, sys::CUevent_flags, CudaContext, CudaFunction, CudaStream,
    LaunchConfig, PushKernelArg,
};

/// The spin kernel: occupies the GPU for `cycles` SM clock cycles.
const SPIN_CU: &str = r#"
extern "C" __global__ void stoker_bench_spin(unsigned long long cycles) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
}
"#;

/// How a batch is consumed.
pub enum Step {
    /// No step: the loop takes batches as fast as they come.
    None,
    /// Sleep on the host for the duration.
    Sleep(Duration),
    /// A busy kernel on the GPU.
    Gpu(GpuSpin),
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::None => f.write_str("Step::None"),
            Step::Sleep(d) => write!(f, "Step::Sleep({d:?})"),
            Step::Gpu(g) => write!(f, "Step::Gpu({} cycles)", g.cycles),
        }
    }
}

impl Step {
    /// The step for `ms` per batch: on `gpu` when given and the kernel compiles,
    /// else a host sleep; the `String` says which and why.
    pub fn new(ms: f64, gpu: Option<&Arc<CudaContext>>) -> (Step, String) {
        if ms <= 0.0 {
            return (Step::None, "no step".into());
        }
        // NaN and the unrepresentable get no step rather than a panic; `BenchOptions`
        // refuses them before a run gets here.
        let Ok(d) = Duration::try_from_secs_f64(ms / 1000.0) else {
            return (Step::None, format!("no step: {ms} ms is not a duration"));
        };
        match gpu {
            None => (Step::Sleep(d), format!("step {ms} ms sleeps on the host")),
            Some(ctx) => match GpuSpin::new(ctx, d) {
                Ok(spin) => (
                    Step::Gpu(spin),
                    format!("step {ms} ms is a busy GPU kernel"),
                ),
                Err(reason) => (
                    Step::Sleep(d),
                    format!("step {ms} ms sleeps on the host (GPU kernel unavailable: {reason})"),
                ),
            },
        }
    }

    /// Consumes one batch (`images`, when there is one); returns the step's busy
    /// time (GPU kernel time for a GPU step). A GPU step waits on a device batch's
    /// ready event on its own stream before its kernel.
    ///
    /// # Errors
    ///
    /// The CUDA error text when the wait or the kernel cannot be enqueued or timed.
    pub fn run(&mut self, images: Option<&stoker_loader::Images>) -> Result<Duration, String> {
        match self {
            Step::None => Ok(Duration::ZERO),
            Step::Sleep(d) => {
                let t = Instant::now();
                std::thread::sleep(*d);
                Ok(t.elapsed())
            }
            Step::Gpu(g) => {
                if let Some(stoker_loader::Images::Cuda(batch)) = images {
                    batch.wait(&g.stream).map_err(|e| e.to_string())?;
                }
                g.run(g.cycles)
            }
        }
    }

    /// True when the step's busy time is GPU time.
    pub fn on_gpu(&self) -> bool {
        matches!(self, Step::Gpu(_))
    }
}

/// The calibrated busy kernel.
pub struct GpuSpin {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    cycles: u64,
}

impl GpuSpin {
    /// Compiles the kernel and calibrates the cycle count to `target` with CUDA events.
    fn new(ctx: &Arc<CudaContext>, target: Duration) -> Result<GpuSpin, String> {
        // SAFETY: is_culib_present only tries dlopen on NVRTC's usual names.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err("no NVRTC library to compile it".into());
        }
        let ptx = cudarc::nvrtc::compile_ptx(SPIN_CU).map_err(|e| format!("NVRTC: {e}"))?;
        let module = ctx
            .load_module(ptx)
            .map_err(|e| format!("cuModuleLoad: {e}"))?;
        let func = module
            .load_function("stoker_bench_spin")
            .map_err(|e| format!("cuModuleGetFunction: {e}"))?;
        let stream = ctx
            .new_stream()
            .map_err(|e| format!("cuStreamCreate: {e}"))?;
        // Only the first guess (calibrated below), so a driver that no longer
        // reports the nominal clock gets 1.5 GHz instead of an error.
        let khz = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
            .ok()
            .filter(|k| *k > 0)
            .unwrap_or(1_500_000) as f64;
        let mut spin = GpuSpin {
            stream,
            func,
            cycles: 1,
        };
        // The nominal clock is only a first guess: the SM clock varies, so scale
        // the count by what the events measure, twice.
        let mut cycles = (target.as_secs_f64() * khz * 1000.0).max(1000.0);
        for _ in 0..3 {
            let took = spin.run(cycles as u64)?.as_secs_f64().max(1e-6);
            cycles = (cycles * target.as_secs_f64() / took).clamp(1000.0, 1e13);
        }
        spin.cycles = cycles as u64;
        Ok(spin)
    }

    /// Launches one spin of `cycles`, waits for it, and returns its event-timed duration.
    fn run(&self, cycles: u64) -> Result<Duration, String> {
        let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = self
            .stream
            .record_event(flags)
            .map_err(|e| format!("cuEventRecord: {e}"))?;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(&self.func);
        launch.arg(&cycles);
        // SAFETY: `stoker_bench_spin` takes exactly one `unsigned long long`,
        // passed by reference to a live `u64` for the duration of the launch
        // call; the kernel touches no memory.
        unsafe { launch.launch(cfg) }.map_err(|e| format!("cuLaunchKernel: {e}"))?;
        let end = self
            .stream
            .record_event(flags)
            .map_err(|e| format!("cuEventRecord: {e}"))?;
        // Not cudarc's `elapsed_ms`: it needs a CUDA 12.8 driver (see the loader's).
        let ms = stoker_loader::gpu::event_elapsed_ms(&start, &end)
            .map_err(|e| format!("cuEventElapsedTime: {e}"))?;
        Duration::try_from_secs_f64(f64::from(ms.max(0.0)) / 1000.0)
            .map_err(|e| format!("cuEventElapsedTime gave {ms} ms: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_step_and_host_sleep() {
        let (mut none, what) = Step::new(0.0, None);
        assert_eq!(what, "no step");
        assert_eq!(none.run(None).unwrap(), Duration::ZERO);
        let (mut sleep, what) = Step::new(3.0, None);
        assert!(what.contains("sleeps on the host"));
        assert!(!sleep.on_gpu());
        assert!(sleep.run(None).unwrap() >= Duration::from_millis(3));
    }
}
