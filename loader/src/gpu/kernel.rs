//! The fused transform kernel: CUDA C source (`transform.cu`), its NVRTC
//! compilation into sm-agnostic PTX at start-up, the launch, and a CPU
//! reference of the very same math that tests compare against the CPU path.
//!
//! The resampling is PIL's BILINEAR resize with a box (an antialiased triangle
//! filter whose support grows with the downscale factor), which is what the CPU
//! path computes through `fast_image_resize`'s bilinear convolution; the two agree
//! within rounding (fixed-point weights on the CPU, f32 on the GPU).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DeviceRepr, LaunchConfig};
use cudarc::nvrtc::{CompileOptions, Ptx};

use crate::LoaderError;

use crate::error::driver_err;

/// The kernel source, compiled by NVRTC when a GPU pipeline is built.
pub const TRANSFORM_CU: &str = include_str!("transform.cu");

/// Threads per block of the transform launch.
const BLOCK: u32 = 256;

/// Per-image parameters of one launch; mirrors `struct ImageParams` in `transform.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ImageParams {
    /// Byte offset of pixel (0, 0) in the source arena.
    pub src_offset: u64,
    /// Source width in pixels.
    pub src_width: u32,
    /// Source height in pixels.
    pub src_height: u32,
    /// Bytes between two source rows (`>= src_width * src_channels`).
    pub src_pitch: u32,
    /// 1 (grayscale, replicated to RGB) or 3 (interleaved RGB).
    pub src_channels: u32,
    /// Crop box in source pixels; may be fractional, must lie inside the image.
    pub crop_x: f32,
    /// See `crop_x`.
    pub crop_y: f32,
    /// See `crop_x`.
    pub crop_w: f32,
    /// See `crop_x`.
    pub crop_h: f32,
    /// 1: mirror the output horizontally.
    pub flip: u32,
    /// Index of the image in the batch tensor.
    pub out_index: u32,
}

// SAFETY: `ImageParams` is `#[repr(C)]`, made only of 4- and 8-byte scalars with
// no padding the kernel could misread, and its layout is the one declared in
// transform.cu (checked by `image_params_layout_matches_cuda`).
unsafe impl DeviceRepr for ImageParams {}

/// The launch-wide arguments; mirrors `struct TransformArgs` in `transform.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformArgs {
    /// Output width in pixels.
    pub out_width: u32,
    /// Output height in pixels.
    pub out_height: u32,
    /// 1: NCHW, 0: NHWC.
    pub layout_chw: u32,
    /// 1: `(level / 255 - mean) / std`; 0: `level / 255` (float outputs; u8 ignores it).
    pub normalize: u32,
    /// Per-channel mean (on the 0..1 scale).
    pub mean: [f32; 3],
    /// Per-channel standard deviation (on the 0..1 scale), never 0.
    pub std: [f32; 3],
}

// SAFETY: `#[repr(C)]`, only 4-byte scalars, passed by value as a kernel
// parameter whose layout is `struct TransformArgs` in transform.cu.
unsafe impl DeviceRepr for TransformArgs {}

/// Element type of the batch tensor written by the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelDtype {
    /// Rounded, clamped 0..=255 (no normalization).
    U8,
    /// IEEE half, round to nearest even; stored as `u16` bit patterns.
    F16,
    /// IEEE single.
    F32,
    /// bfloat16, round to nearest even; stored as `u16` bit patterns.
    Bf16,
}

impl KernelDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            KernelDtype::U8 => 1,
            KernelDtype::F16 | KernelDtype::Bf16 => 2,
            KernelDtype::F32 => 4,
        }
    }

    fn entry_point(self) -> &'static str {
        match self {
            KernelDtype::U8 => "stoker_transform_u8",
            KernelDtype::F16 => "stoker_transform_f16",
            KernelDtype::F32 => "stoker_transform_f32",
            KernelDtype::Bf16 => "stoker_transform_bf16",
        }
    }
}

/// Libraries loaded by full path from `STOKER_NVRTC_DIR`, kept for the process lifetime.
static NVRTC_PRELOAD: OnceLock<Vec<libloading::Library>> = OnceLock::new();

/// Makes NVRTC loadable from a directory named by `STOKER_NVRTC_DIR` (for
/// instance the `nvidia/cu13/lib` folder of the `nvidia-cuda-nvrtc` wheel).
///
/// cudarc opens `libnvrtc.so.13` by name; once a library with that soname is
/// loaded, the dynamic loader reuses it, so loading the files by full path
/// first is enough. Without the variable this does nothing.
fn preload_nvrtc_from_env() -> &'static [libloading::Library] {
    NVRTC_PRELOAD.get_or_init(|| {
        let Some(dir) = std::env::var_os("STOKER_NVRTC_DIR") else {
            return Vec::new();
        };
        let dir = PathBuf::from(dir);
        let mut names: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libnvrtc") && n.contains(".so"))
                })
                .collect(),
            Err(_) => return Vec::new(),
        };
        // The builtins library first: libnvrtc opens it by name while compiling.
        names.sort_by_key(|p| !p.to_string_lossy().contains("builtins"));
        names
            .iter()
            // SAFETY: loading NVIDIA's NVRTC libraries runs their initializers,
            // which have no preconditions; the handles are kept for the process
            // lifetime in a static, so nothing is unloaded while in use.
            .filter_map(|p| unsafe { libloading::Library::new(p) }.ok())
            .collect()
    })
}

/// Whether NVRTC can be loaded (after honouring `STOKER_NVRTC_DIR`).
pub fn nvrtc_present() -> bool {
    preload_nvrtc_from_env();
    // SAFETY: `is_culib_present` only tries `dlopen` on candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiles `transform.cu` to PTX without choosing an architecture, so the driver
/// JIT-compiles it for whatever GPU runs it. Needs NVRTC, not a GPU.
///
/// # Errors
/// [`LoaderError::GpuUnavailable`] without NVRTC, [`LoaderError::Gpu`] carrying the
/// NVRTC log if the source does not compile.
pub fn compile_ptx() -> Result<Ptx, LoaderError> {
    if !nvrtc_present() {
        return Err(LoaderError::GpuUnavailable {
            reason:
                "libnvrtc (the CUDA runtime compiler, needed for the transform kernel) was not \
                     found: install the CUDA toolkit or the nvidia-cuda-nvrtc wheel and point \
                     STOKER_NVRTC_DIR or LD_LIBRARY_PATH at its lib folder"
                    .into(),
        });
    }
    let opts = CompileOptions {
        // Exact division and square root: the CPU reference uses IEEE f32.
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        // No fused multiply-add either, so the reference matches bit for bit
        // up to the order of additions.
        fmad: Some(false),
        name: Some("stoker_transform.cu".into()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(TRANSFORM_CU, opts).map_err(|e| LoaderError::Gpu {
        op: "nvrtcCompileProgram",
        source: Box::new(e),
    })
}

/// Device addresses of one launch (see [`TransformKernel::launch`] for what they must hold).
#[derive(Clone, Copy, Debug)]
pub struct LaunchBuffers {
    /// Source pixels of every image.
    pub arena: u64,
    /// `images` [`ImageParams`].
    pub params: u64,
    /// Images to transform (grid `y` dimension).
    pub images: u32,
    /// The batch tensor.
    pub out: u64,
}

/// The loaded transform kernels (one entry point per output dtype).
#[derive(Debug)]
pub struct TransformKernel {
    u8_fn: CudaFunction,
    f16_fn: CudaFunction,
    f32_fn: CudaFunction,
    bf16_fn: CudaFunction,
}

impl TransformKernel {
    /// Compiles and loads the kernels into `ctx`.
    ///
    /// # Errors
    /// See [`compile_ptx`]; [`LoaderError::Gpu`] if the module does not load.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self, LoaderError> {
        let ptx = compile_ptx()?;
        let module = ctx
            .load_module(ptx)
            .map_err(|e| driver_err("load the transform module", e))?;
        let get = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| driver_err("find a transform entry point", e))
        };
        Ok(Self {
            u8_fn: get(KernelDtype::U8.entry_point())?,
            f16_fn: get(KernelDtype::F16.entry_point())?,
            f32_fn: get(KernelDtype::F32.entry_point())?,
            bf16_fn: get(KernelDtype::Bf16.entry_point())?,
        })
    }

    /// Enqueues the transform of `buffers.images` images on `stream`.
    ///
    /// # Safety
    /// - `arena` points to device memory holding every image described by
    ///   `params` (offset, pitch, height within bounds);
    /// - `params` points to `images` valid [`ImageParams`] in device memory whose
    ///   crop boxes lie inside their images and whose `out_index` are `< capacity`
    ///   of `out`;
    /// - `out` points to device memory of at least
    ///   `capacity * 3 * out_width * out_height * dtype.size()` bytes;
    /// - all three stay valid until the work enqueued on `stream` completes.
    pub unsafe fn launch(
        &self,
        stream: &CudaStream,
        dtype: KernelDtype,
        buffers: &LaunchBuffers,
        args: &TransformArgs,
    ) -> Result<(), LoaderError> {
        let LaunchBuffers {
            arena,
            params,
            images,
            out,
        } = *buffers;
        if images == 0 {
            return Ok(());
        }
        let f = match dtype {
            KernelDtype::U8 => &self.u8_fn,
            KernelDtype::F16 => &self.f16_fn,
            KernelDtype::F32 => &self.f32_fn,
            KernelDtype::Bf16 => &self.bf16_fn,
        };
        let pixels = args.out_width * args.out_height;
        let cfg = LaunchConfig {
            grid_dim: (pixels.div_ceil(BLOCK), images, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        use cudarc::driver::PushKernelArg;
        let mut builder = stream.launch_builder(f);
        builder.arg(&arena).arg(&params).arg(args).arg(&out);
        // SAFETY: argument order and types match the entry points in
        // transform.cu (pointer, pointer, TransformArgs by value, pointer); the
        // memory obligations are the caller's (see # Safety).
        unsafe { builder.launch(cfg) }
            .map(|_| ())
            .map_err(|e| driver_err("launch the transform kernel", e))
    }
}

#[cfg(test)]
pub(crate) mod reference;

#[cfg(test)]
mod tests {
    use super::reference::*;
    use super::*;

    #[test]
    fn image_params_layout_matches_cuda() {
        // transform.cu: u64 + 4 x u32 + 4 x f32 + 2 x u32 = 48 bytes, 8-aligned.
        assert_eq!(std::mem::size_of::<ImageParams>(), 48);
        assert_eq!(std::mem::align_of::<ImageParams>(), 8);
        assert_eq!(std::mem::offset_of!(ImageParams, crop_x), 24);
        assert_eq!(std::mem::offset_of!(ImageParams, out_index), 44);
        assert_eq!(std::mem::size_of::<TransformArgs>(), 40);
    }

    #[test]
    fn taps_identity_when_box_equals_output() {
        let mut w = [0.0; MAX_TAPS];
        for i in 0..8 {
            let (lo, n) = taps(0.0, 8.0, 8, 8, i, &mut w);
            // Center falls on a pixel center: one tap of weight 1 (neighbours weigh 0).
            let nonzero: Vec<_> = (0..n).filter(|&k| w[k] > 0.0).map(|k| lo + k).collect();
            assert_eq!(nonzero, vec![i as usize]);
        }
    }

    #[test]
    fn taps_weights_sum_to_one_and_stay_in_bounds() {
        let mut w = [0.0; MAX_TAPS];
        for &(start, len, size, out) in &[
            (0.0f32, 500.0f32, 500u32, 224u32),
            (13.25, 97.5, 375, 224),
            (0.0, 5000.0, 5000, 7),
            (1.0, 3.0, 4, 224),
        ] {
            for o in 0..out {
                let (lo, n) = taps(start, len, size, out, o, &mut w);
                assert!(lo + n <= size as usize);
                let s: f32 = w[..n].iter().sum();
                assert!((s - 1.0).abs() < 1e-4, "sum {s}");
            }
        }
    }

    #[test]
    fn flip_mirrors_the_output() {
        let (w, h) = (37u32, 23u32);
        let pixels: Vec<u8> = (0..w * h * 3).map(|i| (i * 7 % 251) as u8).collect();
        let src = SourceImage {
            pixels: &pixels,
            width: w,
            height: h,
            pitch: w * 3,
            channels: 3,
        };
        let crop = [2.5, 1.0, 30.0, 20.0];
        let a = reference_image_u8_hwc(&src, crop, false, 16, 16);
        let b = reference_image_u8_hwc(&src, crop, true, 16, 16);
        for y in 0..16usize {
            for x in 0..16usize {
                let pa = &a[(y * 16 + x) * 3..][..3];
                let pb = &b[(y * 16 + 15 - x) * 3..][..3];
                assert_eq!(pa, pb);
            }
        }
        assert_ne!(a, b);
    }

    /// The kernel's bfloat16 rounding (integer arithmetic, for GPUs before sm_80) is the
    /// CPU path's `half::bf16::from_f32`, so both paths give the same bits: on every
    /// normalized level, on exact ties and on edge values.
    #[test]
    fn bf16_rounding_matches_the_cpu_path() {
        use crate::transform::{IMAGENET_MEAN, IMAGENET_STD};
        let mut values: Vec<f32> = Vec::new();
        for c in 0..3 {
            for v in 0..=255u8 {
                values.push((f32::from(v) / 255.0 - IMAGENET_MEAN[c]) / IMAGENET_STD[c]);
                values.push(f32::from(v) / 255.0);
            }
        }
        // Ties either way (the bit below the kept mantissa set, nothing after it),
        // the largest finite f32 (rounds to infinity), subnormals, zeros, infinities.
        values.extend([1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, -(1.0 + 1.0 / 256.0)]);
        values.extend([f32::MAX, f32::MIN_POSITIVE / 3.0, 0.0, -0.0]);
        values.extend([f32::INFINITY, f32::NEG_INFINITY]);
        let mut x = 0x9e37_79b9u32;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            values.push(f32::from_bits(x));
        }
        for v in values {
            let want = half::bf16::from_f32(v);
            let got = f32_to_bf16_bits(v);
            if v.is_nan() {
                assert!(half::bf16::from_bits(got).is_nan(), "{:#x}", v.to_bits());
            } else {
                assert_eq!(got, want.to_bits(), "{v:e} ({:#x})", v.to_bits());
            }
        }
    }

    #[test]
    fn gray_is_replicated() {
        let pixels: Vec<u8> = (0..64u32).map(|i| (i * 3) as u8).collect();
        let src = SourceImage {
            pixels: &pixels,
            width: 8,
            height: 8,
            pitch: 8,
            channels: 1,
        };
        let out = reference_image_u8_hwc(&src, [0.0, 0.0, 8.0, 8.0], false, 8, 8);
        for (i, px) in out.chunks(3).enumerate() {
            assert_eq!(px, [pixels[i]; 3]);
        }
    }

    /// NVRTC compiles without a GPU: this proves transform.cu is valid CUDA C
    /// and exports the four entry points the launcher looks up. scripts/test.sh
    /// points `STOKER_NVRTC_DIR` at the NVRTC wheel its Python tests install, so CI
    /// compiles the kernel; a folder named there without NVRTC in it fails the test.
    #[test]
    fn nvrtc_compiles_the_transform_kernel() {
        if let (false, Some(dir)) = (nvrtc_present(), std::env::var_os("STOKER_NVRTC_DIR")) {
            panic!(
                "STOKER_NVRTC_DIR={}: no loadable libnvrtc there",
                dir.display()
            );
        }
        if !nvrtc_present() {
            stoker_testdata::gpu_skip(
                "libnvrtc not found (set STOKER_NVRTC_DIR to the lib folder of the \
                 nvidia-cuda-nvrtc wheel, or LD_LIBRARY_PATH)",
            );
            return;
        }
        // Start-up cost, informational (docs/BENCHMARKS.md): the transform next to
        // an empty kernel compiled the same way, in the same process.
        let t = std::time::Instant::now();
        cudarc::nvrtc::compile_ptx("extern \"C\" __global__ void empty() {}")
            .expect("empty kernel");
        let empty = t.elapsed();
        let t = std::time::Instant::now();
        let ptx = compile_ptx().expect("transform.cu compiles");
        let full = t.elapsed();
        println!(
            "NVRTC: transform.cu {:.1} ms, empty kernel {:.1} ms (ratio {:.1})",
            full.as_secs_f64() * 1e3,
            empty.as_secs_f64() * 1e3,
            full.as_secs_f64() / empty.as_secs_f64()
        );
        let text = ptx.to_src();
        for dtype in [
            KernelDtype::U8,
            KernelDtype::F16,
            KernelDtype::F32,
            KernelDtype::Bf16,
        ] {
            assert!(
                text.contains(&format!(".entry {}(", dtype.entry_point())),
                "missing entry point {}",
                dtype.entry_point()
            );
        }
        assert!(
            text.contains("cvt.rn.f16.f32"),
            "f16 conversion rounds to nearest even"
        );
    }

    /// The kernel formula equals the CPU path's transform (fast_image_resize's
    /// bilinear convolution + layout/normalize) on real photographs, for random
    /// resized crops with flips and for the eval center crop: u8 levels differ by
    /// at most 2 (fixed-point weights and rounded intermediate rows on the CPU)
    /// and more than 98% are identical.
    #[test]
    fn reference_matches_the_cpu_path_on_bench_images() {
        use crate::transform::layout::{self, Normalizer};
        use crate::transform::resize::CropResizer;
        use crate::transform::{DrawKey, Transform, IMAGENET_MEAN, IMAGENET_STD};

        let dir = stoker_testdata::bench_dir();
        let decoder = stoker_decode::CpuDecoder::new(stoker_decode::Limits::default());
        let size = 224u32;
        let transforms = [
            Transform::random_resized_crop(size)
                .hflip(0.5)
                .normalize(IMAGENET_MEAN, IMAGENET_STD),
            Transform::center_crop(size, 256).normalize(IMAGENET_MEAN, IMAGENET_STD),
        ];
        let norm = Normalizer::new(IMAGENET_MEAN, IMAGENET_STD);
        let args = TransformArgs {
            out_width: size,
            out_height: size,
            layout_chw: 1,
            normalize: 1,
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
        };
        let mut resizer = CropResizer::new(size);
        let (mut total, mut equal, mut flips) = (0usize, 0usize, 0usize);
        for i in 0..6u64 {
            let path = dir.join(format!("{i:05}.jpg")).display().to_string();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let (info, rgb) = decoder.decode_to_vec(&data).expect("bench JPEG decodes");
            let src = SourceImage {
                pixels: &rgb,
                width: info.width,
                height: info.height,
                pitch: info.width * 3,
                channels: 3,
            };
            for t in &transforms {
                for epoch in 0..3 {
                    let p = t.params(7, epoch, DrawKey::at(i), info.width, info.height);
                    flips += usize::from(p.flip);
                    let crop = [
                        p.crop.0 as f32,
                        p.crop.1 as f32,
                        p.crop.2 as f32,
                        p.crop.3 as f32,
                    ];
                    let resized = resizer
                        .apply(&rgb, info.width, info.height, p.crop)
                        .unwrap()
                        .to_vec();
                    let mut cpu_u8 = vec![0u8; (size * size * 3) as usize];
                    layout::write_u8_hwc(&resized, size as usize, p.flip, &mut cpu_u8);
                    let gpu_u8 = reference_image_u8_hwc(&src, crop, p.flip, size, size);
                    let max = cpu_u8
                        .iter()
                        .zip(&gpu_u8)
                        .map(|(a, b)| a.abs_diff(*b))
                        .max()
                        .unwrap();
                    assert!(max <= 2, "{path} {p:?}: u8 levels differ by {max}");
                    total += cpu_u8.len();
                    equal += cpu_u8.iter().zip(&gpu_u8).filter(|(a, b)| a == b).count();

                    let mut cpu_f32 = vec![0f32; (3 * size * size) as usize];
                    layout::write_normalized(
                        &resized,
                        (size as usize, true),
                        p.flip,
                        &norm,
                        &mut cpu_f32,
                    );
                    let gpu_f32 = reference_image_f32(&src, crop, p.flip, &args);
                    // Two u8 levels, normalized by the smallest std, is the tolerance.
                    let tol = 2.0 / 255.0 / 0.224 + 1e-6;
                    let worst = cpu_f32
                        .iter()
                        .zip(&gpu_f32)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0f32, f32::max);
                    assert!(worst <= tol, "{path} {p:?}: f32 differs by {worst}");
                }
            }
        }
        assert!(
            flips > 0,
            "the draw never flipped: the flip path is untested"
        );
        let share = equal as f64 / total as f64;
        println!(
            "{:.3}% of {total} u8 levels identical to the CPU path",
            share * 100.0
        );
        assert!(
            share > 0.98,
            "only {:.2}% of u8 levels identical",
            share * 100.0
        );
    }

    /// On a GPU: the compiled kernel against its CPU reference on a real photo,
    /// gray and RGB sources, for every dtype and layout. With `fmad` off and IEEE
    /// division the arithmetic is the same, so u8 levels must be identical and
    /// floats equal up to f16 rounding.
    #[test]
    fn kernel_matches_its_reference_on_the_gpu() {
        if let Some(why) = crate::gpu::unavailable_reason(0) {
            stoker_testdata::gpu_skip(why);
            return;
        }
        if !nvrtc_present() {
            stoker_testdata::gpu_skip("libnvrtc not found");
            return;
        }
        use cudarc::driver::DevicePtr;
        let ctx = CudaContext::new(0).unwrap();
        let stream = ctx.new_stream().unwrap();
        let kernel = TransformKernel::load(&ctx).unwrap();
        let data = std::fs::read(stoker_testdata::bench_dir().join("00007.jpg")).unwrap();
        let (info, rgb) = stoker_decode::CpuDecoder::new(stoker_decode::Limits::default())
            .decode_to_vec(&data)
            .unwrap();
        let gray: Vec<u8> = rgb.chunks_exact(3).map(|p| p[1]).collect();
        let (w, h) = (info.width, info.height);
        let size = 96u32;
        // Two images in one launch: RGB with a flip, gray without, at different
        // arena offsets and output positions.
        let mut arena = rgb.clone();
        let gray_offset = arena.len();
        arena.extend_from_slice(&gray);
        let crops = [
            [37.0f32, 21.0, 301.0, 250.0],
            [0.0, 0.0, w as f32, h as f32],
        ];
        let params = [
            ImageParams {
                src_offset: 0,
                src_width: w,
                src_height: h,
                src_pitch: w * 3,
                src_channels: 3,
                crop_x: crops[0][0],
                crop_y: crops[0][1],
                crop_w: crops[0][2],
                crop_h: crops[0][3],
                flip: 1,
                out_index: 1,
            },
            ImageParams {
                src_offset: gray_offset as u64,
                src_width: w,
                src_height: h,
                src_pitch: w,
                src_channels: 1,
                crop_x: crops[1][0],
                crop_y: crops[1][1],
                crop_w: crops[1][2],
                crop_h: crops[1][3],
                flip: 0,
                out_index: 0,
            },
        ];
        let d_arena = stream.clone_htod(&arena).unwrap();
        let d_params = stream.clone_htod(&params[..]).unwrap();
        let plane = (size * size) as usize;
        let srcs = [
            SourceImage {
                pixels: &rgb,
                width: w,
                height: h,
                pitch: w * 3,
                channels: 3,
            },
            SourceImage {
                pixels: &gray,
                width: w,
                height: h,
                pitch: w,
                channels: 1,
            },
        ];
        for dtype in [
            KernelDtype::U8,
            KernelDtype::F16,
            KernelDtype::F32,
            KernelDtype::Bf16,
        ] {
            let args = TransformArgs {
                out_width: size,
                out_height: size,
                layout_chw: u32::from(dtype != KernelDtype::U8),
                normalize: 1,
                mean: crate::transform::IMAGENET_MEAN,
                std: crate::transform::IMAGENET_STD,
            };
            let out = stream
                .alloc_zeros::<u8>(2 * 3 * plane * dtype.size())
                .unwrap();
            let buffers = {
                let (a, _ra) = d_arena.device_ptr(&stream);
                let (p, _rp) = d_params.device_ptr(&stream);
                let (o, _ro) = out.device_ptr(&stream);
                LaunchBuffers {
                    arena: a,
                    params: p,
                    images: 2,
                    out: o,
                }
            };
            // SAFETY: the buffers hold what `launch` asks (two images, their
            // params, an output for two images of this dtype); all outlive the
            // synchronize below.
            unsafe { kernel.launch(&stream, dtype, &buffers, &args) }.unwrap();
            let bytes = stream.clone_dtoh(&out).unwrap();
            stream.synchronize().unwrap();
            for (img, p) in params.iter().enumerate() {
                let src = &srcs[img];
                let o = p.out_index as usize;
                match dtype {
                    KernelDtype::U8 => {
                        let want = reference_image_u8_hwc(src, crops[img], p.flip == 1, size, size);
                        let got = &bytes[o * 3 * plane..(o + 1) * 3 * plane];
                        assert_eq!(got, &want[..], "u8 image {img}");
                    }
                    KernelDtype::F32 => {
                        let want = reference_image_f32(src, crops[img], p.flip == 1, &args);
                        let got: Vec<f32> = bytes[o * 12 * plane..(o + 1) * 12 * plane]
                            .chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                            .collect();
                        assert_eq!(got, want, "f32 image {img}");
                    }
                    KernelDtype::F16 | KernelDtype::Bf16 => {
                        let want = reference_image_f32(src, crops[img], p.flip == 1, &args);
                        let got: Vec<u16> = bytes[o * 6 * plane..(o + 1) * 6 * plane]
                            .chunks_exact(2)
                            .map(|b| u16::from_le_bytes([b[0], b[1]]))
                            .collect();
                        let want: Vec<u16> = want
                            .iter()
                            .map(|&v| match dtype {
                                KernelDtype::F16 => half::f16::from_f32(v).to_bits(),
                                _ => f32_to_bf16_bits(v),
                            })
                            .collect();
                        assert_eq!(got, want, "{dtype:?} image {img}");
                    }
                }
            }
        }
    }
}
