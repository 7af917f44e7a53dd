//! Helpers the CLI integration tests share: running the built `stoker` binary with a time
//! limit, printing its output on failure, and reading a dataset directory for comparison.
//! Each test file uses some of them.
#![allow(dead_code)]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use stoker::formats::{Encoding, RecordMeta};

/// The binary under test.
pub const STOKER: &str = env!("CARGO_BIN_EXE_stoker");
/// The photos every CLI test converts (the repository's `examples/data/sample`).
pub const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/sample");
/// How long one `stoker` command may take before the test calls it a hang.
pub const LIMIT: Duration = Duration::from_secs(120);

/// Runs `cmd` to the end and returns its output. A hang (over `limit`: the process is
/// killed) or a death by signal fails the test.
pub fn run_within(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .env_remove("STOKER_TEST_FAIL_AFTER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(limit) {
        Ok(out) => out.expect("the command ran"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &id.to_string()]).status();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
    };
    assert!(
        out.status.signal().is_none(),
        "{cmd:?} died of a signal: {}",
        text(&out)
    );
    out
}

/// `stoker args`, through [`run_within`] with `limit`.
pub fn stoker_within(args: &[&str], limit: Duration) -> Output {
    let mut c = Command::new(STOKER);
    c.args(args);
    run_within(c, limit)
}

/// Exit status, stdout and stderr, for failure messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `path` as a command-line argument.
pub fn p(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// Every photo of [`SAMPLE`] (its three class folders), in path order.
pub fn sample_photos() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ["caer", "leptonica", "opencv"]
        .iter()
        .flat_map(|c| std::fs::read_dir(Path::new(SAMPLE).join(c)).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// The record fields of the JPEG `data` stored unchanged: its size from its header.
pub fn jpeg_meta(data: &[u8], label: u32) -> RecordMeta {
    let info = stoker::decode::probe(data, &stoker::decode::Limits::default()).unwrap();
    RecordMeta {
        encoding: Encoding::Jpeg,
        height: info.height,
        width: info.width,
        channels: 3,
        label,
    }
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// `bash -c "ulimit -u LIMIT && exec COMMAND"`: at most `limit` processes and threads. A
/// process limit counts every process of the user and does not hold root back, so as
/// root it runs as nobody (setpriv, util-linux), where the limit is this run's alone, and
/// `dir`, what it reads and writes, is handed to nobody first.
pub fn under_process_limit(limit: u32, command: &str, dir: &Path) -> Command {
    let script = format!("ulimit -u {limit} && exec {command}");
    if !is_root() {
        let mut c = Command::new("bash");
        c.args(["-c", &script]);
        return c;
    }
    let chown = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(chown.success());
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "bash",
        "-c",
        &script,
    ]);
    c
}
