//! Regression tests for where results leave the `stoker` binary: float options that are no
//! `Duration` (`bench --seconds 1e300` panicked), stdout that cannot be written (`decode` and
//! `bench` panicked on /dev/full and on a closed pipe), and `decode -o` on a full disk
//! (it left a truncated PNG at the final name and clobbered the previous file first), and
//! `decode -o` through a symlink, to a FIFO or /dev/stdout (it replaced the link or device
//! node with a file of mode 0600).
// They run the `stoker` binary, built with the `cli` feature only.
#![cfg(feature = "cli")]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{p, run_within, text, LIMIT, SAMPLE, STOKER};

const PHOTO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/data/sample/caer/tent.jpg"
);

/// `stoker args` run by `sh -c script`, the binary and its arguments as `"$0" "$@"`.
fn stoker_in_shell(shell: &str, script: &str, args: &[&str]) -> Output {
    let mut c = Command::new(shell);
    c.arg("-c").arg(script).arg(STOKER).args(args);
    run_within(c, LIMIT)
}

/// `stoker args` with stdout on /dev/full, where every write fails with ENOSPC.
fn into_dev_full(args: &[&str]) -> Output {
    stoker_in_shell("sh", r#"exec "$0" "$@" >/dev/full"#, args)
}

/// `stoker args` writing into a pipe whose reader has already gone: the shell fills the pipe
/// until a write fails (SIGPIPE ignored, so it gets EPIPE) and only then starts stoker, so
/// its first write meets a closed pipe whatever the timing. bash exits with stoker's status.
fn into_closed_pipe(args: &[&str]) -> Output {
    stoker_in_shell(
        "bash",
        r#"{ trap '' PIPE; while printf x 2>/dev/null; do :; done; exec "$0" "$@"; } | true; exit "${PIPESTATUS[0]}""#,
        args,
    )
}

fn assert_no_panic(o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() != Some(101) && !err.contains("panicked"),
        "{}",
        text(o)
    );
}

/// The bundled sample converted into `dir/ds`.
fn sample_dataset(dir: &Path) -> std::path::PathBuf {
    let ds = dir.join("ds");
    let o = common::stoker_within(&["convert", SAMPLE, p(&ds), "--no-check"], LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    ds
}

/// A quick CPU bench of `ds`, with `extra` flags.
fn bench_args<'a>(ds: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "bench",
        p(ds),
        "--device",
        "cpu",
        "--seconds",
        "0.1",
        "--batch",
        "4",
        "--size",
        "32",
    ];
    v.extend_from_slice(extra);
    v
}

#[test]
fn bench_durations_past_a_day_are_refused_when_parsed_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    for (flag, value) in [
        ("--seconds", "1e300"),
        ("--seconds", "90000"),
        ("--consumer-ms", "1e300"),
        ("--consumer-ms", "1e20"),
        ("--seconds", "inf"),
    ] {
        let mut args = vec![
            "bench",
            p(&ds),
            "--device",
            "cpu",
            "--batch",
            "4",
            "--size",
            "32",
            flag,
            value,
        ];
        if flag != "--seconds" {
            args.extend(["--seconds", "0.1"]);
        }
        let o = common::stoker_within(&args, LIMIT);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(flag) && (err.contains("one day") || err.contains("want a number")),
            "{flag} {value}: {}",
            text(&o)
        );
    }
}

#[test]
fn results_on_a_full_stdout_are_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let runs: Vec<Vec<&str>> = vec![
        vec!["decode", PHOTO, "--backend", "cpu"],
        vec!["decode", PHOTO, "--backend", "cpu", "--json"],
        bench_args(&ds, &[]),
        bench_args(&ds, &["--json"]),
        vec!["inspect", p(&ds)],
        vec!["verify", p(&ds)],
    ];
    for args in runs {
        let o = into_dev_full(&args);
        assert_no_panic(&o);
        // A full disk is no fault of the inputs: 3, run again (1 told a script that
        // checks a copy with `verify` to restore a sound one).
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("No space left on device"),
            "{args:?}: {}",
            text(&o)
        );
    }
}

#[test]
fn a_closed_pipe_ends_quietly_with_the_sigpipe_status() {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let runs: Vec<Vec<&str>> = vec![
        vec!["decode", PHOTO, "--backend", "cpu"],
        bench_args(&ds, &[]),
        vec!["inspect", p(&ds)],
    ];
    for args in runs {
        let o = into_closed_pipe(&args);
        assert_no_panic(&o);
        // 128 + SIGPIPE, as a shell reports for a C tool the signal ended; no message.
        assert_eq!(o.status.code(), Some(141), "{args:?}: {}", text(&o));
        assert!(o.stderr.is_empty(), "{args:?}: {}", text(&o));
    }
    // A PNG on stdout (its report goes to stderr): png wraps the broken pipe in its own
    // error, which ended in "writing PNG data: Broken pipe" and status 1.
    let o = into_closed_pipe(&["decode", PHOTO, "--backend", "cpu", "-o", "-"]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(141), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("error"),
        "{}",
        text(&o)
    );
}

/// `stoker decode PHOTO -o out` under a 10 KiB file size limit (the CLI ignores SIGXFSZ, so
/// the write fails with EFBIG as on a full disk): the PNG is larger, so its write fails.
fn decode_to_png_with_a_small_file_limit(out: &Path) -> Output {
    stoker_in_shell(
        "sh",
        // sh counts 512-byte blocks.
        r#"trap - XFSZ; ulimit -f 20; exec "$0" "$@""#,
        &["decode", PHOTO, "--backend", "cpu", "-o", p(out)],
    )
}

#[test]
fn decode_output_png_on_a_full_disk_keeps_the_old_file_and_leaves_no_partial_one() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("out.png");

    // No earlier file: nothing at all is left.
    let o = decode_to_png_with_a_small_file_limit(&png);
    assert_no_panic(&o);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        stoker_testdata::names_in(dir.path()).is_empty(),
        "{:?}",
        stoker_testdata::names_in(dir.path())
    );

    // An earlier file: still there, byte for byte.
    std::fs::write(&png, b"the previous image").unwrap();
    let o = decode_to_png_with_a_small_file_limit(&png);
    assert_no_panic(&o);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("out.png"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(&png).unwrap(), b"the previous image");
    assert_eq!(stoker_testdata::names_in(dir.path()), ["out.png"]);

    // Without the limit the PNG replaces it whole, and no temporary file stays behind.
    let o = common::stoker_within(&["decode", PHOTO, "--backend", "cpu", "-o", p(&png)], LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    let written = std::fs::read(&png).unwrap();
    assert!(written.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(written.len() > 10 * 1024);
    assert_eq!(stoker_testdata::names_in(dir.path()), ["out.png"]);
}

#[test]
fn decode_output_stopped_by_a_signal_leaves_no_temporary_file() {
    // `timeout` or Ctrl-C in a retry loop: each stop left a `.out.png*.stoker.tmp` (48
    // after 60 runs), since a signal ends the process without destructors.
    let big = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/imagefolder/opencv/data_aloeL.jpg"
    );
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("out.png");
    let (mut stopped, mut with_temp) = (0, 0);
    for round in 0..40u64 {
        let mut child = Command::new(STOKER)
            .args(["decode", big, "--backend", "cpu", "-o", p(&png)])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Stop it at a different point of each run: while decoding, writing or renaming.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(5 + round * 8);
        while std::time::Instant::now() < until {
            let names = stoker_testdata::names_in(dir.path());
            if names.iter().any(|n| n.ends_with(".stoker.tmp")) {
                with_temp += 1;
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        let signal = [libc_sig::INT, libc_sig::TERM, libc_sig::HUP][round as usize % 3];
        let _ = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status();
        let status = child.wait().unwrap();
        if status.success() {
            // Finished first: a whole PNG.
            assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        } else {
            use std::os::unix::process::ExitStatusExt;
            assert!(status.signal().is_some(), "round {round}: {status:?}");
            stopped += 1;
        }
        let names = stoker_testdata::names_in(dir.path());
        assert!(
            names.iter().all(|n| n == "out.png"),
            "round {round} ({status:?}): {names:?}"
        );
    }
    // The stops did land while the temporary file existed.
    assert!(
        stopped >= 10 && with_temp >= 5,
        "{stopped} stopped, {with_temp} with a temporary file"
    );
}

/// Whether process `pid` has a handler for signal `sig` (its `SigCgt` mask in
/// /proc/PID/status), `None` while that cannot be read.
fn catches(pid: u32, sig: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
    let mask = u64::from_str_radix(mask.trim(), 16).ok()?;
    Some(mask & (1 << (sig - 1)) != 0)
}

#[test]
fn every_subcommand_stops_on_sigterm_also_as_process_1() {
    // As process 1 of a container (`exec stoker convert` in a pod, as in
    // examples/cluster/convert-job.yaml) the kernel drops a signal left at its default
    // action: `stoker convert` ignored SIGTERM and ran on until SIGKILL ended the grace
    // period. A handler makes the stop land there too; this checks the handler (a
    // long-running bench, not a `decode -o`, which had one already) and that the stop
    // still ends the process by SIGTERM. (Running it as process 1 needs a PID namespace,
    // which CI cannot count on.)
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let o = common::stoker_within(&["convert", SAMPLE, p(&ds)], LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    let mut child = Command::new(STOKER)
        .args(["bench", p(&ds), "--device", "cpu", "--seconds", "30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut caught = None;
    while std::time::Instant::now() < deadline {
        caught = catches(child.id(), 15);
        if caught == Some(true) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert_eq!(caught, Some(true), "stoker bench has no SIGTERM handler");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "{status:?}");
}

/// Signal names for `kill -NAME`.
mod libc_sig {
    pub const INT: &str = "INT";
    pub const TERM: &str = "TERM";
    pub const HUP: &str = "HUP";
}

/// Decodes PHOTO into `out` with `umask`, returning the output.
fn decode_with_umask(umask: &str, out: &Path) -> Output {
    stoker_in_shell(
        "sh",
        &format!(r#"umask {umask}; exec "$0" "$@""#),
        &["decode", PHOTO, "--backend", "cpu", "-o", p(out)],
    )
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn decode_output_writes_through_symlinks_and_keeps_modes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let is_png = |path: &Path| {
        std::fs::read(path)
            .unwrap()
            .starts_with(b"\x89PNG\r\n\x1a\n")
    };

    // A new file gets 0666 less the umask, as any created file does (it was always 0600).
    let new = dir.path().join("new.png");
    let o = decode_with_umask("022", &new);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(mode(&new), 0o644);
    // A replaced file keeps its mode, whatever the umask.
    std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o640)).unwrap();
    let o = decode_with_umask("077", &new);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(mode(&new), 0o640);
    assert!(is_png(&new));

    // A symlink stays a symlink; the PNG lands in its target.
    let target = dir.path().join("target.png");
    std::fs::write(&target, b"old").unwrap();
    let link = dir.path().join("link.png");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = decode_with_umask("022", &link);
    assert!(o.status.success(), "{}", text(&o));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(is_png(&target));

    // A symlink to the process's stdout (what /dev/stdout is): the PNG goes down the pipe.
    let so = dir.path().join("so");
    std::os::unix::fs::symlink("/proc/self/fd/1", &so).unwrap();
    let o = decode_with_umask("022", &so);
    assert!(o.status.success(), "{}", text(&o));
    assert!(std::fs::symlink_metadata(&so)
        .unwrap()
        .file_type()
        .is_symlink());
    let png_at = o.stdout.windows(8).position(|w| w == b"\x89PNG\r\n\x1a\n");
    assert!(png_at.is_some(), "no PNG on stdout: {}", text(&o));
    let o = decode_with_umask("022", Path::new("/dev/stdout"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stdout.windows(4).any(|w| w == b"IEND"), "{}", text(&o));

    // A FIFO is written into, not replaced by a file.
    let fifo = dir.path().join("fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = decode_with_umask("022", &fifo);
    assert!(o.status.success(), "{}", text(&o));
    let got = reader.join().unwrap();
    assert!(got.starts_with(b"\x89PNG\r\n\x1a\n"), "{} bytes", got.len());
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(
        stoker_testdata::names_in(dir.path()).len(),
        5,
        "{:?}",
        stoker_testdata::names_in(dir.path())
    );
}

/// The width and height of the PNG `bytes`, which must hold one whole image and nothing
/// after it.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    let mut r = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG header");
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).expect("the PNG's pixels");
    r.finish().expect("the PNG's end");
    assert!(
        bytes.ends_with(b"IEND\xae\x42\x60\x82"),
        "bytes after the PNG"
    );
    (info.width, info.height)
}

#[test]
fn decode_png_on_stdout_carries_the_png_alone_and_the_report_on_stderr() {
    // `-o /dev/stdout | cat > x.png` got the report's lines before and after the image.
    for out in ["/dev/stdout", "/proc/self/fd/1", "/dev/fd/1", "-"] {
        for json in [false, true] {
            let mut args = vec!["decode", PHOTO, "--backend", "cpu", "-o", out];
            if json {
                args.push("--json");
            }
            let o = common::stoker_within(&args, LIMIT);
            assert!(o.status.success(), "{args:?}: {}", text(&o));
            let (w, h) = png_size(&o.stdout);
            assert!(w > 0 && h > 0);
            let err = String::from_utf8_lossy(&o.stderr);
            let report = if json {
                "\"route\": \"cpu-"
            } else {
                "decoded      yes"
            };
            assert!(err.contains(report), "{args:?}: {}", text(&o));
        }
    }
    // `-o -` is stdout, not a file named `-`; `./-` still names one.
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(STOKER);
    c.current_dir(dir.path())
        .args(["decode", PHOTO, "--backend", "cpu", "-o", "-"]);
    let o = run_within(c, LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stoker_testdata::names_in(dir.path()).is_empty(),
        "{:?}",
        stoker_testdata::names_in(dir.path())
    );
    let mut c = Command::new(STOKER);
    c.current_dir(dir.path())
        .args(["decode", PHOTO, "--backend", "cpu", "-o", "./-"]);
    let o = run_within(c, LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("decoded      yes"));
    png_size(&std::fs::read(dir.path().join("-")).unwrap());

    // Stdout redirected to the very file named by -o: the file ends up the PNG alone.
    let png = dir.path().join("same.png");
    let o = stoker_in_shell(
        "sh",
        r#"out=$1; shift; exec "$0" "$@" -o "$out" >"$out""#,
        &[p(&png), "decode", PHOTO, "--backend", "cpu"],
    );
    assert!(o.status.success(), "{}", text(&o));
    png_size(&std::fs::read(&png).unwrap());
    assert!(String::from_utf8_lossy(&o.stderr).contains("decoded      yes"));
}

#[test]
fn a_full_stdout_is_named_as_stdout_also_after_help_and_a_finished_conversion() {
    // "No space left on device" alone, after a conversion that succeeded, read as if the
    // dataset's disk were full; `--help` into /dev/full exited 0 having printed nothing.
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let runs: [&[&str]; 5] = [
        &["--help"],
        &["--version"],
        &["convert", "--help"],
        &["convert", SAMPLE, p(&ds), "--no-check", "-q"],
        &["inspect", p(&ds)],
    ];
    for args in runs {
        let o = into_dev_full(args);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("writing to stdout: No space left on device"),
            "{args:?}: {}",
            text(&o)
        );
    }
    // Only the report was lost: the dataset is there, whole.
    let o = common::stoker_within(&["verify", p(&ds)], LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    // A closed pipe after --help still ends quietly.
    let o = into_closed_pipe(&["--help"]);
    assert_eq!(o.status.code(), Some(141), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
}

#[test]
fn decode_refuses_an_output_that_is_its_input_a_directory_or_below_a_file() {
    // `-o photo.jpg photo.jpg` replaced the JPEG with its PNG; a directory said "renaming
    // into DIR: Is a directory", and a path below a file "reading f/x.png: Not a directory",
    // both after the whole report.
    let dir = tempfile::tempdir().unwrap();
    let jpeg = dir.path().join("photo.jpg");
    std::fs::copy(PHOTO, &jpeg).unwrap();
    let original = std::fs::read(&jpeg).unwrap();
    let link = dir.path().join("link.jpg");
    std::os::unix::fs::symlink(&jpeg, &link).unwrap();
    let hard = dir.path().join("hard.jpg");
    std::fs::hard_link(&jpeg, &hard).unwrap();
    let cases = [
        (jpeg.clone(), "is the input file"),
        (link, "is the input file"),
        (hard, "is the input file"),
        (dir.path().to_path_buf(), "is a directory"),
        (jpeg.join("x.png"), "is a file, not a directory"),
        (jpeg.join("a/x.png"), "is a file, not a directory"),
        // Found after the decode and its report before.
        (dir.path().join("no-such/x.png"), "the folder"),
    ];
    for (out, said) in cases {
        let args = ["decode", p(&jpeg), "--backend", "cpu", "-o", p(&out)];
        let o = common::stoker_within(&args, LIMIT);
        assert_eq!(o.status.code(), Some(1), "{out:?}: {}", text(&o));
        assert!(
            o.stdout.is_empty(),
            "{out:?}: refused after the report: {}",
            text(&o)
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(said),
            "{out:?}: {}",
            text(&o)
        );
        assert_eq!(std::fs::read(&jpeg).unwrap(), original, "{out:?}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 3, "a temporary file stayed: {left:?}");
}

#[test]
fn decode_json_of_a_file_whose_name_is_not_utf8_names_it_with_escapes() {
    // `json!` of the path panicked (status 101).
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let jpeg = dir.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9.jpg"));
    std::fs::copy(PHOTO, &jpeg).unwrap();
    let mut c = Command::new(STOKER);
    c.args(["decode", "--backend", "cpu", "--json"]).arg(&jpeg);
    let o = run_within(c, LIMIT);
    assert_no_panic(&o);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let file = v["file"].as_str().unwrap();
    assert!(file.ends_with("caf\\xe9.jpg"), "{file}");
}

#[test]
fn paths_print_without_loss_and_on_one_line_in_results_and_errors() {
    // A dataset named `out\xff` + newline + `X`: `.display()` printed `out\u{fffd}`, then
    // a line `X` of its own (the convert summary, verify, inspect, the error line).
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join(std::ffi::OsStr::from_bytes(b"out\xff\nX"));
    let escaped = "out\\xff\\x0aX";
    let run = |args: &[&str], ds: &Path| {
        let mut c = Command::new(STOKER);
        c.args(args).arg(ds);
        run_within(c, LIMIT)
    };
    let checks = [
        (run(&["convert", "--no-check", SAMPLE], &ds), "output: "),
        (run(&["verify"], &ds), ""),
        (run(&["inspect"], &ds), "dataset: "),
    ];
    for (o, prefix) in &checks {
        assert!(o.status.success(), "{}", text(o));
        let out = String::from_utf8(o.stdout.clone()).unwrap();
        let want = format!("{prefix}{}", dir.path().join(escaped).display());
        assert!(
            out.lines().any(|l| l.starts_with(&want)),
            "no line starts with {want:?}:\n{out}"
        );
        assert!(
            !out.contains('\u{fffd}') && !out.lines().any(|l| l == "X"),
            "{out}"
        );
    }
    let gone = dir.path().join(std::ffi::OsStr::from_bytes(b"gone\xff\nX"));
    let o = run(&["verify"], &gone);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8(o.stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("gone\\xff\\x0aX: "), "{err}");
}

#[test]
fn inspect_keeps_class_names_and_the_source_to_one_line() {
    // A class folder named `c` + newline + `per class: forged` printed a line of its own
    // in the per-class line, `made by: ... from SRC` and `--record N`'s label line.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src\nmade by: forged");
    let class = src.join("c\nper class: forged");
    std::fs::create_dir_all(&class).unwrap();
    std::fs::copy(PHOTO, class.join("x.jpg")).unwrap();
    let ds = dir.path().join("ds");
    let o = common::stoker_within(&["convert", "--no-check", p(&src), p(&ds)], LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    for args in [
        vec!["inspect", p(&ds)],
        vec!["inspect", p(&ds), "--record", "0"],
    ] {
        let o = common::stoker_within(&args, LIMIT);
        assert!(o.status.success(), "{}", text(&o));
        let out = String::from_utf8(o.stdout.clone()).unwrap();
        assert!(
            !out.lines()
                .any(|l| l.starts_with("per class: forged") || l.starts_with("made by: forged")),
            "{out}"
        );
        assert!(out.contains("c\\x0aper class: forged"), "{out}");
    }
}

#[test]
fn inspect_says_a_source_map_the_manifest_names_is_missing() {
    // It announced "source map: sources.bin (record N's input: ...)" with the file gone,
    // and `--record N` then failed on it.
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let map = ds.join("sources.bin");
    let good = std::fs::read(&map).unwrap();
    std::fs::remove_file(&map).unwrap();
    let o = common::stoker_within(&["inspect", p(&ds)], LIMIT);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("source map: unusable: ")
            && out
                .contains("sources.bin: damaged source map: missing, though the manifest names it"),
        "{}",
        text(&o)
    );
    // And in --json, which said nothing of the map; a damaged header too (it was
    // announced as usable).
    let j: serde_json::Value = serde_json::from_slice(
        &common::stoker_within(&["inspect", p(&ds), "--json"], LIMIT).stdout,
    )
    .unwrap();
    assert_eq!(j["source_map"], "sources.bin");
    assert!(
        j["source_map_problem"]
            .as_str()
            .unwrap()
            .contains("missing"),
        "{j}"
    );
    let mut bad = good.clone();
    bad[8] ^= 0xff;
    std::fs::write(&map, bad).unwrap();
    let o = common::stoker_within(&["inspect", p(&ds)], LIMIT);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("source map: unusable: "),
        "{}",
        text(&o)
    );
    std::fs::write(&map, good).unwrap();
    let j: serde_json::Value = serde_json::from_slice(
        &common::stoker_within(&["inspect", p(&ds), "--json"], LIMIT).stdout,
    )
    .unwrap();
    assert_eq!(j["source_map_problem"], serde_json::Value::Null);
}

/// A PNG asked for on a terminal is a usage error (exit 2, with clap's usage line): it
/// exited 1, the status of an image that does not decode. The terminal comes from
/// util-linux's `script`, which runs the command on a pseudo-terminal.
#[test]
fn decode_png_to_a_terminal_is_a_usage_error() {
    let command = format!("'{STOKER}' decode '{PHOTO}' --backend cpu -o -");
    let mut c = Command::new("script");
    c.args(["-eqc", &command, "/dev/null"]);
    let o = run_within(c, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("stdout is a terminal") && said.contains("Usage:"),
        "{said}"
    );
}
