//! The smallest end-to-end run: convert the bundled sample (15 photos, 3 classes) into LMDB
//! shards, iterate it for a few epochs with training transforms, and print throughput and the
//! loader's counters. Uses the GPU when one is present (`Device::Auto`), the CPU otherwise.
//!
//! ```sh
//! cargo run --release --example quickstart [-- IMAGE_FOLDER]
//! ```
//!
//! Copied into a crate of your own, it needs `stoker` (`default-features = false` is
//! enough) and `tempfile`, and an image folder as its argument: the default is the sample
//! folder of this repository.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use stoker::formats::{convert, ConvertOptions, Dataset, NoProgress, Source};
use stoker::loader::{Device, Loader, Output, Shuffle, Transform};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        // Quiet with status 141 when whoever read our stdout stopped (`| head`), else the
        // error and its causes on stderr.
        Err(e) => stoker::exit::failure("quickstart", e.as_ref(), 1),
    }
}

/// The run; every line goes to a locked stdout whose write errors are returned.
fn run() -> Result<(), Box<dyn Error>> {
    let mut stdout = std::io::stdout().lock();
    let arg = std::env::args_os().nth(1);
    // `--help` was taken for an image folder ("--help: No such file or directory").
    match arg.as_ref().and_then(|a| a.to_str()) {
        Some("-h" | "--help") => {
            writeln!(stdout, "usage: quickstart [IMAGE_FOLDER]  (default: this repository's examples/data/sample)")?;
            return Ok(());
        }
        Some(flag) if flag.starts_with('-') => {
            return Err(format!("unknown flag {flag}; usage: quickstart [IMAGE_FOLDER]").into())
        }
        _ => {}
    }
    let src = arg
        .map(PathBuf::from)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/sample").into());
    let work = tempfile::tempdir()?;
    let out = work.path().join("sample-ds");

    // 1. Convert once: original JPEG bytes into one shard, bad files skipped and reported.
    let t = Instant::now();
    let report = convert(
        &ConvertOptions::new(Source::ImageFolder(src.clone()), &out),
        &NoProgress,
    )?;
    writeln!(
        stdout,
        "converted {}: {} written, {} skipped, {} shard(s), {:.1} MB in {:.2} s",
        src.display(),
        report.written,
        report.skipped.len(),
        report.shards,
        report.bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    )?;
    for s in &report.skipped {
        writeln!(stdout, "  skipped {}: {}", s.path.display(), s.reason)?;
    }

    // 2. Iterate: the same builder a training loop uses.
    let dataset = Dataset::open(&out)?;
    let classes = dataset.manifest().classes.clone();
    let loader = Loader::builder(dataset)
        .batch_size(4)
        .shuffle(Shuffle::Global { seed: 0 })
        .drop_last(false)
        .transform(
            Transform::random_resized_crop(224)
                .hflip(0.5)
                .normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        )
        .output(Output::F32Nchw)
        .device(Device::Auto)
        .prefetch(2)
        .build()?;
    writeln!(stdout, "classes: {}", classes.join(", "))?;
    for epoch in 0..3 {
        let t = Instant::now();
        let mut images = 0usize;
        for batch in loader.epoch(epoch) {
            let batch = batch?;
            if epoch == 0 && batch.index == 0 {
                let place = match batch.images.host() {
                    Some(h) => format!("host memory, shape {:?} {:?}", h.shape(), h.dtype()),
                    None => "CUDA device memory".to_string(),
                };
                writeln!(
                    stdout,
                    "first batch: {place}, labels {:?}, indices {:?}",
                    batch.labels, batch.indices
                )?;
            }
            images += batch.len();
        }
        writeln!(
            stdout,
            "epoch {epoch}: {images} images in {:.3} s ({:.0} img/s)",
            t.elapsed().as_secs_f64(),
            images as f64 / t.elapsed().as_secs_f64()
        )?;
    }
    writeln!(stdout, "{}", loader.stats())?;
    Ok(())
}
