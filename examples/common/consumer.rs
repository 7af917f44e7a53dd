//! The stand-in training step of `examples/gpu_consumer.rs`: a kernel that reads the
//! batch once and then spins, sized to a target rate, as one launch or many.

use std::io::Write;
use std::sync::Arc;

use stoker::decode::cudarc::driver::{
    sys::CUevent_flags, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig,
    PushKernelArg,
};
use stoker::decode::cudarc::nvrtc::compile_ptx;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The stand-in training step: reads every byte of the batch once (so it depends
/// on it) and then spins `iters` dependent FMAs per thread.
const BUSY_CU: &str = r#"
extern "C" __global__ void busy(const unsigned char *batch, unsigned long long n,
                                unsigned int iters, float *sink) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc += (float)batch[i];
    float y = acc * 1e-3f + 1.0f;
    for (unsigned int k = 0; k < iters; ++k) y = fmaf(y, 0.9999999f, 1e-7f);
    if (y == -1.0f) sink[blockIdx.x] = y;  // never true; keeps the loop
}
"#;

/// The stand-in training step on the device: the compiled kernel and the buffers
/// it reads and writes. Fields are declared in the order they are freed.
pub struct Consumer {
    /// A batch-sized buffer already in GPU memory: the step's input when it is
    /// not fed by the loader. Only read through `resident_ptr`; held so that
    /// pointer stays valid.
    _resident: CudaSlice<u8>,
    /// The kernel's never-written output (≥ 1024 floats).
    sink: CudaSlice<f32>,
    busy: CudaFunction,
    _module: Arc<CudaModule>,
    /// Device address of `resident`.
    pub resident_ptr: u64,
    /// Bytes of one F16 NCHW batch, read once per step.
    batch_bytes: usize,
    /// Kernel launches per step.
    kernels: u32,
    /// The stream the step runs on (the consumer's, which the loader's batches wait on).
    pub stream: Arc<CudaStream>,
}

impl Consumer {
    /// Compiles the kernel and allocates its sink and the resident batch on `stream`.
    pub fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        batch_bytes: usize,
        kernels: u32,
    ) -> Res<Self> {
        let module = ctx.load_module(compile_ptx(BUSY_CU)?)?;
        let busy = module.load_function("busy")?;
        let sink = stream.alloc_zeros::<f32>(4096)?;
        let resident = stream.alloc_zeros::<u8>(batch_bytes)?;
        let resident_ptr = {
            use stoker::decode::cudarc::driver::DevicePtr;
            let (p, _g) = resident.device_ptr(stream);
            p
        };
        Ok(Consumer {
            _resident: resident,
            sink,
            busy,
            _module: module,
            resident_ptr,
            batch_bytes,
            kernels,
            stream: stream.clone(),
        })
    }

    /// Enqueues one step of `iters` iterations reading the batch at `ptr`, as
    /// `kernels` launches (the first reads the batch).
    pub fn step(&mut self, iters: u32, ptr: u64) -> Res<()> {
        let cfg = LaunchConfig {
            grid_dim: (1024, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        for k in 0..self.kernels {
            let n = if k == 0 { self.batch_bytes as u64 } else { 0 };
            let share = iters / self.kernels + u32::from(k < iters % self.kernels);
            let mut b = self.stream.launch_builder(&self.busy);
            b.arg(&ptr).arg(&n).arg(&share).arg(&mut self.sink);
            // SAFETY: `busy(const u8*, u64, u32, float*)`: ptr addresses at least
            // `n` bytes of device memory (a batch tensor or `resident`; 0 reads
            // none), sink has ≥ 1024 floats.
            unsafe { b.launch(cfg) }?;
        }
        Ok(())
    }

    /// Seconds per step of `iters` iterations on the resident batch (the mean of
    /// 5, after one untimed).
    fn time_step(&mut self, iters: u32) -> Res<f64> {
        self.step(iters, self.resident_ptr)?;
        let a = self
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        for _ in 0..5 {
            self.step(iters, self.resident_ptr)?;
        }
        let b = self
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        Ok(f64::from(stoker_loader::gpu::event_elapsed_ms(&a, &b)?) / 5e3)
    }

    /// Calibrates: iterations so that one step takes batch / target_rate seconds.
    pub fn calibrate(&mut self, batch_size: usize, target_rate: f64) -> Res<u32> {
        let target_s = batch_size as f64 / target_rate;
        let base = self.time_step(0)?;
        let probe = 200_000u32;
        let slope = (self.time_step(probe)? - base) / f64::from(probe);
        if slope.is_nan() || slope <= 0.0 {
            return Err(format!(
                "calibrating the step: {probe} iterations took no longer than none"
            )
            .into());
        }
        // At most a thousand times the probe: a mismeasured slope must not make a
        // step that runs past the script's time limit.
        let most = f64::from(probe) * 1e3;
        let mut iters = ((target_s - base) / slope).clamp(0.0, most) as u32;
        let mut step_s = self.time_step(iters)?;
        // The time is not linear in the iterations once they are split over many
        // launches (each launch's start and its last, partly idle wave): corrected
        // from what was measured.
        for _ in 0..3 {
            if (step_s - target_s).abs() <= 0.02 * target_s || step_s <= base {
                break;
            }
            let scale = (target_s - base) / (step_s - base);
            iters = (f64::from(iters) * scale).clamp(0.0, most) as u32;
            step_s = self.time_step(iters)?;
        }
        writeln!(
            std::io::stdout(),
            "step: {iters} iterations in {} kernel(s) = {:.2} ms per batch of {} (target {:.2} ms)",
            self.kernels,
            step_s * 1e3,
            batch_size,
            target_s * 1e3
        )?;
        Ok(iters)
    }
}
