//! The record → pixels step (`stoker_loader::pixels`) against the CPU loader: both must crop
//! the same rectangle of the same pixels for every sample.

mod common;

use common::{bench_dataset, bench_jpeg, bench_raw_dataset};
use stoker_formats::Dataset;
use stoker_loader::pixels::sample_pixels;
use stoker_loader::{DrawKey, Loader, Output, Shuffle, Transform};

const SEED: u64 = 7;
const EPOCH: u64 = 3;
const SIZE: u32 = 32;

fn identity_crop() -> Transform {
    common::identity_crop(SIZE)
}

fn flip_rows(rgb: &[u8], width: usize) -> Vec<u8> {
    rgb.chunks_exact(width * 3)
        .flat_map(|row| row.chunks_exact(3).rev().flatten().copied())
        .collect()
}

/// Every sample of an epoch of the CPU loader is `sample_pixels`' crop of that sample (drawn
/// at its position in the epoch), and that crop is `Transform::params` of the image's size
/// over the fully decoded image.
fn assert_loader_crops_like_sample_pixels(ds: &Dataset) {
    let transform = identity_crop();
    let loader = Loader::builder(ds.clone())
        .batch_size(8)
        .shuffle(Shuffle::Global { seed: SEED })
        .transform(transform)
        .output(Output::U8Nhwc)
        .workers(2)
        .build()
        .unwrap();
    let reader = ds.reader().unwrap();
    let decoder = stoker_decode::CpuDecoder::new(stoker_decode::Limits::default());
    let per_image = (SIZE * SIZE * 3) as usize;
    let (mut places, mut flips, mut samples) = (Vec::new(), 0, 0);
    for batch in loader.epoch(EPOCH) {
        let batch = batch.unwrap();
        let out = batch.images.as_u8().unwrap();
        for (slot, &index) in batch.indices.iter().enumerate() {
            let pos = batch.index * 8 + slot as u64;
            let key = DrawKey::at(loader.sampler().global_position(pos));
            let sample = sample_pixels(&reader, index, &transform, SEED, EPOCH, key).unwrap();
            assert_eq!((sample.width, sample.height), (500, 375), "record {index}");
            assert_eq!(
                sample.params,
                transform.params(SEED, EPOCH, key, 500, 375),
                "record {index}"
            );
            assert_eq!(sample.label, batch.labels[slot], "record {index}");
            let (x, y, w, h) = sample.params.crop;
            assert_eq!((w, h), (SIZE, SIZE), "record {index}: not an identity crop");
            // The crop's pixels are those of a full decode of the photo.
            let (_, full) = decoder.decode_to_vec(&bench_jpeg(index as usize)).unwrap();
            let crop = sample.crop_rgb();
            let row = 500 * 3;
            let full_crop: Vec<u8> = (y..y + h)
                .flat_map(|r| {
                    let start = r as usize * row + x as usize * 3;
                    full[start..start + w as usize * 3].iter().copied()
                })
                .collect();
            assert!(
                crop == full_crop,
                "record {index}: crop differs from a full decode"
            );
            let expected = if sample.params.flip {
                flips += 1;
                flip_rows(&crop, SIZE as usize)
            } else {
                crop
            };
            assert!(
                out[slot * per_image..(slot + 1) * per_image] == expected[..],
                "record {index}: the loader's image is not sample_pixels' crop {:?} (flip {})",
                sample.params.crop,
                sample.params.flip
            );
            places.push((x, y));
            samples += 1;
        }
    }
    assert_eq!(samples, ds.len());
    // The check means something only if crops move and flips happen.
    places.sort_unstable();
    places.dedup();
    assert!(
        places.len() > samples as usize / 2,
        "crops barely move: {places:?}"
    );
    assert!(flips > 0 && flips < samples, "{flips} flips of {samples}");
}

#[test]
fn cpu_loader_and_sample_pixels_crop_the_same_rectangle_of_jpeg_records() {
    let dir = tempfile::tempdir().unwrap();
    assert_loader_crops_like_sample_pixels(&bench_dataset(dir.path(), 24, 16, &[]));
}

#[test]
fn cpu_loader_and_sample_pixels_crop_the_same_rectangle_of_raw_records() {
    let dir = tempfile::tempdir().unwrap();
    assert_loader_crops_like_sample_pixels(&bench_raw_dataset(dir.path(), 24));
}
