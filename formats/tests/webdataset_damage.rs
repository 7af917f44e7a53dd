//! Damaged WebDataset shards: a tar cut short, a header whose size runs past the end of
//! the file (10 GB claimed in a few KB), a header with a bad checksum, zero-filled, garbage
//! and empty files named `.tar`, a FIFO named `.tar`, a tar without its end blocks. Each is
//! a skipped input naming the shard, the byte and what is lost (or a warning), the samples
//! before the damage are converted, and nothing panics, hangs or allocates what a header
//! claims.

mod tar_shards;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stoker_formats::{
    convert, ConvertOptions, ConvertReport, Dataset, FormatError, Layout, NoProgress, Source,
};
use tar_shards::{photos, sample_entries, write_tar, Style};

fn opts(src: &Path, out: &Path) -> ConvertOptions {
    let mut o = ConvertOptions::new(Source::ImageFolder(src.into()), out);
    o.layout = Layout::WebDataset;
    o.jobs = Some(2);
    o
}

/// A good shard of the first `n` photos at `path`; the byte offsets where each member's
/// header starts (in the tar crate's GNU layout: header, then data padded to 512).
fn good_shard(path: &Path, n: usize) -> Vec<u64> {
    let p = photos();
    write_tar(path, Style::Gnu, &sample_entries(&p[..n], ""));
    let bytes = std::fs::read(path).unwrap();
    let mut starts = Vec::new();
    let mut at = 0u64;
    while bytes[at as usize] != 0 {
        starts.push(at);
        let h = tar::Header::from_byte_slice(&bytes[at as usize..][..512]);
        at += 512 + h.entry_size().unwrap().div_ceil(512) * 512;
    }
    starts
}

/// Converts `src` into a fresh directory within a time limit (a hang fails the test).
fn convert_in_time(src: &Path, tmp: &Path, name: &str) -> Result<ConvertReport, FormatError> {
    let t0 = Instant::now();
    let r = convert(&opts(src, &tmp.join(name)), &NoProgress);
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "{name} took {:?}",
        t0.elapsed()
    );
    r
}

fn one_skip(r: &ConvertReport, tar: &Path) -> String {
    let shard: Vec<_> = r.skipped.iter().filter(|s| s.path == tar).collect();
    assert_eq!(shard.len(), 1, "{:?}", r.skipped);
    shard[0].reason.clone()
}

#[test]
fn a_tar_cut_short_keeps_the_samples_before_the_cut_and_names_what_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let tar = tmp.path().join("cut.tar");
    let starts = good_shard(&tar, 4);
    let bytes = std::fs::read(&tar).unwrap();
    // Inside the third photo's data: samples 0 and 1 are whole.
    std::fs::write(&tar, &bytes[..starts[4] as usize + 700]).unwrap();
    let r = convert_in_time(&tar, tmp.path(), "a").unwrap();
    assert_eq!((r.written, r.inputs), (2, 3));
    let reason = one_skip(&r, &tar);
    assert!(
        reason.starts_with(&format!(
            "damaged tar at byte {}: the file is cut short",
            starts[4]
        )),
        "{reason}"
    );
    assert!(reason.contains("past the end of the file"), "{reason}");

    // Inside the third sample's cls: its photo is lost with it, and said to be.
    std::fs::write(&tar, &bytes[..starts[5] as usize + 512]).unwrap();
    let r = convert_in_time(&tar, tmp.path(), "b").unwrap();
    assert_eq!(r.written, 2);
    let reason = one_skip(&r, &tar);
    let key = photos()[2]
        .1
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.ends_with(&format!("nor the sample 0/{key} being read there")),
        "{reason}"
    );

    // Cut between two members: no damage to see, only the missing end blocks.
    std::fs::write(&tar, &bytes[..starts[4] as usize]).unwrap();
    let r = convert_in_time(&tar, tmp.path(), "c").unwrap();
    assert!(r.skipped.is_empty() && r.written == 2, "{r:?}");
    assert!(
        r.warnings[0].contains("end without tar's end-of-archive blocks"),
        "{:?}",
        r.warnings
    );
}

#[test]
fn a_header_claiming_10_gb_in_a_small_file_is_damage_not_an_allocation() {
    let tmp = tempfile::tempdir().unwrap();
    let tar = tmp.path().join("claims.tar");
    let starts = good_shard(&tar, 2);
    let mut bytes = std::fs::read(&tar).unwrap();
    // The second photo's header says 10 GB (base-256, as GNU writes large sizes).
    let at = starts[2] as usize;
    let mut h = tar::Header::from_byte_slice(&bytes[at..at + 512]).clone();
    h.set_size(10_000_000_000);
    h.set_cksum();
    bytes[at..at + 512].copy_from_slice(h.as_bytes());
    std::fs::write(&tar, &bytes).unwrap();
    let r = convert_in_time(&tar, tmp.path(), "out").unwrap();
    assert_eq!((r.written, r.inputs), (1, 2));
    let reason = one_skip(&r, &tar);
    assert!(
        reason.contains("10000000000 bytes of data from byte"),
        "{reason}"
    );
}

#[test]
fn a_header_with_a_bad_checksum_ends_the_shard_there() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("src");
    std::fs::create_dir(&dir).unwrap();
    let tar = dir.join("a.tar");
    let starts = good_shard(&tar, 3);
    let mut bytes = std::fs::read(&tar).unwrap();
    bytes[starts[4] as usize + 3] ^= 0x20;
    std::fs::write(&tar, &bytes).unwrap();
    // A second, good shard is converted whole.
    let p = photos();
    write_tar(
        &dir.join("b.tar"),
        Style::Pax,
        &sample_entries(&p[..3], "b/"),
    );
    let r = convert_in_time(&dir, tmp.path(), "out").unwrap();
    assert_eq!((r.written, r.inputs), (5, 6));
    let reason = one_skip(&r, &tar);
    assert!(
        reason.starts_with(&format!(
            "damaged tar at byte {}: bad header checksum",
            starts[4]
        )),
        "{reason}"
    );
    assert!(reason.contains("the rest of the shard"), "{reason}");

    // Under --strict the damaged shard stops the conversion, named.
    let mut o = opts(&dir, &tmp.path().join("strict"));
    o.strict = true;
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(
        matches!(&e, FormatError::StrictInput { path, .. } if path == &tar),
        "{e}"
    );
}

#[test]
fn zero_filled_garbage_empty_and_fifo_files_named_tar_are_skipped_with_reasons() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("src");
    std::fs::create_dir(&dir).unwrap();
    good_shard(&dir.join("0-good.tar"), 2);
    std::fs::write(dir.join("1-zeros.tar"), vec![0u8; 20480]).unwrap();
    let garbage: Vec<u8> = (0..10_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(dir.join("2-garbage.tar"), garbage).unwrap();
    std::fs::write(dir.join("3-empty.tar"), b"").unwrap();
    std::fs::write(dir.join("4-tiny.tar"), b"hello").unwrap();
    let fifo = dir.join("5-pipe.tar");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let r = convert_in_time(&dir, tmp.path(), "out").unwrap();
    assert_eq!(r.written, 2);
    let got: Vec<(PathBuf, &str)> = (r.skipped.iter())
        .map(|s| {
            (
                s.path.strip_prefix(&dir).unwrap().to_owned(),
                s.reason.as_str(),
            )
        })
        .collect();
    let want = [
        ("1-zeros.tar", "holds no samples"),
        ("2-garbage.tar", "not a tar header"),
        ("3-empty.tar", "holds no samples"),
        ("4-tiny.tar", "not a tar archive: 5 bytes"),
        ("5-pipe.tar", "not a regular file"),
    ];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for ((path, reason), (want_path, want_reason)) in got.iter().zip(want) {
        assert_eq!(path, Path::new(want_path));
        assert!(reason.starts_with(want_reason), "{want_path}: {reason}");
    }

    // Nothing but such files: no dataset, and the reasons say why.
    std::fs::remove_file(dir.join("0-good.tar")).unwrap();
    let e = convert_in_time(&dir, tmp.path(), "none").unwrap_err();
    assert!(e.to_string().contains("none of the 5 inputs"), "{e}");
    assert!(!tmp.path().join("none/manifest.json").exists());
}

#[test]
fn tar_files_among_other_files_read_as_images_say_how_to_read_them() {
    // `auto` takes a folder as shards only when it holds nothing but .tar files.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("src");
    std::fs::create_dir(&dir).unwrap();
    good_shard(&dir.join("a.tar"), 1);
    std::fs::write(dir.join("README.txt"), "shards").unwrap();
    let mut o = opts(&dir, &tmp.path().join("out"));
    o.layout = Layout::Auto;
    let e = convert(&o, &NoProgress).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("none of the 2 inputs"), "{msg}");
    assert!(msg.contains("--layout webdataset"), "{msg}");
    // With a photo beside them, the photo converts and the warning names the way.
    std::fs::copy(&photos()[0].1, dir.join("photo.jpg")).unwrap();
    let r = convert(&o, &NoProgress).unwrap();
    assert!(r.flat && !r.webdataset && r.written == 1, "{r:?}");
    assert!(
        r.warnings.iter().any(|w| w.contains("--layout webdataset")),
        "{:?}",
        r.warnings
    );
    assert_eq!(Dataset::open(tmp.path().join("out")).unwrap().len(), 1);
}

#[test]
fn every_cut_and_header_byte_flip_of_a_shard_converts_or_is_refused_never_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let tar = tmp.path().join("m.tar");
    let starts = good_shard(&tar, 2);
    let good = std::fs::read(&tar).unwrap();
    let mut mutants = Vec::new();
    for &s in &starts {
        let s = s as usize;
        // The name, size, checksum, type, magic and prefix fields of each header.
        for at in [0, 99, 124, 130, 135, 148, 154, 156, 257, 262, 345, 499] {
            let mut m = good.clone();
            m[s + at] ^= 0xFF;
            mutants.push((format!("flip {s}+{at}"), m));
        }
        for cut in [s, s + 1, s + 511, s + 512, s + 513] {
            mutants.push((format!("cut {cut}"), good[..cut].to_vec()));
        }
    }
    assert_eq!(mutants.len(), 4 * 17);
    for (i, (what, bytes)) in mutants.iter().enumerate() {
        std::fs::write(&tar, bytes).unwrap();
        let mut o = opts(&tar, &tmp.path().join(format!("out{i}")));
        o.check_decode = false;
        let t0 = Instant::now();
        match convert(&o, &NoProgress) {
            Ok(r) => assert_eq!(r.written + r.skipped.len() as u64, r.inputs, "{what}"),
            Err(e) => assert!(matches!(e, FormatError::BadSource { .. }), "{what}: {e}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{what}");
    }
}
