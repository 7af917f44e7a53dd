//! GPU decode throughput on the bench set, for `scripts/device-check.d/10-decode.sh`.
//!
//! `#[ignore]`d: it measures, it asserts nothing about speed. Run on the GPU
//! machine with `stoker-decode-gpu_throughput --ignored --nocapture`; it prints
//! `ROW\tname\tvalue\tunit\tnote` lines (the device-check table format).
//! Environment: `STOKER_BENCH_DIR` (default `../shared/data/bench`),
//! `STOKER_BENCH_SECONDS` (default 5), `STOKER_BENCH_BATCH` (default 256).

mod common;

use std::time::Instant;

use stoker_decode::{cuda_context, CpuDecoder, GpuDecoder, GpuDecoderOptions, Limits};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn row(name: &str, value: f64, unit: &str, note: &str) {
    // Leading newline: the test harness prints "test name ... " without one.
    println!("\nROW\t{name}\t{value:.1}\t{unit}\t{note}");
}

#[test]
#[ignore = "measurement for the GPU machine; run with --ignored"]
fn gpu_decode_throughput() {
    let dir = std::env::var("STOKER_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| common::data_dir().join("bench"));
    let seconds: f64 = env("STOKER_BENCH_SECONDS", 5.0);
    let batch: usize = env("STOKER_BENCH_BATCH", 256);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jpg" || e == "jpeg"))
        .collect();
    paths.sort();
    let files: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let n = files.len();

    // CPU reference in the same run: all cores, rayon.
    let cpu = CpuDecoder::new(Limits::default());
    let inputs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
    let max = files
        .iter()
        .map(|f| {
            stoker_decode::probe(f, &Limits::default())
                .unwrap()
                .rgb_len()
        })
        .max()
        .unwrap();
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
        "decode_cpu_all_cores",
        done as f64 / start.elapsed().as_secs_f64(),
        "img/s",
        &format!("{cores} threads, zune-jpeg"),
    );

    let ctx = match cuda_context(0) {
        Ok(c) => c,
        Err(e) => {
            println!("SKIP: {e}");
            return;
        }
    };
    for (label, options) in [
        ("decode_gpu_hw_lanes4", GpuDecoderOptions::default()),
        (
            "decode_gpu_hw_lanes1",
            GpuDecoderOptions {
                hardware_lanes: 1,
                ..GpuDecoderOptions::default()
            },
        ),
        (
            "decode_gpu_hw_lanes8",
            GpuDecoderOptions {
                hardware_lanes: 8,
                ..GpuDecoderOptions::default()
            },
        ),
        (
            "decode_gpu_hw_lanes4_cpu_share25",
            GpuDecoderOptions {
                cpu_share: 0.25,
                ..GpuDecoderOptions::default()
            },
        ),
        (
            "decode_gpu_hw_lanes4_cpu_share33",
            GpuDecoderOptions {
                cpu_share: 0.33,
                ..GpuDecoderOptions::default()
            },
        ),
        (
            "decode_gpu_cuda_only",
            GpuDecoderOptions {
                hardware: false,
                cuda_states: 8,
                ..GpuDecoderOptions::default()
            },
        ),
    ] {
        let mut dec = match GpuDecoder::new(&ctx, options) {
            Ok(d) => d,
            Err(e) => {
                println!("SKIP {label}: {e}");
                continue;
            }
        };
        let stream = ctx.default_stream();
        let b = batch.min(n);
        let mut outs: Vec<_> = (0..b)
            .map(|_| stream.alloc_zeros::<u8>(max).unwrap())
            .collect();
        // Warm-up (initializes the batched states).
        let chunk: Vec<&[u8]> = inputs[..b].to_vec();
        dec.decode_batch(&chunk, &mut outs, &stream);
        stream.synchronize().unwrap();
        let before = dec.route_counts();
        let (mut done, start, mut k) = (0usize, Instant::now(), 0usize);
        while start.elapsed().as_secs_f64() < seconds {
            let chunk: Vec<&[u8]> = (0..b).map(|j| inputs[(k + j) % n]).collect();
            k = (k + b) % n;
            let r = dec.decode_batch(&chunk, &mut outs, &stream);
            assert!(r.iter().all(Result::is_ok));
            done += b;
        }
        stream.synchronize().unwrap();
        let rate = done as f64 / start.elapsed().as_secs_f64();
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
                "batch {b}; {}; engines {:?}",
                routes.join(" "),
                dec.hardware_engines()
            ),
        );
    }
}
