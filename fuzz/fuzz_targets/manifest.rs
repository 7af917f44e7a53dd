//! A `manifest.json`'s bytes over a good three-shard dataset, through `verify_dir`,
//! `Dataset::open`, a read of every record it then declares, `verify` and `inspect`. No
//! byte may panic, hang or run away with memory, and `verify` counts every sample once.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stoker_formats::{inspect, verify, verify_dir, Dataset, MANIFEST_FILE};
use stoker_fuzz::{manifest_template, scratch};

fn dataset() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("manifest").join("ds");
        manifest_template(&dir);
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = dataset();
    std::fs::write(dir.join(MANIFEST_FILE), data).unwrap();
    if let Ok(r) = verify_dir(dir, false) {
        assert_eq!(
            r.ok_records + r.bad_records + r.lost_records,
            r.samples,
            "{r:?}"
        );
    }
    let Ok(ds) = Dataset::open(dir) else {
        return;
    };
    let reader = ds.reader().unwrap();
    for i in 0..ds.len().min(10_000) {
        let _ = reader.get(i).and_then(|r| r.check_crc());
    }
    let r = verify(&ds, false).unwrap();
    assert_eq!(
        r.ok_records + r.bad_records + r.lost_records,
        r.samples,
        "{r:?}"
    );
    let _ = inspect(&ds);
});
