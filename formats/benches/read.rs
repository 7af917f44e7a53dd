//! Read path: every record of a converted dataset through `DatasetReader::get` (zero-copy from
//! the memory map, header checked) with and without the payload CRC, beside reading the same
//! JPEG files with `std::fs::read` (the peer), all from the page cache, in the same run;
//! and the CRC read with the SIGBUS guard's per-record check in front of it.
//!
//! `cargo bench -p stoker-formats --bench read`

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use stoker_formats::{convert, ConvertOptions, Dataset, NoProgress, Source};

fn read(c: &mut Criterion) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(stoker_testdata::bench_dir())
        .expect("the bench set")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let bytes: u64 = files
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();

    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.csv");
    let lines: String = files
        .iter()
        .map(|p| format!("{},0\n", p.file_name().unwrap().to_string_lossy()))
        .collect();
    std::fs::write(&list, lines).unwrap();
    let mut opts = ConvertOptions::new(
        Source::List {
            root: stoker_testdata::bench_dir(),
            list,
        },
        dir.path().join("ds"),
    );
    opts.check_decode = false;
    convert(&opts, &NoProgress).unwrap();
    let ds = Dataset::open(dir.path().join("ds")).unwrap();
    let reader = ds.reader().unwrap();
    let n = ds.len();

    let mut g = c.benchmark_group("read_512_bench_jpegs");
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("fs_read_files (peer)", |b| {
        b.iter(|| {
            for p in &files {
                black_box(std::fs::read(p).unwrap());
            }
        })
    });
    g.bench_function("dataset_get", |b| {
        b.iter(|| {
            for i in 0..n {
                black_box(reader.get(i).unwrap().payload);
            }
        })
    });
    g.bench_function("dataset_get_check_crc", |b| {
        b.iter(|| {
            for i in 0..n {
                let r = reader.get(i).unwrap();
                r.check_crc().unwrap();
                black_box(r.payload);
            }
        })
    });
    // The SIGBUS guard put back in front before each record's read: a `sigaction` query
    // each time (`install`), or at most once a millisecond per thread (`refresh`, what
    // the loader does before each record).
    g.bench_function("dataset_get_check_crc_install_each", |b| {
        b.iter(|| {
            for i in 0..n {
                stoker_formats::install_read_fault_handler();
                let r = reader.get(i).unwrap();
                r.check_crc().unwrap();
                black_box(r.payload);
            }
        })
    });
    g.bench_function("dataset_get_check_crc_refresh", |b| {
        b.iter(|| {
            for i in 0..n {
                stoker_formats::refresh_read_fault_handler();
                let r = reader.get(i).unwrap();
                r.check_crc().unwrap();
                black_box(r.payload);
            }
        })
    });
    g.bench_function("dataset_get_copy", |b| {
        b.iter(|| {
            for i in 0..n {
                black_box(reader.get(i).unwrap().payload.to_vec());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, read);
criterion_main!(benches);
