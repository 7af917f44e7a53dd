//! Regression tests for issue 18 through the built `stoker` binary: inputs that are not
//! files, cut-off JPEGs, a full disk (the file size limit), a damaged dataset under `bench`
//! and an unreadable sub-directory. Photos from the repository's `examples/data/sample`.
// They run the `stoker` binary, built with the `cli` feature only.
#![cfg(feature = "cli")]

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{jpeg_meta, p, run_within, sample_photos, text, SAMPLE};

fn stoker(args: &[&str]) -> Output {
    common::stoker_within(args, common::LIMIT)
}

#[test]
fn decode_dev_zero_is_refused_without_reading_it() {
    let o = stoker(&["decode", "/dev/zero"]);
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("/dev/zero") && err.contains("not a regular file"),
        "{}",
        text(&o)
    );
}

#[test]
fn decode_of_a_cut_off_jpeg_says_truncated_not_decoded_yes() {
    let dir = tempfile::tempdir().unwrap();
    let jpeg = std::fs::read(Path::new(SAMPLE).join("caer/tent.jpg")).unwrap();
    let cut = dir.path().join("cut.jpg");
    std::fs::write(&cut, &jpeg[..jpeg.len() * 2 / 3]).unwrap();
    let o = stoker(&["decode", p(&cut), "--backend", "cpu"]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("decoded      no: truncated"), "{}", text(&o));
    let o = stoker(&["decode", p(&cut), "--backend", "cpu", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["truncated"], true, "{v}");
}

#[test]
fn file_size_limit_during_convert_names_the_shard_and_resume_finishes_identically() {
    let dir = tempfile::tempdir().unwrap();
    let (clean, limited) = (dir.path().join("clean"), dir.path().join("limited"));
    let flags = ["--shard-size", "64K", "--no-check"];
    let o = stoker(&[&["convert", SAMPLE, p(&clean)][..], &flags].concat());
    assert!(o.status.success(), "{}", text(&o));

    // The process's file size limit (50 KiB: sh counts 512-byte blocks) stands in for a
    // full disk: the shard's short write surfaces the same way. SIGXFSZ keeps its default
    // (kill) here: the CLI itself must ignore it, or it dies with status 153 and no word.
    let o = under_file_size_limit(
        100,
        &[&["convert", SAMPLE, p(&limited)][..], &flags].concat(),
    );
    // 3: no fault of the inputs, run again once there is room (it was 1, a failure).
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("shard-000")
            && err.contains("file size limit reached")
            && err.contains("records (")
            && err.contains("--resume"),
        "{}",
        text(&o)
    );
    let o = stoker(&[&["convert", SAMPLE, p(&limited), "--resume"][..], &flags].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stoker_testdata::files_in(&clean) == stoker_testdata::files_in(&limited),
        "resumed output differs"
    );
}

/// `stoker ARGS` under a file size limit of `blocks` 512-byte blocks, with SIGXFSZ at its
/// default disposition (`sh` may start with it ignored; `trap - XFSZ` restores it).
fn under_file_size_limit(blocks: u32, args: &[&str]) -> Output {
    under_ulimit(&format!("-f {blocks}"), args)
}

/// `stoker ARGS` under `ulimit LIMIT` (`-f 100`, `-n 6`), SIGXFSZ at its default.
fn under_ulimit(limit: &str, args: &[&str]) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(r#"trap - XFSZ; ulimit {limit}; exec "$@""#))
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_stoker"))
        .args(args);
    run_within(c, Duration::from_secs(120))
}

#[test]
fn file_size_limit_during_decode_output_is_an_error_not_a_signal_death() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("big.png");
    let jpeg = Path::new(SAMPLE).join("caer/tent.jpg");
    // 8 KiB: far below the decoded image's PNG.
    let o = under_file_size_limit(16, &["decode", p(&jpeg), "--backend", "cpu", "-o", p(&png)]);
    // A limit of the process, no fault of the input: 3, as convert's file size limit.
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("big.png") && err.contains("File too large"),
        "{}",
        text(&o)
    );
    // Nothing half-written is left: no PNG, no temporary file.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // Through a symlink to an earlier PNG: the failed write leaves that file whole (it
    // was truncated and cut short in place).
    let prev = dir.path().join("prev.png");
    std::fs::write(&prev, b"an earlier PNG").unwrap();
    let link = dir.path().join("link.png");
    std::os::unix::fs::symlink(&prev, &link).unwrap();
    let o = under_file_size_limit(
        16,
        &["decode", p(&jpeg), "--backend", "cpu", "-o", p(&link)],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert_eq!(std::fs::read(&prev).unwrap(), b"an earlier PNG");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);

    // Through a link to a name that does not exist yet: nothing cut short appears there.
    let dangling = dir.path().join("dangling.png");
    std::os::unix::fs::symlink("new.png", &dangling).unwrap();
    let o = under_file_size_limit(
        16,
        &["decode", p(&jpeg), "--backend", "cpu", "-o", p(&dangling)],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(!dir.path().join("new.png").exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

/// `stoker bench` on `ds` for 0.3 s on the CPU, batches of 4 at 32×32: the run both
/// failing-records tests make.
fn short_cpu_bench(ds: &Path) -> Output {
    stoker(&[
        "bench",
        p(ds),
        "--device",
        "cpu",
        "--seconds",
        "0.3",
        "--batch",
        "4",
        "--size",
        "32",
    ])
}

/// A dataset in `ds` of the sample photos (label 0), each record pushed by `push` with its
/// position, JPEG bytes and header: the place for a test to damage some of them.
fn sample_photo_dataset(
    ds: &Path,
    mut push: impl FnMut(
        &mut stoker::formats::DatasetWriter,
        usize,
        Vec<u8>,
        stoker::formats::RecordMeta,
    ),
) {
    use stoker::formats::{DatasetWriter, Provenance, WriterOptions};
    let mut w = DatasetWriter::create(ds, WriterOptions::default()).unwrap();
    for (i, path) in sample_photos().iter().enumerate() {
        let bytes = std::fs::read(path).unwrap();
        let meta = jpeg_meta(&bytes, 0);
        push(&mut w, i, bytes, meta);
    }
    w.finish(vec!["all".into()], Provenance::stoker("t"))
        .unwrap();
}

#[test]
fn bench_on_a_dataset_whose_records_fail_says_so_and_exits_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    sample_photo_dataset(&ds, |w, i, bytes, meta| {
        // Every third record: JPEG-looking bytes that do not decode (a valid CRC, so only
        // decoding finds them).
        let payload = if i % 3 == 0 { &bytes[..64] } else { &bytes[..] };
        w.push(meta, payload).unwrap();
    });
    let o = short_cpu_bench(&ds);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("RECORD ERRORS"),
        "{}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("record(s)"),
        "{}",
        text(&o)
    );
}

/// A record whose stored CRC is wrong (its JPEG whole) is not timed as a good decode in
/// `bench`'s sample: it is counted with the unreadable records, as the loader counts it.
#[test]
fn bench_sample_skips_a_record_whose_crc_is_wrong() {
    use stoker::formats::{Encoding, RecordHeader};
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    sample_photo_dataset(&ds, |w, i, bytes, meta| {
        if i != 1 {
            w.push(meta, &bytes).unwrap();
            return;
        }
        let header = RecordHeader {
            encoding: Encoding::Jpeg,
            height: meta.height,
            width: meta.width,
            channels: 3,
            label: 0,
            payload_len: bytes.len() as u32,
            crc32c: crc32c::crc32c(&bytes) ^ 1,
        };
        w.push_header_unchecked(header, &bytes).unwrap();
    });
    let o = short_cpu_bench(&ds);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("1 unreadable records skipped"), "{}", text(&o));
}

#[test]
fn unreadable_subdirectory_is_skipped_and_counted_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a/locked")).unwrap();
    std::fs::copy(
        Path::new(SAMPLE).join("caer/tent.jpg"),
        src.join("a/ok.jpg"),
    )
    .unwrap();
    std::fs::copy(
        Path::new(SAMPLE).join("caer/puppy.jpg"),
        src.join("a/locked/x.jpg"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    mode(dir.path(), 0o777).unwrap();
    mode(&src.join("a/locked"), 0o000).unwrap();
    let out = dir.path().join("out");
    let mut c;
    // Permissions do not stop root: run as nobody there (setpriv, util-linux).
    if running_as_root() {
        c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_stoker"));
    } else {
        c = Command::new(env!("CARGO_BIN_EXE_stoker"));
    }
    c.args(["convert", p(&src), p(&out), "--json", "--no-check"]);
    let o = run_within(c, Duration::from_secs(120));
    mode(&src.join("a/locked"), 0o755).unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["written"], 1, "{r}");
    assert_eq!(r["inputs"], 2, "{r}");
    let skipped = &r["skipped"][0];
    assert!(
        skipped["path"].as_str().unwrap().ends_with("locked")
            && skipped["reason"]
                .as_str()
                .unwrap()
                .contains("unreadable directory"),
        "{r}"
    );
}

/// True when this test runs as root (`id -u`), for which permissions do not apply.
fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[test]
fn bench_on_a_dataset_whose_every_record_fails_ends_and_exits_nonzero() {
    use stoker::formats::{DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let mut w = DatasetWriter::create(&ds, WriterOptions::default()).unwrap();
    let jpeg = std::fs::read(Path::new(SAMPLE).join("caer/tent.jpg")).unwrap();
    for _ in 0..8 {
        let meta = RecordMeta {
            encoding: Encoding::Jpeg,
            height: 427,
            width: 640,
            channels: 3,
            label: 0,
        };
        w.push(meta, &jpeg[..600]).unwrap();
    }
    w.finish(vec!["all".into()], Provenance::stoker("t"))
        .unwrap();
    let o = short_cpu_bench(&ds);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("8 undecodable"),
        "{}",
        text(&o)
    );
}

#[test]
fn inspect_and_verify_of_an_unfinished_conversion_say_to_resume_it() {
    // A conversion stopped before its manifest (the injected failure stands in for a kill):
    // both commands said only "manifest.json: No such file or directory".
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let mut c = Command::new(env!("CARGO_BIN_EXE_stoker"));
    c.args([
        "convert",
        SAMPLE,
        p(&out),
        "--no-check",
        "--shard-size",
        "64K",
    ])
    .env("STOKER_TEST_FAIL_AFTER", "4");
    let o = c.output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(out.join(".stoker-convert.journal").exists(), "{}", text(&o));
    for cmd in ["inspect", "verify"] {
        let o = stoker(&[cmd, p(&out)]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("unfinished conversion") && err.contains("stoker convert --resume"),
            "{cmd}: {}",
            text(&o)
        );
    }
}

#[test]
fn convert_into_a_log_says_how_far_it_got() {
    // In a container stderr is a pipe (`kubectl logs`) or a Slurm job's output file, where
    // a progress bar draws nothing: a conversion of hours printed nothing until its end.
    // There it writes a line at the start and then once a minute.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let o = stoker(&["convert", SAMPLE, p(&out)]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("progress: 0/15 images (0.0%)")),
        "{}",
        text(&o)
    );
    // --quiet: no progress line, for a job log meant to hold only warnings and errors.
    let quiet = dir.path().join("quiet");
    let o = stoker(&["convert", "-q", SAMPLE, p(&quiet)]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("progress:"), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("15"),
        "{}",
        text(&o)
    );
}

/// `stoker ARGS` with at most `fds` file descriptors open (`ulimit -n`).
fn under_descriptor_limit(fds: u32, args: &[&str]) -> Output {
    under_ulimit(&format!("-n {fds}"), args)
}

/// A process out of file descriptors fails to open inputs for no fault of theirs. Skipped
/// as unreadable, they made a smaller dataset that converted "successfully" and verified.
/// Where the limit bites (listing, an input, the writer's own files) depends on the limit
/// and on the workers' timing, so each limit runs several times: every run must either
/// convert every input or fail without a manifest, and a failure on an input or a source
/// folder must say that the process ran out.
#[test]
fn running_out_of_file_descriptors_stops_convert_instead_of_skipping_inputs() {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/imagefolder");
    let dir = tempfile::tempdir().unwrap();
    let mut seen_fault = false;
    for fds in 4..=8 {
        for run in 0..4 {
            let out = dir.path().join(format!("out-{fds}-{run}"));
            let args = ["convert", src, p(&out), "--json", "--no-check", "-j", "8"];
            let o = under_descriptor_limit(fds, &args);
            if o.status.success() {
                let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                let first = &r["skipped"][0];
                assert_eq!(
                    r["written"], r["inputs"],
                    "ulimit -n {fds}: skipped {first}"
                );
                continue;
            }
            assert!(!out.join("manifest.json").exists(), "{}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            // A run that left nothing (stopped listing, or before its first record) must
            // not say that what it converted stays.
            if !out.exists() {
                assert!(!err.contains("what it converted stays"), "{}", text(&o));
            }
            if err.contains("testdata/imagefolder") {
                assert!(err.contains("no file descriptor left"), "{}", text(&o));
                // Not 1: the inputs are sound, and --resume goes on (below).
                assert_eq!(o.status.code(), Some(3), "{}", text(&o));
                seen_fault = true;
                // What was converted stays: resumed with room, the dataset is whole.
                let o = stoker(&[&args[..], &["--resume"]].concat());
                assert!(o.status.success(), "{}", text(&o));
                let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                assert_eq!(r["written"], r["inputs"], "skipped {}", r["skipped"][0]);
            }
        }
    }
    assert!(
        seen_fault,
        "no run met the limit on a source file or folder"
    );
}

/// Out of file descriptors, `verify` reported a sound dataset's files as damaged.
#[test]
fn running_out_of_file_descriptors_stops_verify_without_blaming_the_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let o = stoker(&[
        "convert",
        SAMPLE,
        p(&ds),
        "--no-check",
        "--shard-size",
        "64K",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let mut stopped = false;
    for fds in 4..=8 {
        let o = under_descriptor_limit(fds, &["verify", p(&ds)]);
        let all = text(&o);
        if o.status.success() {
            assert!(all.contains("OK"), "{all}");
            continue;
        }
        assert!(!all.contains("BAD") && !all.contains("problem"), "{all}");
        assert!(all.contains("says nothing about the dataset"), "{all}");
        // Not 1, the status of a damaged dataset, on which a script restores a copy.
        assert_eq!(o.status.code(), Some(3), "{all}");
        stopped = true;
    }
    assert!(stopped, "no limit stopped verify");
}
