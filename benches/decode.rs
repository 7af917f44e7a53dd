//! Decode throughput on the bench set (`stoker_testdata::bench_dir()`, 512
//! ImageNet-like 500x375 baseline 4:2:0 JPEGs).
//!
//! - `decode_cpu/stoker_1_thread`: `CpuDecoder::decode_into` one image after
//!   another on the calling thread: images/s per core, the figure compared with
//!   `benches/peers/pil_decode.py` (PIL / libjpeg-turbo, one core).
//! - `decode_cpu/stoker_batch_rayon`: `decode_batch` over every core.
//! - `decode_gpu/batch_256`: `GpuDecoder::decode_batch` (hardware engines where
//!   present), skipped with a printed reason when there is no GPU or nvJPEG.
//! - `decode_cpu_crop/{full,crop_rows,crop_region}_cputime`: one thread, each image
//!   with a RandomResizedCrop box drawn as torchvision does (scale 0.08–1, ratio
//!   3/4–4/3, fixed seed): a full decode, `decode_top_into_routed` down to the
//!   box's bottom edge, and `decode_region_into_routed` of the box, timed by this
//!   thread's CPU time. What a training loader pays per image; a PIL-based loader
//!   decodes in full (`benches/peers/pil_decode.py`).
//! - `decode_cpu_crop_progressive/…`: the same three over the progressive
//!   photographs of `testdata/imagefolder` (38 files, mixed sizes).
//!
//! - `decode_cpu_fallback/stoker_1_core`: wall time (run it pinned), the conformance
//!   files that take the jpeg-decoder route (sequential in several scans, unusual
//!   sampling factors); their names are printed, for the PIL peer to decode the same.
//!
//! Run: `cargo bench --bench decode` (pin to one core for the per-core figure:
//! `taskset -c 1 cargo bench --bench decode -- stoker_1_thread`).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use stoker::decode::{
    cuda_context, probe, CpuDecoder, GpuDecoder, GpuDecoderOptions, Limits, Region,
};

fn bench_set() -> Vec<Vec<u8>> {
    let dir = stoker_testdata::bench_dir();
    read_jpegs(
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path()),
    )
}

/// The bytes of the `.jpg`/`.jpeg` files among `paths`, in path order.
fn read_jpegs(paths: impl Iterator<Item = std::path::PathBuf>) -> Vec<Vec<u8>> {
    let mut paths: Vec<_> = paths
        .filter(|p| p.extension().is_some_and(|e| e == "jpg" || e == "jpeg"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read(p).expect("read"))
        .collect()
}

/// Nanoseconds this thread has run on a CPU (Linux), first field of schedstat.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn cpu(c: &mut Criterion) {
    let files = bench_set();
    let dec = CpuDecoder::new(Limits::default());
    let max = files
        .iter()
        .map(|f| dec.decode_to_vec(f).expect("bench file decodes").1.len())
        .max()
        .unwrap_or(0);
    let mut g = c.benchmark_group("decode_cpu");
    g.throughput(Throughput::Elements(files.len() as u64));
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    let mut buf = vec![0u8; max];
    g.bench_function("stoker_1_thread", |b| {
        b.iter(|| {
            for f in &files {
                dec.decode_into(f, &mut buf).expect("decodes");
            }
        })
    });
    // The same loop timed by this thread's CPU time (/proc/thread-self/schedstat,
    // ns on CPU): robust when other processes share the core; compare with
    // pil_decode.py's `cpu_time` figure.
    if thread_cpu_ns().is_some() {
        g.bench_function("stoker_1_thread_cputime", |b| {
            b.iter_custom(|iters| {
                let start = thread_cpu_ns().expect("schedstat");
                for _ in 0..iters {
                    for f in &files {
                        dec.decode_into(f, &mut buf).expect("decodes");
                    }
                }
                Duration::from_nanos(thread_cpu_ns().expect("schedstat") - start)
            })
        });
    }
    let inputs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<Vec<u8>> = files.iter().map(|_| vec![0u8; max]).collect();
    g.bench_function("stoker_batch_rayon", |b| {
        b.iter(|| {
            let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
            let r = dec.decode_batch(&inputs, &mut refs);
            assert!(r.iter().all(Result::is_ok));
        })
    });
    g.finish();
    println!("cpu routes: {}", dec.route_counts());
}

/// torchvision's `RandomResizedCrop.get_params` (scale 0.08–1, ratio 3/4–4/3, ten
/// tries, then the whole image cut to the ratio range) on a small fixed-seed generator.
fn random_resized_crop(w: u32, h: u32, state: &mut u64) -> Region {
    let mut uniform = |lo: f64, hi: f64| {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        lo + (hi - lo) * ((*state >> 11) as f64 / (1u64 << 53) as f64)
    };
    let area = f64::from(w) * f64::from(h);
    for _ in 0..10 {
        let target = area * uniform(0.08, 1.0);
        let ratio = uniform((3.0f64 / 4.0).ln(), (4.0f64 / 3.0).ln()).exp();
        let cw = (target * ratio).sqrt().round() as u32;
        let ch = (target / ratio).sqrt().round() as u32;
        if (1..=w).contains(&cw) && (1..=h).contains(&ch) {
            let x = uniform(0.0, f64::from(w - cw + 1)) as u32;
            let y = uniform(0.0, f64::from(h - ch + 1)) as u32;
            return Region {
                x,
                y,
                width: cw,
                height: ch,
            };
        }
    }
    Region::top_rows(w, h)
}

/// The progressive photographs of `testdata/imagefolder` (mixed sizes,
/// 4:2:0 and 4:4:4, some grayscale): what web-scraped datasets hold a share of.
fn progressive_set() -> Vec<Vec<u8>> {
    let dir = stoker_testdata::dir().join("imagefolder");
    let classes = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let files = classes.flat_map(|class| {
        std::fs::read_dir(class.expect("dir entry").path())
            .into_iter()
            .flatten()
            .map(|e| e.expect("dir entry").path())
    });
    let mut set = read_jpegs(files);
    set.retain(|f| probe(f, &Limits::default()).is_ok_and(|i| i.progressive));
    set
}

fn cpu_crop(c: &mut Criterion) {
    crop_group(c, "decode_cpu_crop", bench_set());
}

fn cpu_crop_progressive(c: &mut Criterion) {
    crop_group(c, "decode_cpu_crop_progressive", progressive_set());
}

fn crop_group(c: &mut Criterion, group: &str, files: Vec<Vec<u8>>) {
    if thread_cpu_ns().is_none() {
        println!("{group} skipped: no /proc/thread-self/schedstat");
        return;
    }
    let dec = CpuDecoder::new(Limits::default());
    let mut seed = 7u64;
    let crops: Vec<Region> = files
        .iter()
        .map(|f| {
            let info = probe(f, &Limits::default()).expect("bench file probes");
            random_resized_crop(info.width, info.height, &mut seed)
        })
        .collect();
    let max = files
        .iter()
        .map(|f| probe(f, &Limits::default()).expect("probes").rgb_len())
        .max()
        .unwrap_or(0);
    let mut buf = vec![0u8; max];
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(files.len() as u64));
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    type Decode<'a> = Box<dyn Fn(&[u8], Region, &mut [u8]) + 'a>;
    let ways: [(&str, Decode); 3] = [
        (
            "full_cputime",
            Box::new(|f, _, out| {
                dec.decode_into(f, out).expect("decodes");
            }),
        ),
        (
            "crop_rows_cputime",
            Box::new(|f, r, out| {
                dec.decode_top_into_routed(f, out, r.bottom())
                    .expect("decodes");
            }),
        ),
        (
            "crop_region_cputime",
            Box::new(|f, r, out| {
                dec.decode_region_into_routed(f, out, r).expect("decodes");
            }),
        ),
    ];
    for (name, decode) in &ways {
        g.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                let start = thread_cpu_ns().expect("schedstat");
                for _ in 0..iters {
                    for (f, r) in files.iter().zip(&crops) {
                        decode(f, *r, &mut buf);
                    }
                }
                Duration::from_nanos(thread_cpu_ns().expect("schedstat") - start)
            })
        });
    }
    g.finish();
}

/// The conformance files the CPU decoder sends to jpeg-decoder, with their names.
fn fallback_set(dec: &CpuDecoder) -> Vec<(String, Vec<u8>)> {
    let dir = stoker_testdata::dir().join("conformance/core");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let data = std::fs::read(dir.join(&n)).expect("read");
            (n, data)
        })
        .filter(|(_, data)| {
            probe(data, dec.limits()).is_ok_and(|i| !i.zune_decodable())
                && dec
                    .decode_to_vec_routed(data)
                    .is_ok_and(|(_, r, _)| r == stoker::decode::Route::CpuFallback)
        })
        .collect()
}

fn cpu_fallback(c: &mut Criterion) {
    let dec = CpuDecoder::new(Limits::default());
    let set = fallback_set(&dec);
    for (name, _) in &set {
        println!("decode_cpu_fallback file: {name}");
    }
    let max = set
        .iter()
        .map(|(_, f)| dec.decode_to_vec(f).expect("decodes").1.len())
        .max()
        .unwrap_or(0);
    let mut buf = vec![0u8; max];
    let mut g = c.benchmark_group("decode_cpu_fallback");
    g.throughput(Throughput::Elements(set.len() as u64));
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    // Wall time, not this thread's CPU time: jpeg-decoder decodes components on
    // threads of its own. Pin the run to one core for a per-core figure.
    g.bench_function("stoker_1_core", |b| {
        b.iter(|| {
            for (_, f) in &set {
                dec.decode_into(f, &mut buf).expect("decodes");
            }
        })
    });
    g.finish();
}

fn gpu(c: &mut Criterion) {
    let ctx = match cuda_context(0) {
        Ok(ctx) => ctx,
        Err(e) => {
            println!("decode_gpu skipped: {e}");
            return;
        }
    };
    let mut dec = match GpuDecoder::new(&ctx, GpuDecoderOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            println!("decode_gpu skipped: {e}");
            return;
        }
    };
    let files = bench_set();
    let stream = ctx.default_stream();
    let batch = 256.min(files.len());
    let inputs: Vec<&[u8]> = files.iter().take(batch).map(Vec::as_slice).collect();
    let mut outs: Vec<_> = (0..batch)
        .map(|_| stream.alloc_zeros::<u8>(500 * 500 * 3).expect("alloc"))
        .collect();
    let mut g = c.benchmark_group("decode_gpu");
    g.throughput(Throughput::Elements(batch as u64));
    g.bench_function("batch_256", |b| {
        b.iter(|| {
            let r = dec.decode_batch(&inputs, &mut outs, &stream);
            stream.synchronize().expect("sync");
            assert!(r.iter().all(Result::is_ok));
        })
    });
    g.finish();
    println!(
        "gpu routes: {} engines {:?}",
        dec.route_counts(),
        dec.hardware_engines()
    );
}

criterion_group!(
    benches,
    cpu,
    cpu_crop,
    cpu_crop_progressive,
    cpu_fallback,
    gpu
);
criterion_main!(benches);
