//! For tests that check the workspace's own code for calls into the CUDA driver that
//! would panic on some drivers: every Rust file under the given folders, with its text.

use std::path::{Path, PathBuf};

/// Each `.rs` file under the workspace folders `dirs` (relative to the workspace root;
/// one that does not exist is skipped), with its text.
pub(super) fn rust_sources(dirs: &[&str]) -> Vec<(PathBuf, String)> {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in dirs {
        walk(&root.join(dir), &mut files);
    }
    files
}

/// The workspace the test was built in, or else the working directory: a test executable
/// carried to the GPU machine runs there from the root of a copy of the tree at another
/// path (`scripts/device-check.sh`), where the path compiled in does not exist.
fn workspace_root() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let here = PathBuf::from(".");
    if !built.join("loader/src/gpu").is_dir() && here.join("loader/src/gpu").is_dir() {
        return here;
    }
    built
}

fn walk(dir: &Path, files: &mut Vec<(PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            files.push((p, text));
        }
    }
}
