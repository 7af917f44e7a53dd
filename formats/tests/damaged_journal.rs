//! Regression tests: `convert --resume` trusted its journal (`.stoker-convert.json`), so an
//! edited or damaged one panicked (a position past the listing) or silently made a wrong
//! dataset (records duplicated or lost, shards forgotten). Resume now checks the journal
//! against the listing and the shards on disk and refuses one that does not add up, without
//! deleting anything.
//!
//! The journal is append-only, one JSON line per finished shard (docs/FORMAT.md); the
//! edits below change those lines the way a hand or a damaged disk might.

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

/// The lines of the journal at `path`: a header, then one entry per journaled shard.
fn journal_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines
        .iter()
        .map(|l| format!("{}\n", serde_json::to_string(l).unwrap()))
        .collect();
    std::fs::write(path, text).unwrap();
}

/// Resumes `o` and checks that the resume is refused with a message that names the journal
/// and says what to do, and that no file was touched.
fn refused(o: &ConvertOptions) -> String {
    let before = stoker_testdata::files_in(&o.out);
    let e = convert(o, &NoProgress).expect_err("a journal that does not add up is refused");
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            FormatError::OutputExists { .. } | FormatError::UnreadableJournal { .. }
        ),
        "{msg} ({e:?})"
    );
    assert!(msg.contains("journal"), "{msg}");
    assert!(
        msg.contains("delete") || msg.contains("unreadable"),
        "{msg}"
    );
    assert!(!o.out.join("manifest.json").exists());
    // Everything but LMDB's `-lock` files (none are left by our writer) is as it was.
    assert_eq!(
        stoker_testdata::files_in(&o.out),
        before,
        "a refused resume changed the directory"
    );
    msg
}

/// Edits the journal lines of a killed conversion (`lines[0]` is the header, the last line
/// holds the totals), resumes, and checks that the resume is refused (see [`refused`]).
fn refused_after(edit: impl FnOnce(&mut Vec<Value>)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let o = killed(dir.path());
    let path = o.out.join(JOURNAL_FILE);
    let mut lines = journal_lines(&path);
    assert!(
        lines.len() >= 3,
        "the killed run finished shards: {lines:?}"
    );
    edit(&mut lines);
    write_lines(&path, &lines);
    let msg = refused(&o);
    assert!(msg.contains("delete"), "{msg}");
    msg
}

/// The last line: the totals after every journaled shard.
fn last(lines: &mut [Value]) -> &mut Value {
    lines.last_mut().unwrap()
}

fn add(v: &mut Value, n: i64) {
    *v = Value::from(v.as_i64().unwrap() + n);
}

#[test]
fn journal_position_past_the_listing_is_refused_not_a_panic() {
    let msg = refused_after(|j| last(j)["next_input"] = Value::from(1_000_000_000_000u64));
    assert!(msg.contains("1000000000000"), "{msg}");
}

#[test]
fn journal_position_rewound_to_zero_is_refused_not_duplicated_records() {
    refused_after(|j| last(j)["next_input"] = Value::from(0));
}

#[test]
fn journal_position_moved_ahead_is_refused_not_lost_inputs() {
    refused_after(|j| add(&mut last(j)["next_input"], 5));
}

#[test]
fn journal_without_its_finished_shards_is_refused_not_a_short_dataset() {
    refused_after(|j| {
        for e in j.iter_mut().skip(1) {
            e["shards"] = Value::Array(Vec::new());
        }
    });
}

#[test]
fn journal_shard_count_disagreeing_with_the_shard_file_is_refused() {
    refused_after(|j| {
        add(&mut j[1]["shards"][0]["count"], 1);
        add(&mut last(j)["next_input"], 1);
        add(&mut last(j)["stored"], 1);
        for e in j.iter_mut().skip(2) {
            for s in e["shards"].as_array_mut().unwrap() {
                add(&mut s["first_index"], 1);
            }
        }
    });
}

#[test]
fn journal_shard_outside_the_output_directory_is_refused() {
    let msg = refused_after(|j| j[1]["shards"][0]["file"] = Value::from("../elsewhere.lmdb"));
    assert!(msg.contains("elsewhere"), "{msg}");
}

#[test]
fn journal_skip_of_an_input_not_in_the_listing_is_refused() {
    refused_after(|j| {
        let fake = serde_json::json!({"path": "/nonexistent/x.jpg", "reason": "edited"});
        let at = j
            .iter()
            .skip(1)
            .position(|e| !e["skipped"].as_array().unwrap().is_empty());
        match at {
            Some(k) => j[k + 1]["skipped"][0] = fake,
            None => {
                last(j)["skipped"].as_array_mut().unwrap().push(fake);
                add(&mut last(j)["next_input"], 1);
            }
        }
    });
}

#[test]
fn journal_totals_disagreeing_with_the_records_are_refused() {
    refused_after(|j| add(&mut last(j)["stored"], 1));
}

#[test]
fn journal_damaged_before_its_last_line_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let o = killed(dir.path());
    let path = o.out.join(JOURNAL_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 3, "{text}");
    // Only the last line can be torn by a crash: an earlier one cut short is damage.
    let cut = &lines[1][..lines[1].len() / 2];
    lines[1] = cut;
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let msg = refused(&o);
    assert!(msg.contains("line 2"), "{msg}");
}

#[test]
fn finished_shard_changed_since_journaled_is_refused_naming_the_shard_and_the_journal() {
    // It was refused with the digest error of a finished dataset, "the manifest says",
    // of a conversion that has no manifest yet, and no word of what to do.
    let dir = tempfile::tempdir().unwrap();
    let o = killed(dir.path());
    let shard = o.out.join("shard-00000.lmdb");
    let mut bytes = std::fs::read(&shard).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&shard, &bytes).unwrap();
    let msg = refused(&o);
    assert!(
        msg.contains("shard-00000.lmdb") && msg.contains("digest") && !msg.contains("manifest"),
        "{msg}"
    );
    // Cut short: its size.
    std::fs::write(&shard, &bytes[..at]).unwrap();
    let msg = refused(&o);
    assert!(
        msg.contains(&format!("{at} bytes, journaled as {}", bytes.len())),
        "{msg}"
    );
}

#[test]
fn intact_journal_still_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let o = killed(dir.path());
    let r = convert(&o, &NoProgress).unwrap();
    assert!(r.resumed > 0, "{r:?}");
    assert_eq!(r.written + r.skipped.len() as u64, r.inputs);
}
