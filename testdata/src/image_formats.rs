//! Small images in every format besides JPEG that the converter reads (PNG, GIF, BMP, TIFF,
//! WebP, PPM/PGM/PAM), each in the colour types and variants its encoder writes: the seeds
//! that the damaged-image test (`formats/tests/image_damage.rs`) mutates and the `images`
//! fuzz target starts from. Made by the `image` crate's encoders rather than carried: they
//! are a few hundred bytes each, and made the same on every run.

use std::io::Cursor;

use image::codecs::gif::GifEncoder;
use image::codecs::pnm::{PnmEncoder, PnmSubtype, SampleEncoding};
use image::{
    DynamicImage, ExtendedColorType, Frame, ImageBuffer, ImageEncoder, ImageFormat, Luma, LumaA,
    Rgb, Rgba, RgbaImage,
};

/// Width and height of every sample: odd, and not a multiple of any block size.
const WIDTH: u32 = 23;
const HEIGHT: u32 = 17;

/// Channel value `c` of pixel (`x`, `y`): a gradient with a little pseudo-random texture,
/// so that no encoder writes the image as one run.
fn value(x: u32, y: u32, c: u32) -> u8 {
    let h = (x.wrapping_mul(0x9E37) ^ y.wrapping_mul(0x85EB) ^ c.wrapping_mul(0xC2B2)) >> 5;
    (x * 11 + y * 7 + c * 60 + (h & 15)) as u8
}

fn rgb8() -> DynamicImage {
    DynamicImage::ImageRgb8(ImageBuffer::from_fn(WIDTH, HEIGHT, |x, y| {
        Rgb([value(x, y, 0), value(x, y, 1), value(x, y, 2)])
    }))
}

fn rgba8() -> RgbaImage {
    ImageBuffer::from_fn(WIDTH, HEIGHT, |x, y| {
        Rgba([
            value(x, y, 0),
            value(x, y, 1),
            value(x, y, 2),
            value(x, y, 3),
        ])
    })
}

fn luma8() -> DynamicImage {
    DynamicImage::ImageLuma8(ImageBuffer::from_fn(WIDTH, HEIGHT, |x, y| {
        Luma([value(x, y, 0)])
    }))
}

fn luma16() -> DynamicImage {
    DynamicImage::ImageLuma16(ImageBuffer::from_fn(WIDTH, HEIGHT, |x, y| {
        Luma([u16::from(value(x, y, 0)) * 256 + x as u16])
    }))
}

fn luma_alpha8() -> DynamicImage {
    DynamicImage::ImageLumaA8(ImageBuffer::from_fn(WIDTH, HEIGHT, |x, y| {
        LumaA([value(x, y, 0), value(x, y, 3)])
    }))
}

fn rgb16() -> DynamicImage {
    DynamicImage::ImageRgb16(ImageBuffer::from_fn(WIDTH, HEIGHT, |x, y| {
        Rgb([0, 1, 2].map(|c| u16::from(value(x, y, c)) * 257))
    }))
}

fn encoded(image: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image
        .write_to(&mut out, format)
        .unwrap_or_else(|e| panic!("encoding a {format:?} sample: {e}"));
    out.into_inner()
}

fn pnm(image: &DynamicImage, subtype: PnmSubtype, color: ExtendedColorType) -> Vec<u8> {
    let mut out = Vec::new();
    PnmEncoder::new(&mut out)
        .with_subtype(subtype)
        .write_image(image.as_bytes(), WIDTH, HEIGHT, color)
        .unwrap_or_else(|e| panic!("encoding a {subtype:?} sample: {e}"));
    out
}

/// Two frames, the second shifted: GIF's frame and disposal records are read too.
fn animated_gif() -> Vec<u8> {
    let first = rgba8();
    let second = ImageBuffer::from_fn(WIDTH, HEIGHT, |x, y| *first.get_pixel((x + 3) % WIDTH, y));
    let mut out = Vec::new();
    GifEncoder::new(&mut out)
        .encode_frames([Frame::new(first), Frame::new(second)])
        .expect("encoding an animated GIF sample");
    out
}

/// The samples, each with a name that says its format and variant (`png-rgba8`, ...).
///
/// # Panics
///
/// When an encoder fails on them, which would be a change of the `image` crate.
///
/// ```
/// let samples = stoker_testdata::other_format_samples();
/// assert!(samples.iter().any(|(name, bytes)| name.starts_with("png") && bytes.starts_with(b"\x89PNG")));
/// ```
pub fn other_format_samples() -> Vec<(String, Vec<u8>)> {
    let rgba = DynamicImage::ImageRgba8(rgba8());
    let binary = SampleEncoding::Binary;
    let mut samples = vec![
        ("png-rgb8", encoded(&rgb8(), ImageFormat::Png)),
        ("png-rgba8", encoded(&rgba, ImageFormat::Png)),
        ("png-gray16", encoded(&luma16(), ImageFormat::Png)),
        ("png-gray-alpha8", encoded(&luma_alpha8(), ImageFormat::Png)),
        ("png-rgb16", encoded(&rgb16(), ImageFormat::Png)),
        ("gif", encoded(&rgb8(), ImageFormat::Gif)),
        ("gif-animated", animated_gif()),
        ("bmp-rgb8", encoded(&rgb8(), ImageFormat::Bmp)),
        ("bmp-rgba8", encoded(&rgba, ImageFormat::Bmp)),
        ("bmp-gray8", encoded(&luma8(), ImageFormat::Bmp)),
        ("tiff-rgb8", encoded(&rgb8(), ImageFormat::Tiff)),
        ("tiff-rgba8", encoded(&rgba, ImageFormat::Tiff)),
        ("tiff-gray16", encoded(&luma16(), ImageFormat::Tiff)),
        ("webp-rgb8", encoded(&rgb8(), ImageFormat::WebP)),
        ("webp-rgba8", encoded(&rgba, ImageFormat::WebP)),
    ];
    samples.extend([
        (
            "ppm-binary",
            pnm(&rgb8(), PnmSubtype::Pixmap(binary), ExtendedColorType::Rgb8),
        ),
        (
            "ppm-ascii",
            pnm(
                &rgb8(),
                PnmSubtype::Pixmap(SampleEncoding::Ascii),
                ExtendedColorType::Rgb8,
            ),
        ),
        (
            "pgm-binary",
            pnm(&luma8(), PnmSubtype::Graymap(binary), ExtendedColorType::L8),
        ),
        (
            "pam-rgba8",
            pnm(&rgba, PnmSubtype::ArbitraryMap, ExtendedColorType::Rgba8),
        ),
    ]);
    samples
        .into_iter()
        .map(|(name, bytes)| (name.to_owned(), bytes))
        .collect()
}
