//! The Rust loader's batches of one epoch, for checking another front end (the Python
//! package) against it: one JSON line per batch (`epoch`, `index`, `indices`, `labels`,
//! `shape`), and with `--pixels DIR` each batch's pixel bytes in `DIR/batch-K.bin`. With
//! `--time N` it iterates N epochs instead, touching every batch, and prints one JSON
//! line of throughput (the peer measurement of `benches/python_iteration.py`).
//!
//! ```text
//! cargo run --release --example loader_dump -- DATASET [--batch-size 4] [--seed 0]
//!     [--epoch 0] [--size 32] [--crop random|center] [--hflip 0.5]
//!     [--dtype float32|float16|bfloat16|uint8] [--rank R --world-size W] [--drop-last]
//!     [--workers N] [--prefetch N] [--pixels DIR] [--time EPOCHS]
//! ```
//!
//! The settings mean what `stoker.Loader`'s arguments of the same names mean.
//!
//! A cross-check tool of this repository (the Python tests and `benches/python_iteration.py`
//! run it): beside `stoker` it uses anyhow and serde_json.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use stoker::exit;
use stoker::formats::Dataset;
use stoker::loader::{DType, Device, Images, Loader, Output, Shuffle, Transform};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stops early (`| head`) ends the dump quietly, not with a panic.
        Err(e) => exit::failure("loader_dump", e.as_ref(), 1),
    }
}

fn run() -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    const USAGE: &str = "usage: loader_dump DATASET [--batch-size N] [--seed N] [--epoch N] [--size N] [--crop random|center] [--hflip P] [--dtype float32|float16|bfloat16|uint8] [--rank R --world-size W] [--workers N] [--prefetch N] [--pixels DIR] [--time EPOCHS] [--drop-last]";
    let mut args = std::env::args().skip(1);
    let dataset = args.next().context(USAGE)?;
    if dataset == "-h" || dataset == "--help" {
        writeln!(out, "{USAGE}")?;
        return Ok(());
    }
    if dataset.starts_with('-') {
        bail!("unknown flag {dataset}; {USAGE}");
    }
    let mut opt = Options::default();
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--batch-size" => opt.batch_size = value()?.parse()?,
            "--seed" => opt.seed = value()?.parse()?,
            "--epoch" => opt.epoch = value()?.parse()?,
            "--size" => opt.size = value()?.parse()?,
            "--crop" => opt.crop = value()?,
            "--hflip" => opt.hflip = value()?.parse()?,
            "--dtype" => opt.dtype = value()?,
            "--rank" => opt.rank = value()?.parse()?,
            "--world-size" => opt.world = value()?.parse()?,
            "--workers" => opt.workers = Some(value()?.parse()?),
            "--prefetch" => opt.prefetch = Some(value()?.parse()?),
            "--pixels" => opt.pixels = Some(PathBuf::from(value()?)),
            "--time" => opt.time_epochs = Some(value()?.parse()?),
            "--drop-last" => opt.drop_last = true,
            other => bail!("unknown flag {other}"),
        }
    }
    let transform = match opt.crop.as_str() {
        "random" => Transform::random_resized_crop(opt.size),
        "center" => Transform::center_crop_default(opt.size),
        other => bail!("--crop {other}: want random or center"),
    }
    .hflip(opt.hflip);
    let output = match opt.dtype.as_str() {
        "float32" => Output::F32Nchw,
        "float16" => Output::F16Nchw,
        "bfloat16" => Output::Bf16Nchw,
        "uint8" => Output::U8Nhwc,
        other => bail!("--dtype {other}: want float32, float16, bfloat16 or uint8"),
    };
    let mut builder = Loader::builder(Dataset::open(&dataset)?)
        .batch_size(opt.batch_size)
        .shuffle(Shuffle::Global { seed: opt.seed })
        .drop_last(opt.drop_last)
        .transform(transform)
        .output(output)
        .device(Device::Cpu)
        .distributed(opt.rank, opt.world);
    if let Some(w) = opt.workers {
        builder = builder.workers(w);
    }
    if let Some(p) = opt.prefetch {
        builder = builder.prefetch(p);
    }
    let loader = builder.build()?;

    if let Some(epochs) = opt.time_epochs {
        return time_epochs(&loader, opt.epoch, epochs, &mut out);
    }

    if let Some(dir) = &opt.pixels {
        std::fs::create_dir_all(dir)?;
    }
    for batch in loader.epoch(opt.epoch) {
        let batch = batch?;
        let Images::Host(images) = &batch.images else {
            bail!("the CPU path gives host images");
        };
        if let Some(dir) = &opt.pixels {
            let bytes: Vec<u8> = match images.dtype() {
                DType::U8 => images.as_u8().unwrap_or_default().to_vec(),
                DType::F16 => images
                    .as_f16()
                    .unwrap_or_default()
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                DType::Bf16 => images
                    .as_bf16()
                    .unwrap_or_default()
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                _ => images
                    .as_f32()
                    .unwrap_or_default()
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            };
            std::fs::write(dir.join(format!("batch-{}.bin", batch.index)), bytes)?;
        }
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "epoch": batch.epoch,
                "index": batch.index,
                "indices": batch.indices,
                "labels": batch.labels,
                "shape": images.shape(),
            })
        )?;
    }
    Ok(())
}

/// `--time N`: runs epochs `first..first + N` and prints one JSON line of throughput.
fn time_epochs(
    loader: &Loader,
    first: u64,
    epochs: u64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let mut images = 0u64;
    let mut touched = 0f64;
    let end = first
        .checked_add(epochs)
        .context("--epoch + --time is past the last epoch number")?;
    for epoch in first..end {
        for batch in loader.epoch(epoch) {
            let batch = batch?;
            images += batch.len() as u64;
            touched += first_value(&batch.images);
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let stats = loader.stats();
    writeln!(
        out,
        "{}",
        serde_json::json!({
            "images": images,
            "seconds": secs,
            "images_per_s": images as f64 / secs,
            "loader_images_per_s": stats.images_per_s,
            "fed_ratio": stats.fed_ratio,
            "touched": touched,
        })
    )?;
    Ok(())
}

/// One value of the batch, so the timed loop reads what it got (as a training step would).
fn first_value(images: &Images) -> f64 {
    match images {
        Images::Host(h) => h
            .as_f32()
            .and_then(|v| v.first().map(|&x| f64::from(x)))
            .or_else(|| h.as_u8().and_then(|v| v.first().map(|&x| f64::from(x))))
            .or_else(|| h.as_f16().and_then(|v| v.first().map(|x| x.to_f64())))
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

/// The flags, with `stoker.Loader`'s defaults where it has them.
struct Options {
    batch_size: usize,
    seed: u64,
    epoch: u64,
    size: u32,
    crop: String,
    hflip: f64,
    dtype: String,
    rank: usize,
    world: usize,
    drop_last: bool,
    workers: Option<usize>,
    prefetch: Option<usize>,
    pixels: Option<PathBuf>,
    time_epochs: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            batch_size: 4,
            seed: 0,
            epoch: 0,
            size: 32,
            crop: "random".into(),
            hflip: 0.5,
            dtype: "float32".into(),
            rank: 0,
            world: 1,
            drop_last: false,
            workers: None,
            prefetch: None,
            pixels: None,
            time_epochs: None,
        }
    }
}
