//! Every conformance file, valid and broken, through the CPU decodes the loaders make
//! (whole, first rows, a region) with a pixel limit, so that only the small ones are
//! decoded: sized to run under Miri (`scripts/miri.sh`), which checks the unsafe code on
//! these paths (zune-jpeg's fork, with its AVX2 IDCT, upsampling and colour conversion
//! when built with that feature; stoker's scratch buffers) for undefined behaviour that a
//! native run and the fuzzers' AddressSanitizer do not see: a read past a slice that stays
//! inside its allocation, uninitialised bytes, aliasing. Miri interprets every
//! instruction, so its default run takes the tiny files alone; the others are for a long
//! run (`MIRI_ALL=1`).

mod common;

use common::{check_decodes, conformance_rows, data_dir, Row};
use stoker_decode::{CpuDecoder, DecodeError, Limits};

/// The pixel limit: 150×103 (the Go test images) fits, the photographs do not.
const MAX_PIXELS: u64 = 20_000;
/// The tiny files' limit: 10×10 fits, 48×48 does not.
const TINY: u64 = 100;

/// Decodes every conformance file `pick` takes, with a pixel limit of `max_pixels`:
/// whole, then the loaders' partial decodes. Returns how many decoded whole and how many
/// the limit refused.
fn decode_all(max_pixels: u64, pick: impl Fn(&Row) -> bool) -> (usize, usize) {
    let dec = CpuDecoder::new(Limits {
        max_pixels,
        ..Limits::default()
    });
    let (mut decoded, mut refused) = (0, 0);
    let pixels = |r: &Row| {
        r.width
            .zip(r.height)
            .map(|(w, h)| u64::from(w) * u64::from(h))
    };
    // Smallest first, each named as it starts under Miri: a run cut short has still
    // covered the most files it could.
    let mut rows: Vec<Row> = conformance_rows().into_iter().filter(|r| pick(r)).collect();
    rows.sort_by_key(|r| pixels(r).unwrap_or(0));
    for row in rows {
        let data = std::fs::read(data_dir().join("conformance").join(&row.file)).unwrap();
        let what = &row.file;
        if cfg!(miri) {
            eprintln!("{what}");
        }
        let whole = check_decodes(&dec, &data, what);
        if row.expect == "decode" && pixels(&row).is_some_and(|px| px <= max_pixels) {
            whole.as_ref().unwrap_or_else(|e| panic!("{what}: {e}"));
        }
        match &whole {
            Ok(_) => decoded += 1,
            Err(DecodeError::TooLarge { .. }) => refused += 1,
            Err(_) => {}
        }
    }
    println!("{decoded} decoded, {refused} refused by the limit");
    (decoded, refused)
}

/// The tiniest files alone (up to 100 pixels: 1×1, 2×1, 4×4, 10×10, some broken ones):
/// a first look that takes seconds under Miri.
#[test]
fn tiny_files_decode_whole_by_rows_and_by_region() {
    let (decoded, refused) = decode_all(TINY, |_| true);
    assert!(
        decoded >= 6 && refused >= 80,
        "{decoded} decoded, {refused} refused"
    );
}

#[test]
fn small_valid_files_decode_whole_by_rows_and_by_region() {
    let (decoded, refused) = decode_all(MAX_PIXELS, |r| r.expect == "decode");
    assert!(
        decoded >= 40 && refused >= 10,
        "{decoded} decoded, {refused} refused"
    );
}

/// Broken files, and valid ones with odd metadata or features a decoder may refuse.
#[test]
fn small_broken_and_odd_files_fail_cleanly_or_decode() {
    let (decoded, refused) = decode_all(MAX_PIXELS, |r| r.expect != "decode");
    assert!(
        decoded >= 5 && refused >= 25,
        "{decoded} decoded, {refused} refused"
    );
}
