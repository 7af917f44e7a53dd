//! What the reliability checks cost (issue 18), beside a peer measured in the same run:
//!
//! - `open_1024_shards`: `Dataset::open` of a 1,024-shard dataset (size, two meta-page reads,
//!   identity checks per shard) beside the LMDB opens alone (the peer: what `open` did before
//!   the checks: `stat`, `canonicalize`, `mdb_env_open`, a read transaction).
//! - `digest_256_mib`: the whole-file digest `verify` computes, XXH3-64 (format version 2)
//!   beside CRC32C (version 1, the peer), over the same bytes in memory.
//!
//! `cargo bench -p stoker-formats --bench open`

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use heed::types::Bytes;
use heed::{EnvFlags, EnvOpenOptions};
use stoker_formats::{
    Dataset, DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions, MANIFEST_FILE,
};

const SHARDS: u64 = 1024;

fn open(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(
        dir.path(),
        WriterOptions {
            records_per_shard: Some(16),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let meta = RecordMeta {
        encoding: Encoding::Raw,
        height: 32,
        width: 32,
        channels: 3,
        label: 0,
    };
    for i in 0..SHARDS * 16 {
        w.push(meta, &[(i % 251) as u8; 32 * 32 * 3]).unwrap();
    }
    let m = w
        .finish(vec!["c".into()], Provenance::stoker("open bench"))
        .unwrap();
    assert!(dir.path().join(MANIFEST_FILE).exists());
    let paths: Vec<PathBuf> = (0..m.shards.len())
        .map(|i| m.shard_path(dir.path(), i))
        .collect();

    let mut g = c.benchmark_group("open_1024_shards");
    g.throughput(Throughput::Elements(SHARDS));
    g.bench_function("lmdb_open_only (peer)", |b| {
        b.iter(|| {
            for p in &paths {
                let canonical = std::fs::canonicalize(p).unwrap();
                black_box(std::fs::metadata(&canonical).unwrap().len());
                let mut opts = EnvOpenOptions::new().read_txn_without_tls();
                opts.map_size(1 << 20).max_dbs(0);
                // SAFETY: the shard is finished and nothing writes it during the bench.
                unsafe {
                    opts.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY | EnvFlags::NO_LOCK);
                }
                // SAFETY: as above; each environment is closed before the next iteration.
                let env = unsafe { opts.open(&canonical) }.unwrap();
                let rtxn = env.read_txn().unwrap();
                black_box(env.open_database::<Bytes, Bytes>(&rtxn, None).unwrap());
                drop(rtxn);
                env.prepare_for_closing().wait();
            }
        })
    });
    g.bench_function("dataset_open", |b| {
        b.iter(|| black_box(Dataset::open(dir.path()).unwrap()))
    });
    g.bench_function("dataset_open_and_reader", |b| {
        b.iter(|| {
            let ds = Dataset::open(dir.path()).unwrap();
            black_box(ds.reader().unwrap());
        })
    });
    g.finish();

    let data: Vec<u8> = (0..256u64 << 20)
        .map(|i| (i.wrapping_mul(0x9E37_79B9) >> 13) as u8)
        .collect();
    let mut g = c.benchmark_group("digest_256_mib");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("crc32c (peer, format version 1)", |b| {
        b.iter(|| black_box(crc32c::crc32c(&data)))
    });
    g.bench_function("xxh3_64 (format version 2)", |b| {
        b.iter(|| black_box(xxhash_rust::xxh3::xxh3_64(&data)))
    });
    g.finish();
}

criterion_group!(benches, open);
criterion_main!(benches);
