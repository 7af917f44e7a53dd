//! A user's program: converts an ImageFolder tree (default: stoker's bundled sample) and
//! iterates a training-style loader over it, checking what it is given.
//!
//! ```text
//! cargo run --manifest-path tests/downstream/Cargo.toml -- [IMAGE_FOLDER]
//! ```

use std::error::Error;
use std::path::PathBuf;

use stoker::formats::{convert, ConvertOptions, Dataset, NoProgress, Source};
use stoker::loader::{Device, Loader, Output, Shuffle, Transform};

const SIZE: usize = 64;
const BATCH: usize = 4;

fn main() -> Result<(), Box<dyn Error>> {
    let src = std::env::args_os().nth(1).map(PathBuf::from).unwrap_or_else(|| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/data/sample").into()
    });
    let work = std::env::temp_dir().join(format!("stoker-downstream-{}", std::process::id()));
    let out = work.join("ds");

    let report = convert(&ConvertOptions::new(Source::ImageFolder(src.clone()), &out), &NoProgress)?;
    let dataset = Dataset::open(&out)?;
    let classes = dataset.manifest().classes.clone();
    let samples = dataset.len();
    if report.written != samples || samples == 0 {
        return Err(format!("{} written, {samples} in the dataset", report.written).into());
    }

    let loader = Loader::builder(dataset)
        .batch_size(BATCH)
        .shuffle(Shuffle::Global { seed: 7 })
        .transform(
            Transform::random_resized_crop(SIZE as u32)
                .hflip(0.5)
                .normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        )
        .output(Output::F32Nchw)
        .device(Device::Auto)
        .build()?;
    for epoch in 0..2 {
        let mut seen = vec![false; usize::try_from(samples)?];
        for batch in loader.epoch(epoch) {
            let batch = batch?;
            let n = batch.len();
            if n == 0 || n > BATCH || batch.labels.len() != n || batch.indices.len() != n {
                return Err(format!("batch {}: {n} images, {} labels", batch.index, batch.labels.len()).into());
            }
            if let Some(host) = batch.images.host() {
                if host.shape() != [n, 3, SIZE, SIZE] {
                    return Err(format!("batch {}: shape {:?}", batch.index, host.shape()).into());
                }
            }
            for (&i, &label) in batch.indices.iter().zip(&batch.labels) {
                let i = usize::try_from(i)?;
                if i >= seen.len() || seen[i] {
                    return Err(format!("epoch {epoch}: index {i} out of range or repeated").into());
                }
                seen[i] = true;
                if label as usize >= classes.len() {
                    return Err(format!("label {label} of {} classes", classes.len()).into());
                }
            }
        }
        if seen.iter().any(|s| !s) {
            return Err(format!("epoch {epoch} missed samples").into());
        }
    }
    println!(
        "downstream: {samples} samples of {} classes from {}, 2 epochs of batches [{BATCH}, 3, {SIZE}, {SIZE}]; backend {}",
        classes.len(),
        src.display(),
        loader.stats().backend
    );
    std::fs::remove_dir_all(&work)?;
    Ok(())
}
