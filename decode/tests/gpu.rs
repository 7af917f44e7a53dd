//! GPU backend tests. They compile everywhere; without a GPU (or without
//! nvJPEG) they print why and return. On the GPU machine
//! `scripts/device-check.d/10-decode.sh` runs them for real.

mod common;

use std::path::PathBuf;

use common::{bench_dir, conformance_rows, data_dir, jpegs_in, jpegs_under, psnr};
use stoker_decode::{
    cuda_context, nvjpeg::NvJpeg, BatchUse, CpuDecoder, DecodeError, GpuDecoder, GpuDecoderOptions,
    LoadError, Region, Route, WaitMode,
};

/// PSNR at or above which two decodes of the same file agree (README: IDCT
/// and upsampling differ slightly between decoders).
const MIN_PSNR: f64 = 30.0;

/// RGB PSNR floor for chroma-subsampled files whose luma matches (see `compare`).
const MIN_PSNR_UPSAMPLED: f64 = 25.0;

/// BT.601 luma of RGB pixels, rounded to u8.
fn luma(rgb: &[u8]) -> Vec<u8> {
    rgb.chunks_exact(3)
        .map(|p| {
            let y = 0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2]);
            y.round().clamp(0.0, 255.0) as u8
        })
        .collect()
}

#[test]
fn load_error_lists_every_candidate_tried() {
    let candidates = [
        PathBuf::from("/nonexistent/stoker/libnvjpeg.so.13"),
        PathBuf::from("libnvjpeg-does-not-exist.so.99"),
    ];
    // SAFETY: neither path exists, so no library is loaded.
    match unsafe { NvJpeg::load_from(&candidates) } {
        Err(LoadError::NotFound { tried }) => {
            assert_eq!(tried.len(), 2);
            assert_eq!(tried[0].0, candidates[0]);
            let msg = LoadError::NotFound { tried }.to_string();
            assert!(msg.contains("/nonexistent/stoker/libnvjpeg.so.13"), "{msg}");
        }
        other => panic!("want NotFound, got {other:?}"),
    }
}

#[test]
fn search_order_starts_with_the_override_then_cuda13() {
    let c = NvJpeg::candidates();
    let pos = |name: &str| c.iter().position(|p| p.as_os_str() == name);
    let (a, b) = (
        pos("libnvjpeg.so.13").unwrap(),
        pos("libnvjpeg.so.12").unwrap(),
    );
    assert!(a < b);
    for dir in stoker_decode::nvjpeg::TOOLKIT_TARGET_DIRS {
        let file = std::path::Path::new(dir).join("libnvjpeg.so.13");
        assert!(c.iter().any(|p| p.ends_with(&file)), "{file:?} in {c:?}");
    }
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        stoker_decode::nvjpeg::TOOLKIT_TARGET_DIRS,
        ["targets/x86_64-linux/lib"]
    );
}

#[test]
fn library_loads_and_resolves_every_symbol_when_present() {
    match NvJpeg::load() {
        Ok(lib) => {
            println!("nvJPEG {:?} from {}", lib.version(), lib.path().display());
            assert!(lib.version().0 >= 11, "version {:?}", lib.version());
        }
        Err(e) => stoker_testdata::gpu_skip(format!("nvJPEG not loadable here: {e}")),
    }
}

/// A GPU decoder, or the reason there is none.
fn gpu() -> Option<(std::sync::Arc<cudarc::driver::CudaContext>, GpuDecoder)> {
    gpu_with(GpuDecoderOptions::default())
}

/// A GPU decoder with `options`, or the reason there is none.
fn gpu_with(
    options: GpuDecoderOptions,
) -> Option<(std::sync::Arc<cudarc::driver::CudaContext>, GpuDecoder)> {
    let ctx = match cuda_context(0) {
        Ok(c) => c,
        Err(e) => {
            stoker_testdata::gpu_skip(e);
            return None;
        }
    };
    match GpuDecoder::new(&ctx, options) {
        Ok(d) => Some((ctx, d)),
        Err(DecodeError::Load(e)) => {
            stoker_testdata::gpu_skip(format!("GPU present but nvJPEG not loadable: {e}"));
            None
        }
        Err(e) => panic!("GPU present and nvJPEG loaded, but the decoder failed: {e}"),
    }
}

/// Decodes `files` on the GPU in batches of `batch` and on the CPU; for the
/// files marked strict checks they agree (same success/failure, PSNR between
/// pixels); for the others (corrupt, "either") only that each gets a result.
/// Returns the routes seen.
fn compare(
    dec: &mut GpuDecoder,
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    files: &[(PathBuf, bool)],
    batch: usize,
) -> Vec<Route> {
    let cpu = CpuDecoder::new(Default::default());
    let stream = ctx.default_stream();
    let mut routes = Vec::new();
    let mut failures = Vec::new();
    for chunk in files.chunks(batch) {
        let data: Vec<Vec<u8>> = chunk
            .iter()
            .map(|(p, _)| std::fs::read(p).unwrap())
            .collect();
        let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let cpu_results: Vec<_> = inputs.iter().map(|d| cpu.decode_to_vec(d)).collect();
        let mut outputs: Vec<_> = cpu_results
            .iter()
            .map(|r| {
                let len = r.as_ref().map(|(i, _)| i.rgb_len()).unwrap_or(1).max(1);
                stream.alloc_zeros::<u8>(len).unwrap()
            })
            .collect();
        let gpu_results = dec.decode_batch(&inputs, &mut outputs, &stream);
        stream.synchronize().unwrap();
        assert_eq!(gpu_results.len(), chunk.len());
        for (k, (g, c)) in gpu_results.iter().zip(&cpu_results).enumerate() {
            let name = chunk[k].0.display();
            if !chunk[k].1 {
                if let Ok((_, route)) = g {
                    routes.push(*route);
                }
                continue;
            }
            match (g, c) {
                (Ok((gi, route)), Ok((ci, cpix))) => {
                    routes.push(*route);
                    assert_eq!((gi.width, gi.height), (ci.width, ci.height));
                    let gpix = stream.clone_dtoh(&outputs[k]).unwrap();
                    let p = psnr(&gpix[..cpix.len()], cpix);
                    // JPEG leaves chroma upsampling to the decoder: on subsampled
                    // files with sharp color edges (gdkpixbuf__icc-profile.jpeg,
                    // 4:2:0) nvJPEG's and zune-jpeg's filters differ by ~30 dB in
                    // RGB. Luma does not depend on the chroma filter, so there the
                    // bar is luma at MIN_PSNR plus RGB at MIN_PSNR_UPSAMPLED; a
                    // decode error (wrong blocks, restart, tables) fails both.
                    let ok = p >= MIN_PSNR
                        || (gi.chroma_subsampled()
                            && p >= MIN_PSNR_UPSAMPLED
                            && psnr(&luma(&gpix[..cpix.len()]), &luma(cpix)) >= MIN_PSNR);
                    if !ok {
                        failures.push(format!("{name}: GPU ({route}) vs CPU PSNR {p:.1} dB"));
                    }
                }
                (Err(_), Err(_)) => {}
                (Ok((_, route)), Err(e)) => {
                    failures.push(format!("{name}: GPU decoded ({route}), CPU failed: {e}"))
                }
                (Err(e), Ok(_)) => failures.push(format!("{name}: CPU decoded, GPU failed: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    routes
}

#[test]
fn gpu_matches_cpu_on_the_conformance_corpus() {
    let Some((ctx, mut dec)) = gpu() else { return };
    println!("{dec:?}");
    let dir = data_dir().join("conformance");
    // Pixels must agree where a decode is expected; corrupt and "either" rows
    // only need a result (nvJPEG and the CPU may fill a truncated tail differently).
    let files: Vec<(PathBuf, bool)> = conformance_rows()
        .iter()
        .map(|r| {
            let strict = matches!(
                r.expect.as_str(),
                "decode" | "metadata" | "unsupported-or-decode"
            );
            (dir.join(&r.file), strict)
        })
        .collect();
    let routes = compare(&mut dec, &ctx, &files, 32);
    let counts = dec.route_counts();
    println!("routes: {counts}");
    assert!(routes.contains(&Route::NvjpegCuda), "CUDA path never used");
    assert!(
        routes.iter().any(|r| !r.is_gpu()),
        "CPU fallback never used"
    );
    if dec.has_hardware() {
        assert!(
            routes.contains(&Route::NvjpegHardware),
            "hardware engines never used"
        );
    }
}

/// The files' bytes, their CPU decodes (the expected pixels) and a zeroed
/// device output of the right size for each, allocated on `stream`.
#[allow(clippy::type_complexity)]
fn bench_batch(
    files: &[PathBuf],
    cpu: &CpuDecoder,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
) -> (
    Vec<Vec<u8>>,
    Vec<(stoker_decode::ImageInfo, Vec<u8>)>,
    Vec<cudarc::driver::CudaSlice<u8>>,
) {
    let data: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let want: Vec<_> = data.iter().map(|d| cpu.decode_to_vec(d).unwrap()).collect();
    let outputs = want
        .iter()
        .map(|(i, _)| stream.alloc_zeros::<u8>(i.rgb_len()).unwrap())
        .collect();
    (data, want, outputs)
}

/// 64 bench files, their CPU decodes (the reference), a GPU output for each,
/// and a 2 GiB buffer to keep `stream` busy with memsets; nothing queued yet.
struct BusyStream {
    dec: GpuDecoder,
    stream: std::sync::Arc<cudarc::driver::CudaStream>,
    files: Vec<PathBuf>,
    data: Vec<Vec<u8>>,
    want: Vec<(stoker_decode::ImageInfo, Vec<u8>)>,
    outputs: Vec<cudarc::driver::CudaSlice<u8>>,
    busy: cudarc::driver::CudaSlice<u8>,
}

impl BusyStream {
    fn new() -> Option<BusyStream> {
        let (ctx, dec) = gpu()?;
        let mut files = jpegs_in(&bench_dir());
        files.truncate(64);
        let cpu = CpuDecoder::new(Default::default());
        let stream = ctx.new_stream().unwrap();
        let (data, want, outputs) = bench_batch(&files, &cpu, &stream);
        let busy = stream.alloc_zeros::<u8>(2 << 30).unwrap();
        stream.synchronize().unwrap();
        Some(BusyStream {
            dec,
            stream,
            files,
            data,
            want,
            outputs,
            busy,
        })
    }

    /// Queues a host function that sleeps `ms` milliseconds: the stream stays
    /// busy that long while the device itself stays idle.
    fn queue_host_sleep(&self, ms: u64) {
        unsafe extern "C" fn sleep(ms: *mut std::ffi::c_void) {
            std::thread::sleep(std::time::Duration::from_millis(ms as u64));
        }
        // SAFETY: the stream is live; the callback reads no memory (the
        // duration travels in the pointer's value) and makes no CUDA call.
        let launched = unsafe {
            cudarc::driver::sys::cuLaunchHostFunc(
                self.stream.cu_stream(),
                Some(sleep),
                ms as usize as *mut std::ffi::c_void,
            )
        };
        assert_eq!(launched, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
    }

    /// Queues `n` memsets of the 2 GiB buffer (under 1 ms each on an H200).
    fn queue_busy_work(&mut self, n: usize) {
        for _ in 0..n {
            self.stream.memset_zeros(&mut self.busy).unwrap();
        }
    }

    /// After the stream is synchronized: the images whose pixels are not the CPU's.
    fn wrong_pixels(
        &self,
        got: &[Result<(stoker_decode::ImageInfo, Route), DecodeError>],
    ) -> Vec<String> {
        let mut wrong = Vec::new();
        for (k, r) in got.iter().enumerate() {
            let (_, route) = r
                .as_ref()
                .unwrap_or_else(|e| panic!("{}: {e}", self.files[k].display()));
            let p = psnr(
                &self.stream.clone_dtoh(&self.outputs[k]).unwrap(),
                &self.want[k].1,
            );
            if p < MIN_PSNR {
                wrong.push(format!(
                    "{} ({route}): PSNR {p:.1}",
                    self.files[k].display()
                ));
            }
        }
        wrong
    }
}

/// nvJPEG's hardware batched decode writes its outputs when it is called, not
/// when the stream gets there (torchcodec #1634), so the decoder waits on the
/// host for work already queued on the caller's stream. Here ~100 ms of
/// memsets, then a zeroing of the outputs, are queued before the decode: the
/// decoded pixels must come out after them, not be wiped by them.
#[test]
fn decode_follows_work_queued_on_the_callers_stream() {
    let Some(mut t) = BusyStream::new() else {
        return;
    };
    t.queue_busy_work(128);
    for o in t.outputs.iter_mut() {
        t.stream.memset_zeros(o).unwrap();
    }
    let inputs: Vec<&[u8]> = t.data.iter().map(Vec::as_slice).collect();
    let got = t.dec.decode_batch(&inputs, &mut t.outputs, &t.stream);
    t.stream.synchronize().unwrap();
    let wrong = t.wrong_pixels(&got);
    println!("{}; {}", t.dec.route_counts(), t.dec.timings());
    assert!(
        wrong.is_empty(),
        "{} of {} images overwritten by work queued before the decode:\n{}",
        wrong.len(),
        got.len(),
        wrong.join("\n")
    );
}

/// `decode_batch_idle_outputs`, for outputs the caller has waited for, does not
/// wait for unrelated work queued on the stream: it returns while that work
/// still runs, and the pixels are right.
#[test]
fn idle_outputs_decode_without_waiting_for_the_stream() {
    let Some(mut t) = BusyStream::new() else {
        return;
    };
    let data = t.data.clone();
    let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    // Warm-up: the first calls allocate pinned staging (both buffers of its
    // ring, one per call) and size the decoder states, and allocations can
    // wait for the whole device; the call under test must not pay for them.
    for _ in 0..2 {
        let warm = t
            .dec
            .decode_batch_idle_outputs(&inputs, &mut t.outputs, &t.stream);
        assert!(warm.iter().all(Result::is_ok), "warm-up: {warm:?}");
    }
    // Zeroed, and waited for: the call under test must write every pixel.
    for o in t.outputs.iter_mut() {
        t.stream.memset_zeros(o).unwrap();
    }
    t.stream.synchronize().unwrap();
    // 300 ms of work that does not touch the (idle) outputs, nor the device:
    // memsets (as the test beside this one queues) fill every SM and the
    // memory bus, which slowed nvJPEG's own device work on its lane streams
    // by as long (the decoder's stream wait stayed at zero while its lanes
    // slowed), so they measured contention, not a wait for the stream.
    t.queue_host_sleep(300);
    let queued = t.stream.record_event(None).unwrap();
    let got = t
        .dec
        .decode_batch_idle_outputs(&inputs, &mut t.outputs, &t.stream);
    let still_busy = !queued.is_complete();
    t.stream.synchronize().unwrap();
    let wrong = t.wrong_pixels(&got);
    println!("{}; {}", t.dec.route_counts(), t.dec.timings());
    assert!(wrong.is_empty(), "wrong pixels:\n{}", wrong.join("\n"));
    assert!(
        still_busy,
        "the decode returned only after the earlier work on the stream had finished ({})",
        t.dec.timings()
    );
}

#[test]
fn gpu_matches_cpu_on_the_bench_set() {
    let Some((ctx, mut dec)) = gpu() else { return };
    let files = jpegs_in(&bench_dir());
    assert!(!files.is_empty());
    let files: Vec<(PathBuf, bool)> = files.into_iter().map(|p| (p, true)).collect();
    let routes = compare(&mut dec, &ctx, &files, 128);
    println!("routes: {}", dec.route_counts());
    let want = if dec.has_hardware() {
        Route::NvjpegHardware
    } else {
        Route::NvjpegCuda
    };
    // Without engines every image is a CUDA-decoder image, some of which the
    // offload may give to the CPUs.
    assert!(
        routes
            .iter()
            .all(|r| *r == want || (!dec.has_hardware() && *r == Route::CpuOffload)),
        "bench set is baseline 4:2:0: every image should take {want}"
    );
}

/// The corpus photographs the hardware engines refuse but nvJPEG's CUDA
/// decoder takes (progressive files, mostly).
fn cuda_decoder_photos() -> Vec<PathBuf> {
    jpegs_under(&data_dir().join("imagefolder"))
        .into_iter()
        .filter(|f| {
            let data = std::fs::read(f).unwrap();
            stoker_decode::probe(&data, &Default::default())
                .is_ok_and(|i| !i.hardware_decodable() && i.nvjpeg_decodable())
        })
        .collect()
}

#[test]
fn cuda_decoder_images_offloaded_to_the_cpus_decode_as_on_the_cpu() {
    let files = cuda_decoder_photos();
    // The photographs are 23 % progressive (testdata/README.md).
    assert!(files.len() >= 16, "{} CUDA-decoder photos", files.len());
    for offload in [true, false] {
        let options = GpuDecoderOptions {
            cpu_offload: offload,
            ..Default::default()
        };
        let Some((ctx, mut dec)) = gpu_with(options) else {
            return;
        };
        let files: Vec<(PathBuf, bool)> = files.iter().map(|p| (p.clone(), true)).collect();
        // Pixels as the CPU's on every route; the first batch offloads a
        // quarter, then the split follows the measured times.
        let routes = compare(&mut dec, &ctx, &files, files.len().min(32));
        println!(
            "offload {offload}: routes {}, offloaded now {:.2}",
            dec.route_counts(),
            dec.cpu_offload_now()
        );
        assert_eq!(routes.len(), files.len());
        assert_eq!(routes.contains(&Route::CpuOffload), offload, "{routes:?}");
        if !offload {
            assert_eq!(dec.cpu_offload_now(), 0.0);
        }
    }
}

#[test]
fn a_bad_image_fails_alone_in_a_gpu_batch() {
    let Some((ctx, mut dec)) = gpu() else { return };
    let stream = ctx.default_stream();
    let good =
        std::fs::read(data_dir().join("conformance/core/go__video-001.q50.420.jpeg")).unwrap();
    let mut truncated_header = good.clone();
    truncated_header.truncate(100);
    let inputs: Vec<&[u8]> = vec![&good, &truncated_header, b"", &good];
    let mut outputs: Vec<_> = (0..4)
        .map(|_| stream.alloc_zeros::<u8>(150 * 103 * 3).unwrap())
        .collect();
    let r = dec.decode_batch(&inputs, &mut outputs, &stream);
    stream.synchronize().unwrap();
    assert!(r[0].is_ok() && r[3].is_ok());
    assert!(matches!(r[1], Err(DecodeError::Truncated { .. })));
    assert!(matches!(r[2], Err(DecodeError::Empty)));
}

/// With regions (`BatchUse::regions`), the CPU routes (the CPU share, and a
/// CMYK file nvJPEG cannot take) write the region equal to the CPU decoder's
/// and copy nothing but the rows it spans; the nvJPEG routes decode whole
/// images. A region list of the wrong length fails every image.
#[test]
fn regions_copy_only_their_rows_on_the_cpu_routes() {
    let Some((ctx, mut dec)) = gpu_with(GpuDecoderOptions {
        cpu_share: 0.5,
        ..GpuDecoderOptions::default()
    }) else {
        return;
    };
    let stream = ctx.new_stream().unwrap();
    let cpu = CpuDecoder::new(Default::default());
    let mut files = jpegs_in(&bench_dir());
    files.truncate(31);
    files.push(data_dir().join("conformance/core/go__video-001.cmyk.jpeg"));
    let (data, want, _) = bench_batch(&files, &cpu, &stream);
    const FILL: u8 = 0xAB;
    let mut outputs: Vec<_> = want
        .iter()
        .map(|(i, _)| stream.clone_htod(&vec![FILL; i.rgb_len()]).unwrap())
        .collect();
    let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    // Crops all over the image, the whole image and one reaching past it included.
    let regions: Vec<Region> = want
        .iter()
        .enumerate()
        .map(|(k, (info, _))| {
            let (w, h, k) = (info.width, info.height, k as u32);
            match k % 4 {
                0 => Region::top_rows(w, h),
                1 => Region {
                    x: w / 2,
                    y: h / 3,
                    width: w,
                    height: h,
                },
                _ => {
                    let (x, y) = ((k * 37) % w, (k * 53) % h);
                    Region {
                        x,
                        y,
                        width: 1 + (k * 29) % (w - x),
                        height: 1 + (k * 31) % (h - y),
                    }
                }
            }
        })
        .collect();

    let wrong = dec.decode_batch_for(
        &inputs,
        &mut outputs,
        &stream,
        BatchUse {
            regions: Some(&regions[1..]),
            ..BatchUse::default()
        },
    );
    assert!(wrong
        .iter()
        .all(|r| matches!(r, Err(DecodeError::RegionsShape { .. }))));

    let usage = BatchUse {
        regions: Some(&regions),
        ..BatchUse::default()
    };
    let got = dec.decode_batch_for(&inputs, &mut outputs, &stream, usage);
    stream.synchronize().unwrap();
    let mut cpu_routes = 0;
    for (k, r) in got.iter().enumerate() {
        let name = files[k].display();
        let (info, route) = r.as_ref().unwrap_or_else(|e| panic!("{name}: {e}"));
        let (winfo, wpix) = &want[k];
        assert_eq!((info.width, info.height), (winfo.width, winfo.height));
        let pix = stream.clone_dtoh(&outputs[k]).unwrap();
        match route {
            Route::CpuShare | Route::CpuZune | Route::CpuFallback => {
                cpu_routes += 1;
                let reg = regions[k];
                let row = info.width as usize * 3;
                let (y0, y1) = (reg.y as usize, reg.bottom().min(info.height) as usize);
                let (x0, x1) = (reg.x as usize * 3, reg.right().min(info.width) as usize * 3);
                for y in y0..y1 {
                    let span = y * row + x0..y * row + x1;
                    assert!(
                        pix[span.clone()] == wpix[span],
                        "{name}: row {y} of {reg:?}"
                    );
                }
                assert!(
                    pix[..y0 * row]
                        .iter()
                        .chain(&pix[y1 * row..])
                        .all(|&b| b == FILL),
                    "{name}: rows outside {reg:?} were written"
                );
            }
            _ => {
                let p = psnr(&pix, wpix);
                assert!(p >= MIN_PSNR, "{name}: {route} PSNR {p:.1}");
            }
        }
    }
    // The CMYK file always goes through the CPU; with engines, so does half the batch.
    let expect = if dec.has_hardware() { 1 + 16 } else { 1 };
    assert!(cpu_routes >= expect, "{cpu_routes} CPU-route images");
}

/// With `cpu_share`, the last third of each batch's hardware images is
/// decoded on the CPUs: those pixels equal the CPU decoder's, the others match
/// it by PSNR, and the route counters add up. Batches of 96 over the 512 bench
/// files (the last one shorter) on a non-default stream, so both pinned
/// buffers of each ring are reused.
#[test]
fn cpu_share_matches_cpu_and_routes_add_up() {
    share_matches_cpu_and_routes_add_up(
        GpuDecoderOptions {
            cpu_share: 0.33,
            ..GpuDecoderOptions::default()
        },
        Route::CpuShare,
        0.33,
        96,
    );
}

/// Blocking waits with a CPU share (the case they are for): every host wait
/// of the decoder, and the test's own wait for the outputs, sleeps on a
/// blocking event; the pixels and routes are those of the spinning decoder.
#[test]
fn blocking_waits_with_a_cpu_share_match_cpu_and_routes_add_up() {
    share_matches_cpu_and_routes_add_up(
        GpuDecoderOptions {
            cpu_share: 0.33,
            waits: WaitMode::Block,
            ..GpuDecoderOptions::default()
        },
        Route::CpuShare,
        0.33,
        96,
    );
}

/// With `cpu_share_auto` the share moves batch to batch (0, or 2–50 %): each
/// batch's share is the end of the batch, its pixels are the CPU decoder's,
/// and the counters add up.
#[test]
fn automatic_cpu_share_matches_cpu_and_routes_add_up() {
    share_matches_cpu_and_routes_add_up(
        GpuDecoderOptions {
            cpu_share_auto: true,
            ..GpuDecoderOptions::default()
        },
        Route::CpuShare,
        0.0, // read from the decoder before each batch
        96,
    );
}

/// With `gpu_huffman_share`, 45 % of each batch's hardware images go to the
/// GPU-hybrid backend beside the engines (batches of 256, so that share is
/// over nvJPEG's 100-image threshold for GPU Huffman decoding): those pixels
/// match the CPU decoder by PSNR like the engines', and the counters add up.
#[test]
fn gpu_huffman_share_matches_cpu_and_routes_add_up() {
    share_matches_cpu_and_routes_add_up(
        GpuDecoderOptions {
            gpu_huffman_share: 0.45,
            ..GpuDecoderOptions::default()
        },
        Route::NvjpegGpuHuffman,
        0.45,
        256,
    );
}

/// Decodes the bench set in batches of `batch` with `options`, whose share
/// option sends the last `share` of each batch's hardware images to `route`;
/// checks pixels against the CPU decoder (exact for the CPU share, PSNR for
/// the GPU routes), where the share lands and that the counters add up.
fn share_matches_cpu_and_routes_add_up(
    options: GpuDecoderOptions,
    route_of_share: Route,
    share: f32,
    batch: usize,
) {
    let asked = options.waits;
    let Some((ctx, mut dec)) = gpu_with(options) else {
        return;
    };
    // Resolved when the decoder was made; an explicit mode is kept.
    assert_ne!(dec.wait_mode(), WaitMode::Auto);
    if asked != WaitMode::Auto {
        assert_eq!(dec.wait_mode(), asked);
    }
    let files = jpegs_in(&bench_dir());
    assert!(files.len() > batch);
    let cpu = CpuDecoder::new(Default::default());
    let stream = ctx.new_stream().unwrap();
    // The share applies when there are engines (and, for the GPU-Huffman share,
    // when its backend could be created).
    let active =
        dec.has_hardware() && (route_of_share != Route::NvjpegGpuHuffman || dec.has_gpu_huffman());
    let (mut total, mut shared) = (0u64, 0u64);
    for chunk in files.chunks(batch) {
        let (data, want, mut outputs) = bench_batch(chunk, &cpu, &stream);
        let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        // The CPU share in force for this batch (it moves with `cpu_share_auto`).
        let fraction = match route_of_share {
            Route::CpuShare => dec.cpu_share_now(),
            _ => f64::from(share),
        };
        let got = dec.decode_batch(&inputs, &mut outputs, &stream);
        dec.wait_mode().synchronize(&stream).unwrap();
        let mut in_share = 0usize;
        for (k, r) in got.iter().enumerate() {
            let (info, route) = r
                .as_ref()
                .unwrap_or_else(|e| panic!("{}: {e}", chunk[k].display()));
            assert_eq!(
                (info.width, info.height),
                (want[k].0.width, want[k].0.height)
            );
            let pix = stream.clone_dtoh(&outputs[k]).unwrap();
            if *route == route_of_share {
                in_share += 1;
            }
            match route {
                Route::CpuShare => {
                    assert!(
                        pix == want[k].1,
                        "{}: CPU-share pixels differ",
                        chunk[k].display()
                    );
                }
                Route::NvjpegHardware | Route::NvjpegCuda | Route::NvjpegGpuHuffman => {
                    let p = psnr(&pix, &want[k].1);
                    assert!(p >= MIN_PSNR, "{}: {route} PSNR {p:.1}", chunk[k].display());
                }
                other => panic!("{}: unexpected route {other}", chunk[k].display()),
            }
        }
        if active {
            let expect = (chunk.len() as f64 * fraction).round() as usize;
            assert_eq!(in_share, expect, "share of a batch of {}", chunk.len());
            // The share is the end of the batch.
            assert!(got[chunk.len() - expect..]
                .iter()
                .all(|r| matches!(r, Ok((_, route)) if *route == route_of_share)));
        } else {
            assert_eq!(
                in_share, 0,
                "{route_of_share}: not active here, nothing shared"
            );
        }
        total += chunk.len() as u64;
        shared += in_share as u64;
    }
    let c = dec.route_counts();
    println!("routes: {c}");
    assert_eq!(c.failed, 0);
    assert_eq!(c.decoded(), total);
    assert_eq!(c.get(route_of_share), shared);
    if dec.has_hardware() {
        assert_eq!(c.get(Route::NvjpegHardware) + shared, total);
    }
    if route_of_share == Route::NvjpegGpuHuffman {
        println!(
            "GPU-Huffman lane: {}; {}",
            if dec.has_gpu_huffman() {
                "created"
            } else {
                "unavailable"
            },
            dec.timings()
        );
    }
}

/// The host-side options of the hardware path change how work is spread, not
/// what is decoded: with preallocation off, a handle per lane, two states per
/// lane, one lane per engine or a single lane, every bench image takes the same route and gives
/// the same bytes as the default decoder. Batches of 200 (the last one 112)
/// split unevenly over the lanes. Also checks that the timings add up.
#[test]
fn hardware_options_decode_the_same_pixels() {
    let Some((ctx, mut reference)) = gpu() else {
        return;
    };
    let files = jpegs_in(&bench_dir());
    let data: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let stream = ctx.new_stream().unwrap();
    let decode_all = |dec: &mut GpuDecoder| -> Vec<(Route, Vec<u8>)> {
        let mut out = Vec::new();
        for chunk in data.chunks(200) {
            let inputs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            let mut outputs: Vec<_> = inputs
                .iter()
                .map(|d| {
                    let info = stoker_decode::probe(d, &Default::default()).unwrap();
                    stream.alloc_zeros::<u8>(info.rgb_len()).unwrap()
                })
                .collect();
            let got = dec.decode_batch(&inputs, &mut outputs, &stream);
            stream.synchronize().unwrap();
            for (r, o) in got.into_iter().zip(&outputs) {
                let (_, route) = r.unwrap();
                out.push((route, stream.clone_dtoh(o).unwrap()));
            }
        }
        out
    };
    let want = decode_all(&mut reference);
    let t = reference.timings();
    println!(
        "default: {t}; preallocated {}",
        reference.hardware_preallocated()
    );
    assert_eq!(t.images, data.len() as u64);
    assert_eq!(t.calls, data.len().div_ceil(200) as u64);
    assert!(t.total_s > 0.0 && t.probe_s <= t.total_s && t.hw_lanes_s <= t.total_s);
    if reference.has_hardware() {
        assert!(
            t.hw_decode_s > 0.0,
            "no time inside nvjpegDecodeBatched: {t}"
        );
    }
    reference.reset_timings();
    assert_eq!(reference.timings(), Default::default());
    let engines = reference.hardware_engines().map_or(7, |(e, _)| e as usize);
    drop(reference);
    for (name, options) in [
        (
            "no preallocation",
            GpuDecoderOptions {
                hardware_preallocate: false,
                ..GpuDecoderOptions::default()
            },
        ),
        (
            "handle per lane",
            GpuDecoderOptions {
                hardware_handle_per_lane: true,
                ..GpuDecoderOptions::default()
            },
        ),
        (
            "two states per lane",
            GpuDecoderOptions {
                hardware_states_per_lane: 2,
                ..GpuDecoderOptions::default()
            },
        ),
        (
            "one lane per engine",
            GpuDecoderOptions {
                hardware_lanes: engines,
                ..GpuDecoderOptions::default()
            },
        ),
        (
            "one lane",
            GpuDecoderOptions {
                hardware_lanes: 1,
                ..GpuDecoderOptions::default()
            },
        ),
        (
            "blocking waits, two states per lane",
            GpuDecoderOptions {
                waits: WaitMode::Block,
                hardware_states_per_lane: 2,
                ..GpuDecoderOptions::default()
            },
        ),
    ] {
        let Some((_, mut dec)) = gpu_with(options) else {
            return;
        };
        let got = decode_all(&mut dec);
        println!(
            "{name}: {}; lane handles {}",
            dec.timings(),
            dec.hardware_lane_handles()
        );
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.0,
                w.0,
                "{name}: {} routed differently",
                files[k].display()
            );
            assert!(g.1 == w.1, "{name}: {} pixels differ", files[k].display());
        }
    }
}
