//! A `strict` stop: a run that began in a new or empty directory left its shards, journal
//! and unfinished `shard-NNNNN.lmdb.tmp` behind, so that after the bad input was fixed a
//! plain rerun was refused ("holds a partial conversion … rerun with --resume"), and a
//! `--resume` was refused too once the input was deleted (the listing changed). It now
//! takes away what it made; a run that continued a partial conversion keeps it for
//! `resume`. Photos from the repository's `examples/data/sample`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use stoker_formats::convert::{JOURNAL_FILE, MIN_SHARD_BYTES};
use stoker_formats::{convert, ConvertOptions, Dataset, FormatError, NoProgress, Progress, Source};

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

/// A conversion that skips every input writes no dataset; it left the output directory
/// it had made, empty (one of an empty source made none).
#[test]
fn a_run_that_converts_nothing_leaves_no_directory_it_made() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("a/x.jpg"), b"not an image").unwrap();
    std::fs::write(src.join("a/y.jpg"), b"nor this").unwrap();
    let out = tmp.path().join("new/ds");
    let mut o = ConvertOptions::new(Source::ImageFolder(src.clone()), &out);
    o.check_decode = false;
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(
        e.to_string()
            .contains("none of the 2 inputs could be converted"),
        "{e}"
    );
    assert!(
        !tmp.path().join("new").exists(),
        "{:?}",
        stoker_testdata::names_in(tmp.path())
    );
    // An output directory that was there already stays, empty.
    std::fs::create_dir(tmp.path().join("ds")).unwrap();
    o.out = tmp.path().join("ds");
    convert(&o, &NoProgress).unwrap_err();
    assert_eq!(
        stoker_testdata::names_in(&tmp.path().join("ds")),
        Vec::<String>::new()
    );
}

/// Any failure before the first record (threads that could not start, the process out
/// of file descriptors at the first input, Ctrl-C at once): nothing to resume, and an
/// empty directory with a journal was left behind. A failure injected at the first record
/// stands for them.
#[test]
fn a_run_that_fails_before_its_first_record_leaves_no_directory_it_made() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("new/ds");
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), &out);
    o.check_decode = false;
    o.fail_after = Some(0);
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { written: 0 }), "{e}");
    assert!(
        !tmp.path().join("new").exists(),
        "{:?}",
        stoker_testdata::names_in(tmp.path())
    );
    // One record in, what the run wrote stays, as before, and `--resume` finishes it.
    o.fail_after = Some(1);
    convert(&o, &NoProgress).unwrap_err();
    assert!(out.exists());
    o.fail_after = None;
    o.resume = true;
    assert_eq!(convert(&o, &NoProgress).unwrap().written, 15);
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

/// Swaps the output directory for another when the last good input has been written: the
/// writer's next input is the bad one, and the strict stop follows with nothing written
/// in between.
struct SwapAfter {
    /// The good inputs: the swap comes after this many.
    inputs: u64,
    done: AtomicU64,
    out: PathBuf,
    moved: PathBuf,
    /// What the directory put at the output's path holds: one file of a shard's name, or
    /// nothing.
    with_file: bool,
}

impl Progress for SwapAfter {
    fn advance(&self, inputs: u64, _bytes: u64) {
        if self.done.fetch_add(inputs, Ordering::SeqCst) + inputs == self.inputs {
            std::fs::rename(&self.out, &self.moved).unwrap();
            std::fs::create_dir(&self.out).unwrap();
            if self.with_file {
                std::fs::write(self.out.join("shard-00000.lmdb"), b"not the run's").unwrap();
            }
        }
    }
}

/// The clean-up removed the run's files by path: with the output directory renamed away
/// and another put in its place during the run, it deleted that directory's file of the
/// same name as the run's first shard (and that directory, had it been empty), and left
/// the run's own files where they were. It now removes them from the directory the run
/// holds open, wherever that is now.
#[test]
fn a_strict_stop_after_the_output_was_swapped_removes_nothing_from_the_new_one() {
    for with_file in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let (src, bad) = tree_with_a_bad_last_input(tmp.path());
        let out = tmp.path().join("ds");
        let swap = SwapAfter {
            inputs: 15,
            done: AtomicU64::new(0),
            out: out.clone(),
            moved: tmp.path().join("ds.moved"),
            with_file,
        };
        let e = convert(&strict_opts(&src, &out), &swap).unwrap_err();
        match &e {
            FormatError::StrictInput { path, .. } => assert_eq!(path, &bad, "{e}"),
            other => panic!("want StrictInput, got {other}"),
        }
        assert_eq!(
            swap.done.load(Ordering::SeqCst),
            15,
            "the swap came too early"
        );
        assert!(
            out.is_dir(),
            "with_file {with_file}: the directory put at the output's path was removed"
        );
        let theirs = stoker_testdata::names_in(&out);
        if with_file {
            assert_eq!(theirs, ["shard-00000.lmdb"], "its file was removed");
            let kept = std::fs::read(out.join("shard-00000.lmdb")).unwrap();
            assert_eq!(kept, b"not the run's");
        } else {
            assert!(theirs.is_empty(), "{theirs:?}");
        }
        // What the run made went from the directory it wrote, now under the other name.
        let mine = stoker_testdata::names_in(&swap.moved);
        assert!(mine.is_empty(), "with_file {with_file}: {mine:?}");
    }
}
