//! `SampleWriter`: a dataset from samples handed over in memory must hold the records a
//! conversion of the same files in the same order writes (stored JPEGs, re-encoded ones,
//! raw pixels, transcoded PNGs), skip and count what it cannot convert, and never leave a
//! dataset (complete-looking or not) behind when it fails, stops or is dropped unfinished.
//! Photos from the test corpus (`<repo>/testdata/imagefolder`) and `examples/data/sample`.

mod common;

use std::path::{Path, PathBuf};

use stoker_formats::convert::{MIN_SHARD_BYTES, ORDER_FLAG, WRITTEN_ORDER};
use stoker_formats::{
    convert, verify, ConvertOptions, Dataset, Encoding, FormatError, NoProgress, ResizeMode,
    SampleOptions, SampleWriter, Source,
};

use common::records;
use stoker_testdata::image_folder_listing as listing;

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");

/// Small shards (several per dataset) and two threads, as `convert` is given them.
fn sample_options() -> SampleOptions {
    let mut o = SampleOptions::new("test samples");
    o.shard_bytes = MIN_SHARD_BYTES;
    o.jobs = Some(2);
    o
}

/// The conversion of `src` with the same options as `s`.
fn convert_options(src: &Path, out: &Path, s: &SampleOptions) -> ConvertOptions {
    let mut c = ConvertOptions::new(Source::ImageFolder(src.to_path_buf()), out);
    c.encoding = s.encoding;
    c.max_side = s.max_side;
    c.raw_size = s.raw_size;
    c.resize = s.resize;
    c.shard_bytes = s.shard_bytes;
    c.jobs = s.jobs;
    c.check_decode = s.check_decode;
    c.gpu_friendly = s.gpu_friendly;
    c
}

/// Writes the files of `src` as samples, in `convert`'s order, into `out`.
fn write_files(src: &Path, out: &Path, o: &SampleOptions) -> stoker_formats::ConvertReport {
    let (classes, files) = listing(src);
    let mut w = SampleWriter::create(out, o.clone(), Some(classes)).unwrap();
    for (f, label) in &files {
        w.write(std::fs::read(f).unwrap(), *label, f.to_str().unwrap())
            .unwrap();
    }
    w.finish().unwrap()
}

/// The two datasets hold the same records (header and payload), classes and shards (the
/// shard files' sizes and digests, so their bytes), and audit.
fn assert_same_records(a: &Path, b: &Path) {
    let (a, b) = (Dataset::open(a).unwrap(), Dataset::open(b).unwrap());
    assert_eq!(a.len(), b.len());
    let (ma, mb) = (a.manifest(), b.manifest());
    assert_eq!(ma.classes, mb.classes);
    assert_eq!(ma.encoding, mb.encoding);
    assert_eq!(ma.raw_size, mb.raw_size);
    assert_eq!(ma.shards, mb.shards);
    assert_eq!(ma.audit, mb.audit);
    let (ra, rb) = (a.reader().unwrap(), b.reader().unwrap());
    for i in 0..a.len() {
        let (x, y) = (ra.get(i).unwrap(), rb.get(i).unwrap());
        assert_eq!(x.header, y.header, "record {i}");
        assert_eq!(x.payload, y.payload, "record {i}");
    }
}

#[test]
fn stored_jpegs_are_the_records_convert_writes() {
    let src = stoker_testdata::dir().join("imagefolder");
    let tmp = tempfile::tempdir().unwrap();
    let o = sample_options();
    let conv = convert(
        &convert_options(&src, &tmp.path().join("c"), &o),
        &NoProgress,
    )
    .unwrap();
    // The corpus is over one chunk of samples (8 MiB): chunks go through the pool while
    // the next is filled.
    let report = write_files(&src, &tmp.path().join("w"), &o);
    assert_same_records(&tmp.path().join("c"), &tmp.path().join("w"));
    assert!(report.shards > 1, "{report:?}");
    assert_eq!(
        (
            report.inputs,
            report.written,
            report.stored,
            report.skipped.len()
        ),
        (conv.inputs, conv.written, conv.stored, conv.skipped.len())
    );
    assert_eq!(
        report.stored, report.written,
        "passthrough stores every JPEG"
    );
    let ds = Dataset::open(tmp.path().join("w")).unwrap();
    let flags = &ds.manifest().provenance.flags;
    assert_eq!(flags[ORDER_FLAG], WRITTEN_ORDER);
    assert_eq!(ds.manifest().provenance.source, "test samples");
    assert!(verify(&ds, true).unwrap().ok());
}

#[test]
fn reencoded_and_raw_records_are_the_ones_convert_writes() {
    let src = Path::new(SAMPLE);
    let mut small = sample_options();
    small.max_side = Some(64);
    let mut raw = sample_options();
    raw.encoding = Encoding::Raw;
    raw.raw_size = Some((40, 24));
    raw.resize = ResizeMode::Stretch;
    for (what, o) in [("max_side", small), ("raw", raw)] {
        let tmp = tempfile::tempdir().unwrap();
        convert(
            &convert_options(src, &tmp.path().join("c"), &o),
            &NoProgress,
        )
        .unwrap();
        let report = write_files(src, &tmp.path().join("w"), &o);
        assert_eq!(report.transcoded, report.written, "{what}: {report:?}");
        assert_same_records(&tmp.path().join("c"), &tmp.path().join("w"));
    }
}

/// A PNG in memory, of `w × h` pixels.
fn png(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 128]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

#[test]
fn a_png_is_transcoded_as_convert_transcodes_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("a/p.png"), png(37, 21)).unwrap();
    let o = sample_options();
    convert(
        &convert_options(&src, &tmp.path().join("c"), &o),
        &NoProgress,
    )
    .unwrap();
    let report = write_files(&src, &tmp.path().join("w"), &o);
    assert_eq!((report.written, report.transcoded), (1, 1), "{report:?}");
    assert_eq!(report.audit.other_images, 1);
    assert_same_records(&tmp.path().join("c"), &tmp.path().join("w"));
    let ds = Dataset::open(tmp.path().join("w")).unwrap();
    let r = ds.reader().unwrap();
    let rec = r.get(0).unwrap();
    assert_eq!(rec.header.encoding, Encoding::Jpeg);
    assert_eq!((rec.header.width, rec.header.height), (37, 21));
}

fn photo(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(SAMPLE).join(name)).unwrap()
}

#[test]
fn bad_samples_are_skipped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let mut w = SampleWriter::create(&out, sample_options(), None).unwrap();
    let tent = photo("caer/tent.jpg");
    w.write(tent.as_slice(), 0, "tent").unwrap();
    w.write(b"not an image".as_slice(), 1, "text").unwrap();
    w.write(&tent[..tent.len() / 2], 2, "").unwrap();
    w.write(Vec::new(), 1, "empty").unwrap();
    w.write(photo("caer/puppy.jpg"), 3, "puppy").unwrap();
    let r = w.finish().unwrap();
    assert_eq!((r.inputs, r.written), (5, 2), "{r:?}");
    let skipped: Vec<(String, &str)> = r
        .skipped
        .iter()
        .map(|s| (s.path.display().to_string(), s.reason.as_str()))
        .collect();
    assert_eq!(skipped[0].0, "text");
    assert!(skipped[0].1.contains("not an image"), "{skipped:?}");
    // A sample written without a name is called by its position.
    assert_eq!(skipped[1].0, "sample 2");
    assert!(skipped[1].1.contains("truncated JPEG"), "{skipped:?}");
    assert_eq!(skipped[2], ("empty".to_string(), "empty file"));
    // Without class names, the classes are the labels given, up to the largest.
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.manifest().classes, ["0", "1", "2", "3"]);
    let reader = ds.reader().unwrap();
    assert_eq!(reader.get(1).unwrap().header.label, 3);
}

#[test]
fn a_strict_stop_leaves_no_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    // Made by the writer (with its parent), so taken away with it.
    let out = tmp.path().join("new/ds");
    let mut o = sample_options();
    o.strict = true;
    let mut w = SampleWriter::create(&out, o.clone(), None).unwrap();
    let (_, files) = listing(&stoker_testdata::dir().join("imagefolder"));
    // A chunk's worth of good samples first, so shards are on disk at the stop. The bad
    // one stops a later `write` (its chunk is transcoded while the next is filled).
    let mut samples: Vec<(Vec<u8>, &str)> = files
        .iter()
        .map(|(f, _)| (std::fs::read(f).unwrap(), ""))
        .collect();
    samples.insert(100, (b"junk".to_vec(), "the bad one"));
    let mut e = None;
    for (data, name) in samples {
        if let Err(err) = w.write(data, 0, name) {
            e = Some(err);
            break;
        }
    }
    let e = e.unwrap_or_else(|| w.finish().unwrap_err());
    match &e {
        FormatError::StrictSample {
            sample, removed, ..
        } => {
            assert_eq!(sample, Path::new("the bad one"), "{e}");
            assert!(removed, "{e}");
            // A writer has no `convert` to run again and no `--resume`: its words, not convert's.
            let text = e.to_string();
            assert!(
                text.contains("write the samples again with a new writer"),
                "{e}"
            );
            assert!(!text.contains("convert") && !text.contains("resume"), "{e}");
        }
        other => panic!("want StrictSample, got {other}"),
    }
    assert!(
        !tmp.path().join("new").exists(),
        "{:?}",
        stoker_testdata::names_in(tmp.path())
    );

    // In a directory that was there (empty) before, the directory stays, empty.
    let out = tmp.path().join("there");
    std::fs::create_dir(&out).unwrap();
    let mut w = SampleWriter::create(&out, o, None).unwrap();
    w.write(photo("caer/tent.jpg"), 0, "tent").unwrap();
    w.write(b"junk".as_slice(), 0, "junk").unwrap();
    let e = w.finish().unwrap_err();
    assert!(matches!(e, FormatError::StrictSample { .. }), "{e}");
    assert!(stoker_testdata::names_in(&out).is_empty());
}

#[test]
fn a_writer_dropped_unfinished_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let mut w = SampleWriter::create(&out, sample_options(), None).unwrap();
    let (_, files) = listing(&stoker_testdata::dir().join("imagefolder"));
    // Twice the corpus is over two chunks: the first is written when the third starts.
    for (f, label) in files.iter().chain(&files) {
        w.write(std::fs::read(f).unwrap(), *label, "").unwrap();
    }
    // Chunks were written: finished shards (and one being written) are on disk.
    let names = stoker_testdata::names_in(&out);
    assert!(
        names.iter().any(|n| n.ends_with(".lmdb")),
        "nothing was on disk yet, so the test shows nothing: {names:?}"
    );
    drop(w);
    assert!(!out.exists(), "{:?}", stoker_testdata::names_in(&out));
}

#[test]
fn no_record_is_no_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let e = SampleWriter::create(&out, sample_options(), None)
        .unwrap()
        .finish()
        .unwrap_err();
    assert!(matches!(e, FormatError::NoSamples { .. }), "{e}");
    assert!(!out.exists());
    let mut w = SampleWriter::create(&out, sample_options(), None).unwrap();
    w.write(b"junk".as_slice(), 0, "junk").unwrap();
    let e = w.finish().unwrap_err();
    assert!(e.to_string().contains("junk: not an image"), "{e}");
    assert!(!out.exists());
}

/// What a killed writer leaves (shards, no manifest, no journal) is refused, saying so.
#[test]
fn a_killed_writers_shards_are_refused_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("shard-00000.lmdb"), b"half a shard").unwrap();
    let e = SampleWriter::create(&out, sample_options(), None).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("the shards of a writer that stopped before it finished"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(out.join("shard-00000.lmdb")).unwrap(),
        b"half a shard"
    );
}

#[test]
fn an_output_holding_anything_or_being_written_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    convert(
        &convert_options(Path::new(SAMPLE), &ds, &sample_options()),
        &NoProgress,
    )
    .unwrap();
    let before = stoker_testdata::files_in(&ds);
    let e = SampleWriter::create(&ds, sample_options(), None).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");
    assert_eq!(stoker_testdata::files_in(&ds), before);

    // And the other way: `convert --resume` into a written dataset says what it is.
    let written = tmp.path().join("written");
    write_files(Path::new(SAMPLE), &written, &sample_options());
    let mut o = convert_options(Path::new(SAMPLE), &written, &sample_options());
    o.resume = true;
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(e.to_string().contains("written from samples"), "{e}");

    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"mine").unwrap();
    let e = SampleWriter::create(&other, sample_options(), None).unwrap_err();
    assert!(e.to_string().contains("notes.txt"), "{e}");
    assert_eq!(stoker_testdata::names_in(&other), ["notes.txt"]);

    let out = tmp.path().join("busy");
    let first = SampleWriter::create(&out, sample_options(), None).unwrap();
    let e = SampleWriter::create(&out, sample_options(), None).unwrap_err();
    assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
    let mut o = convert_options(Path::new(SAMPLE), &out, &sample_options());
    o.resume = true;
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
    drop(first);
}

#[test]
fn a_label_without_a_class_is_refused_and_the_writer_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let classes = vec!["a".to_string(), "b".to_string()];
    let mut w = SampleWriter::create(&out, sample_options(), Some(classes)).unwrap();
    let e = w.write(photo("caer/tent.jpg"), 2, "tent").unwrap_err();
    match &e {
        FormatError::LabelOutOfRange {
            sample,
            label,
            classes,
        } => assert_eq!(
            (sample.as_path(), *label, *classes),
            (Path::new("tent"), 2, 2)
        ),
        other => panic!("want LabelOutOfRange, got {other}"),
    }
    assert!(e.to_string().contains("labels must be below 2"), "{e}");
    w.write(photo("caer/tent.jpg"), 1, "tent").unwrap();
    let r = w.finish().unwrap();
    assert_eq!((r.inputs, r.written), (1, 1));
    assert_eq!(r.empty_classes, ["a"]);
    assert_eq!(Dataset::open(&out).unwrap().manifest().classes, ["a", "b"]);

    let e = SampleWriter::create(tmp.path().join("x"), sample_options(), Some(vec![])).unwrap_err();
    assert!(matches!(e, FormatError::InvalidOptions(_)), "{e}");
    assert!(!tmp.path().join("x").exists());
}

#[test]
fn a_sample_over_max_file_size_is_skipped_as_such_a_file_is() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = sample_options();
    let tent = photo("caer/tent.jpg");
    o.max_file_size = tent.len() as u64 - 1;
    let mut w = SampleWriter::create(tmp.path().join("ds"), o, None).unwrap();
    w.write(tent.as_slice(), 0, "tent").unwrap();
    w.write(&tent[..], 0, "tent again").unwrap();
    // Its size alone (a caller that need not copy it) gets the same skip; a size within
    // the limit is not a skip and is refused.
    w.write_too_large(tent.len() as u64, 0, "tent unread")
        .unwrap();
    let e = w.write_too_large(10, 0, "small").unwrap_err();
    assert!(matches!(e, FormatError::InvalidOptions(_)), "{e}");
    assert_eq!(w.samples(), 3);
    let e = w.finish().unwrap_err();
    assert!(e.to_string().contains("none of the 3 samples"), "{e}");
    let want = format!(
        "tent: {} bytes is over the input size limit of {} bytes",
        tent.len(),
        tent.len() - 1
    );
    assert!(e.to_string().contains(&want), "{e}");
}

#[test]
fn duplicate_class_names_are_refused() {
    // Two labels of one name were written as two classes nobody could tell apart (a
    // class-name lookup finds the first); Hugging Face's ClassLabel refuses them too.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("new").join("ds");
    let classes = ["cat", "dog", "cat"].map(String::from).to_vec();
    let e = SampleWriter::create(&out, sample_options(), Some(classes)).unwrap_err();
    assert!(matches!(e, FormatError::InvalidOptions(_)), "{e}");
    assert!(e.to_string().contains("\"cat\" is labels 0 and 2"), "{e}");
    assert!(!tmp.path().join("new").exists());
}

#[test]
fn an_output_that_is_a_file_or_a_dangling_link_says_so() {
    // Both said only "File exists (os error 17)", from creating the directory.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"mine").unwrap();
    let e = SampleWriter::create(&file, sample_options(), None).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");
    assert!(e.to_string().contains("is a file, not a directory"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"mine");
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(tmp.path().join("gone"), &link).unwrap();
    let e = SampleWriter::create(&link, sample_options(), None).unwrap_err();
    assert!(e.to_string().contains("symbolic link to a missing"), "{e}");
}

#[test]
fn a_refused_part_writer_names_the_file_in_its_way_and_leaves_no_root_it_made() {
    // A root below a file said "Not a directory (os error 20)"; a root made for a part
    // whose own directory could not be made (here: its path over PATH_MAX) stayed, empty.
    let tmp = tempfile::tempdir().unwrap();
    let mut o = sample_options();
    o.part = Some(stoker_formats::Part::new(0, 2).unwrap());
    let file = tmp.path().join("file");
    std::fs::write(&file, b"mine").unwrap();
    let classes = || Some(vec!["a".to_string(), "b".to_string()]);
    for root in [file.clone(), file.join("out")] {
        let e = SampleWriter::create(&root, o.clone(), classes()).unwrap_err();
        let said = format!("{}: is a file, not a directory", file.display());
        assert!(e.to_string().contains(&said), "{e}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"mine");
    let top = tmp.path().join("top");
    let mut root = top.clone();
    while root.as_os_str().len() + 201 < 4070 {
        root.push("a".repeat(200));
    }
    root.push("b".repeat(4085 - root.as_os_str().len() - 1));
    let e = SampleWriter::create(&root, o, classes()).unwrap_err();
    assert!(e.to_string().contains("File name too long"), "{e}");
    assert!(!top.exists(), "the directories the part made stayed");
}

/// Writes `files` (with `classes`) as part `index` of `count` of a writing into `out`.
fn write_part(
    out: &Path,
    o: &SampleOptions,
    classes: &[String],
    files: &[(PathBuf, u32)],
    (index, count): (u32, u32),
) -> stoker_formats::ConvertReport {
    let mut o = o.clone();
    o.part = Some(stoker_formats::Part::new(index, count).unwrap());
    let mut w = SampleWriter::create(out, o, Some(classes.to_vec())).unwrap();
    for (f, label) in files {
        w.write(std::fs::read(f).unwrap(), *label, f.to_str().unwrap())
            .unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn parts_written_apart_merge_into_what_one_writer_writes() {
    let src = stoker_testdata::dir().join("imagefolder");
    let (classes, files) = listing(&src);
    let tmp = tempfile::tempdir().unwrap();
    let o = sample_options();
    let whole = tmp.path().join("whole");
    write_files(&src, &whole, &o);
    let out = tmp.path().join("parts");
    let n = files.len();
    // Three contiguous slices, as `datasets`' `shard(contiguous=True)` cuts them, written
    // in an order other than the parts' own.
    let cuts = [0, n / 3, 2 * n / 3, n];
    for index in [2u32, 0, 1] {
        let i = index as usize;
        let report = write_part(&out, &o, &classes, &files[cuts[i]..cuts[i + 1]], (index, 3));
        assert_eq!(report.out, out.join(format!("part-{index:05}-of-00003")));
        let part = Dataset::open(&report.out)
            .unwrap()
            .manifest()
            .part
            .clone()
            .unwrap();
        assert!(part.written);
        assert_eq!(
            (part.inputs, part.first_input, part.end_input),
            (0, 0, (cuts[i + 1] - cuts[i]) as u64)
        );
    }
    let report = stoker_formats::merge(&out, &[]).unwrap();
    assert_eq!((report.parts, report.samples), (3, n as u64));
    assert!(!out.join("part-00000-of-00003").exists());
    let merged = Dataset::open(&out).unwrap();
    let m = merged.manifest();
    assert_eq!(m.part, None);
    assert_eq!(m.classes, classes);
    assert_eq!(m.provenance.flags[ORDER_FLAG], WRITTEN_ORDER);
    let single = Dataset::open(&whole).unwrap();
    assert_eq!(m.audit, single.manifest().audit);
    assert_eq!(m.encoding, single.manifest().encoding);
    assert!(verify(&merged, true).unwrap().ok());
    // The headers hold each payload's CRC too, so equal labels and payloads are equal
    // records.
    let (a, b) = (records(&out), records(&whole));
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(x == y, "record {i} differs");
    }
    let (ra, rb) = (merged.reader().unwrap(), single.reader().unwrap());
    for i in 0..merged.len() {
        assert_eq!(
            ra.get(i).unwrap().header,
            rb.get(i).unwrap().header,
            "record {i}"
        );
    }
}

#[test]
fn an_empty_written_part_merges() {
    let src = stoker_testdata::dir().join("imagefolder");
    let (classes, files) = listing(&src);
    let tmp = tempfile::tempdir().unwrap();
    let o = sample_options();
    let out = tmp.path().join("parts");
    write_part(&out, &o, &classes, &files, (0, 2));
    let empty = write_part(&out, &o, &classes, &[], (1, 2));
    assert_eq!(empty.written, 0);
    let report = stoker_formats::merge(&out, &[]).unwrap();
    assert_eq!(report.samples, files.len() as u64);
    // Empty parts only are no dataset.
    let none = tmp.path().join("none");
    write_part(&none, &o, &classes, &[], (0, 2));
    write_part(&none, &o, &classes, &[], (1, 2));
    assert!(stoker_formats::merge(&none, &[]).is_err());
}

/// Whether `merge(out)` is refused with a message containing `says`.
fn assert_merge_refused(out: &Path, says: &str) {
    match stoker_formats::merge(out, &[]) {
        Err(e @ FormatError::MergeRefused { .. }) => {
            assert!(e.to_string().contains(says), "{e}")
        }
        other => panic!("merge not refused: {other:?}"),
    }
    assert!(!out.join("manifest.json").exists());
}

#[test]
fn written_parts_that_are_not_one_writing_are_refused() {
    let src = stoker_testdata::dir().join("imagefolder");
    let (classes, files) = listing(&src);
    let half = files.len() / 2;
    let tmp = tempfile::tempdir().unwrap();
    let o = sample_options();

    // Different classes.
    let out = tmp.path().join("classes");
    write_part(&out, &o, &classes, &files[..half], (0, 2));
    let mut other = classes.clone();
    other.push("extra".into());
    write_part(&out, &o, &other, &files[half..], (1, 2));
    assert_merge_refused(&out, "the number of classes is 28 here but 27 in");
    // As many classes, one named otherwise: the merge keeps one class list for the parts
    // that have it, and still names the difference of the one that does not.
    let out = tmp.path().join("names");
    let mut renamed = classes.clone();
    renamed[3] = "renamed".into();
    write_part(&out, &o, &classes, &files[..half], (0, 3));
    write_part(&out, &o, &renamed, &[], (1, 3));
    write_part(&out, &o, &classes, &files[half..], (2, 3));
    assert_merge_refused(
        &out,
        &format!(
            "the name of class 3 is \"renamed\" here but {:?} in",
            classes[3]
        ),
    );

    // Different output options.
    let out = tmp.path().join("options");
    write_part(&out, &o, &classes, &files[..half], (0, 2));
    let mut q = o.clone();
    q.max_side = Some(64);
    write_part(&out, &q, &classes, &files[half..], (1, 2));
    assert_merge_refused(
        &out,
        "the provenance flag `max_side` is \"64\" here but absent in",
    );

    // A missing part.
    let out = tmp.path().join("missing");
    write_part(&out, &o, &classes, &files[..half], (0, 3));
    write_part(&out, &o, &classes, &files[half..], (2, 3));
    assert_merge_refused(&out, "missing part(s) 1");

    // A written part with a converted one.
    let out = tmp.path().join("mixed");
    let mut c = convert_options(&src, &out, &o);
    c.part = Some(stoker_formats::Part::new(0, 2).unwrap());
    convert(&c, &NoProgress).unwrap();
    write_part(&out, &o, &classes, &files[half..], (1, 2));
    assert_merge_refused(&out, "written and converted parts");
}

#[test]
fn a_written_part_is_refused_where_a_part_cannot_go() {
    let src = stoker_testdata::dir().join("imagefolder");
    let (classes, files) = listing(&src);
    let tmp = tempfile::tempdir().unwrap();
    let o = sample_options();
    let mut p = o.clone();
    p.part = Some(stoker_formats::Part::new(0, 2).unwrap());
    let out = tmp.path().join("ds");

    // Without classes.
    let e = SampleWriter::create(&out, p.clone(), None).unwrap_err();
    assert!(matches!(e, FormatError::InvalidOptions(_)), "{e}");

    // Two writers on one part: the second is refused, the first goes on.
    let mut first = SampleWriter::create(&out, p.clone(), Some(classes.clone())).unwrap();
    let e = SampleWriter::create(&out, p.clone(), Some(classes.clone())).unwrap_err();
    assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
    // A writer on another part writes beside it.
    let mut q = o.clone();
    q.part = Some(stoker_formats::Part::new(1, 2).unwrap());
    let other = SampleWriter::create(&out, q, Some(classes.clone())).unwrap();
    first
        .write(std::fs::read(&files[0].0).unwrap(), files[0].1, "")
        .unwrap();
    // An abandoned part takes away its own directory only.
    drop(other);
    assert!(!out.join("part-00001-of-00002").exists());
    assert!(out.join("part-00000-of-00002").exists());
    first.finish().unwrap();
    // A finished part is not written again.
    let e = SampleWriter::create(&out, p.clone(), Some(classes.clone())).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");

    // An output root holding a finished dataset.
    let done = tmp.path().join("done");
    write_files(&src, &done, &o);
    let e = SampleWriter::create(&done, p, Some(classes)).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");
    assert!(!done.join("part-00000-of-00002").exists());
}

/// Regression: a writer's part out of range was refused in the CLI's words ("which part
/// to convert: ... (--part 5 --parts 3)"), which a writer has not.
#[test]
fn a_part_out_of_range_is_refused_in_a_writers_words() {
    let tmp = tempfile::tempdir().unwrap();
    let e = stoker_formats::Part::new(5, 3).unwrap_err();
    assert_eq!(
        e.to_string(),
        "which part: part index 5 is not below the number of parts 3 (part 5 of 3)"
    );
    let mut o = sample_options();
    o.part = Some(stoker_formats::Part { index: 0, count: 0 });
    let e = SampleWriter::create(tmp.path(), o, Some(vec!["a".into()])).unwrap_err();
    assert!(
        matches!(e, FormatError::PartSelection { .. })
            && e.to_string().contains("(part 0 of 0)")
            && !e.to_string().contains("--part")
            && !e.to_string().contains("convert"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// Regression: a written part whose writer was killed before `finish` was met by `merge`
/// with "rerun its task (the same `convert --part`, with --resume ...)": a writer has no
/// resume, and a new writer refused the directory as "not empty" with no word of what to do.
/// Both now say what works: delete the part directory and write the part again.
#[test]
fn a_killed_writers_part_is_written_again_not_resumed() {
    let src = stoker_testdata::dir().join("imagefolder");
    let (classes, files) = listing(&src);
    let tmp = tempfile::tempdir().unwrap();
    let o = sample_options();
    let out = tmp.path().join("parts");
    write_part(&out, &o, &classes, &files[..2], (0, 2));
    // What a writer of part 1 killed while writing its first shard leaves (a writer that
    // fails or is dropped takes its files away; a kill gives it no chance).
    let part = out.join("part-00001-of-00002");
    std::fs::create_dir(&part).unwrap();
    std::fs::write(part.join("shard-00000.lmdb.tmp"), b"cut short").unwrap();

    let e = stoker_formats::merge(&out, &[]).unwrap_err();
    let said = e.to_string();
    assert!(
        said.contains("unfinished part")
            && said.contains("delete this part directory and write the part again"),
        "{said}"
    );
    let mut p = o.clone();
    p.part = Some(stoker_formats::Part::new(1, 2).unwrap());
    let e = SampleWriter::create(&out, p, Some(classes.clone())).unwrap_err();
    let said = e.to_string();
    assert!(
        matches!(e, FormatError::OutputExists { .. })
            && said.contains("killed")
            && said.contains("delete this part directory and write the part again")
            && !said.contains("resume"),
        "{said}"
    );
    // Which is the way on.
    std::fs::remove_dir_all(&part).unwrap();
    write_part(&out, &o, &classes, &files[2..], (1, 2));
    assert_eq!(
        stoker_formats::merge(&out, &[]).unwrap().samples,
        files.len() as u64
    );
}

/// A merge built before `part.written` reads past the field, so it sees written parts as
/// this build does with the field removed: converted parts, which its slice check refuses
/// (a written part's listing has 0 inputs, and only an empty part holds `0..0` of it).
#[test]
fn a_merge_that_does_not_know_written_parts_refuses_them() {
    let src = stoker_testdata::dir().join("imagefolder");
    let (classes, files) = listing(&src);
    let tmp = tempfile::tempdir().unwrap();
    let o = sample_options();
    let forget = |out: &Path| {
        for e in std::fs::read_dir(out).unwrap() {
            let path = e.unwrap().path().join("manifest.json");
            let text = std::fs::read_to_string(&path).unwrap();
            let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
            let written = json["part"].as_object_mut().unwrap().remove("written");
            assert_eq!(written, Some(serde_json::Value::Bool(true)));
            std::fs::write(&path, json.to_string()).unwrap();
        }
    };
    // Every part non-empty; and an empty part 0 (whose `0..0` passes) before a full one.
    let out = tmp.path().join("two");
    write_part(&out, &o, &classes, &files[..1], (0, 2));
    write_part(&out, &o, &classes, &files[1..2], (1, 2));
    forget(&out);
    assert_merge_refused(&out, "holds inputs 0..1, but part 0 of 2 is 0..0");
    let out = tmp.path().join("empty-first");
    write_part(&out, &o, &classes, &[], (0, 2));
    write_part(&out, &o, &classes, &files, (1, 2));
    forget(&out);
    assert_merge_refused(&out, "but part 1 of 2 is 0..0");
}

/// A merge locks the output root alone while it runs; a part started meanwhile would be
/// written beside the dataset it is making (its part directory never merged). So a part's
/// writer starts with the root locked shared, and is refused while the root is locked
/// alone, taking away the part directory it made.
#[test]
fn a_part_is_not_written_while_its_root_is_merged() {
    let src = stoker_testdata::dir().join("imagefolder");
    let (classes, files) = listing(&src);
    let tmp = tempfile::tempdir().unwrap();
    let o = sample_options();
    let mut p = o.clone();
    p.part = Some(stoker_formats::Part::new(0, 3).unwrap());
    let out = tmp.path().join("ds");
    std::fs::create_dir(&out).unwrap();
    // What `merge` holds on the root while it links the parts.
    let merging = std::fs::File::open(&out).unwrap();
    // fs4's flock, as `merge` takes it (std's `File::try_lock` needs a newer Rust).
    fs4::FileExt::try_lock(&merging).unwrap();
    let e = SampleWriter::create(&out, p.clone(), Some(classes.clone())).unwrap_err();
    assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    drop(merging);

    // A merge started after a part finds it, unfinished, and refuses the set; and the
    // root is not left locked while the part is written (a forked child would keep it).
    let mut w = SampleWriter::create(&out, p, Some(classes.clone())).unwrap();
    write_part(&out, &o, &classes, &files[..1], (1, 3));
    write_part(&out, &o, &classes, &files[1..2], (2, 3));
    assert_merge_refused(&out, "unfinished part");
    w.write(std::fs::read(&files[2].0).unwrap(), files[2].1, "")
        .unwrap();
    w.finish().unwrap();
    assert_eq!(stoker_formats::merge(&out, &[]).unwrap().samples, 3);
}

#[test]
fn written_parts_that_each_hold_every_sample_are_refused() {
    // Each process of a writing looped over the whole dataset instead of its share: the
    // merge joined them silently into a dataset with every sample twice.
    let src = stoker_testdata::dir().join("imagefolder");
    let (classes, files) = listing(&src);
    let tmp = tempfile::tempdir().unwrap();
    let o = sample_options();
    let out = tmp.path().join("twice");
    write_part(&out, &o, &classes, &files, (0, 2));
    write_part(&out, &o, &classes, &files, (1, 2));
    assert_merge_refused(&out, "part 1 holds the same records as part 0");
    assert_merge_refused(
        &out,
        "usually each of them all the samples rather than its share",
    );
    // Nothing was lost: both parts are still there, and each opens.
    for i in 0..2 {
        let part = out.join(format!("part-{i:05}-of-00002"));
        assert_eq!(Dataset::open(&part).unwrap().len(), files.len() as u64);
    }
    // Each process shuffled the samples its own way: other shard files, the same records.
    let out = tmp.path().join("shuffled");
    let reversed: Vec<_> = files.iter().rev().cloned().collect();
    write_part(&out, &o, &classes, &files, (0, 2));
    write_part(&out, &o, &classes, &reversed, (1, 2));
    assert_merge_refused(&out, "part 1 holds the same records as part 0 (");
    assert_merge_refused(&out, "records, in another order or other shards)");
    let part = |i: u32| {
        let m = Dataset::open(out.join(format!("part-{i:05}-of-00002"))).unwrap();
        m.manifest().part.clone().unwrap().records.unwrap()
    };
    assert_eq!((part(0).len(), part(0)), (16, part(1)));
    // One sample fewer, or another, is other records.
    let out = tmp.path().join("one_less");
    write_part(&out, &o, &classes, &files, (0, 2));
    write_part(&out, &o, &classes, &reversed[1..], (1, 2));
    let merged = stoker_formats::merge(&out, &[]).unwrap();
    assert_eq!(merged.samples, 2 * files.len() as u64 - 1);
    // The same samples split by rank merge.
    let out = tmp.path().join("split");
    let half = files.len() / 2;
    write_part(&out, &o, &classes, &files[..half], (0, 2));
    write_part(&out, &o, &classes, &files[half..], (1, 2));
    assert_eq!(
        stoker_formats::merge(&out, &[]).unwrap().samples,
        files.len() as u64
    );
}

/// `waits_for` names the chunk a call would wait for, until it is done, so that a caller
/// (Python, for Ctrl-C) can wait for it in steps; `flush` hands the last samples over
/// before `finish`. The records are those written without them.
#[test]
fn a_caller_can_wait_for_the_chunk_on_the_pool_before_each_call() {
    let src = stoker_testdata::dir().join("imagefolder");
    let (classes, files) = listing(&src);
    // Three times over: chunks go to the pool every 8 MiB, the photos are half of 32 MiB.
    let files: Vec<_> = files
        .iter()
        .cycle()
        .take(3 * files.len())
        .cloned()
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let mut o = sample_options();
    o.max_side = Some(96);
    o.jobs = Some(1);
    let mut w = SampleWriter::create(dir.path().join("ds"), o.clone(), Some(classes)).unwrap();
    assert!(w.waits_for(None).is_none(), "nothing on the pool yet");
    let (mut waited, mut checked_before) = (0, 0);
    for (f, label) in &files {
        let bytes = std::fs::read(f).unwrap();
        while let Some(chunk) = w.waits_for(Some(bytes.len() as u64)) {
            waited += 1;
            chunk.wait_timeout(std::time::Duration::from_millis(20));
        }
        checked_before += 1;
        w.write(bytes, *label, f.to_str().unwrap()).unwrap();
    }
    // The last samples: handed over, then waited for here, so finish waits for nothing.
    w.flush().unwrap();
    let last = w
        .waits_for(None)
        .expect("a re-encoding chunk takes more than no time");
    assert!(last.wait_timeout(std::time::Duration::from_secs(120)));
    assert!(last.is_done() && w.waits_for(None).is_none());
    let report = w.finish().unwrap();
    assert_eq!(report.written as usize, files.len());
    assert_eq!(checked_before, files.len());
    assert!(waited > 0, "no write came while a chunk was on the pool");
    let plain = dir.path().join("plain");
    let mut w = SampleWriter::create(&plain, o, Some(listing(&src).0)).unwrap();
    for (f, label) in &files {
        let bytes = std::fs::read(f).unwrap();
        w.write(bytes, *label, f.to_str().unwrap()).unwrap();
    }
    w.finish().unwrap();
    assert_same_records(&dir.path().join("ds"), &plain);
}
