//! Writes the bench set (see `stoker_testdata::make_bench_set`) into a folder, for the
//! GPU machine's copy (`scripts/device-prepare.sh`) and for benchmarks run by hand.
//!
//! ```text
//! cargo run --release -p stoker-testdata --bin make-bench-set -- OUT_DIR
//! ```
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: make-bench-set OUT_DIR");
        return ExitCode::from(2);
    };
    let photos = stoker_testdata::dir().join("imagefolder");
    match stoker_testdata::make_bench_set(&photos, out.as_ref()) {
        Ok(n) => {
            println!(
                "{}: {n} files written ({} wanted; 0 = already complete)",
                out.to_string_lossy(),
                stoker_testdata::BENCH_FILES
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("make-bench-set: {e}");
            ExitCode::FAILURE
        }
    }
}
