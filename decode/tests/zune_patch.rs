//! The vendored, patched zune-jpeg (decode/vendor/zune-jpeg) must decode
//! exactly as upstream zune-jpeg 0.5.15 does: same pixels, same route.
//!
//! `tests/data/zune_digests.tsv` holds, for every file of the test corpus that
//! upstream decoded through zune-jpeg, the FNV-1a 64 digest of its RGB output,
//! written from the unpatched crate. The patch only reorganises the Huffman hot
//! loop, so any difference here is a bug in the patch (or a new upstream
//! version that needs its digests rewritten, see STOKER-PATCH.md). Except for
//! change 17, which `CpuDecoder` asks for: libjpeg's upsampling at the right
//! and bottom edges. So the last column and the last row are left out of the
//! digest, and images 4 pixels wide or less (all of whose columns it may
//! change) have no row; the
//! conformance test holds both to Pillow's decodes, and
//! `decode/vendor/zune-patch-check` compares every pixel with upstream's
//! without change 17.
//!
//! Files of `conformance/corrupt/` whose scan data runs out are rows too
//! (upstream fills them in), but `CpuDecoder` refuses them (change 13 of
//! STOKER-PATCH.md): here they must fail as `Corrupt`, and
//! `decode/vendor/zune-patch-check`, which calls the fork directly, still
//! compares their pixels with upstream's.
//!
//! To rewrite the table from an *unpatched* build (stoker-decode pointed at
//! zune-jpeg as published): `STOKER_WRITE_ZUNE_DIGESTS=1 cargo test -p
//! stoker-decode --test zune_patch`.

mod common;

use rayon::prelude::*;
use stoker_decode::{CpuDecoder, DecodeError, ImageInfo, Limits, Route};

fn fnv1a64<'a>(bytes: impl IntoIterator<Item = &'a u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Narrower images are left out of the table: change 17 may change all their columns.
const NARROWEST: u32 = 5;

/// The digest of a decode of `info`'s image without its last column and row (change 17).
fn digest(info: &ImageInfo, pixels: &[u8]) -> u64 {
    let row = pixels.len() / info.height as usize;
    let pixel = row / info.width as usize;
    let rows = pixels.chunks_exact(row).take(info.height as usize - 1);
    fnv1a64(rows.flat_map(|r| &r[..row - pixel]))
}

const TABLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/zune_digests.tsv");

/// Writes the digest table from this build: every zune-routed file of the
/// shared data sets this test reads.
fn write_table(dec: &CpuDecoder) {
    let data = common::data_dir();
    let mut dirs = vec![
        data.join("conformance/core"),
        data.join("conformance/corrupt"),
    ];
    let mut classes: Vec<_> = std::fs::read_dir(data.join("imagefolder"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    classes.sort();
    dirs.extend(classes);
    let mut rows: Vec<String> = dirs
        .iter()
        .flat_map(|d| {
            // Every file, whatever its extension (.mpo, .JPG): the table
            // covers all the decoder is given.
            let mut files: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.is_file())
                .collect();
            files.sort();
            files
        })
        .filter_map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            match dec.decode_to_vec_routed(&bytes) {
                Ok((info, Route::CpuZune, rgb)) if info.width >= NARROWEST => Some(format!(
                    "{}\t{:016x}",
                    path.strip_prefix(&data).unwrap().display(),
                    digest(&info, &rgb)
                )),
                _ => None,
            }
        })
        .collect();
    rows.sort();
    let head = "# FNV-1a 64 of the RGB output of upstream zune-jpeg (route cpu-zune) without its last column and row, one row per file of the test corpus (testdata/) 5 pixels wide or more that it decodes.\n\
                # Written by STOKER_WRITE_ZUNE_DIGESTS=1 from an unpatched build; the vendored copy must reproduce every row (decode/vendor/zune-jpeg/STOKER-PATCH.md).\n";
    std::fs::write(TABLE, format!("{head}{}\n", rows.join("\n"))).unwrap();
    println!("wrote {} rows to {TABLE}", rows.len());
}

#[test]
fn patched_zune_reproduces_upstream_pixels() {
    let data = common::data_dir();
    let dec = CpuDecoder::new(Limits::default());
    if std::env::var_os("STOKER_WRITE_ZUNE_DIGESTS").is_some() {
        return write_table(&dec);
    }
    let table = std::fs::read_to_string(TABLE).unwrap();
    let rows: Vec<(&str, &str)> = table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split_once('\t').expect("file<TAB>digest"))
        .collect();
    let checked = rows.len();
    let wrong: Vec<String> = rows
        .par_iter()
        .filter_map(|&(file, hex)| {
            let want = u64::from_str_radix(hex, 16).expect("hex digest");
            let bytes = std::fs::read(data.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            match dec.decode_to_vec_routed(&bytes) {
                Ok((info, Route::CpuZune, rgb)) if digest(&info, &rgb) == want => None,
                Ok((info, route, rgb)) => Some(format!(
                    "{file}: route {route}, digest {:016x}, upstream {want:016x}",
                    digest(&info, &rgb)
                )),
                // A damaged file upstream fills in: refused on purpose.
                Err(DecodeError::Corrupt { .. }) if file.starts_with("conformance/corrupt/") => {
                    None
                }
                Err(e) => Some(format!("{file}: error {e}, upstream decoded it")),
            }
        })
        .collect();
    assert!(checked > 200, "only {checked} rows in the digest table");
    assert!(
        wrong.is_empty(),
        "{} of {checked} files differ from upstream zune-jpeg:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn digest_catches_a_one_byte_difference() {
    // The check above is only as good as the digest: a single changed sample
    // must change it.
    let data = std::fs::read(common::bench_dir().join("00000.jpg")).unwrap();
    let (info, mut rgb) = CpuDecoder::new(Limits::default())
        .decode_to_vec(&data)
        .unwrap();
    let before = digest(&info, &rgb);
    let mid = rgb.len() / 2;
    rgb[mid] ^= 1;
    assert_ne!(before, digest(&info, &rgb));
}
