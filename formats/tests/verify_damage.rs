//! `verify_dir` on datasets too damaged for `Dataset::open`: every shard that can be opened
//! is checked, and each that cannot is reported with the records it held. Before it, verify
//! needed an open `Dataset`, so one bad shard hid every record of the others.

use std::path::{Path, PathBuf};

use stoker_formats::{
    convert, verify, verify_dir, ConvertOptions, Dataset, Layout, LostCause, NoProgress, Source,
    VerifyReport,
};

/// The bundled photos converted into several shards of a few MB at `dir/name`.
fn photos(dir: &Path, name: &str, layout: Layout) -> PathBuf {
    let out = dir.join(name);
    let mut o = ConvertOptions::new(
        Source::ImageFolder(stoker_testdata::dir().join("imagefolder")),
        &out,
    );
    o.check_decode = false;
    o.shard_bytes = 4 << 20;
    o.jobs = Some(2);
    o.layout = layout;
    convert(&o, &NoProgress).unwrap();
    out
}

/// Asserts that `r` counts every sample once, and that shard `si` of `ds` is the one lost,
/// whole, for `cause`.
fn assert_lost_shard(ds: &Path, r: &VerifyReport, si: usize, cause: LostCause) {
    assert_eq!(
        r.ok_records + r.bad_records + r.lost_records,
        r.samples,
        "{r:?}"
    );
    let m = stoker_formats::Manifest::read(ds).unwrap();
    let s = &m.shards[si];
    assert_eq!(r.lost.len(), 1, "{r:?}");
    let l = &r.lost[0];
    assert_eq!(
        (l.shard.as_str(), l.first_index, l.count, l.cause),
        (s.file.as_str(), s.first_index, s.count, cause),
        "{r:?}"
    );
    assert_eq!(r.lost_records, s.count);
    assert_eq!(r.ok_records, m.samples - s.count, "{r:?}");
    assert!(!r.ok());
}

#[test]
fn the_shards_around_a_missing_one_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let ds = photos(dir.path(), "ds", Layout::Auto);
    std::fs::remove_file(ds.join("shard-00001.lmdb")).unwrap();
    // Said as a dataset missing a shard, with what to run; the bare "No such file or
    // directory" read like a mistyped path.
    match Dataset::open(&ds) {
        Err(e @ stoker_formats::FormatError::MissingShard { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("shard-00001.lmdb is missing: the manifest lists it")
                    && text.contains("stoker verify"),
                "{text}"
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let r = verify_dir(&ds, false).unwrap();
    assert_lost_shard(&ds, &r, 1, LostCause::Missing);
    assert_eq!(r.opened, r.shards - 1);
    assert_eq!(r.checked, r.ok_records);
}

#[test]
fn a_shard_that_is_not_a_regular_file_is_lost_without_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let ds = photos(dir.path(), "ds", Layout::Auto);
    let shard = ds.join("shard-00002.lmdb");
    std::fs::remove_file(&shard).unwrap();
    // A FIFO would block a plain open for reading until a writer came.
    let made = std::process::Command::new("mkfifo")
        .arg(&shard)
        .status()
        .unwrap();
    assert!(made.success());
    let r = verify_dir(&ds, false).unwrap();
    assert_lost_shard(&ds, &r, 2, LostCause::Damaged);
    std::fs::remove_file(&shard).unwrap();
    std::fs::create_dir(&shard).unwrap();
    let r = verify_dir(&ds, false).unwrap();
    assert_lost_shard(&ds, &r, 2, LostCause::Damaged);
}

#[test]
fn a_shard_whose_meta_pages_disagree_with_the_manifest_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let ds = photos(dir.path(), "ds", Layout::Auto);
    let shard = ds.join("shard-00000.lmdb");
    let mut bytes = std::fs::read(&shard).unwrap();
    // The magic of both meta pages (page size 4096).
    bytes[16] ^= 0xff;
    bytes[4096 + 16] ^= 0xff;
    std::fs::write(&shard, &bytes).unwrap();
    let r = verify_dir(&ds, false).unwrap();
    assert_lost_shard(&ds, &r, 0, LostCause::Damaged);
    assert!(r.lost[0].reason.contains("meta page"), "{r:?}");
}

/// A shard of another dataset in its place passes every record check; only its digest
/// tells, and then none of its records can be vouched for, through either entry point.
#[test]
fn a_swapped_shard_loses_its_records_though_each_passes_its_checks() {
    let dir = tempfile::tempdir().unwrap();
    let ds = photos(dir.path(), "ds", Layout::Auto);
    let other = photos(dir.path(), "other", Layout::Flat);
    std::fs::copy(other.join("shard-00001.lmdb"), ds.join("shard-00001.lmdb")).unwrap();
    let r = verify(&Dataset::open(&ds).unwrap(), true).unwrap();
    assert_lost_shard(&ds, &r, 1, LostCause::Altered);
    assert_eq!((r.checked, r.decoded), (r.samples, r.samples));
    let by_dir = verify_dir(&ds, false).unwrap();
    assert_eq!(by_dir.lost, r.lost);
}

/// Asserts that `r` counts each record once, where it names it: every index named among
/// the problems is counted bad and lies in no lost range, and the bad and lost records of
/// shard `si` of `ds` together are the whole shard. `verify` once counted a record of an
/// altered shard as lost while naming it `BAD`, and printed "0 bad" beside a `BAD` line.
fn assert_altered_shard_counts_bad_records_once(ds: &Path, r: &VerifyReport, si: usize) {
    assert_eq!(
        r.ok_records + r.bad_records + r.lost_records,
        r.samples,
        "{r:?}"
    );
    let mut named = r.bad.iter().filter_map(|b| b.index).collect::<Vec<_>>();
    named.sort_unstable();
    named.dedup();
    assert!(!named.is_empty(), "no record named: {r:?}");
    assert_eq!(named.len() as u64, r.bad_records, "{r:?}");
    for l in &r.lost {
        assert_eq!(l.cause, LostCause::Altered, "{r:?}");
        let range = l.first_index..l.first_index + l.count;
        assert!(named.iter().all(|i| !range.contains(i)), "{r:?}");
    }
    let s = &stoker_formats::Manifest::read(ds).unwrap().shards[si];
    let shard = s.first_index..s.first_index + s.count;
    assert!(named.iter().all(|i| shard.contains(i)), "{r:?}");
    assert!(r.lost.iter().all(|l| l.shard == s.file), "{r:?}");
    assert_eq!(r.bad_records + r.lost_records, s.count, "{r:?}");
    assert_eq!(r.ok_records, r.samples - s.count, "{r:?}");
    assert!(!r.ok());
}

/// A flipped bit in one payload: the digest says the shard is not the one written, so its
/// records are lost, except the record that fails its own CRC, which is named and counted
/// bad.
#[test]
fn a_record_damaged_in_an_altered_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let ds = photos(dir.path(), "ds", Layout::Auto);
    let shard = ds.join("shard-00002.lmdb");
    let mut bytes = std::fs::read(&shard).unwrap();
    // Inside the first JPEG stored past the middle of the file: payload bytes, which the
    // record's CRC covers.
    let mid = bytes.len() / 2;
    let soi = bytes[mid..]
        .windows(3)
        .position(|w| w == [0xff, 0xd8, 0xff])
        .unwrap();
    bytes[mid + soi + 100] ^= 0x10;
    std::fs::write(&shard, &bytes).unwrap();
    let r = verify_dir(&ds, false).unwrap();
    assert_altered_shard_counts_bad_records_once(&ds, &r, 2);
    assert_eq!(r.bad_records, 1, "{r:?}");
}

/// The user trial's shard with 64 bytes inverted in its middle: `verify` said
/// "records: 123 OK, 0 bad, 41 lost" beside `BAD shard-00002.lmdb record 102`.
#[test]
fn a_record_named_bad_in_an_altered_shard_is_counted_bad_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let ds = photos(dir.path(), "ds", Layout::Auto);
    let shard = ds.join("shard-00002.lmdb");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0xff;
    }
    std::fs::write(&shard, &bytes).unwrap();
    let r = verify_dir(&ds, false).unwrap();
    assert_altered_shard_counts_bad_records_once(&ds, &r, 2);
    // Through an open dataset too, which `stoker verify` does not use.
    let by_open = verify(&Dataset::open(&ds).unwrap(), false).unwrap();
    assert_eq!(by_open.lost, r.lost);
    assert_eq!(by_open.bad, r.bad);
}

#[test]
fn an_intact_dataset_counts_every_record_ok() {
    let dir = tempfile::tempdir().unwrap();
    let ds = photos(dir.path(), "ds", Layout::Auto);
    let r = verify_dir(&ds, false).unwrap();
    assert!(r.ok(), "{r:?}");
    assert_eq!(
        (r.ok_records, r.bad_records, r.lost_records),
        (r.samples, 0, 0)
    );
    assert_eq!(r.opened, r.shards);
}

#[test]
fn a_stop_during_a_shard_ends_verify_with_the_shards_checked_whole() {
    let dir = tempfile::tempdir().unwrap();
    let ds = photos(dir.path(), "ds", Layout::Auto);
    let m = stoker_formats::Manifest::read(&ds).unwrap();
    assert!(m.shards.len() >= 3, "{} shards", m.shards.len());
    // Asked once before each shard and once per record: stop at the second record of
    // shard 1, after shard 0 was checked whole.
    let asked = std::sync::atomic::AtomicU64::new(0);
    let before_stop = 1 + m.shards[0].count + 1 + 2;
    let stop = || asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 >= before_stop;
    let e = stoker_formats::verify_dir_until(&ds, false, &stop).unwrap_err();
    assert!(
        matches!(e, stoker_formats::FormatError::VerifyStopped { checked: 1, shards } if shards == m.shards.len() as u64),
        "{e}"
    );
    // Shard 1's walk ends at the stop, not at the end of the shard (asked once more, after
    // the shard), and shard 2 is not begun.
    let asked = asked.into_inner();
    assert_eq!(asked, before_stop + 1);
    let never = stoker_formats::verify_dir_until(&ds, true, &|| false).unwrap();
    let plain = verify_dir(&ds, true).unwrap();
    assert!(never.ok() && plain.ok(), "{never:?}");
    assert_eq!(
        (never.checked, never.decoded, never.ok_records),
        (plain.checked, plain.decoded, plain.ok_records)
    );
}
