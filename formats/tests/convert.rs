//! The converter on real files from the test corpus (`<repo>/testdata`): round trip, determinism, bad input,
//! strictness, interruption and resume, corruption detection, audit, Python reader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stoker_formats::{
    convert, inspect, verify, ConvertOptions, ConvertReport, Dataset, Encoding, FormatError,
    NoProgress, Source,
};

fn data(rel: &str) -> PathBuf {
    stoker_testdata::dir().join(rel)
}

fn folder_opts(src: &Path, out: &Path) -> ConvertOptions {
    ConvertOptions::new(Source::ImageFolder(src.to_path_buf()), out)
}

/// The ImageFolder order: classes sorted, files sorted within each. The corpus's class
/// folders have no subfolders, whose order `source_reading.rs` checks.
fn sorted_files(root: &Path) -> Vec<(PathBuf, u32)> {
    fn walk(d: &Path, label: u32, out: &mut Vec<(PathBuf, u32)>) {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        for p in v {
            if p.is_dir() {
                walk(&p, label, out)
            } else {
                out.push((p, label))
            }
        }
    }
    let mut classes: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    classes.sort();
    let mut out = Vec::new();
    for (i, c) in classes.iter().enumerate() {
        walk(c, i as u32, &mut out);
    }
    out
}

fn check_accounting(r: &ConvertReport) {
    assert_eq!(
        r.written + r.skipped.len() as u64,
        r.inputs,
        "written + skipped must equal inputs: {r:?}"
    );
}

#[test]
fn round_trip_stores_original_jpeg_bytes() {
    let src = data("imagefolder");
    let out = tempfile::tempdir().unwrap();
    let ds_dir = out.path().join("ds");
    let r = convert(&folder_opts(&src, &ds_dir), &NoProgress).unwrap();
    check_accounting(&r);
    let files = sorted_files(&src);
    assert_eq!(r.inputs, files.len() as u64);
    assert_eq!(r.written, r.inputs, "skipped: {:?}", r.skipped);
    assert_eq!(r.stored, r.written);
    // ORIGIN.tsv sits in the root, in no class: reported as ignored, not an input.
    assert_eq!(r.ignored, [src.join("ORIGIN.tsv")]);

    let ds = Dataset::open(&ds_dir).unwrap();
    assert_eq!(ds.len(), files.len() as u64);
    let m = ds.manifest();
    assert_eq!(m.encoding, Encoding::Jpeg);
    assert!(m.classes.len() >= 20);
    let reader = ds.reader().unwrap();
    for (i, (path, label)) in files.iter().enumerate() {
        let rec = reader.get(i as u64).unwrap();
        let original = std::fs::read(path).unwrap();
        assert!(
            rec.payload == &original[..],
            "record {i} differs from {path:?}"
        );
        assert_eq!(rec.header.label, *label);
        rec.check_crc().unwrap();
        let info = stoker_decode::probe(&original, &Default::default()).unwrap();
        assert_eq!(
            (rec.header.width, rec.header.height),
            (info.width, info.height)
        );
        assert_eq!(
            m.classes[*label as usize],
            path.parent()
                .unwrap()
                .strip_prefix(&src)
                .unwrap()
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy()
        );
    }
    assert!(verify(&ds, true).unwrap().ok());
    let ins = inspect(&ds).unwrap();
    assert_eq!(ins.samples, r.written);
    assert_eq!(
        ins.per_class.iter().map(|c| c.count).sum::<u64>(),
        r.written
    );
    assert_eq!(ins.per_class.len() as u64, ins.classes);
}

#[test]
fn conversion_is_deterministic_across_runs_and_thread_counts() {
    let src = data("imagefolder");
    let out = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for (n, jobs) in [(0, 1), (1, 2)] {
        let d = out.path().join(format!("run{n}"));
        let mut o = folder_opts(&src, &d);
        o.jobs = Some(jobs);
        o.shard_bytes = 1 << 20; // several shards
        o.max_side = Some(400); // some re-encoding too
        o.check_decode = false;
        convert(&o, &NoProgress).unwrap();
        dirs.push(d);
    }
    let a = stoker_testdata::files_in(&dirs[0]);
    let b = stoker_testdata::files_in(&dirs[1]);
    assert!(a.len() > 3, "expected several shards: {:?}", a.keys());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        assert!(bytes == &b[name], "{name} differs between runs");
    }
}

/// A temporary ImageFolder with one of each kind of bad input next to good ones.
fn bad_input_tree() -> (tempfile::TempDir, usize) {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(stoker_testdata::bench_dir().join("00000.jpg")).unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("01-good.jpg"), &good).unwrap();
    std::fs::write(a.join("02-truncated.jpg"), &good[..good.len() / 3]).unwrap();
    std::fs::write(a.join("03-empty.jpg"), b"").unwrap();
    std::fs::write(a.join("04-notes.txt"), b"this is not an image\n").unwrap();
    std::fs::copy(
        data("conformance/corrupt/gdkpixbuf__issue205.jpg"),
        a.join("05-huge-header.jpg"),
    )
    .unwrap();
    std::os::unix::fs::symlink(dir.path().join("missing.jpg"), a.join("06-dangling.jpg")).unwrap();
    let png = find_png();
    std::fs::copy(&png, b.join("07-good.png")).unwrap();
    let png_bytes = std::fs::read(&png).unwrap();
    std::fs::write(b.join("08-corrupt.png"), &png_bytes[..png_bytes.len() / 2]).unwrap();
    std::fs::write(b.join("09-good.jpg"), &good).unwrap();
    (dir, 9)
}

fn find_png() -> PathBuf {
    let refs = data("conformance/ref");
    let mut v: Vec<_> = std::fs::read_dir(&refs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    v.sort();
    v.into_iter()
        .find(|p| std::fs::metadata(p).unwrap().len() < 200_000)
        .expect("a reference PNG")
}

/// A directory whose path is longer than the system takes (PATH_MAX) cannot be read, and
/// hides every image under it while it counts as one input: its skip says so (it said
/// "unreadable: File name too long", like a file's).
#[test]
fn a_directory_past_path_max_is_skipped_saying_nothing_under_it_was_converted() {
    use rustix::fs::{mkdirat, openat, Mode, OFlags};
    let tmp = tempfile::tempdir().unwrap();
    let photo = std::fs::read(data("imagefolder/caer/tent.jpg")).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    // 20 levels of 250-byte names below `a`, a photo in each: past 4,096 bytes from
    // the walk's root, made through descriptors as no path could name them.
    let dir = OFlags::DIRECTORY | OFlags::RDONLY;
    let mut fd = rustix::fs::open(src.join("a"), dir, Mode::empty()).unwrap();
    for _ in 0..20 {
        let file = openat(
            &fd,
            "0.jpg",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::RUSR | Mode::WUSR,
        );
        rustix::io::write(file.unwrap(), &photo).unwrap();
        let name = "d".repeat(250);
        mkdirat(&fd, name.as_str(), Mode::RWXU).unwrap();
        fd = openat(&fd, name.as_str(), dir, Mode::empty()).unwrap();
    }
    let out = tmp.path().join("out");
    let r = convert(&folder_opts(&src, &out), &NoProgress).unwrap();
    check_accounting(&r);
    assert!(r.written > 0 && r.written < 20, "{r:?}");
    let dirs: Vec<_> = r
        .skipped
        .iter()
        .filter(|s| s.path.file_name().is_some_and(|n| n.len() == 250))
        .collect();
    assert_eq!(dirs.len(), 1, "{:?}", r.skipped);
    assert!(
        dirs[0].reason.starts_with("unreadable directory:")
            && dirs[0]
                .reason
                .ends_with("nothing under it was listed or converted"),
        "{}",
        dirs[0].reason
    );
}

#[test]
fn bad_inputs_are_skipped_with_reasons_and_counted() {
    let (src, n) = bad_input_tree();
    let out = tempfile::tempdir().unwrap();
    let r = convert(&folder_opts(src.path(), out.path()), &NoProgress).unwrap();
    check_accounting(&r);
    assert_eq!(r.inputs, n as u64);
    let reasons: BTreeMap<String, String> = r
        .skipped
        .iter()
        .map(|s| {
            (
                s.path.file_name().unwrap().to_string_lossy().into_owned(),
                s.reason.clone(),
            )
        })
        .collect();
    let expect = [
        ("02-truncated.jpg", "truncated"),
        ("03-empty.jpg", "empty"),
        ("04-notes.txt", "not an image"),
        ("05-huge-header.jpg", "too large"),
        ("06-dangling.jpg", "unreadable"),
        ("08-corrupt.png", "corrupt"),
    ];
    assert_eq!(reasons.len(), expect.len(), "{reasons:#?}");
    for (file, word) in expect {
        let reason = reasons
            .get(file)
            .unwrap_or_else(|| panic!("{file} not skipped"));
        assert!(reason.contains(word), "{file}: {reason:?} lacks {word:?}");
    }
    assert_eq!(r.written, 3);
    let ds = Dataset::open(out.path()).unwrap();
    let rd = ds.reader().unwrap();
    // Labels follow the inputs that were written: a, b (png), b.
    let labels: Vec<u32> = (0..3).map(|i| rd.get(i).unwrap().header.label).collect();
    assert_eq!(labels, [0, 1, 1]);
    // The PNG was decoded and stored as a baseline JPEG.
    let png_rec = rd.get(1).unwrap();
    let info = stoker_decode::probe(png_rec.payload, &Default::default()).unwrap();
    assert!(info.hardware_decodable());
    assert_eq!(r.audit.other_images, 1);
    assert!(verify(&ds, true).unwrap().ok());
}

/// Truncation is judged on the primary image, whatever follows it: a video appended to a
/// photo (a motion photo) holds marker-like bytes but no end-of-image marker after them,
/// and a cut-off photo followed by a whole one (a damaged multi-picture file) still ends early.
#[test]
fn truncation_is_judged_on_the_primary_image_not_on_appended_data() {
    let good = std::fs::read(stoker_testdata::bench_dir().join("00001.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    std::fs::create_dir_all(&a).unwrap();
    let mut motion = good.clone();
    motion.extend_from_slice(b"\0\0\0\x18ftypmp42\0\0\0\0");
    motion.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    motion.extend_from_slice(&[0xFF, 0xDA, 0x00, 0x0C, 0x03]);
    std::fs::write(a.join("1-motion.jpg"), &motion).unwrap();
    let mut cut_then_whole = good[..good.len() / 2].to_vec();
    cut_then_whole.extend_from_slice(&good);
    std::fs::write(a.join("2-cut-then-whole.jpg"), &cut_then_whole).unwrap();

    let out = tempfile::tempdir().unwrap();
    let r = convert(&folder_opts(dir.path(), out.path()), &NoProgress).unwrap();
    check_accounting(&r);
    assert_eq!(r.written, 1, "{:?}", r.skipped);
    assert_eq!(r.skipped.len(), 1);
    assert!(r.skipped[0].path.ends_with("2-cut-then-whole.jpg"));
    assert!(
        r.skipped[0].reason.contains("truncated"),
        "{}",
        r.skipped[0].reason
    );
    let ds = Dataset::open(out.path()).unwrap();
    let rd = ds.reader().unwrap();
    // Stored unchanged, trailer included: the decoders stop at the primary image's end.
    assert!(rd.get(0).unwrap().payload == &motion[..]);
}

/// Regression: a JPEG cut short and closed with an end-of-image marker (a "repaired"
/// truncated download) passes the truncation check, and the decoders filled its missing
/// rows in, so convert stored it. The decode check must refuse it, and count it.
#[test]
fn a_cut_off_jpeg_closed_with_eoi_is_skipped_as_corrupt() {
    let good = std::fs::read(stoker_testdata::bench_dir().join("00000.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(a.join("1-good.jpg"), &good).unwrap();
    let mut repaired = good[..good.len() * 2 / 5].to_vec();
    repaired.extend_from_slice(&[0xFF, 0xD9]);
    assert!(stoker_formats::jpeg_is_complete(&repaired));
    std::fs::write(a.join("2-cut-eoi.jpg"), &repaired).unwrap();

    let out = tempfile::tempdir().unwrap();
    let r = convert(&folder_opts(dir.path(), out.path()), &NoProgress).unwrap();
    check_accounting(&r);
    assert_eq!(r.written, 1, "{:?}", r.skipped);
    assert_eq!(r.skipped.len(), 1);
    assert!(r.skipped[0].path.ends_with("2-cut-eoi.jpg"));
    assert!(
        r.skipped[0].reason.contains("corrupt"),
        "{}",
        r.skipped[0].reason
    );
}

#[test]
fn strict_fails_on_first_bad_input_without_manifest() {
    let (src, _) = bad_input_tree();
    let out = tempfile::tempdir().unwrap();
    let ds_dir = out.path().join("ds");
    let mut o = folder_opts(src.path(), &ds_dir);
    o.strict = true;
    let e = convert(&o, &NoProgress).unwrap_err();
    match &e {
        FormatError::StrictInput { path, .. } => {
            assert!(path.ends_with("a/02-truncated.jpg"), "{e}")
        }
        other => panic!("want StrictInput, got {other}"),
    }
    assert!(!ds_dir.join("manifest.json").exists());
    assert!(Dataset::open(&ds_dir).is_err());
}

/// The photos stored (not test-decoded) in shards of 2 MiB into `out`, uninterrupted: the
/// reference an interrupted and resumed conversion must equal. Its options and report.
fn clean_conversion(out: &Path) -> (ConvertOptions, ConvertReport) {
    let mut o = folder_opts(&data("imagefolder"), out);
    o.shard_bytes = 2 << 20;
    o.check_decode = false;
    let full = convert(&o, &NoProgress).unwrap();
    (o, full)
}

#[test]
fn interrupted_conversion_looks_unfinished_refuses_rerun_and_resumes_identically() {
    let out = tempfile::tempdir().unwrap();
    let (o, full) = clean_conversion(&out.path().join("clean"));
    let clean = o.out.clone();

    let killed = out.path().join("killed");
    let mut k = o.clone();
    k.out = killed.clone();
    k.fail_after = Some(100);
    let e = convert(&k, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { written: 100 }), "{e}");
    // Nothing looks finished: no manifest, so the dataset cannot be opened.
    assert!(!killed.join("manifest.json").exists());
    // ... and opening it says it is unfinished and how to finish it (it said only
    // "manifest.json: No such file or directory").
    let e = Dataset::open(&killed).unwrap_err();
    assert!(
        matches!(e, FormatError::UnfinishedConversion { .. })
            && e.to_string().contains("stoker convert --resume"),
        "{e}"
    );
    // Finished shards exist (the journal names them); the rest is a .tmp file.
    let names: Vec<String> = stoker_testdata::files_in(&killed).into_keys().collect();
    assert!(names.iter().any(|n| n.ends_with(".lmdb.tmp")), "{names:?}");

    // A plain rerun refuses with a clear message.
    k.fail_after = None;
    let e = convert(&k, &NoProgress).unwrap_err();
    assert!(
        matches!(&e, FormatError::OutputExists { reason, .. } if reason.contains("--resume")),
        "{e}"
    );
    // --resume finishes it, byte-identical to the uninterrupted run.
    k.resume = true;
    let resumed = convert(&k, &NoProgress).unwrap();
    assert!(resumed.resumed > 0, "{resumed:?}");
    assert_eq!(resumed.written, full.written);
    assert_eq!(resumed.audit, full.audit);
    let a = stoker_testdata::files_in(&clean);
    let b = stoker_testdata::files_in(&killed);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        assert!(bytes == &b[name], "{name} differs after resume");
    }
    // Resuming with different flags is refused.
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");
}

/// Asks to stop from its `asks`-th question on (counted from 1), whatever was written.
struct CancelOnAsk {
    asks: u64,
    asked: std::sync::atomic::AtomicU64,
}

impl stoker_formats::Progress for CancelOnAsk {
    fn cancelled(&self) -> bool {
        let n = 1 + self
            .asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        n >= self.asks
    }
}

#[test]
fn a_conversion_cancelled_before_its_first_record_leaves_nothing_and_says_so() {
    // Ctrl-C while the inputs are listed (the first question) or as the first record is
    // awaited (the second, once the output directory exists): nothing was converted, the
    // run leaves no directory, and the message must not send the user to --resume.
    let out = tempfile::tempdir().unwrap();
    for asks in [1, 2] {
        let dir = out.path().join(format!("cancelled-{asks}"));
        let o = folder_opts(&data("imagefolder"), &dir);
        let progress = CancelOnAsk {
            asks,
            asked: Default::default(),
        };
        let e = convert(&o, &progress).unwrap_err();
        assert!(
            matches!(e, FormatError::Cancelled { resumable: false }),
            "{asks}: {e}"
        );
        assert!(!e.to_string().contains("--resume"), "{asks}: {e}");
        assert!(!dir.exists(), "{asks}: {} left", dir.display());
        // A plain rerun converts.
        convert(&o, &NoProgress).unwrap();
    }
    // Resuming a partial conversion, cancelled while listing: the partial stays, and the
    // message says to resume it.
    let mut o = folder_opts(&data("imagefolder"), &out.path().join("partial"));
    o.shard_bytes = 256 << 10; // shards finished before the failure, for resume to keep
    o.fail_after = Some(40);
    convert(&o, &NoProgress).unwrap_err();
    o.fail_after = None;
    o.resume = true;
    let at_once = CancelOnAsk {
        asks: 1,
        asked: Default::default(),
    };
    assert_cancelled_resumable(&convert(&o, &at_once).unwrap_err());
    assert!(convert(&o, &NoProgress).unwrap().resumed > 0);
}

/// `e` is a cancel that kept what was converted, and says to resume it.
fn assert_cancelled_resumable(e: &FormatError) {
    assert!(
        matches!(e, FormatError::Cancelled { resumable: true }),
        "{e}"
    );
    assert!(e.to_string().contains("--resume"), "{e}");
}

/// Asks to stop once `after` inputs were written, as Python's binding does on Ctrl-C.
struct CancelAfter {
    after: u64,
    done: std::sync::atomic::AtomicU64,
}

impl stoker_formats::Progress for CancelAfter {
    fn advance(&self, inputs: u64, _bytes: u64) {
        self.done
            .fetch_add(inputs, std::sync::atomic::Ordering::Relaxed);
    }
    fn cancelled(&self) -> bool {
        self.done.load(std::sync::atomic::Ordering::Relaxed) >= self.after
    }
}

#[test]
fn a_cancelled_conversion_stops_unfinished_and_resumes_identically() {
    let out = tempfile::tempdir().unwrap();
    let (o, full) = clean_conversion(&out.path().join("clean"));
    let clean = o.out.clone();

    let stopped = out.path().join("stopped");
    let mut c = o.clone();
    c.out = stopped.clone();
    let cancel = CancelAfter {
        after: 100,
        done: Default::default(),
    };
    assert_cancelled_resumable(&convert(&c, &cancel).unwrap_err());
    assert!(!stopped.join("manifest.json").exists());
    c.resume = true;
    let resumed = convert(&c, &NoProgress).unwrap();
    assert_eq!(resumed.written, full.written);
    assert_eq!(
        stoker_testdata::files_in(&clean),
        stoker_testdata::files_in(&stopped)
    );
}

#[test]
fn flipped_byte_in_a_shard_is_caught() {
    let src = stoker_testdata::bench_dir();
    let list_dir = tempfile::tempdir().unwrap();
    let list = list_dir.path().join("list.csv");
    let lines: String = (0..12).map(|i| format!("{i:05}.jpg,{}\n", i % 2)).collect();
    std::fs::write(&list, lines).unwrap();
    let out = tempfile::tempdir().unwrap();
    let o = ConvertOptions::new(
        Source::List {
            root: src.clone(),
            list,
        },
        out.path(),
    );
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!(r.written, 12);
    let ds = Dataset::open(out.path()).unwrap();
    assert!(verify(&ds, false).unwrap().ok());
    drop(ds);

    // Flip one bit in the middle of record 7's JPEG bytes.
    let shard = out.path().join("shard-00000.lmdb");
    let mut bytes = std::fs::read(&shard).unwrap();
    let jpeg = std::fs::read(src.join("00007.jpg")).unwrap();
    let at = bytes
        .windows(64)
        .position(|w| w == &jpeg[1000..1064])
        .expect("record 7's payload is in the shard")
        + 10;
    bytes[at] ^= 0x10;
    // Rewrite under a new inode, as an external corruption would look to a new process.
    std::fs::remove_file(&shard).unwrap();
    std::fs::write(&shard, &bytes).unwrap();

    let ds = Dataset::open(out.path()).unwrap();
    let rd = ds.reader().unwrap();
    assert!(matches!(
        rd.get(7).unwrap().check_crc(),
        Err(FormatError::CrcMismatch { index: 7, .. })
    ));
    // verify finds the whole-file digest changed and, since LMDB trusts the file's pages,
    // reads that shard's records with its own bounds-checked walk: record 7 is named.
    let v = verify(&ds, false).unwrap();
    assert!(!v.ok());
    assert!(
        v.bad
            .iter()
            .any(|b| b.index.is_none() && b.problem.contains("xxh3-64")),
        "{:?}",
        v.bad
    );
    assert!(
        v.bad
            .iter()
            .any(|b| b.index == Some(7) && b.shard == "shard-00000.lmdb"),
        "{:?}",
        v.bad
    );
    assert_eq!(v.bad.len(), 2, "{:?}", v.bad);
}

#[test]
fn raw_encoding_stores_fixed_size_pixels() {
    let src = stoker_testdata::bench_dir();
    let list_dir = tempfile::tempdir().unwrap();
    let list = list_dir.path().join("list.csv");
    std::fs::write(&list, "00000.jpg,0\n00001.jpg,1\n00002.jpg,0\n").unwrap();
    let out = tempfile::tempdir().unwrap();
    let source = Source::List {
        root: src.clone(),
        list,
    };
    // At the source size (500x375) raw pixels are exactly the CPU decoder's output.
    let mut o = ConvertOptions::new(source.clone(), out.path().join("same"));
    o.encoding = Encoding::Raw;
    o.raw_size = Some((500, 375));
    convert(&o, &NoProgress).unwrap();
    let ds = Dataset::open(out.path().join("same")).unwrap();
    let rd = ds.reader().unwrap();
    let dec = stoker_decode::CpuDecoder::new(Default::default());
    let (_, px) = dec
        .decode_to_vec(&std::fs::read(src.join("00001.jpg")).unwrap())
        .unwrap();
    let rec = rd.get(1).unwrap();
    assert_eq!(rec.header.encoding, Encoding::Raw);
    assert_eq!(
        (rec.header.width, rec.header.height, rec.header.channels),
        (500, 375, 3)
    );
    assert!(rec.payload == &px[..]);

    // Resized: shorter side then center crop, and stretch.
    for (name, mode) in [
        ("crop", stoker_formats::ResizeMode::ShorterSide),
        ("stretch", stoker_formats::ResizeMode::Stretch),
    ] {
        let mut o = ConvertOptions::new(source.clone(), out.path().join(name));
        o.encoding = Encoding::Raw;
        o.raw_size = Some((64, 48));
        o.resize = mode;
        convert(&o, &NoProgress).unwrap();
        let ds = Dataset::open(out.path().join(name)).unwrap();
        let rs = ds.manifest().raw_size.unwrap();
        assert_eq!((rs.width, rs.height, rs.channels), (64, 48, 3));
        assert_eq!(
            ds.reader().unwrap().get(2).unwrap().payload.len(),
            64 * 48 * 3
        );
        assert!(verify(&ds, false).unwrap().ok());
    }
}

#[test]
fn max_side_resizes_and_reencodes_only_large_images() {
    let src = data("imagefolder");
    let out = tempfile::tempdir().unwrap();
    let mut o = folder_opts(&src, out.path());
    o.max_side = Some(500);
    o.quality = 80;
    let r = convert(&o, &NoProgress).unwrap();
    check_accounting(&r);
    assert!(r.stored > 0 && r.transcoded > 0, "{r:?}");
    let ds = Dataset::open(out.path()).unwrap();
    let rd = ds.reader().unwrap();
    for (i, (path, _)) in sorted_files(&src).iter().enumerate() {
        let rec = rd.get(i as u64).unwrap();
        let info = stoker_decode::probe(rec.payload, &Default::default()).unwrap();
        assert!(info.width.max(info.height) <= 500, "record {i}");
        assert_eq!(
            (info.width, info.height),
            (rec.header.width, rec.header.height)
        );
        let orig =
            stoker_decode::probe(&std::fs::read(path).unwrap(), &Default::default()).unwrap();
        if orig.width.max(orig.height) > 500 {
            assert_eq!(info.width.max(info.height), 500);
            let (a, b) = (
                f64::from(orig.width) / f64::from(orig.height),
                f64::from(info.width) / f64::from(info.height),
            );
            assert!((a - b).abs() / a < 0.01, "aspect {a} vs {b}");
        } else {
            assert!(rec.payload == &std::fs::read(path).unwrap()[..]);
        }
    }
}

#[test]
fn a_jpeg_made_again_keeps_its_sources_exif_orientation() {
    // Pillow's hopper in orientations 2 to 8, 128x128, made again at 32x32 (--max-side).
    // The loader does not turn the pixels (as torchvision's decoders by default), so the
    // tag is all that says which way is up: the stored original keeps it, and so must a
    // JPEG made again (it was dropped).
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    let core = data("conformance/core");
    for o in 2..=8 {
        let name = format!("pillow__Tests__images__hopper_orientation_{o}.jpg");
        std::fs::copy(core.join(&name), src.join("a").join(&name)).unwrap();
    }
    let mut o = folder_opts(&src, &tmp.path().join("small"));
    o.max_side = Some(32);
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!((r.written, r.transcoded), (7, 7), "{r:?}");
    let ds = Dataset::open(tmp.path().join("small")).unwrap();
    let rd = ds.reader().unwrap();
    for (i, want) in (2..=8).enumerate() {
        let rec = rd.get(i as u64).unwrap();
        let info = stoker_decode::probe(rec.payload, &Default::default()).unwrap();
        assert_eq!((info.width, info.height), (32, 32));
        assert_eq!(info.exif_orientation, Some(want), "record {i}");
    }
}

/// The conformance corpus: every file written or skipped with a reason, and the audit counts
/// agree with what expectations.tsv says the files are.
#[test]
fn conformance_audit_matches_expectations() {
    let root = data("conformance");
    let tsv = std::fs::read_to_string(root.join("expectations.tsv")).unwrap();
    let mut lines = tsv.lines();
    let cols: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| cols.iter().position(|c| *c == name).unwrap();
    let (c_file, c_sof, c_prec, c_ncomp, c_sub, c_expect) = (
        col("file"),
        col("sof"),
        col("precision"),
        col("ncomp"),
        col("subsampling"),
        col("expect"),
    );
    // List file over core/ and corrupt/ (ImageFolder of two classes would do too).
    let list_dir = tempfile::tempdir().unwrap();
    let list = list_dir.path().join("all.csv");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    let text: String = rows
        .iter()
        .map(|r| format!("{},{}\n", r[c_file], u32::from(r[c_expect] == "corrupt")))
        .collect();
    std::fs::write(&list, text).unwrap();
    let out = tempfile::tempdir().unwrap();
    let r = convert(
        &ConvertOptions::new(
            Source::List {
                root: root.clone(),
                list,
            },
            out.path(),
        ),
        &NoProgress,
    )
    .unwrap();
    check_accounting(&r);
    assert_eq!(r.inputs, rows.len() as u64);
    assert!(r.skipped.iter().all(|s| !s.reason.is_empty()));

    let mut want_sof = BTreeMap::new();
    let mut want_prec = BTreeMap::new();
    let mut want_ncomp = BTreeMap::new();
    let mut want_sub = BTreeMap::new();
    let mut probed = 0u64;
    for row in &rows {
        let bytes = std::fs::read(root.join(row[c_file])).unwrap();
        // The audit covers the files whose headers parse; the TSV describes each one.
        if stoker_decode::probe(&bytes, &Default::default()).is_err() {
            continue;
        }
        probed += 1;
        let sof = row[c_sof].split_whitespace().next().unwrap().to_string();
        *want_sof.entry(sof).or_insert(0u64) += 1;
        *want_prec.entry(row[c_prec].to_string()).or_insert(0u64) += 1;
        *want_ncomp.entry(row[c_ncomp].to_string()).or_insert(0u64) += 1;
        let sub = match row[c_sub] {
            s if s.starts_with("n=") => "nonstandard".to_string(),
            s => s.to_string(),
        };
        *want_sub.entry(sub).or_insert(0u64) += 1;
        // A file the reference decoders agree on decoding is written.
        if row[c_expect] == "decode" {
            let skipped = r.skipped.iter().find(|s| s.path.ends_with(row[c_file]));
            assert!(skipped.is_none(), "{} skipped: {skipped:?}", row[c_file]);
        }
    }
    let a = &r.audit;
    assert_eq!(a.jpeg_files, probed);
    assert_eq!(a.by_sof, want_sof);
    assert_eq!(a.by_precision, want_prec);
    assert_eq!(a.by_components, want_ncomp);
    assert_eq!(a.by_subsampling, want_sub);
    // The hardware decoder's known refusals are counted.
    assert!(a.hardware_reject_reasons["progressive"] >= 10);
    assert!(a.hardware_reject_reasons["4:1:1/4:1:0 subsampling"] >= 2);
    assert!(a.hardware_reject_reasons["CMYK/YCCK"] >= 2);
    assert!(a.hardware_reject_reasons["arithmetic coding"] >= 2);
    assert_eq!(a.gpu_hardware_ok + a.gpu_hardware_rejected, a.jpeg_files);
    // The manifest carries the same audit.
    assert_eq!(
        Dataset::open(out.path()).unwrap().manifest().audit.as_ref(),
        Some(a)
    );
}

#[test]
fn gpu_friendly_leaves_only_hardware_decodable_jpegs() {
    let root = data("conformance/core");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let list_dir = tempfile::tempdir().unwrap();
    let list = list_dir.path().join("l.csv");
    std::fs::write(
        &list,
        names.iter().map(|n| format!("{n},0\n")).collect::<String>(),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut o = ConvertOptions::new(Source::List { root, list }, out.path());
    o.gpu_friendly = true;
    let r = convert(&o, &NoProgress).unwrap();
    check_accounting(&r);
    assert!(r.audit.reencoded_for_gpu >= 10, "{:?}", r.audit);
    let ds = Dataset::open(out.path()).unwrap();
    let rd = ds.reader().unwrap();
    for i in 0..ds.len() {
        let rec = rd.get(i).unwrap();
        let info = stoker_decode::probe(rec.payload, &Default::default()).unwrap();
        assert!(
            info.hardware_decodable(),
            "record {i} is not hardware decodable: {info:?}"
        );
    }
}

#[test]
fn output_directory_with_other_files_is_refused() {
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("keep-me.txt"), b"precious").unwrap();
    let e = convert(&folder_opts(&data("imagefolder"), out.path()), &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");
    assert_eq!(
        std::fs::read(out.path().join("keep-me.txt")).unwrap(),
        b"precious"
    );
}

/// The Python `lmdb` package reads a shard we wrote and checks a record against FORMAT.md.
#[test]
fn python_lmdb_reads_our_record_per_format_md() {
    let src = stoker_testdata::bench_dir();
    let list_dir = tempfile::tempdir().unwrap();
    let list = list_dir.path().join("list.csv");
    std::fs::write(&list, "00003.jpg,4\n00004.jpg,2\n00005.jpg,1\n").unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut o = ConvertOptions::new(
        Source::List {
            root: src.clone(),
            list,
        },
        out.path(),
    );
    o.shards = Some(2);
    convert(&o, &NoProgress).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/python/check_format.py"
    );
    // STOKER_PYTHON: scripts/test.sh names its venv's python (with `lmdb`) so, not by PATH.
    let python = std::env::var_os("STOKER_PYTHON").unwrap_or_else(|| "python3".into());
    let run = std::process::Command::new(python)
        .arg(script)
        .arg(out.path())
        .arg("2")
        .arg(src.join("00005.jpg"))
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    if run.status.code() == Some(2) && std::env::var("STOKER_SKIP_PYTHON").as_deref() == Ok("1") {
        eprintln!("SKIPPED: STOKER_SKIP_PYTHON=1 and {stderr}");
        return;
    }
    assert!(run.status.success(), "check_format.py failed: {stderr}");
    let got: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let ds = Dataset::open(out.path()).unwrap();
    assert_eq!(ds.manifest().shards.len(), 2);
    let reader = ds.reader().unwrap();
    let rec = reader.get(2).unwrap();
    assert_eq!(got["label"], 1);
    assert_eq!(got["width"], rec.header.width);
    assert_eq!(got["height"], rec.header.height);
    assert_eq!(got["payload_len"], rec.header.payload_len);
    assert_eq!(got["crc32c"], rec.header.crc32c);
    assert_eq!(got["encoding"], "jpeg");
}

/// Bit flips anywhere in a shard, LMDB's own pages included, are reported, never a crash:
/// either opening fails with an error or `verify` finds the problem.
#[test]
fn bit_flips_across_the_shard_file_are_always_reported() {
    let src = stoker_testdata::bench_dir();
    let list_dir = tempfile::tempdir().unwrap();
    let list = list_dir.path().join("list.csv");
    let lines: String = (0..6).map(|i| format!("{i:05}.jpg,0\n")).collect();
    std::fs::write(&list, lines).unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut o = ConvertOptions::new(Source::List { root: src, list }, out.path());
    o.check_decode = false;
    convert(&o, &NoProgress).unwrap();
    let shard = out.path().join("shard-00000.lmdb");
    let orig = std::fs::read(&shard).unwrap();
    // The two meta pages and the first data pages densely, then a stride over the rest.
    let positions = (0..3 * 4096)
        .step_by(61)
        .chain((3 * 4096..orig.len()).step_by(4099));
    let mut checked = 0;
    for pos in positions {
        let mut b = orig.clone();
        b[pos] ^= 1 << (pos % 8);
        std::fs::remove_file(&shard).unwrap();
        std::fs::write(&shard, &b).unwrap();
        match Dataset::open(out.path()) {
            Err(_) => {}
            Ok(ds) => {
                let v = verify(&ds, false).unwrap();
                assert!(!v.ok(), "flip at byte {pos} not reported");
            }
        }
        checked += 1;
    }
    assert!(checked > 200);
}

/// A conversion killed after its manifest landed (before its journal was removed or the
/// process exited) looks unfinished to its caller: `--resume` then reports it finished,
/// and refuses a finished dataset of other inputs or flags.
#[test]
fn resume_of_a_finished_conversion_of_the_same_listing_is_a_no_op() {
    let out = tempfile::tempdir().unwrap();
    let (mut o, full) = clean_conversion(&out.path().join("done"));
    let before = stoker_testdata::files_in(&o.out);
    // What the killed run leaves: the journal beside the manifest.
    std::fs::write(o.out.join(stoker_formats::convert::JOURNAL_FILE), b"{}").unwrap();
    o.resume = true;
    let again = convert(&o, &NoProgress).unwrap();
    assert!(again.already_done, "{again:?}");
    assert_eq!(again.written, full.written);
    assert_eq!(stoker_testdata::files_in(&o.out), before);

    o.quality = 80;
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");
}

/// A slow writer: each written input takes `pause`, and a stop is asked for once `after`
/// were written, noting when.
struct SlowThenCancel {
    after: u64,
    pause: std::time::Duration,
    done: std::sync::atomic::AtomicU64,
    asked: std::sync::OnceLock<std::time::Instant>,
}

impl stoker_formats::Progress for SlowThenCancel {
    fn advance(&self, inputs: u64, _bytes: u64) {
        std::thread::sleep(self.pause);
        self.done
            .fetch_add(inputs, std::sync::atomic::Ordering::Relaxed);
    }
    fn cancelled(&self) -> bool {
        let stop = self.done.load(std::sync::atomic::Ordering::Relaxed) >= self.after;
        if stop {
            self.asked.get_or_init(std::time::Instant::now);
        }
        stop
    }
}

#[test]
fn a_cancel_while_the_workers_wait_for_room_returns_promptly() {
    // Raw 1024x1024 records hold 3 MiB each: a few fill the read-ahead window (8 MiB),
    // and the writer, slowed, leaves the workers waiting for room when the stop comes.
    // The stop must wake them, or the conversion never returns.
    let out = tempfile::tempdir().unwrap();
    let mut o = folder_opts(&data("imagefolder"), &out.path().join("stopped"));
    o.encoding = Encoding::Raw;
    o.raw_size = Some((1024, 1024));
    o.jobs = Some(2);
    let progress = std::sync::Arc::new(SlowThenCancel {
        after: 2,
        pause: std::time::Duration::from_secs(1),
        done: Default::default(),
        asked: Default::default(),
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let p = progress.clone();
    std::thread::spawn(move || {
        let r = convert(&o, &*p);
        let _ = tx.send((r.map(|r| r.written), std::time::Instant::now()));
    });
    let (r, returned) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a cancelled conversion still running after a minute");
    assert!(matches!(r, Err(FormatError::Cancelled { .. })), "{r:?}");
    let waited = returned - *progress.asked.get().unwrap();
    assert!(waited < std::time::Duration::from_secs(5), "{waited:?}");
}

#[test]
fn a_list_labelled_by_class_name_takes_the_classes_given() {
    // A validation list in the train set's class names: label i is classes[i] whichever
    // classes the list holds, so train and validation labels agree.
    let src = stoker_testdata::bench_dir();
    let tmp = tempfile::tempdir().unwrap();
    let classes: Vec<String> = ["n01", "n02", "n03", "n04"].map(String::from).to_vec();
    let names = tmp.path().join("classes.txt");
    std::fs::write(&names, " n01\nn02\n\nn03 \nn04\n").unwrap();
    assert_eq!(
        stoker_formats::convert::class_names(&names).unwrap(),
        classes
    );
    let list = tmp.path().join("val.csv");
    // Class names, an index, and no row of n01.
    std::fs::write(
        &list,
        "path,label\n00000.jpg,n03\n00001.jpg,n02\n00002.jpg,3\n",
    )
    .unwrap();
    let opts = |out: &str, classes: Option<Vec<String>>| {
        let mut o = ConvertOptions::new(
            Source::List {
                root: src.clone(),
                list: list.clone(),
            },
            tmp.path().join(out),
        );
        o.classes = classes;
        o.check_decode = false;
        o
    };
    convert(&opts("val", Some(classes.clone())), &NoProgress).unwrap();
    let ds = Dataset::open(tmp.path().join("val")).unwrap();
    assert_eq!(ds.manifest().classes, classes);
    let rd = ds.reader().unwrap();
    let labels: Vec<u32> = (0..3).map(|i| rd.get(i).unwrap().header.label).collect();
    assert_eq!(labels, [2, 1, 3]);
    // A dataset's classes are read as such.
    let from_dataset = stoker_formats::convert::class_names(&tmp.path().join("val")).unwrap();
    assert_eq!(from_dataset, classes);

    // Without the names, a name is not a label; with them, an unknown one is named.
    let e = convert(&opts("none", None), &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 2: label \"n03\" is not a non-negative integer"),
        "{e}"
    );
    assert!(e.contains("--classes"), "{e}");
    let short = Some(classes[..2].to_vec());
    let e = convert(&opts("short", short), &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 2: class \"n03\" is not one of the 2 classes given"),
        "{e}"
    );
    // Names given twice are refused before anything is listed; to a source whose labels
    // are no names (this one is a flat folder of images), when it is listed.
    let twice = Some(vec!["a".into(), "b".into(), "a".into()]);
    let e = convert(&opts("twice", twice), &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"a\" is given twice (classes 0 and 2)"), "{e}");
    let mut folder = ConvertOptions::new(Source::ImageFolder(src.clone()), tmp.path().join("f"));
    folder.classes = Some(classes);
    let e = convert(&folder, &NoProgress).unwrap_err().to_string();
    assert!(e.contains("label a list's rows or class folders"), "{e}");
    assert!(e.contains("flat"), "{e}");
}

/// A validation set sorted into class folders (ImageNet's `valprep.sh`) that lacks some of
/// the train set's classes was numbered by its own folders: every label after a missing
/// class was another class's, without a word. With the train set's class names, each
/// folder takes its class's label; a folder of no such class is refused.
#[test]
fn class_folders_labelled_by_the_classes_given_agree_with_the_train_set() {
    let sample = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/data/sample"
    ));
    let tmp = tempfile::tempdir().unwrap();
    let val = tmp.path().join("val");
    std::fs::create_dir_all(val.join("opencv")).unwrap();
    std::fs::copy(
        sample.join("opencv/data_home.jpg"),
        val.join("opencv/v.jpg"),
    )
    .unwrap();
    std::fs::create_dir_all(val.join(".ipynb_checkpoints")).unwrap();
    let train: Vec<String> = ["caer", "leptonica", "opencv"].map(String::from).to_vec();
    let mut o = ConvertOptions::new(Source::ImageFolder(val.clone()), tmp.path().join("out"));
    o.check_decode = false;
    o.classes = Some(train.clone());
    let r = convert(&o, &NoProgress).unwrap();
    assert!(
        r.warnings.iter().any(|w| w.contains(".ipynb_checkpoints")),
        "{:?}",
        r.warnings
    );
    let ds = Dataset::open(tmp.path().join("out")).unwrap();
    assert_eq!(ds.manifest().classes, train);
    assert_eq!(ds.reader().unwrap().get(0).unwrap().header.label, 2);
    // Numbered by its own folders it would be label 0.
    std::fs::create_dir_all(val.join("zebra")).unwrap();
    o.out = tmp.path().join("other");
    let e = convert(&o, &NoProgress).unwrap_err().to_string();
    assert!(
        e.contains("zebra") && e.contains("not one of the 3 classes given"),
        "{e}"
    );
}

/// A list of absolute paths (made with `find /data -name '*.jpg'`) was refused ("must be
/// relative") although FORMAT.md says an absolute row stays absolute: the same records as
/// the relative list, each named by its absolute path in the source map.
#[test]
fn a_list_of_absolute_paths_converts_as_the_relative_one() {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");
    let src = std::fs::canonicalize(sample).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let rows = [
        "caer/tent.jpg,0",
        "leptonica/marge.jpg,1",
        "opencv/data_home.jpg,2",
    ];
    let relative = tmp.path().join("rel.csv");
    std::fs::write(&relative, rows.join("\n")).unwrap();
    let absolute = tmp.path().join("abs.csv");
    let abs_rows: Vec<String> = rows
        .iter()
        .map(|r| format!("{}/{r}", src.display()))
        .collect();
    std::fs::write(&absolute, abs_rows.join("\n")).unwrap();
    let convert_list = |list: &Path, root: &Path, out: &str| {
        let source = Source::List {
            root: root.to_path_buf(),
            list: list.to_path_buf(),
        };
        let mut o = ConvertOptions::new(source, tmp.path().join(out));
        o.check_decode = false;
        convert(&o, &NoProgress).unwrap();
        Dataset::open(tmp.path().join(out)).unwrap()
    };
    // SRC is another folder: absolute rows do not depend on it, and stay absolute.
    let a = convert_list(&relative, &src, "rel");
    let b = convert_list(&absolute, tmp.path(), "abs");
    assert_eq!(b.len(), 3);
    let (ra, rb) = (a.reader().unwrap(), b.reader().unwrap());
    for i in 0..3 {
        let (x, y) = (ra.get(i).unwrap(), rb.get(i).unwrap());
        assert_eq!(
            (x.header.label, x.payload),
            (y.header.label, y.payload),
            "record {i}"
        );
        let name = b.source_of(i).unwrap().unwrap();
        assert_eq!(name, src.join(rows[i as usize].split(',').next().unwrap()));
    }
}
