//! CPU reference of the kernel's math, operation for operation, used by the
//! tests to prove that the kernel formula equals the CPU path's transform.

use super::TransformArgs;

/// The most source taps per axis the kernel uses (matches `STOKER_MAX_TAPS`).
pub(crate) const MAX_TAPS: usize = 64;

/// Taps of one axis for output index `out_index`: first source index and weights
/// (summing to 1), restricted to the crop box. Same arithmetic, in the same
/// order, as `stoker_taps` in transform.cu.
pub(crate) fn taps(
    box_start: f32,
    box_len: f32,
    in_size: u32,
    out_size: u32,
    out_index: u32,
    weights: &mut [f32; MAX_TAPS],
) -> (usize, usize) {
    let scale = box_len / out_size as f32;
    let filterscale = if scale < 1.0 { 1.0 } else { scale };
    let support = filterscale;
    let center = box_start + (out_index as f32 + 0.5) * scale;
    let box_lo = (box_start.floor() as i64).max(0);
    let box_hi = ((box_start + box_len).ceil() as i64).min(in_size as i64);
    let mut lo = ((center - support).floor() as i64).max(box_lo);
    let hi = ((center + support).ceil() as i64).min(box_hi);
    let mut n = hi - lo;
    if n > MAX_TAPS as i64 {
        lo += (n - MAX_TAPS as i64) / 2;
        n = MAX_TAPS as i64;
    }
    if n < 1 {
        let lo = lo.clamp(0, in_size.saturating_sub(1) as i64);
        weights[0] = 1.0;
        return (lo as usize, 1);
    }
    let n = n as usize;
    let mut total = 0.0f32;
    for (i, w) in weights.iter_mut().enumerate().take(n) {
        let x = (((lo + i as i64) as f32 + 0.5 - center) / filterscale).abs();
        *w = if x < 1.0 { 1.0 - x } else { 0.0 };
        total += *w;
    }
    if total > 0.0 {
        for w in weights.iter_mut().take(n) {
            *w /= total;
        }
    } else {
        for w in weights.iter_mut().take(n) {
            *w = 1.0 / n as f32;
        }
    }
    (lo as usize, n)
}

/// A decoded source image as the kernel sees it (HWC u8, 1 or 3 channels).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SourceImage<'a> {
    /// Pixels; row `y` starts at `y * pitch`.
    pub(crate) pixels: &'a [u8],
    /// Width in pixels.
    pub(crate) width: u32,
    /// Height in pixels.
    pub(crate) height: u32,
    /// Bytes between rows.
    pub(crate) pitch: u32,
    /// 1 or 3.
    pub(crate) channels: u32,
}

/// CPU reference of one output pixel: the resampled RGB values (0..255 scale,
/// not rounded) of output pixel (`ox`, `oy`), flip applied. Mirrors
/// `stoker_sample` in transform.cu: vertical pass first, rounded to u8 levels,
/// then the horizontal pass.
pub(crate) fn reference_pixel(
    src: &SourceImage<'_>,
    crop: [f32; 4],
    flip: bool,
    out_width: u32,
    out_height: u32,
    ox: u32,
    oy: u32,
) -> [f32; 3] {
    let sx = if flip { out_width - 1 - ox } else { ox };
    let mut wx = [0.0f32; MAX_TAPS];
    let mut wy = [0.0f32; MAX_TAPS];
    let (x0, nx) = taps(crop[0], crop[2], src.width, out_width, sx, &mut wx);
    let (y0, ny) = taps(crop[1], crop[3], src.height, out_height, oy, &mut wy);
    let pitch = src.pitch as usize;
    let mut acc = [0.0f32; 3];
    for (i, wxi) in wx.iter().enumerate().take(nx) {
        let mut col = [0.0f32; 3];
        for (j, wyj) in wy.iter().enumerate().take(ny) {
            let row = (y0 + j) * pitch;
            if src.channels == 3 {
                let px = &src.pixels[row + (x0 + i) * 3..][..3];
                for c in 0..3 {
                    col[c] += wyj * px[c] as f32;
                }
            } else {
                col[0] += wyj * src.pixels[row + x0 + i] as f32;
            }
        }
        if src.channels != 3 {
            col = [col[0]; 3];
        }
        for c in 0..3 {
            acc[c] += wxi * level(col[c]);
        }
    }
    acc
}

/// The u8 level of a resampled value: round half to even (`rintf`), clamp to 0..=255.
pub(crate) fn level(v: f32) -> f32 {
    v.round_ties_even().clamp(0.0, 255.0)
}

/// `stoker_f32_to_bf16` in transform.cu, step for step: round to nearest even on the
/// f32 bits, NaN kept quiet.
pub(crate) fn f32_to_bf16_bits(f: f32) -> u16 {
    let u = f.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// CPU reference of a whole output image in f32 CHW: what `stoker_transform_f32`
/// writes for one image (normalized with `args` when `args.normalize == 1`).
pub(crate) fn reference_image_f32(
    src: &SourceImage<'_>,
    crop: [f32; 4],
    flip: bool,
    args: &TransformArgs,
) -> Vec<f32> {
    let (w, h) = (args.out_width, args.out_height);
    let plane = (w * h) as usize;
    let mut out = vec![0.0f32; 3 * plane];
    for oy in 0..h {
        for ox in 0..w {
            let rgb = reference_pixel(src, crop, flip, w, h, ox, oy);
            for c in 0..3 {
                let u = level(rgb[c]) / 255.0;
                let v = if args.normalize == 1 {
                    (u - args.mean[c]) / args.std[c]
                } else {
                    u
                };
                out[c * plane + (oy * w + ox) as usize] = v;
            }
        }
    }
    out
}

/// CPU reference of the u8 output in HWC (rounded half to even like `rintf`, clamped).
pub(crate) fn reference_image_u8_hwc(
    src: &SourceImage<'_>,
    crop: [f32; 4],
    flip: bool,
    out_width: u32,
    out_height: u32,
) -> Vec<u8> {
    let mut out = Vec::with_capacity((out_width * out_height * 3) as usize);
    for oy in 0..out_height {
        for ox in 0..out_width {
            let rgb = reference_pixel(src, crop, flip, out_width, out_height, ox, oy);
            for v in rgb {
                out.push(level(v) as u8);
            }
        }
    }
    out
}
