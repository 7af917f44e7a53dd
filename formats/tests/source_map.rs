//! The source map: after a conversion (plain, with skipped inputs, resumed, in parts and
//! merged, from tar shards) record `i`'s named source holds record `i`'s bytes; a dataset
//! without a map reads as before and says so; a damaged map is a clear error, never a
//! panic, a hang or a huge allocation.

#[path = "tar_shards/mod.rs"]
mod tar_shards;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use stoker_formats::convert::JOURNAL_FILE;
use stoker_formats::{
    convert, merge, ConvertOptions, ConvertReport, Dataset, DatasetWriter, Encoding, FormatError,
    Layout, NoProgress, Part, Provenance, RecordMeta, Source, WriterOptions, MANIFEST_FILE,
    SOURCES_FILE,
};

fn photos() -> PathBuf {
    stoker_testdata::dir().join("imagefolder")
}

/// Store mode (JPEGs kept byte for byte) with several shards.
fn options(source: Source, out: &Path) -> ConvertOptions {
    let mut o = ConvertOptions::new(source, out);
    o.check_decode = false;
    o.shard_bytes = 1 << 20;
    o.jobs = Some(2);
    o
}

/// Asserts that every record of the dataset at `ds` is the file its source map names
/// under `root` (payload byte for byte, label that of its class folder when `classes`),
/// and returns the names in record order.
fn assert_sources_hold_the_records(ds: &Path, root: &Path, classes: bool) -> Vec<PathBuf> {
    let ds = Dataset::open(ds).unwrap();
    let map = ds.source_map().unwrap().expect("a source map");
    assert_eq!(map.len(), ds.len());
    let reader = ds.reader().unwrap();
    let mut names = Vec::new();
    for i in 0..ds.len() {
        let source = map.get(i).unwrap();
        assert!(source.is_relative(), "record {i}: {}", source.display());
        assert_eq!(ds.source_of(i).unwrap().as_ref(), Some(&source));
        let rec = reader.get(i).unwrap();
        let file = std::fs::read(root.join(&source)).unwrap();
        assert!(
            rec.payload == file,
            "record {i} is not the bytes of {}",
            source.display()
        );
        if classes {
            let class = source.iter().next().unwrap().to_str().unwrap();
            assert_eq!(ds.manifest().classes[rec.header.label as usize], class);
        }
        names.push(source);
    }
    assert!(matches!(
        map.get(ds.len()),
        Err(FormatError::IndexOutOfRange { .. })
    ));
    names
}

/// The photos of three classes, each beside a copy cut short and a file that is not an
/// image (inputs the conversion skips), so skips fall between records all along.
fn source_with_skips(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    for class in ["caer", "exiv2", "leptonica"] {
        let to = src.join(class);
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(photos().join(class)).unwrap() {
            let f = f.unwrap();
            let bytes = std::fs::read(f.path()).unwrap();
            let name = f.file_name().to_string_lossy().into_owned();
            std::fs::write(to.join(&name), &bytes).unwrap();
            std::fs::write(
                to.join(format!("{name}-cut.jpg")),
                &bytes[..bytes.len() / 3],
            )
            .unwrap();
            std::fs::write(to.join(format!("{name}.txt")), b"not an image").unwrap();
        }
    }
    src
}

/// The files under `src` that a conversion of it skipped, relative to it.
fn skipped(r: &ConvertReport, src: &Path) -> BTreeSet<PathBuf> {
    r.skipped
        .iter()
        .map(|s| s.path.strip_prefix(src).unwrap().to_path_buf())
        .collect()
}

#[test]
fn a_plain_conversion_names_every_photo_once() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let r = convert(&options(Source::ImageFolder(photos()), &out), &NoProgress).unwrap();
    assert!(r.skipped.is_empty() && r.written > 100, "{r:?}");
    let names = assert_sources_hold_the_records(&out, &photos(), true);
    let mut files = Vec::new();
    for class in std::fs::read_dir(photos()).unwrap() {
        let class = class.unwrap().path();
        if class.is_dir() {
            for f in std::fs::read_dir(&class).unwrap() {
                files.push(
                    f.unwrap()
                        .path()
                        .strip_prefix(photos())
                        .unwrap()
                        .to_path_buf(),
                );
            }
        }
    }
    let named: BTreeSet<_> = names.iter().cloned().collect();
    assert_eq!(named.len(), names.len(), "a source named twice");
    assert_eq!(named, files.into_iter().collect::<BTreeSet<_>>());
    // Recorded in the manifest with its size and digest, written as the manifest is.
    let m = Dataset::open(&out).unwrap().manifest().clone();
    let entry = m.sources.expect("manifest names the map");
    assert_eq!(
        (entry.file.as_str(), entry.records),
        (SOURCES_FILE, m.samples)
    );
    let len = std::fs::metadata(out.join(SOURCES_FILE)).unwrap().len();
    assert_eq!(entry.bytes, len);
    assert!(!out.join(format!("{SOURCES_FILE}.tmp")).exists());
}

#[test]
fn skipped_inputs_do_not_shift_the_names_of_the_records_after_them() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source_with_skips(tmp.path());
    let out = tmp.path().join("ds");
    let r = convert(
        &options(Source::ImageFolder(src.clone()), &out),
        &NoProgress,
    )
    .unwrap();
    assert!(r.skipped.len() as u64 == 2 * r.written, "{r:?}");
    let names = assert_sources_hold_the_records(&out, &src, true);
    let skips = skipped(&r, &src);
    assert!(names.iter().all(|n| !skips.contains(n)));
    assert!(names.iter().all(|n| n.extension().unwrap() != "txt"));
}

#[test]
fn a_list_conversion_names_the_rows_and_parts_merge_to_the_same_map() {
    // Rows of three classes with missing files between them: each part skips its own, so
    // no part knows its first record's index, and the merge must still name each right.
    let tmp = tempfile::tempdir().unwrap();
    let root = stoker_testdata::dir();
    let mut rows = String::new();
    for (label, class) in ["caer", "foolbox", "skimage"].iter().enumerate() {
        let mut files: Vec<_> = std::fs::read_dir(photos().join(class))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        for (i, f) in files.iter().enumerate() {
            rows.push_str(&format!("imagefolder/{class}/{f},{label}\n"));
            if i % 4 == 0 {
                rows.push_str(&format!("missing/{class}-{i}.jpg,0\n"));
            }
        }
    }
    let list = tmp.path().join("list.csv");
    std::fs::write(&list, rows).unwrap();
    let source = Source::List {
        root: root.clone(),
        list,
    };
    let single = tmp.path().join("single");
    let r = convert(&options(source.clone(), &single), &NoProgress).unwrap();
    assert!(r.skipped.len() > 5, "{r:?}");
    let names = assert_sources_hold_the_records(&single, &root, false);
    assert!(names.iter().all(|n| n.starts_with("imagefolder")));

    let parts = tmp.path().join("parts");
    for index in 0..5 {
        let mut o = options(source.clone(), &parts);
        o.part = Some(Part::new(index, 5).unwrap());
        convert(&o, &NoProgress).unwrap();
    }
    merge(&parts, &[]).unwrap();
    assert_eq!(assert_sources_hold_the_records(&parts, &root, false), names);
    // The same names, the same file: as if converted at once.
    assert_eq!(
        std::fs::read(parts.join(SOURCES_FILE)).unwrap(),
        std::fs::read(single.join(SOURCES_FILE)).unwrap()
    );
}

#[test]
fn a_part_map_altered_in_place_refuses_the_merge_and_every_part_stays() {
    // One byte of a name changed keeps every offset sound: a merge that checked only the
    // shape copied the altered name and wrote a digest of its own over it, so the merged
    // dataset passed `verify` naming a record's input wrong.
    let tmp = tempfile::tempdir().unwrap();
    let parts = tmp.path().join("parts");
    for index in 0..2 {
        let mut o = options(Source::ImageFolder(photos()), &parts);
        o.part = Some(Part::new(index, 2).unwrap());
        convert(&o, &NoProgress).unwrap();
    }
    let second = parts.join(Part::new(1, 2).unwrap().dir_name());
    let map = second.join(SOURCES_FILE);
    let good = std::fs::read(&map).unwrap();
    let mut bytes = good.clone();
    *bytes.last_mut().unwrap() ^= 0x01;
    std::fs::write(&map, bytes).unwrap();

    let e = merge(&parts, &[]).unwrap_err();
    assert!(matches!(e, FormatError::DamagedSourceMap { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains(&second.display().to_string()), "{text}");
    assert!(text.contains("rerun its task"), "{text}");
    assert!(!parts.join(MANIFEST_FILE).exists());
    assert!(!parts.join(SOURCES_FILE).exists());
    for index in 0..2 {
        let part = parts.join(Part::new(index, 2).unwrap().dir_name());
        assert!(
            part.join(MANIFEST_FILE).exists(),
            "part {index} was removed"
        );
    }
    // Put back, the same parts merge.
    std::fs::write(&map, good).unwrap();
    merge(&parts, &[]).unwrap();
    assert_sources_hold_the_records(&parts, &photos(), true);
}

#[test]
fn a_resumed_conversion_names_the_records_of_both_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source_with_skips(tmp.path());
    let whole = tmp.path().join("whole");
    let mut o = options(Source::ImageFolder(src.clone()), &whole);
    o.shard_bytes = 64 << 10;
    convert(&o, &NoProgress).unwrap();
    let want = std::fs::read(whole.join(SOURCES_FILE)).unwrap();
    for kill_at in [6, 14] {
        let out = tmp.path().join(format!("killed-{kill_at}"));
        let mut k = o.clone();
        k.out = out.clone();
        k.fail_after = Some(kill_at);
        assert!(matches!(
            convert(&k, &NoProgress),
            Err(FormatError::Injected { .. })
        ));
        assert!(out.join(JOURNAL_FILE).exists());
        let mut r = o.clone();
        r.out = out.clone();
        r.resume = true;
        let report = convert(&r, &NoProgress).unwrap();
        assert!(report.resumed > 0, "{report:?}");
        assert_sources_hold_the_records(&out, &src, true);
        assert_eq!(std::fs::read(out.join(SOURCES_FILE)).unwrap(), want);
    }
}

/// A journal as a build before source maps wrote it: version 2, no skip positions.
fn as_version_2_journal(out: &Path) {
    let path = out.join(JOURNAL_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        if n == 0 {
            assert_eq!(v["stoker_convert_journal"], 4);
            v["stoker_convert_journal"] = 2.into();
            assert!(v.as_object_mut().unwrap().remove("flags").is_some());
        } else {
            for s in v["skipped"].as_array_mut().unwrap() {
                assert!(s.as_object_mut().unwrap().remove("input").is_some(), "{s}");
            }
        }
        lines.push(serde_json::to_string(&v).unwrap() + "\n");
    }
    std::fs::write(&path, lines.concat()).unwrap();
}

#[test]
fn a_journal_of_an_older_build_resumes_with_the_skips_found_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source_with_skips(tmp.path());
    let whole = tmp.path().join("whole");
    let mut o = options(Source::ImageFolder(src.clone()), &whole);
    o.shard_bytes = 64 << 10;
    convert(&o, &NoProgress).unwrap();
    let out = tmp.path().join("killed");
    let mut k = o.clone();
    k.out = out.clone();
    k.fail_after = Some(6);
    assert!(convert(&k, &NoProgress).is_err());
    as_version_2_journal(&out);
    let mut r = o.clone();
    r.out = out.clone();
    r.resume = true;
    let report = convert(&r, &NoProgress).unwrap();
    assert!(
        report.resumed > 0 && report.warnings.is_empty(),
        "{report:?}"
    );
    assert_eq!(
        std::fs::read(out.join(SOURCES_FILE)).unwrap(),
        std::fs::read(whole.join(SOURCES_FILE)).unwrap()
    );
}

#[test]
fn tar_members_are_named_by_shard_and_member() {
    let tmp = tempfile::tempdir().unwrap();
    let photos = tar_shards::photos();
    let shards = tmp.path().join("shards");
    tar_shards::write_shards(&shards, &photos);
    let out = tmp.path().join("ds");
    let mut o = options(Source::ImageFolder(shards.clone()), &out);
    o.layout = Layout::WebDataset;
    convert(&o, &NoProgress).unwrap();
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.len(), photos.len() as u64);
    let reader = ds.reader().unwrap();
    let n = photos.len();
    for (i, (label, photo)) in photos.iter().enumerate() {
        let shard = [0, n / 3, 2 * n / 3].iter().rposition(|&c| i >= c).unwrap();
        let prefix = match shard {
            2 => String::new(),
            _ => format!("{}/", "d".repeat(90)),
        };
        let want = format!(
            "shard-{shard:05}.tar:{prefix}{label}/{}",
            photo.file_name().unwrap().to_str().unwrap()
        );
        let got = ds.source_of(i as u64).unwrap().unwrap();
        assert_eq!(got, Path::new(&want));
        assert_eq!(
            reader.get(i as u64).unwrap().payload,
            std::fs::read(photo).unwrap()
        );
    }
    // A single tar converted: its members are named after it.
    let one = tmp.path().join("one");
    let mut o = options(Source::ImageFolder(shards.join("shard-00002.tar")), &one);
    o.layout = Layout::WebDataset;
    convert(&o, &NoProgress).unwrap();
    let first = Dataset::open(&one).unwrap().source_of(0).unwrap().unwrap();
    assert!(
        first.to_str().unwrap().starts_with("shard-00002.tar:"),
        "{}",
        first.display()
    );
}

#[test]
fn a_dataset_without_a_map_reads_as_before_and_says_it_has_none() {
    let tmp = tempfile::tempdir().unwrap();
    // Written by hand: no map.
    let mut w = DatasetWriter::create(tmp.path().join("hand"), WriterOptions::default()).unwrap();
    let meta = RecordMeta {
        encoding: Encoding::Raw,
        height: 1,
        width: 1,
        channels: 1,
        label: 0,
    };
    w.push(meta, &[1]).unwrap();
    w.finish(vec!["only".into()], Provenance::stoker("test"))
        .unwrap();
    let ds = Dataset::open(tmp.path().join("hand")).unwrap();
    assert!(ds.source_map().unwrap().is_none());
    assert_eq!(ds.source_of(0).unwrap(), None);
    assert!(matches!(
        ds.source_of(1),
        Err(FormatError::IndexOutOfRange { index: 1, len: 1 })
    ));
    // Converted by a build before source maps: no `sources` in the manifest, no file.
    let out = tmp.path().join("older");
    convert(&options(Source::ImageFolder(photos()), &out), &NoProgress).unwrap();
    without_sources(&out);
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.source_of(0).unwrap(), None);
    assert!(stoker_formats::verify(&ds, false).unwrap().ok());
}

/// The dataset at `out` as a build before source maps left it.
fn without_sources(out: &Path) {
    let path = out.join(MANIFEST_FILE);
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(m.as_object_mut().unwrap().remove("sources").is_some());
    std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap() + "\n").unwrap();
    std::fs::remove_file(out.join(SOURCES_FILE)).unwrap();
}

/// `source_of(0)`'s error on the dataset at `out` after `damage` to its map.
fn after_damage(out: &Path, damage: impl FnOnce(&Path)) -> String {
    damage(&out.join(SOURCES_FILE));
    let ds = Dataset::open(out).expect("a damaged map does not stop the dataset opening");
    assert!(ds.reader().unwrap().get(0).is_ok());
    let e = ds.source_of(0).unwrap_err();
    assert!(
        matches!(
            e,
            FormatError::DamagedSourceMap { .. } | FormatError::NotRegularFile { .. }
        ),
        "{e:?}"
    );
    e.to_string()
}

#[test]
fn a_damaged_map_is_a_clear_error_and_the_records_still_read() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good");
    convert(&options(Source::ImageFolder(photos()), &good), &NoProgress).unwrap();
    let copy = |name: &str| {
        let to = tmp.path().join(name);
        stoker_testdata::copy_tree(&good, &to);
        to
    };
    let len = std::fs::metadata(good.join(SOURCES_FILE)).unwrap().len();
    let set_len = |n: u64| {
        move |p: &Path| {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(n)
                .unwrap()
        }
    };
    let msg = after_damage(&copy("cut"), set_len(len / 2));
    assert!(
        msg.contains("damaged source map") && msg.contains("bytes, the manifest says"),
        "{msg}"
    );
    // A sparse terabyte: refused by its size, nothing of it read.
    let msg = after_damage(&copy("huge"), set_len(1 << 40));
    assert!(msg.contains("1099511627776 bytes"), "{msg}");
    let msg = after_damage(&copy("missing"), |p| std::fs::remove_file(p).unwrap());
    assert!(msg.contains("missing"), "{msg}");
    let msg = after_damage(&copy("garbage"), |p| {
        std::fs::write(p, vec![0xa5; len as usize]).unwrap()
    });
    assert!(msg.contains("header"), "{msg}");
    // A count that would size a table past the file.
    let msg = after_damage(&copy("count"), |p| {
        let mut b = std::fs::read(p).unwrap();
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(p, b).unwrap();
    });
    assert!(msg.contains("records"), "{msg}");
    // Offsets out of order: the name of record 0 would end before it starts.
    let msg = after_damage(&copy("offsets"), |p| {
        let mut b = std::fs::read(p).unwrap();
        b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(p, b).unwrap();
    });
    assert!(msg.contains("record 0's name"), "{msg}");
    // A FIFO in its place is refused, not waited on.
    let msg = after_damage(&copy("fifo"), |p| {
        std::fs::remove_file(p).unwrap();
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    });
    assert!(msg.contains("FIFO"), "{msg}");
}

#[test]
fn verify_checks_the_map_a_name_altered_in_place_included() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good");
    convert(&options(Source::ImageFolder(photos()), &good), &NoProgress).unwrap();
    let report = stoker_formats::verify(&Dataset::open(&good).unwrap(), false).unwrap();
    assert!(report.ok(), "{:?}", report.bad);

    // One byte of the last name changed: every offset still sound, so lookups cannot
    // tell (they give a wrong name); only the digest does.
    let altered = tmp.path().join("altered");
    stoker_testdata::copy_tree(&good, &altered);
    let map = altered.join(SOURCES_FILE);
    let mut bytes = std::fs::read(&map).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    std::fs::write(&map, bytes).unwrap();
    let ds = Dataset::open(&altered).unwrap();
    assert!(ds.source_of(ds.len() - 1).unwrap().is_some());
    for report in [
        stoker_formats::verify(&ds, false).unwrap(),
        stoker_formats::verify_dir(&altered, false).unwrap(),
    ] {
        assert!(!report.ok());
        assert_eq!(report.ok_records, ds.len(), "no record is lost");
        assert_eq!(report.bad.len(), 1, "{:?}", report.bad);
        let bad = &report.bad[0];
        assert_eq!((bad.shard.as_str(), bad.index), (SOURCES_FILE, None));
        assert!(bad.problem.contains("was altered"), "{}", bad.problem);
    }

    // A map cut short: its shape is the problem named.
    let cut = tmp.path().join("cut");
    stoker_testdata::copy_tree(&good, &cut);
    let file = std::fs::File::options()
        .write(true)
        .open(cut.join(SOURCES_FILE))
        .unwrap();
    file.set_len(20).unwrap();
    let report = stoker_formats::verify_dir(&cut, false).unwrap();
    assert_eq!(report.bad.len(), 1, "{:?}", report.bad);
    assert!(
        report.bad[0].problem.contains("the manifest says"),
        "{}",
        report.bad[0].problem
    );
}

/// `verify` names the input of each bad record and of each lost range's ends from a sound
/// map, and none from a damaged one (its names could be wrong).
#[test]
fn verify_names_the_inputs_of_bad_and_lost_records() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    convert(&options(Source::ImageFolder(photos()), &out), &NoProgress).unwrap();
    let ds = Dataset::open(&out).unwrap();
    let shards = ds.manifest().shards.clone();
    assert!(shards.len() >= 3, "{shards:?}");
    let name = |i: u64| {
        ds.source_of(i)
            .unwrap()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    };
    // A byte of record 1's payload flipped (found by its bytes in shard 0), shard 2 gone.
    let jpeg = std::fs::read(photos().join(name(1))).unwrap();
    let shard0 = out.join(&shards[0].file);
    let mut bytes = std::fs::read(&shard0).unwrap();
    let at = bytes
        .windows(32)
        .position(|w| w == &jpeg[jpeg.len() / 2..jpeg.len() / 2 + 32])
        .unwrap();
    bytes[at] ^= 1;
    std::fs::write(&shard0, &bytes).unwrap();
    std::fs::remove_file(out.join(&shards[2].file)).unwrap();

    let report = stoker_formats::verify_dir(&out, false).unwrap();
    let bad: Vec<_> = report.bad.iter().filter(|b| b.index == Some(1)).collect();
    assert_eq!(bad.len(), 1, "{:?}", report.bad);
    assert_eq!(bad[0].source.as_deref(), Some(name(1).as_str()));
    // A shard's own problems name no input.
    assert!(report
        .bad
        .iter()
        .all(|b| b.index.is_some() || b.source.is_none()));
    let (first, count) = (shards[2].first_index, shards[2].count);
    // Shard 0's digest differs (its records lost, but for record 1, counted bad), shard 2
    // is missing.
    let lost = &report.lost;
    assert_eq!(lost.len(), 3, "{lost:?}");
    let (n0, end) = (shards[0].count, shards[0].count - 1);
    assert_eq!((lost[0].first_index, lost[0].count), (0, 1), "{lost:?}");
    assert_eq!(lost[0].sources, Some((name(0), name(0))), "{lost:?}");
    assert_eq!(
        (lost[1].first_index, lost[1].count),
        (2, n0 - 2),
        "{lost:?}"
    );
    assert_eq!(lost[1].sources, Some((name(2), name(end))), "{lost:?}");
    assert_eq!(
        lost[2].sources,
        Some((name(first), name(first + count - 1))),
        "{lost:?}"
    );

    // The map altered: it is named as a problem, and names nothing.
    let map = out.join(SOURCES_FILE);
    let mut bytes = std::fs::read(&map).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    std::fs::write(&map, bytes).unwrap();
    let report = stoker_formats::verify_dir(&out, false).unwrap();
    assert!(
        report.bad.iter().any(|b| b.shard == SOURCES_FILE),
        "{:?}",
        report.bad
    );
    assert!(
        report.bad.iter().all(|b| b.source.is_none()),
        "{:?}",
        report.bad
    );
    assert!(
        report.lost.iter().all(|l| l.sources.is_none()),
        "{:?}",
        report.lost
    );
}

/// Samples handed to a writer are named in its map by the names given with them (by
/// their position when none was given); skipped samples take no place, so record `i`'s
/// name is the sample it holds, across chunks written on the pool.
#[test]
fn a_sample_writers_records_are_named_by_their_samples() {
    let (classes, files) = stoker_testdata::image_folder_listing(&photos());
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let mut o = stoker_formats::SampleOptions::new("test samples");
    o.check_decode = false;
    o.shard_bytes = 1 << 20;
    o.jobs = Some(2);
    let mut w =
        stoker_formats::SampleWriter::create(&out, o.clone(), Some(classes.clone())).unwrap();
    // (sample name, file) of every sample that should become a record, in order.
    let mut kept: Vec<(String, &Path)> = Vec::new();
    for (k, (f, label)) in files.iter().enumerate() {
        let name = match k % 10 {
            // Unnamed: called by its position among the samples.
            3 => String::new(),
            _ => format!("key-{k}/{}", f.file_name().unwrap().to_str().unwrap()),
        };
        w.write(std::fs::read(f).unwrap(), *label, &name).unwrap();
        let shown = if name.is_empty() {
            format!("sample {k}")
        } else {
            name
        };
        kept.push((shown, f));
    }
    // A bad sample in the middle of the next chunk, skipped: the names after it still fit.
    let bad_at = kept.len();
    w.write(b"not an image".as_slice(), 0, "bad").unwrap();
    let tent = std::fs::read(&files[0].0).unwrap();
    w.write(tent, files[0].1, "after the bad one").unwrap();
    kept.push(("after the bad one".into(), &files[0].0));
    let report = w.finish().unwrap();
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert_eq!(report.skipped[0].path, Path::new("bad"));
    assert!(report.shards > 1, "{report:?}");

    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.len(), kept.len() as u64);
    let reader = ds.reader().unwrap();
    for (i, (name, file)) in kept.iter().enumerate() {
        let i = i as u64;
        assert_eq!(ds.source_of(i).unwrap().as_deref(), Some(Path::new(name)));
        assert!(
            reader.get(i).unwrap().payload == std::fs::read(file).unwrap(),
            "record {i}"
        );
    }
    assert!(kept.len() > bad_at);
    assert!(stoker_formats::verify(&ds, true).unwrap().ok());
    // Nothing of the spool is left beside the dataset.
    let names = stoker_testdata::names_in(&out);
    assert!(
        names
            .iter()
            .all(|n| n == MANIFEST_FILE || n == SOURCES_FILE || n.starts_with("shard-")),
        "{names:?}"
    );

    // Written in parts and merged: the parts' maps, joined in order.
    let parts = tmp.path().join("parts");
    let n = files.len();
    for (index, range) in [(1u32, n / 2..n), (0, 0..n / 2)] {
        let mut o = o.clone();
        o.part = Some(Part::new(index, 2).unwrap());
        let mut w = stoker_formats::SampleWriter::create(&parts, o, Some(classes.clone())).unwrap();
        for (f, label) in &files[range] {
            let name = f.strip_prefix(photos()).unwrap().to_str().unwrap();
            w.write(std::fs::read(f).unwrap(), *label, name).unwrap();
        }
        w.finish().unwrap();
    }
    merge(&parts, &[]).unwrap();
    let names = assert_sources_hold_the_records(&parts, &photos(), true);
    let want: Vec<PathBuf> = files
        .iter()
        .map(|(f, _)| f.strip_prefix(photos()).unwrap().to_path_buf())
        .collect();
    assert_eq!(names, want);
}
