//! The conversion journal's format and how it is read back: append-only (a shard costs the
//! journal what it added, not everything so far), a torn last line dropped, a journal of
//! the previous release still resumed, and anything in its place that is not a file
//! refused without hanging or filling memory.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use stoker_formats::convert::JOURNAL_FILE;
use stoker_formats::{convert, ConvertOptions, ConvertReport, FormatError, NoProgress, Source};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");

/// The 15 sample photos in three classes, each beside a copy cut short (an input the
/// conversion skips): 30 inputs, every other one skipped.
fn source_with_skips(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    for class in std::fs::read_dir(SAMPLE).unwrap() {
        let class = class.unwrap();
        let to = src.join(class.file_name());
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(class.path()).unwrap() {
            let f = f.unwrap();
            let bytes = std::fs::read(f.path()).unwrap();
            let name = f.file_name().to_string_lossy().into_owned();
            std::fs::write(to.join(&name), &bytes).unwrap();
            std::fs::write(to.join(format!("cut-{name}")), &bytes[..bytes.len() / 3]).unwrap();
        }
    }
    src
}

fn options(src: &Path, out: PathBuf) -> ConvertOptions {
    let mut o = ConvertOptions::new(Source::ImageFolder(src.into()), out);
    o.check_decode = false;
    o.shards = Some(10);
    o.jobs = Some(2);
    o
}

/// Converts with `o` killed after `n` records.
fn killed_after(o: &ConvertOptions, n: u64) {
    let mut k = o.clone();
    k.fail_after = Some(n);
    let e = convert(&k, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { .. }), "{e}");
}

fn resumed(o: &ConvertOptions) -> ConvertReport {
    let mut r = o.clone();
    r.resume = true;
    convert(&r, &NoProgress).unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn each_shard_appends_only_what_it_added_to_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let src = source_with_skips(dir.path());
    let o = options(&src, dir.path().join("out"));
    let journal = o.out.join(JOURNAL_FILE);
    killed_after(&o, 6);
    let first = std::fs::read(&journal).unwrap();
    let mut again = o.clone();
    again.resume = true;
    killed_after(&again, 12);
    let second = std::fs::read(&journal).unwrap();
    // Appended to, never rewritten: what the first run journaled is still there, byte for
    // byte, and the resumed run added lines after it.
    assert!(second.len() > first.len());
    assert_eq!(second[..first.len()], first[..]);

    let lines = lines(&journal);
    assert_eq!(lines[0]["stoker_convert_journal"], 4, "{:?}", lines[0]);
    // The output flags the fingerprint covers, for a resume with other flags to name.
    assert_eq!(lines[0]["flags"]["quality"], "90", "{:?}", lines[0]);
    let mut seen = std::collections::BTreeSet::new();
    for (n, l) in lines.iter().enumerate().skip(1) {
        let shards = l["shards"].as_array().unwrap();
        let skipped = l["skipped"].as_array().unwrap();
        assert_eq!(shards.len(), 1, "line {n}: {l}");
        // A line holds the skips since the line before, not every skip so far: each skip
        // is journaled once.
        for s in skipped {
            assert!(
                seen.insert(s["path"].as_str().unwrap().to_owned()),
                "{s} twice"
            );
        }
    }
    assert!(seen.len() >= 4, "{seen:?}");
    let r = resumed(&o);
    assert_eq!((r.written, r.skipped.len()), (15, 15), "{r:?}");
    assert!(!journal.exists(), "the journal outlived the manifest");
}

/// A clean conversion's files, to compare a resumed one with.
fn clean(o: &ConvertOptions, dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut c = o.clone();
    c.out = dir.join("clean");
    convert(&c, &NoProgress).unwrap();
    stoker_testdata::files_in(&c.out)
}

#[test]
fn torn_last_journal_line_is_dropped_and_resume_is_identical() {
    let dir = tempfile::tempdir().unwrap();
    let src = source_with_skips(dir.path());
    let o = options(&src, dir.path().join("out"));
    let want = clean(&o, dir.path());
    killed_after(&o, 9);
    let journal = o.out.join(JOURNAL_FILE);
    let text = std::fs::read(&journal).unwrap();
    // Crashes while a line was appended: cut short, and (a power loss after the size but
    // not the data reached the disk) zeros.
    for tail in [
        &text[..text.len() - 9],
        &[text.clone(), vec![0u8; 300]].concat()[..],
    ] {
        let out = dir.path().join(format!("torn-{}", tail.len()));
        let mut t = o.clone();
        t.out = out.clone();
        killed_after(&t, 9);
        std::fs::write(out.join(JOURNAL_FILE), tail).unwrap();
        let r = resumed(&t);
        assert!(r.resumed > 0, "{r:?}");
        assert_eq!(stoker_testdata::files_in(&out), want);
    }
}

#[test]
fn journal_of_the_previous_release_still_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let src = source_with_skips(dir.path());
    let o = options(&src, dir.path().join("out"));
    let want = clean(&o, dir.path());
    killed_after(&o, 9);
    // The previous release's journal: one object with every finished shard and skip.
    let lines = lines(&o.out.join(JOURNAL_FILE));
    let last = lines.last().unwrap();
    let all = |key: &str| -> Vec<Value> {
        lines[1..]
            .iter()
            .flat_map(|l| l[key].as_array().unwrap().clone())
            .collect()
    };
    let mut old = last.clone();
    old["fingerprint"] = lines[0]["fingerprint"].clone();
    old["done"] = Value::from(all("shards"));
    old["skipped"] = Value::from(all("skipped"));
    old.as_object_mut().unwrap().remove("shards");
    std::fs::remove_file(o.out.join(JOURNAL_FILE)).unwrap();
    let legacy = o.out.join(".stoker-convert.json");
    std::fs::write(&legacy, serde_json::to_vec_pretty(&old).unwrap()).unwrap();
    let r = resumed(&o);
    assert!(r.resumed > 0, "{r:?}");
    assert_eq!(stoker_testdata::files_in(&o.out), want);
}

/// The shard files in `out` and their bytes (not the journal, which here cannot be read).
fn shard_files(out: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("shard-"))
        .map(|n| (n.clone(), std::fs::read(out.join(&n)).unwrap()))
        .collect();
    v.sort();
    v
}

/// Resumes `o` on another thread and returns its error; a hang fails the test.
fn resume_error_within(o: &ConvertOptions, limit: Duration) -> FormatError {
    let mut r = o.clone();
    r.resume = true;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(convert(&r, &NoProgress));
    });
    let got = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("resume did not finish within {limit:?}"));
    got.expect_err("refused")
}

#[test]
fn journal_that_is_a_fifo_a_device_or_huge_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = source_with_skips(dir.path());
    for (n, make) in ["fifo", "zero", "sparse"].into_iter().enumerate() {
        let o = options(&src, dir.path().join(format!("out{n}")));
        killed_after(&o, 9);
        let journal = o.out.join(JOURNAL_FILE);
        std::fs::remove_file(&journal).unwrap();
        match make {
            "fifo" => assert!(std::process::Command::new("mkfifo")
                .arg(&journal)
                .status()
                .unwrap()
                .success()),
            "zero" => std::os::unix::fs::symlink("/dev/zero", &journal).unwrap(),
            _ => std::fs::File::create(&journal)
                .unwrap()
                .set_len(3 << 30)
                .unwrap(),
        }
        let before = shard_files(&o.out);
        let e = resume_error_within(&o, Duration::from_secs(30));
        let msg = e.to_string();
        assert!(
            matches!(e, FormatError::OutputExists { .. }),
            "{make}: {msg}"
        );
        assert!(
            msg.contains(JOURNAL_FILE) && msg.contains("delete"),
            "{msg}"
        );
        let what = match make {
            "fifo" => "a FIFO",
            "zero" => "a character device",
            _ => "3221225472 bytes",
        };
        assert!(msg.contains(what), "{make}: {msg}");
        assert_eq!(shard_files(&o.out), before);
    }
}

/// A skipped input whose name is not UTF-8 (a Latin-1 name from an old archive): writing it
/// into the journal used to panic (then, briefly, fail the conversion). It is journaled
/// exactly, so a resume finds it among the inputs, and the report spells it `\xNN`.
#[test]
fn a_skipped_input_named_in_latin_1_is_journaled_and_resumed() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let src = source_with_skips(dir.path());
    let caer = src.join("caer");
    let latin1 = caer.join(std::ffi::OsStr::from_bytes(b"caf\xe9-cut.jpg"));
    std::fs::write(&latin1, b"\xff\xd8 not a whole JPEG").unwrap();
    let o = options(&src, dir.path().join("out"));
    let want = clean(&o, dir.path());
    killed_after(&o, 9);
    let r = resumed(&o);
    assert!(r.resumed > 0, "{r:?}");
    assert_eq!((r.written, r.skipped.len()), (15, 16), "{r:?}");
    assert!(r.skipped.iter().any(|s| s.path == latin1), "{r:?}");
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("caf\\\\xe9-cut.jpg"), "{json}");
    assert_eq!(stoker_testdata::files_in(&o.out), want);
}

/// A list file's rows may name paths far longer than PATH_MAX (skipped: the name is too
/// long to open). The journal names them, twice (path and reason): its size limit grows
/// with the listing's paths, so such a journal, which stoker wrote, is still resumed.
#[test]
fn a_journal_of_very_long_skipped_paths_is_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = String::new();
    for (k, class) in ["caer", "leptonica", "opencv"].iter().enumerate() {
        for f in std::fs::read_dir(std::path::Path::new(SAMPLE).join(class)).unwrap() {
            let name = f.unwrap().file_name().to_string_lossy().into_owned();
            rows.push_str(&format!("{class}/{name},{k}\n"));
            rows.push_str(&format!("{}x.jpg,{k}\n", "long/".repeat(60_000)));
        }
    }
    let list = dir.path().join("list.csv");
    std::fs::write(&list, rows).unwrap();
    let mut o = ConvertOptions::new(
        Source::List {
            root: SAMPLE.into(),
            list,
        },
        dir.path().join("out"),
    );
    o.check_decode = false;
    o.shard_bytes = 64 << 10;
    killed_after(&o, 12);
    let journal = std::fs::metadata(o.out.join(JOURNAL_FILE)).unwrap().len();
    assert!(journal > (1 << 20) + 30 * (32 << 10), "{journal} bytes");
    let r = resumed(&o);
    assert!(r.resumed > 0, "{r:?}");
    assert_eq!((r.written, r.skipped.len()), (15, 15), "{r:?}");
}

#[test]
fn resume_of_a_finished_dataset_with_a_shard_gone_says_it_is_damaged() {
    // It said "already converted ... nothing to do" over a dataset missing a shard.
    let dir = tempfile::tempdir().unwrap();
    let o = options(Path::new(SAMPLE), dir.path().join("out"));
    convert(&o, &NoProgress).unwrap();
    let mut again = o.clone();
    again.resume = true;
    assert!(convert(&again, &NoProgress).unwrap().already_done);
    let shard = dir.path().join("out/shard-00001.lmdb");
    let bytes = std::fs::read(&shard).unwrap();
    for damage in ["cut", "gone"] {
        match damage {
            "cut" => std::fs::write(&shard, &bytes[..4096]).unwrap(),
            _ => std::fs::remove_file(&shard).unwrap(),
        }
        let e = convert(&again, &NoProgress).unwrap_err().to_string();
        assert!(
            e.contains("shard-00001.lmdb") && e.contains("damaged after the conversion finished"),
            "{damage}: {e}"
        );
        assert!(e.contains("stoker verify"), "{e}");
    }
}
