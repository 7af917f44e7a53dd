//! What the reliability checks cost (issue 18), beside a peer measured in the same run:
//!
//! - `open_1024_shards`: `Dataset::open` of a 1,024-shard dataset (size, two meta-page reads,
//!   identity checks per shard) beside the LMDB opens alone (the peer: what `open` did before
//!   the checks: `stat`, `canonicalize`, `mdb_env_open`, a read transaction).
//! - `digest_256_mib`: the whole-file digest `verify` computes, XXH3-64 (format version 2)
//!   beside CRC32C (version 1, the peer), over the same bytes in memory.
//! - `batch_of_256_from_1024_shards`: a batch's records read by a rayon pool of 16 threads
//!   (the GPU loader's raw route), with a reader kept per pool thread (what the loader's
//!   `ThreadStates` does) beside a reader opened per rayon split (the peer: what it did
//!   before, one `stat` and read transaction per shard for each split of each batch).
//!
//! `cargo bench -p stoker-formats --bench open`

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Mutex;

use rayon::prelude::*;

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

    let ds = Dataset::open(dir.path()).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(16)
        .build()
        .unwrap();
    // A shuffled batch: 256 records spread over the shards.
    let batch: Vec<u64> = (0..256u64)
        .map(|i| (i * 2_654_435_761) % (SHARDS * 16))
        .collect();
    let mut g = c.benchmark_group("batch_of_256_from_1024_shards");
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.bench_function("reader_per_rayon_split (peer, before)", |b| {
        b.iter(|| {
            pool.install(|| {
                batch
                    .par_iter()
                    .map_init(
                        || ds.reader().unwrap(),
                        |r, &i| r.get(i).unwrap().payload.len(),
                    )
                    .sum::<usize>()
            })
        })
    });
    // Made once, as the loader makes them once per epoch.
    let kept: Vec<Mutex<_>> = (0..16).map(|_| Mutex::new(ds.reader().unwrap())).collect();
    g.bench_function("reader_kept_per_pool_thread", |b| {
        b.iter(|| {
            pool.install(|| {
                batch
                    .par_iter()
                    .map(|&i| {
                        let t = rayon::current_thread_index().unwrap();
                        let r = kept[t].lock().unwrap();
                        r.get(i).unwrap().payload.len()
                    })
                    .sum::<usize>()
            })
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
