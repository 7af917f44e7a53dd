//! Regression tests for the converter against hostile-but-realistic sources and neighbours
//! (issue 18): symlink loops, FIFOs, device files, huge files, absurd labels, a second
//! writer, and a crash while the resume journal is replaced. Photos come from the
//! repository's `examples/data/sample`.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use stoker_formats::{convert, ConvertOptions, ConvertReport, FormatError, NoProgress, Source};

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
    std::fs::copy(photo("caer/tent.jpg"), s.join("a/ok.jpg")).unwrap();
    let size = std::fs::metadata(s.join("a/ok.jpg")).unwrap().len();
    let mut o = ConvertOptions::new(Source::ImageFolder(s), dir.path().join("o"));
    o.max_file_size = size - 1;
    let r = convert_within(o, Duration::from_secs(60)).unwrap();
    assert_eq!(r.written, 0);
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
