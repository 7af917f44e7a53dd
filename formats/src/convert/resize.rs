//! Resizing pixels to a raw record's size (`--size`), with fast_image_resize's bilinear
//! filter, through intermediate images no larger than the two images themselves.

use fast_image_resize::images::{TypedImage, TypedImageRef};
use fast_image_resize::pixels::U8x3;
use fast_image_resize::{FilterType, ImageView, ResizeAlg, ResizeOptions, Resizer};

use super::options::ResizeMode;

/// The source window a resize reads: `(left, top, width, height)`, fractional.
type Window = (f64, f64, f64, f64);

/// How a resize goes through fast_image_resize.
#[derive(Debug, PartialEq)]
enum Plan {
    /// One call: for u8 pixels the library runs the vertical pass first, into an image of
    /// the window's width and the target's height.
    Together,
    /// From a wide source to a tall target that image would outgrow both (65500×8
    /// stretched to 1×65500: 65500 × 65500 pixels), so the horizontal pass goes first, as
    /// a resize of its own, into an image of the target's width and the source's height
    /// (the vertical filter reads rows beyond the window's too); then the vertical pass.
    /// That image is smaller than the target, which is taller than the source here.
    HorizontalFirst,
}

/// `src` (`sw × sh` RGB pixels, row-major) resized to exactly `w × h`: `Stretch` scales
/// each axis; `ShorterSide` scales so the image covers `w × h` and crops the center.
pub(super) fn resize_rgb(
    src: &[u8],
    (sw, sh): (u32, u32),
    (w, h): (u32, u32),
    mode: ResizeMode,
) -> Result<Vec<u8>, String> {
    let window = window((sw, sh), (w, h), mode);
    let src_img = TypedImageRef::<U8x3>::from_buffer(sw, sh, src).map_err(failed)?;
    let mut out = vec![0; w as usize * h as usize * 3];
    match plan((sw, sh), (w, h), window) {
        Plan::Together => resize(&src_img, &mut out, (w, h), window)?,
        Plan::HorizontalFirst => horizontal_first(&src_img, &mut out, (w, h), window)?,
    }
    Ok(out)
}

/// The window of a `sw × sh` source that a `w × h` resize in `mode` reads: all of it, or
/// for `ShorterSide` the largest centered window with the target's aspect ratio.
fn window((sw, sh): (u32, u32), (w, h): (u32, u32), mode: ResizeMode) -> Window {
    let (sw, sh) = (f64::from(sw), f64::from(sh));
    if mode != ResizeMode::ShorterSide {
        return (0.0, 0.0, sw, sh);
    }
    let target = f64::from(w) / f64::from(h);
    let (cw, ch) = if sw / sh > target {
        (sh * target, sh)
    } else {
        (sw, sw / target)
    };
    ((sw - cw) / 2.0, (sh - ch) / 2.0, cw, ch)
}

/// [`Plan::Together`] unless its intermediate image would hold more pixels than the
/// source and the target together.
fn plan((sw, sh): (u32, u32), (w, h): (u32, u32), (_, _, width, _): Window) -> Plan {
    let together = width.ceil() * f64::from(h);
    let images = f64::from(sw) * f64::from(sh) + f64::from(w) * f64::from(h);
    if together <= images {
        Plan::Together
    } else {
        Plan::HorizontalFirst
    }
}

/// [`Plan::HorizontalFirst`]: every source row resized across to `w`, then the window's
/// rows down to `h`.
fn horizontal_first(
    src: &TypedImageRef<'_, U8x3>,
    out: &mut [u8],
    (w, h): (u32, u32),
    (left, top, width, height): Window,
) -> Result<(), String> {
    let rows = src.height();
    let mut mid = vec![0; w as usize * rows as usize * 3];
    resize(
        src,
        &mut mid,
        (w, rows),
        (left, 0.0, width, f64::from(rows)),
    )?;
    let mid_img = TypedImageRef::<U8x3>::from_buffer(w, rows, &mid).map_err(failed)?;
    resize(&mid_img, out, (w, h), (0.0, top, f64::from(w), height))
}

/// One fast_image_resize call: the `window` of `src` into `out`, `w × h`.
fn resize(
    src: &TypedImageRef<'_, U8x3>,
    out: &mut [u8],
    (w, h): (u32, u32),
    (left, top, width, height): Window,
) -> Result<(), String> {
    // The typed views of RGB, not `Image` with its pixel type as a value: `Resizer::resize`
    // matches that value over 13 pixel types, which would compile the filters of all 13
    // into this crate for the one used.
    let mut dst = TypedImage::<U8x3>::from_buffer(w, h, out).map_err(failed)?;
    let options = ResizeOptions::new()
        .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear))
        .crop(left, top, width, height);
    Resizer::new()
        .resize_typed(src, &mut dst, &options)
        .map_err(failed)
}

/// A refusal of fast_image_resize (a buffer that does not fit its sides, a crop outside
/// the image), as a skip's reason gives it.
fn failed(e: impl std::fmt::Display) -> String {
    format!("resize: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A photograph of the test corpus, decoded: its width, height and RGB pixels.
    fn photo() -> (u32, u32, Vec<u8>) {
        let path = stoker_testdata::dir().join("imagefolder/caer/tent.jpg");
        let data = std::fs::read(path).unwrap();
        let dec = stoker_decode::CpuDecoder::new(stoker_decode::Limits::default());
        let (info, rgb) = dec.decode_to_vec(&data).unwrap();
        (info.width, info.height, rgb)
    }

    #[test]
    fn a_wide_source_to_a_tall_target_goes_horizontal_first_within_the_images_size() {
        let (src, dst) = ((65500, 8), (1, 65500));
        let p = plan(src, dst, window(src, dst, ResizeMode::Stretch));
        assert_eq!(p, Plan::HorizontalFirst);
        // Together, its intermediate image would have been 65500 × 65500 pixels (12.9 GB).
        let out = resize_rgb(&vec![77; 65500 * 8 * 3], src, dst, ResizeMode::Stretch).unwrap();
        assert_eq!(out.len(), 65500 * 3);
        assert!(out.iter().all(|&v| v == 77));
        // Ordinary resizes keep the library's own order (and its pixels).
        let ordinary = [
            ((4000, 3000), (224, 224)),
            ((500, 375), (256, 256)),
            ((8, 65500), (65500, 1)),
        ];
        for (s, d) in ordinary {
            for mode in [ResizeMode::Stretch, ResizeMode::ShorterSide] {
                assert_eq!(
                    plan(s, d, window(s, d, mode)),
                    Plan::Together,
                    "{s:?} {d:?}"
                );
            }
        }
    }

    #[test]
    fn horizontal_first_gives_the_pixels_of_one_pass_but_for_rounding() {
        let (sw, sh, src) = photo();
        let src_img = TypedImageRef::<U8x3>::from_buffer(sw, sh, &src).unwrap();
        for (w, h) in [(37, 91), (120, 20), (sw, 57), (224, 224)] {
            for mode in [ResizeMode::Stretch, ResizeMode::ShorterSide] {
                let win = window((sw, sh), (w, h), mode);
                let mut one = vec![0; (w * h * 3) as usize];
                resize(&src_img, &mut one, (w, h), win).unwrap();
                let mut two = vec![0; (w * h * 3) as usize];
                horizontal_first(&src_img, &mut two, (w, h), win).unwrap();
                // The passes round to u8 between them, in either order.
                let diff = one.iter().zip(&two).map(|(a, b)| u64::from(a.abs_diff(*b)));
                let (worst, total) = diff.fold((0, 0), |(m, t), d| (m.max(d), t + d));
                let mean = total as f64 / one.len() as f64;
                assert!(
                    worst <= 2 && mean < 0.25,
                    "{w}x{h} {mode:?}: max {worst}, mean {mean}"
                );
            }
        }
    }
}
