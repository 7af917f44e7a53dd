//! A dataset converted with a pixel limit above the default (`convert --max-pixels`) holds
//! records larger than the decoder's default limit. `verify --decode` called each of them
//! bad, and the loader replaced each as undecodable, on a dataset the conversion had
//! accepted and test-decoded: readers now apply the limit the conversion recorded.

use std::path::Path;

use stoker_formats::{convert, verify, ConvertOptions, Dataset, NoProgress, Source};
use stoker_loader::pixels::sample_pixels;
use stoker_loader::{DrawKey, Loader, OnError, Output, Shuffle, Transform};

/// Just above the decoder's default limit of 100 Mpx: 100,007,550 pixels.
const SIZE: (u16, u16) = (10_050, 9_951);

/// A grey JPEG of `SIZE` in `dir/c/large.jpg` (flat, so small and quick to encode: what
/// is tested is the header's size against the limit, which no photograph here reaches).
fn large_image_folder(dir: &Path) {
    let (w, h) = SIZE;
    std::fs::create_dir_all(dir.join("c")).unwrap();
    let pixels = vec![128u8; w as usize * h as usize];
    let mut jpeg = Vec::new();
    jpeg_encoder::Encoder::new(&mut jpeg, 50)
        .encode(&pixels, w, h, jpeg_encoder::ColorType::Luma)
        .unwrap();
    std::fs::write(dir.join("c/large.jpg"), jpeg).unwrap();
}

#[test]
fn records_the_conversion_accepted_above_the_default_limit_verify_and_load() {
    let dir = tempfile::tempdir().unwrap();
    large_image_folder(&dir.path().join("src"));
    let out = dir.path().join("ds");
    let mut o = ConvertOptions::new(Source::ImageFolder(dir.path().join("src")), &out);
    o.max_pixels = 200_000_000;
    let report = convert(&o, &NoProgress).unwrap();
    assert_eq!(report.written, 1, "{:?}", report.skipped);
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.manifest().decode_limits().max_pixels, 200_000_000);

    let checked = verify(&ds, true).unwrap();
    assert_eq!(
        (checked.decoded, checked.bad_records),
        (1, 0),
        "{:?}",
        checked.bad
    );
    // One record's crop, as the CPU loader draws it, with the same limits.
    let crop = Transform::random_resized_crop(32);
    sample_pixels(&ds.reader().unwrap(), 0, &crop, 0, 0, DrawKey::at(0)).unwrap();

    let loader = Loader::builder(ds)
        .batch_size(1)
        .shuffle(Shuffle::Sequential)
        .transform(Transform::random_resized_crop(32))
        .output(Output::U8Nhwc)
        .workers(1)
        .on_error(OnError::Error)
        .build()
        .unwrap();
    let batches: Vec<_> = loader.epoch(0).collect();
    assert_eq!(batches.len(), 1);
    batches.into_iter().for_each(|b| {
        b.unwrap();
    });
    assert_eq!(loader.stats().bad_records, 0);
}
