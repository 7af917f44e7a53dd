//! Finding and opening the nvJPEG shared library: the search order, the
//! process-wide cache, and the resolved function tables.

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::error::LoadError;
use super::sys;

/// The loaded nvJPEG library: its function table, where it came from, its version.
///
/// # Examples
/// ```
/// match stoker_decode::nvjpeg::NvJpeg::load() {
///     Ok(lib) => println!("nvJPEG {:?} from {}", lib.version(), lib.path().display()),
///     Err(e) => println!("CPU only: {e}"),
/// }
/// ```
pub struct NvJpeg {
    /// Functions that may be absent; their pointers live in the library `table` keeps mapped.
    optional: sys::OptionalTable,
    table: sys::Table,
    path: PathBuf,
    version: (i32, i32, i32),
}

impl std::fmt::Debug for NvJpeg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvJpeg")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("optional", &self.optional.present())
            .finish_non_exhaustive()
    }
}

/// Where a CUDA toolkit keeps this architecture's libraries, under its root. An ARM
/// server (Grace Hopper, Grace Blackwell) installs them under `sbsa-linux`, a Jetson
/// under `aarch64-linux`; only `x86_64-linux` would miss both.
pub const TOOLKIT_TARGET_DIRS: &[&str] = if cfg!(target_arch = "x86_64") {
    &["targets/x86_64-linux/lib"]
} else if cfg!(target_arch = "aarch64") {
    &["targets/sbsa-linux/lib", "targets/aarch64-linux/lib"]
} else {
    &[]
};

static LOADED: OnceLock<Result<NvJpeg, LoadError>> = OnceLock::new();

impl NvJpeg {
    /// Opens nvJPEG once per process (cached) and resolves every symbol.
    /// Optional symbols ([`optional_symbols`](Self::optional_symbols)) that
    /// the library lacks are left out without failing the load.
    ///
    /// Search order, first hit wins:
    /// 1. `$STOKER_NVJPEG`, a path to the library (an explicit choice beats everything);
    /// 2. `libnvjpeg.so.13` then `libnvjpeg.so.12` through the system loader
    ///    (`LD_LIBRARY_PATH`, ld.so cache): CUDA 13 first, since cudarc is built for it;
    /// 3. `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`, each under `lib64` and this
    ///    machine's `targets/…/lib` ([`TOOLKIT_TARGET_DIRS`]; toolkit installs not on the
    ///    loader path);
    /// 4. Python wheels: `nvidia/cu13/lib` (nvidia-nvjpeg-cu13) and
    ///    `nvidia/nvjpeg/lib` (nvidia-nvjpeg-cu12) under every `site-packages` /
    ///    `dist-packages` found from `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `$PYTHONPATH`,
    ///    `~/.local` and the system prefixes (a torch install brings these).
    ///
    /// Loading needs no GPU; creating a decoder does.
    ///
    /// # Errors
    /// [`LoadError::NotFound`] listing every candidate and why it failed, or
    /// [`LoadError::MissingSymbol`] when a library opened but is too old.
    pub fn load() -> Result<&'static NvJpeg, LoadError> {
        LOADED
            // SAFETY: the candidates are nvJPEG's names and install places, and the
            // library named by $STOKER_NVJPEG, which whoever sets it vouches for.
            .get_or_init(|| unsafe { Self::load_from(&Self::candidates()) })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Opens the first of `candidates` that loads (not cached).
    ///
    /// # Errors
    /// As [`load`](Self::load).
    ///
    /// # Safety
    /// Each path that loads must be an nvJPEG library: its initializers run, and the
    /// symbols found under nvJPEG's names are called with nvjpeg.h's signatures. Another
    /// library exporting those names would be called with the wrong types.
    pub unsafe fn load_from(candidates: &[PathBuf]) -> Result<NvJpeg, LoadError> {
        let mut tried = Vec::new();
        for path in candidates {
            // SAFETY: opening a shared library runs its initializers; nvJPEG's
            // are side-effect free apart from registering with the CUDA runtime.
            match unsafe { libloading::Library::new(path) } {
                Ok(lib) => {
                    // SAFETY: the library is nvJPEG (the caller's promise) and the
                    // optional table's signatures are those of nvjpeg.h; `lib` moves into
                    // `table` below, which `NvJpeg` keeps beside `optional`.
                    let optional = unsafe { sys::OptionalTable::resolve(&lib) };
                    // SAFETY: the library is nvJPEG (the caller's promise) and the
                    // table's signatures are those of nvjpeg.h.
                    let table = unsafe { sys::Table::resolve(lib, path) }?;
                    let prop = |which: c_int| {
                        let mut v: c_int = -1;
                        // SAFETY: nvjpegGetProperty only writes the out pointer.
                        unsafe { (table.nvjpegGetProperty)(which, &mut v) };
                        v
                    };
                    let version = (
                        prop(sys::MAJOR_VERSION),
                        prop(sys::MINOR_VERSION),
                        prop(sys::PATCH_LEVEL),
                    );
                    return Ok(NvJpeg {
                        optional,
                        table,
                        path: path.clone(),
                        version,
                    });
                }
                Err(e) => {
                    // libloading's Display is terse ("dlopen failed"); the dlerror
                    // text is in its source.
                    let why = std::error::Error::source(&e)
                        .map_or_else(|| e.to_string(), |s| s.to_string());
                    tried.push((path.clone(), why));
                }
            }
        }
        Err(LoadError::NotFound { tried })
    }

    /// The candidate list of [`load`](Self::load), in order.
    ///
    /// # Examples
    /// ```
    /// let c = stoker_decode::nvjpeg::NvJpeg::candidates();
    /// assert!(c.iter().any(|p| p.as_os_str() == "libnvjpeg.so.13"));
    /// ```
    pub fn candidates() -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Some(p) = std::env::var_os("STOKER_NVJPEG") {
            out.push(PathBuf::from(p));
        }
        const NAMES: [&str; 2] = ["libnvjpeg.so.13", "libnvjpeg.so.12"];
        out.extend(NAMES.iter().map(PathBuf::from));
        let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
            .iter()
            .filter_map(std::env::var_os)
            .map(PathBuf::from)
            .collect();
        roots.push(PathBuf::from("/usr/local/cuda"));
        for root in roots {
            for sub in std::iter::once("lib64").chain(TOOLKIT_TARGET_DIRS.iter().copied()) {
                for name in NAMES {
                    out.push(root.join(sub).join(name));
                }
            }
        }
        for site in site_packages() {
            out.push(site.join("nvidia/cu13/lib/libnvjpeg.so.13"));
            out.push(site.join("nvidia/nvjpeg/lib/libnvjpeg.so.12"));
        }
        out
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `(major, minor, patch)` from `nvjpegGetProperty` (-1 where it failed).
    pub fn version(&self) -> (i32, i32, i32) {
        self.version
    }

    /// Names of every nvJPEG function this crate resolves.
    pub fn symbols() -> &'static [&'static str] {
        sys::Table::SYMBOLS
    }

    /// Names of the nvJPEG functions this crate uses when the library has them.
    ///
    /// # Examples
    /// ```
    /// let names = stoker_decode::nvjpeg::NvJpeg::optional_symbols();
    /// assert!(names.contains(&"nvjpegDecodeBatchedPreAllocate"));
    /// ```
    pub fn optional_symbols() -> &'static [&'static str] {
        sys::OptionalTable::SYMBOLS
    }

    /// The optional functions this library has.
    ///
    /// # Examples
    /// ```
    /// if let Ok(lib) = stoker_decode::nvjpeg::NvJpeg::load() {
    ///     println!("optional nvJPEG functions present: {:?}", lib.optional_present());
    /// }
    /// ```
    pub fn optional_present(&self) -> Vec<&'static str> {
        self.optional.present()
    }

    pub(crate) fn table(&self) -> &sys::Table {
        &self.table
    }

    pub(crate) fn optional(&self) -> &sys::OptionalTable {
        &self.optional
    }
}

/// Existing `site-packages`/`dist-packages` directories from the usual Python prefixes.
fn site_packages() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(PathBuf::from(home).join(".local"));
    }
    prefixes.extend(
        ["/usr/local", "/usr", "/opt/conda"]
            .iter()
            .map(PathBuf::from),
    );
    let mut out: Vec<PathBuf> = std::env::var_os("PYTHONPATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for prefix in prefixes {
        let lib = prefix.join("lib");
        let Ok(entries) = std::fs::read_dir(&lib) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if !name.to_string_lossy().starts_with("python3") {
                continue;
            }
            for sub in ["site-packages", "dist-packages"] {
                let d = e.path().join(sub);
                if d.is_dir() {
                    out.push(d);
                }
            }
        }
    }
    out.retain(|d| d.is_dir());
    out.dedup();
    out
}
