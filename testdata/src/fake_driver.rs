//! A stand-in NVIDIA driver library (`testdata/fake_driver/libcuda.c`) for the tests of
//! machines where `libcuda.so` loads but no GPU can be used: a container with the
//! driver's libraries and no device, the CUDA toolkit's stub library on the library path,
//! a GPU another process holds in exclusive mode; and one where the library that loads
//! lacks entry points stoker calls. The tests run a child process with [`env()`] in its
//! environment; the child's `dlopen("libcuda.so")` then finds this one.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the stand-in driver says, by the value of [`MODE_VAR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// `cuInit` fails with `CUDA_ERROR_NO_DEVICE`: the driver is installed, no GPU.
    NoDevice,
    /// Every call fails with `CUDA_ERROR_STUB_LIBRARY`: the toolkit's stub `libcuda.so`.
    Stub,
    /// One device whose context cannot be made (`CUDA_ERROR_DEVICES_UNAVAILABLE`): the
    /// driver reports a GPU that cannot be used.
    Busy,
    /// A library that lacks most entry points (a partial copy, a look-alike, a driver
    /// too old), whose `cuInit` would succeed: refused before any call.
    Incomplete,
}

impl Driver {
    pub const ALL: [Driver; 4] = [
        Driver::NoDevice,
        Driver::Stub,
        Driver::Busy,
        Driver::Incomplete,
    ];

    /// The value of [`MODE_VAR`] that selects this behaviour.
    pub fn name(self) -> &'static str {
        match self {
            Driver::NoDevice => "no-device",
            Driver::Stub => "stub",
            Driver::Busy => "busy",
            Driver::Incomplete => "incomplete",
        }
    }

    /// The driver's own text for the error this mode ends in, as a fallback reason or
    /// an error message should quote it.
    pub fn says(self) -> &'static str {
        match self {
            Driver::NoDevice => "no CUDA-capable device is detected",
            Driver::Stub => "CUDA driver is a stub library",
            Driver::Busy => "CUDA-capable device(s) is/are busy or unavailable",
            // stoker's words: this library is refused before the driver says anything.
            Driver::Incomplete => "lacks entry points stoker calls (cuDeviceGetAttribute,",
        }
    }

    /// The mode named `name`, for the child process.
    pub fn from_name(name: &str) -> Option<Driver> {
        Driver::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The mode this process runs under, when it is a child started with [`env()`].
    pub fn current() -> Option<Driver> {
        std::env::var(MODE_VAR)
            .ok()
            .and_then(|m| Driver::from_name(&m))
    }
}

/// The variable the stand-in reads its behaviour from.
pub const MODE_VAR: &str = "STOKER_FAKE_CUDA";

/// The folder under [`build`]'s `dir` that holds the incomplete library.
const INCOMPLETE_DIR: &str = "incomplete";

/// Compiles the stand-in with the system C compiler (`$CC`, else `cc`, the one Rust
/// links with) into `dir/libcuda.so`, and its incomplete build (for
/// [`Driver::Incomplete`]) into a folder under `dir`; returns `dir`.
///
/// # Panics
///
/// When the compiler cannot be run or fails: the tests that need it must not pass
/// without it.
pub fn build(dir: &Path) -> PathBuf {
    compile(&dir.join("libcuda.so"), &[]);
    let incomplete = dir.join(INCOMPLETE_DIR);
    std::fs::create_dir_all(&incomplete).expect("a folder for the incomplete stand-in");
    compile(
        &incomplete.join("libcuda.so"),
        &["-DSTOKER_FAKE_INCOMPLETE"],
    );
    dir.to_path_buf()
}

fn compile(out: &Path, defines: &[&str]) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("fake_driver/libcuda.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let run = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1"])
        .args(defines)
        .arg("-o")
        .arg(out)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("running {cc} to build the stand-in driver: {e}"));
    assert!(
        run.status.success(),
        "{cc} could not build {}: {}",
        source.display(),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// The variables a child process needs to load the stand-in from `dir` (see [`build`])
/// and behave as `driver`: `dir` first on `LD_LIBRARY_PATH`, and [`MODE_VAR`].
pub fn env(dir: &Path, driver: Driver) -> [(String, String); 2] {
    let lib = match driver {
        Driver::Incomplete => dir.join(INCOMPLETE_DIR),
        _ => dir.to_path_buf(),
    };
    let mut path = lib.display().to_string();
    if let Ok(rest) = std::env::var("LD_LIBRARY_PATH") {
        if !rest.is_empty() {
            path = format!("{path}:{rest}");
        }
    }
    [
        ("LD_LIBRARY_PATH".to_owned(), path),
        (MODE_VAR.to_owned(), driver.name().to_owned()),
    ]
}
