//! The smallest drop-in training loop on the loader's CPU output: a linear (softmax)
//! classifier over 32×32 crops of an image folder (one sub-folder per class; here
//! `<repo>/testdata/imagefolder`, 164 photographs, one class per source package), trained
//! with plain SGD, printing the loss per epoch and the loader's stats (stage table, fed
//! ratio, verdict).
//!
//! ```text
//! cargo run --release --example train_linear            # or: -- IMAGEFOLDER_DIR EPOCHS
//! ```
//!
//! The loader part is the first half of `run`; everything after `for batch in
//! loader.epoch(epoch)` is what your training step replaces. Copied into a crate of your
//! own, it needs `stoker` (`default-features = false` is enough) and `tempfile`, and the
//! folder as its first argument: the default is a folder of this repository.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use stoker::exit;
use stoker::formats::{convert, ConvertOptions, Dataset, NoProgress, Source};
use stoker::loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
use stoker::loader::{Loader, Output, Shuffle, Transform};

const SIZE: u32 = 32;
const FEATURES: usize = 3 * (SIZE as usize) * (SIZE as usize);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit::failure("train_linear", e.as_ref(), 1),
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let mut stdout = std::io::stdout().lock();
    const USAGE: &str = "usage: train_linear [IMAGEFOLDER_DIR [EPOCHS]]  (default: this repository's testdata/imagefolder, 15 epochs)";
    // A flag was taken for an image folder.
    match std::env::args().nth(1).as_deref() {
        Some("-h" | "--help") => {
            writeln!(stdout, "{USAGE}")?;
            return Ok(());
        }
        Some(flag) if flag.starts_with('-') => {
            return Err(format!("unknown flag {flag}; {USAGE}").into())
        }
        _ => {}
    }
    let mut args = std::env::args().skip(1);
    let folder = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/imagefolder").into());
    let epochs: u64 = args.next().map(|e| e.parse()).transpose()?.unwrap_or(15);

    // 1. Convert the image folder once (here into a temp dir; normally `stoker convert`).
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("train");
    let report = convert(
        &ConvertOptions::new(Source::ImageFolder(folder.clone()), &out),
        &NoProgress,
    )?;
    let ds = Dataset::open(&out)?;
    let classes = ds.manifest().classes.len().max(1);
    writeln!(
        stdout,
        "dataset: {} images, {} classes from {} ({} skipped)",
        ds.len(),
        classes,
        folder.display(),
        report.skipped.len()
    )?;

    // 2. The loader: random resized crops with flips, normalized f32 NCHW, on the CPU.
    let loader = Loader::builder(ds.clone())
        .batch_size(32)
        .shuffle(Shuffle::Global { seed: 0 })
        .transform(
            Transform::random_resized_crop(SIZE)
                .scale(0.35, 1.0)
                .hflip(0.5)
                .normalize(IMAGENET_MEAN, IMAGENET_STD),
        )
        .output(Output::F32Nchw)
        .build()?;

    // 3. The model: logits = W·x + b, softmax cross-entropy, SGD.
    let mut w = vec![0f32; classes * FEATURES];
    let mut b = vec![0f32; classes];
    let lr = 0.01f32;
    for epoch in 0..epochs {
        let (mut loss_sum, mut correct, mut seen) = (0f64, 0usize, 0usize);
        for batch in loader.epoch(epoch) {
            let batch = batch?;
            let x = batch.images.as_f32().expect("F32Nchw output");
            let mut grad_w = vec![0f32; classes * FEATURES];
            let mut grad_b = vec![0f32; classes];
            for (n, &label) in batch.labels.iter().enumerate() {
                let xi = &x[n * FEATURES..(n + 1) * FEATURES];
                let logits: Vec<f32> = (0..classes)
                    .map(|c| {
                        b[c] + w[c * FEATURES..(c + 1) * FEATURES]
                            .iter()
                            .zip(xi)
                            .map(|(a, v)| a * v)
                            .sum::<f32>()
                    })
                    .collect();
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let exp: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
                let z: f32 = exp.iter().sum();
                let label = label as usize;
                loss_sum += f64::from(-(exp[label] / z).ln());
                let predicted = (0..classes)
                    .max_by(|&p, &q| logits[p].total_cmp(&logits[q]))
                    .unwrap_or(0);
                correct += usize::from(predicted == label);
                seen += 1;
                for c in 0..classes {
                    let g = exp[c] / z - if c == label { 1.0 } else { 0.0 };
                    grad_b[c] += g;
                    for (gw, v) in grad_w[c * FEATURES..(c + 1) * FEATURES].iter_mut().zip(xi) {
                        *gw += g * v;
                    }
                }
            }
            let scale = lr / batch.len() as f32;
            for (p, g) in w.iter_mut().zip(&grad_w) {
                *p -= scale * g;
            }
            for (p, g) in b.iter_mut().zip(&grad_b) {
                *p -= scale * g;
            }
        }
        writeln!(
            stdout,
            "epoch {epoch:>2}: loss {:.3}, train accuracy {:.1}% (chance {:.1}%)",
            loss_sum / seen.max(1) as f64,
            100.0 * correct as f64 / seen.max(1) as f64,
            100.0 / classes as f64
        )?;
    }
    writeln!(stdout, "{}", loader.stats())?;
    Ok(())
}
