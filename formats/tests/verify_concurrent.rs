//! `verify` called in parallel on one dataset, from inside a rayon pool (as a caller that
//! checks several datasets, or the same one twice, would): every call finishes.
//!
//! Each verify decodes a shard's records on the pool while it holds what it read of that
//! shard; when verify walked shards through LMDB, whose environments heed opens once per
//! file, a second call waited for the first to close, blocking pool threads the first one
//! needed.

use std::sync::mpsc;
use std::time::Duration;

use rayon::prelude::*;
use stoker_formats::{convert, verify, ConvertOptions, Dataset, NoProgress, Source};

#[test]
fn parallel_verifies_of_one_dataset_inside_a_pool_all_finish() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let mut o = ConvertOptions::new(
        Source::ImageFolder(stoker_testdata::dir().join("imagefolder")),
        &out,
    );
    o.check_decode = false;
    o.shard_bytes = 4 << 20;
    o.jobs = Some(2);
    convert(&o, &NoProgress).unwrap();
    let ds = Dataset::open(&out).unwrap();
    assert!(ds.manifest().shards.len() > 1);

    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(8)
            .build()
            .unwrap();
        // Three rounds: the old deadlock needed an unlucky interleaving (3 runs in 8).
        let oks: Vec<bool> = pool.install(|| {
            (0..24)
                .into_par_iter()
                .map(|_| verify(&ds, true).unwrap().ok())
                .collect()
        });
        let _ = tx.send(oks);
    });
    let oks = rx
        .recv_timeout(Duration::from_secs(300))
        .expect("parallel verifies did not finish in 300 s (deadlock)");
    assert_eq!(oks, vec![true; 24]);
}
