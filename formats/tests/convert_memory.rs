//! Regression tests: the converter's memory was bounded by a count of files, not bytes. Its
//! workers transcoded a chunk of `jobs × 16` inputs and held every result at once, so 32 raw
//! 6000x6000 records took 3.4 GB; and raw sizes whose records can never be stored (over
//! 4 GiB) were accepted, and a buffer that size allocated per image before failing.
//!
//! The heap is measured with a counting allocator (this test binary's only one), so each
//! test here that measures runs alone under a lock.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use stoker_formats::{convert, ConvertOptions, Dataset, Encoding, FormatError, NoProgress, Source};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[global_allocator]
static HEAP: stoker_testdata::heap::Counting = stoker_testdata::heap::Counting;

/// `n` photos from the test corpus in one class folder under `dir`.
fn photos(dir: &Path, n: usize) -> PathBuf {
    let src = dir.join("src");
    let class = src.join("c");
    std::fs::create_dir_all(&class).unwrap();
    let mut all: Vec<_> = std::fs::read_dir(stoker_testdata::dir().join("imagefolder/caer"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    for i in 0..n {
        let from = &all[i % all.len()];
        std::fs::copy(from, class.join(format!("{i:03}.jpg"))).unwrap();
    }
    src
}

fn raw_opts(src: &Path, out: &Path, w: u32, h: u32) -> ConvertOptions {
    let mut o = ConvertOptions::new(Source::ImageFolder(src.to_path_buf()), out);
    o.encoding = Encoding::Raw;
    o.raw_size = Some((w, h));
    o
}

#[test]
fn large_raw_records_are_held_by_bytes_not_by_a_chunk_of_files() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let n = 40;
    let src = photos(dir.path(), n);
    let mut o = raw_opts(&src, &dir.path().join("out"), 2000, 2000);
    o.jobs = Some(2);
    let record = 2000 * 2000 * 3;
    let before = stoker_testdata::heap::start_peak();
    let r = convert(&o, &NoProgress).unwrap();
    let peak = stoker_testdata::heap::peak() - before;
    assert_eq!(r.written, n as u64, "{r:?}");
    assert_eq!(Dataset::open(&o.out).unwrap().len(), n as u64);
    // The converter's read-ahead (at most 32 MiB), one record per worker in progress and
    // one waiting, up to twice the read-ahead of recycled buffers, and a decoded photo per
    // worker; the chunk of 32 records it was (384 MB) is well above this.
    eprintln!(
        "peak heap {peak} bytes ({:.1} records)",
        peak as f64 / record as f64
    );
    let bound = (32 << 20) + 4 * record + (64 << 20) + (32 << 20);
    assert!(
        peak < bound,
        "peak heap {peak} bytes, bound {bound} ({} records of {record})",
        peak / record
    );
}

#[test]
fn raw_size_whose_records_exceed_4_gib_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let src = photos(dir.path(), 1);
    for (w, h) in [
        (65535, 65535),
        (40000, 40000),
        (37838, 37838),
        (65535, 21846),
    ] {
        let before = stoker_testdata::heap::live();
        let e = convert(&raw_opts(&src, &dir.path().join("o"), w, h), &NoProgress).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, FormatError::InvalidOptions(_)),
            "{w}x{h}: {msg}"
        );
        assert!(
            msg.contains("4 GiB") && msg.contains(&format!("{w}x{h}")),
            "{msg}"
        );
        assert!(!dir.path().join("o").exists(), "nothing is created");
        assert!(stoker_testdata::heap::live() < before + (1 << 20));
    }
    // The largest square that fits is still accepted (checked up to the listing only: the
    // source here does not exist).
    let missing = dir.path().join("missing");
    for (w, h) in [(37837, 37837), (65535, 21845)] {
        let e = convert(
            &raw_opts(&missing, &dir.path().join("o"), w, h),
            &NoProgress,
        );
        assert!(
            matches!(&e, Err(FormatError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound),
            "{w}x{h}: {e:?}"
        );
    }
}
