//! # Overview
//!
//! Where stoker's tests, benches and examples find their data, all of it inside the
//! repository (`testdata/`, origin and licence of every file in `testdata/README.md`):
//!
//! - [`dir`]: the corpus root: `imagefolder/` (164 photographs, one folder per source
//!   package) and `conformance/` (JPEG edge cases, reference decodes, `expectations.tsv`).
//! - [`bench_dir`]: the bench set, 512 JPEGs of 500×375 (quality 90, baseline 4:2:0),
//!   derived deterministically from the photographs the first time it is asked for
//!   ([`make_bench_set`]) and kept under `target/`, so that 24 MB of crops need not be
//!   checked in.
//! - [`make_mixed_set`]: sets that look like real training data to a decoder (mixed
//!   sizes, a quarter progressive, some grayscale and CMYK) and their all-baseline twins of
//!   the same sizes, for the GPU machine's mixed-data figures (`make-mixed-set`).
//! - [`gpu_skip`]: the one line a GPU test prints when it finds no GPU, which
//!   `scripts/device-check.sh` treats as a failure on the GPU machine.
//! - [`heap`]: a counting allocator for the tests and benches that measure heap use.
//! - [`other_format_samples`]: small PNG, GIF, BMP, TIFF, WebP and PPM/PGM/PAM images, made
//!   by the `image` crate's encoders, for the tests that damage them.
//!   [`png_from_chunks`], [`png_crc`] and [`zeros_zlib`]: PNG files no encoder writes.
//! - [`fake_driver`]: a stand-in `libcuda.so` for machines where the driver loads and no
//!   GPU can be used (no device, the toolkit's stub, a busy GPU).
//! - [`child::run_test`]: a test run again in a child process; [`copy_tree`],
//!   [`names_in`], [`files_in`] and [`image_folder_listing`]: small file-tree helpers of
//!   the tests.
//!
//! `STOKER_DATA` and `STOKER_BENCH_DIR` override the two folders (the GPU machine gets a
//! copy of both, see `scripts/device-prepare.sh`).
//!
//! ```
//! let photos = stoker_testdata::dir().join("imagefolder");
//! assert!(photos.join("ORIGIN.tsv").is_file());
//! ```

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod bench_set;
pub mod child;
pub mod fake_driver;
pub mod heap;
mod image_formats;
mod mixed_set;

pub use bench_set::{make_bench_set, BenchSetError, BENCH_FILES, BENCH_HEIGHT, BENCH_WIDTH};
pub use image_formats::{other_format_samples, png_crc, png_from_chunks, zeros_zlib};
pub use mixed_set::{make_mixed_set, plan_file, FilePlan, Kind, Mix, MIXED_FILES, MIXED_VERSION};

/// Every file directly in `dir`, by name, with its bytes: two conversions (or an
/// interrupted one resumed, and a clean one) are equal when these are.
///
/// # Panics
///
/// When `dir` or a file in it cannot be read: a test's own output should be there.
pub fn files_in(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

/// The names of the entries directly in `dir`, sorted.
///
/// # Panics
///
/// When `dir` cannot be read.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// An image folder's classes (its sub-folders, sorted) and files (each class's, sorted,
/// with the class's position as label): the order `convert` lists an ImageFolder in.
///
/// # Panics
///
/// When a folder cannot be read.
pub fn image_folder_listing(root: &Path) -> (Vec<String>, Vec<(PathBuf, u32)>) {
    let sorted = |d: &Path| {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .unwrap_or_else(|e| panic!("reading {}: {e}", d.display()))
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    };
    let dirs: Vec<PathBuf> = sorted(root).into_iter().filter(|p| p.is_dir()).collect();
    let names = dirs
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut files = Vec::new();
    for (label, d) in dirs.iter().enumerate() {
        files.extend(sorted(d).into_iter().map(|f| (f, label as u32)));
    }
    (names, files)
}

/// Copies a tree of folders of files (an image folder: one level of class folders) from
/// `from` to `to`, creating `to`.
///
/// # Panics
///
/// When a file cannot be read or written.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    for entry in
        std::fs::read_dir(from).unwrap_or_else(|e| panic!("reading {}: {e}", from.display()))
    {
        let path = entry.unwrap().path();
        let dst = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &dst);
        } else {
            std::fs::copy(&path, &dst)
                .unwrap_or_else(|e| panic!("copying {}: {e}", path.display()));
        }
    }
}

/// The corpus root: `$STOKER_DATA` when set, else `<repo>/testdata`.
pub fn dir() -> PathBuf {
    std::env::var_os("STOKER_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The bench set's folder (`00000.jpg` … `00511.jpg`): `$STOKER_BENCH_DIR` when set, else
/// the set derived from the photographs under `<repo>/target/stoker-testdata/`, made on
/// the first call of any process and reused after.
///
/// # Panics
///
/// When the set cannot be made (the photographs are missing, the disk is full): a test
/// without its data should fail loudly, not pass.
pub fn bench_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("STOKER_BENCH_DIR") {
        return PathBuf::from(dir);
    }
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/stoker-testdata");
        let dir = root.join(format!("bench-v{}", bench_set::VERSION));
        make_bench_set(&crate::dir().join("imagefolder"), &dir)
            .unwrap_or_else(|e| panic!("making the bench set in {}: {e}", dir.display()));
        dir
    })
    .clone()
}

/// The first `n` files of the bench set, in order.
///
/// # Panics
///
/// As [`bench_dir`], or when `n` exceeds [`BENCH_FILES`].
pub fn bench_files(n: usize) -> Vec<PathBuf> {
    assert!(
        n <= BENCH_FILES,
        "the bench set has {BENCH_FILES} files, {n} asked"
    );
    let dir = bench_dir();
    (0..n).map(|i| dir.join(format!("{i:05}.jpg"))).collect()
}

/// The prefix of the line a GPU test prints when it finds no usable GPU. On a machine
/// without one the test then returns (CI has no GPU); on the GPU machine
/// `scripts/device-check.sh` searches the test logs for this prefix and fails the run if
/// any test skipped.
pub const GPU_SKIP_PREFIX: &str = "STOKER-GPU-SKIP";

/// Prints the skip line of the calling test (`STOKER-GPU-SKIP <test>: <reason>`), one
/// format for every GPU test. The test is named by its thread (libtest names each test's
/// thread after it).
pub fn gpu_skip(reason: impl Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("unnamed test");
    println!("{GPU_SKIP_PREFIX} {test}: {reason}");
}

/// An in-memory writer whose clones share one buffer: give one to a log subscriber
/// (`tracing_subscriber::fmt().with_writer(move || lines.clone())`) and read what it
/// wrote with [`Captured::text`].
#[derive(Clone, Default)]
pub struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
