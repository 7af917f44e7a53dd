//! How a source is read, as found against `torchvision.datasets.ImageFolder` on real-world
//! trees: labels of non-UTF-8 class folders, the order of files in class subfolders, a flat
//! folder left with `.ipynb_checkpoints`, list files as spreadsheets write them, PPM/PGM
//! inputs, camera RAW and HEIC files, `.DS_Store` under `--strict`, and a conversion that
//! writes nothing. Images are real photos from `testdata`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use stoker_formats::{
    convert, inspect, ConvertOptions, Dataset, Encoding, FormatError, NoProgress, Part, Source,
    MANIFEST_FILE,
};

/// Small distinct JPEG photos from the corpus.
fn photos() -> Vec<PathBuf> {
    [
        "exiv2/exiv2-bug1137.jpg",
        "caer/black_cat.jpg",
        "npmexif/test2.jpg",
        "caer/guitar.jpg",
        "opencv/hfs_data_001.jpg",
        "piexif/02.jpg",
    ]
    .iter()
    .map(|p| stoker_testdata::dir().join("imagefolder").join(p))
    .collect()
}

/// Copies `photo` to `root/rel` (raw bytes, so `rel` may be any file name).
fn put(root: &Path, rel: &[u8], photo: &Path) -> PathBuf {
    let p = root.join(OsStr::from_bytes(rel));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::copy(photo, &p).unwrap();
    p
}

/// Converts the ImageFolder tree `src` with [`opts`]; the temporary directory (kept
/// alive by the caller), the dataset path in it and the report.
fn convert_folder(src: &Path) -> (tempfile::TempDir, PathBuf, stoker_formats::ConvertReport) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let r = convert(&opts(Source::ImageFolder(src.into()), &out), &NoProgress).unwrap();
    (dir, out, r)
}

fn opts(source: Source, out: &Path) -> ConvertOptions {
    let mut o = ConvertOptions::new(source, out);
    o.check_decode = false;
    o.jobs = Some(2);
    o
}

/// The payload of every record, in index order.
fn payloads(out: &Path) -> Vec<Vec<u8>> {
    let ds = Dataset::open(out).unwrap();
    let r = ds.reader().unwrap();
    (0..ds.len())
        .map(|i| r.get(i).unwrap().payload.to_vec())
        .collect()
}

#[test]
fn a_class_whose_every_input_is_skipped_is_said_to_have_no_samples() {
    // An earlier dataset converted inside the source tree is a class of non-images: the
    // README promised a warning, and the report said nothing beyond the skip list.
    let src = tempfile::tempdir().unwrap();
    let p = photos();
    put(src.path(), b"cats/1.jpg", &p[1]);
    put(src.path(), b"cats/2.jpg", &p[3]);
    let first = convert(
        &opts(
            Source::ImageFolder(src.path().into()),
            &src.path().join("old"),
        ),
        &NoProgress,
    )
    .unwrap();
    assert_eq!(
        (first.written, first.warnings.len()),
        (2, 0),
        "{:?}",
        first.warnings
    );
    put(src.path(), b"zebras/1.jpg", &p[0]);
    std::fs::create_dir(src.path().join("zz-empty")).unwrap();
    let (_out_dir, _out, r) = convert_folder(src.path());
    assert_eq!((r.written, r.skipped.len()), (3, 3), "{:?}", r.skipped);
    assert_eq!(r.empty_classes, ["zz-empty", "old"]);
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("\"zz-empty\" (label 3) is an empty folder"),
        "{:?}",
        r.warnings
    );
    assert_eq!(
        r.warnings[1],
        "class \"old\" (label 1, 3 input(s)) has no samples: every input of it was skipped (see the skip list); it keeps its label"
    );

    // A part holds a slice of the classes: a class without samples there is no news.
    let part_out = tempfile::tempdir().unwrap();
    let mut o = opts(Source::ImageFolder(src.path().into()), part_out.path());
    o.part = Some(Part::new(0, 2).unwrap());
    let r = convert(&o, &NoProgress).unwrap();
    assert!(
        r.warnings.iter().all(|w| !w.contains("was skipped")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn non_utf8_class_folders_get_torchvision_labels_and_distinct_names() {
    let src = tempfile::tempdir().unwrap();
    let p = photos();
    // Latin-1 names; the last two once both read `�and�` and their order by raw bytes
    // put them after `Ｆull` (0xF1 > 0xEF), shifting labels against torchvision.
    put(src.path(), "Ｆull/1.jpg".as_bytes(), &p[0]);
    put(src.path(), b"caf\xe9/1.jpg", &p[1]);
    put(src.path(), b"\xf1and\xfa/1.jpg", &p[2]);
    put(src.path(), b"\xf1and\xfb/1.jpg", &p[3]);
    put(src.path(), b"\xf1and\xfb/2.jpg", &p[4]);
    std::fs::create_dir(src.path().join("zz-empty")).unwrap();
    let (_out_dir, out, r) = convert_folder(src.path());
    assert_eq!(r.written, 5);
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("\"zz-empty\" (label 1) is an empty folder"));
    let ds = Dataset::open(&out).unwrap();
    // torchvision.datasets.ImageFolder(src).classes, each surrogate `\udcNN` as `\xNN`.
    assert_eq!(
        ds.manifest().classes,
        [
            "caf\\xe9",
            "zz-empty",
            "\\xf1and\\xfa",
            "\\xf1and\\xfb",
            "Ｆull"
        ]
    );
    // Counted per label: the two `\xf1and\xNN` classes apart, the empty one listed.
    let counts: Vec<_> = inspect(&ds)
        .unwrap()
        .per_class
        .iter()
        .map(|c| (c.label, c.count))
        .collect();
    assert_eq!(counts, [(0, 1), (1, 0), (2, 1), (3, 2), (4, 1)]);
}

#[test]
fn files_in_class_subfolders_are_stored_in_sorted_os_walk_order() {
    let src = tempfile::tempdir().unwrap();
    let p = photos();
    // sorted(os.walk("c")): c, c/a-b, c/a.b, c/a/x (by path string; '-' < '.' < '/'),
    // each directory's files before those of the directories under it.
    let order: [&[u8]; 6] = [
        b"c/b.jpg",
        b"c/z.jpg",
        b"c/a-b/3.jpg",
        b"c/a.b/4.jpg",
        b"c/a/x/1.jpg",
        b"d/0.jpg",
    ];
    // Created in another order than the expected one.
    for (i, rel) in order.iter().enumerate().rev() {
        put(src.path(), rel, &p[i]);
    }
    let out = tempfile::tempdir().unwrap();
    let out = out.path().join("ds");
    convert(
        &opts(Source::ImageFolder(src.path().into()), &out),
        &NoProgress,
    )
    .unwrap();
    let want: Vec<Vec<u8>> = p.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(
        payloads(&out) == want,
        "records not in sorted(os.walk) order"
    );
}

#[test]
fn flat_folder_with_ipynb_checkpoints_is_not_read_as_one_class_folder() {
    let src = tempfile::tempdir().unwrap();
    let p = photos();
    for (i, photo) in p[..3].iter().enumerate() {
        put(src.path(), format!("img{i}.jpg").as_bytes(), photo);
    }
    put(src.path(), b".ipynb_checkpoints/img0-checkpoint.jpg", &p[0]);
    put(src.path(), b"__MACOSX/._img0.jpg", &p[0]);
    let (_out_dir, _, r) = convert_folder(src.path());
    // Before: one class `.ipynb_checkpoints` of 1 image, the 3 real ones ignored.
    assert!(r.flat);
    assert!(r.ignored.is_empty());
    assert_eq!(r.written, 5);
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(r.warnings.iter().all(|w| w.contains("hidden folder")));
}

#[test]
fn list_file_with_byte_order_mark_and_csv_quoted_paths_converts_every_row() {
    let src = tempfile::tempdir().unwrap();
    let p = photos();
    put(src.path(), b"a,b.jpg", &p[0]);
    put(src.path(), b"say \"hi\".jpg", &p[1]);
    put(src.path(), b"plain.jpg", &p[2]);
    // As Excel saves "CSV UTF-8" and pandas quotes a path holding a comma or a quote.
    let list = src.path().join("list.csv");
    std::fs::write(
        &list,
        "\u{feff}path,label\r\n\"a,b.jpg\",1\r\n\"say \"\"hi\"\".jpg\",0\r\nplain.jpg,1\r\n",
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let out = out.path().join("ds");
    let source = Source::List {
        root: src.path().into(),
        list,
    };
    let r = convert(&opts(source, &out), &NoProgress).unwrap();
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    assert_eq!(r.written, 3);
}

#[test]
fn ppm_and_pgm_inputs_are_converted_and_unknown_formats_say_unsupported() {
    let src = tempfile::tempdir().unwrap();
    let png = stoker_testdata::dir().join("conformance/ref/pillow__Tests__images__hopper.jpg.png");
    let img = image::open(&png).unwrap();
    let class = src.path().join("hopper");
    std::fs::create_dir(&class).unwrap();
    img.to_rgb8().save(class.join("hopper.ppm")).unwrap();
    img.to_luma8().save(class.join("hopper.pgm")).unwrap();
    // A QOI header: recognized by the image crate, not compiled in.
    std::fs::write(class.join("x.qoi"), b"qoif\0\0\0\x02\0\0\0\x02\x03\0").unwrap();
    let (_out_dir, out, r) = convert_folder(src.path());
    assert_eq!(r.written, 2, "{:?}", r.skipped);
    assert_eq!(r.skipped.len(), 1);
    assert!(
        r.skipped[0]
            .reason
            .starts_with("unsupported image format (Qoi"),
        "{:?}",
        r.skipped
    );
    let ds = Dataset::open(&out).unwrap();
    let h = ds.reader().unwrap().get(0).unwrap().header;
    assert_eq!((h.width, h.height), (img.width(), img.height()));
}

#[test]
fn conversion_that_writes_no_record_fails_and_leaves_no_manifest() {
    let src = tempfile::tempdir().unwrap();
    let p = photos();
    put(src.path(), b"imgs/a.jpg", &p[0]);
    put(src.path(), b"imgs/b.jpg", &p[1]);
    let list = src.path().join("list.csv");
    std::fs::write(&list, "a.jpg,0\nb.jpg,1\n").unwrap();
    let out = tempfile::tempdir().unwrap();
    let out = out.path().join("ds");
    // The list's paths are relative to `imgs/`, not to the directory given.
    let wrong = Source::List {
        root: src.path().into(),
        list: list.clone(),
    };
    let e = convert(&opts(wrong.clone(), &out), &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::BadSource { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("none of the 2 inputs"), "{msg}");
    assert!(msg.contains("a.jpg"), "{msg}");
    assert!(msg.contains("relative to SRC"), "{msg}");
    assert!(!out.join(MANIFEST_FILE).exists());
    // The same output directory takes the corrected conversion, without --resume.
    let right = Source::List {
        root: src.path().join("imgs"),
        list,
    };
    assert_eq!(convert(&opts(right, &out), &NoProgress).unwrap().written, 2);

    // A part may be empty: more parts than inputs.
    let parts = tempfile::tempdir().unwrap();
    let mut o = opts(wrong, parts.path());
    o.part = Some(Part::new(0, 3).unwrap());
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!((r.inputs, r.written), (0, 0));
}

#[test]
fn class_folders_without_files_fail_saying_so() {
    // A folder whose name ends in .tar beside tar shards makes the source look like class
    // folders: no input at all. The message said "none of the 0 inputs could be converted;
    // the first skipped: " and nothing after it.
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir(src.path().join("d.tar")).unwrap();
    std::fs::write(src.path().join("shard-0.tar"), b"").unwrap();
    let out = tempfile::tempdir().unwrap();
    let source = Source::ImageFolder(src.path().into());
    let e = convert(&opts(source, &out.path().join("ds")), &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::BadSource { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("class folders are empty"), "{msg}");
    assert!(msg.contains("--layout webdataset"), "{msg}");
}

#[test]
fn tree_of_unsupported_files_fails_with_the_first_reasons() {
    let src = tempfile::tempdir().unwrap();
    for name in ["a.txt", "b.txt"] {
        let p = src.path().join("docs").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"not an image").unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    let e = convert(
        &opts(
            Source::ImageFolder(src.path().into()),
            &out.path().join("ds"),
        ),
        &NoProgress,
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("none of the 2 inputs"), "{msg}");
    assert!(msg.contains("a.txt: not an image"), "{msg}");
    assert!(!out.path().join("ds").join(MANIFEST_FILE).exists());
}

#[test]
fn sixteen_bit_grayscale_png_is_scaled_to_8_bits_not_clipped() {
    // docs/FORMAT.md: (v + 128) / 257, where PIL's convert("RGB") clips at 255 (1000 -> 255).
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir(src.path().join("gray")).unwrap();
    let img = image::ImageBuffer::<image::Luma<u16>, _>::from_pixel(4, 4, image::Luma([1000]));
    img.save(src.path().join("gray/deep.png")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let out = out.path().join("ds");
    let mut o = opts(Source::ImageFolder(src.path().into()), &out);
    o.encoding = Encoding::Raw;
    o.raw_size = Some((4, 4));
    assert_eq!(convert(&o, &NoProgress).unwrap().written, 1);
    let px = &payloads(&out)[0];
    assert_eq!(px.len(), 4 * 4 * 3);
    assert!(px.iter().all(|&v| u32::from(v) == (1000 + 128) / 257));
}

/// A 4×3 RGB TIFF, uncompressed, one strip; with `raw`, IFD0 also says what a camera RAW
/// file's does: `NewSubfileType` 1 (a reduced-resolution preview) and `DNGVersion` 1.4.
fn tiff(raw: bool) -> Vec<u8> {
    let short = |tag: u16, v: u16| (tag, 3u16, 1u32, u32::from(v));
    let mut entries = vec![
        short(256, 4),
        short(257, 3),
        (258, 3, 3, 0), // BitsPerSample: 8, 8, 8, at an offset set below
        short(259, 1),
        short(262, 2),
        (273, 4, 1, 0), // StripOffsets, set below
        short(277, 3),
        short(278, 3),
        (279, 4, 1, 36),
    ];
    if raw {
        entries.insert(0, (254, 4, 1, 1));
        entries.push((50706, 1, 4, u32::from_le_bytes([1, 4, 0, 0])));
    }
    let extra = 8 + 2 + 12 * entries.len() as u32 + 4;
    let mut t = b"II*\0\x08\0\0\0".to_vec();
    t.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for (tag, ty, count, value) in entries {
        let value = match tag {
            258 => extra,
            273 => extra + 6,
            _ => value,
        };
        t.extend_from_slice(&tag.to_le_bytes());
        t.extend_from_slice(&ty.to_le_bytes());
        t.extend_from_slice(&count.to_le_bytes());
        t.extend_from_slice(&value.to_le_bytes());
    }
    t.extend_from_slice(&[0; 4]);
    t.extend_from_slice(&[8, 0, 8, 0, 8, 0]);
    t.extend((0..36u8).map(|v| v * 7));
    t
}

#[test]
fn camera_raw_files_and_unread_formats_are_skipped_saying_what_they_are() {
    // A DNG's first image is a small preview, which the `image` crate decoded and the
    // dataset stored as the photo, without a word, beside the camera's JPEG of it.
    let src = tempfile::tempdir().unwrap();
    let p = photos();
    put(src.path(), b"cam/IMG_0001.JPG", &p[0]);
    std::fs::write(src.path().join("cam/IMG_0001.DNG"), tiff(true)).unwrap();
    std::fs::write(src.path().join("cam/plain.tif"), tiff(false)).unwrap();
    // An iPhone's HEIC and a JPEG XL were "not an image (unrecognized file format)".
    std::fs::write(
        src.path().join("cam/IMG_0002.HEIC"),
        b"\0\0\0\x18ftypheic\0\0\0\0mif1heic",
    )
    .unwrap();
    std::fs::write(src.path().join("cam/x.jxl"), b"\xff\x0a\xfa\x7f\x01\x02").unwrap();
    let (_dir, _out, r) = convert_folder(src.path());
    // The JPEG and the plain TIFF (the same bytes without the RAW tags) are converted.
    assert_eq!(r.written, 2, "{:?}", r.skipped);
    let reason = |name: &str| {
        r.skipped
            .iter()
            .find(|s| s.path.ends_with(name))
            .map(|s| s.reason.clone())
            .unwrap_or_else(|| panic!("{name} not skipped: {:?}", r.skipped))
    };
    assert!(reason("IMG_0001.DNG").starts_with("camera RAW file (DNG)"));
    assert!(reason("IMG_0002.HEIC").starts_with("unsupported image format (HEIC/HEIF"));
    assert!(reason("x.jxl").starts_with("unsupported image format (JPEG XL"));
}

#[test]
fn strict_skips_files_of_an_image_folder_that_neither_read_nor_are_named_as_images() {
    // A tree copied from macOS has a .DS_Store in every folder: --strict failed on the
    // first, where torchvision's ImageFolder does not look at such files.
    let src = tempfile::tempdir().unwrap();
    let p = photos();
    put(src.path(), b"a/1.jpg", &p[0]);
    put(src.path(), b"b/2.jpg", &p[1]);
    std::fs::write(src.path().join("a/.DS_Store"), b"\0\0\0\x01Bud1").unwrap();
    std::fs::write(src.path().join("b/Thumbs.db"), b"\xd0\xcf\x11\xe0").unwrap();
    std::fs::write(src.path().join("b/README.txt"), b"photos of b").unwrap();
    std::fs::write(src.path().join("b/.gitkeep"), b"").unwrap();
    // macOS's AppleDouble file beside each photo it copied: named as one, hidden.
    std::fs::write(
        src.path().join("a/._1.jpg"),
        b"\0\x05\x16\x07\0\x02\0\0Mac OS X",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(
        Source::ImageFolder(src.path().into()),
        &dir.path().join("ds"),
    );
    o.strict = true;
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!(r.written, 2);
    // Still skipped and counted, as without --strict.
    assert_eq!(r.skipped.len(), 5, "{:?}", r.skipped);
    let apple = r
        .skipped
        .iter()
        .find(|s| s.path.ends_with("a/._1.jpg"))
        .unwrap();
    assert!(apple.reason.contains("AppleDouble"), "{}", apple.reason);
    // A file named as an image that is none, or an image that cannot be read, still
    // fails: the user wanted it in the dataset.
    for (name, bytes) in [
        ("b/notes.jpg", &b"not a photo"[..]),
        ("b/empty.png", b""),
        ("b/x.heic", b"\0\0\0\x18ftypheic\0\0\0\0"),
        ("b/y.bin", &tiff(true)[..]),
    ] {
        let path = src.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(
            Source::ImageFolder(src.path().into()),
            &dir.path().join("ds"),
        );
        o.strict = true;
        match convert(&o, &NoProgress) {
            Err(FormatError::StrictInput { path: p, .. }) => assert_eq!(p, path),
            other => panic!("{name}: {other:?}"),
        }
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn an_earlier_dataset_in_a_flat_folder_is_named_when_nothing_converts() {
    // Converted into the folder it came from, the dataset made the folder a tree of one
    // class of non-images the next time, its photos beside it unread: the error only
    // listed manifest.json and the shards as "not an image".
    let src = tempfile::tempdir().unwrap();
    let p = photos();
    put(src.path(), b"1.jpg", &p[0]);
    put(src.path(), b"2.jpg", &p[1]);
    let first = src.path().join("out");
    convert(
        &opts(Source::ImageFolder(src.path().into()), &first),
        &NoProgress,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let again = convert(
        &opts(
            Source::ImageFolder(src.path().into()),
            &dir.path().join("ds"),
        ),
        &NoProgress,
    );
    match again {
        Err(FormatError::BadSource { reason, .. }) => assert!(
            reason.contains(&format!(
                "{} is a stoker dataset converted into {} earlier",
                first.display(),
                src.path().display()
            )) && reason.contains("files beside the folders are not read"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    // The dataset itself given as the source.
    match convert(
        &opts(Source::ImageFolder(first.clone()), &dir.path().join("ds2")),
        &NoProgress,
    ) {
        Err(FormatError::BadSource { reason, .. }) => {
            assert!(reason.contains("is a stoker dataset already"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_strict_conversion_that_skipped_a_ds_store_resumes() {
    // The journal's skips were refused outright under --strict ("it skipped inputs in a
    // --strict conversion"), which only held while --strict skipped nothing.
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    stoker_testdata::copy_tree(&stoker_testdata::dir().join("imagefolder"), &src);
    std::fs::remove_file(src.join("ORIGIN.tsv")).unwrap();
    std::fs::write(src.join("caer/.DS_Store"), b"\0\0\0\x01Bud1").unwrap();
    let mut o = opts(Source::ImageFolder(src.clone()), &tmp.path().join("ds"));
    o.strict = true;
    o.shard_bytes = stoker_formats::convert::MIN_SHARD_BYTES;
    o.fail_after = Some(60);
    assert!(matches!(
        convert(&o, &NoProgress),
        Err(FormatError::Injected { .. })
    ));
    o.fail_after = None;
    o.resume = true;
    let r = convert(&o, &NoProgress).unwrap();
    assert!(r.resumed > 0, "nothing resumed");
    assert_eq!(r.skipped.len(), 1, "{:?}", r.skipped);
    assert!(r.skipped[0].path.ends_with("caer/.DS_Store"));
}
