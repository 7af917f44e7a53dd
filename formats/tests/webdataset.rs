//! Converting WebDataset tar shards: the records equal those of the same photos converted
//! from an ImageFolder tree with the same labels (stored, shuffled, raw, re-encoded for the
//! GPU), parts merge into the one-shot conversion, an interrupted conversion resumes
//! byte-identical, and samples that cannot be converted are skipped, named `TAR:MEMBER`,
//! with their reasons.

mod tar_shards;

use std::path::{Path, PathBuf};

use stoker_formats::convert::ORDER_FLAG;
use stoker_formats::{
    convert, merge, ConvertOptions, ConvertReport, Dataset, Encoding, FormatError, Layout,
    NoProgress, Part, Source,
};
use tar_shards::{assert_same_records, file, image_folder, photos, write_shards, write_tar};
use tar_shards::{Entry, Style};

/// Store-mode options (no re-encoding) with small shards, so that a conversion makes
/// several of them.
fn opts(src: &Path, layout: Layout, out: &Path) -> ConvertOptions {
    let mut o = ConvertOptions::new(Source::ImageFolder(src.into()), out);
    o.layout = layout;
    o.shard_bytes = 256 << 10;
    o.jobs = Some(2);
    o
}

/// The photos as tar shards in `tmp/shards` and as an ImageFolder tree in `tmp/folder`,
/// with a photo cut short among them (last in class 1, by its name).
fn both_sources(tmp: &Path) -> (PathBuf, PathBuf) {
    let mut p = photos();
    let cut = tmp.join("zz_cut.jpg");
    let bytes = std::fs::read(&p[0].1).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let at = p.iter().rposition(|(label, _)| *label == 1).unwrap() + 1;
    p.insert(at, (1, cut));
    let shards = tmp.join("shards");
    write_shards(&shards, &p);
    let folder = tmp.join("folder");
    image_folder(&folder, &p);
    (shards, folder)
}

/// Options a variant sets on both conversions.
type SetOptions = fn(&mut ConvertOptions);

fn reasons(r: &ConvertReport) -> Vec<(String, String)> {
    (r.skipped.iter())
        .map(|s| (s.path.display().to_string(), s.reason.clone()))
        .collect()
}

#[test]
fn tar_shards_convert_to_the_records_of_the_same_photos_as_an_image_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let (shards, folder) = both_sources(tmp.path());
    let variants: [(&str, SetOptions); 4] = [
        ("stored", |_| {}),
        ("shuffled", |o| o.shuffle = Some(3)),
        ("raw", |o| {
            o.encoding = Encoding::Raw;
            o.raw_size = Some((24, 16));
        }),
        ("gpu-friendly", |o| {
            o.gpu_friendly = true;
            o.max_side = Some(64);
        }),
    ];
    for (name, set) in variants {
        let (a, b) = (
            tmp.path().join(name),
            tmp.path().join(format!("{name}-folder")),
        );
        let mut o = opts(&shards, Layout::WebDataset, &a);
        set(&mut o);
        let wds = convert(&o, &NoProgress).unwrap();
        let mut o = opts(&folder, Layout::Classes, &b);
        set(&mut o);
        let tree = convert(&o, &NoProgress).unwrap();
        assert!(wds.webdataset && !tree.webdataset, "{name}");
        assert_eq!(
            (wds.inputs, wds.written),
            (tree.inputs, tree.written),
            "{name}"
        );
        assert_eq!(wds.audit, tree.audit, "{name}");
        // The one photo the converter refuses, named inside its shard.
        assert_eq!(wds.skipped.len(), tree.skipped.len(), "{name}");
        for (s, t) in wds.skipped.iter().zip(&tree.skipped) {
            assert_eq!(s.reason, t.reason);
            let s = s.path.display().to_string();
            let member = t.path.strip_prefix(&folder).unwrap().display().to_string();
            assert!(
                s.contains(".tar:") && s.ends_with(&member),
                "{s} / {member}"
            );
        }
        assert!(wds.warnings.is_empty(), "{:?}", wds.warnings);
        assert_same_records(&a, &b);
        assert_eq!(tree.skipped.len(), 1, "{name}: {:?}", tree.skipped);
    }
    let m = Dataset::open(tmp.path().join("stored"))
        .unwrap()
        .manifest()
        .clone();
    assert_eq!(m.classes, ["0", "1", "2"]);
    assert_eq!(m.provenance.flags[ORDER_FLAG], "webdataset");

    // `auto` reads a folder of only .tar files, or one .tar file, as shards.
    let auto = tmp.path().join("auto");
    let r = convert(&opts(&shards, Layout::Auto, &auto), &NoProgress).unwrap();
    assert!(r.webdataset);
    assert_same_records(&auto, &tmp.path().join("stored"));
    let one = shards.join("shard-00001.tar");
    let r = convert(
        &opts(&one, Layout::Auto, &tmp.path().join("one")),
        &NoProgress,
    )
    .unwrap();
    assert!(r.webdataset && r.written > 3, "{r:?}");
}

#[test]
fn parts_of_tar_shards_merge_into_the_one_shot_conversion() {
    let tmp = tempfile::tempdir().unwrap();
    let (shards, _) = both_sources(tmp.path());
    let single = tmp.path().join("single");
    convert(&opts(&shards, Layout::WebDataset, &single), &NoProgress).unwrap();
    for count in [2, 5] {
        let root = tmp.path().join(format!("parts-{count}"));
        for index in 0..count {
            let mut o = opts(&shards, Layout::WebDataset, &root);
            o.part = Some(Part::new(index, count).unwrap());
            convert(&o, &NoProgress).unwrap();
        }
        merge(&root, &[]).unwrap();
        assert_same_records(&root, &single);
        let (a, b) = (
            Dataset::open(&root).unwrap(),
            Dataset::open(&single).unwrap(),
        );
        assert_eq!(a.manifest().provenance, b.manifest().provenance);
    }
}

#[test]
fn an_interrupted_tar_conversion_resumes_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let (shards, _) = both_sources(tmp.path());
    let clean = tmp.path().join("clean");
    let o = opts(&shards, Layout::WebDataset, &clean);
    let full = convert(&o, &NoProgress).unwrap();

    let killed = tmp.path().join("killed");
    let mut k = opts(&shards, Layout::WebDataset, &killed);
    k.fail_after = Some(9);
    let e = convert(&k, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { written: 9 }), "{e}");
    k.fail_after = None;
    k.resume = true;
    let resumed = convert(&k, &NoProgress).unwrap();
    assert!(resumed.resumed > 0, "{resumed:?}");
    assert_eq!(resumed.written, full.written);
    assert_eq!(reasons(&resumed), reasons(&full));
    assert_eq!(
        stoker_testdata::files_in(&clean),
        stoker_testdata::files_in(&killed)
    );

    // A shard changed since: the listing is another, and resume refuses it.
    let mut k2 = opts(&shards, Layout::WebDataset, &tmp.path().join("k2"));
    k2.fail_after = Some(9);
    convert(&k2, &NoProgress).unwrap_err();
    std::fs::remove_file(shards.join("shard-00002.tar")).unwrap();
    k2.fail_after = None;
    k2.resume = true;
    let e = convert(&k2, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::OutputExists { .. }), "{e}");
}

/// A photo's bytes, and a PNG's.
fn images() -> (Vec<u8>, Vec<u8>) {
    let jpg = std::fs::read(&photos()[0].1).unwrap();
    let png = stoker_testdata::dir().join("conformance/ref/pillow__Tests__images__hopper.jpg.png");
    (jpg, std::fs::read(png).unwrap())
}

#[test]
fn samples_that_cannot_be_converted_are_skipped_naming_tar_and_member() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("src");
    std::fs::create_dir(&dir).unwrap();
    let (jpg, png) = images();
    let a = vec![
        Entry::Dir("d/".into()),
        file("d/ok.jpg", jpg.clone()),
        file("d/ok.cls", "2\n"),
        file("d/ok.json", "{}"),
        file("d/png.PNG", png.clone()),
        file("d/png.cls", " 0 "),
        file("d/nocls.jpg", jpg.clone()),
        file("d/two.jpg", jpg.clone()),
        file("d/two.png", png.clone()),
        file("d/two.cls", "1"),
        file("d/word.jpg", jpg.clone()),
        file("d/word.cls", "cat"),
        file("d/neg.jpg", jpg.clone()),
        file("d/neg.cls", "-1"),
        file("d/big.jpg", jpg.clone()),
        file("d/big.cls", "99999999999"),
        file("d/over.jpg", jpg.clone()),
        file("d/over.cls", "1048576"),
        Entry::Symlink("d/link.jpg".into(), "ok.jpg".into()),
        file("d/link.cls", "0"),
        Entry::HardLink("d/hard.jpg".into(), "d/ok.jpg".into()),
        file("d/hard.cls", "0"),
        file("d/onlycls.cls", "1"),
        file("d/ok.txt", "a later member of an earlier sample"),
        file("README", "no key"),
        file("d/._ok.jpg", "macOS metadata"),
        file("d/dup.jpg", jpg.clone()),
        file("d/dup.cls", "1"),
    ];
    write_tar(&dir.join("a.tar"), Style::Gnu, &a);
    let b = vec![
        file("d/dup.jpg", jpg.clone()),
        file("d/dup.cls", "1"),
        file("d/late.jpg", jpg.clone()),
        file("d/late.cls", "0"),
    ];
    write_tar(&dir.join("b.tar"), Style::Ustar, &b);
    // Not read: a subfolder (its shards too) and other files; a compressed shard is named.
    std::fs::create_dir(dir.join("val")).unwrap();
    write_tar(&dir.join("val/c.tar"), Style::Gnu, &b);
    std::fs::write(dir.join("dataset.json"), "{}").unwrap();
    std::fs::write(dir.join("d.tar.gz"), "gz").unwrap();

    let r = convert(
        &opts(&dir, Layout::WebDataset, &tmp.path().join("out")),
        &NoProgress,
    )
    .unwrap();
    let a = dir.join("a.tar").display().to_string();
    let b = dir.join("b.tar").display().to_string();
    let got = reasons(&r);
    let want: Vec<(String, &str)> = vec![
        (format!("{a}:d/nocls.jpg"), "no cls member (its label)"),
        (
            format!("{a}:d/two.jpg"),
            "more than one image member (jpg, png)",
        ),
        (format!("{a}:d/word.jpg"), "its cls \"cat\" is not a label"),
        (format!("{a}:d/neg.jpg"), "its cls \"-1\" is not a label"),
        (
            format!("{a}:d/big.jpg"),
            "its cls \"99999999999\" is not a label",
        ),
        (
            format!("{a}:d/over.jpg"),
            "its cls \"1048576\" is not a label",
        ),
        (
            format!("{a}:d/link.jpg"),
            "d/link.jpg is a symbolic link in the tar",
        ),
        (
            format!("{a}:d/hard.jpg"),
            "d/hard.jpg is a hard link in the tar",
        ),
        (format!("{a}:d/onlycls"), "no image member"),
        (
            format!("{a}:d/ok"),
            "its key repeats a sample listed earlier in this shard",
        ),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for ((path, reason), (want_path, want_reason)) in got.iter().zip(&want) {
        assert_eq!(path, want_path);
        assert!(reason.starts_with(want_reason), "{path}: {reason}");
    }
    // Regression: a key an earlier shard had (`d/dup`) dropped the sample; shards written
    // by independent workers each number from zero, and WebDataset keeps them.
    assert_eq!((r.inputs, r.written), (15, 5));
    let ds = Dataset::open(tmp.path().join("out")).unwrap();
    let labels: Vec<u32> = (0..5)
        .map(|i| ds.reader().unwrap().get(i).unwrap().header.label)
        .collect();
    assert_eq!(labels, [2, 0, 1, 1, 0]);
    assert_eq!(ds.manifest().classes, ["0", "1", "2"]);
    assert_eq!(
        ds.reader().unwrap().get(1).unwrap().header.width,
        image::load_from_memory(&png).unwrap().width()
    );
    let ignored: Vec<_> = r
        .ignored
        .iter()
        .map(|p| p.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(ignored, ["d.tar.gz", "dataset.json", "val"]);
    let w = r.warnings.join("\n");
    assert!(
        w.contains("compressed shards are not read (1 of them"),
        "{w}"
    );
    assert!(
        w.contains("json (1), txt (1), members without a key and extension (2)"),
        "{w}"
    );
    let across = format!("1 sample(s) have a key an earlier shard has too (e.g. \"d/dup\" in {b})");
    assert!(w.contains(&across), "{w}");
}

#[test]
fn shards_without_any_cls_are_one_class_of_unlabelled_images() {
    let tmp = tempfile::tempdir().unwrap();
    let (jpg, _) = images();
    let tar = tmp.path().join("laion-00000.tar");
    let entries = vec![
        file("000000.jpg", jpg.clone()),
        file("000000.txt", "a caption"),
        file("000001.jpg", jpg.clone()),
        file("000001.txt", "another"),
    ];
    write_tar(&tar, Style::Pax, &entries);
    let r = convert(
        &opts(&tar, Layout::WebDataset, &tmp.path().join("out")),
        &NoProgress,
    )
    .unwrap();
    assert_eq!(r.written, 2);
    assert!(
        r.warnings[1].contains("no sample has a cls member"),
        "{:?}",
        r.warnings
    );
    let ds = Dataset::open(tmp.path().join("out")).unwrap();
    assert_eq!(ds.manifest().classes, ["laion-00000"]);
}

/// Regression: a member name (a PAX `path`, up to 1 MiB) was kept whole in each input,
/// group and member, so a listing's memory grew with the names' bytes (300 samples with
/// 1 MB keys took 316 MB). A name over PATH_MAX is refused, named by its first bytes only.
#[test]
fn member_names_over_path_max_are_refused_and_named_by_their_first_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (jpg, _) = images();
    let tar = tmp.path().join("a.tar");
    let long = format!("d/{}", "k".repeat(5000));
    let entries = vec![
        file("d/ok.jpg", jpg.clone()),
        file("d/ok.cls", "1"),
        file(&format!("{long}.jpg"), jpg.clone()),
        file("d/ok2.jpg", jpg.clone()),
        file("d/ok2.cls", "0"),
    ];
    write_tar(&tar, Style::Pax, &entries);
    let r = convert(
        &opts(&tar, Layout::WebDataset, &tmp.path().join("out")),
        &NoProgress,
    )
    .unwrap();
    assert_eq!((r.inputs, r.written), (3, 2), "{:?}", reasons(&r));
    let got = reasons(&r);
    let shown = format!("{}:{}...kkkkkkkkkkkk.jpg", tar.display(), &long[..100]);
    assert_eq!(got[0].0, shown);
    assert!(
        got[0]
            .1
            .starts_with("its tar member name is 5006 bytes, over the limit of 4096"),
        "{got:?}"
    );
}

/// Regression: `Auto` read a folder of ImageNet's per-class train tars (`n01440764.tar`,
/// ...; the label is the tar's name, no sample has a `cls`) as WebDataset shards, and so
/// as one unlabelled class, exit 0; it must refuse them and say what to do.
#[test]
fn auto_refuses_per_class_tars_without_cls_and_says_to_unpack_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (jpg, _) = images();
    let train = tmp.path().join("imagenet_train");
    std::fs::create_dir(&train).unwrap();
    for class in ["n01440764", "n01443537"] {
        let entries = vec![
            file(&format!("{class}_1.JPEG"), jpg.clone()),
            file(&format!("{class}_2.JPEG"), jpg.clone()),
        ];
        write_tar(&train.join(format!("{class}.tar")), Style::Gnu, &entries);
    }
    let e = convert(
        &opts(&train, Layout::Auto, &tmp.path().join("auto")),
        &NoProgress,
    )
    .unwrap_err();
    let FormatError::BadSource { path, reason } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(path, &train);
    assert!(
        reason.contains("no sample has a cls member")
            && reason.contains("unpack each into a folder")
            && reason.contains("--layout webdataset"),
        "{reason}"
    );
    assert!(!tmp.path().join("auto").exists());
    // Asked for, the same tars are unlabelled data, as documented.
    let r = convert(
        &opts(&train, Layout::WebDataset, &tmp.path().join("asked")),
        &NoProgress,
    )
    .unwrap();
    assert_eq!(r.written, 4);
}

#[test]
fn strict_stops_at_the_first_bad_sample_and_a_member_over_the_size_limit_is_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let (jpg, _) = images();
    let tar = tmp.path().join("s.tar");
    // A 3 GiB member (a sparse file: its header, a hole, then the rest): read, it would
    // take minutes and 3 GiB of memory; it is skipped from its header's size.
    let mut entries = vec![file("a.jpg", jpg.clone()), file("a.cls", "0")];
    entries.push(file("huge.jpg", Vec::new()));
    write_tar(&tar, Style::Gnu, &entries);
    let huge = 3u64 << 30;
    let mut bytes = std::fs::read(&tar).unwrap();
    bytes.truncate(bytes.len() - 1024);
    let at = bytes.len() - 512;
    let mut h = tar::Header::new_gnu();
    h.set_path("huge.jpg").unwrap();
    h.set_size(huge);
    h.set_mode(0o644);
    h.set_cksum();
    bytes[at..].copy_from_slice(h.as_bytes());
    let mut cls = tar::Header::new_gnu();
    cls.set_path("huge.cls").unwrap();
    cls.set_size(1);
    cls.set_cksum();
    std::fs::write(&tar, &bytes).unwrap();
    let f = std::fs::OpenOptions::new().append(true).open(&tar).unwrap();
    f.set_len(bytes.len() as u64 + huge).unwrap();
    use std::io::Write;
    let mut w = &f;
    w.write_all(cls.as_bytes()).unwrap();
    w.write_all(&[b'1'; 512]).unwrap();
    w.write_all(&[0; 1024]).unwrap();

    let r = convert(
        &opts(&tar, Layout::WebDataset, &tmp.path().join("out")),
        &NoProgress,
    )
    .unwrap();
    assert_eq!(r.written, 1);
    assert_eq!(r.skipped.len(), 1, "{:?}", r.skipped);
    assert_eq!(
        r.skipped[0].path,
        PathBuf::from(format!("{}:huge.jpg", tar.display()))
    );
    assert!(
        r.skipped[0].reason.contains("over the input size limit"),
        "{:?}",
        r.skipped
    );

    let mut o = opts(&tar, Layout::WebDataset, &tmp.path().join("strict"));
    o.strict = true;
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(
        matches!(&e, FormatError::StrictInput { path, .. } if path.ends_with("s.tar:huge.jpg")),
        "{e}"
    );
}
