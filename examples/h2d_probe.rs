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
//!
//! A measurement tool of this repository (the device check runs it), not a template to copy:
//! beside `stoker` it uses clap, memmap2 and the modules `examples/common/results.rs` and
//! `examples/h2d_probe/host_load.rs`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use host_load::{host_loop, HostCase, HostWork};
use stoker::decode::cudarc::driver::{
    sys::{self, CUevent_flags},
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};
use stoker::decode::cudarc::nvrtc::compile_ptx;

use stoker::exit;
#[path = "h2d_probe/host_load.rs"]
mod host_load;
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
    #[arg(long, value_delimiter = ',', default_value = "32,40,48,56", value_parser = parse_rate)]
    paced: Vec<f64>,
    /// Append result rows to this TSV file.
    #[arg(long)]
    tsv: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    device: usize,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A `--paced` rate: a positive, finite number of GB/s (pacing divides by it).
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s}: want a positive number of GB/s")),
    }
}

fn main() -> std::process::ExitCode {
    match run(&Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => exit::failure("h2d_probe", e.as_ref(), 2),
    }
}

fn run(args: &Args) -> Res<()> {
    let mut table = results::Table::open(args.tsv.as_deref())?;
    let ctx = stoker::decode::cuda_context(args.device)?;
    let copy = ctx.new_stream()?;
    let compute = ctx.new_stream()?;

    single_case(&mut table, &ctx, &copy)?;
    let mut rig = Rig::new(args, &ctx, &copy)?;
    ring_cases(&mut table, &mut rig)?;

    // The same with every SM busy on another stream.
    let mut spinner = Spinner::new(&ctx, &compute)?;
    busy_cases(&mut table, &mut rig, &mut spinner)?;

    // Host threads touching memory while the ring copies.
    let record = 500 * 375 * 3;
    let src: Vec<u8> = (0..1usize << 29).map(|i| (i * 7 + 3) as u8).collect();
    let max_threads = args.threads.iter().copied().max().unwrap_or(1).max(1);
    host_cases(&mut table, &mut rig, &src, record, max_threads)?;
    after_rewrite_cases(&mut table, &mut rig, &src, max_threads)?;
    record_cases(&mut table, &mut rig, &src, record)?;
    Ok(())
}

/// GB/s of `bytes` copied in `ms` milliseconds.
fn gb(bytes: f64, ms: f64) -> f64 {
    bytes / (ms / 1e3) / 1e9
}

/// `single`: the ceiling as gpu_consumer measures it.
fn single_case(
    table: &mut results::Table,
    ctx: &Arc<CudaContext>,
    copy: &Arc<CudaStream>,
) -> Res<()> {
    let n = 256 << 20;
    // SAFETY: only read by the copies; uninitialized bytes are fine here.
    let host = unsafe { ctx.alloc_pinned_with_flags::<u8>(n, 0) }?;
    let mut dev = copy.alloc_zeros::<u8>(n)?;
    copy.memcpy_htod(&host, &mut dev)?;
    let ms = timed(copy, || {
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
    )?;
    Ok(())
}

/// The staging ring and the device batch every ring case copies into. Fields
/// are declared in the order they are freed.
struct Rig<'a> {
    /// One batch on the device.
    dev: CudaSlice<u8>,
    /// `--slots` batch-sized pinned buffers.
    ring: Vec<PinnedHostSlice<u8>>,
    /// Bytes of one measurement (`--copies` batches).
    total: f64,
    args: &'a Args,
    ctx: &'a Arc<CudaContext>,
    copy: &'a Arc<CudaStream>,
}

impl<'a> Rig<'a> {
    fn new(args: &'a Args, ctx: &'a Arc<CudaContext>, copy: &'a Arc<CudaStream>) -> Res<Self> {
        let mut ring: Vec<PinnedHostSlice<u8>> = Vec::new();
        for _ in 0..args.slots {
            // SAFETY: filled below before any copy reads it.
            let mut p = unsafe { ctx.alloc_pinned_with_flags::<u8>(args.bytes, 0) }?;
            p.as_mut_slice()?.fill(1);
            ring.push(p);
        }
        let dev = copy.alloc_zeros::<u8>(args.bytes)?;
        let total = (args.copies * args.bytes) as f64;
        Ok(Rig {
            dev,
            ring,
            total,
            args,
            ctx,
            copy,
        })
    }

    /// `--copies` ring copies back to back, round robin; ms from events.
    fn ring_copies(&mut self) -> Res<f64> {
        let (copy, ring, dev) = (self.copy, &self.ring, &mut self.dev);
        timed(copy, || {
            for i in 0..self.args.copies {
                copy.memcpy_htod(&ring[i % ring.len()], dev)?;
            }
            Ok(())
        })
    }

    /// `--copies` ring copies one at a time, the host idle `--gap-ms` before
    /// each; the copies' ms summed.
    fn gap_copies(&mut self) -> Res<f64> {
        let (copy, ring, dev) = (self.copy, &self.ring, &mut self.dev);
        let mut ms = 0.0;
        for i in 0..self.args.copies {
            std::thread::sleep(Duration::from_millis(self.args.gap_ms));
            ms += timed(copy, || Ok(copy.memcpy_htod(&ring[i % ring.len()], dev)?))?;
        }
        Ok(ms)
    }
}

/// `ring` and `gaps`: the staging ring back to back, then one copy at a time.
fn ring_cases(table: &mut results::Table, rig: &mut Rig) -> Res<()> {
    let args = rig.args;
    rig.ring_copies()?; // warm-up
    let ms = rig.ring_copies()?;
    table.row(
        "h2d_probe_ring_gb_s",
        gb(rig.total, ms),
        "GB/s",
        &format!(
            "{} pinned buffers of {} B, round robin",
            args.slots, args.bytes
        ),
    )?;
    let ms = rig.gap_copies()?;
    table.row(
        "h2d_probe_gaps_gb_s",
        gb(rig.total, ms),
        "GB/s",
        &format!(
            "ring, one copy at a time, host idle {} ms between",
            args.gap_ms
        ),
    )?;
    Ok(())
}

/// The kernel that keeps every SM busy, on the compute stream. Fields are
/// declared in the order they are freed.
struct Spinner<'a> {
    /// The kernel's never-written output (one float per block).
    sink: CudaSlice<f32>,
    spin: CudaFunction,
    _module: Arc<CudaModule>,
    compute: &'a Arc<CudaStream>,
}

impl<'a> Spinner<'a> {
    fn new(ctx: &Arc<CudaContext>, compute: &'a Arc<CudaStream>) -> Res<Self> {
        let module = ctx.load_module(compile_ptx(SPIN_CU)?)?;
        let spin = module.load_function("spin")?;
        let sink = compute.alloc_zeros::<f32>(1 << 16)?;
        Ok(Spinner {
            sink,
            spin,
            _module: module,
            compute,
        })
    }

    /// Enqueues one launch of `iters` iterations per thread.
    fn launch(&mut self, iters: u32) -> Res<()> {
        let cfg = LaunchConfig {
            grid_dim: (132 * 16, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.compute.launch_builder(&self.spin);
        b.arg(&iters).arg(&mut self.sink);
        // SAFETY: spin(u32, float*): sink holds grid_dim.x floats.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }
}

/// `busy` and `busy_gaps`: the ring while a kernel fills every SM.
fn busy_cases(table: &mut results::Table, rig: &mut Rig, spinner: &mut Spinner) -> Res<()> {
    let (args, compute) = (rig.args, spinner.compute);
    // Calibrate one launch to ~20 ms.
    let t = timed(compute, || spinner.launch(100_000))?;
    let iters = ((100_000.0 * 20.0 / t.max(0.01)) as u32).max(1000);
    for (case, gaps) in [("busy", false), ("busy_gaps", true)] {
        let need_ms = if gaps {
            args.copies as f64 * (args.gap_ms as f64 + 5.0)
        } else {
            args.copies as f64 * 5.0
        };
        for _ in 0..((need_ms / 20.0).ceil() as usize + 4) {
            spinner.launch(iters)?;
        }
        std::thread::sleep(Duration::from_millis(10));
        let ms = if gaps {
            rig.gap_copies()?
        } else {
            rig.ring_copies()?
        };
        let still_busy = !compute_done(compute)?;
        compute.synchronize()?;
        table.row(
            &format!("h2d_probe_{case}_gb_s"),
            gb(rig.total, ms),
            "GB/s",
            &format!(
                "ring{} while a kernel fills every SM (busy to the end: {still_busy})",
                if gaps { ", gaps" } else { "" }
            ),
        )?;
    }
    Ok(())
}

/// `host<T>`, `hostnt<T>`, `hostread<T>`, `paced<R>_hostnt<T>`: the ring while
/// host threads touch memory, and the host threads' own GB/s.
fn host_cases(
    table: &mut results::Table,
    rig: &mut Rig,
    src: &[u8],
    record: usize,
    max_threads: usize,
) -> Res<()> {
    let per_thread = (rig.args.bytes / 4).max(record);
    let mut dsts = Vec::new();
    for _ in 0..max_threads {
        // SAFETY: written by the host threads before anything reads it.
        dsts.push(unsafe { rig.ctx.alloc_pinned_with_flags::<u8>(per_thread, 0) }?);
    }
    for case in HostCase::all(&rig.args.threads, &rig.args.paced, max_threads) {
        let name = case.name();
        let threads = case.threads;
        let (host_alone, dma_ms, host_during) = contend(rig, &mut dsts, src, record, case)?;
        let what = case.what();
        table.row(
            &format!("h2d_probe_{name}{threads}_gb_s"),
            gb(rig.total, dma_ms),
            "GB/s",
            &format!("ring while {threads} host threads {what}"),
        )?;
        table.row(
            &format!("h2d_probe_{name}{threads}_host_gb_s"),
            host_during,
            "GB/s",
            &format!("those threads meanwhile (alone: {host_alone:.1} GB/s)"),
        )?;
    }
    Ok(())
}

/// Runs one contention case: the host threads alone, then the ring copies with
/// them still going. Returns (host GB/s alone, ring ms, host GB/s meanwhile).
fn contend(
    rig: &mut Rig,
    dsts: &mut [PinnedHostSlice<u8>],
    src: &[u8],
    record: usize,
    case: HostCase,
) -> Res<(f64, f64, f64)> {
    let HostCase {
        work,
        threads,
        pace,
    } = case;
    let per_thread_rate = pace.map(|r| r * 1e9 / threads as f64);
    let stop = AtomicBool::new(false);
    let moved = AtomicU64::new(0);
    let mut slices = Vec::new();
    for d in dsts.iter_mut().take(threads) {
        slices.push(d.as_mut_slice()?);
    }
    std::thread::scope(|s| -> Res<(f64, f64, f64)> {
        for (k, dst) in slices.into_iter().enumerate() {
            let (stop, moved) = (&stop, &moved);
            s.spawn(move || host_loop(work, k, src, dst, record, per_thread_rate, stop, moved));
        }
        // Host alone, then the ring copies with the host threads still going.
        std::thread::sleep(Duration::from_millis(50));
        let (b0, t0) = (moved.load(Ordering::Relaxed), Instant::now());
        std::thread::sleep(Duration::from_millis(150));
        let alone = (moved.load(Ordering::Relaxed) - b0) as f64 / t0.elapsed().as_secs_f64();
        let (b1, t1) = (moved.load(Ordering::Relaxed), Instant::now());
        let copies = rig.ring_copies();
        let during = (moved.load(Ordering::Relaxed) - b1) as f64 / t1.elapsed().as_secs_f64();
        // Before anything can return: the scope waits for the host threads,
        // which run until told to stop.
        stop.store(true, Ordering::Relaxed);
        Ok((alone / 1e9, copies?, during / 1e9))
    })
}

/// `after_memcpy`, `after_nt`: a slot copied right after the host rewrote it
/// (nothing else running): are lines the CPU just wrote (dirty in its caches,
/// or just streamed to memory) slower for the device to read than lines
/// written long before?
fn after_rewrite_cases(
    table: &mut results::Table,
    rig: &mut Rig,
    src: &[u8],
    max_threads: usize,
) -> Res<()> {
    let copy = rig.copy;
    for (work, name) in [(HostWork::Copy, "memcpy"), (HostWork::CopyNt, "nt")] {
        let mut ms = 0.0;
        for i in 0..rig.args.copies {
            let slot = i % rig.ring.len();
            let buf = rig.ring[slot].as_mut_slice()?;
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
            let (ring, dev) = (&rig.ring, &mut rig.dev);
            ms += timed(copy, || Ok(copy.memcpy_htod(&ring[slot], dev)?))?;
        }
        table.row(
            &format!("h2d_probe_after_{name}_gb_s"),
            gb(rig.total, ms),
            "GB/s",
            &format!(
                "each slot copied alone right after {max_threads} host threads rewrote it ({name})"
            ),
        )?;
    }
    Ok(())
}

/// A fixed shuffle (LCG), like the sampler's, of `0..n`.
fn shuffled(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    order
}

/// Record-by-record copies of one batch: where the records are and how they
/// are spread over streams.
struct Scatter<'a> {
    copy: &'a Arc<CudaStream>,
    /// The copy stream and three more.
    streams: &'a [Arc<CudaStream>; 4],
    /// Batches per measurement.
    copies: usize,
    /// Records per batch.
    per_batch: usize,
    /// Bytes per record.
    record: usize,
    /// Shuffled record indices into the file map.
    order: &'a [usize],
    /// The page-locked file map (the whole mapping).
    map: &'a [u8],
    /// The map's length rounded down to whole pages (the registered part).
    map_len: usize,
    /// The pinned ring's buffers.
    ring_bytes: &'a [&'a [u8]],
    /// Records per ring buffer.
    ring_records: usize,
}

impl Scatter<'_> {
    /// `copies` batches of `per_batch` single-record copies, from the file map or
    /// the pinned ring, on `nstreams` streams; ms from events.
    fn run(&self, from_file: bool, nstreams: usize, dev: &mut CudaSlice<u8>) -> Res<f64> {
        let (copy, streams, record) = (self.copy, self.streams, self.record);
        let (dptr, _g) = {
            use stoker::decode::cudarc::driver::DevicePtr;
            dev.device_ptr(copy)
        };
        let start = copy.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        for s in &streams[1..nstreams] {
            s.wait(&start)?;
        }
        for b in 0..self.copies {
            for r in 0..self.per_batch {
                let stream = &streams[r % nstreams];
                let k = b * self.per_batch + r;
                let src: &[u8] = if from_file {
                    let rec = self.order[k % self.order.len()];
                    &self.map[rec * record..(rec + 1) * record]
                } else {
                    let slot = self.ring_bytes[(k / self.ring_records) % self.ring_bytes.len()];
                    let rec = self.order[k % self.order.len()] % self.ring_records;
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
        Ok(f64::from(stoker_loader::gpu::event_elapsed_ms(
            &start, &end,
        )?))
    }
}

/// Record by record (256 copies of one record per batch, shuffled), from pinned
/// memory and from a page-locked file map (page cache), on 1, 2 or 4 streams;
/// and whole batches from the file map: is it the per-copy cost or the memory?
fn record_cases(table: &mut results::Table, rig: &mut Rig, src: &[u8], record: usize) -> Res<()> {
    let (args, ctx, copy) = (rig.args, rig.ctx, rig.copy);
    let streams = [
        copy.clone(),
        ctx.new_stream()?,
        ctx.new_stream()?,
        ctx.new_stream()?,
    ];
    let per_batch = args.bytes / record;
    let file_path = std::env::temp_dir().join(format!("stoker-h2d-probe-{}", std::process::id()));
    std::fs::write(&file_path, src)?;
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
    let order = shuffled(map_len / record);
    let ring_records = args.bytes / record;
    let ring_bytes = rig
        .ring
        .iter()
        .map(|p| p.as_slice())
        .collect::<Result<Vec<_>, _>>()?;
    let sc = Scatter {
        copy,
        streams: &streams,
        copies: args.copies,
        per_batch,
        record,
        order: &order,
        map: &map,
        map_len,
        ring_bytes: &ring_bytes,
        ring_records,
    };
    let dev = &mut rig.dev;
    let scattered = (args.copies * per_batch * record) as f64;
    for n in [1, 2, 4] {
        let ms = sc.run(false, n, dev)?;
        table.row(
            &format!("h2d_probe_pinned_records_streams{n}_gb_s"),
            gb(scattered, ms),
            "GB/s",
            &format!("{per_batch} copies of one record per batch from pinned memory, shuffled, {n} streams"),
        )?;
    }
    match registered {
        Ok(()) => filemap_cases(table, ctx, &sc, args.bytes, dev)?,
        Err(e) => writeln!(
            std::io::stdout(),
            "h2d_probe: registering a file map failed: {e}"
        )?,
    }
    drop(map);
    let _ = std::fs::remove_file(&file_path);
    Ok(())
}

/// The registered file map's cases: records on 1, 2 or 4 streams, whole
/// batches, one `cuMemcpyBatchAsync` per batch, and a gather kernel; then the
/// map is unregistered.
fn filemap_cases(
    table: &mut results::Table,
    ctx: &Arc<CudaContext>,
    sc: &Scatter,
    batch_bytes: usize,
    dev: &mut CudaSlice<u8>,
) -> Res<()> {
    let (copy, map, map_len) = (sc.copy, sc.map, sc.map_len);
    let scattered = (sc.copies * sc.per_batch * sc.record) as f64;
    for n in [1, 2, 4] {
        let ms = sc.run(true, n, dev)?;
        table.row(
            &format!("h2d_probe_filemap_records_streams{n}_gb_s"),
            gb(scattered, ms),
            "GB/s",
            &format!("same from a page-locked file map (page cache), {n} streams"),
        )?;
    }
    let whole = batch_bytes.min(map_len);
    let whole_ms = timed(copy, || {
        for b in 0..sc.copies {
            let off = (b * whole) % (map_len - whole + 1) / 4096 * 4096;
            // SAFETY: as above; `off + whole ≤ map_len`.
            unsafe {
                stoker::decode::cudarc::driver::result::memcpy_htod_async(
                    {
                        use stoker::decode::cudarc::driver::DevicePtr;
                        dev.device_ptr(copy).0
                    },
                    &map[off..off + whole],
                    copy.cu_stream(),
                )
            }?;
        }
        Ok(())
    })?;
    let ms = batch_api(copy, map, sc.order, sc.record, sc.per_batch, sc.copies, dev)?;
    table.row(
        "h2d_probe_filemap_records_batchapi_gb_s",
        gb(scattered, ms),
        "GB/s",
        "same records, one cuMemcpyBatchAsync per batch",
    )?;
    let ms = sm_gather(ctx, copy, map, sc.order, sc.per_batch, sc.copies, dev)?;
    table.row(
        "h2d_probe_filemap_records_smgather_gb_s",
        gb((sc.copies * sc.per_batch * GATHER_BYTES) as f64, ms),
        "GB/s",
        "same records (16-byte aligned, 562,496 B) read by a kernel from the mapped page cache",
    )?;
    table.row(
        "h2d_probe_filemap_batches_gb_s",
        gb((sc.copies * whole) as f64, whole_ms),
        "GB/s",
        "whole batches (one copy each) from the page-locked file map",
    )?;
    copy.synchronize()?;
    // SAFETY: registered above; every copy reading it has completed.
    if let Err(e) = unsafe { sys::cuMemHostUnregister(map.as_ptr().cast_mut().cast()) }.result() {
        let _ = writeln!(std::io::stderr(), "cuMemHostUnregister: {e}");
    }
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
    ctx: &Arc<CudaContext>,
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
    Ok(f64::from(stoker_loader::gpu::event_elapsed_ms(&a, &b)?))
}

/// Whether everything enqueued on `stream` so far has completed.
fn compute_done(stream: &Arc<CudaStream>) -> Res<bool> {
    let e = stream.record_event(None)?;
    Ok(e.is_complete())
}
