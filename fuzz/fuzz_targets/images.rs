//! An image of any format besides JPEG (PNG, GIF, BMP, TIFF, WebP, PPM/PGM/PAM: what the
//! `image` crate decodes for the converter) through a `SampleWriter`, one sample a dataset.
//! No byte may panic (the converter catches a decoder's panic and skips the file: reported
//! here as a finding), hang or run away with memory (`-timeout`, `-rss_limit_mb`); a sample
//! is either written or skipped with a reason, and a record written decodes.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stoker_formats::{verify, Dataset, SampleOptions, SampleWriter};
use stoker_fuzz::scratch;

/// A damaged header may claim any size up to this: what one decode takes stays bounded
/// (about 19 bytes a pixel), so `-rss_limit_mb` tells a runaway allocation from a large
/// image.
const MAX_PIXELS: u64 = 4 << 20;

fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| scratch("images"))
}

fuzz_target!(|data: &[u8]| {
    // JPEG has its own target (`decode`), with its own decoder.
    if data.starts_with(&[0xFF, 0xD8]) {
        return;
    }
    let out = root().join("out");
    let _ = std::fs::remove_dir_all(&out);
    let mut options = SampleOptions::new("fuzz");
    options.max_pixels = MAX_PIXELS;
    options.jobs = Some(1);
    let mut w = SampleWriter::create(&out, options, Some(vec!["image".into()])).unwrap();
    w.write(data, 0, "input").unwrap();
    match w.finish() {
        Ok(report) => {
            assert_eq!(report.written + report.skipped.len() as u64, 1);
            if let Some(s) = report.skipped.first() {
                assert!(
                    !s.reason.contains("panic"),
                    "a decoder panicked: {}",
                    s.reason
                );
                return;
            }
            let ds = Dataset::open(&out).expect("a finished writer's dataset opens");
            let v = verify(&ds, true).unwrap();
            assert!(
                v.ok(),
                "a record written fails verify --decode: {:?}",
                v.bad
            );
        }
        // A writer whose one sample was skipped wrote no record: an error that names the
        // reason, and no dataset.
        Err(e) => {
            assert!(!e.to_string().contains("panic"), "a decoder panicked: {e}");
            assert!(
                Dataset::open(&out).is_err(),
                "finish failed ({e}) but left a dataset"
            );
        }
    }
});
