//! CPU crop + resize: the source rectangle chosen by [`super::Transform::params`] is resized
//! to `size × size` RGB with an antialiased bilinear filter (what PIL / torchvision's
//! `RandomResizedCrop` use by default), into a buffer owned by the worker and reused.
//!
//! Like torchvision (`crop` then `resize`), only pixels inside the crop contribute: the
//! window is copied out first, because a filter applied to a crop box of the whole image
//! would blend in pixels from beyond the box's edges.

use fast_image_resize as fir;
use fir::pixels::U8x3;

use crate::error::LoaderError;

/// Why a crop could not be resized.
#[derive(Debug)]
pub(crate) enum ResizeError {
    /// The crop's window (this many bytes) could not be allocated.
    Memory(usize),
    /// Anything else: a crop outside the image, the filter's refusal.
    Invalid(String),
}

impl ResizeError {
    /// The loader's error for record `index`.
    pub(crate) fn for_record(self, index: u64) -> LoaderError {
        match self {
            ResizeError::Memory(bytes) => {
                LoaderError::short_of_memory(index, bytes, "the crop's window")
            }
            ResizeError::Invalid(reason) => LoaderError::UnusableRecord { index, reason },
        }
    }
}

/// A reusable resizer for one worker thread: holds its output buffer and the filter scratch,
/// so steady-state resizing allocates nothing.
pub(crate) struct CropResizer {
    resizer: fir::Resizer,
    /// `size · size · 3` bytes, RGB HWC; valid after [`CropResizer::apply`].
    out: Vec<u8>,
    /// The crop window, copied out (grows to the largest crop seen, then stays).
    window: Vec<u8>,
    size: u32,
}

impl CropResizer {
    pub(crate) fn new(size: u32) -> Self {
        CropResizer {
            resizer: fir::Resizer::new(),
            out: vec![0; size as usize * size as usize * 3],
            window: Vec::new(),
            size,
        }
    }

    /// Resizes `crop = (x, y, w, h)` of the `src_w × src_h` RGB HWC image `src` to
    /// `size × size`; returns the RGB HWC output.
    ///
    /// The caller guarantees `crop` lies inside the image (it comes from `params`) and
    /// `src.len() ≥ src_w · src_h · 3`; a violation is reported as an `Err` naming it.
    pub(crate) fn apply(
        &mut self,
        src: &[u8],
        src_w: u32,
        src_h: u32,
        crop: (u32, u32, u32, u32),
    ) -> Result<&[u8], ResizeError> {
        let (x, y, w, h) = crop;
        if w == 0 || h == 0 || x + w > src_w || y + h > src_h {
            return Err(ResizeError::Invalid(format!(
                "crop {crop:?} outside a {src_w}×{src_h} image"
            )));
        }
        if w == self.size && h == self.size {
            // No scaling: the window is the output.
            copy_window(src, src_w, crop, &mut self.out);
            return Ok(&self.out);
        }
        let window_len = w as usize * h as usize * 3;
        if self.window.len() < window_len {
            // An error, not an abort, where memory is short (as the pixel scratch).
            (self
                .window
                .try_reserve_exact(window_len - self.window.len()))
            .map_err(|_| ResizeError::Memory(window_len))?;
            self.window.resize(window_len, 0);
        }
        copy_window(src, src_w, crop, &mut self.window[..window_len]);
        // Typed RGB views: `resize` of an untyped image matches its pixel type over 13
        // types, which would compile all 13 types' filters into this crate for the one used.
        let src_img =
            fir::images::TypedImageRef::<U8x3>::from_buffer(w, h, &self.window[..window_len])
                .map_err(|e| ResizeError::Invalid(e.to_string()))?;
        let mut dst =
            fir::images::TypedImage::<U8x3>::from_buffer(self.size, self.size, &mut self.out)
                .map_err(|e| ResizeError::Invalid(e.to_string()))?;
        let options = fir::ResizeOptions::new()
            .resize_alg(fir::ResizeAlg::Convolution(fir::FilterType::Bilinear));
        self.resizer
            .resize_typed(&src_img, &mut dst, &options)
            .map_err(|e| ResizeError::Invalid(e.to_string()))?;
        Ok(&self.out)
    }

    /// Frees the crop window (it grows to the largest crop seen): for a worker short of
    /// memory before it tries again.
    pub(crate) fn release(&mut self) {
        self.window = Vec::new();
    }
}

/// Copies the `(x, y, w, h)` window of an RGB HWC image `src_w` wide into `dst` (`w·h·3`).
fn copy_window(src: &[u8], src_w: u32, (x, y, w, h): (u32, u32, u32, u32), dst: &mut [u8]) {
    let row = w as usize * 3;
    for (r, dst_row) in dst.chunks_exact_mut(row).take(h as usize).enumerate() {
        let s = ((y as usize + r) * src_w as usize + x as usize) * 3;
        dst_row.copy_from_slice(&src[s..s + row]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_that_cannot_be_allocated_is_an_error_not_an_abort() {
        // 2^31 × 2^31 × 3 bytes is past what any allocation may be: `resize` panicked
        // ("capacity overflow"), as it aborts when memory is short.
        let side = 1u32 << 31;
        let mut r = CropResizer::new(3);
        let e = r
            .apply(&[0; 3], side, side, (0, 0, side, side))
            .unwrap_err();
        assert!(matches!(e, ResizeError::Memory(_)), "{e:?}");
        // No allocation could hold it: the record's geometry is absurd, a bad record.
        let e = e.for_record(7);
        assert!(
            matches!(e, LoaderError::UnusableRecord { index: 7, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("cannot be allocated"), "{e}");
    }

    #[test]
    fn identity_window_is_an_exact_copy() {
        let (w, h) = (7u32, 5u32);
        let src: Vec<u8> = (0..w * h * 3).map(|i| i as u8).collect();
        let mut r = CropResizer::new(3);
        let out = r.apply(&src, w, h, (2, 1, 3, 3)).unwrap().to_vec();
        for row in 0..3usize {
            for col in 0..3usize {
                for c in 0..3usize {
                    let s = ((1 + row) * w as usize + 2 + col) * 3 + c;
                    assert_eq!(out[(row * 3 + col) * 3 + c], src[s]);
                }
            }
        }
    }

    #[test]
    fn uniform_color_survives_resizing_and_crops_select_regions() {
        // Left half red, right half blue, 64×32; crop the left half → all red.
        let (w, h) = (64u32, 32u32);
        let mut src = vec![0u8; (w * h * 3) as usize];
        for yy in 0..h {
            for xx in 0..w {
                let i = ((yy * w + xx) * 3) as usize;
                if xx < 32 {
                    src[i] = 200;
                } else {
                    src[i + 2] = 100;
                }
            }
        }
        let mut r = CropResizer::new(16);
        let out = r.apply(&src, w, h, (0, 0, 32, 32)).unwrap();
        assert!(
            out.chunks(3).all(|p| p == [200, 0, 0]),
            "left crop not pure red"
        );
        let out = r.apply(&src, w, h, (32, 0, 32, 32)).unwrap();
        assert!(
            out.chunks(3).all(|p| p == [0, 0, 100]),
            "right crop not pure blue"
        );
        assert!(r.apply(&src, w, h, (40, 0, 32, 32)).is_err());
    }
}
