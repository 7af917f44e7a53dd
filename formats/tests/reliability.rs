//! Regression tests for the converter against hostile-but-realistic sources and neighbours
//! (issue 18): symlink loops, FIFOs, device files, huge files, absurd labels, a second
//! writer, and a crash while the resume journal is replaced. Photos come from the
//! repository's `examples/data/sample`.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use stoker_formats::{
    convert, verify, ConvertOptions, ConvertReport, Dataset, DatasetWriter, Encoding, FormatError,
    NoProgress, Provenance, RecordMeta, Source, WriterOptions,
};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");

fn photo(name: &str) -> PathBuf {
    Path::new(SAMPLE).join(name)
}

/// Runs a conversion on another thread and fails the test if it takes longer than `limit`
/// (a hang must show as a failure, not as a test that never ends).
fn convert_within(opts: ConvertOptions, limit: Duration) -> Result<ConvertReport, FormatError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(convert(&opts, &NoProgress));
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("convert did not finish within {limit:?}"))
}

fn reasons(r: &ConvertReport) -> Vec<(String, String)> {
    r.skipped
        .iter()
        .map(|s| {
            (
                s.path.file_name().unwrap().to_string_lossy().into_owned(),
                s.reason.clone(),
            )
        })
        .collect()
}

#[test]
fn symlink_loop_in_source_tree_no_longer_hangs_convert() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s");
    std::fs::create_dir_all(s.join("a")).unwrap();
    std::fs::create_dir_all(s.join("loop")).unwrap();
    std::fs::copy(photo("caer/puppy.jpg"), s.join("a/x.jpg")).unwrap();
    std::os::unix::fs::symlink("..", s.join("loop/up")).unwrap();
    std::os::unix::fs::symlink("../loop", s.join("loop/self")).unwrap();
    let mut o = ConvertOptions::new(Source::ImageFolder(s.clone()), dir.path().join("o"));
    o.check_decode = false;
    let r = convert_within(o, Duration::from_secs(60)).unwrap();
    assert_eq!(r.written, 1, "{r:?}");
    let got = reasons(&r);
    assert_eq!(got.len(), 2, "{got:?}");
    for (name, reason) in &got {
        assert!(["self", "up"].contains(&name.as_str()), "{got:?}");
        assert!(reason.contains("symlink loop"), "{got:?}");
    }
}

#[test]
fn fifo_dev_zero_and_huge_file_in_class_folder_are_skipped_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s");
    std::fs::create_dir_all(s.join("a")).unwrap();
    std::fs::copy(photo("caer/tent.jpg"), s.join("a/ok.jpg")).unwrap();
    let fifo = s.join("a/pipe.jpg");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::os::unix::fs::symlink("/dev/zero", s.join("a/zero.jpg")).unwrap();
    // Sparse: 3 GiB to the file system, nothing on disk.
    std::fs::File::create(s.join("a/huge.jpg"))
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    let mut o = ConvertOptions::new(Source::ImageFolder(s), dir.path().join("o"));
    o.check_decode = false;
    let r = convert_within(o, Duration::from_secs(60)).unwrap();
    assert_eq!(r.written, 1, "{r:?}");
    let got = reasons(&r);
    let reason = |n: &str| got.iter().find(|(f, _)| f == n).unwrap().1.clone();
    assert!(reason("pipe.jpg").contains("FIFO"), "{got:?}");
    assert!(reason("zero.jpg").contains("character device"), "{got:?}");
    assert!(reason("huge.jpg").contains("--max-file-size"), "{got:?}");
    // Nothing of the huge file was read.
    assert!(r.input_bytes < 10 << 20, "{r:?}");
}

#[test]
fn max_file_size_is_settable_and_applies_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s");
    std::fs::create_dir_all(s.join("a")).unwrap();
    std::fs::copy(photo("caer/tent.jpg"), s.join("a/big.jpg")).unwrap();
    let size = std::fs::metadata(s.join("a/big.jpg")).unwrap().len();
    // A smaller one, so that the conversion writes a record (one of nothing fails).
    std::fs::copy(photo("caer/black_cat.jpg"), s.join("a/small.jpg")).unwrap();
    let mut o = ConvertOptions::new(Source::ImageFolder(s), dir.path().join("o"));
    o.max_file_size = size - 1;
    let r = convert_within(o, Duration::from_secs(60)).unwrap();
    assert_eq!(r.written, 1);
    assert!(
        r.skipped[0].reason.contains("over the input size limit"),
        "{r:?}"
    );
}

#[test]
fn list_label_4294967295_is_refused_before_allocating_classes() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.csv");
    std::fs::write(&list, "caer/puppy.jpg,0\ncaer/tent.jpg,4294967295\n").unwrap();
    let o = ConvertOptions::new(
        Source::List {
            root: SAMPLE.into(),
            list,
        },
        dir.path().join("o"),
    );
    let e = convert_within(o, Duration::from_secs(60)).unwrap_err();
    assert!(matches!(e, FormatError::BadSource { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("line 2") && msg.contains("4294967295"),
        "{msg}"
    );
}

#[test]
fn second_writer_on_a_locked_output_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    std::fs::create_dir_all(&out).unwrap();
    // What a running conversion holds (an flock on the directory).
    let held = std::fs::File::open(&out).unwrap();
    fs4::FileExt::try_lock(&held).unwrap();
    for resume in [false, true] {
        let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), &out);
        o.resume = resume;
        o.check_decode = false;
        let e = convert_within(o, Duration::from_secs(60)).unwrap_err();
        assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
        assert!(e.to_string().contains("another `stoker convert`"), "{e}");
    }
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    drop(held);
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), &out);
    o.check_decode = false;
    assert_eq!(convert(&o, &NoProgress).unwrap().written, 15);
}

#[test]
fn crash_while_journal_is_replaced_leaves_a_resumable_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), dir.path().join("clean"));
    o.check_decode = false;
    o.shards = Some(5);
    convert(&o, &NoProgress).unwrap();

    let mut k = o.clone();
    k.out = dir.path().join("killed");
    k.fail_after = Some(7);
    assert!(matches!(
        convert(&k, &NoProgress),
        Err(FormatError::Injected { .. })
    ));
    // A crash between writing the new journal and renaming it over the old one.
    std::fs::write(k.out.join(".stoker-convert.json.tmp"), b"{\"fingerpr").unwrap();
    k.fail_after = None;
    k.resume = true;
    let r = convert(&k, &NoProgress).unwrap();
    assert!(r.resumed > 0, "{r:?}");
    let names = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&o.out), names(&k.out));
    for n in names(&o.out) {
        assert!(
            std::fs::read(o.out.join(&n)).unwrap() == std::fs::read(k.out.join(&n)).unwrap(),
            "{n:?} differs"
        );
    }
}

/// A dataset of the 15 sample photos in one shard, labels from `label(i)`.
fn sample_dataset(out: &Path, label: impl Fn(usize) -> u32) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for class in ["caer", "leptonica", "opencv"] {
        let mut v: Vec<String> = std::fs::read_dir(Path::new(SAMPLE).join(class))
            .unwrap()
            .map(|e| format!("{class}/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        v.sort();
        files.extend(v);
    }
    let list_dir = tempfile::tempdir().unwrap();
    let list = list_dir.path().join("list.csv");
    let text: String = files
        .iter()
        .enumerate()
        .map(|(i, f)| format!("{f},{}\n", label(i)))
        .collect();
    std::fs::write(&list, text).unwrap();
    let mut o = ConvertOptions::new(
        Source::List {
            root: SAMPLE.into(),
            list,
        },
        out,
    );
    o.check_decode = false;
    assert_eq!(convert(&o, &NoProgress).unwrap().written, 15);
    files
}

/// Every read path of a dataset that opened: all records through `get` and their CRCs.
fn read_everything(ds: &Dataset) {
    if let Ok(r) = ds.reader() {
        for i in 0..ds.len() {
            if let Ok(rec) = r.get(i) {
                let _ = rec.check_crc();
            }
        }
    }
}

#[test]
fn damaged_lmdb_meta_pages_no_longer_crash_open_verify_or_reads() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    sample_dataset(&out, |i| (i % 3) as u32);
    let shard = out.join("shard-00000.lmdb");
    let orig = std::fs::read(&shard).unwrap();
    let page = 4096;
    let (mut refused, mut found_by_verify) = (0, 0);
    // Every byte of the two meta pages, one bit each, written in place (the same inode, as
    // a disk or a careless tool would damage it).
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    for pos in 0..2 * page {
        let bit = 1u8 << (pos % 8);
        std::os::unix::fs::FileExt::write_all_at(&f, &[orig[pos] ^ bit], pos as u64).unwrap();
        match Dataset::open(&out) {
            Err(e) => {
                refused += 1;
                if let FormatError::DamagedShard { reason, .. } = &e {
                    assert!(
                        reason.contains("not opened") && reason.contains("stoker verify"),
                        "{e}"
                    );
                }
            }
            Ok(ds) => {
                read_everything(&ds);
                let v = verify(&ds, false).unwrap();
                assert!(!v.ok(), "flip at byte {pos} not reported");
                found_by_verify += 1;
            }
        }
        std::os::unix::fs::FileExt::write_all_at(&f, &orig[pos..pos + 1], pos as u64).unwrap();
    }
    println!("meta-page flips: {refused} refused on open, {found_by_verify} opened and reported by verify");
    assert!(refused > 100, "{refused}");
    assert!(verify(&Dataset::open(&out).unwrap(), false).unwrap().ok());
}

/// The pages of `shard` (`psize` bytes each) that hold the record tree: branch (flag 0x01)
/// and leaf (0x02) pages, found by their headers.
fn tree_pages(shard: &[u8], psize: usize) -> Vec<usize> {
    (2..shard.len() / psize)
        .filter(|&p| {
            let h = &shard[p * psize..];
            u64::from_le_bytes(h[..8].try_into().unwrap()) == p as u64
                && matches!(u16::from_le_bytes([h[10], h[11]]), 1 | 2)
        })
        .collect()
}

/// 600 small raw records in `dir`: leaf pages under a branch page, as in any real shard.
/// Returns the shard's path and bytes.
fn small_records(dir: &Path) -> (PathBuf, Vec<u8>) {
    let mut w = DatasetWriter::create(dir, WriterOptions::default()).unwrap();
    for i in 0..600u32 {
        let meta = RecordMeta {
            encoding: Encoding::Raw,
            height: 1,
            width: 4,
            channels: 3,
            label: 0,
        };
        let payload: Vec<u8> = (0..12).map(|b| (i as u8).wrapping_add(b)).collect();
        w.push(meta, &payload).unwrap();
    }
    w.finish(vec!["c".into()], Provenance::stoker("test"))
        .unwrap();
    let shard = dir.join("shard-00000.lmdb");
    let bytes = std::fs::read(&shard).unwrap();
    (shard, bytes)
}

#[test]
fn damaged_branch_and_leaf_pages_no_longer_crash_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (shard, orig) = small_records(dir.path());
    let psize = 4096;
    let pages = tree_pages(&orig, psize);
    assert!(
        pages.len() >= 3,
        "want a branch page and leaves, got {pages:?}"
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    let (mut tried, mut refused, mut failed_reads) = (0, 0, 0u64);
    // Each page's header and node pointers, and the first node headers at `upper`:
    // `lower` zeroed and node flags of 0x7f/0xfe/0xff each crashed LMDB's lookup.
    for &p in &pages {
        let upper = usize::from(u16::from_le_bytes([
            orig[p * psize + 14],
            orig[p * psize + 15],
        ]));
        let bytes = (0..48).chain(upper..(upper + 48).min(psize));
        for pos in bytes.map(|b| p * psize + b) {
            for value in [0x00, 0xff, 0x7f, orig[pos] ^ 0x80] {
                if value == orig[pos] {
                    continue;
                }
                std::os::unix::fs::FileExt::write_all_at(&f, &[value], pos as u64).unwrap();
                tried += 1;
                match Dataset::open(dir.path()) {
                    Err(_) => refused += 1,
                    Ok(ds) => {
                        let r = ds.reader().unwrap();
                        for i in 0..ds.len() {
                            failed_reads += u64::from(r.get(i).is_err());
                        }
                    }
                }
                std::os::unix::fs::FileExt::write_all_at(&f, &orig[pos..pos + 1], pos as u64)
                    .unwrap();
            }
        }
    }
    println!(
        "tree-page damage: {tried} tried over {} pages, {refused} refused on open, {failed_reads} record reads failed with an error",
        pages.len()
    );
    assert!(failed_reads > 0);
    let ds = Dataset::open(dir.path()).unwrap();
    assert!(verify(&ds, false).unwrap().ok());
}

#[test]
fn relabelled_shard_swapped_into_another_dataset_fails_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    sample_dataset(&a, |i| (i % 2) as u32);
    sample_dataset(&b, |i| ((i + 1) % 2) as u32);
    let (sa, sb) = (a.join("shard-00000.lmdb"), b.join("shard-00000.lmdb"));
    let (da, db) = (std::fs::read(&sa).unwrap(), std::fs::read(&sb).unwrap());
    assert_eq!(da.len(), db.len());
    assert_ne!(da, db);
    // The attack on format version 1: equal whole-file CRC32C despite different labels.
    assert_eq!(crc32c::crc32c(&da), crc32c::crc32c(&db));
    std::fs::copy(&sb, &sa).unwrap();
    let v = verify(&Dataset::open(&a).unwrap(), true).unwrap();
    assert!(!v.ok(), "a shard with other labels passed verify");
    assert!(v.bad[0].problem.contains("xxh3-64"), "{:?}", v.bad);
}

#[test]
fn manifest_samples_2_pow_63_is_refused_naming_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    sample_dataset(&out, |_| 0);
    let path = out.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["samples"] = serde_json::json!(1u64 << 63);
    m["shards"][0]["count"] = serde_json::json!(1u64 << 63);
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let e = Dataset::open(&out).unwrap_err();
    assert!(matches!(e, FormatError::InvalidManifest { .. }), "{e}");
    assert!(e.to_string().contains("9223372036854775808"), "{e}");
}

#[test]
fn manifest_raw_size_past_a_record_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    let meta = RecordMeta {
        encoding: Encoding::Raw,
        height: 2,
        width: 2,
        channels: 3,
        label: 0,
    };
    w.push(meta, &[7; 12]).unwrap();
    w.finish(vec!["c".into()], Provenance::stoker("t")).unwrap();
    // Opened fine, and the GPU path sized its staging by `height × width × channels`
    // in usize: an overflow panic (debug) or a wrapped size (release).
    let path = dir.path().join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["raw_size"] = serde_json::json!({"height": u32::MAX, "width": u32::MAX, "channels": 255});
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let e = Dataset::open(dir.path()).unwrap_err();
    assert!(
        matches!(e, FormatError::InvalidManifest { .. }) && e.to_string().contains("4 GiB"),
        "{e}"
    );
}

#[test]
fn shard_truncated_or_replaced_after_open_is_an_error_not_sigbus() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    sample_dataset(&out, |_| 0);
    let shard = out.join("shard-00000.lmdb");
    let orig = std::fs::read(&shard).unwrap();

    let ds = Dataset::open(&out).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(orig.len() as u64 / 2)
        .unwrap();
    let e = ds.reader().unwrap_err();
    assert!(matches!(e, FormatError::ShardChanged { .. }), "{e}");
    assert!(e.to_string().contains("size"), "{e}");
    let v = verify(&ds, false);
    assert!(v.is_err() || !v.unwrap().ok());
    drop(ds);

    // `cp` of another file over it, then a new open: refused (size) or opened afresh.
    std::fs::write(&shard, &orig).unwrap();
    let ds = Dataset::open(&out).unwrap();
    let tmp = out.join("other");
    std::fs::write(&tmp, &orig).unwrap();
    std::fs::rename(&tmp, &shard).unwrap();
    let e = ds.reader().unwrap_err();
    assert!(e.to_string().contains("replaced"), "{e}");
}

#[test]
fn a_dataset_replaced_on_disk_reopens_while_the_old_one_is_still_held() {
    // The natural swap in a long job: `new = Loader(path); old.close()`. The new open was
    // refused ("already open in this process with different contents") for as long as
    // anything held the old dataset, a saved exception's traceback included.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    sample_dataset(&out, |_| 0);
    let old = Dataset::open(&out).unwrap();
    let old_reader = old.reader().unwrap();
    let old_first = old_reader.get(0).unwrap().payload.to_vec();

    let next = dir.path().join("next");
    sample_dataset(&next, |i| (i % 2) as u32);
    let away = dir.path().join("away");
    std::fs::rename(&out, &away).unwrap();
    std::fs::rename(&next, &out).unwrap();
    std::fs::remove_dir_all(&away).unwrap();

    let new = Dataset::open(&out).unwrap();
    assert!(verify(&new, false).unwrap().ok());
    assert_eq!(new.reader().unwrap().get(1).unwrap().header.label, 1);
    // The old one reads what it mapped, also through readers made after the swap (a
    // loader's next epoch): its whole dataset moved, so its own files are consistent.
    // (It failed "replaced by another file", ending a training job that README says
    // reads the old dataset until it is closed.)
    assert_eq!(old_reader.get(0).unwrap().payload, &old_first[..]);
    let after = old.reader().expect("the old dataset reads on after a swap");
    for i in 0..old.len() {
        let record = after.get(i).unwrap();
        record.check_crc().unwrap();
        assert_eq!(
            record.header.label, 0,
            "record {i} read from the new dataset"
        );
    }
    old.check_unchanged_at(3).unwrap();
    // Opened again: the new files are shared, not mapped twice.
    let again = Dataset::open(&out).unwrap();
    let (r1, r2) = (new.reader().unwrap(), again.reader().unwrap());
    assert_eq!(r2.get(1).unwrap().header.label, 1);
    assert_eq!(
        r1.get(1).unwrap().payload.as_ptr(),
        r2.get(1).unwrap().payload.as_ptr()
    );
}

/// `cp` over a dataset in use, or an I/O error of the storage under a mapped page: the
/// reads that hit it are errors for their records, and the process lives on.
#[test]
fn shard_cut_short_while_a_reader_reads_fails_its_records_not_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    sample_dataset(&out, |_| 0);
    let shard = out.join("shard-00000.lmdb");
    let orig = std::fs::read(&shard).unwrap();
    let len = orig.len() as u64;
    let ds = Dataset::open(&out).unwrap();
    let reader = ds.reader().unwrap();
    let read = |i: u64| {
        reader
            .get(i)
            .and_then(|r| r.check_crc())
            .and_then(|()| reader.check_read(i))
    };
    assert!((0..ds.len()).all(|i| read(i).is_ok()));
    // Evict the file's pages, so that reads fault again, then cut it.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    // SAFETY: posix_fadvise has no memory-safety preconditions.
    unsafe {
        libc::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        );
    }
    file.set_len(len / 3).unwrap();
    let outcomes: Vec<_> = (0..ds.len()).map(read).collect();
    let unreadable = outcomes
        .iter()
        .filter(|o| matches!(o, Err(FormatError::ShardUnreadable { .. })))
        .count();
    assert!(unreadable > 0, "{outcomes:?}");
    let e = outcomes
        .iter()
        .rev()
        .find_map(|o| o.as_ref().err())
        .unwrap();
    assert!(
        e.to_string()
            .contains("could not be read while it was mapped"),
        "{e}"
    );
    // Every record read after the first failed page is refused, not just the lost ones.
    let first = outcomes.iter().position(Result::is_err).unwrap();
    assert!(outcomes[first..].iter().all(Result::is_err), "{outcomes:?}");

    // The file as it was (as after an I/O error, which changes nothing on disk): the map
    // still holds zeros where the reads failed, so the dataset stays refused...
    std::fs::write(&shard, &orig).unwrap();
    let e = ds.check_unchanged().unwrap_err();
    assert!(matches!(e, FormatError::ShardUnreadable { .. }), "{e}");
    assert!(matches!(
        ds.reader().unwrap_err(),
        FormatError::ShardUnreadable { .. }
    ));
    // ...until it is opened again, even while the old handle lives.
    let again = Dataset::open(&out).unwrap();
    let fresh = again.reader().unwrap();
    assert!(fresh.get(0).unwrap().check_crc().is_ok());
    assert!(fresh.check_read(0).is_ok());
    drop(ds);
}

/// A crafted dataset whose manifest agrees with a forged shard: a leaf node claims a 256 MiB
/// record (its header agreeing) inside a shard of a few hundred kB. LMDB trusts the node and
/// hands out a slice past the end of the map, so `verify` walking it through LMDB read past
/// the file and died of SIGBUS; stoker's own walk names the damage.
#[test]
fn verify_survives_a_forged_shard_whose_manifest_digest_matches() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), &out);
    o.shard_bytes = 200_000;
    o.check_decode = false;
    convert(&o, &NoProgress).unwrap();
    let shard = out.join("shard-00002.lmdb");
    let mut d = std::fs::read(&shard).unwrap();
    let ps = 4096;
    let u16_at = |d: &[u8], o: usize| u16::from_le_bytes([d[o], d[o + 1]]) as usize;
    // The first leaf page (flag 2, not an overflow page), its first node a big value.
    let leaf = (0..d.len() / ps)
        .find(|&i| {
            u64::from_le_bytes(d[i * ps..i * ps + 8].try_into().unwrap()) == i as u64
                && u16_at(&d, i * ps + 10) & 2 != 0
                && u16_at(&d, i * ps + 10) & 4 == 0
        })
        .unwrap();
    let node = leaf * ps + u16_at(&d, leaf * ps + 16);
    assert_ne!(u16_at(&d, node + 4) & 1, 0, "a value on overflow pages");
    let overflow = u64::from_le_bytes(d[node + 16..node + 24].try_into().unwrap()) as usize;
    let header = overflow * ps + 16;
    let forged: u32 = 1 << 28;
    d[header + 20..header + 24].copy_from_slice(&forged.to_le_bytes());
    let crc = crc32c::crc32c(&d[header..header + 28]);
    d[header + 28..header + 32].copy_from_slice(&crc.to_le_bytes());
    d[node..node + 4].copy_from_slice(&(32 + forged).to_le_bytes());
    std::fs::write(&shard, &d).unwrap();
    // The manifest made to agree, as whoever crafted the shard would.
    let path = out.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["shards"][2]["xxh3"] = serde_json::json!(format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&d)));
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();

    let v = verify(&Dataset::open(&out).unwrap(), false).unwrap();
    assert!(!v.ok());
    assert!(
        v.bad.iter().any(|b| b.shard == "shard-00002.lmdb"),
        "{:?}",
        v.bad
    );
}

#[test]
fn verify_rejects_labels_outside_an_empty_class_list() {
    use stoker_formats::{DatasetWriter, Encoding, Provenance, RecordHeader, WriterOptions};
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    // Unchecked: `finish` refuses a label outside its classes; a dataset written by
    // another tool (or damaged) can still have one.
    // (Not decoded below: JPEG bytes or not, only the label is wrong.)
    let header = RecordHeader {
        encoding: Encoding::Jpeg,
        height: 1,
        width: 1,
        channels: 1,
        label: 0,
        payload_len: 1,
        crc32c: crc32c::crc32c(&[9]),
    };
    w.push_header_unchecked(header, &[9]).unwrap();
    w.finish(vec![], Provenance::stoker("t")).unwrap();
    let v = verify(&Dataset::open(dir.path()).unwrap(), false).unwrap();
    assert!(!v.ok());
    assert!(
        v.bad[0].problem.contains("outside the class list"),
        "{:?}",
        v.bad
    );
}

/// A list file over the 4 GiB limit (sparse here) is refused by its size, before a byte of
/// it is read: reading it first took 12.6 s and 4.2 GB to say the same.
#[test]
fn a_list_file_over_the_limit_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("huge.csv");
    std::fs::File::create(&list)
        .unwrap()
        .set_len((4 << 30) + 1)
        .unwrap();
    let o = ConvertOptions::new(
        Source::List {
            root: SAMPLE.into(),
            list,
        },
        dir.path().join("o"),
    );
    let started = std::time::Instant::now();
    let e = convert_within(o, Duration::from_secs(60)).unwrap_err();
    assert!(e.to_string().contains("longer than"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn jobs_100000_and_a_device_as_list_file_are_refused_before_use() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), dir.path().join("o"));
    o.jobs = Some(100_000);
    let e = convert_within(o, Duration::from_secs(60)).unwrap_err();
    assert!(
        matches!(&e, FormatError::InvalidOptions(m) if m.contains("100000")),
        "{e}"
    );
    let o = ConvertOptions::new(
        Source::List {
            root: SAMPLE.into(),
            list: "/dev/zero".into(),
        },
        dir.path().join("o2"),
    );
    let e = convert_within(o, Duration::from_secs(60)).unwrap_err();
    assert!(
        matches!(&e, FormatError::BadSource { reason, .. } if reason.contains("not a file")),
        "{e}"
    );
}

#[test]
fn format_version_1_datasets_are_still_read_and_verified_by_crc32c() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    sample_dataset(&out, |i| (i % 3) as u32);
    // Rewrite the manifest as a version 1 build wrote it: `crc32c` numbers, no `xxh3`.
    let path = out.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["format_version"] = serde_json::json!(1);
    for s in m["shards"].as_array_mut().unwrap() {
        let bytes = std::fs::read(out.join(s["file"].as_str().unwrap())).unwrap();
        s.as_object_mut().unwrap().remove("xxh3");
        s["crc32c"] = serde_json::json!(crc32c::crc32c(&bytes));
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let v = verify(&Dataset::open(&out).unwrap(), true).unwrap();
    assert!(v.ok(), "{:?}", v.bad);
    assert!(v.notes[0].contains("format version 1"), "{:?}", v.notes);
    // Its CRC32C still finds a flipped payload byte.
    let shard = out.join("shard-00000.lmdb");
    let mut b = std::fs::read(&shard).unwrap();
    let last = b.len() - 5000;
    b[last] ^= 0x40;
    std::fs::remove_file(&shard).unwrap();
    std::fs::write(&shard, &b).unwrap();
    let v = verify(&Dataset::open(&out).unwrap(), false).unwrap();
    assert!(!v.ok());
    assert!(v.bad[0].problem.contains("CRC32C"), "{:?}", v.bad);
}

#[test]
fn a_manifest_payload_total_that_the_records_do_not_hold_fails_verify() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    sample_dataset(&out, |i| (i % 3) as u32);
    assert!(verify(&Dataset::open(&out).unwrap(), false).unwrap().ok());
    let path = out.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["payload_bytes"] = 1.into();
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let v = verify(&Dataset::open(&out).unwrap(), false).unwrap();
    assert!(!v.ok());
    assert!(
        v.bad
            .iter()
            .any(|b| b.shard == "manifest.json" && b.problem.contains("payload_bytes is 1")),
        "{:?}",
        v.bad
    );
}

#[test]
fn inspect_counts_the_records_of_a_damaged_page_and_summarizes_the_rest() {
    // Before, the first unreadable record ended `inspect` (and `stoker inspect`) with
    // that record's error and no summary at all.
    let dir = tempfile::tempdir().unwrap();
    let (shard, orig) = small_records(dir.path());
    let leaves: Vec<usize> = tree_pages(&orig, 4096)
        .into_iter()
        .filter(|&p| orig[p * 4096 + 10] == 2)
        .collect();
    assert!(leaves.len() >= 2, "{leaves:?}");
    // The first leaf page names itself as another page: its records cannot be read.
    let at = (leaves[0] * 4096) as u64;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[orig[leaves[0] * 4096] ^ 1], at).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    let r = stoker_formats::inspect(&ds).unwrap();
    assert!(r.unreadable > 0 && r.unreadable < 600, "{}", r.unreadable);
    assert_eq!(r.per_class[0].count, 600 - r.unreadable);
    assert_eq!(r.encodings["raw"], 600 - r.unreadable);
    let first = r.first_unreadable.unwrap();
    assert!(
        first.starts_with("record 0: ") && first.contains("damaged"),
        "{first}"
    );
}

/// Moves `from` (the source, or the output) away once the source is listed, as `mv`, an
/// unmount or a network file system going away would, mid-run.
struct MoveWhenListed {
    from: PathBuf,
    to: PathBuf,
}

impl stoker_formats::Progress for MoveWhenListed {
    fn start(&self, _inputs: u64) {
        std::fs::rename(&self.from, &self.to).unwrap();
    }
}

#[test]
fn a_source_moved_away_mid_run_stops_the_conversion_resumably() {
    // Every input after the move was skipped as "unreadable: No such file or directory",
    // and the conversion wrote a finished dataset of the rest, exit 0; --resume then said
    // "nothing to do".
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    copy_tree(&stoker_testdata::dir().join("imagefolder"), &src);
    let out = dir.path().join("out");
    let mut o = ConvertOptions::new(Source::ImageFolder(src.clone()), &out);
    o.shard_bytes = 64 << 10;
    let moved = MoveWhenListed {
        from: src.clone(),
        to: dir.path().join("elsewhere"),
    };
    let e = convert(&o, &moved).unwrap_err();
    assert!(
        matches!(&e, FormatError::BadSource { reason, .. } if reason.contains("cannot be found any more")),
        "{e}"
    );
    assert!(e.to_string().contains("--resume"), "{e}");
    assert!(!out.join("manifest.json").exists());
    std::fs::rename(dir.path().join("elsewhere"), &src).unwrap();
    o.resume = true;
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!(
        (r.written, r.skipped.len()),
        (r.inputs, 0),
        "{:?}",
        r.skipped
    );
    assert!(verify(&Dataset::open(&out).unwrap(), false).unwrap().ok());
}

/// A copy of the folder tree `from` at `to` (files and folders only).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Store-mode options converting the test photos into `out`, in shards of `shard_bytes`.
fn photo_options(out: &Path, shard_bytes: u64) -> ConvertOptions {
    let mut o = ConvertOptions::new(
        Source::ImageFolder(stoker_testdata::dir().join("imagefolder")),
        out,
    );
    o.check_decode = false;
    o.shard_bytes = shard_bytes;
    o
}

#[test]
fn a_shard_linked_to_another_by_mistake_is_named_by_its_own_name() {
    // Errors named the link's target (the sound shard), not the manifest's entry.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    convert(&photo_options(&out, 1 << 20), &NoProgress).unwrap();
    let sizes: Vec<u64> = Dataset::open(&out)
        .unwrap()
        .manifest()
        .shards
        .iter()
        .map(|s| s.bytes)
        .collect();
    let (a, b) = (0..sizes.len() - 1)
        .find_map(|i| (sizes[i] != sizes[i + 1]).then_some((i, i + 1)))
        .expect("two shards of different sizes");
    let name = |i: usize| format!("shard-{i:05}.lmdb");
    std::fs::remove_file(out.join(name(b))).unwrap();
    std::os::unix::fs::symlink(name(a), out.join(name(b))).unwrap();
    let e = Dataset::open(&out).unwrap_err().to_string();
    assert!(e.contains(&name(b)) && !e.contains(&name(a)), "{e}");
}

#[test]
fn an_output_moved_away_mid_run_is_named_and_resumes_where_it_went() {
    // The error was "out/shard-00000.lmdb.tmp: No such file or directory" alone.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let moved = dir.path().join("moved");
    let mut o = photo_options(&out, 64 << 10);
    let mover = MoveWhenListed {
        from: out.clone(),
        to: moved.clone(),
    };
    let e = convert(&o, &mover).unwrap_err().to_string();
    assert!(
        e.contains("output directory was removed or moved away"),
        "{e}"
    );
    o.out = moved.clone();
    o.resume = true;
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!(r.written, r.inputs);
    assert!(verify(&Dataset::open(&moved).unwrap(), false).unwrap().ok());
}
