//! GPU decode throughput on the bench set, for `scripts/device-check.d/10-decode.sh`.
//!
//! `#[ignore]`d: it measures, it asserts nothing about speed. Run on the GPU
//! machine with `stoker-decode-gpu_throughput --ignored --nocapture`; it prints
//! `ROW\tname\tvalue\tunit\tnote` lines (the device-check table format),
//! `# timings <row>: ...` ([`stoker_decode::DecodeTimings`] of the timed loop)
//! and `ROWSPAN\t<row>\t<unix start s>\t<unix end s>` around each timed loop
//! (the device check averages `nvidia-smi dmon`'s `jpg` column over it).
//! `gpu_decode_wait_modes` (for `scripts/device-check.d/60-blocking.sh`) decodes the
//! same batches with spinning and with blocking host waits, with and without a CPU
//! share, and prints img/s and this process's CPU seconds for each.
//! Environment: `STOKER_BENCH_DIR` (default: the bench set, `stoker_testdata::bench_dir()`),
//! `STOKER_BENCH_SECONDS` (default 5), `STOKER_BENCH_BATCH` (default 256),
//! `STOKER_BENCH_CASES` (comma-separated row names: only those cases; default all),
//! `STOKER_BENCH_TAG` (appended to every row name, e.g. `_mixed` for another set).

mod common;

use std::time::Instant;

use stoker_decode::{
    cuda_context, CpuDecoder, GpuDecoder, GpuDecoderOptions, Limits, NvjpegMemory, WaitMode,
};

use common::env_or as env;

use common::{measured_files_and_largest as bench_files, row};

#[test]
#[ignore = "measurement for the GPU machine; run with --ignored"]
fn gpu_decode_throughput() {
    let (files, max) = bench_files();
    let seconds: f64 = env("STOKER_BENCH_SECONDS", 5.0);
    let batch: usize = env("STOKER_BENCH_BATCH", 256);
    let tag: String = env("STOKER_BENCH_TAG", String::new());
    let only: Vec<String> = env("STOKER_BENCH_CASES", String::new())
        .split(',')
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    let n = files.len();

    // CPU reference in the same run: all cores, rayon.
    let cpu = CpuDecoder::new(Limits::default());
    let inputs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
    let mut host: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; max]).collect();
    let (mut done, start) = (0usize, Instant::now());
    while start.elapsed().as_secs_f64() < seconds.min(3.0) {
        let mut refs: Vec<&mut [u8]> = host.iter_mut().map(Vec::as_mut_slice).collect();
        assert!(cpu
            .decode_batch(&inputs, &mut refs)
            .iter()
            .all(Result::is_ok));
        done += n;
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    row(
        &format!("decode_cpu_all_cores{tag}"),
        done as f64 / start.elapsed().as_secs_f64(),
        "img/s",
        &format!("{cores} threads, zune-jpeg"),
    );

    let ctx = match cuda_context(0) {
        Ok(c) => c,
        Err(e) => {
            stoker_testdata::gpu_skip(e);
            return;
        }
    };
    // The engines, once, from a default decoder: the lanes7 row uses one
    // lane per engine when the count is known.
    let engines = match GpuDecoder::new(&ctx, GpuDecoderOptions::default()) {
        Ok(dec) => {
            let engines = dec.hardware_engines();
            let lib = dec.library();
            println!(
                "\n# nvJPEG {:?} from {}; optional symbols present: {:?}; preallocated: {}",
                lib.version(),
                lib.path().display(),
                lib.optional_present(),
                dec.hardware_preallocated()
            );
            if let Some((e, c)) = engines {
                row(
                    "decode_gpu_hw_engines",
                    f64::from(e),
                    "count",
                    "nvjpegGetHardwareDecoderInfo",
                );
                row(
                    "decode_gpu_hw_cores_per_engine",
                    f64::from(c),
                    "count",
                    "nvjpegGetHardwareDecoderInfo",
                );
            } else {
                println!("\n# hardware engines: unknown (no hardware backend or no info)");
            }
            engines
        }
        Err(e) => {
            stoker_testdata::gpu_skip(e);
            return;
        }
    };
    let per_engine = engines.map_or(7, |(e, _)| e.max(1) as usize);
    let lanes_engines = format!("decode_gpu_hw_lanes{per_engine}");
    let lanes = |n: usize| GpuDecoderOptions {
        hardware_lanes: n,
        ..GpuDecoderOptions::default()
    };
    let cases: Vec<Case> = vec![
        Case::new("decode_gpu_hw_lanes4", GpuDecoderOptions::default(), batch),
        // nvJPEG's memory from stoker's caches, which free nothing while decoding,
        // beside the row above (nvJPEG's allocators, unless STOKER_NVJPEG_MEMORY says).
        Case::new(
            "decode_gpu_hw_lanes4_cached",
            GpuDecoderOptions {
                nvjpeg_memory: NvjpegMemory::Cached,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        // CUDA-decoder images (progressive files) all on the CUDA decoder: the
        // peer of the default's offload to the CPU share's threads (the same on
        // the bench set, which has none).
        Case::new(
            "decode_gpu_hw_lanes4_no_offload",
            GpuDecoderOptions {
                cpu_offload: false,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        // The offload's pool with more threads than its default (cores - lanes - 2 -
        // cuda_states): on mixed data, whether the CPUs or the GPU side bound the
        // progressive files (rows ..._mixed in scripts/device-check.d/50-mixed.sh).
        Case::new(
            "decode_gpu_hw_lanes4_offload_threads10",
            GpuDecoderOptions {
                cpu_share_threads: cores.saturating_sub(6).max(1),
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        Case::new(
            "decode_gpu_hw_lanes4_offload_threads12_cuda2",
            GpuDecoderOptions {
                cpu_share_threads: cores.saturating_sub(4).max(1),
                cuda_states: 2,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        Case::new("decode_gpu_hw_lanes1", lanes(1), batch),
        Case::new("decode_gpu_hw_lanes8", lanes(8), batch),
        // The CPU share on its own pool (default: cores - lanes - 2 threads)...
        Case::new(
            "decode_gpu_hw_lanes4_cpu_share25",
            GpuDecoderOptions {
                cpu_share: 0.25,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        Case::new(
            "decode_gpu_hw_lanes4_cpu_share15",
            GpuDecoderOptions {
                cpu_share: 0.15,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        // ... adjusted batch by batch toward the balance of CPUs and engines ...
        Case::new(
            "decode_gpu_hw_lanes4_cpu_share_auto",
            GpuDecoderOptions {
                cpu_share_auto: true,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        // ... and on every core, leaving none to the lanes' parsing.
        Case::new(
            "decode_gpu_hw_lanes4_cpu_share25_all_cores",
            GpuDecoderOptions {
                cpu_share: 0.25,
                cpu_share_threads: cores,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        Case::new(
            "decode_gpu_cuda_only",
            GpuDecoderOptions {
                hardware: false,
                cuda_states: 8,
                // The CUDA decoder's own rate: none of its images on the CPUs.
                cpu_offload: false,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        // Does nvjpegDecodeBatchedPreAllocate (on by default) matter?
        Case::new(
            "decode_gpu_hw_lanes4_no_prealloc",
            GpuDecoderOptions {
                hardware_preallocate: false,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        // Does one shared handle serialize the lanes' host work?
        Case::new(
            "decode_gpu_hw_lanes4_handle_per_lane",
            GpuDecoderOptions {
                hardware_handle_per_lane: true,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        // One lane per engine.
        Case::new(&lanes_engines, lanes(per_engine), batch),
        // Fewer, larger calls: per-call overhead vs per-image work.
        Case::new(
            "decode_gpu_hw_lanes4_batch512",
            GpuDecoderOptions::default(),
            512,
        ),
        // Two output sets on two streams, used in turn: batch k+1 does not
        // wait (on the GPU) for batch k's outputs.
        Case {
            overlap: true,
            ..Case::new(
                "decode_gpu_hw_lanes4_overlap",
                GpuDecoderOptions::default(),
                batch,
            )
        },
        // Two states per lane, used in turn: does nvJPEG wait for a state's
        // previous batch before reusing it?
        Case {
            overlap: true,
            ..Case::new(
                "decode_gpu_hw_lanes4_overlap_states2",
                GpuDecoderOptions {
                    hardware_states_per_lane: 2,
                    ..GpuDecoderOptions::default()
                },
                batch,
            )
        },
        // Overlapped, the engines rather than the host are the bound and the host has
        // room: does the automatic CPU share add the spare cores' images now?
        Case {
            overlap: true,
            ..Case::new(
                "decode_gpu_hw_lanes4_overlap_cpu_share_auto",
                GpuDecoderOptions {
                    cpu_share_auto: true,
                    ..GpuDecoderOptions::default()
                },
                batch,
            )
        },
        // The GPU-hybrid backend (Huffman on the SMs) alone, for its capacity...
        Case::new(
            "decode_gpu_gpu_huffman_only",
            GpuDecoderOptions {
                gpu_huffman_share: 1.0,
                ..GpuDecoderOptions::default()
            },
            batch,
        ),
        // ... and beside the engines, 40 % of each batch (over nvJPEG's
        // 100-image threshold at batch 256), batches overlapping.
        Case {
            overlap: true,
            ..Case::new(
                "decode_gpu_hw_lanes4_overlap_gpu_huffman40",
                GpuDecoderOptions {
                    gpu_huffman_share: 0.4,
                    ..GpuDecoderOptions::default()
                },
                batch,
            )
        },
    ];
    for mut case in cases {
        if !only.is_empty() && !only.contains(&case.label) {
            continue;
        }
        case.label += &tag;
        measure(&ctx, &case, &inputs, max, seconds);
    }
}

/// One throughput row: a decoder configuration, a batch size, and whether
/// batches alternate between two output sets and streams.
struct Case {
    label: String,
    options: GpuDecoderOptions,
    batch: usize,
    overlap: bool,
}

impl Case {
    fn new(label: &str, options: GpuDecoderOptions, batch: usize) -> Case {
        Case {
            label: label.to_string(),
            options,
            batch,
            overlap: false,
        }
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Decodes the bench files in batches for `seconds` and prints the row, its
/// phase timings, its host time per image and its time span (for the
/// device check's `nvidia-smi dmon` sampling).
fn measure(
    ctx: &std::sync::Arc<stoker_decode::cudarc::driver::CudaContext>,
    case: &Case,
    inputs: &[&[u8]],
    max: usize,
    seconds: f64,
) {
    let label = case.label.as_str();
    let n = inputs.len();
    let mut dec = match GpuDecoder::new(ctx, case.options.clone()) {
        Ok(d) => d,
        Err(e) => {
            stoker_testdata::gpu_skip(format!("{label}: {e}"));
            return;
        }
    };
    let sets = if case.overlap { 2 } else { 1 };
    let streams: Vec<_> = if case.overlap {
        match (0..sets)
            .map(|_| ctx.new_stream())
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(s) => s,
            Err(e) => {
                stoker_testdata::gpu_skip(format!("{label}: creating streams: {e}"));
                return;
            }
        }
    } else {
        vec![ctx.default_stream()]
    };
    let b = case.batch.min(n);
    let mut outs: Vec<Vec<_>> = streams
        .iter()
        .map(|stream| {
            (0..b)
                .map(|_| stream.alloc_zeros::<u8>(max).unwrap())
                .collect()
        })
        .collect();
    // Warm-up on every set (initializes the batched states).
    let chunk: Vec<&[u8]> = inputs[..b].to_vec();
    for (out, stream) in outs.iter_mut().zip(&streams) {
        dec.decode_batch(&chunk, out, stream);
        stream.synchronize().unwrap();
    }
    dec.reset_timings();
    let before = dec.route_counts();
    let memory_before = dec.nvjpeg_memory_stats();
    let span_start = unix_now();
    let (mut done, start, mut k, mut j) = (0usize, Instant::now(), 0usize, 0usize);
    while start.elapsed().as_secs_f64() < seconds {
        let chunk: Vec<&[u8]> = (0..b).map(|i| inputs[(k + i) % n]).collect();
        k = (k + b) % n;
        let r = dec.decode_batch(&chunk, &mut outs[j], &streams[j]);
        assert!(r.iter().all(Result::is_ok));
        done += b;
        j = (j + 1) % sets;
    }
    for stream in &streams {
        stream.synchronize().unwrap();
    }
    let rate = done as f64 / start.elapsed().as_secs_f64();
    let span_end = unix_now();
    println!("\nROWSPAN\t{label}\t{span_start:.3}\t{span_end:.3}");
    let after = dec.route_counts();
    let routes: Vec<String> = stoker_decode::Route::ALL
        .iter()
        .filter(|r| after.get(**r) > before.get(**r))
        .map(|r| format!("{r}={}", after.get(*r) - before.get(*r)))
        .collect();
    row(
        label,
        rate,
        "img/s",
        &format!(
            "batch {b}; {}; engines {:?}; lanes {}; prealloc {}; lane handles {}; cpu share {:.3}; offload {:.3}; {}",
            routes.join(" "),
            dec.hardware_engines(),
            case.options.hardware_lanes,
            dec.hardware_preallocated(),
            dec.hardware_lane_handles(),
            dec.cpu_share_now(),
            dec.cpu_offload_now(),
            if case.overlap {
                "2 output sets on 2 streams"
            } else {
                "1 output set, 1 stream"
            }
        ),
    );
    if let (Some(b), Some(a)) = (memory_before, dec.nvjpeg_memory_stats()) {
        // Blocks given back to CUDA while measured: each free waits for the device.
        let released =
            (a.device.released - b.device.released) + (a.pinned.released - b.pinned.released);
        row(
            &format!("{label}_nvjpeg_released"),
            released as f64,
            "frees",
            &format!(
                "nvJPEG blocks given back to CUDA while measured ({} device, {} pinned requests)",
                a.device.requests - b.device.requests,
                a.pinned.requests - b.pinned.requests
            ),
        );
        print!("\n# {label}: {a}");
    }
    let t = dec.timings();
    println!("\n# timings {label}: {t}");
    row(
        &format!("{label}_host_us_per_img"),
        t.host_us_per_image(),
        "us/img",
        "decode_batch wall time per image, host side",
    );
}

/// User + system CPU time of this process, in seconds.
fn process_cpu_s() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is writable memory of the size of `rusage`; getrusage fills
    // it on success (0), checked before it is read.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage failed");
    // SAFETY: getrusage returned 0, so the struct is initialized.
    let ru = unsafe { ru.assume_init() };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

fn ratio_row(name: &str, value: f64, note: &str) {
    println!("\nROW\t{name}\t{value:.3}\tratio\t{note}");
}

/// Spinning vs blocking host waits on the same batches: per case, a `spin` and
/// a `block` row (img/s, with the CPU seconds and busy cores in the note), their
/// CPU seconds and busy cores as rows of their own, and the ratios block / spin
/// of CPU seconds per image and of img/s. The decoder's own waits are what is
/// compared: the loop never waits for the outputs itself (the decoder waits for
/// the stream before the engines rewrite them).
#[test]
#[ignore = "measurement for the GPU machine; run with --ignored"]
fn gpu_decode_wait_modes() {
    let (files, max) = bench_files();
    let seconds: f64 = env("STOKER_BENCH_SECONDS", 5.0);
    let batch: usize = env("STOKER_BENCH_BATCH", 256);
    let inputs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
    let ctx = match cuda_context(0) {
        Ok(c) => c,
        Err(e) => return stoker_testdata::gpu_skip(e),
    };
    let cases = [
        ("hw_lanes4", GpuDecoderOptions::default()),
        (
            "hw_lanes4_cpu_share25",
            GpuDecoderOptions {
                cpu_share: 0.25,
                ..GpuDecoderOptions::default()
            },
        ),
    ];
    for (case, options) in cases {
        let mut per_mode = Vec::new();
        for mode in [WaitMode::Spin, WaitMode::Block] {
            let options = GpuDecoderOptions {
                waits: mode,
                ..options.clone()
            };
            let mut dec = match GpuDecoder::new(&ctx, options) {
                Ok(d) => d,
                Err(e) => return stoker_testdata::gpu_skip(format!("{case}: {e}")),
            };
            assert_eq!(dec.wait_mode(), mode);
            let stream = ctx.new_stream().unwrap();
            let b = batch.min(inputs.len());
            let mut outs: Vec<_> = (0..b)
                .map(|_| stream.alloc_zeros::<u8>(max).unwrap())
                .collect();
            // Warm-up: initializes the batched states and the staging.
            dec.decode_batch(&inputs[..b], &mut outs, &stream);
            mode.synchronize(&stream).unwrap();
            let label = format!("blocking:{case}:{mode}");
            let (cpu0, start, span_start) = (process_cpu_s(), Instant::now(), unix_now());
            let (mut done, mut k) = (0usize, 0usize);
            while start.elapsed().as_secs_f64() < seconds {
                let chunk: Vec<&[u8]> = (0..b).map(|i| inputs[(k + i) % inputs.len()]).collect();
                k = (k + b) % inputs.len();
                let r = dec.decode_batch(&chunk, &mut outs, &stream);
                assert!(r.iter().all(Result::is_ok));
                done += b;
            }
            mode.synchronize(&stream).unwrap();
            let secs = start.elapsed().as_secs_f64();
            let cpu = process_cpu_s() - cpu0;
            println!("\nROWSPAN\t{label}\t{span_start:.3}\t{:.3}", unix_now());
            let rate = done as f64 / secs;
            let note = format!(
                "batch {b}; {cpu:.2} s CPU (user+sys) in {secs:.2} s, {:.2} cores busy; cpu share {:.2}",
                cpu / secs,
                dec.cpu_share_now()
            );
            row(&label, rate, "img/s", &note);
            println!("\nROW\t{label}_cpu_s\t{cpu:.2}\ts\tuser+sys over {secs:.2} s");
            println!(
                "\nROW\t{label}_cores_busy\t{:.2}\tcores\tCPU seconds per second",
                cpu / secs
            );
            println!("\n# timings {label}: {}", dec.timings());
            per_mode.push((rate, cpu / done.max(1) as f64));
        }
        let [(spin_rate, spin_cpu), (block_rate, block_cpu)] = per_mode[..] else {
            unreachable!("two modes measured");
        };
        ratio_row(
            &format!("blocking:{case}:cpu_per_img_block_vs_spin"),
            block_cpu / spin_cpu,
            "CPU seconds per image, block / spin (below 1: CPU saved)",
        );
        ratio_row(
            &format!("blocking:{case}:img_per_s_block_vs_spin"),
            block_rate / spin_rate,
            "throughput, block / spin (1: no loss)",
        );
    }
}
