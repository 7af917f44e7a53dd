//! The last per-image step on the CPU: horizontal flip, normalization and the batch layout /
//! dtype of [`crate::Output`], written straight into the image's slot of the batch buffer.

use half::{bf16, f16};

/// Per-channel lookup tables `(v / 255 − mean) / std` for `v` in `0..=255`, in each float
/// type a batch may hold: normalization and the conversion to the output type become one
/// load per byte (a half or bfloat16 conversion per value cost as much as the load).
#[derive(Clone)]
pub(crate) struct Normalizer {
    lut: [[f32; 256]; 3],
    lut_f16: [[f16; 256]; 3],
    lut_bf16: [[bf16; 256]; 3],
}

impl Normalizer {
    pub(crate) fn new(mean: [f32; 3], std: [f32; 3]) -> Self {
        let mut lut = [[0.0f32; 256]; 3];
        for (c, table) in lut.iter_mut().enumerate() {
            for (v, slot) in table.iter_mut().enumerate() {
                *slot = (v as f32 / 255.0 - mean[c]) / std[c];
            }
        }
        Normalizer {
            lut_f16: lut.map(|t| t.map(f16::from_f32)),
            lut_bf16: lut.map(|t| t.map(bf16::from_f32)),
            lut,
        }
    }
}

/// RGB HWC `size × size` → the same layout in `dst` (`size² · 3` bytes), mirrored if `flip`.
pub(crate) fn write_u8_hwc(src: &[u8], size: usize, flip: bool, dst: &mut [u8]) {
    if !flip {
        dst.copy_from_slice(&src[..size * size * 3]);
        return;
    }
    for (src_row, dst_row) in src
        .chunks_exact(size * 3)
        .zip(dst.chunks_exact_mut(size * 3))
    {
        for (d, s) in dst_row
            .chunks_exact_mut(3)
            .zip(src_row.chunks_exact(3).rev())
        {
            d.copy_from_slice(s);
        }
    }
}

/// RGB HWC u8 → normalized CHW of any float type through its tables `lut` (`dst`: `3 ·
/// size²` values).
///
/// Row by row over zipped slices (the pixels of a source row, reversed when flipped, and
/// the three planes' rows), so the loop carries no bounds checks.
#[inline]
fn write_chw<T: Copy>(src: &[u8], size: usize, flip: bool, lut: &[[T; 256]; 3], dst: &mut [T]) {
    let plane = size * size;
    let (r, rest) = dst.split_at_mut(plane);
    let (g, b) = rest.split_at_mut(plane);
    let [lut_r, lut_g, lut_b] = lut;
    let rows = src
        .chunks_exact(size * 3)
        .zip(r.chunks_exact_mut(size))
        .zip(g.chunks_exact_mut(size))
        .zip(b.chunks_exact_mut(size));
    for (((row, r), g), b) in rows {
        let mut put = |(((px, r), g), b): (((&[u8], &mut T), &mut T), &mut T)| {
            *r = lut_r[usize::from(px[0])];
            *g = lut_g[usize::from(px[1])];
            *b = lut_b[usize::from(px[2])];
        };
        let pixels = row.chunks_exact(3);
        if flip {
            pixels.rev().zip(r).zip(g).zip(b).for_each(&mut put);
        } else {
            pixels.zip(r).zip(g).zip(b).for_each(&mut put);
        }
    }
}

/// RGB HWC u8 → normalized HWC of any float type through its tables `lut` (`dst`: `size²
/// · 3` values), row by row as [`write_chw`].
#[inline]
fn write_hwc<T: Copy>(src: &[u8], size: usize, flip: bool, lut: &[[T; 256]; 3], dst: &mut [T]) {
    let [lut_r, lut_g, lut_b] = lut;
    for (row, out) in src
        .chunks_exact(size * 3)
        .zip(dst.chunks_exact_mut(size * 3))
    {
        let mut put = |(px, o): (&[u8], &mut [T])| {
            o[0] = lut_r[usize::from(px[0])];
            o[1] = lut_g[usize::from(px[1])];
            o[2] = lut_b[usize::from(px[2])];
        };
        let pixels = row.chunks_exact(3);
        if flip {
            pixels.rev().zip(out.chunks_exact_mut(3)).for_each(&mut put);
        } else {
            pixels.zip(out.chunks_exact_mut(3)).for_each(&mut put);
        }
    }
}

/// The float types a batch may hold, each with its tables in a [`Normalizer`].
pub(crate) trait Normalized: Copy {
    /// This type's tables in `norm`.
    fn lut(norm: &Normalizer) -> &[[Self; 256]; 3];
}

impl Normalized for f32 {
    fn lut(norm: &Normalizer) -> &[[f32; 256]; 3] {
        &norm.lut
    }
}

impl Normalized for f16 {
    fn lut(norm: &Normalizer) -> &[[f16; 256]; 3] {
        &norm.lut_f16
    }
}

/// bfloat16 rounded to nearest even, as PyTorch's `.to(torch.bfloat16)` rounds.
impl Normalized for bf16 {
    fn lut(norm: &Normalizer) -> &[[bf16; 256]; 3] {
        &norm.lut_bf16
    }
}

/// RGB HWC u8 → normalized values of `T`, planar (CHW) or interleaved (HWC) as `(size,
/// planar)` says.
pub(crate) fn write_normalized<T: Normalized>(
    src: &[u8],
    (size, planar): (usize, bool),
    flip: bool,
    norm: &Normalizer,
    dst: &mut [T],
) {
    if planar {
        write_chw(src, size, flip, T::lut(norm), dst);
    } else {
        write_hwc(src, size, flip, T::lut(norm), dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2×2 image: pixel (x, y) = (10·x + y, 100 + x, 200 + y).
    fn img() -> Vec<u8> {
        let mut v = Vec::new();
        for y in 0..2u8 {
            for x in 0..2u8 {
                v.extend([10 * x + y, 100 + x, 200 + y]);
            }
        }
        v
    }

    #[test]
    fn u8_flip_mirrors_columns() {
        let mut dst = vec![0u8; 12];
        write_u8_hwc(&img(), 2, false, &mut dst);
        assert_eq!(dst, img());
        write_u8_hwc(&img(), 2, true, &mut dst);
        assert_eq!(&dst[0..3], &[10, 101, 200]);
        assert_eq!(&dst[3..6], &[0, 100, 200]);
        assert_eq!(&dst[6..9], &[11, 101, 201]);
    }

    #[test]
    fn f32_is_planar_and_normalized() {
        let norm = Normalizer::new([0.5, 0.0, 0.0], [0.5, 1.0, 2.0]);
        let mut dst = vec![0f32; 12];
        write_normalized(&img(), (2, true), false, &norm, &mut dst);
        // R plane, pixel (1, 0) = 10 → (10/255 − 0.5)/0.5
        assert!((dst[1] - (10.0 / 255.0 - 0.5) / 0.5).abs() < 1e-6);
        // G plane starts at 4: pixel (0, 0) = 100 → 100/255
        assert!((dst[4] - 100.0 / 255.0).abs() < 1e-6);
        // B plane, pixel (0, 1) = 201 → 201/255/2
        assert!((dst[8 + 2] - 201.0 / 255.0 / 2.0).abs() < 1e-6);
        let mut flipped = vec![0f32; 12];
        write_normalized(&img(), (2, true), true, &norm, &mut flipped);
        assert_eq!(flipped[0], dst[1]);
        let mut h = vec![f16::ZERO; 12];
        write_normalized(&img(), (2, true), false, &norm, &mut h);
        for (a, b) in h.iter().zip(&dst) {
            assert!((a.to_f32() - b).abs() < 2e-3);
        }
    }

    #[test]
    fn interleaved_floats_are_the_planar_values_transposed_and_flip_the_same() {
        let norm = Normalizer::new([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
        for flip in [false, true] {
            let mut chw = vec![0f32; 12];
            let mut hwc = vec![0f32; 12];
            write_normalized(&img(), (2, true), flip, &norm, &mut chw);
            write_normalized(&img(), (2, false), flip, &norm, &mut hwc);
            for p in 0..4 {
                for c in 0..3 {
                    assert_eq!(
                        hwc[p * 3 + c],
                        chw[c * 4 + p],
                        "flip {flip}, pixel {p}, channel {c}"
                    );
                }
            }
            let mut h = vec![f16::ZERO; 12];
            write_normalized(&img(), (2, false), flip, &norm, &mut h);
            for (a, b) in h.iter().zip(&hwc) {
                assert_eq!(*a, f16::from_f32(*b));
            }
            // bfloat16 in both layouts: the f32 values, each rounded to nearest even.
            for (planar, f32s) in [(true, &chw), (false, &hwc)] {
                let mut b = vec![bf16::ZERO; 12];
                write_normalized(&img(), (2, planar), flip, &norm, &mut b);
                for (a, v) in b.iter().zip(f32s.iter()) {
                    assert_eq!(*a, bf16::from_f32(*v), "flip {flip}, planar {planar}");
                    assert!((a.to_f32() - v).abs() <= v.abs() / 256.0);
                }
            }
        }
        // Column order: flipped pixel (0, 0) is the source's (1, 0) = (10, 101, 200).
        let mut hwc = vec![0f32; 12];
        write_normalized(&img(), (2, false), true, &norm, &mut hwc);
        assert_eq!(hwc[0], (10.0 / 255.0 - 0.485) / 0.229);
    }
}
