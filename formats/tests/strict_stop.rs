//! A `strict` stop: a run that began in a new or empty directory left its shards, journal
//! and unfinished `shard-NNNNN.lmdb.tmp` behind, so that after the bad input was fixed a
//! plain rerun was refused ("holds a partial conversion … rerun with --resume"), and a
//! `--resume` was refused too once the input was deleted (the listing changed). It now
//! takes away what it made; a run that continued a partial conversion keeps it for
//! `resume`. Photos from the repository's `examples/data/sample`.

use std::path::{Path, PathBuf};

use stoker_formats::convert::{JOURNAL_FILE, MIN_SHARD_BYTES};
use stoker_formats::{convert, ConvertOptions, Dataset, FormatError, NoProgress, Source};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");

/// A copy of the sample tree (three classes) at `dir/src`, with a file that is no image
/// listed last (`opencv/zz_bad.jpg`, returned).
fn tree_with_a_bad_last_input(dir: &Path) -> (PathBuf, PathBuf) {
    let to = dir.join("src");
    stoker_testdata::copy_tree(Path::new(SAMPLE), &to);
    let bad = to.join("opencv/zz_bad.jpg");
    std::fs::write(&bad, b"not an image").unwrap();
    (to, bad)
}

/// Strict, stored without a test decode, in shards of the smallest size: several shards
/// are finished (and journaled) before the last input.
fn strict_opts(src: &Path, out: &Path) -> ConvertOptions {
    let mut o = ConvertOptions::new(Source::ImageFolder(src.to_path_buf()), out);
    o.strict = true;
    o.check_decode = false;
    o.shard_bytes = MIN_SHARD_BYTES;
    o.jobs = Some(2);
    o
}

#[test]
fn a_strict_stop_in_a_new_directory_leaves_nothing_and_a_plain_rerun_converts() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, bad) = tree_with_a_bad_last_input(tmp.path());
    // Neither the output nor its parent exists.
    let out = tmp.path().join("new/ds");
    let o = strict_opts(&src, &out);
    let e = convert(&o, &NoProgress).unwrap_err();
    match &e {
        FormatError::StrictInput {
            path, resumable, ..
        } => {
            assert_eq!(path, &bad, "{e}");
            assert!(!resumable, "{e}");
        }
        other => panic!("want StrictInput, got {other}"),
    }
    assert!(e.to_string().contains("convert again"), "{e}");
    assert!(
        !tmp.path().join("new").exists(),
        "{:?}",
        stoker_testdata::names_in(tmp.path())
    );

    // The documented path: fix the input, rerun, get a dataset.
    std::fs::remove_file(&bad).unwrap();
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!(r.written, 15);
    assert!(
        r.shards > 2,
        "{} shards: none finished before the bad input",
        r.shards
    );
    assert_eq!(Dataset::open(&out).unwrap().len(), 15);
}

#[test]
fn a_strict_stop_in_an_empty_directory_leaves_it_there_and_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, bad) = tree_with_a_bad_last_input(tmp.path());
    let out = tmp.path().join("ds");
    std::fs::create_dir(&out).unwrap();
    let e = convert(&strict_opts(&src, &out), &NoProgress).unwrap_err();
    assert!(
        matches!(
            e,
            FormatError::StrictInput {
                resumable: false,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        stoker_testdata::names_in(&out).is_empty(),
        "{:?}",
        stoker_testdata::names_in(&out)
    );
    // Kept: the directory was there before the run.
    std::fs::remove_file(&bad).unwrap();
    convert(&strict_opts(&src, &out), &NoProgress).unwrap();
}

#[test]
fn a_strict_stop_of_a_resumed_conversion_keeps_it_for_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, bad) = tree_with_a_bad_last_input(tmp.path());
    let out = tmp.path().join("ds");
    // Killed after 4 records: a journal and finished shards that an earlier run made.
    let mut o = strict_opts(&src, &out);
    o.fail_after = Some(4);
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { .. }), "{e}");
    let before = stoker_testdata::names_in(&out);
    assert!(before.contains(&JOURNAL_FILE.to_string()), "{before:?}");

    o.fail_after = None;
    o.resume = true;
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(
        matches!(
            e,
            FormatError::StrictInput {
                resumable: true,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("--resume"), "{e}");
    let after = stoker_testdata::names_in(&out);
    assert!(after.contains(&JOURNAL_FILE.to_string()), "{after:?}");
    assert!(before
        .iter()
        .filter(|n| n.ends_with(".lmdb"))
        .all(|n| after.contains(n)));

    // Repaired in place: the same listing, so --resume continues.
    std::fs::copy(src.join("caer/tent.jpg"), &bad).unwrap();
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!(r.written, 16);
    assert!(r.resumed > 0);
    assert_eq!(Dataset::open(&out).unwrap().len(), 16);
}
