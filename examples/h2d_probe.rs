//! Where does host-to-device copy time go? Measures pinned → device copies of one
//! loader batch (default 256 raw 500×375 RGB images, 144 MB) under the conditions
//! the loader's raw route puts them in, one at a time, in one process:
//!
//! - `single`: one 256 MiB pinned buffer copied 20 times back to back (the ceiling
//!   `gpu_consumer` reports);
//! - `ring`: a ring of `--slots` batch-sized pinned buffers, round robin (the staging ring);
//! - `gaps`: the ring, one copy at a time with the host idle `--gap-ms` between copies
//!   (how a loader throttled by its consumer copies);
//! - `busy`: the ring while a kernel keeps every SM busy on another stream (the
//!   training step), back to back and with gaps;
//! - `host<T>`: the ring while `T` host threads copy 562,500-byte records from
//!   ordinary memory into other pinned memory (the reader threads filling the next
//!   slot), with cached stores (`host`) and non-temporal stores (`hostnt`), and while
//!   `T` threads only read (`hostread`); each also reports the host threads' GB/s.
//!
//! Rows `h2d_probe_<case>_gb_s` (and `…_host_gb_s`) are printed and, with
//! `--tsv FILE`, appended as `name<TAB>value<TAB>unit<TAB>note`.
//!
//! ```text
//! cargo run --release --example h2d_probe -- --threads 4,8,16
//! ```
//!
//! Without a GPU it prints why and exits with status 2.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use stoker::decode::cudarc::driver::{
    sys::{self, CUevent_flags},
    CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use stoker::decode::cudarc::nvrtc::compile_ptx;

#[path = "common/results.rs"]
mod results;

/// Keeps every SM busy: dependent FMAs per thread, a little memory traffic.
const SPIN_CU: &str = r#"
extern "C" __global__ void spin(unsigned int iters, float *sink) {
    float y = threadIdx.x * 1e-3f + 1.0f;
    for (unsigned int k = 0; k < iters; ++k) y = fmaf(y, 0.9999999f, 1e-7f);
    if (y == -1.0f) sink[blockIdx.x] = y;  // never true; keeps the loop
}
"#;

#[derive(Parser, Debug)]
struct Args {
    /// Bytes per copy (one loader batch: 256 × 500 × 375 × 3 by default).
    #[arg(long, default_value_t = 256 * 500 * 375 * 3)]
    bytes: usize,
    /// Pinned buffers in the ring.
    #[arg(long, default_value_t = 4)]
    slots: usize,
    /// Copies per measurement.
    #[arg(long, default_value_t = 16)]
    copies: usize,
    /// Host idle time between copies in the `gaps` cases.
    #[arg(long, default_value_t = 20)]
    gap_ms: u64,
    /// Host thread counts for the contention cases.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    threads: Vec<usize>,
    /// Total host write rates (GB/s) at which the largest thread count copies with
    /// non-temporal stores, paced evenly, in the `paced` cases.
    #[arg(long, value_delimiter = ',', default_value = "32,40,48,56")]
    paced: Vec<f64>,
    /// Append result rows to this TSV file.
    #[arg(long)]
    tsv: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    device: usize,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> std::process::ExitCode {
    match run(&Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("h2d_probe: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// How the host threads of a contention case touch memory.
#[derive(Clone, Copy, PartialEq)]
enum HostWork {
    /// `copy_from_slice` (glibc memcpy; cached stores at this size).
    Copy,
    /// Non-temporal (streaming) stores: no read-for-ownership of the destination.
    CopyNt,
    /// Reads only (a checksum of the source, like the record CRC).
    Read,
}

fn run(args: &Args) -> Res<()> {
    let mut table = results::Table::open(args.tsv.as_deref())?;
    let ctx = stoker::decode::cuda_context(args.device)?;
    let copy = ctx.new_stream()?;
    let compute = ctx.new_stream()?;
    let gb = |bytes: f64, ms: f64| bytes / (ms / 1e3) / 1e9;

    // The ceiling as gpu_consumer measures it.
    {
        let n = 256 << 20;
        // SAFETY: only read by the copies; uninitialized bytes are fine here.
        let host = unsafe { ctx.alloc_pinned_with_flags::<u8>(n, 0) }?;
        let mut dev = copy.alloc_zeros::<u8>(n)?;
        copy.memcpy_htod(&host, &mut dev)?;
        let ms = timed(&copy, || {
            for _ in 0..20 {
                copy.memcpy_htod(&host, &mut dev)?;
            }
            Ok(())
        })?;
        table.row(
            "h2d_probe_single_gb_s",
            gb(20.0 * n as f64, ms),
            "GB/s",
            "one 256 MiB pinned buffer x20, back to back",
        );
    }

    let mut ring: Vec<PinnedHostSlice<u8>> = Vec::new();
    for _ in 0..args.slots {
        // SAFETY: filled below before any copy reads it.
        let mut p = unsafe { ctx.alloc_pinned_with_flags::<u8>(args.bytes, 0) }?;
        p.as_mut_slice()?.fill(1);
        ring.push(p);
    }
    let mut dev = copy.alloc_zeros::<u8>(args.bytes)?;
    let total = (args.copies * args.bytes) as f64;
    let ring_copies = |copy: &Arc<CudaStream>, dev: &mut CudaSlice<u8>| -> Res<f64> {
        timed(copy, || {
            for i in 0..args.copies {
                copy.memcpy_htod(&ring[i % ring.len()], dev)?;
            }
            Ok(())
        })
    };
    let gap_copies = |copy: &Arc<CudaStream>, dev: &mut CudaSlice<u8>| -> Res<f64> {
        let mut ms = 0.0;
        for i in 0..args.copies {
            std::thread::sleep(Duration::from_millis(args.gap_ms));
            ms += timed(copy, || Ok(copy.memcpy_htod(&ring[i % ring.len()], dev)?))?;
        }
        Ok(ms)
    };
    ring_copies(&copy, &mut dev)?; // warm-up
    let ms = ring_copies(&copy, &mut dev)?;
    table.row(
        "h2d_probe_ring_gb_s",
        gb(total, ms),
        "GB/s",
        &format!(
            "{} pinned buffers of {} B, round robin",
            args.slots, args.bytes
        ),
    );
    let ms = gap_copies(&copy, &mut dev)?;
    table.row(
        "h2d_probe_gaps_gb_s",
        gb(total, ms),
        "GB/s",
        &format!(
            "ring, one copy at a time, host idle {} ms between",
            args.gap_ms
        ),
    );

    // The same with every SM busy on another stream.
    let module = ctx.load_module(compile_ptx(SPIN_CU)?)?;
    let spin = module.load_function("spin")?;
    let mut sink = compute.alloc_zeros::<f32>(1 << 16)?;
    let launch_spin = |iters: u32, sink: &mut CudaSlice<f32>| -> Res<()> {
        let cfg = LaunchConfig {
            grid_dim: (132 * 16, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = compute.launch_builder(&spin);
        b.arg(&iters).arg(sink);
        // SAFETY: spin(u32, float*): sink holds grid_dim.x floats.
        unsafe { b.launch(cfg) }?;
        Ok(())
    };
    // Calibrate one launch to ~20 ms.
    let t = timed(&compute, || launch_spin(100_000, &mut sink))?;
    let iters = ((100_000.0 * 20.0 / t.max(0.01)) as u32).max(1000);
    for (case, gaps) in [("busy", false), ("busy_gaps", true)] {
        let need_ms = if gaps {
            args.copies as f64 * (args.gap_ms as f64 + 5.0)
        } else {
            args.copies as f64 * 5.0
        };
        for _ in 0..((need_ms / 20.0).ceil() as usize + 4) {
            launch_spin(iters, &mut sink)?;
        }
        std::thread::sleep(Duration::from_millis(10));
        let ms = if gaps {
            gap_copies(&copy, &mut dev)?
        } else {
            ring_copies(&copy, &mut dev)?
        };
        let still_busy = !compute_done(&compute)?;
        compute.synchronize()?;
        table.row(
            &format!("h2d_probe_{case}_gb_s"),
            gb(total, ms),
            "GB/s",
            &format!(
                "ring{} while a kernel fills every SM (busy to the end: {still_busy})",
                if gaps { ", gaps" } else { "" }
            ),
        );
    }

    // Host threads touching memory while the ring copies.
    let record = 500 * 375 * 3;
    let src: Vec<u8> = (0..1usize << 29).map(|i| (i * 7 + 3) as u8).collect();
    let max_threads = args.threads.iter().copied().max().unwrap_or(1);
    let per_thread = (args.bytes / 4).max(record);
    let mut dsts = Vec::new();
    for _ in 0..max_threads {
        // SAFETY: written by the host threads before anything reads it.
        dsts.push(unsafe { ctx.alloc_pinned_with_flags::<u8>(per_thread, 0) }?);
    }
    let mut cases = Vec::new();
    for &t in &args.threads {
        cases.push((HostWork::Copy, t, None));
    }
    for &t in &args.threads {
        if t >= 4 {
            cases.push((HostWork::CopyNt, t, None));
            cases.push((HostWork::Read, t, None));
        }
    }
    for &rate in &args.paced {
        cases.push((HostWork::CopyNt, max_threads, Some(rate)));
    }
    for (work, threads, pace) in cases {
        let name = match (work, pace) {
            (HostWork::Copy, _) => "host".to_string(),
            (HostWork::CopyNt, None) => "hostnt".to_string(),
            (HostWork::CopyNt, Some(r)) => format!("paced{r:.0}_hostnt"),
            (HostWork::Read, _) => "hostread".to_string(),
        };
        let per_thread_rate = pace.map(|r| r * 1e9 / threads as f64);
        let stop = AtomicBool::new(false);
        let moved = AtomicU64::new(0);
        let mut slices = Vec::new();
        for d in dsts.iter_mut().take(threads) {
            slices.push(d.as_mut_slice()?);
        }
        let (host_alone, dma_ms, host_during) = std::thread::scope(|s| -> Res<(f64, f64, f64)> {
            for (k, dst) in slices.into_iter().enumerate() {
                let (stop, moved, src) = (&stop, &moved, &src);
                s.spawn(move || host_loop(work, k, src, dst, record, per_thread_rate, stop, moved));
            }
            // Host alone, then the ring copies with the host threads still going.
            std::thread::sleep(Duration::from_millis(50));
            let (b0, t0) = (moved.load(Ordering::Relaxed), Instant::now());
            std::thread::sleep(Duration::from_millis(150));
            let alone = (moved.load(Ordering::Relaxed) - b0) as f64 / t0.elapsed().as_secs_f64();
            let (b1, t1) = (moved.load(Ordering::Relaxed), Instant::now());
            let ms = ring_copies(&copy, &mut dev)?;
            let during = (moved.load(Ordering::Relaxed) - b1) as f64 / t1.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            Ok((alone / 1e9, ms, during / 1e9))
        })?;
        let what = match (work, pace) {
            (HostWork::Copy, _) => "copy 562,500 B records into pinned memory (memcpy)".to_string(),
            (HostWork::CopyNt, None) => "copy records with non-temporal stores".to_string(),
            (HostWork::CopyNt, Some(r)) => {
                format!("copy records with non-temporal stores, paced to {r} GB/s in all")
            }
            (HostWork::Read, _) => "read records only (a checksum)".to_string(),
        };
        table.row(
            &format!("h2d_probe_{name}{threads}_gb_s"),
            gb(total, dma_ms),
            "GB/s",
            &format!("ring while {threads} host threads {what}"),
        );
        table.row(
            &format!("h2d_probe_{name}{threads}_host_gb_s"),
            host_during,
            "GB/s",
            &format!("those threads meanwhile (alone: {host_alone:.1} GB/s)"),
        );
    }
    // A slot copied right after the host rewrote it (nothing else running): are
    // lines the CPU just wrote (dirty in its caches, or just streamed to memory)
    // slower for the device to read than lines written long before?
    drop(dsts);
    for (work, name) in [(HostWork::Copy, "memcpy"), (HostWork::CopyNt, "nt")] {
        let mut ms = 0.0;
        for i in 0..args.copies {
            let slot = i % ring.len();
            let buf = ring[slot].as_mut_slice()?;
            let chunk = buf.len().div_ceil(max_threads);
            std::thread::scope(|s| {
                for (k, part) in buf.chunks_mut(chunk).enumerate() {
                    let src = &src[(k * chunk) % (src.len() - chunk)..][..part.len()];
                    s.spawn(move || match work {
                        HostWork::CopyNt => stoker::loader::gpu::copy_streaming(part, src),
                        _ => part.copy_from_slice(src),
                    });
                }
            });
            ms += timed(&copy, || Ok(copy.memcpy_htod(&ring[slot], &mut dev)?))?;
        }
        table.row(
            &format!("h2d_probe_after_{name}_gb_s"),
            gb(total, ms),
            "GB/s",
            &format!(
                "each slot copied alone right after {max_threads} host threads rewrote it ({name})"
            ),
        );
    }

    // Record by record (256 copies of one record per batch, shuffled), from pinned
    // memory and from a page-locked file map (page cache), on 1, 2 or 4 streams;
    // and whole batches from the file map: is it the per-copy cost or the memory?
    let streams = [
        copy.clone(),
        ctx.new_stream()?,
        ctx.new_stream()?,
        ctx.new_stream()?,
    ];
    let per_batch = args.bytes / record;
    let file_path = std::env::temp_dir().join(format!("stoker-h2d-probe-{}", std::process::id()));
    std::fs::write(&file_path, &src)?;
    let file = std::fs::File::open(&file_path)?;
    // SAFETY: a private temporary file nobody else writes; removed after the map drops.
    let map = unsafe { memmap2::Mmap::map(&file) }?;
    let map_len = map.len() / 4096 * 4096;
    let flags = sys::CU_MEMHOSTREGISTER_READ_ONLY
        | sys::CU_MEMHOSTREGISTER_PORTABLE
        | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
    // SAFETY: the range lies in a read-only mapping that outlives the registration
    // (unregistered below, after the copies completed).
    let registered =
        unsafe { sys::cuMemHostRegister_v2(map.as_ptr().cast_mut().cast(), map_len, flags) }
            .result();
    let mut order: Vec<usize> = (0..map_len / record).collect();
    // A fixed shuffle (LCG), like the sampler's.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    let ring_records = args.bytes / record;
    let ring_bytes = ring
        .iter()
        .map(|p| p.as_slice())
        .collect::<Result<Vec<_>, _>>()?;
    let scatter = |from_file: bool, nstreams: usize, dev: &mut CudaSlice<u8>| -> Res<f64> {
        let (dptr, _g) = {
            use stoker::decode::cudarc::driver::DevicePtr;
            dev.device_ptr(&copy)
        };
        let start = copy.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        for s in &streams[1..nstreams] {
            s.wait(&start)?;
        }
        for b in 0..args.copies {
            for r in 0..per_batch {
                let stream = &streams[r % nstreams];
                let k = b * per_batch + r;
                let src: &[u8] = if from_file {
                    let rec = order[k % order.len()];
                    &map[rec * record..(rec + 1) * record]
                } else {
                    let slot = ring_bytes[(k / ring_records) % ring_bytes.len()];
                    let rec = order[k % order.len()] % ring_records;
                    &slot[rec * record..(rec + 1) * record]
                };
                // SAFETY: the destination holds `args.bytes ≥ per_batch * record`
                // bytes; the source is page-locked (registered file map or pinned
                // ring) and outlives the copies (synchronized below).
                unsafe {
                    stoker::decode::cudarc::driver::result::memcpy_htod_async(
                        dptr + (r * record) as u64,
                        src,
                        stream.cu_stream(),
                    )
                }?;
            }
        }
        for s in &streams[1..nstreams] {
            let e = s.record_event(None)?;
            copy.wait(&e)?;
        }
        let end = copy.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        end.synchronize()?;
        Ok(f64::from(start.elapsed_ms(&end)?))
    };
    let scattered = (args.copies * per_batch * record) as f64;
    for n in [1, 2, 4] {
        let ms = scatter(false, n, &mut dev)?;
        table.row(
            &format!("h2d_probe_pinned_records_streams{n}_gb_s"),
            gb(scattered, ms),
            "GB/s",
            &format!("{per_batch} copies of one record per batch from pinned memory, shuffled, {n} streams"),
        );
    }
    match registered {
        Ok(()) => {
            for n in [1, 2, 4] {
                let ms = scatter(true, n, &mut dev)?;
                table.row(
                    &format!("h2d_probe_filemap_records_streams{n}_gb_s"),
                    gb(scattered, ms),
                    "GB/s",
                    &format!("same from a page-locked file map (page cache), {n} streams"),
                );
            }
            let whole = args.bytes.min(map_len);
            let whole_ms = timed(&copy, || {
                for b in 0..args.copies {
                    let off = (b * whole) % (map_len - whole + 1) / 4096 * 4096;
                    // SAFETY: as above; `off + whole ≤ map_len`.
                    unsafe {
                        stoker::decode::cudarc::driver::result::memcpy_htod_async(
                            {
                                use stoker::decode::cudarc::driver::DevicePtr;
                                dev.device_ptr(&copy).0
                            },
                            &map[off..off + whole],
                            copy.cu_stream(),
                        )
                    }?;
                }
                Ok(())
            })?;
            let ms = batch_api(
                &copy,
                &map,
                &order,
                record,
                per_batch,
                args.copies,
                &mut dev,
            )?;
            table.row(
                "h2d_probe_filemap_records_batchapi_gb_s",
                gb(scattered, ms),
                "GB/s",
                "same records, one cuMemcpyBatchAsync per batch",
            );
            let ms = sm_gather(&ctx, &copy, &map, &order, per_batch, args.copies, &mut dev)?;
            table.row(
                "h2d_probe_filemap_records_smgather_gb_s",
                gb((args.copies * per_batch * GATHER_BYTES) as f64, ms),
                "GB/s",
                "same records (16-byte aligned, 562,496 B) read by a kernel from the mapped page cache",
            );
            table.row(
                "h2d_probe_filemap_batches_gb_s",
                gb((args.copies * whole) as f64, whole_ms),
                "GB/s",
                "whole batches (one copy each) from the page-locked file map",
            );
            copy.synchronize()?;
            // SAFETY: registered above; every copy reading it has completed.
            if let Err(e) =
                unsafe { sys::cuMemHostUnregister(map.as_ptr().cast_mut().cast()) }.result()
            {
                eprintln!("cuMemHostUnregister: {e}");
            }
        }
        Err(e) => println!("h2d_probe: registering a file map failed: {e}"),
    }
    drop(map);
    let _ = std::fs::remove_file(&file_path);
    Ok(())
}

/// Bytes a gather kernel copies per record (16-byte multiple), and the 64-byte
/// aligned spacing of its records in the file map.
const GATHER_BYTES: usize = 562_496;
const GATHER_PITCH: usize = 562_560;

/// Copies of shuffled records from `map` (registered) with one
/// `cuMemcpyBatchAsync` per batch; ms from events.
fn batch_api(
    copy: &Arc<CudaStream>,
    map: &[u8],
    order: &[usize],
    record: usize,
    per_batch: usize,
    batches: usize,
    dev: &mut CudaSlice<u8>,
) -> Res<f64> {
    use stoker::decode::cudarc::driver::DevicePtr;
    use stoker::loader::gpu::{batch_copies_supported, memcpy_batch_htod_async};
    if !batch_copies_supported() {
        return Err("cuMemcpyBatchAsync needs a CUDA 13 driver".into());
    }
    let (dptr, _g) = dev.device_ptr(copy);
    timed(copy, || {
        for b in 0..batches {
            let mut dsts: Vec<u64> = (0..per_batch).map(|r| dptr + (r * record) as u64).collect();
            let mut srcs: Vec<u64> = (0..per_batch)
                .map(|r| {
                    let rec = order[(b * per_batch + r) % order.len()];
                    map[rec * record..].as_ptr() as u64
                })
                .collect();
            let mut sizes = vec![record; per_batch];
            // SAFETY: supported (checked above); arrays of `per_batch` entries;
            // sources lie in the registered map, destinations in `dev`
            // (`per_batch * record ≤ its length`); both outlive the copies (`timed`
            // waits for them).
            unsafe { memcpy_batch_htod_async(&mut dsts, &mut srcs, &mut sizes, copy.cu_stream()) }?;
        }
        Ok(())
    })
}

/// A kernel on the SMs copies shuffled records straight from the mapped host
/// memory (16-byte loads); ms from events.
fn sm_gather(
    ctx: &Arc<stoker::decode::cudarc::driver::CudaContext>,
    copy: &Arc<CudaStream>,
    map: &[u8],
    order: &[usize],
    per_batch: usize,
    batches: usize,
    dev: &mut CudaSlice<u8>,
) -> Res<f64> {
    const GATHER_CU: &str = r#"
extern "C" __global__ void gather(const unsigned long long *srcs, unsigned long long dst,
                                  unsigned long long pitch, unsigned long long bytes) {
    const uint4 *s = (const uint4 *)srcs[blockIdx.y];
    uint4 *d = (uint4 *)(dst + (unsigned long long)blockIdx.y * pitch);
    unsigned long long n = bytes / 16;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        d[i] = s[i];
}
"#;
    use stoker::decode::cudarc::driver::DevicePtr;
    let module = ctx.load_module(compile_ptx(GATHER_CU)?)?;
    let f = module.load_function("gather")?;
    let mut base = 0u64;
    // SAFETY: `map` was registered with DEVICEMAP; writes one pointer.
    unsafe { sys::cuMemHostGetDevicePointer_v2(&mut base, map.as_ptr().cast_mut().cast(), 0) }
        .result()?;
    let records = map.len() / GATHER_PITCH;
    let mut table = Vec::new();
    for b in 0..batches {
        for r in 0..per_batch {
            let rec = order[(b * per_batch + r) % order.len()] % records;
            table.push(base + (rec * GATHER_PITCH) as u64);
        }
    }
    let srcs = copy.clone_htod(&table)?;
    let (dptr, _g) = dev.device_ptr(copy);
    let (sptr, _s) = srcs.device_ptr(copy);
    let cfg = LaunchConfig {
        grid_dim: (8, per_batch as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // Destinations packed (a multiple of 16 bytes apart): per_batch * bytes ≤ the batch.
    let (pitch, bytes) = (GATHER_BYTES as u64, GATHER_BYTES as u64);
    timed(copy, || {
        for b in 0..batches {
            let s = sptr + (b * per_batch * 8) as u64;
            let mut l = copy.launch_builder(&f);
            l.arg(&s).arg(&dptr).arg(&pitch).arg(&bytes);
            // SAFETY: gather(u64*, u64, u64, u64): `s` holds per_batch source
            // addresses of `bytes` readable, mapped bytes each; the destination holds
            // per_batch * pitch bytes (≤ the batch size), 16-byte aligned.
            unsafe { l.launch(cfg) }?;
        }
        Ok(())
    })
}

/// Times what `f` enqueues on `stream` with events, in ms.
fn timed(stream: &Arc<CudaStream>, f: impl FnOnce() -> Res<()>) -> Res<f64> {
    let a = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    f()?;
    let b = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    b.synchronize()?;
    Ok(f64::from(a.elapsed_ms(&b)?))
}

/// Whether everything enqueued on `stream` so far has completed.
fn compute_done(stream: &Arc<CudaStream>) -> Res<bool> {
    let e = stream.record_event(None)?;
    Ok(e.is_complete())
}

/// One host thread of a contention case: records from `src` (starting at a
/// per-thread offset) into `dst`, cycling, until `stop`; bytes counted in `moved`.
#[allow(clippy::too_many_arguments)]
fn host_loop(
    work: HostWork,
    k: usize,
    src: &[u8],
    dst: &mut [u8],
    record: usize,
    rate: Option<f64>,
    stop: &AtomicBool,
    moved: &AtomicU64,
) {
    let records_src = src.len() / record;
    let records_dst = dst.len() / record;
    let mut i = k * 97;
    let mut sum = 0u64;
    let start = Instant::now();
    let mut mine = 0f64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(rate) = rate {
            // Evenly paced: no further ahead than `mine / rate` seconds.
            let due = Duration::from_secs_f64(mine / rate);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
            mine += record as f64;
        }
        let from = &src[(i % records_src) * record..][..record];
        let to = &mut dst[(i % records_dst) * record..][..record];
        match work {
            HostWork::Copy => to.copy_from_slice(from),
            HostWork::CopyNt => stoker::loader::gpu::copy_streaming(to, from),
            HostWork::Read => {
                sum = from.chunks_exact(8).fold(sum, |a, c| {
                    a ^ u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))
                });
            }
        }
        moved.fetch_add(record as u64, Ordering::Relaxed);
        i += 1;
    }
    std::hint::black_box(sum);
}
