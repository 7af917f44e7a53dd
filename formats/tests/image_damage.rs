//! Damaged images of every format besides JPEG that the converter reads (PNG, GIF, BMP,
//! TIFF, WebP, PPM/PGM/PAM), decoded by the `image` crate: each is converted or skipped
//! with a reason, never a panic (the converter catches one and skips the file, which would
//! still be a bug of a decoder), a hang or a runaway allocation; and PNG metadata that
//! inflates far beyond its file takes bounded memory. JPEG has its own
//! (`decode/tests/robustness.rs`); the `images` fuzz target searches further (fuzz/README.md).

use std::sync::{mpsc, Mutex, PoisonError};
use std::time::Duration;

use stoker_formats::seeded::Rng;
use stoker_formats::{verify, ConvertReport, Dataset, SampleOptions, SampleWriter};
use stoker_testdata::heap::{self, Counting};
use stoker_testdata::{other_format_samples, png_crc, png_from_chunks, zeros_zlib};

#[global_allocator]
static HEAP: Counting = Counting;

/// Held by each test while it counts the heap: the counts are the process's.
static HEAP_COUNTED: Mutex<()> = Mutex::new(());

/// Mutants of each sample: about 38,000 inputs, about a second.
const MUTANTS: usize = 2000;

/// The pixel limit of the conversion: a damaged header may claim any size up to it, so
/// what a decode may take stays bounded (the converter lets the `image` crate allocate up
/// to 16 bytes a pixel, and holds 3 more for RGB).
const MAX_PIXELS: u64 = 1 << 20;

/// More than the decodes may take at once (two threads, each at most ~19 bytes a pixel of
/// `MAX_PIXELS`, with its chunk of inputs; about 32 MB is measured), far less than a runaway
/// allocation: a damaged TIFF count made the `tiff` crate reserve 100-200 MB before the
/// converter checked TIFF directories (`tiff_ifd`).
const PEAK_LIMIT: usize = 64 << 20;

/// Uniform in `0..n` (`n ≥ 1`) from the project's seeded generator: the same mutants on
/// every run.
fn pick(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

/// Rewrites the CRC of every whole chunk of a PNG, so that a mutant reaches the decoder's
/// handling of what it damaged instead of stopping at the first checksum.
fn fix_png_crcs(png: &mut [u8]) {
    let mut at = 8;
    while at + 12 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let Some(end) = (at + 8).checked_add(len).filter(|&e| e + 4 <= png.len()) else {
            return;
        };
        let crc = png_crc(&png[at + 4..end]);
        png[end..end + 4].copy_from_slice(&crc.to_be_bytes());
        at = end + 4;
    }
}

/// One mutant of `seed`: bits flipped, bytes overwritten (in the header more often, with
/// values that make sizes and counts extreme), a cut, or a run repeated.
fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut m = seed.to_vec();
    for _ in 0..1 + pick(rng, 3) {
        let header = m.len().min(64);
        match pick(rng, 6) {
            0 => {
                let at = pick(rng, m.len());
                m[at] ^= 1 << pick(rng, 8);
            }
            1 => {
                let at = pick(rng, header);
                m[at] = rng.next_u64() as u8;
            }
            2 => {
                let fill = [0x00, 0xFF, 0x7F, 0x80][pick(rng, 4)];
                let at = pick(rng, header.saturating_sub(4).max(1));
                let end = (at + 1 + pick(rng, 4)).min(m.len());
                m[at..end].fill(fill);
            }
            3 => m.truncate(1 + pick(rng, m.len())),
            4 => {
                let at = pick(rng, m.len());
                let end = (at + 1 + pick(rng, 32)).min(m.len());
                let run = m[at..end].to_vec();
                let to = pick(rng, m.len());
                m.splice(to..to, run);
            }
            _ => {
                let at = pick(rng, m.len());
                m[at] = rng.next_u64() as u8;
            }
        }
        if m.is_empty() {
            m.push(0);
        }
    }
    if m.starts_with(b"\x89PNG") && pick(rng, 4) != 0 {
        fix_png_crcs(&mut m);
    }
    m
}

/// Writes the samples, each followed by its `MUTANTS` mutants (made one at a time, so the
/// heap counted is the writer's), as one dataset in `out`: the report, the number of
/// inputs, and the most heap the writing held above what it started with.
fn write(out: &std::path::Path) -> (ConvertReport, u64, usize) {
    let mut options = SampleOptions::new("image_damage test");
    options.max_pixels = MAX_PIXELS;
    options.jobs = Some(2);
    let seeds = other_format_samples();
    let mut rng = Rng::new(&[0x5EED_1A6E_D00D_F00D]);
    let before = heap::start_peak();
    let mut w = SampleWriter::create(out, options, Some(vec!["image".into()])).unwrap();
    let mut inputs = 0;
    for (name, bytes) in &seeds {
        w.write(bytes.as_slice(), 0, name).unwrap();
        for k in 0..MUTANTS {
            let mutant = mutate(bytes, &mut rng);
            w.write(mutant, 0, &format!("{name} mutant {k}")).unwrap();
        }
        inputs += 1 + MUTANTS as u64;
    }
    let report = w.finish().unwrap();
    (report, inputs, heap::peak().saturating_sub(before))
}

#[test]
fn damaged_images_of_every_other_format_are_skipped_or_converted_without_panic_hang_or_runaway_memory(
) {
    let _counting = HEAP_COUNTED.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (tx, rx) = mpsc::channel();
    {
        let out = out.clone();
        std::thread::spawn(move || {
            let _ = tx.send(write(&out));
        });
    }
    // A decoder that loops for ever on one input fails the test here, not CI's time limit.
    let (report, inputs, peak) = rx
        .recv_timeout(Duration::from_secs(300))
        .expect("the writer ended (a hang on a damaged image, or a panic outside the decoders)");

    assert_eq!(report.written + report.skipped.len() as u64, inputs);
    let panics: Vec<_> = report
        .skipped
        .iter()
        .filter(|s| s.reason.contains("panic"))
        .map(|s| format!("{}: {}", s.path.display(), s.reason))
        .collect();
    assert!(panics.is_empty(), "a decoder panicked on: {panics:?}");
    let seeds_skipped: Vec<_> = report
        .skipped
        .iter()
        .filter(|s| !s.path.to_string_lossy().contains("mutant"))
        .map(|s| format!("{}: {}", s.path.display(), s.reason))
        .collect();
    assert!(
        seeds_skipped.is_empty(),
        "undamaged samples skipped: {seeds_skipped:?}"
    );
    assert!(
        peak < PEAK_LIMIT,
        "writing held {peak} bytes of heap at its peak, over {PEAK_LIMIT}"
    );
    // Both outcomes are met (the mutants are neither all harmless nor all fatal), and every
    // record written reads back as a sound JPEG.
    assert!(report.written > 2 * other_format_samples().len() as u64);
    assert!(report.skipped.len() as u64 > inputs / 4);
    let ds = Dataset::open(&out).unwrap();
    let v = verify(&ds, true).unwrap();
    assert!(v.ok(), "the dataset fails verify --decode: {:?}", v.bad);
}

/// A 1×1 RGB PNG with a chunk of `kind`, `data`.
fn png_with(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let ihdr = [0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0];
    png_from_chunks(&[(b"IHDR", &ihdr), (kind, data), (b"IDAT", &zeros_zlib(4))])
}

#[test]
fn a_png_profile_that_inflates_to_a_gigabyte_takes_16_mib_and_sound_metadata_is_read() {
    let _counting = HEAP_COUNTED.lock().unwrap_or_else(PoisonError::into_inner);
    let mut profile = b"icc\0\0".to_vec();
    profile.extend(zeros_zlib(1 << 30));
    let mut text = b"comment\0".to_vec();
    text.resize(3 << 20, b'a');
    let samples = [
        // 6.8 MB whose profile inflates to 1 GiB: the `png` crate drops a profile it
        // cannot read whole, and the image converts.
        ("profile bomb", png_with(b"iCCP", &profile)),
        // A small image with 3 MiB of text (XMP, say), more than 16 bytes a pixel.
        ("text", png_with(b"tEXt", &text)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut options = SampleOptions::new("image_damage test");
    options.jobs = Some(1);
    let before = heap::start_peak();
    let mut w = SampleWriter::create(dir.path().join("out"), options, None).unwrap();
    for (name, png) in samples {
        w.write(png, 0, name).unwrap();
    }
    let report = w.finish().unwrap();
    let peak = heap::peak().saturating_sub(before);
    assert_eq!(report.written, 2, "{:?}", report.skipped);
    // The inflation stopped at the file's size and 16 MiB (it went to 512 MiB, `image`'s
    // default limit, while the converter read the image's size).
    assert!(peak < 64 << 20, "the writer held {peak} bytes at its peak");
}
