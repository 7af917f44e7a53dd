//! The mixed set: what a real training set looks like to a decoder, derived from the
//! corpus photographs like the bench set.
//!
//! The bench set is 512 files of one size and one encoding, every one of them on the
//! GPU's hardware JPEG engines. ImageNet and web-scraped sets are not like that: sizes
//! vary (most near 500×375, portrait as well as landscape, a tail of large files), some
//! files are progressive, a few are grayscale or CMYK. Each of those can take a slower
//! route than the engines, and a few slow images can set the pace of a whole batch.
//!
//! [`make_mixed_set`] draws, per file and from a fixed seed: a photograph, an orientation
//! and aspect ratio, a size, a crop, a quality (75–95), a chroma subsampling (4:2:0
//! mostly, some 4:4:4 and 4:2:2), and then an encoding from the [`Mix`]. Every draw is
//! made for every file whatever the mix, so the set made with [`Mix::BASELINE`] has the
//! same files at the same sizes and qualities, all baseline RGB: the "engines alone, same
//! sizes" twin that a mixed-data figure is compared with.
//!
//! The encoder's progressive mode uses spectral-selection scans (jpeg-encoder), not
//! libjpeg's default script with successive approximation; for a decoder the file is
//! progressive all the same (SOF2, several scans).

use std::path::Path;

use crate::bench_set::{crop_box, io, load_photos, resize, write_atomically, Photo, Rng};
use crate::BenchSetError;

/// Files in the set made by `make-mixed-set` unless told otherwise.
pub const MIXED_FILES: usize = 512;
/// Bumped whenever the recipe changes.
pub const MIXED_VERSION: u32 = 1;

const SEED: u64 = 0x5EED_0B5E_7C40_0002;
/// (short side, weight): ImageNet's training images are mostly 500×375 or 375×500.
const SHORT_SIDES: [(usize, u32); 8] = [
    (240, 2),
    (281, 3),
    (333, 14),
    (375, 50),
    (400, 8),
    (427, 6),
    (480, 8),
    (500, 9),
];
/// (long / short, weight).
const ASPECTS: [(f64, u32); 5] = [
    (4.0 / 3.0, 60),
    (3.0 / 2.0, 20),
    (1.0, 8),
    (16.0 / 9.0, 7),
    (5.0 / 4.0, 5),
];

/// Which encodings a mixed set holds, as fractions of its files; the rest are baseline
/// RGB.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    /// Progressive (SOF2) RGB files.
    pub progressive: f64,
    /// Baseline grayscale files.
    pub gray: f64,
    /// Baseline CMYK files (Adobe).
    pub cmyk: f64,
}

impl Mix {
    /// A web-scraped-like mix: a quarter progressive, 3 % grayscale, 1 % CMYK.
    pub const REALISTIC: Mix = Mix {
        progressive: 0.25,
        gray: 0.03,
        cmyk: 0.01,
    };
    /// Every file baseline RGB: the twin of a mixed set, same sizes and qualities.
    pub const BASELINE: Mix = Mix {
        progressive: 0.0,
        gray: 0.0,
        cmyk: 0.0,
    };
}

/// How one file of the set is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Baseline (SOF0) RGB.
    Baseline,
    /// Progressive (SOF2) RGB.
    Progressive,
    /// Baseline grayscale.
    Gray,
    /// Baseline CMYK.
    Cmyk,
}

/// Everything drawn for one file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilePlan {
    /// Index of the photograph (sorted order).
    pub photo: usize,
    pub width: usize,
    pub height: usize,
    /// Fraction of the photograph's area cropped, and where.
    pub area: f64,
    pub fx: f64,
    pub fy: f64,
    pub quality: u8,
    pub sampling: jpeg_encoder::SamplingFactor,
    pub kind: Kind,
}

fn weighted<T: Copy>(rng: &mut Rng, table: &[(T, u32)]) -> T {
    let total: u32 = table.iter().map(|&(_, w)| w).sum();
    let mut pick = (rng.next() % u64::from(total)) as u32;
    for &(v, w) in table {
        if pick < w {
            return v;
        }
        pick -= w;
    }
    table[table.len() - 1].0
}

/// The plan of file `index` of a set drawn from `photos` photographs. Each file has its
/// own generator (seeded by its index), so files can be made in any order or in parallel.
pub fn plan_file(index: usize, photos: usize, mix: Mix) -> FilePlan {
    let mut rng = Rng(SEED ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let photo = (rng.next() % photos.max(1) as u64) as usize;
    let portrait = rng.unit() < 0.25;
    let aspect = weighted(&mut rng, &ASPECTS);
    // A tail of large files (phone and camera photos kept at full size).
    let large = rng.unit() < 0.05;
    let mut short = weighted(&mut rng, &SHORT_SIDES);
    let big = 600 + (rng.next() % 601) as usize;
    if large {
        short = big;
    }
    let long = (short as f64 * aspect).round() as usize;
    let (width, height) = if portrait {
        (short, long)
    } else {
        (long, short)
    };
    let area = 0.3 + 0.7 * rng.unit();
    let (fx, fy) = (rng.unit(), rng.unit());
    let quality = 75 + (rng.next() % 21) as u8;
    let sampling = match rng.next() % 20 {
        0..=16 => jpeg_encoder::SamplingFactor::R_4_2_0,
        17 | 18 => jpeg_encoder::SamplingFactor::R_4_4_4,
        _ => jpeg_encoder::SamplingFactor::R_4_2_2,
    };
    let u = rng.unit();
    let kind = if u < mix.progressive {
        Kind::Progressive
    } else if u < mix.progressive + mix.gray {
        Kind::Gray
    } else if u < mix.progressive + mix.gray + mix.cmyk {
        Kind::Cmyk
    } else {
        Kind::Baseline
    };
    FilePlan {
        photo,
        width,
        height,
        area,
        fx,
        fy,
        quality,
        sampling,
        kind,
    }
}

/// Encodes one planned file.
fn encode(plan: &FilePlan, photo: &Photo, file: usize) -> Result<Vec<u8>, BenchSetError> {
    let aspect = plan.width as f64 / plan.height as f64;
    let rgb = resize(
        photo,
        crop_box(photo, plan.area, aspect, plan.fx, plan.fy),
        plan.width,
        plan.height,
    );
    let (w, h) = (plan.width as u16, plan.height as u16);
    let mut jpeg = Vec::with_capacity(plan.width * plan.height / 4);
    let mut enc = jpeg_encoder::Encoder::new(&mut jpeg, plan.quality);
    enc.set_sampling_factor(plan.sampling);
    let result = match plan.kind {
        Kind::Baseline => enc.encode(&rgb, w, h, jpeg_encoder::ColorType::Rgb),
        Kind::Progressive => {
            enc.set_progressive(true);
            enc.encode(&rgb, w, h, jpeg_encoder::ColorType::Rgb)
        }
        Kind::Gray => {
            // Rec. 601 luma, as a grayscale camera or converter would write it.
            let luma: Vec<u8> = rgb
                .chunks_exact(3)
                .map(|p| {
                    let y =
                        0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2]);
                    y.round().clamp(0.0, 255.0) as u8
                })
                .collect();
            enc.encode(&luma, w, h, jpeg_encoder::ColorType::Luma)
        }
        Kind::Cmyk => {
            // The naive separation (no under-colour removal): C = 255 - R etc., K = 0.
            let cmyk: Vec<u8> = rgb
                .chunks_exact(3)
                .flat_map(|p| [255 - p[0], 255 - p[1], 255 - p[2], 0])
                .collect();
            enc.encode(&cmyk, w, h, jpeg_encoder::ColorType::Cmyk)
        }
    };
    result.map_err(|e| BenchSetError::Encode {
        file,
        reason: e.to_string(),
    })?;
    Ok(jpeg)
}

/// Makes a mixed set of `count` files (`00000.jpg` …) from the photographs under
/// `photos` (an ImageFolder tree) in `out`, atomically like the bench set; the files are
/// encoded on every core and are the same on every run. Returns the number of files
/// written (0 when `out` existed).
///
/// # Errors
///
/// When the photographs cannot be read or none decodes, or the set cannot be written.
pub fn make_mixed_set(
    photos: &Path,
    out: &Path,
    count: usize,
    mix: Mix,
) -> Result<usize, BenchSetError> {
    if out.is_dir() {
        return Ok(0);
    }
    let decoded = load_photos(photos)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    write_atomically(out, count, |tmp| {
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let decoded = &decoded;
                    s.spawn(move || -> Result<(), BenchSetError> {
                        for file in (t..count).step_by(threads) {
                            let plan = plan_file(file, decoded.len(), mix);
                            let jpeg = encode(&plan, &decoded[plan.photo], file)?;
                            let path = tmp.join(format!("{file:05}.jpg"));
                            std::fs::write(&path, &jpeg).map_err(io(&path))?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for w in workers {
                match w.join() {
                    Ok(result) => result?,
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(bytes: &[u8]) -> jpeg_decoder::ImageInfo {
        let mut dec = jpeg_decoder::Decoder::new(bytes);
        dec.read_info().unwrap();
        dec.info().unwrap()
    }

    #[test]
    fn a_mixed_set_and_its_baseline_twin_have_the_same_sizes_and_the_planned_encodings() {
        let photos = crate::dir().join("imagefolder");
        let root = std::env::temp_dir().join(format!("stoker-mixed-set-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let count = 96;
        let (mixed, twin) = (root.join("mixed"), root.join("baseline"));
        assert_eq!(
            make_mixed_set(&photos, &mixed, count, Mix::REALISTIC).unwrap(),
            count
        );
        assert_eq!(
            make_mixed_set(&photos, &twin, count, Mix::BASELINE).unwrap(),
            count
        );
        assert_eq!(
            make_mixed_set(&photos, &mixed, count, Mix::REALISTIC).unwrap(),
            0,
            "a finished set is reused"
        );
        let n_photos = load_photos(&photos).unwrap().len();
        let mut kinds = std::collections::HashMap::new();
        let mut sizes = std::collections::HashSet::new();
        for file in 0..count {
            let name = format!("{file:05}.jpg");
            let m = std::fs::read(mixed.join(&name)).unwrap();
            let b = std::fs::read(twin.join(&name)).unwrap();
            let (mi, bi) = (info(&m), info(&b));
            let plan = plan_file(file, n_photos, Mix::REALISTIC);
            assert_eq!((mi.width, mi.height), (bi.width, bi.height), "{name}");
            assert_eq!(
                (usize::from(mi.width), usize::from(mi.height)),
                (plan.width, plan.height),
                "{name}"
            );
            assert_eq!(
                bi.coding_process,
                jpeg_decoder::CodingProcess::DctSequential
            );
            assert_eq!(bi.pixel_format, jpeg_decoder::PixelFormat::RGB24, "{name}");
            let (process, format) = match plan.kind {
                Kind::Progressive => (
                    jpeg_decoder::CodingProcess::DctProgressive,
                    jpeg_decoder::PixelFormat::RGB24,
                ),
                Kind::Gray => (
                    jpeg_decoder::CodingProcess::DctSequential,
                    jpeg_decoder::PixelFormat::L8,
                ),
                Kind::Cmyk => (
                    jpeg_decoder::CodingProcess::DctSequential,
                    jpeg_decoder::PixelFormat::CMYK32,
                ),
                Kind::Baseline => (
                    jpeg_decoder::CodingProcess::DctSequential,
                    jpeg_decoder::PixelFormat::RGB24,
                ),
            };
            assert_eq!(
                (mi.coding_process, mi.pixel_format),
                (process, format),
                "{name}"
            );
            // Every file decodes whole, not just its header.
            jpeg_decoder::Decoder::new(&m[..]).decode().unwrap();
            *kinds.entry(format!("{:?}", plan.kind)).or_insert(0) += 1;
            sizes.insert((plan.width, plan.height));
        }
        let progressive = kinds.get("Progressive").copied().unwrap_or(0);
        assert!(
            (12..=40).contains(&progressive),
            "about a quarter of {count} files progressive: {kinds:?}"
        );
        assert!(sizes.len() >= 8, "sizes vary: {sizes:?}");
        // Parallel encoding gives the same bytes as another run.
        let again = root.join("again");
        make_mixed_set(&photos, &again, count, Mix::REALISTIC).unwrap();
        for file in (0..count).step_by(7) {
            let name = format!("{file:05}.jpg");
            assert_eq!(
                std::fs::read(mixed.join(&name)).unwrap(),
                std::fs::read(again.join(&name)).unwrap(),
                "{name}"
            );
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_realistic_mix_over_the_full_set_is_near_its_fractions() {
        let mut counts = [0usize; 4];
        for file in 0..MIXED_FILES {
            let k = plan_file(file, 100, Mix::REALISTIC).kind;
            counts[k as usize] += 1;
        }
        let frac = |k: Kind| counts[k as usize] as f64 / MIXED_FILES as f64;
        assert!(
            (0.20..0.30).contains(&frac(Kind::Progressive)),
            "{counts:?}"
        );
        assert!((0.01..0.06).contains(&frac(Kind::Gray)), "{counts:?}");
        assert!(frac(Kind::Cmyk) > 0.0, "{counts:?}");
        let large = (0..MIXED_FILES)
            .filter(|&f| {
                let p = plan_file(f, 100, Mix::REALISTIC);
                p.width.min(p.height) >= 600
            })
            .count();
        assert!((5..60).contains(&large), "a tail of large files: {large}");
    }
}
