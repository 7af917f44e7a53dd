//! What one stoker build meets of another's: manifests of older and newer builds, parts of
//! one partitioned conversion finished by two builds, and what `--resume` says about
//! journals and finished datasets another build left. Older builds' outputs are made here
//! from this build's, edited into the shapes those builds wrote (docs/FORMAT.md says which).

use std::path::{Path, PathBuf};

use serde_json::Value;
use stoker_formats::{
    convert, merge, verify, ConvertOptions, Dataset, FormatError, Manifest, NoProgress, Part,
    Source, MANIFEST_FILE,
};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");

/// Store-mode options (no decoding check, no re-encoding) over the 15 sample photos.
fn options(out: &Path) -> ConvertOptions {
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), out);
    o.check_decode = false;
    o.shards = Some(3);
    o.jobs = Some(2);
    o
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Rewrites the manifest in `dir` through `edit`.
fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join(MANIFEST_FILE);
    let mut m = read_json(&path);
    edit(&mut m);
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

/// Removes the provenance flags that builds before 081b84b and 2b78cbc did not write
/// (`order`, `listing`).
fn as_written_before_derived_flags(m: &mut Value) {
    let flags = m["provenance"]["flags"].as_object_mut().unwrap();
    flags.remove("listing");
    flags.remove("order");
}

/// A converted copy of the sample in `dir/name`.
fn sample_dataset(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    convert(&options(&out), &NoProgress).unwrap();
    out
}

fn assert_reads_and_verifies(dir: &Path) {
    let ds = Dataset::open(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let report = verify(&ds, false).unwrap();
    assert!(report.ok(), "{}: {report:?}", dir.display());
}

#[test]
fn a_newer_manifest_is_refused_by_its_version_even_when_the_rest_does_not_parse() {
    // It was refused by its parse ("unknown variant `webp`"), which tells the user nothing
    // about upgrading.
    let tmp = tempfile::tempdir().unwrap();
    let ds = sample_dataset(tmp.path(), "v3");
    edit_manifest(&ds, |m| {
        m["format_version"] = 3.into();
        m["encoding"] = "webp".into();
        m.as_object_mut().unwrap().remove("payload_bytes");
        m["shards"][0]["stride"] = 2.into();
    });
    for e in [
        Manifest::read(&ds).unwrap_err(),
        Dataset::open(&ds).unwrap_err(),
    ] {
        assert!(
            matches!(
                e,
                FormatError::UnsupportedVersion {
                    found: 3,
                    oldest: 1,
                    supported: 2,
                    ..
                }
            ),
            "{e}"
        );
    }
    // Another format altogether is named as such, whatever its version.
    edit_manifest(&ds, |m| m["format"] = "other-format".into());
    let e = Manifest::read(&ds).unwrap_err();
    assert!(
        matches!(e, FormatError::InvalidManifest { .. }) && e.to_string().contains("other-format"),
        "{e}"
    );
}

#[test]
fn an_unknown_field_in_a_shard_entry_is_refused_and_an_informational_one_is_not() {
    // A shard entry's fields say where its records are; `"key_stride": 2` was read past,
    // and `verify` and `inspect` passed a dataset whose writer meant other keys.
    let tmp = tempfile::tempdir().unwrap();
    let ds = sample_dataset(tmp.path(), "ds");
    let original = std::fs::read(ds.join(MANIFEST_FILE)).unwrap();
    edit_manifest(&ds, |m| m["shards"][1]["key_stride"] = 2.into());
    let e = Dataset::open(&ds).unwrap_err();
    assert!(
        matches!(e, FormatError::InvalidManifest { .. }) && e.to_string().contains("key_stride"),
        "{e}"
    );

    // Fields that only inform: at the top level, in provenance, audit and part.
    std::fs::write(ds.join(MANIFEST_FILE), &original).unwrap();
    edit_manifest(&ds, |m| {
        m["made_on"] = "a laptop".into();
        m["provenance"]["commit"] = "abc1234".into();
        m["audit"]["webp_files"] = 0.into();
    });
    assert_reads_and_verifies(&ds);
}

#[test]
fn an_unknown_field_in_raw_size_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("raw");
    let mut o = options(&out);
    o.encoding = stoker_formats::Encoding::Raw;
    o.raw_size = Some((8, 6));
    convert(&o, &NoProgress).unwrap();
    assert_reads_and_verifies(&out);
    edit_manifest(&out, |m| m["raw_size"]["dtype"] = "u16".into());
    let e = Dataset::open(&out).unwrap_err();
    assert!(
        matches!(e, FormatError::InvalidManifest { .. }) && e.to_string().contains("dtype"),
        "{e}"
    );
}

#[test]
fn manifests_in_the_shapes_older_builds_wrote_still_read() {
    let tmp = tempfile::tempdir().unwrap();
    // Version 1 (405544c and before 6fc02d7): CRC-32C of each shard file, no
    // `max_file_size`, `listing` or `order` flag.
    let v1 = sample_dataset(tmp.path(), "v1");
    edit_manifest(&v1, |m| {
        m["format_version"] = 1.into();
        for s in m["shards"].as_array_mut().unwrap() {
            let bytes = std::fs::read(v1.join(s["file"].as_str().unwrap())).unwrap();
            let s = s.as_object_mut().unwrap();
            s.remove("xxh3");
            s.insert("crc32c".into(), crc32c::crc32c(&bytes).into());
        }
        as_written_before_derived_flags(m);
        m["provenance"]["flags"]
            .as_object_mut()
            .unwrap()
            .remove("max_file_size");
    });
    // Version 2 before the derived flags (6fc02d7 to 491dcbd).
    let v2 = sample_dataset(tmp.path(), "v2");
    edit_manifest(&v2, as_written_before_derived_flags);
    // Parts and their merge (key_base).
    let parts = tmp.path().join("parts");
    for index in 0..3 {
        let mut o = options(&parts);
        o.part = Some(Part::new(index, 3).unwrap());
        convert(&o, &NoProgress).unwrap();
    }
    // Parts of 22daa13 to 491dcbd: no derived flags either.
    for index in 0..3 {
        let part = parts.join(Part::new(index, 3).unwrap().dir_name());
        edit_manifest(&part, as_written_before_derived_flags);
        assert_reads_and_verifies(&part);
    }
    for dir in [&v1, &v2] {
        assert_reads_and_verifies(dir);
    }
    merge(&parts, &[]).unwrap();
    assert_reads_and_verifies(&parts);
    let m = read_json(&parts.join(MANIFEST_FILE));
    assert!(
        m["shards"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s.get("key_base").is_some()),
        "{m}"
    );
}

/// Converts the sample in three parts under `root`; returns the part directories.
fn convert_parts(root: &Path) -> Vec<PathBuf> {
    (0..3)
        .map(|index| {
            let mut o = options(root);
            o.part = Some(Part::new(index, 3).unwrap());
            convert(&o, &NoProgress).unwrap().out
        })
        .collect()
}

#[test]
fn parts_of_one_conversion_finished_by_two_builds_merge() {
    // A job array upgraded mid-way: the parts finished before the upgrade lack the derived
    // flags `listing` and `order`, and merge refused them as "from different conversions",
    // though `part.listing` showed one conversion and `convert --resume` kept them as done.
    let tmp = tempfile::tempdir().unwrap();
    let single = sample_dataset(tmp.path(), "single");
    let want = Dataset::open(&single)
        .unwrap()
        .manifest()
        .provenance
        .clone();
    // The older part first (the merged provenance starts from it), then last.
    for old in [0, 2] {
        let root = tmp.path().join(format!("old-{old}"));
        let parts = convert_parts(&root);
        edit_manifest(&parts[old], as_written_before_derived_flags);
        merge(&root, &[]).unwrap_or_else(|e| panic!("older part {old}: {e}"));
        assert_reads_and_verifies(&root);
        let merged = Dataset::open(&root).unwrap();
        assert_eq!(merged.manifest().provenance, want, "older part {old}");
        let (a, b) = (merged.reader().unwrap(), Dataset::open(&single).unwrap());
        let b = b.reader().unwrap();
        for i in 0..15 {
            assert_eq!(a.get(i).unwrap().payload, b.get(i).unwrap().payload);
        }
    }
}

/// Merges the parts of a fresh conversion in `root` after `edit` changed part 1's
/// manifest; returns the refusal.
fn merge_refusal(root: &Path, edit: impl FnOnce(&mut Value)) -> String {
    let parts = convert_parts(root);
    edit_manifest(&parts[1], edit);
    let e = merge(root, &[]).unwrap_err();
    assert!(matches!(e, FormatError::MergeRefused { .. }), "{e}");
    assert!(!root.join(MANIFEST_FILE).exists());
    e.to_string()
}

/// A name, an edit of part 1's manifest, and what the refusal must say.
type Case = (&'static str, fn(&mut Value), &'static str);

#[test]
fn parts_that_differ_are_refused_naming_the_field_and_both_values() {
    // It said only "the provenance (source, flags or stoker version) differs".
    let tmp = tempfile::tempdir().unwrap();
    let cases: [Case; 5] = [
        (
            "flag",
            |m| m["provenance"]["flags"]["strict"] = "true".into(),
            "the provenance flag `strict` is \"true\" here but \"false\" in ",
        ),
        (
            "missing flag",
            |m| {
                let flags = m["provenance"]["flags"].as_object_mut().unwrap();
                flags.remove("max_file_size");
            },
            "the provenance flag `max_file_size` is absent here but \"67108864\" in ",
        ),
        // A derived flag still counts where both parts have it.
        (
            "derived flag",
            |m| m["provenance"]["flags"]["order"] = "shuffled".into(),
            "the provenance flag `order` is \"shuffled\" here but \"classes\" in ",
        ),
        (
            "source",
            |m| m["provenance"]["source"] = "elsewhere".into(),
            "the provenance's source is \"elsewhere\" here but ",
        ),
        (
            "version",
            |m| m["provenance"]["tool_version"] = "0.0.9".into(),
            "the provenance's stoker version is \"0.0.9\" here but \"",
        ),
    ];
    for (name, edit, want) in cases {
        let msg = merge_refusal(&tmp.path().join(name), edit);
        assert!(
            msg.contains(want)
                && msg.contains("part-00000-of-00003: the parts come from different conversions"),
            "{name}: {msg}"
        );
    }
}

#[test]
fn parts_converted_with_other_flags_are_refused_naming_the_flag_not_the_listing() {
    // The listing's fingerprint covers the output flags, and was compared first: a part
    // run without --strict was refused with two checksums ("the input listing ... is
    // \"ca50e86a\" here but \"94572d15\"").
    let tmp = tempfile::tempdir().unwrap();
    type Change = fn(&mut ConvertOptions);
    let cases: [(&str, Change, &str); 2] = [
        (
            "strict",
            |o| o.strict = true,
            "the provenance flag `strict` is \"true\" here but \"false\" in ",
        ),
        (
            "quality",
            |o| o.quality = 80,
            "the provenance flag `quality` is \"80\" here but \"90\" in ",
        ),
    ];
    for (name, change, want) in cases {
        let root = tmp.path().join(name);
        for index in 0..2 {
            let mut o = options(&root);
            o.part = Some(Part::new(index, 2).unwrap());
            if index == 1 {
                change(&mut o);
            }
            convert(&o, &NoProgress).unwrap();
        }
        let e = merge(&root, &[]).unwrap_err().to_string();
        assert!(
            e.contains(want) && e.contains("part-00000-of-00002") && !e.contains("listing"),
            "{name}: {e}"
        );
        assert!(!root.join(MANIFEST_FILE).exists());
    }
}

#[test]
fn parts_that_have_a_derived_flag_agree_on_it_when_the_first_lacks_it() {
    // The first part (an older build's) lacks `order`; parts 1 and 2 disagree on it, and
    // were compared only with the first (the regression review's r11).
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("parts");
    let parts = convert_parts(&root);
    edit_manifest(&parts[0], as_written_before_derived_flags);
    edit_manifest(&parts[2], |m| {
        m["provenance"]["flags"]["order"] = "shuffled".into()
    });
    let e = merge(&root, &[]).unwrap_err().to_string();
    assert!(
        e.contains("the provenance flag `order` is \"shuffled\" here but \"classes\" in ")
            && e.contains("part-00001-of-00003"),
        "{e}"
    );
    assert!(!root.join(MANIFEST_FILE).exists());
}

#[test]
fn parts_of_another_raw_size_are_refused_naming_the_part_compared_with() {
    // Part 0 of 4 is empty (2 inputs), so part 1 is the one with a raw size to compare.
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    for name in ["tent.jpg", "puppy.jpg"] {
        std::fs::create_dir_all(src.join("caer")).unwrap();
        std::fs::copy(
            Path::new(SAMPLE).join("caer").join(name),
            src.join("caer").join(name),
        )
        .unwrap();
    }
    let root = tmp.path().join("parts");
    let parts: Vec<PathBuf> = (0..4)
        .map(|index| {
            let mut o = ConvertOptions::new(Source::ImageFolder(src.clone()), &root);
            o.encoding = stoker_formats::Encoding::Raw;
            o.raw_size = Some((8, 6));
            o.part = Some(Part::new(index, 4).unwrap());
            convert(&o, &NoProgress).unwrap().out
        })
        .collect();
    edit_manifest(&parts[3], |m| m["raw_size"]["height"] = 7.into());
    let msg = merge(&root, &[]).unwrap_err().to_string();
    let want = format!(
        "the raw image size is 8x7x3 here but 8x6x3 in {}:",
        parts[1].display()
    );
    assert!(msg.contains(&want), "{msg}");
}

/// Resumes `o` and returns its refusal, checking that the directory was left as it was.
fn resume_refusal(o: &ConvertOptions) -> FormatError {
    let before = stoker_testdata::files_in(&o.out);
    let mut r = o.clone();
    r.resume = true;
    let e = convert(&r, &NoProgress).unwrap_err();
    assert_eq!(stoker_testdata::files_in(&o.out), before, "{e}");
    e
}

#[test]
fn resume_of_a_finished_dataset_without_a_listing_flag_says_an_older_build_made_it() {
    // A retried job whose dataset an older build finished was told the dataset holds
    // "other inputs or flags", which may well be false: no listing was recorded.
    let tmp = tempfile::tempdir().unwrap();
    let out = sample_dataset(tmp.path(), "ds");
    edit_manifest(&out, as_written_before_derived_flags);
    let e = resume_refusal(&options(&out));
    let msg = e.to_string();
    assert!(
        matches!(e, FormatError::OutputExists { .. })
            && msg.contains("made by an older stoker")
            && msg.contains("cannot tell")
            && msg.contains("convert into a new directory"),
        "{msg}"
    );
    // One that records its listing is of other inputs or flags when that differs; a flag
    // that differs is named (it was "its listing fingerprint differs").
    let out = sample_dataset(tmp.path(), "other");
    let mut o = options(&out);
    o.quality = 80;
    let msg = resume_refusal(&o).to_string();
    assert!(
        msg.contains(
            "made with other flags: its manifest.json has `quality` \"90\", this run \"80\""
        ) && !msg.contains("older stoker"),
        "{msg}"
    );
    // The same flags over other inputs: only the listing tells them apart.
    let out = sample_dataset(tmp.path(), "inputs");
    edit_manifest(&out, |m| {
        m["provenance"]["flags"]["listing"] = "0badf00d".into()
    });
    let msg = resume_refusal(&options(&out)).to_string();
    assert!(
        msg.contains("other inputs or flags") && !msg.contains("made with other flags"),
        "{msg}"
    );
}

/// A conversion of the sample into `out`, killed after two of its three shards; returns
/// its options.
fn killed(out: &Path) -> ConvertOptions {
    let mut o = options(out);
    o.fail_after = Some(11);
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { .. }), "{e}");
    o.fail_after = None;
    o
}

/// Rewrites the append-only journal in `out` as the one object that builds before
/// e7392a2 wrote to `.stoker-convert.json`, through `edit`.
fn as_legacy_journal(out: &Path, edit: impl FnOnce(&mut Value)) {
    let path = out.join(stoker_formats::convert::JOURNAL_FILE);
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let all = |key: &str| -> Vec<Value> {
        lines[1..]
            .iter()
            .flat_map(|l| l[key].as_array().unwrap().clone())
            .collect()
    };
    let mut old = lines.last().unwrap().clone();
    old["fingerprint"] = lines[0]["fingerprint"].clone();
    old["done"] = Value::from(all("shards"));
    old["skipped"] = Value::from(all("skipped"));
    old.as_object_mut().unwrap().remove("shards");
    edit(&mut old);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(
        out.join(".stoker-convert.json"),
        serde_json::to_vec_pretty(&old).unwrap(),
    )
    .unwrap();
}

/// Rewrites the header of the append-only journal in `out` as builds before the flags
/// were recorded (version 3) wrote it.
fn as_version_3_journal(out: &Path) {
    let path = out.join(stoker_formats::convert::JOURNAL_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    let mut header: Value = serde_json::from_str(first).unwrap();
    assert_eq!(header["stoker_convert_journal"], 4);
    let header_fields = header.as_object_mut().unwrap();
    assert!(header_fields.remove("flags").is_some());
    header_fields.insert("stoker_convert_journal".into(), 3.into());
    std::fs::write(&path, format!("{header}\n{rest}")).unwrap();
}

#[test]
fn resume_of_a_journal_another_build_wrote_says_the_build_may_be_why() {
    // A conversion killed under 405544c (format version 1) and resumed by a later build
    // was said to be "of different inputs or flags": it was not, but that build's shards
    // and fingerprint cannot be continued.
    let tmp = tempfile::tempdir().unwrap();
    let o = killed(&tmp.path().join("v1"));
    as_legacy_journal(&o.out, |j| {
        j["fingerprint"] = 1529401926.into();
        for s in j["done"].as_array_mut().unwrap() {
            let s = s.as_object_mut().unwrap();
            s.remove("xxh3");
            s.insert("crc32c".into(), 1.into());
        }
    });
    let msg = resume_refusal(&o).to_string();
    assert!(
        msg.contains("format version 1") && msg.contains("convert into a new directory"),
        "{msg}"
    );

    // A legacy journal (392abf7 to 491dcbd) of another fingerprint, and an append-only one.
    let o = killed(&tmp.path().join("legacy"));
    as_legacy_journal(&o.out, |j| j["fingerprint"] = 7.into());
    let msg = resume_refusal(&o).to_string();
    assert!(
        msg.contains("older stoker")
            && msg.contains("listed them differently")
            && msg.contains("convert into a new directory"),
        "{msg}"
    );
    // An append-only one of version 3, whose header has no flags.
    let o = killed(&tmp.path().join("append-only"));
    as_version_3_journal(&o.out);
    let mut other = o.clone();
    other.quality = 80;
    let msg = resume_refusal(&other).to_string();
    assert!(
        msg.contains("different inputs or flags")
            && msg.contains("listed them differently")
            && msg.contains("convert into a new directory"),
        "{msg}"
    );
    // Since version 4 the header has the flags, and the one that differs is named.
    let o = killed(&tmp.path().join("flags"));
    let mut other = o.clone();
    other.quality = 80;
    let msg = resume_refusal(&other).to_string();
    assert!(
        msg.contains("begun with other flags: its journal has `quality` \"90\", this run \"80\"")
            && msg.contains("convert into a new directory"),
        "{msg}"
    );
    // A version 3 journal of the same conversion still resumes.
    let o = killed(&tmp.path().join("version-3"));
    as_version_3_journal(&o.out);
    let mut r = o.clone();
    r.resume = true;
    assert!(convert(&r, &NoProgress).unwrap().resumed > 0);
    // The same legacy journal with its own fingerprint still resumes.
    let o = killed(&tmp.path().join("same"));
    as_legacy_journal(&o.out, |_| {});
    let mut r = o.clone();
    r.resume = true;
    assert!(convert(&r, &NoProgress).unwrap().resumed > 0);
}

#[test]
fn a_journal_of_a_newer_version_is_refused_as_a_journal_not_a_manifest() {
    // It said "invalid manifest: unreadable conversion journal: journal version 3".
    let tmp = tempfile::tempdir().unwrap();
    let o = killed(&tmp.path().join("out"));
    let path = o.out.join(stoker_formats::convert::JOURNAL_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "\"stoker_convert_journal\":4",
        "\"stoker_convert_journal\":5",
        1,
    );
    std::fs::write(&path, text).unwrap();
    let e = resume_refusal(&o);
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            FormatError::JournalVersion {
                found: 5,
                supported: 4,
                ..
            }
        ) && msg.contains("newer stoker")
            && msg.contains("reads versions 2 to 4")
            && !msg.contains("manifest"),
        "{msg}"
    );
}
