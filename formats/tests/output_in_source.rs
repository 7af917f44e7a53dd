//! An output directory inside the source tree: the first run listed the source before the
//! output existed, every rerun (`--resume` after a `--strict` stop, a full disk or a kill;
//! another part's task) found it as a class, with the run's leftovers as inputs, so labels
//! shifted by one or the resume was refused. The listing now leaves the output out.
//! Photos from the repository's `examples/data/sample`.

use std::path::{Path, PathBuf};

use stoker_formats::{
    convert, merge, ConvertOptions, Dataset, FormatError, NoProgress, Part, Source,
};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");

/// A copy of the sample tree (three classes) at `dir/name`.
fn copy_sample(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    stoker_testdata::copy_tree(Path::new(SAMPLE), &to);
    to
}

fn opts(source: Source, out: &Path) -> ConvertOptions {
    let mut o = ConvertOptions::new(source, out);
    o.check_decode = false;
    o
}

/// Asserts that `a` and `b` hold the same classes and, index by index, the same labels
/// and payloads.
fn assert_same_records(a: &Path, b: &Path) {
    let (a, b) = (Dataset::open(a).unwrap(), Dataset::open(b).unwrap());
    assert_eq!(a.manifest().classes, b.manifest().classes);
    assert_eq!(a.len(), b.len());
    let (ra, rb) = (a.reader().unwrap(), b.reader().unwrap());
    for i in 0..a.len() {
        let (x, y) = (ra.get(i).unwrap(), rb.get(i).unwrap());
        assert_eq!(x.header.label, y.header.label, "label of record {i}");
        assert_eq!(x.payload, y.payload, "payload of record {i}");
    }
}

#[test]
fn strict_stop_then_resume_into_the_source_tree_equals_a_clean_conversion() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = copy_sample(tmp.path(), "clean");
    let reference = tmp.path().join("reference");
    convert(&opts(Source::ImageFolder(clean), &reference), &NoProgress).unwrap();

    let data = copy_sample(tmp.path(), "data");
    let bad = data.join("opencv/zz_bad.jpg");
    std::fs::write(&bad, b"junk").unwrap();
    // Made by the user beforehand, so the stop (which takes away what it made) leaves it.
    let out = data.join("a_stoker");
    std::fs::create_dir(&out).unwrap();
    let mut o = opts(Source::ImageFolder(data.clone()), &out);
    o.strict = true;
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::StrictInput { .. }), "{e}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);

    // The user fixes the input and resumes, strictly: `a_stoker` is not a class.
    std::fs::remove_file(&bad).unwrap();
    o.resume = true;
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!(r.inputs, 15);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(
        Dataset::open(&out).unwrap().manifest().classes,
        ["caer", "leptonica", "opencv"]
    );
    assert_same_records(&out, &reference);
    // A retried task finds it finished, not "a finished conversion of other inputs".
    let again = convert(&o, &NoProgress).unwrap();
    assert!(again.already_done);
}

#[test]
fn killed_flat_conversion_into_its_own_folder_resumes_as_flat() {
    let tmp = tempfile::tempdir().unwrap();
    let flat = tmp.path().join("photos");
    std::fs::create_dir(&flat).unwrap();
    for f in ["caer/tent.jpg", "caer/puppy.jpg", "opencv/data_home.jpg"] {
        std::fs::copy(Path::new(SAMPLE).join(f), flat.join(f.replace('/', "_"))).unwrap();
    }
    let reference = tmp.path().join("reference");
    convert(
        &opts(Source::ImageFolder(flat.clone()), &reference),
        &NoProgress,
    )
    .unwrap();

    let out = flat.join("out");
    let mut o = opts(Source::ImageFolder(flat.clone()), &out);
    // Shards at the 64 KiB floor hold one of these photos each, so some are finished
    // when it is killed.
    o.shard_bytes = 64 << 10;
    o.fail_after = Some(2);
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { .. }), "{e}");
    // The output folder does not turn the flat folder into a class layout on the rerun.
    o.fail_after = None;
    o.resume = true;
    let r = convert(&o, &NoProgress).unwrap();
    assert!(r.flat && r.resumed > 0, "{r:?}");
    assert_eq!(r.inputs, 3);
    assert_same_records(&out, &reference);
}

#[test]
fn parts_written_inside_the_source_do_not_list_each_other_and_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let data = copy_sample(tmp.path(), "data");
    let reference = tmp.path().join("reference");
    convert(
        &opts(
            Source::ImageFolder(copy_sample(tmp.path(), "clean")),
            &reference,
        ),
        &NoProgress,
    )
    .unwrap();
    let root = data.join("zz_out");
    for index in 0..2 {
        let mut o = opts(Source::ImageFolder(data.clone()), &root);
        o.part = Some(Part::new(index, 2).unwrap());
        let r = convert(&o, &NoProgress).unwrap();
        assert_eq!(r.written + r.skipped.len() as u64, r.inputs);
        assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    }
    merge(&root, &[]).unwrap();
    assert_same_records(&root, &reference);
}

#[test]
fn list_rows_inside_the_output_are_refused_with_a_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let data = copy_sample(tmp.path(), "data");
    let out = data.join("out");
    // Say a list made with `find` after an earlier, interrupted run into `out`.
    let list = tmp.path().join("list.csv");
    // Absolute rows too (a list made with `find /data`), one of them into `out`.
    let real = std::fs::canonicalize(&data).unwrap();
    let rows = format!(
        "caer/tent.jpg,0\nout/shard-00000.lmdb.tmp,1\ncaer/../out/x.jpg,1\nopencv/data_home.jpg,1\n{0}/out/y.jpg,1\n{0}/caer/tent.jpg,0\n",
        real.display()
    );
    std::fs::write(&list, rows).unwrap();
    let source = Source::List {
        root: data.clone(),
        list,
    };
    let r = convert(&opts(source, &out), &NoProgress).unwrap();
    assert_eq!((r.inputs, r.written), (6, 3));
    assert_eq!(r.skipped.len(), 3);
    for s in &r.skipped {
        assert!(s.reason.contains("output directory"), "{s:?}");
    }
}

#[test]
fn an_output_that_would_create_other_folders_in_the_source_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = copy_sample(tmp.path(), "data");
    let out = data.join("new/out");
    let e = convert(&opts(Source::ImageFolder(data.clone()), &out), &NoProgress).unwrap_err();
    assert!(
        matches!(&e, FormatError::InvalidOptions(m) if m.contains("inside the source")),
        "{e}"
    );
    assert!(!data.join("new").exists());
}

#[test]
fn an_output_reached_through_a_symlink_in_the_source_is_not_walked() {
    let tmp = tempfile::tempdir().unwrap();
    let data = copy_sample(tmp.path(), "data");
    let out = tmp.path().join("out");
    // A class folder holding a link to the output, made by a user's `ln -s`.
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::symlink(&out, data.join("caer/to_out")).unwrap();
    let mut o = opts(Source::ImageFolder(data), &out);
    o.fail_after = Some(3);
    convert(&o, &NoProgress).unwrap_err();
    o.fail_after = None;
    o.resume = true;
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!((r.inputs, r.written), (15, 15), "{:?}", r.skipped);
}

#[test]
fn an_empty_path_names_no_directory_and_is_refused_before_anything_is_written() {
    // A writer took "" for the current directory and wrote a dataset there; a conversion
    // and a merge said "No such file or directory" of a path they printed as nothing.
    let dir = tempfile::tempdir().unwrap();
    let refused = |e: FormatError, what: &str| {
        assert!(matches!(e, FormatError::InvalidOptions(_)), "{e:?}");
        assert!(
            e.to_string().contains(&format!("the {what} path is empty")),
            "{e}"
        );
    };
    let src = Source::ImageFolder(SAMPLE.into());
    refused(
        convert(&opts(src, Path::new("")), &NoProgress).unwrap_err(),
        "output",
    );
    let out = dir.path().join("ds");
    let src = Source::ImageFolder(PathBuf::new());
    refused(
        convert(&opts(src, &out), &NoProgress).unwrap_err(),
        "source",
    );
    refused(merge(Path::new(""), &[]).unwrap_err(), "output");
    let writer = stoker_formats::SampleWriter::create(
        Path::new(""),
        stoker_formats::SampleOptions::new("test samples"),
        None,
    );
    refused(writer.err().unwrap(), "output");
    assert!(stoker_testdata::names_in(dir.path()).is_empty());
}
