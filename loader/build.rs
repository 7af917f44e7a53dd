//! Compiles the GPU path (`src/gpu/`) once it declares that it implements the loader's internal
//! contract (see the crate docs, "Contract with the GPU path"), so that the loader core and the
//! GPU path can be developed side by side without either breaking the other's build.

use std::path::Path;

/// The line `src/gpu/mod.rs` carries once `build`, `GpuPipeline` and `CudaImages` exist.
const MARKER: &str = "// stoker-loader: gpu contract v1";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(stoker_gpu)");
    println!("cargo::rerun-if-changed=src/gpu/mod.rs");
    let gpu = Path::new("src/gpu/mod.rs");
    if let Ok(text) = std::fs::read_to_string(gpu) {
        if text.lines().any(|l| l.trim() == MARKER) {
            println!("cargo::rustc-cfg=stoker_gpu");
        }
    }
}
