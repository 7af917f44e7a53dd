//! Small images in every format besides JPEG that the converter reads (PNG, GIF, BMP, TIFF,
//! WebP, PPM/PGM/PAM), each in the colour types and variants its encoder writes: the seeds
//! that the damaged-image test (`formats/tests/image_damage.rs`) mutates and the `images`
//! fuzz target starts from. Made by the `image` crate's encoders rather than carried: they
//! are a few hundred bytes each, and made the same on every run. And the pieces of a PNG
//! that no encoder writes (a header claiming more pixels than it holds, metadata that
//! inflates a thousandfold), for the tests that need such files.

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

/// The CRC-32 of a PNG chunk (ISO-HDLC, over its type and data), bitwise: tests make
/// only a few thousand short chunks.
///
/// ```
/// assert_eq!(stoker_testdata::png_crc(b"IEND"), 0xAE42_6082);
/// ```
pub fn png_crc(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// A PNG file of `chunks` (type and data, each given its length and CRC), between the
/// signature and an `IEND`.
///
/// ```
/// let ihdr = [0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0]; // 1×1, 8-bit grey
/// let idat = stoker_testdata::zeros_zlib(2); // filter byte, one black pixel
/// let png = stoker_testdata::png_from_chunks(&[(b"IHDR", &ihdr), (b"IDAT", &idat)]);
/// assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.ends_with(&0xAE42_6082u32.to_be_bytes()));
/// ```
pub fn png_from_chunks(chunks: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    for (kind, data) in chunks.iter().copied().chain([(b"IEND", &[][..])]) {
        png.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = png.len();
        png.extend_from_slice(kind);
        png.extend_from_slice(data);
        let crc = png_crc(&png[start..]);
        png.extend_from_slice(&crc.to_be_bytes());
    }
    png
}

/// A zlib stream that inflates to `len` zero bytes in about `len / 160` bytes: a literal
/// zero, then copies of 258 bytes at distance 1 (13 bits each), in one block of fixed
/// Huffman codes, and the Adler-32 of the zeros.
///
/// ```
/// let z = stoker_testdata::zeros_zlib(1 << 20);
/// assert!(z.len() < 8_000);
/// ```
pub fn zeros_zlib(len: u64) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let (mut acc, mut bits) = (0u64, 0u32);
    // `count` bits of `v`, least significant first (Huffman codes are given reversed).
    let mut put = |out: &mut Vec<u8>, v: u32, count: u32| {
        acc |= u64::from(v) << bits;
        bits += count;
        while bits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    };
    let code = |v: u32, count: u32| v.reverse_bits() >> (32 - count);
    put(&mut out, 1, 1); // the last block
    put(&mut out, 1, 2); // fixed Huffman codes
    let mut left = len;
    while left > 0 {
        if left >= 259 && left != len {
            // Length 258 (symbol 285, 8 bits 11000101), distance 1 (code 0, 5 bits).
            put(&mut out, code(0b1100_0101, 8), 8);
            put(&mut out, 0, 5);
            left -= 258;
        } else {
            // Literal 0 (8 bits 00110000).
            put(&mut out, code(0b0011_0000, 8), 8);
            left -= 1;
        }
    }
    put(&mut out, 0, 7); // end of block (symbol 256)
    put(&mut out, 0, 7); // flushes the last partial byte
                         // Adler-32 of `len` zeros, big-endian.
    let adler = ((len % 65521) << 16) | 1;
    out.extend_from_slice(&(adler as u32).to_be_bytes());
    out
}
