//! A shard's bytes (after a two-byte record count, the one its manifest declares) through
//! every reader: `verify_dir`, `Dataset::open`, `DatasetReader::get` and the CRC check of
//! each record, `verify` and `inspect`. No byte may panic, hang or run away with memory;
//! `verify` counts every sample once; and a dataset `verify` passes reads whole.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stoker_formats::{inspect, shard_file_name, verify, verify_dir, Dataset, MANIFEST_FILE};
use stoker_fuzz::{manifest_for, scratch, write_dataset, COUNT_PREFIX};

struct Setup {
    dir: PathBuf,
    template: serde_json::Value,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let root = scratch("shard");
        let template = root.join("template");
        write_dataset(&template, &[10; 3], 1000);
        let text = std::fs::read_to_string(template.join(MANIFEST_FILE)).unwrap();
        let dir = root.join("ds");
        std::fs::create_dir_all(&dir).unwrap();
        Setup {
            dir,
            template: serde_json::from_str(&text).unwrap(),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((count, shard)) = data.split_at_checked(COUNT_PREFIX) else {
        return;
    };
    let s = setup();
    let count = u64::from(u16::from_le_bytes([count[0], count[1]]));
    std::fs::write(s.dir.join(shard_file_name(0)), shard).unwrap();
    let manifest = manifest_for(&s.template, count, shard);
    std::fs::write(s.dir.join(MANIFEST_FILE), manifest).unwrap();

    // The manifest itself can be refused: a count no file of this size can hold.
    let by_dir = match verify_dir(&s.dir, false) {
        Ok(r) => r,
        Err(e) => {
            assert!(
                Dataset::open(&s.dir).is_err(),
                "open took what verify_dir refuses: {e}"
            );
            return;
        }
    };
    assert_eq!(
        by_dir.ok_records + by_dir.bad_records + by_dir.lost_records,
        by_dir.samples,
        "verify_dir counts every sample once: {by_dir:?}"
    );
    let ds = match Dataset::open(&s.dir) {
        Ok(ds) => ds,
        Err(e) => {
            assert!(!by_dir.ok(), "verify_dir passed what open refuses: {e}");
            return;
        }
    };
    let reader = ds.reader().unwrap();
    let mut unread = Vec::new();
    for i in 0..ds.len() {
        if let Err(e) = reader.get(i).and_then(|r| r.check_crc()) {
            unread.push((i, e.to_string()));
        }
    }
    let report = verify(&ds, false).unwrap();
    assert_eq!(
        report.ok_records + report.bad_records + report.lost_records,
        report.samples,
        "verify counts every sample once: {report:?}"
    );
    if report.ok() {
        assert!(unread.is_empty(), "verify passed, yet {unread:?}");
    }
    assert_eq!(report.ok(), by_dir.ok(), "verify and verify_dir disagree");
    let _ = inspect(&ds);
});
