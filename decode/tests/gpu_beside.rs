//! Does a decode call wait for unrelated work on another stream? For
//! `scripts/device-check.d/10-decode.sh` (the bench set) and `50-mixed.sh` (the mixed set).
//!
//! Why: fed by a training step, the loader's hardware-engine calls (`nvjpegDecodeBatched`,
//! nearly all of the decoder's host time) took about as long as one step per batch, also
//! when the step left the SMs free between short kernels (docs/BENCHMARKS.md). A call
//! that synchronizes the context (an allocation or free inside the library, say) waits for
//! every stream's queued work; one that only competes for SMs does not wait for a kernel
//! that holds a single SM. So each decoder kind is timed four ways: alone, beside a
//! one-block kernel on another stream (a wait here is a synchronization), beside a kernel
//! that fills every SM (SM contention), and beside the one-block kernel on the legacy
//! default stream, where PyTorch runs a training step unless told otherwise (blocking
//! streams, nvJPEG's own if it makes any with the default flags, are ordered with it).
//! Each call decodes other files than the one before (on a set larger than a batch), so
//! buffers grow and shrink as in a loader; each
//! kind runs with nvJPEG's allocators and with stoker's caches (`NvjpegMemory::Cached`),
//! which free nothing while decoding.
//!
//! `#[ignore]`d: it measures. Prints `ROW\tname\tvalue\tunit\tnote` lines:
//! `beside_<kind><tag>_{alone,one_block,one_block_legacy,all_sms}_ms` (host time of one
//! `decode_batch` call, median of 3) and `…_done_ms` (until its outputs are on the device),
//! `beside_<kind><tag>_waits_for_other_streams` (1 when the call beside the one-block
//! kernel took over half of that kernel's time), `…_waits_for_legacy_stream` (1 when the
//! call or its outputs did, beside it on the legacy stream), and for the `_cached` kinds
//! `beside_<kind><tag>_{device,pinned}_released` (blocks the caches gave back to CUDA
//! over the measured calls: each such free would wait for the device). Kinds: `hw`,
//! `cuda`, `hw_cached`, `cuda_cached`. Environment: `STOKER_BENCH_DIR`,
//! `STOKER_BENCH_BATCH` (default 256), `STOKER_BENCH_TAG`, as `gpu_throughput.rs`.

mod common;

use common::row;

use std::sync::Arc;
use std::time::{Duration, Instant};

use stoker_decode::cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg,
};
use stoker_decode::{cuda_context, GpuDecoder, GpuDecoderOptions, NvjpegMemory, NvjpegMemoryStats};

/// Spins until `ns` nanoseconds of the GPU's global timer have passed.
const SPIN_CU: &str = r#"
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"#;

/// How long the other stream's kernel runs: far above any batch's decode time.
const OTHER_MS: u64 = 300;

/// What runs on the other stream meanwhile.
#[derive(Clone, Copy)]
enum Beside {
    Nothing,
    /// One block of one thread: one SM, the rest idle.
    OneBlock,
    /// The same on the legacy default stream, where PyTorch runs a training step unless
    /// told otherwise: work on a blocking stream (nvJPEG's own streams, if it makes them
    /// with the default flags) waits for it, and it for them.
    OneBlockLegacy,
    /// 1024 blocks of 256 threads: every SM's threads nearly all taken (an H200's 132
    /// SMs hold 8 such blocks each) for the whole time, in one wave, as the consumer
    /// step of `examples/gpu_consumer.rs` takes them.
    AllSms,
}

/// Host milliseconds of one `decode_batch_idle_outputs` call and until its outputs are
/// done, with `beside` running on `other` (or on `legacy`, the legacy default stream),
/// started 5 ms before the call.
fn one_call(
    dec: &mut GpuDecoder,
    spin: &CudaFunction,
    (stream, other, legacy): (&Arc<CudaStream>, &Arc<CudaStream>, &Arc<CudaStream>),
    inputs: &[&[u8]],
    outs: &mut [stoker_decode::cudarc::driver::CudaSlice<u8>],
    beside: Beside,
) -> (f64, f64) {
    let blocks = match beside {
        Beside::Nothing => 0,
        Beside::OneBlock | Beside::OneBlockLegacy => 1,
        Beside::AllSms => 1024,
    };
    if blocks > 0 {
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (if blocks == 1 { 1 } else { 256 }, 1, 1),
            shared_mem_bytes: 0,
        };
        let ns = OTHER_MS * 1_000_000;
        let on = if matches!(beside, Beside::OneBlockLegacy) {
            legacy
        } else {
            other
        };
        let mut b = on.launch_builder(spin);
        b.arg(&ns);
        // SAFETY: `spin(unsigned long long)` reads its argument only.
        unsafe { b.launch(cfg) }.expect("launching the other stream's kernel");
        std::thread::sleep(Duration::from_millis(5));
    }
    let started = Instant::now();
    let r = dec.decode_batch_idle_outputs(inputs, outs, stream);
    let host = started.elapsed().as_secs_f64() * 1e3;
    assert!(r.iter().all(Result::is_ok), "a decode failed");
    stream.synchronize().unwrap();
    let done = started.elapsed().as_secs_f64() * 1e3;
    other.synchronize().unwrap();
    legacy.synchronize().unwrap();
    (host, done)
}

/// The `k`-th call's batch: `batch` files from a window that moves by a third of a batch
/// per call, so that (on a set larger than a batch) each call brings other sizes, and
/// nvJPEG's buffers may have to grow or shrink, as they do in a loader's epochs.
fn nth_batch(files: &[Vec<u8>], batch: usize, k: usize) -> Vec<&[u8]> {
    let start = k * batch.div_ceil(3);
    (0..batch)
        .map(|i| files[(start + i) % files.len()].as_slice())
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "measurement for the GPU machine; run with --ignored"]
fn gpu_decode_beside_other_work() {
    let ctx: Arc<CudaContext> = match cuda_context(0) {
        Ok(c) => c,
        Err(e) => {
            stoker_testdata::gpu_skip(e);
            return;
        }
    };
    let tag: String = common::env_or("STOKER_BENCH_TAG", String::new());
    let (files, max_len) = common::measured_files_and_largest();
    let batch: usize = common::env_or("STOKER_BENCH_BATCH", 256).min(files.len());
    let module = ctx
        .load_module(stoker_decode::cudarc::nvrtc::compile_ptx(SPIN_CU).unwrap())
        .unwrap();
    let spin = module.load_function("spin").unwrap();
    let (stream, other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    // cudarc's default stream is the null stream: the legacy default stream.
    let legacy = ctx.default_stream();
    let cuda_only = GpuDecoderOptions {
        hardware: false,
        cpu_offload: false,
        ..GpuDecoderOptions::default()
    };
    let cached = |o: &GpuDecoderOptions| GpuDecoderOptions {
        nvjpeg_memory: NvjpegMemory::Cached,
        ..o.clone()
    };
    let library = |o: &GpuDecoderOptions| GpuDecoderOptions {
        nvjpeg_memory: NvjpegMemory::Library,
        ..o.clone()
    };
    let hw = GpuDecoderOptions::default();
    let kinds = [
        ("hw", library(&hw)),
        ("cuda", library(&cuda_only)),
        ("hw_cached", cached(&hw)),
        ("cuda_cached", cached(&cuda_only)),
    ];
    for (kind, options) in kinds {
        let name = format!("beside_{kind}{tag}");
        let mut dec = match GpuDecoder::new(&ctx, options) {
            Ok(d) => d,
            Err(e) => {
                stoker_testdata::gpu_skip(format!("{name}: {e}"));
                continue;
            }
        };
        let mut outs: Vec<_> = (0..batch)
            .map(|_| stream.alloc_zeros::<u8>(max_len).unwrap())
            .collect();
        stream.synchronize().unwrap();
        let mut k = 0;
        let mut call = |dec: &mut GpuDecoder, beside| {
            k += 1;
            one_call(
                dec,
                &spin,
                (&stream, &other, &legacy),
                &nth_batch(&files, batch, k),
                &mut outs,
                beside,
            )
        };
        // Warm-up: states initialized, buffers grown to the first batches.
        for _ in 0..2 {
            call(&mut dec, Beside::Nothing);
        }
        let memory_before = dec.nvjpeg_memory_stats();
        let (mut ms, mut done_ms) = (Vec::new(), Vec::new());
        for (what, beside) in [
            ("alone", Beside::Nothing),
            ("one_block", Beside::OneBlock),
            ("one_block_legacy", Beside::OneBlockLegacy),
            ("all_sms", Beside::AllSms),
        ] {
            let runs: Vec<(f64, f64)> = (0..3).map(|_| call(&mut dec, beside)).collect();
            let host = median(runs.iter().map(|r| r.0).collect());
            let done = median(runs.iter().map(|r| r.1).collect());
            let note = format!(
                "{batch} images a call, each call other files of the set, {} ms kernel on \
                 another stream ({what}); median of 3",
                if matches!(beside, Beside::Nothing) {
                    0
                } else {
                    OTHER_MS
                }
            );
            row(
                &format!("{name}_{what}_ms"),
                host,
                "ms",
                &format!("host time of the call; {note}"),
            );
            row(
                &format!("{name}_{what}_done_ms"),
                done,
                "ms",
                &format!("until the outputs are done; {note}"),
            );
            ms.push(host);
            done_ms.push(done);
        }
        let waits = ms[1] > OTHER_MS as f64 / 2.0;
        println!(
            "\nROW\t{name}_waits_for_other_streams\t{}\tbool\thost time beside a one-block kernel: {:.1} ms (alone {:.1} ms)",
            u8::from(waits),
            ms[1],
            ms[0]
        );
        // On the legacy stream: the host waiting, or only the outputs (the decode's
        // device work ordered after the training step's, as a blocking stream's is).
        println!(
            "\nROW\t{name}_waits_for_legacy_stream\t{}\tbool\tbeside a one-block kernel on the legacy \
             default stream: host {:.1} ms, outputs done {:.1} ms (alone {:.1} / {:.1} ms)",
            u8::from(ms[2] > OTHER_MS as f64 / 2.0 || done_ms[2] > OTHER_MS as f64 / 2.0),
            ms[2],
            done_ms[2],
            ms[0],
            done_ms[0]
        );
        if let (Some(before), Some(after)) = (memory_before, dec.nvjpeg_memory_stats()) {
            memory_rows(&name, &before, &after);
        }
    }
}

/// What nvJPEG asked of the caches over the twelve measured calls (after the warm-up):
/// blocks given back to CUDA there are frees that would each have waited for the device.
fn memory_rows(name: &str, before: &NvjpegMemoryStats, after: &NvjpegMemoryStats) {
    for (kind, b, a) in [
        ("device", &before.device, &after.device),
        ("pinned", &before.pinned, &after.pinned),
    ] {
        println!(
            "\nROW\t{name}_{kind}_released\t{}\tfrees\tblocks given back to CUDA over 12 calls \
             ({} requests: {} reused, {} new; {} kept; peak {:.0} MiB in use)",
            a.released - b.released,
            a.requests - b.requests,
            a.reused - b.reused,
            a.fresh - b.fresh,
            a.kept - b.kept,
            a.peak_live_bytes as f64 / 1048576.0,
        );
    }
    print!("\n# {name}: {after}");
}
