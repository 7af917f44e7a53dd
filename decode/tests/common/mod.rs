//! Shared helpers for the integration tests: the test corpus and bench set, the
//! conformance table, reference PNG loading and PSNR.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod partial;

/// The test corpus: `$STOKER_DATA` when set (the GPU machine's copy), else `<repo>/testdata`.
pub fn data_dir() -> PathBuf {
    stoker_testdata::dir()
}

/// The bench set (512 JPEGs of 500×375, derived from the corpus photographs).
pub fn bench_dir() -> PathBuf {
    stoker_testdata::bench_dir()
}

/// The measurement tests' setting `name` (`STOKER_BENCH_SECONDS`, ...), else `default`
/// (also when it does not parse).
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The files the measurement tests decode, read: the JPEGs of `STOKER_BENCH_DIR`, else
/// of the bench set.
pub fn measured_files() -> Vec<Vec<u8>> {
    let dir = std::env::var("STOKER_BENCH_DIR").map_or_else(|_| bench_dir(), PathBuf::from);
    jpegs_in(&dir)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

/// [`measured_files`] and the largest RGB output among them (the size of an output
/// buffer that holds any of them).
pub fn measured_files_and_largest() -> (Vec<Vec<u8>>, usize) {
    let files = measured_files();
    let max = (files.iter())
        .map(|f| {
            stoker_decode::probe(f, &stoker_decode::Limits::default())
                .unwrap()
                .rgb_len()
        })
        .max()
        .unwrap();
    (files, max)
}

/// A measurement row in the device-check table format (`ROW\tname\tvalue\tunit\tnote`),
/// after a newline: the test harness prints "test name ... " without one.
pub fn row(name: &str, value: f64, unit: &str, note: &str) {
    println!("\nROW\t{name}\t{value:.1}\t{unit}\t{note}");
}

/// The `.jpg`/`.jpeg` files of `dir`, sorted by name.
pub fn jpegs_in(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jpg" || e == "jpeg"))
        .collect();
    files.sort();
    files
}

/// The JPEG files in `dir` and in its sub-folders one level down (an
/// ImageFolder tree: one folder per class), sorted.
#[allow(dead_code)] // not every test file that includes this module uses it
pub fn jpegs_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = jpegs_in(dir);
    let mut folders: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    for folder in folders {
        files.extend(jpegs_in(&folder));
    }
    files
}

/// One row of `conformance/expectations.tsv`.
#[derive(Debug, Clone)]
pub struct Row {
    pub file: String,
    pub expect: String,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub reference: Option<String>,
}

/// Every row of the conformance table.
pub fn conformance_rows() -> Vec<Row> {
    let path = data_dir().join("conformance/expectations.tsv");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (f, e, w, h, r) = (
        col("file"),
        col("expect"),
        col("width"),
        col("height"),
        col("ref"),
    );
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            let get = |i: usize| c.get(i).copied().unwrap_or("");
            Row {
                file: get(f).to_string(),
                expect: get(e).to_string(),
                width: get(w).parse().ok(),
                height: get(h).parse().ok(),
                reference: Some(get(r).to_string()).filter(|s| !s.is_empty()),
            }
        })
        .collect()
}

/// Decodes a reference PNG to RGB8: (width, height, pixels).
pub fn load_png_rgb(path: &std::path::Path) -> (u32, u32, Vec<u8>) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut dec = png::Decoder::new(std::io::BufReader::new(file));
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = dec.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("png size")];
    let frame = reader.next_frame(&mut buf).expect("png frame");
    buf.truncate(frame.buffer_size());
    let px = (frame.width * frame.height) as usize;
    let rgb = match frame.color_type {
        png::ColorType::Rgb => buf,
        png::ColorType::Rgba => buf
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        png::ColorType::Grayscale => buf.iter().flat_map(|&g| [g, g, g]).collect(),
        png::ColorType::GrayscaleAlpha => buf
            .chunks_exact(2)
            .flat_map(|p| [p[0], p[0], p[0]])
            .collect(),
        other => panic!("unexpected png color type {other:?}"),
    };
    assert_eq!(rgb.len(), px * 3);
    (frame.width, frame.height, rgb)
}

/// Peak signal-to-noise ratio of two equal-length u8 buffers, in dB (inf when equal).
pub fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let se: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = f64::from(x) - f64::from(y);
            d * d
        })
        .sum();
    if se == 0.0 {
        return f64::INFINITY;
    }
    let mse = se / a.len() as f64;
    10.0 * (255.0f64 * 255.0 / mse).log10()
}

/// Decodes `data` whole and the two ways the loaders do (first rows, a region), and checks
/// what must hold for any input: no panic escapes, every error is the input's fault and
/// says something, a success has its full size within the pixel limit and the size the
/// header gives. Returns the whole decode's outcome; `what` names the input in failures.
/// The fuzz property of `fuzz/fuzz_targets/decode.rs`, for the tests' own inputs.
pub fn check_decodes(
    dec: &stoker_decode::CpuDecoder,
    data: &[u8],
    what: &str,
) -> Result<stoker_decode::ImageInfo, stoker_decode::DecodeError> {
    let probed = stoker_decode::probe(data, dec.limits());
    let decoded = dec.decode_to_vec(data);
    if let Ok((info, rgb)) = &decoded {
        assert_eq!(rgb.len(), info.rgb_len(), "{what}");
        assert!(info.pixels() <= dec.limits().max_pixels, "{what}");
        let p = probed.as_ref().expect("decode succeeded but probe failed");
        assert_eq!((p.width, p.height), (info.width, info.height), "{what}");
    }
    if let Err(e) = &decoded {
        // Display must work and say something.
        assert!(!e.to_string().is_empty(), "{what}");
        assert!(
            e.is_bad_input(),
            "{what}: machinery error on bad input: {e}"
        );
    }
    if let Ok(p) = &probed {
        for r in partial::partial_decodes(dec, data, p) {
            match r {
                Ok((info, _)) => {
                    assert_eq!((info.width, info.height), (p.width, p.height), "{what}")
                }
                Err(e) => assert!(
                    e.is_bad_input(),
                    "{what}: machinery error on bad input: {e}"
                ),
            }
        }
    }
    decoded.map(|(info, _)| info)
}
