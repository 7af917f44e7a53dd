//! Regression tests for arguments that name the wrong thing, through the built `stoker`
//! binary: paths that do not exist or are files where directories are expected, names
//! that are not UTF-8, list files that are not text. Each gets a clear error (or its
//! result) and leaves nothing behind.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{run_within, text, LIMIT, SAMPLE, STOKER};

fn stoker(args: &[&OsStr]) -> Output {
    let mut c = Command::new(STOKER);
    c.args(args);
    run_within(c, LIMIT)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_refused_merge_leaves_no_directory_it_made() {
    // `stoker merge TYPO` made TYPO, then said it held no parts, and the empty directory
    // stayed; so did a new output directory whose named parts were refused.
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo/out");
    let o = stoker(&["merge".as_ref(), typo.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("does not exist"), "{}", text(&o));
    assert!(!dir.path().join("typo").exists());

    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let missing = dir.path().join("missing");
    for (part, said) in [(&file, "is not a directory"), (&missing, "does not exist")] {
        let new = dir.path().join("new/out");
        let o = stoker(&["merge".as_ref(), new.as_os_str(), part.as_os_str()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let err = stderr(&o);
        // Was "unfinished part (no manifest.json): ... rerun its task".
        assert!(
            err.contains(said) && !err.contains("unfinished"),
            "{}",
            text(&o)
        );
        assert!(!dir.path().join("new").exists(), "{}", text(&o));
    }
}

#[test]
fn reading_a_file_or_a_missing_path_as_a_dataset_says_which() {
    // "photo.jpg/manifest.json: Not a directory (os error 20)"; "gone/manifest.json: No
    // such file or directory".
    let dir = tempfile::tempdir().unwrap();
    let photo = Path::new(SAMPLE).join("caer/tent.jpg");
    let gone = dir.path().join("gone");
    for cmd in ["inspect", "verify"] {
        let o = stoker(&[cmd.as_ref(), photo.as_os_str()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let err = stderr(&o);
        let said = format!("{}: not a stoker dataset", photo.display());
        assert!(
            err.contains(&said) && err.contains("not a directory"),
            "{err}"
        );
        let o = stoker(&[cmd.as_ref(), gone.as_os_str()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let said = format!("{}: No such file or directory", gone.display());
        assert!(stderr(&o).contains(&said), "{}", text(&o));
        // Was "…/manifest.json: not a stoker dataset (no manifest.json); it is not a
        // directory", of the manifest itself.
        let manifest = dir.path().join("manifest.json");
        std::fs::write(&manifest, "{}").unwrap();
        let o = stoker(&[cmd.as_ref(), manifest.as_os_str()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let said = format!(
            "{}: not a stoker dataset; it is the manifest file itself: give the dataset's directory, {}",
            manifest.display(),
            dir.path().display()
        );
        assert!(stderr(&o).contains(&said), "{}", text(&o));
        // From inside the dataset: the manifest's parent is "", which is ".".
        let mut inside = Command::new(STOKER);
        inside.arg(cmd).arg("manifest.json").current_dir(dir.path());
        let o = run_within(inside, LIMIT);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let said = "manifest.json: not a stoker dataset; it is the manifest file itself: give the dataset's directory, the current directory (.)";
        assert!(stderr(&o).contains(said), "{}", text(&o));
    }
}

#[test]
fn json_reports_of_an_output_whose_name_is_not_utf8_print() {
    // The conversion and the merge succeeded, then their reports failed to print ("path
    // contains invalid UTF-8 characters", exit 1).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(OsStr::from_bytes(b"caf\xe9"));
    let flags = ["--no-check", "--json", "-q"].map(OsStr::new);
    let convert = |extra: &[&str]| {
        let mut args = vec![OsStr::new("convert"), OsStr::new(SAMPLE), out.as_os_str()];
        args.extend(flags);
        args.extend(extra.iter().map(OsStr::new));
        stoker(&args)
    };
    for o in [
        convert(&["--part", "0", "--parts", "1"]),
        stoker(&["merge".as_ref(), "--json".as_ref(), out.as_os_str()]),
    ] {
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let shown = v["out"].as_str().unwrap();
        assert!(shown.contains("caf\\xe9"), "{shown}");
    }
    let o = stoker(&["verify".as_ref(), out.as_os_str()]);
    assert!(o.status.success(), "{}", text(&o));
}

/// `stoker convert --list LIST SAMPLE OUT`.
fn convert_list(list: &Path, out: &Path) -> Output {
    stoker(&[
        "convert".as_ref(),
        "--list".as_ref(),
        list.as_os_str(),
        SAMPLE.as_ref(),
        out.as_os_str(),
    ])
}

#[test]
fn a_list_file_that_is_not_utf8_is_refused_naming_the_line() {
    // "stream did not contain valid UTF-8".
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.csv");
    std::fs::write(&list, b"caer/tent.jpg,0\ncaer/caf\xe9.jpg,1\n").unwrap();
    let out = dir.path().join("ds");
    let o = convert_list(&list, &out);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("line 2: not UTF-8"), "{}", text(&o));
    assert!(!out.exists());
}

#[test]
fn a_list_label_past_u32_is_said_to_be_over_the_limit() {
    // It was "not a non-negative integer", which it is.
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.csv");
    let out = dir.path().join("ds");
    // Past u32, and past u64 too.
    for label in ["99999999999", "99999999999999999999999"] {
        std::fs::write(&list, format!("caer/tent.jpg,{label}\n")).unwrap();
        let o = convert_list(&list, &out);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            stderr(&o).contains(&format!("label {label} is over the limit")),
            "{}",
            text(&o)
        );
    }
}

/// `bytes` with the size in its first SOF0 frame header set to `side`×`side`.
fn claiming_side(mut bytes: Vec<u8>, side: u16) -> Vec<u8> {
    let at = bytes
        .windows(2)
        .position(|w| w == [0xFF, 0xC0])
        .expect("a baseline JPEG");
    let side = side.to_be_bytes();
    bytes[at + 5..at + 7].copy_from_slice(&side);
    bytes[at + 7..at + 9].copy_from_slice(&side);
    bytes
}

/// A PNG whose header claims `side`×`side` RGB pixels, with one row of data.
fn png_claiming_side(side: u32) -> Vec<u8> {
    let mut ihdr = side.to_be_bytes().repeat(2);
    ihdr.extend([8, 2, 0, 0, 0]);
    // The filter byte and a row of black pixels (at most 60,000 bytes of them).
    let idat = stoker_testdata::zeros_zlib(1 + (u64::from(side) * 3).min(60_000));
    stoker_testdata::png_from_chunks(&[(b"IHDR", &ihdr), (b"IDAT", &idat)])
}

/// `dir/src/a/fine.jpg`, a baseline sample photo, and its bytes: a class for files that
/// claim larger sizes beside it.
fn one_class_with_a_photo(dir: &Path) -> (PathBuf, Vec<u8>) {
    let class = dir.join("src/a");
    std::fs::create_dir_all(&class).unwrap();
    let baseline = std::fs::read(Path::new(SAMPLE).join("opencv/data_stuff.jpg")).unwrap();
    std::fs::write(class.join("fine.jpg"), &baseline).unwrap();
    (class, baseline)
}

/// `stoker ARGS` under a 2 GB address-space limit (`ulimit -v` counts KiB).
fn limited<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    let mut c = Command::new("sh");
    c.args(["-c", r#"ulimit -v 2000000 && exec "$0" "$@""#]);
    c.arg(STOKER).args(args);
    run_within(c, LIMIT)
}

#[test]
fn with_max_pixels_raised_an_image_larger_than_memory_is_refused_not_an_abort() {
    // Files of a few KB claiming 38000x38000 (4.3 GB) and 30000x30000 pixels, under a
    // 2 GB address-space limit: the decoders' failed allocation aborted `convert` and
    // `decode` (SIGABRT), losing the whole run.
    let dir = tempfile::tempdir().unwrap();
    let (class, baseline) = one_class_with_a_photo(dir.path());
    let huge_jpeg = class.join("huge.jpg");
    std::fs::write(&huge_jpeg, claiming_side(baseline, 38000)).unwrap();
    std::fs::write(class.join("huge.png"), png_claiming_side(30000)).unwrap();
    let raised = ["--max-pixels", "18446744073709551615"].map(OsStr::new);
    let (src, out) = (dir.path().join("src"), dir.path().join("ds"));
    let mut args = vec![OsStr::new("convert"), OsStr::new("-j"), OsStr::new("1")];
    args.extend(raised);
    args.extend([src.as_os_str(), out.as_os_str()]);
    let o = limited(&args);
    assert!(o.status.success(), "{}", text(&o));
    let report = String::from_utf8_lossy(&o.stdout);
    for name in ["huge.jpg", "huge.png"] {
        let said = format!("{name}: its ");
        assert!(report.contains(&said), "{name}: {}", text(&o));
    }
    assert!(
        report.contains("more than this process could allocate"),
        "{}",
        text(&o)
    );
    let mut args = vec![
        OsStr::new("decode"),
        OsStr::new("--backend"),
        OsStr::new("cpu"),
    ];
    args.extend(raised);
    args.push(huge_jpeg.as_os_str());
    let o = limited(&args);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("more than this process could allocate"),
        "{}",
        text(&o)
    );
}

#[test]
fn an_image_that_would_fit_with_more_memory_stops_the_conversion_instead_of_a_skip() {
    // A file claiming 25819x25819 pixels (2.0 GB to decode, under the 2.048 GB limit) did
    // not fit beside the process's own memory, and was skipped as one larger than memory:
    // which images a conversion kept depended on what the process held at the moment (a
    // conversion under a 120 MB limit lost 0 to 2 of the test photos from run to run).
    // Memory that could be had is no fault of the input: the run stops, for --resume.
    let dir = tempfile::tempdir().unwrap();
    let (class, baseline) = one_class_with_a_photo(dir.path());
    std::fs::write(class.join("large.jpg"), claiming_side(baseline, 25819)).unwrap();
    let (src, out) = (dir.path().join("src"), dir.path().join("ds"));
    let flags = ["convert", "-j", "1", "--max-pixels", "1000000000"].map(OsStr::new);
    let o = limited(flags.into_iter().chain([src.as_os_str(), out.as_os_str()]));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("large.jpg")
            && err.contains("25819x25819 pixels need about 1999862283 bytes")
            && err.contains("--resume"),
        "{}",
        text(&o)
    );
    assert!(!out.join("manifest.json").exists());
}

/// Two files claiming 14000x14000 pixels (588 MB each to decode) under a 1 GB
/// address-space limit: one decode fits, two at once do not. With `-j 2` each thread's
/// memory check passed before the other thread had allocated (the test hook makes that
/// certain), and the second allocation aborted `convert` (SIGABRT), losing the run. The
/// memory a check finds is now held for the decode: the second decode waits for the first.
#[test]
fn concurrent_decodes_that_would_not_fit_together_wait_instead_of_aborting() {
    let dir = tempfile::tempdir().unwrap();
    let class = dir.path().join("src/a");
    std::fs::create_dir_all(&class).unwrap();
    let baseline = std::fs::read(Path::new(SAMPLE).join("opencv/data_stuff.jpg")).unwrap();
    for name in ["big0.jpg", "big1.jpg"] {
        std::fs::write(class.join(name), claiming_side(baseline.clone(), 14000)).unwrap();
    }
    std::fs::write(class.join("fine.jpg"), baseline).unwrap();
    let (src, out) = (dir.path().join("src"), dir.path().join("ds"));
    let mut c = Command::new("sh");
    c.args(["-c", r#"ulimit -v 1000000 && exec "$0" "$@""#]);
    c.arg(STOKER)
        .args(["convert", "-j", "2", "--max-pixels", "18446744073709551615"])
        .args([&src, &out])
        .env("STOKER_TEST_DECODE_RENDEZVOUS", "2")
        // One malloc arena: glibc otherwise reserves 64 MiB of address space for each
        // thread's own arena at its first allocation, and a thread doing that between a
        // decode's memory check and its allocation takes the margin this test leaves,
        // so the allocation just found to fit aborts (it did, under load).
        .env("MALLOC_ARENA_MAX", "1");
    let o = run_within(c, LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    let report = String::from_utf8_lossy(&o.stdout);
    // Each was decoded (and skipped for its missing data), none refused for memory.
    for name in ["big0.jpg", "big1.jpg"] {
        assert!(
            report.contains(&format!("{name}: corrupt JPEG")),
            "{name}: {}",
            text(&o)
        );
    }
    assert!(!report.contains("could allocate"), "{}", text(&o));
}

#[test]
fn a_manifest_naming_a_shard_with_no_name_is_invalid() {
    // An empty shard file name passed the manifest's checks and named the dataset
    // directory itself, opened as a shard ("not a regular file").
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let o = stoker(&[
        "convert".as_ref(),
        "--no-check".as_ref(),
        "-q".as_ref(),
        SAMPLE.as_ref(),
        ds.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let path = ds.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["shards"][0]["file"] = "".into();
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    for cmd in ["inspect", "verify"] {
        let o = stoker(&[cmd.as_ref(), ds.as_os_str()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let said = "invalid manifest: shard file name \"\" is not a plain name";
        assert!(stderr(&o).contains(said), "{cmd}: {}", text(&o));
    }
}

#[test]
fn the_help_says_how_to_see_more_of_the_log() {
    // STOKER_LOG was read but named nowhere a CLI user looks.
    let o = stoker(&["--help".as_ref()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("STOKER_LOG=info"), "{out}");
}

#[test]
fn merge_help_says_it_removes_the_parts_and_merge_names_each_removed() {
    // `stoker merge OUT PARTS...` deleted the part directories, also those outside OUT,
    // and neither `--help` nor its output said so (only docs/FORMAT.md did).
    for flag in ["-h", "--help"] {
        let o = stoker(&["merge".as_ref(), flag.as_ref()]);
        assert!(o.status.success(), "{}", text(&o));
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(
            help.contains("moves the parts' shards into OUT and removes the part directories"),
            "{help}"
        );
        assert!(help.contains("Each is removed"), "{help}");
    }

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("parts");
    let part = |i: &str| {
        let flags = ["-q", "--no-check", "--part", i, "--parts", "2"].map(OsStr::new);
        let mut args = vec!["convert".as_ref(), SAMPLE.as_ref(), root.as_os_str()];
        args.extend(flags);
        let o = stoker(&args);
        assert!(o.status.success(), "{}", text(&o));
        root.join(format!("part-0000{i}-of-00002"))
    };
    let parts = [part("0"), part("1")];
    let out = dir.path().join("merged");
    let o = stoker(&[
        "merge".as_ref(),
        out.as_os_str(),
        parts[0].as_os_str(),
        parts[1].as_os_str(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for p in &parts {
        assert!(!p.exists(), "{}", p.display());
        let said = format!(
            "removed part directory {} (outside OUT: removed because its shards were moved into OUT)",
            p.display()
        );
        assert!(stderr(&o).contains(&said), "no {said:?}: {}", text(&o));
    }
    let o = stoker(&["verify".as_ref(), out.as_os_str()]);
    assert!(o.status.success(), "{}", text(&o));
}
