//! Writes what `benches/peers/torch_loader.py --parity DIR` needs to check that the CPU
//! path's crops equal PIL's (torchvision's) `crop(box).resize((224, 224), BILINEAR)` + flip:
//! for the first 24 bench images, the decoded pixels (`DIR/i.rgb`), the drawn parameters
//! (`DIR/params.txt`: `i width height x y w h flip`) and the loader's U8 output (`DIR/i.out`).
//! PIL resizes the same decoded pixels, so only crop/resize/flip are compared, not decoders.
//!
//! ```text
//! cargo run --release -p stoker-loader --example crop_parity -- /tmp/parity
//! python3 benches/peers/torch_loader.py --parity /tmp/parity
//! ```

use std::fmt::Write as _;
use std::path::PathBuf;

use stoker_decode::{CpuDecoder, Limits};
use stoker_formats::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
use stoker_loader::{DrawKey, Loader, Output, Shuffle, Transform};

const IMAGES: usize = 24;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const USAGE: &str = "usage: crop_parity OUT_DIR";
    let out = std::env::args().nth(1).ok_or(USAGE)?;
    // `--help` made a directory of that name and wrote 24 images into it.
    if out == "-h" || out == "--help" {
        println!("{USAGE}");
        return Ok(());
    }
    if out.starts_with('-') {
        return Err(format!("unknown flag {out}; {USAGE}").into());
    }
    let out = PathBuf::from(out);
    std::fs::create_dir_all(&out)?;
    let bench = stoker_testdata::bench_dir();
    let tmp = tempfile::tempdir()?;
    let mut writer = DatasetWriter::create(tmp.path(), WriterOptions::default())?;
    let decoder = CpuDecoder::new(Limits::default());
    let transform = Transform::random_resized_crop(224).hflip(0.5);
    let (seed, epoch) = (0, 1);
    let mut params = String::new();
    for i in 0..IMAGES {
        let jpeg = std::fs::read(bench.join(format!("{i:05}.jpg")))?;
        let (info, rgb) = decoder.decode_to_vec(&jpeg)?;
        std::fs::write(out.join(format!("{i}.rgb")), &rgb)?;
        // Sequential shuffle on one rank: the loader's seed is 0, and record i is dataset
        // index i at position i of the epoch's order.
        let p = transform.params(seed, epoch, DrawKey::at(i as u64), info.width, info.height);
        let (x, y, w, h) = p.crop;
        writeln!(
            params,
            "{i} {} {} {x} {y} {w} {h} {}",
            info.width,
            info.height,
            u8::from(p.flip)
        )?;
        let meta = RecordMeta {
            encoding: Encoding::Jpeg,
            height: info.height,
            width: info.width,
            channels: 3,
            label: 0,
        };
        writer.push(meta, &jpeg)?;
    }
    std::fs::write(out.join("params.txt"), params)?;
    writer.finish(
        vec!["c".into()],
        Provenance::stoker("crop_parity: the bench set"),
    )?;
    let loader = Loader::builder(Dataset::open(tmp.path())?)
        .batch_size(1)
        .shuffle(Shuffle::Sequential)
        .transform(transform)
        .output(Output::U8Nhwc)
        .build()?;
    for batch in loader.epoch(epoch) {
        let batch = batch?;
        let pixels = batch.images.as_u8().ok_or("u8 output")?;
        std::fs::write(out.join(format!("{}.out", batch.indices[0])), pixels)?;
    }
    println!("wrote {IMAGES} images to {}", out.display());
    Ok(())
}
