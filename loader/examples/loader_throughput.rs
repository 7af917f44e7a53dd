//! Loader throughput on the CPU path: converts a directory of JPEGs (default
//! the bench set, `stoker_testdata::bench_dir()`) into a temporary dataset with `stoker_formats::convert`,
//! then iterates epochs with a training-style configuration and prints images per second,
//! the loader's stats table and one JSON line for docs/BENCHMARKS.md.
//!
//! Same configuration as `benches/peers/torch_loader.py` (the PyTorch-style peer):
//!
//! ```text
//! cargo run --release -p stoker-loader --example loader_throughput -- \
//!     --images target/stoker-testdata/bench-v1 --batch 64 --size 224 --workers 2 --epochs 3
//! ```
//!
//! Flags: `--images DIR`, `--batch N`, `--size PX`, `--workers N`, `--prefetch N`,
//! `--epochs N` (timed, after one warm-up epoch), `--output f32|f16|bf16|u8`, `--eval` (center
//! crop instead of random resized crop + flip), `--raw WxH` (store decoded pixels at that size
//! instead of the JPEG bytes, as `stoker convert --encoding raw --raw-size WxH` does).

use std::path::PathBuf;
use std::time::Instant;

use stoker_formats::{convert, ConvertOptions, Dataset, Encoding, NoProgress, Source};
use stoker_loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
use stoker_loader::{Loader, Output, Shuffle, Transform};

struct Args {
    images: PathBuf,
    batch: usize,
    size: u32,
    workers: usize,
    prefetch: Option<usize>,
    epochs: u64,
    output: Output,
    eval: bool,
    raw: Option<(u32, u32)>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        images: stoker_testdata::bench_dir(),
        batch: 64,
        size: 224,
        workers: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        prefetch: None,
        epochs: 3,
        output: Output::F32Nchw,
        eval: false,
        raw: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--images" => args.images = PathBuf::from(value()?),
            "--batch" => args.batch = num(value()?)? as usize,
            "--size" => args.size = num(value()?)? as u32,
            "--workers" => args.workers = num(value()?)? as usize,
            "--prefetch" => args.prefetch = Some(num(value()?)? as usize),
            "--epochs" => args.epochs = num(value()?)?,
            "--output" => {
                args.output = match value()?.as_str() {
                    "f32" => Output::F32Nchw,
                    "f16" => Output::F16Nchw,
                    "bf16" => Output::Bf16Nchw,
                    "u8" => Output::U8Nhwc,
                    other => {
                        return Err(format!("--output {other}: expected f32, f16, bf16 or u8"))
                    }
                }
            }
            "--eval" => args.eval = true,
            "--raw" => {
                let v = value()?;
                let size = v
                    .split_once('x')
                    .and_then(|(w, h)| Some((w.parse::<u32>().ok()?, h.parse::<u32>().ok()?)));
                args.raw = Some(size.ok_or_else(|| format!("--raw {v}: expected WxH"))?);
            }
            "-h" | "--help" => {
                println!("usage: loader_throughput [--images DIR] [--batch N] [--size N] [--workers N] [--prefetch N] [--epochs N] [--output f32|f16|bf16|u8] [--eval] [--raw WxH]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

/// The JPEG files under `dir`, as paths relative to the folder `--images` names (`rel` is
/// `dir`'s), in any order.
fn jpegs_under(dir: &std::path::Path, rel: &str, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = format!("{rel}{}", entry.file_name().to_string_lossy());
        if entry.file_type()?.is_dir() {
            jpegs_under(&entry.path(), &format!("{name}/"), out)?;
        } else if [".jpg", ".jpeg"]
            .iter()
            .any(|e| name.to_ascii_lowercase().ends_with(e))
        {
            out.push(name);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    // The JPEG files under the folder as a list (all label 0): the bench set is a flat
    // folder, not an ImageFolder, and the peers' scripts take every JPEG under theirs.
    let tmp = tempfile::tempdir()?;
    let mut names = Vec::new();
    jpegs_under(&args.images, "", &mut names)?;
    names.sort();
    let list = tmp.path().join("list.csv");
    std::fs::write(
        &list,
        names.iter().map(|n| format!("{n},0\n")).collect::<String>(),
    )?;
    let out = tmp.path().join("dataset");
    let source = Source::List {
        root: args.images.clone(),
        list,
    };
    let mut options = ConvertOptions::new(source, &out);
    if let Some(size) = args.raw {
        options.encoding = Encoding::Raw;
        options.raw_size = Some(size);
    }
    let report = convert(&options, &NoProgress)?;
    let ds = Dataset::open(&out)?;
    eprintln!(
        "dataset: {} records ({} stored unchanged) from {}",
        ds.len(),
        report.stored,
        args.images.display()
    );

    let transform = if args.eval {
        Transform::center_crop_default(args.size)
    } else {
        Transform::random_resized_crop(args.size).hflip(0.5)
    }
    .normalize(IMAGENET_MEAN, IMAGENET_STD);
    let mut builder = Loader::builder(ds.clone())
        .batch_size(args.batch)
        .shuffle(Shuffle::Global { seed: 0 })
        .transform(transform)
        .output(args.output)
        .workers(args.workers);
    if let Some(p) = args.prefetch {
        builder = builder.prefetch(p);
    }
    let loader = builder.build()?;

    // Warm-up epoch: page cache, allocator, first-touch of the ring.
    for batch in loader.epoch(0) {
        batch?;
    }
    loader.reset_stats();
    let t0 = Instant::now();
    let mut images = 0u64;
    for epoch in 1..=args.epochs {
        for batch in loader.epoch(epoch) {
            images += batch?.len() as u64;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let stats = loader.stats();
    println!("{stats}");
    println!(
        "stoker-loader: {images} images in {secs:.2} s = {:.1} img/s (batch {}, {}px, {} workers, {:?})",
        images as f64 / secs,
        args.batch,
        args.size,
        args.workers,
        args.output
    );
    println!(
        "{{\"peer\": \"stoker-loader\", \"images\": {images}, \"seconds\": {secs:.3}, \"img_per_s\": {:.1}, \"fed_ratio\": {:.3}}}",
        images as f64 / secs,
        stats.fed_ratio
    );
    Ok(())
}
