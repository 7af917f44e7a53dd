//! One loader epoch read cold (the dataset's pages dropped from the page cache first), in
//! sequential or shuffled order: the figure behind docs/BENCHMARKS.md, "Cold reads with
//! read-ahead". Run it with and without `STOKER_READ_AHEAD=0`, alternating, to compare.
//!
//! ```text
//! cargo run --release -p stoker-loader --example cold_epoch -- \
//!     --dataset /tmp/cold-raw --order global --workers 2 --batch 64 --size 64
//! ```
//!
//! Flags: `--dataset DIR` (a converted dataset), `--order sequential|global`, `--batch N`,
//! `--size PX`, `--workers N`, `--prefetch N`, `--device cpu|cuda|cuda:N` (the loader's
//! backend; default cpu), `--warm` (keep the page cache: the cost of the hints when
//! nothing is read from storage). Prints one JSON line: images/s, and MB/s of shard bytes
//! (records × mean stored bytes per record).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Instant;

use stoker_formats::Dataset;
use stoker_loader::{Device, Loader, Output, Shuffle, Transform};

struct Args {
    dataset: String,
    order: String,
    batch: usize,
    size: u32,
    workers: usize,
    prefetch: Option<usize>,
    device: Device,
    warm: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        dataset: String::new(),
        order: "global".into(),
        batch: 64,
        size: 64,
        workers: 2,
        prefetch: None,
        device: Device::Cpu,
        warm: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--dataset" => args.dataset = value()?,
            "--order" => args.order = value()?,
            "--batch" => args.batch = num(value()?)?,
            "--size" => args.size = num(value()?)? as u32,
            "--workers" => args.workers = num(value()?)?,
            "--prefetch" => args.prefetch = Some(num(value()?)?),
            "--device" => args.device = device(&value()?)?,
            "--warm" => args.warm = true,
            "-h" | "--help" => {
                println!("usage: cold_epoch [--dataset DIR] [--order sequential|global] [--batch N] [--size N] [--workers N] [--prefetch N] [--device cpu|cuda|cuda:N] [--warm]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.dataset.is_empty() {
        return Err("--dataset DIR is needed".into());
    }
    Ok(args)
}

/// `cpu`, `cuda` (device 0) or `cuda:N`. Unlike `Device::Auto`, a missing GPU is an
/// error here: a CPU figure must not pass for a GPU one.
fn device(v: &str) -> Result<Device, String> {
    match v.parse::<Device>() {
        Ok(Device::Auto) | Err(_) => Err(format!("--device {v}: expected cpu, cuda or cuda:N")),
        Ok(d) => Ok(d),
    }
}

/// Drops the shard files' pages from the page cache, as `stoker bench`'s storage stage
/// does: `fdatasync`, then `posix_fadvise(DONTNEED)` (no root needed).
fn drop_pages(ds: &Dataset) -> std::io::Result<()> {
    for i in 0..ds.manifest().shards.len() {
        let f = File::open(ds.manifest().shard_path(ds.root(), i))?;
        // SAFETY: `f`'s descriptor is open for both calls, which only change the kernel's
        // cache of the file and touch no memory of ours.
        unsafe {
            libc::fdatasync(f.as_raw_fd());
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    let ds = Dataset::open(&args.dataset)?;
    let shuffle = match args.order.as_str() {
        "sequential" => Shuffle::Sequential,
        "global" => Shuffle::Global { seed: 0 },
        other => return Err(format!("--order {other}: expected sequential or global").into()),
    };
    let mut builder = Loader::builder(ds.clone())
        .batch_size(args.batch)
        .shuffle(shuffle)
        .transform(Transform::center_crop_default(args.size))
        .output(Output::U8Nhwc)
        .device(args.device)
        .workers(args.workers);
    if let Some(p) = args.prefetch {
        builder = builder.prefetch(p);
    }
    let loader = builder.build()?;
    if args.warm {
        for batch in loader.epoch(0) {
            batch?;
        }
    } else {
        drop_pages(&ds)?;
    }
    let t0 = Instant::now();
    let mut images = 0u64;
    for batch in loader.epoch(1) {
        images += batch?.len() as u64;
    }
    let secs = t0.elapsed().as_secs_f64();
    let shard_bytes = ds.manifest().shard_bytes();
    let mb = images as f64 * shard_bytes as f64 / ds.len().max(1) as f64 / 1e6;
    println!(
        "{{\"order\": \"{}\", \"device\": \"{}\", \"STOKER_READ_AHEAD\": {:?}, \"warm\": {}, \"images\": {images}, \"seconds\": {secs:.3}, \"img_per_s\": {:.1}, \"mb_per_s\": {:.1}}}",
        args.order,
        match args.device {
            Device::Cuda(n) => format!("cuda:{n}"),
            _ => "cpu".to_string(),
        },
        // As set (the loader reads 0, false, off and no as off).
        std::env::var("STOKER_READ_AHEAD").unwrap_or_default(),
        args.warm,
        images as f64 / secs,
        mb / secs
    );
    Ok(())
}
