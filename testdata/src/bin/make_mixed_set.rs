//! Writes a mixed set (see `stoker_testdata::make_mixed_set`) into a folder: what real
//! training data looks like to a decoder, for the GPU machine's mixed-data rows
//! (`scripts/device-check.d/50-mixed.sh`) and for benchmarks run by hand.
//!
//! ```text
//! cargo run --release -p stoker-testdata --bin make-mixed-set -- OUT_DIR [--count N] [--baseline]
//! ```
//! `--baseline` writes the twin: the same files at the same sizes, all baseline RGB.
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut out = None;
    let mut count = stoker_testdata::MIXED_FILES;
    let mut mix = stoker_testdata::Mix::REALISTIC;
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--baseline") => mix = stoker_testdata::Mix::BASELINE,
            Some("--count") => match args.next().and_then(|v| v.to_str()?.parse().ok()) {
                Some(n) if n > 0 && n <= 1 << 20 => count = n,
                _ => return usage("--count takes a number of files from 1 to 1048576"),
            },
            Some(s) if s.starts_with('-') => return usage(&format!("unknown option {s}")),
            _ if out.is_none() => out = Some(arg),
            _ => return usage("one output folder only"),
        }
    }
    let Some(out) = out else {
        return usage("no output folder");
    };
    let photos = stoker_testdata::dir().join("imagefolder");
    match stoker_testdata::make_mixed_set(&photos, out.as_ref(), count, mix) {
        Ok(n) => {
            println!(
                "{}: {n} files written ({count} wanted; 0 = already complete)",
                out.to_string_lossy()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("make-mixed-set: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("make-mixed-set: {why}\nusage: make-mixed-set OUT_DIR [--count N] [--baseline]");
    ExitCode::from(2)
}
