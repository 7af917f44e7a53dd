//! Regression tests for arguments that name the wrong thing, through the built `stoker`
//! binary: paths that do not exist or are files where directories are expected, names
//! that are not UTF-8, list files that are not text. Each gets a clear error (or its
//! result) and leaves nothing behind.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
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

#[test]
fn a_list_file_that_is_not_utf8_is_refused_naming_the_line() {
    // "stream did not contain valid UTF-8".
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.csv");
    std::fs::write(&list, b"caer/tent.jpg,0\ncaer/caf\xe9.jpg,1\n").unwrap();
    let out = dir.path().join("ds");
    let o = stoker(&[
        "convert".as_ref(),
        "--list".as_ref(),
        list.as_os_str(),
        SAMPLE.as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("line 2: not UTF-8"), "{}", text(&o));
    assert!(!out.exists());
}
