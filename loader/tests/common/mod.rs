//! Test datasets made from the repository's real images (`stoker_testdata`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use stoker_formats::{
    convert, ConvertOptions, Dataset, DatasetWriter, Encoding, NoProgress, Provenance,
    RecordHeader, RecordMeta, Source, WriterOptions,
};

/// The repository's 15 sample photos (`examples/data/sample`, 3 classes) converted into
/// `dir/ds` (stored as they are, not test-decoded).
pub fn sample_dataset(dir: &Path) -> Dataset {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/sample");
    let mut o = ConvertOptions::new(Source::ImageFolder(src), dir.join("ds"));
    o.check_decode = false;
    let report = convert(&o, &NoProgress).expect("convert the sample photos");
    assert_eq!(report.written, 15, "{:?}", report.skipped);
    Dataset::open(dir.join("ds")).unwrap()
}

/// The test corpus (`<repo>/testdata`, or `$STOKER_DATA`).
pub fn data_dir() -> PathBuf {
    stoker_testdata::dir()
}

/// The `i`-th file of the bench set (512 ImageNet-like 500×375 JPEGs).
pub fn bench_jpeg(i: usize) -> Vec<u8> {
    let path = stoker_testdata::bench_dir().join(format!("{:05}.jpg", i % 512));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `n` bench photos (label `i % 5`) decoded once on the CPU (a full decode) and stored as
/// raw RGB records: the same pixels a JPEG dataset of them decodes to.
pub fn bench_raw_dataset(dir: &Path, n: usize) -> Dataset {
    bench_raw_dataset_in_shards(dir, n, stoker_formats::DEFAULT_SHARD_BYTES)
}

/// [`bench_raw_dataset`] in shards of about `shard_bytes` each.
pub fn bench_raw_dataset_in_shards(dir: &Path, n: usize, shard_bytes: u64) -> Dataset {
    let decoder = stoker_decode::CpuDecoder::new(stoker_decode::Limits::default());
    let mut w = DatasetWriter::create(
        dir,
        WriterOptions {
            encoding: Some(Encoding::Raw),
            shard_bytes,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for i in 0..n {
        let (info, rgb) = decoder.decode_to_vec(&bench_jpeg(i)).unwrap();
        let meta = RecordMeta {
            encoding: Encoding::Raw,
            height: info.height,
            width: info.width,
            channels: 3,
            label: (i % 5) as u32,
        };
        w.push(meta, &rgb).unwrap();
    }
    let classes = (0..5).map(|c| format!("class{c}")).collect();
    w.finish(classes, Provenance::stoker("loader tests: raw bench"))
        .unwrap();
    Dataset::open(dir).unwrap()
}

/// How a test record is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// Bytes that are not a JPEG (valid CRC): a decode error.
    Garbage,
    /// A real JPEG whose stored CRC is wrong: a read error.
    BadCrc,
}

/// Writes `n` records of bench JPEGs (label `i % 5`) into `dir`, `per_shard` records per
/// shard, with the records listed in `broken` corrupted.
pub fn bench_dataset(dir: &Path, n: usize, per_shard: u64, broken: &[(usize, Broken)]) -> Dataset {
    let mut w = DatasetWriter::create(
        dir,
        WriterOptions {
            records_per_shard: Some(per_shard),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for i in 0..n {
        let jpeg = bench_jpeg(i);
        let label = (i % 5) as u32;
        let meta = RecordMeta {
            encoding: Encoding::Jpeg,
            height: 375,
            width: 500,
            channels: 3,
            label,
        };
        match broken.iter().find(|(b, _)| *b == i).map(|(_, k)| *k) {
            None => {
                w.push(meta, &jpeg).unwrap();
            }
            Some(Broken::Garbage) => {
                let mut junk = vec![0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x43];
                junk.extend((0..4000u32).map(|k| (k.wrapping_mul(2654435761) >> 13) as u8));
                w.push(meta, &junk).unwrap();
            }
            Some(Broken::BadCrc) => {
                let header = RecordHeader {
                    encoding: Encoding::Jpeg,
                    height: 375,
                    width: 500,
                    channels: 3,
                    label,
                    payload_len: jpeg.len() as u32,
                    crc32c: crc32c::crc32c(&jpeg) ^ 1,
                };
                w.push_header_unchecked(header, &jpeg).unwrap();
            }
        }
    }
    let classes = (0..5).map(|c| format!("class{c}")).collect();
    w.finish(classes, Provenance::stoker("loader tests: the bench set"))
        .unwrap();
    Dataset::open(dir).unwrap()
}

/// FNV-1a over bytes: a cheap fingerprint to compare batches.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Resident set size of this process in bytes (Linux `/proc/self/statm`).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // 4 KiB pages (Linux x86-64 / aarch64 defaults); only ratios of this value are compared.
    pages * 4096
}

/// Random `size × size` crops of exactly `size × size` source pixels of the 500×375 bench
/// photos, flipped half the time: the loader's resize is the identity, so its output is the
/// crop itself (flipped or not).
pub fn identity_crop(size: u32) -> stoker_loader::Transform {
    let area = f64::from(size * size) / (500.0 * 375.0);
    stoker_loader::Transform::random_resized_crop(size)
        .scale(area, area)
        .ratio(1.0, 1.0)
        .hflip(0.5)
}
