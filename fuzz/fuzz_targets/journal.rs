//! A conversion journal's bytes under `convert --resume`, in the output directory of a
//! conversion killed after 5 of 8 records (its finished shards and lock file kept). No
//! byte may panic, hang or run away with memory; a resume that succeeds makes the dataset
//! an uninterrupted run makes, shard for shard; one that fails leaves no manifest.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stoker_formats::convert::JOURNAL_FILE;
use stoker_formats::{convert, NoProgress, MANIFEST_FILE};
use stoker_fuzz::{killed_conversion, scratch, Killed};

struct Setup {
    killed: Killed,
    out: PathBuf,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let work = scratch("journal");
        Setup {
            killed: killed_conversion(&work),
            out: work.join("out"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let s = setup();
    let _ = std::fs::remove_dir_all(&s.out);
    std::fs::create_dir_all(&s.out).unwrap();
    for (name, bytes) in &s.killed.files {
        std::fs::write(s.out.join(name), bytes).unwrap();
    }
    std::fs::write(s.out.join(JOURNAL_FILE), data).unwrap();
    let mut o = s.killed.options.clone();
    o.out = s.out.clone();
    match convert(&o, &NoProgress) {
        Ok(_) => {
            let text = std::fs::read_to_string(s.out.join(MANIFEST_FILE)).unwrap();
            let m: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                m["shards"], s.killed.clean_shards,
                "a resume made another dataset than an uninterrupted run"
            );
        }
        Err(e) => assert!(
            !s.out.join(MANIFEST_FILE).exists(),
            "failed ({e}) but left a manifest"
        ),
    }
});
