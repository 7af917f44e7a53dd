//! Images that decode to more than `LARGE_IMAGE_BYTES` are loaded one at a time: every
//! worker used to decode one at once and keep its scratch, and with many workers and
//! large images the process ran out of memory (an abort where `ulimit -v` applies, the
//! OOM killer elsewhere). The image is a bench photo tiled to 6000×6000 (108 MB of RGB).
//!
//! Alone in its own test binary: it resets and reads this process's peak RSS.

mod common;

use stoker_formats::{Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions};
use stoker_loader::{Loader, Output, Shuffle, Transform};

const SIDE: usize = 6000;

/// The first bench photo tiled into a `SIDE`×`SIDE` JPEG.
fn large_jpeg() -> Vec<u8> {
    let (info, photo) = stoker_decode::CpuDecoder::new(stoker_decode::Limits::default())
        .decode_to_vec(&common::bench_jpeg(0))
        .unwrap();
    let (w, h) = (info.width as usize, info.height as usize);
    let mut rgb = vec![0u8; SIDE * SIDE * 3];
    for (y, row) in rgb.chunks_exact_mut(SIDE * 3).enumerate() {
        for (x, px) in row.chunks_exact_mut(3).enumerate() {
            let at = ((y % h) * w + x % w) * 3;
            px.copy_from_slice(&photo[at..at + 3]);
        }
    }
    let mut jpeg = Vec::new();
    jpeg_encoder::Encoder::new(&mut jpeg, 60)
        .encode(&rgb, SIDE as u16, SIDE as u16, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    jpeg
}

/// This process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

#[test]
fn large_images_are_decoded_one_at_a_time_and_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let jpeg = large_jpeg();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    let meta = RecordMeta {
        encoding: Encoding::Jpeg,
        height: SIDE as u32,
        width: SIDE as u32,
        channels: 3,
        label: 0,
    };
    for _ in 0..6 {
        w.push(meta, &jpeg).unwrap();
    }
    w.finish(vec!["c".into()], Provenance::stoker("large images"))
        .unwrap();
    drop(jpeg);
    let loader = Loader::builder(Dataset::open(dir.path()).unwrap())
        // A worker builds a whole batch: six batches of one keep six workers busy at once.
        .batch_size(1)
        .shuffle(Shuffle::Sequential)
        .transform(Transform::random_resized_crop(64))
        .output(Output::U8Nhwc)
        .workers(6)
        .prefetch(6)
        .prefetch_next_epoch(false)
        .build()
        .unwrap();
    // Peak RSS from here on (Linux: "5" resets VmHWM to the current RSS).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = peak_rss();
    let batches: Vec<_> = loader.epoch(0).map(|b| b.unwrap()).collect();
    assert_eq!(batches.len(), 6);
    assert_eq!(loader.stats().images, 6);
    let grown = peak_rss().saturating_sub(before);
    println!("peak RSS grew by {} MiB", grown >> 20);
    // One image's 108 MB of pixels and the decoder's own buffers at a time (357 MiB on
    // the 2-core machine), not six images at once (872 MiB there without the turn).
    assert!(grown < 550 << 20, "peak RSS grew by {} MiB", grown >> 20);
}
