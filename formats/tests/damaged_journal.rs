//! Regression tests: `convert --resume` trusted its journal (`.stoker-convert.json`), so an
//! edited or damaged one panicked (a position past the listing) or silently made a wrong
//! dataset (records duplicated or lost, shards forgotten). Resume now checks the journal
//! against the listing and the shards on disk and refuses one that does not add up, without
//! deleting anything.

use std::path::{Path, PathBuf};

use serde_json::Value;
use stoker_formats::convert::JOURNAL_FILE;
use stoker_formats::{convert, ConvertOptions, FormatError, NoProgress, Source};

fn imagefolder() -> PathBuf {
    stoker_testdata::dir().join("imagefolder")
}

/// A conversion of the test image folder killed after 100 records, with finished shards and
/// a journal; the options to resume it.
fn killed(dir: &Path) -> ConvertOptions {
    let mut o = ConvertOptions::new(Source::ImageFolder(imagefolder()), dir.join("out"));
    o.shard_bytes = 2 << 20;
    o.check_decode = false;
    o.jobs = Some(2);
    o.fail_after = Some(100);
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { .. }), "{e}");
    o.fail_after = None;
    o.resume = true;
    o
}

/// Edits the journal of `o`, resumes, and checks that the resume is refused with a message
/// that names the journal and says what to do, and that no file was touched.
fn refused_after(edit: impl FnOnce(&mut Value)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let o = killed(dir.path());
    let path = o.out.join(JOURNAL_FILE);
    let mut j: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(
        !j["done"].as_array().unwrap().is_empty(),
        "the killed run finished shards"
    );
    edit(&mut j);
    std::fs::write(&path, serde_json::to_vec_pretty(&j).unwrap()).unwrap();
    let before = stoker_testdata::files_in(&o.out);
    let e = convert(&o, &NoProgress).expect_err("a journal that does not add up is refused");
    let msg = e.to_string();
    assert!(
        matches!(e, FormatError::OutputExists { .. }),
        "{msg} ({e:?})"
    );
    assert!(msg.contains("journal"), "{msg}");
    assert!(msg.contains("delete"), "{msg}");
    assert!(!o.out.join("manifest.json").exists());
    // Everything but LMDB's `-lock` files (none are left by our writer) is as it was.
    assert_eq!(
        stoker_testdata::files_in(&o.out),
        before,
        "a refused resume changed the directory"
    );
    msg
}

fn add(v: &mut Value, n: i64) {
    *v = Value::from(v.as_i64().unwrap() + n);
}

#[test]
fn journal_position_past_the_listing_is_refused_not_a_panic() {
    let msg = refused_after(|j| j["next_input"] = Value::from(1_000_000_000_000u64));
    assert!(msg.contains("1000000000000"), "{msg}");
}

#[test]
fn journal_position_rewound_to_zero_is_refused_not_duplicated_records() {
    refused_after(|j| j["next_input"] = Value::from(0));
}

#[test]
fn journal_position_moved_ahead_is_refused_not_lost_inputs() {
    refused_after(|j| add(&mut j["next_input"], 5));
}

#[test]
fn journal_without_its_finished_shards_is_refused_not_a_short_dataset() {
    refused_after(|j| j["done"] = Value::Array(Vec::new()));
}

#[test]
fn journal_shard_count_disagreeing_with_the_shard_file_is_refused() {
    refused_after(|j| {
        add(&mut j["done"][0]["count"], 1);
        add(&mut j["next_input"], 1);
        add(&mut j["stored"], 1);
        for s in j["done"].as_array_mut().unwrap().iter_mut().skip(1) {
            add(&mut s["first_index"], 1);
        }
    });
}

#[test]
fn journal_shard_outside_the_output_directory_is_refused() {
    let msg = refused_after(|j| j["done"][0]["file"] = Value::from("../elsewhere.lmdb"));
    assert!(msg.contains("elsewhere"), "{msg}");
}

#[test]
fn journal_skip_of_an_input_not_in_the_listing_is_refused() {
    refused_after(|j| {
        let skipped = j["skipped"].as_array_mut().unwrap();
        let fake = serde_json::json!({"path": "/nonexistent/x.jpg", "reason": "edited"});
        match skipped.first_mut() {
            Some(s) => *s = fake,
            None => {
                skipped.push(fake);
                add(&mut j["next_input"], 1);
            }
        }
    });
}

#[test]
fn journal_totals_disagreeing_with_the_records_are_refused() {
    refused_after(|j| add(&mut j["stored"], 1));
}

#[test]
fn intact_journal_still_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let o = killed(dir.path());
    let r = convert(&o, &NoProgress).unwrap();
    assert!(r.resumed > 0, "{r:?}");
    assert_eq!(r.written + r.skipped.len() as u64, r.inputs);
}
