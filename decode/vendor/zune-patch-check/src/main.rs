//! Differential check of stoker's zune-jpeg patch (`../zune-jpeg/STOKER-PATCH.md`).
//!
//! Every JPEG under the data folder, and mutants of each (bit flips, a random byte, a
//! truncation, an inserted marker; more mutants for progressive files), is decoded by
//! zune-jpeg 0.5.15 as published and by the patched copy, both with default options. The
//! two must agree exactly: the same pixels, or the same error. `decode/tests/zune_patch.rs`
//! covers valid files from digests; this covers the corrupt streams that reach the
//! patch's rare paths (a refinement band that ends before its zero, a marker in the middle
//! of a block), which valid files never do.
//!
//! Change 17 (libjpeg's upsampling at the right edge), which `CpuDecoder` asks for, is
//! off by default; each original file is decoded once more with it, and must give
//! upstream's pixels but in the last column and the last row (images 5 pixels wide or
//! more; narrower ones may change in every column).
//!
//! ```text
//! cargo run --release -p zune-patch-check -- [DATA_DIR [MUTANTS_BASELINE [MUTANTS_PROGRESSIVE]]]
//! ```
//!
//! Exit status 1 on any difference; the first differing inputs are written to
//! `target/zune-patch-check-*.jpg` to reproduce.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use zune_core::bytestream::ZCursor;

type Outcome = Result<Vec<u8>, String>;

fn upstream_decode(data: &[u8]) -> Outcome {
    upstream::JpegDecoder::new(ZCursor::new(data))
        .decode()
        .map_err(|e| format!("{e:?}"))
}

/// Decodes with the patched copy, lending it `scratch` (change 14): one set of buffers
/// goes from case to case, as stoker's decoding threads lend theirs, so a decode that
/// read what an earlier one left would differ from upstream's.
fn patched_decode(data: &[u8], scratch: &mut patched::StokerScratch) -> Outcome {
    let mut dec = patched::JpegDecoder::new(ZCursor::new(data));
    dec.stoker_use_scratch(std::mem::take(scratch));
    let outcome = dec.decode().map_err(|e| format!("{e:?}"));
    *scratch = dec.stoker_take_scratch();
    outcome
}

/// Whether change 17 changed no pixel of `data`'s upstream decode but in the last column
/// and the last row.
fn edge_only(data: &[u8], upstream: &Outcome) -> bool {
    let mut dec = patched::JpegDecoder::new(ZCursor::new(data));
    dec.stoker_repeat_edges();
    let edged = dec.decode().map_err(|e| format!("{e:?}"));
    let Some((width, height)) = dec.dimensions() else {
        return edged == *upstream;
    };
    match (upstream, &edged) {
        (Ok(a), Ok(b)) if width >= 5 && a.len() == b.len() && height > 0 => {
            let row = a.len() / height;
            let pixel = row / width;
            a.chunks_exact(row)
                .zip(b.chunks_exact(row))
                .take(height - 1)
                .all(|(x, y)| x[..row - pixel] == y[..row - pixel])
        }
        (x, y) => width < 5 || x == y,
    }
}

fn jpegs_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            jpegs_under(&path, out);
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"))
        {
            out.push(path);
        }
    }
}

/// A start-of-frame marker for progressive Huffman coding before the first scan.
fn is_progressive(data: &[u8]) -> bool {
    let header = data
        .windows(2)
        .position(|w| w == [0xFF, 0xDA])
        .unwrap_or(data.len());
    data[..header].windows(2).any(|w| w == [0xFF, 0xC2])
}

/// Xorshift64: the mutants are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutant of `data`, changed only after its first eighth (mostly entropy-coded data).
fn mutate(data: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut d = data.to_vec();
    let start = d.len() / 8;
    let span = d.len().saturating_sub(start + 2).max(1);
    match rng.next() % 4 {
        0 => {
            for _ in 0..1 + rng.below(4) {
                let i = start + rng.below(span);
                d[i] ^= 1 << rng.below(8);
            }
        }
        1 => {
            let i = start + rng.below(span);
            d[i] = rng.next() as u8;
        }
        2 => d.truncate(start + rng.below(span)),
        _ => {
            let i = start + rng.below(span);
            d[i] = 0xFF;
            d[i + 1] = [0xD0, 0xD7, 0xD9, 0xC4, 0xDA, 0x00, 0xE3][rng.below(7)];
        }
    }
    d
}

fn describe(outcome: &Outcome) -> String {
    match outcome {
        Ok(pixels) => format!("{} bytes of pixels", pixels.len()),
        Err(e) => format!("error {e}"),
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    // The repository's test corpus (photographs and the conformance files) unless told.
    let data_dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../testdata").into()),
    );
    let mutants_baseline: usize = args
        .next()
        .map_or(4, |a| a.parse().expect("MUTANTS_BASELINE"));
    let mutants_progressive: usize = args
        .next()
        .map_or(20, |a| a.parse().expect("MUTANTS_PROGRESSIVE"));
    let mut files = Vec::new();
    jpegs_under(&data_dir, &mut files);
    files.sort();
    if files.is_empty() {
        eprintln!("no JPEG files under {}", data_dir.display());
        return ExitCode::FAILURE;
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut cases, mut same_pixels, mut same_error, mut different) = (0, 0, 0, 0);
    let mut beyond_the_edge = 0;
    let mut progressive_files = 0;
    let mut scratch = patched::StokerScratch::default();
    for file in &files {
        let original = std::fs::read(file).expect("read a data file");
        let mutants = if original.len() < 16 {
            0
        } else if is_progressive(&original) {
            progressive_files += 1;
            mutants_progressive
        } else {
            mutants_baseline
        };
        for m in 0..=mutants {
            let data = if m == 0 {
                original.clone()
            } else {
                mutate(&original, &mut rng)
            };
            cases += 1;
            let (a, b) = (upstream_decode(&data), patched_decode(&data, &mut scratch));
            if m == 0 && !edge_only(&data, &a) {
                beyond_the_edge += 1;
                eprintln!(
                    "CHANGE 17 CHANGED MORE THAN THE LAST COLUMN AND ROW: {}",
                    file.display()
                );
            }
            match (&a, &b) {
                (Ok(x), Ok(y)) if x == y => same_pixels += 1,
                (Err(x), Err(y)) if x == y => same_error += 1,
                _ => {
                    different += 1;
                    if different <= 5 {
                        let keep = format!("target/zune-patch-check-{different}.jpg");
                        let _ = std::fs::write(&keep, &data);
                        eprintln!(
                            "DIFFERENT: {} mutant {m} (kept as {keep}): upstream {}, patched {}",
                            file.display(),
                            describe(&a),
                            describe(&b)
                        );
                    }
                }
            }
        }
    }
    println!(
        "zune-patch-check: {} files ({progressive_files} progressive), {cases} cases: \
         {same_pixels} same pixels, {same_error} same error, {different} different; \
         change 17 beyond the last column and row: {beyond_the_edge}",
        files.len()
    );
    if different == 0 && beyond_the_edge == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
