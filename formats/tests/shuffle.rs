//! `convert --shuffle`: the same records in a seeded order that mixes the classes, identical
//! for any thread count, across a kill and `resume`, and when converted in parts and merged;
//! the manifest says how its records are ordered.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stoker_formats::convert::ORDER_FLAG;
use stoker_formats::{
    convert, merge, verify, ConvertOptions, Dataset, FormatError, NoProgress, Part, Source,
};

use common::records;

fn photos() -> PathBuf {
    stoker_testdata::dir().join("imagefolder")
}

/// Stored originals (no test decode) in 1 MiB shards: several shards, quick to write.
fn opts(out: &Path, shuffle: Option<u64>) -> ConvertOptions {
    let mut o = ConvertOptions::new(Source::ImageFolder(photos()), out);
    o.check_decode = false;
    o.shard_bytes = 1 << 20;
    o.jobs = Some(2);
    o.shuffle = shuffle;
    o
}

fn flags(path: &Path) -> BTreeMap<String, String> {
    Dataset::open(path)
        .unwrap()
        .manifest()
        .provenance
        .flags
        .clone()
}

/// How many neighbouring records have different labels.
fn label_changes(recs: &[(u32, Vec<u8>)]) -> usize {
    recs.windows(2).filter(|w| w[0].0 != w[1].0).count()
}

#[test]
fn shuffled_conversion_holds_the_same_records_with_classes_mixed() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    let shuffled = tmp.path().join("shuffled");
    convert(&opts(&plain, None), &NoProgress).unwrap();
    let report = convert(&opts(&shuffled, Some(7)), &NoProgress).unwrap();
    assert_eq!(report.written + report.skipped.len() as u64, report.inputs);

    let (a, b) = (records(&plain), records(&shuffled));
    let classes = Dataset::open(&plain).unwrap().manifest().classes.len();
    assert!(classes > 10, "{classes}");
    // Listing order: one run per class.
    assert_eq!(label_changes(&a), classes - 1);
    // Shuffled: most neighbours differ (a random order of ~27 classes changes label at
    // about 95 % of the steps).
    assert!(
        label_changes(&b) * 10 > b.len() * 8,
        "{} label changes in {} records",
        label_changes(&b),
        b.len()
    );
    assert_ne!(a, b);
    let (mut sa, mut sb) = (a.clone(), b.clone());
    sa.sort();
    sb.sort();
    assert_eq!(sa, sb, "not the same records");

    assert_eq!(flags(&plain)[ORDER_FLAG], "classes");
    assert!(!flags(&plain).contains_key("shuffle"));
    assert_eq!(flags(&shuffled)[ORDER_FLAG], "shuffled");
    assert_eq!(flags(&shuffled)["shuffle"], "7");
    assert!(verify(&Dataset::open(&shuffled).unwrap(), false)
        .unwrap()
        .ok());
}

#[test]
fn the_seed_alone_decides_the_order() {
    let tmp = tempfile::tempdir().unwrap();
    let mut one_thread = opts(&tmp.path().join("j1"), Some(7));
    one_thread.jobs = Some(1);
    let mut four = opts(&tmp.path().join("j4"), Some(7));
    four.jobs = Some(4);
    let other_seed = opts(&tmp.path().join("s8"), Some(8));
    for o in [&one_thread, &four, &other_seed] {
        convert(o, &NoProgress).unwrap();
    }
    let files = |p: &Path| stoker_testdata::files_in(p);
    assert_eq!(
        files(&one_thread.out),
        files(&four.out),
        "bytes differ by jobs"
    );
    assert_ne!(records(&one_thread.out), records(&other_seed.out));
}

#[test]
fn a_killed_shuffled_conversion_resumes_to_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = opts(&tmp.path().join("clean"), Some(3));
    convert(&clean, &NoProgress).unwrap();

    let mut k = opts(&tmp.path().join("killed"), Some(3));
    k.fail_after = Some(60);
    let e = convert(&k, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { .. }), "{e}");
    // Another seed is another dataset: not resumed into this one.
    let mut other = k.clone();
    other.fail_after = None;
    other.resume = true;
    other.shuffle = Some(4);
    let e = convert(&other, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");

    k.fail_after = None;
    k.resume = true;
    let r = convert(&k, &NoProgress).unwrap();
    assert!(r.resumed > 0, "{r:?}");
    assert_eq!(
        stoker_testdata::files_in(&clean.out),
        stoker_testdata::files_in(&k.out)
    );
}

#[test]
fn shuffled_parts_merge_into_the_shuffled_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let single = opts(&tmp.path().join("single"), Some(11));
    convert(&single, &NoProgress).unwrap();
    let root = tmp.path().join("parts");
    for index in 0..3 {
        let mut o = opts(&root, Some(11));
        o.part = Some(Part::new(index, 3).unwrap());
        convert(&o, &NoProgress).unwrap();
    }
    merge(&root, &[]).unwrap();
    assert_eq!(records(&root), records(&single.out));
    assert_eq!(flags(&root), flags(&single.out));
}

#[test]
fn a_list_source_keeps_its_order_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let root = stoker_testdata::dir();
    let list = tmp.path().join("list.csv");
    std::fs::write(
        &list,
        "imagefolder/caer/tent.jpg,1\nimagefolder/caer/tent.jpg,0\n",
    )
    .unwrap();
    let mut o = ConvertOptions::new(Source::List { root, list }, tmp.path().join("ds"));
    o.check_decode = false;
    convert(&o, &NoProgress).unwrap();
    assert_eq!(flags(&o.out)[ORDER_FLAG], "list");
    let labels: Vec<u32> = records(&o.out).iter().map(|r| r.0).collect();
    assert_eq!(labels, [1, 0]);
}
