//! The bench set: ImageNet-like crops of the corpus photographs, derived rather than
//! checked in.
//!
//! Each file is a random crop of one photograph (a quarter to all of its area, aspect
//! 4:3), resized to 500×375 and encoded at quality 90, baseline, 4:2:0: the size and
//! encoding of a typical ImageNet training image. The crops come from a fixed seed and
//! the photographs in sorted order, so the set is the same on every run of one build on
//! one platform (decoder IDCTs may differ between CPU architectures).

use std::fmt;
use std::path::{Path, PathBuf};

/// Files in the set.
pub const BENCH_FILES: usize = 512;
/// Width of every file.
pub const BENCH_WIDTH: u16 = 500;
/// Height of every file.
pub const BENCH_HEIGHT: u16 = 375;
/// Bumped whenever the recipe changes, so a cached set from an older recipe is not used.
pub(crate) const VERSION: u32 = 1;

const QUALITY: u8 = 90;
const SEED: u64 = 0x5EED_0B5E_7C40_0001;

/// Why the bench set could not be made.
#[derive(Debug)]
pub enum BenchSetError {
    /// Reading the photographs or writing the set.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// No photograph under the source folder could be decoded.
    NoPhotos { dir: PathBuf },
    /// The encoder refused a crop.
    Encode { file: usize, reason: String },
}

impl fmt::Display for BenchSetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchSetError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            BenchSetError::NoPhotos { dir } => {
                write!(f, "no decodable JPEG photograph under {}", dir.display())
            }
            BenchSetError::Encode { file, reason } => write!(f, "encoding file {file}: {reason}"),
        }
    }
}

impl std::error::Error for BenchSetError {}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BenchSetError + '_ {
    move |source| BenchSetError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// An RGB8 photograph.
pub(crate) struct Photo {
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) rgb: Vec<u8>,
}

/// The JPEG files one folder level under `dir` (an ImageFolder tree), sorted.
pub(crate) fn photo_paths(dir: &Path) -> Result<Vec<PathBuf>, BenchSetError> {
    let mut paths = Vec::new();
    for class in std::fs::read_dir(dir).map_err(io(dir))? {
        let class = class.map_err(io(dir))?.path();
        if !class.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&class).map_err(io(&class))? {
            let file = file.map_err(io(&class))?.path();
            let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
            if ext.eq_ignore_ascii_case("jpg") || ext.eq_ignore_ascii_case("jpeg") {
                paths.push(file);
            }
        }
    }
    paths.sort();
    Ok(paths)
}

/// Decodes to RGB8; `None` for what is not an 8-bit RGB or grayscale photograph of at
/// least 64×48 (CMYK, 16-bit, damaged files and icons are left out, the same ones on
/// every run).
pub(crate) fn decode(bytes: &[u8]) -> Option<Photo> {
    let mut dec = jpeg_decoder::Decoder::new(bytes);
    let pixels = dec.decode().ok()?;
    let info = dec.info()?;
    let (width, height) = (usize::from(info.width), usize::from(info.height));
    if width < 64 || height < 48 {
        return None;
    }
    let rgb = match info.pixel_format {
        jpeg_decoder::PixelFormat::RGB24 => pixels,
        jpeg_decoder::PixelFormat::L8 => pixels.iter().flat_map(|&g| [g, g, g]).collect(),
        _ => return None,
    };
    Some(Photo { width, height, rgb })
}

/// xorshift64*: a fixed sequence from a fixed seed, nothing platform-dependent.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A crop of `area` (a fraction of the photograph's area, shrunk to fit) with width /
/// height = `aspect`, placed at `(fx, fy)` of the room left: (x, y, w, h).
pub(crate) fn crop_box(
    p: &Photo,
    area: f64,
    aspect: f64,
    fx: f64,
    fy: f64,
) -> (f64, f64, f64, f64) {
    let (pw, ph) = (p.width as f64, p.height as f64);
    let mut w = (area * pw * ph * aspect).sqrt();
    let mut h = w / aspect;
    let fit = (pw / w).min(ph / h).min(1.0);
    w *= fit;
    h *= fit;
    (fx * (pw - w), fy * (ph - h), w, h)
}

/// Resizes the crop to `ow × oh`: bilinear samples, averaged over a 2×2 grid per output
/// pixel when shrinking by more than half, so that large crops are not aliased.
pub(crate) fn resize(
    p: &Photo,
    (x0, y0, w, h): (f64, f64, f64, f64),
    ow: usize,
    oh: usize,
) -> Vec<u8> {
    let (sx, sy) = (w / ow as f64, h / oh as f64);
    let k = if sx.max(sy) > 1.5 { 2 } else { 1 };
    // Source column (left index, right index, weight of the right) for each sub-sample.
    let taps = |origin: f64, scale: f64, n: usize, limit: usize| -> Vec<(usize, usize, f64)> {
        (0..n * k)
            .map(|t| {
                let pos = origin + (t as f64 + 0.5) / k as f64 * scale - 0.5;
                let pos = pos.clamp(0.0, (limit - 1) as f64);
                let i = pos.floor() as usize;
                (i, (i + 1).min(limit - 1), pos - i as f64)
            })
            .collect()
    };
    let (xs, ys) = (taps(x0, sx, ow, p.width), taps(y0, sy, oh, p.height));
    let px = |x: usize, y: usize| &p.rgb[(y * p.width + x) * 3..][..3];
    let mut out = vec![0u8; ow * oh * 3];
    for oy in 0..oh {
        for ox in 0..ow {
            let mut sum = [0.0f64; 3];
            for &(yi, yj, fy) in &ys[oy * k..][..k] {
                for &(xi, xj, fx) in &xs[ox * k..][..k] {
                    let (a, b, c, d) = (px(xi, yi), px(xj, yi), px(xi, yj), px(xj, yj));
                    for ch in 0..3 {
                        let top = f64::from(a[ch]) * (1.0 - fx) + f64::from(b[ch]) * fx;
                        let bottom = f64::from(c[ch]) * (1.0 - fx) + f64::from(d[ch]) * fx;
                        sum[ch] += top * (1.0 - fy) + bottom * fy;
                    }
                }
            }
            for ch in 0..3 {
                let v = (sum[ch] / (k * k) as f64).round().clamp(0.0, 255.0);
                out[(oy * ow + ox) * 3 + ch] = v as u8;
            }
        }
    }
    out
}

/// Makes the bench set from the photographs under `photos` (an ImageFolder tree) in
/// `out`: `00000.jpg` … `00511.jpg` and nothing else (tests convert the folder as it is).
/// The files are written into a temporary sibling folder that is renamed to `out` when
/// complete, so `out` exists only as a whole set and two processes making it at once do
/// not mix their files. Returns the number of files written (0 when `out` existed).
///
/// # Errors
///
/// When the photographs cannot be read or none decodes, or the set cannot be written.
pub fn make_bench_set(photos: &Path, out: &Path) -> Result<usize, BenchSetError> {
    make_set(photos, out, BENCH_FILES)
}

/// [`make_bench_set`] for the first `count` files of the set.
fn make_set(photos: &Path, out: &Path, count: usize) -> Result<usize, BenchSetError> {
    if out.is_dir() {
        return Ok(0);
    }
    let decoded = load_photos(photos)?;
    write_atomically(out, count, |tmp| {
        let mut rng = Rng(SEED);
        for file in 0..count {
            let photo = &decoded[(rng.next() % decoded.len() as u64) as usize];
            let area = 0.25 + 0.75 * rng.unit();
            let (fx, fy) = (rng.unit(), rng.unit());
            let rgb = resize(
                photo,
                crop_box(photo, area, 4.0 / 3.0, fx, fy),
                usize::from(BENCH_WIDTH),
                usize::from(BENCH_HEIGHT),
            );
            let mut jpeg = Vec::with_capacity(64 << 10);
            let mut enc = jpeg_encoder::Encoder::new(&mut jpeg, QUALITY);
            enc.set_sampling_factor(jpeg_encoder::SamplingFactor::R_4_2_0);
            enc.encode(
                &rgb,
                BENCH_WIDTH,
                BENCH_HEIGHT,
                jpeg_encoder::ColorType::Rgb,
            )
            .map_err(|e| BenchSetError::Encode {
                file,
                reason: e.to_string(),
            })?;
            let path = tmp.join(format!("{file:05}.jpg"));
            std::fs::write(&path, &jpeg).map_err(io(&path))?;
        }
        Ok(())
    })
}

/// Every photograph under `photos` that [`decode`] keeps, in sorted order.
pub(crate) fn load_photos(photos: &Path) -> Result<Vec<Photo>, BenchSetError> {
    let mut decoded = Vec::new();
    for path in photo_paths(photos)? {
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        decoded.extend(decode(&bytes));
    }
    if decoded.is_empty() {
        return Err(BenchSetError::NoPhotos {
            dir: photos.to_path_buf(),
        });
    }
    Ok(decoded)
}

/// Runs `write` on a temporary sibling folder of `out` and renames it to `out` when it
/// succeeds, so `out` exists only as a whole set and two processes making it at once do
/// not mix their files. Returns `count` (0 when another process finished first).
pub(crate) fn write_atomically(
    out: &Path,
    count: usize,
    write: impl FnOnce(&Path) -> Result<(), BenchSetError>,
) -> Result<usize, BenchSetError> {
    let parent = out.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("set");
    let tmp = parent.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    if let Err(e) = write(&tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, out) {
        Ok(()) => Ok(count),
        // Another process finished first: its set is the same; keep it.
        Err(_) if out.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(0)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(BenchSetError::Io {
                path: out.to_path_buf(),
                source: e,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_is_complete_and_every_file_is_a_500x375_baseline_jpeg() {
        let dir = crate::bench_dir();
        let mut total = 0;
        for path in crate::bench_files(BENCH_FILES) {
            let bytes = std::fs::read(&path).unwrap();
            total += bytes.len();
            let mut dec = jpeg_decoder::Decoder::new(&bytes[..]);
            dec.read_info().unwrap();
            let info = dec.info().unwrap();
            assert_eq!(
                (info.width, info.height),
                (BENCH_WIDTH, BENCH_HEIGHT),
                "{}",
                path.display()
            );
            assert_eq!(
                info.coding_process,
                jpeg_decoder::CodingProcess::DctSequential
            );
        }
        let mean = total / BENCH_FILES;
        println!(
            "bench set: {BENCH_FILES} files, mean {mean} B, in {}",
            dir.display()
        );
        assert!(
            (20_000..120_000).contains(&mean),
            "mean file size {mean} B in {}",
            dir.display()
        );
    }

    #[test]
    fn a_second_make_of_the_same_set_gives_the_same_bytes() {
        let photos = crate::dir().join("imagefolder");
        let tmp = std::env::temp_dir().join(format!("stoker-bench-set-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        assert_eq!(make_bench_set(&photos, &tmp).unwrap(), BENCH_FILES);
        assert_eq!(
            make_bench_set(&photos, &tmp).unwrap(),
            0,
            "a finished set is reused"
        );
        for (i, cached) in crate::bench_files(BENCH_FILES)
            .iter()
            .enumerate()
            .step_by(37)
        {
            let again = std::fs::read(tmp.join(format!("{i:05}.jpg"))).unwrap();
            assert_eq!(std::fs::read(cached).unwrap(), again, "file {i}");
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
